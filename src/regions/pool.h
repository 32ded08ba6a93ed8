/*
 * pool.h — what the rest of brisk (the hybrid allocator) may know about a
 * fixed-size pool beyond <brisk/pool.h>: where its objects lie, for dispatching
 * a free by address, its object stride, and its counters in objects.
 * brisk_pool_alloc / brisk_pool_free are called directly (they are the fast
 * paths); everything here is read-only and safe to call concurrently with
 * them.
 */
#ifndef BRISK_REGIONS_POOL_H
#define BRISK_REGIONS_POOL_H

#include "base/base.h"

#include <brisk/pool.h>

/* Counters of a pool, in objects. A snapshot: each field is summed over
 * per-thread counters without stopping the threads that move them. */
typedef struct brisk_pool_counters_s {
  size_t in_use;      /* handed out and not yet freed */
  size_t high_water;  /* objects ever carved from the reservation: free ones
                         in per-thread caches and lists count once carved */
  size_t allocations; /* successful brisk_pool_alloc calls */
  size_t failures;    /* brisk_pool_alloc calls that returned NULL/ENOMEM */
} brisk_pool_counters_t;

/* brisk_pool_create_ex, registered with the registry (registry.h) or not:
 * a hybrid's buckets are counted under the hybrid only. */
BRISK_HIDDEN brisk_pool_t *_brisk_pool_create(size_t obj_size, size_t align, size_t capacity,
                                              unsigned flags, bool registered);

/* The two parts of a bounded pool (capacity > 0) of these arguments laid
 * out in memory its creator gives (_brisk_pool_create_in): *header, its
 * header and live bits (debug builds), and *objects, its objects; page
 * multiples. 0, or the errno create would fail with. */
BRISK_HIDDEN int _brisk_pool_footprint(size_t obj_size, size_t align, size_t capacity,
                                       size_t *header, size_t *objects);

/* A bounded pool (not registered) laid over memory its creator gives (the
 * hybrid, which lays its buckets out in one mapping): `header` and
 * `objects` of _brisk_pool_footprint's sizes, page-aligned, read-write,
 * holding anything (the header and live bits are cleared here). It makes
 * no system call but PREFAULT's and LOCK's over them, and destroy leaves
 * the memory to its creator. `key`: what its free objects carry in their
 * second word (odd; pool_internal.h's Keys), 0 for a key of its own.
 * NULL with errno as _brisk_pool_create. */
BRISK_HIDDEN brisk_pool_t *_brisk_pool_create_in(void *header, void *objects, size_t obj_size,
                                                 size_t align, size_t capacity, unsigned flags,
                                                 uintptr_t key);

/* brisk_pool_destroy of a pool that was never registered (a hybrid's
 * bucket, made by _brisk_pool_create_in): its memory is its creator's. */
BRISK_HIDDEN void _brisk_pool_destroy_unregistered(brisk_pool_t *pool);

/* A key for a pool or a hybrid, odd, that no other pool or hybrid of the
 * process has had (pool_internal.h's Keys). */
BRISK_HIDDEN uintptr_t _brisk_pool_new_key(void);

/* brisk_pool_free, its messages naming `caller`, the call the program
 * made (a hybrid's bucket objects go back through it). */
BRISK_HIDDEN void _brisk_pool_free_as(brisk_pool_t *pool, void *p, const char *caller);

/* An upper bound of the bytes of the pool's memory in RAM: the header,
 * the live bits and every object ever carved. */
BRISK_HIDDEN size_t _brisk_pool_resident(const brisk_pool_t *pool);

/* [*lo, *hi): the address range of every object the pool can ever hand
 * out (its whole reservation for objects). Constant for the pool's life. */
BRISK_HIDDEN void _brisk_pool_range(const brisk_pool_t *pool, uintptr_t *lo, uintptr_t *hi);

BRISK_HIDDEN void _brisk_pool_counters(const brisk_pool_t *pool, brisk_pool_counters_t *out);

/* The distance between two objects: obj_size rounded up to max(align, 8).
 * Every byte of it may be used by the program while the object is live. */
BRISK_HIDDEN size_t _brisk_pool_object_size(const brisk_pool_t *pool);

/* Where a pool's objects lie, for a cache in front of it (the hybrid's)
 * that checks a freed pointer without calling the pool: fixed at creation
 * but `carved`, which only grows. */
typedef struct brisk_pool_geometry_s {
  uintptr_t objects;           /* the first object */
  uint64_t inverse;            /* see brisk_pool_geometry_index */
  uint32_t shift;
  const _Atomic size_t *carved; /* objects ever handed out: index < *carved */
} brisk_pool_geometry_t;

BRISK_HIDDEN void _brisk_pool_geometry(const brisk_pool_t *pool, brisk_pool_geometry_t *out);

/* The index of the object at p, or a value >= max_objects (hence >= carved)
 * when p is no object's start: pool_internal.h's brisk_pool_index_of. */
BRISK_INLINE size_t brisk_pool_geometry_index(const brisk_pool_geometry_t *g, const void *p) {
  uint64_t offset = (uint64_t)((uintptr_t)p - g->objects);
  uint32_t s = g->shift;
  uint64_t rotated = (offset >> s) | (offset << ((64 - s) & 63));
  return (size_t)(rotated * g->inverse);
}

/* For a cache in front of the pool (the hybrid's thread lists), its
 * refills and give-backs in batches. take: up to `want` (at least 1)
 * objects into out[] in one step, from one shard (one CAS) or freshly
 * carved, each handed out as brisk_pool_alloc would and counted as the
 * calling thread's allocations; how many (0: the pool has none, counted
 * as a failure, errno ENOMEM). give: n objects the pool handed out, each
 * checked as brisk_pool_free checks it (its messages naming `caller`, the
 * call the program made), back onto the calling thread's home shard as
 * one chain (one CAS), counted as its frees. */
BRISK_HIDDEN size_t _brisk_pool_take_batch(brisk_pool_t *pool, size_t want, void **out);
BRISK_HIDDEN void _brisk_pool_give_batch(brisk_pool_t *pool, void *const *objects, size_t n,
                                         const char *caller);

/* pool_validate.c: check the pool's free objects (shards, magazines) and
 * the local caches named against its geometry and counters; "brisk:
 * brisk_pool_validate(0x...): ..." and abort at the first broken invariant.
 * At a quiet point only: no thread inside the pool's alloc or free, nor
 * using a local cache named, meanwhile. */
BRISK_HIDDEN void _brisk_pool_validate(const brisk_pool_t *pool,
                                       const brisk_pool_local_t *const *locals,
                                       size_t local_count);

#endif /* BRISK_REGIONS_POOL_H */
