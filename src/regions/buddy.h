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

/* The sizes of a buddy's two parts for these arguments (create's
 * rounding): its region (blocks; to be aligned to max_block rounded up to
 * a power of two) and its meta part (header, counters, index), both page
 * multiples. 0, or the errno create would fail with. */
__attribute__((visibility("hidden"))) int _brisk_buddy_footprint(size_t total, size_t min_block,
                                                                 size_t max_block,
                                                                 size_t *region_size,
                                                                 size_t *meta_size);
/* A buddy (not registered) over memory its creator gives (the hybrid,
 * which lays its first region out in one mapping with its buckets): the
 * region aligned to max_block, the meta part zero past its header (fresh
 * memory, or that of a buddy _brisk_buddy_destroy_in found clean), both
 * read-write. No system call but PREFAULT's and LOCK's over them. NULL
 * with errno as _brisk_buddy_create. */
__attribute__((visibility("hidden"))) brisk_buddy_t *_brisk_buddy_create_in(void *region,
                                                                            void *meta,
                                                                            size_t total,
                                                                            size_t min_block,
                                                                            size_t max_block,
                                                                            unsigned flags);
/* Destroy a buddy made by _brisk_buddy_create_in (quiescent): its memory
 * stays its creator's. Returns whether its meta part is zero past the
 * header again (every block was freed), so that a later create_in may
 * take it; *resident: an upper bound of the bytes of both parts in RAM. */
__attribute__((visibility("hidden"))) bool _brisk_buddy_destroy_in(brisk_buddy_t *b,
                                                                   size_t *resident);

/* brisk_buddy_destroy of a buddy made by _brisk_buddy_create(..., false)
 * (a hybrid's further regions, never registered). */
__attribute__((visibility("hidden"))) void _brisk_buddy_destroy_unregistered(brisk_buddy_t *b);

/* The region's address range [*lo, *hi): every block lies inside it.
 * Fixed at creation, so free's dispatch by address needs no lock. */
__attribute__((visibility("hidden"))) void _brisk_buddy_range(const brisk_buddy_t *b,
                                                              uintptr_t *lo, uintptr_t *hi);
__attribute__((visibility("hidden"))) void _brisk_buddy_counters(const brisk_buddy_t *b,
                                                                 brisk_buddy_counters_t *out);
/* Where a buddy's blocks lie and how free finds their order, for a cache
 * in front of it (the hybrid's): fixed at creation. A block of order k
 * (min_block << k bytes) starting at unit u = (p - base) >> min_shift has
 * index[u] == k + 1 while it is handed out; 0 marks no block's start. */
typedef struct brisk_buddy_geometry_s {
  uintptr_t base;
  size_t total;
  uint32_t min_shift;
  uint32_t orders;                /* log2(max_block / min_block) + 1 */
  const void *index;              /* _Atomic uint8_t[]: not spelled so for C++ */
} brisk_buddy_geometry_t;
__attribute__((visibility("hidden"))) void _brisk_buddy_geometry(const brisk_buddy_t *b,
                                                                 brisk_buddy_geometry_t *out);
/* Every block is free, or held by a cache in front that is being thrown
 * away with the buddy (the caller knows): make every tree one free root
 * again, clearing the counters and index bytes in use (only those: the
 * nodes of the blocks' paths), so that destroy can keep the metadata for
 * reuse; visit(ctx, block), when not NULL, is shown each block forgotten.
 * Quiescent. */
__attribute__((visibility("hidden"))) void _brisk_buddy_forget_blocks(
    brisk_buddy_t *b, void (*visit)(void *ctx, void *block), void *ctx);

/* 2^j blocks of order k (min_block << k bytes each, adjacent) into out[],
 * from one free block of order k + j split where it stands: one search of
 * the trees for 2^j blocks (a cache's refill). Each is then a block like
 * any other, freed alone. Returns 2^j, or 0 when no block of order k + j
 * is free (k + j above the largest order included). */
__attribute__((visibility("hidden"))) size_t _brisk_buddy_take_run(brisk_buddy_t *b, uint32_t k,
                                                                   uint32_t j, void **out);

/* brisk_buddy_free, its messages naming `caller`, the call the program
 * made (a hybrid's regions). */
__attribute__((visibility("hidden"))) void _brisk_buddy_free_as(brisk_buddy_t *b, void *p,
                                                                const char *caller);

/* n blocks handed out by this buddy (a cache in front gives back half a
 * list), each checked as brisk_buddy_free checks it, its messages naming
 * `caller`: the same as freeing them one by one, with one atomic per
 * distinct tree node above them rather than one per block and level when
 * they are all of one order. */
__attribute__((visibility("hidden"))) void _brisk_buddy_free_batch(brisk_buddy_t *b,
                                                                   void *const *blocks, size_t n,
                                                                   const char *caller);
/* The smallest and largest block sizes, after rounding (powers of two). */
__attribute__((visibility("hidden"))) size_t _brisk_buddy_min_block(const brisk_buddy_t *b);
__attribute__((visibility("hidden"))) size_t _brisk_buddy_max_block(const brisk_buddy_t *b);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_REGIONS_BUDDY_H */
