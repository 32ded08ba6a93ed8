/*
 * brisk/hybrid.h — the bounded hybrid pool (seed 003).
 *
 * Fixed-size buckets (lock-free pools) in front of buddy regions, all
 * reserved (and optionally pre-faulted and locked) at creation, so alloc
 * and free make no system call afterwards. Frees dispatch by address
 * through a read-only table of ranges.
 */
#ifndef BRISK_HYBRID_H
#define BRISK_HYBRID_H

#include <stddef.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_hybrid_s brisk_hybrid_t;

#define BRISK_HYBRID_MAX_BUCKETS 8
#define BRISK_HYBRID_MAX_REGIONS 4

typedef struct brisk_hybrid_config_s {
  size_t bucket_sizes[BRISK_HYBRID_MAX_BUCKETS];   /* ascending, 8..512 B; 0 ends the list */
  size_t bucket_counts[BRISK_HYBRID_MAX_BUCKETS];  /* objects per bucket */
  size_t region_sizes[BRISK_HYBRID_MAX_REGIONS];   /* buddy regions; 0 ends the list */
  size_t region_min_block;                         /* 0: smallest above the last bucket */
  size_t region_max_block;                         /* 0: 1 MiB */
  unsigned flags;            /* BRISK_REGION_PREFAULT / LOCK / THREAD_CACHE */
  int fallback_to_malloc;    /* nonzero: brisk_malloc when every section is full */
} brisk_hybrid_config_t;

/* The default: buckets of 16/32/64 B (65,536 objects each) and one 64 MiB
 * buddy region (blocks of 128 B to 1 MiB), BRISK_REGION_THREAD_CACHE, no
 * fallback: any size up to 1 MiB without further setup.
 *
 * Memory: fixed at creation, one mapping (75.7 MiB in the default: the
 * region's 64 MiB, the buckets' 1 + 2 + 4 MiB, their headers, the
 * region's counters and index, the hybrid's own pages) and one more per
 * further region; no system call afterwards. The blocks handed out never
 * exceed the sections: each bucket's count of objects, each region's
 * bytes (its blocks are powers of two).
 *
 * BRISK_REGION_THREAD_CACHE gives each thread a cache of free blocks per
 * bucket and per block size of the first region up to 64 KiB (at most 32
 * KiB and 64 blocks of each size, and at least 2 blocks: 415 KiB per
 * thread in the default, 7 KiB of it in the buckets), from which alloc and
 * free take and give without an atomic or a call. One thread meets the
 * bound exactly (a request the sections cannot serve first gives this
 * thread's cached blocks back); with T threads a request can fail while
 * the other T - 1 threads' caches hold up to that much each. Without the
 * flag the bound is exact for any number of threads. */
BRISK_API void brisk_hybrid_default_config(brisk_hybrid_config_t *out);
/* NULL config: the default. NULL/EINVAL for a bad config, ENOMEM (or
 * mlock's errno) when memory can't be reserved. */
BRISK_API brisk_hybrid_t *brisk_hybrid_create(const brisk_hybrid_config_t *config);
/*
 * A block, not zeroed: from the smallest bucket that holds size, if its
 * objects have the alignment (align 0: what malloc would give, 16 for
 * sizes that are multiples of 16, else 8); then each buddy region; then
 * brisk_malloc if the config allows it. NULL/EINVAL for size 0 or an
 * alignment that is not a power of two; NULL/ENOMEM when every section is
 * full. Lock-free, no system call.
 */
BRISK_API void *brisk_hybrid_alloc(brisk_hybrid_t *hybrid, size_t size, size_t align);
/* NULL does nothing; a pointer from no section (and not from brisk_malloc
 * with the fallback on), not a block's start, or freed twice aborts with
 * a message (a double free is caught while the block is still in the
 * freeing thread's cache, or back in its region; in a bucket, debug
 * builds catch it there too). */
BRISK_API void brisk_hybrid_free(brisk_hybrid_t *hybrid, void *p);
BRISK_API void brisk_hybrid_destroy(brisk_hybrid_t *hybrid);

typedef struct brisk_hybrid_section_stats_s {
  size_t block_size;     /* bucket object size, or 0 for a buddy region */
  size_t bytes_reserved; /* memory the section owns */
  size_t in_use;         /* bytes in the program's live blocks now (not
                            those waiting in thread caches) */
  size_t high_water;     /* for a region, the most bytes its blocks took at
                            once; for a bucket, the bytes of objects ever
                            taken from its store; both count blocks that
                            waited in thread caches */
  size_t allocations;    /* blocks it served the program */
  size_t failures;       /* requests this section could not serve */
} brisk_hybrid_section_stats_t;

/* Fills up to max entries (buckets first, then regions); returns how many
 * sections the hybrid has. *fallbacks (if not NULL): allocations that went
 * to brisk_malloc. */
BRISK_API size_t brisk_hybrid_stats(const brisk_hybrid_t *hybrid,
                                    brisk_hybrid_section_stats_t *out, size_t max,
                                    size_t *fallbacks);
/*
 * The whole hybrid in the words of every region allocator. allocations and
 * bytes_requested: successful brisk_hybrid_alloc calls and the sizes they
 * asked for (fallbacks included), counted per thread. bytes_in_use and
 * bytes_held: its sections' (a fallback block is the general allocator's);
 * bytes_held is its mapping (the hybrid, its buckets, its first region)
 * and the further regions' reservations. system_requests: the hybrid's
 * and its sections', all made at creation. Any thread, any time.
 */
BRISK_API void brisk_hybrid_totals(const brisk_hybrid_t *hybrid, brisk_region_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_HYBRID_H */
