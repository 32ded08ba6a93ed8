/*
 * brisk/region.h — what brisk's region allocators share: their statistics
 * in common words (each allocator's brisk_*_stats fills one), and the
 * creation flags of the pools (brisk/pool.h, brisk/buddy.h, brisk/hybrid.h).
 *
 * Region allocators serve memory whose lifetime the program knows. Each one
 * is built on brisk's OS layer, not on malloc; a block from one goes back
 * to the same allocator, never to brisk_free. Statistics are per allocator.
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
