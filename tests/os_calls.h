// What the region and fault tests reach inside brisk, through a C shim
// (os_calls.c): os/os.h and regions/registry.h are C only (base.h's
// atomics), so the C++ tests cannot include them.
#ifndef BRISK_TEST_OS_CALLS_H
#define BRISK_TEST_OS_CALLS_H

#include <brisk.h>
#include <stdbool.h>
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

// Address space the OS layer has mapped now, all of brisk's (os.h's
// bytes_mapped).
size_t brisk_test_os_bytes_mapped(void);

// The OS layer's fault injection (os.h: _brisk_os_inject_failures), by the
// kinds of system call it counts.
enum brisk_test_os_kind {
  BRISK_TEST_OS_MAP,       // mmap
  BRISK_TEST_OS_UNMAP,     // munmap
  BRISK_TEST_OS_COMMIT,    // mprotect to read-write
  BRISK_TEST_OS_DECOMMIT,  // madvise(MADV_DONTNEED), mprotect back to no access
  BRISK_TEST_OS_REMAP,     // mremap
  BRISK_TEST_OS_OTHER,     // prefault, mlock, huge-page advice
  BRISK_TEST_OS_KINDS
};
#define BRISK_TEST_OS_FAIL_ALWAYS UINT64_MAX
// After `skip` more calls of `kind` go through, refuse the next `count`
// (BRISK_TEST_OS_FAIL_ALWAYS: all until cleared); count 0 clears the kind.
void brisk_test_os_fail(enum brisk_test_os_kind kind, uint64_t skip, uint64_t count);
// Every kind cleared.
void brisk_test_os_fail_none(void);
// The OS layer behaves as under the kernel's strict overcommit accounting
// (os.h: _brisk_os_assume_strict_commit): segments of pages are committed as
// they fill. false: as the system says again.
void brisk_test_os_assume_strict_commit(bool strict);
// Calls refused by injection so far.
uint64_t brisk_test_os_injected_failures(void);

// The OS layer's mapping cache (os.h): what it holds and has done.
typedef struct brisk_test_cache_info_s {
  size_t entries;
  size_t resident;
  uint64_t hits, puts, releases;
} brisk_test_cache_info_t;
void brisk_test_os_cache_info(brisk_test_cache_info_t *out);
// Everything it keeps back to the OS now: a test that counts system calls
// from here on sees allocators created afresh.
void brisk_test_os_cache_flush(void);
// Its limits (0 bytes or entries: keep nothing); the defaults are
// brisk_test_os_cache_defaults().
void brisk_test_os_cache_configure(size_t max_bytes, size_t max_entries, uint64_t delay_ms);
void brisk_test_os_cache_defaults(void);
// Whether p lies in a mapping the cache keeps.
int brisk_test_os_cache_holds(const void *p);
// [p, p + size), an arena's reservation all read-write, given to the
// cache: 0 when it refused it (it holds part of it already).
int brisk_test_os_cache_put(void *p, size_t size);
// Such a mapping of `size` bytes taken back, NULL when it holds none.
void *brisk_test_os_cache_take(size_t size);
// _brisk_os_cache_expire at the current time.
void brisk_test_os_cache_expire(void);
// Bytes of [p, p + size) resident in RAM (mincore).
size_t brisk_test_os_resident(void *p, size_t size);
// The transparent huge page size the OS layer uses, 0 when none.
size_t brisk_test_os_huge_page_size(void);

#ifdef __cplusplus
}

namespace brisk_test {
// For a test that calls an allocator after destroying it while the
// mapping cache keeps its memory: the cache keeps what it is given for a
// minute, however slowly a sanitizer runs the test (a death test's child
// runs it all again), and its defaults come back when the test ends.
class CacheKeepsForAMinute {
 public:
  CacheKeepsForAMinute() { brisk_test_os_cache_configure(size_t{256} << 20, 32, 60000); }
  ~CacheKeepsForAMinute() { brisk_test_os_cache_defaults(); }
  CacheKeepsForAMinute(const CacheKeepsForAMinute &) = delete;
  CacheKeepsForAMinute &operator=(const CacheKeepsForAMinute &) = delete;
};
}  // namespace brisk_test
#endif

#endif  // BRISK_TEST_OS_CALLS_H
