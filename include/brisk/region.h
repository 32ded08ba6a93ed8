/*
 * brisk/region.h — what brisk's region allocators share: their statistics
 * in common words (each allocator's brisk_*_stats fills one), and the
 * creation flags of the pools (brisk/pool.h, brisk/buddy.h, brisk/hybrid.h).
 *
 * Region allocators serve memory whose lifetime the program knows. Each one
 * is built on brisk's OS layer, not on malloc; a block from one goes back
 * to the same allocator, never to brisk_free. Statistics are per allocator.
 *
 * Destroyed handles. Every brisk_*_destroy takes NULL as free takes it.
 * A handle that is no live allocator of its kind, destroyed already or of
 * another kind (brisk_pool_destroy of an arena), aborts with one line,
 * "brisk: brisk_<kind>_destroy(<handle>): not a live <kind> (destroyed
 * already?)": brisk keeps the addresses of the live allocators and looks
 * the handle up among them without reading the memory behind it, which a
 * destroyed one may have given back to the system.
 *
 * Every other call with a destroyed handle aborts with the same line,
 * naming the call, while the OS layer's mapping cache keeps the
 * allocator's memory as destroy left it (a second, by default;
 * BRISK_REGION_CACHE_MB and _MS): destroy leaves the fields that each
 * fast path tests so that the next call goes out of line, where they are
 * tested, and a live allocator's calls cost not one instruction more.
 * Each allocator's header says what it catches, and what it does not (a
 * pool's local cache, inline; a fifo takes the frees of the blocks it
 * still holds). Not caught: once the memory went back to the system (the
 * cache let it go, or is full or turned off; some allocators give theirs
 * back at destroy, each header says which) such a call may crash
 * (SIGSEGV); and once a new allocator of the same kind and size took the
 * destroyed one's mapping from the cache, a call with the old handle,
 * destroy too, is a call on the new one (as free() of a block that
 * malloc has handed out again frees the new owner's).
 */
#ifndef BRISK_REGION_H
#define BRISK_REGION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a region allocator has asked of the program and of the system. The
 * words mean the same in every allocator. */
typedef struct brisk_region_stats_s {
  size_t bytes_requested;   /* sum of the sizes callers asked for, ever */
  size_t bytes_in_use;      /* bytes handed out and not yet given back */
  size_t bytes_held;        /* bytes currently taken from the system */
  size_t system_requests;   /* OS calls made so far, each one counted */
  size_t allocations;       /* successful allocation calls, counted */
} brisk_region_stats_t;

/* Flags for brisk_pool_create_ex, brisk_buddy_create_ex and the hybrid's
 * config. */
#define BRISK_REGION_PREFAULT     0x1u /* fault every page in at create */
#define BRISK_REGION_LOCK         0x2u /* also mlock it (create fails, errno from mlock, if refused) */
#define BRISK_REGION_THREAD_CACHE 0x4u /* a small per-thread cache in front of the shared lists */

#ifdef __cplusplus
}
#endif

#endif /* BRISK_REGION_H */
