// What the region tests read from inside brisk, through a C shim
// (os_calls.c): os/os.h and regions/registry.h are C only (base.h's
// atomics), so the C++ tests cannot include them.
#ifndef BRISK_TEST_OS_CALLS_H
#define BRISK_TEST_OS_CALLS_H

#include <brisk.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// System calls the OS layer has made so far for the whole process, every
// kind (_brisk_os_counts: calls[] summed) and the refused ones: what a
// region allocator's system_requests counts, for its own calls.
uint64_t brisk_test_os_calls(void);

// _brisk_regions_stats: every live region allocator, by kind.
void brisk_test_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]);

#ifdef __cplusplus
}
#endif

#endif  // BRISK_TEST_OS_CALLS_H
