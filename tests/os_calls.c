/* The C side of os_calls.h: brisk's internal counters and its fault
 * injection, for the C++ tests. */
#include "os_calls.h"

#include "os/os.h"
#include "regions/registry.h"

uint64_t brisk_test_os_calls(void) {
  brisk_os_counts_t counts;
  _brisk_os_counts(&counts);
  uint64_t calls = counts.failed_calls;
  for (int kind = 0; kind < BRISK_OS_CALL_KINDS; kind++) calls += counts.calls[kind];
  return calls;
}

void brisk_test_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]) {
  _brisk_regions_stats(out);
}

size_t brisk_test_os_bytes_mapped(void) {
  brisk_os_counts_t counts;
  _brisk_os_counts(&counts);
  return counts.bytes_mapped;
}

_Static_assert((int)BRISK_TEST_OS_MAP == (int)BRISK_OS_MAP &&
                   (int)BRISK_TEST_OS_UNMAP == (int)BRISK_OS_UNMAP &&
                   (int)BRISK_TEST_OS_COMMIT == (int)BRISK_OS_COMMIT &&
                   (int)BRISK_TEST_OS_DECOMMIT == (int)BRISK_OS_DECOMMIT &&
                   (int)BRISK_TEST_OS_REMAP == (int)BRISK_OS_REMAP &&
                   (int)BRISK_TEST_OS_OTHER == (int)BRISK_OS_OTHER &&
                   (int)BRISK_TEST_OS_KINDS == (int)BRISK_OS_CALL_KINDS,
               "the test's kinds are os.h's");

void brisk_test_os_fail(enum brisk_test_os_kind kind, uint64_t skip, uint64_t count) {
  _brisk_os_inject_failures((brisk_os_call_kind_t)kind, skip, count);
}

void brisk_test_os_fail_none(void) {
  for (int kind = 0; kind < BRISK_OS_CALL_KINDS; kind++)
    _brisk_os_inject_failures((brisk_os_call_kind_t)kind, 0, 0);
}

uint64_t brisk_test_os_injected_failures(void) { return _brisk_os_injected_failures(); }
