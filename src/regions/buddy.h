/*
 * buddy.h — internals of the lock-free buddy allocator (buddy.c) that the
 * hybrid pool (hybrid.c) and the tests may read; the API itself is in
 * <brisk/buddy.h>. Spelled without BRISK_HIDDEN (base.h needs <stdatomic.h>) so
 * that C++ tests can include it too.
 */
#ifndef BRISK_REGIONS_BUDDY_H
#define BRISK_REGIONS_BUDDY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <brisk/buddy.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a buddy allocator has done so far. Sums of per-thread counters, so
 * exact when no alloc/free runs meanwhile and a close estimate otherwise. */
typedef struct brisk_buddy_counters_s {
  size_t in_use;      /* bytes of the blocks handed out and not freed (block sizes) */
  size_t high_water;  /* the most in_use has been (see buddy.c: "high water") */
  size_t allocations; /* successful brisk_buddy_alloc calls */
  size_t failures;    /* brisk_buddy_alloc calls that found no block (ENOMEM) */
} brisk_buddy_counters_t;

/* brisk_buddy_create_ex, registered with the registry (registry.h) or
 * not: a hybrid's regions are counted under the hybrid only. */
__attribute__((visibility("hidden"))) brisk_buddy_t *_brisk_buddy_create(size_t total,
                                                                         size_t min_block,
                                                                         size_t max_block,
                                                                         unsigned flags,
                                                                         bool registered);

/* The region's address range [*lo, *hi): every block lies inside it.
 * Fixed at creation, so free's dispatch by address needs no lock. */
__attribute__((visibility("hidden"))) void _brisk_buddy_range(const brisk_buddy_t *b,
                                                              uintptr_t *lo, uintptr_t *hi);
__attribute__((visibility("hidden"))) void _brisk_buddy_counters(const brisk_buddy_t *b,
                                                                 brisk_buddy_counters_t *out);
/* The smallest and largest block sizes, after rounding (powers of two). */
__attribute__((visibility("hidden"))) size_t _brisk_buddy_min_block(const brisk_buddy_t *b);
__attribute__((visibility("hidden"))) size_t _brisk_buddy_max_block(const brisk_buddy_t *b);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_REGIONS_BUDDY_H */
