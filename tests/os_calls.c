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

void brisk_test_os_assume_strict_commit(bool strict) { _brisk_os_assume_strict_commit(strict); }

void brisk_test_os_cache_info(brisk_test_cache_info_t *out) {
  brisk_os_cache_info_t info;
  _brisk_os_cache_info(&info);
  out->entries = info.entries;
  out->resident = info.resident;
  out->hits = info.hits;
  out->puts = info.puts;
  out->releases = info.releases;
}

void brisk_test_os_cache_flush(void) { _brisk_os_cache_flush(); }

void brisk_test_os_cache_configure(size_t max_bytes, size_t max_entries, uint64_t delay_ms) {
  _brisk_os_cache_configure(max_bytes, max_entries, delay_ms);
}

void brisk_test_os_cache_defaults(void) {
  _brisk_os_cache_configure(BRISK_OS_CACHE_DEFAULT_BYTES, BRISK_OS_CACHE_MAX_ENTRIES,
                            BRISK_OS_CACHE_DEFAULT_DELAY_MS);
}

int brisk_test_os_cache_holds(const void *p) { return _brisk_os_cache_holds(p); }

int brisk_test_os_cache_put(void *p, size_t size) {
  return _brisk_os_cache_put(BRISK_OS_CACHE_ARENA, p, size, size, 0, NULL);
}

void *brisk_test_os_cache_take(size_t size) {
  size_t committed, resident;
  return _brisk_os_cache_take(BRISK_OS_CACHE_ARENA, size, _brisk_os_page_size(), &committed,
                              &resident, NULL);
}

void brisk_test_os_cache_expire(void) { _brisk_os_cache_expire(_brisk_os_now_ms()); }

size_t brisk_test_os_resident(void *p, size_t size) { return _brisk_os_resident(p, size, NULL); }

size_t brisk_test_os_huge_page_size(void) { return _brisk_os_huge_page_size(); }
