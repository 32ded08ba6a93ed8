/* The C side of os_calls.h: brisk's internal counters for the C++ tests. */
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
