/*
 * brisk/stats.h — statistics: the general allocator, the OS calls, and the
 * region allocators by kind, in one snapshot. Counting costs malloc's fast
 * path two plain per-thread adds (its count by size, its requested bytes)
 * and free's nothing; the rest is counted on slow paths and merged on
 * demand.
 *
 * How current a snapshot is: the calling thread's counts are exact, and so
 * are those of exited threads. Another running thread's are as of its last
 * fold: its pages' live blocks are folded into its heap when a page fills
 * or empties, and everything at its first housekeeping (every 64 slow-path
 * mallocs) after a snapshot was asked for; an idle thread's wait until it
 * runs. Frees per class are allocations minus live blocks, so until such a
 * fold another thread's frees lag its allocations.
 */
#ifndef BRISK_STATS_H
#define BRISK_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BRISK_STATS_VERSION 1
/* Room for the size classes of the general allocator: classes[1] up to the
 * 512 KiB class are filled, classes[0] and any entry after that class are
 * zero (block_size 0). The room stays fixed so that the struct's layout does
 * not change when the classes do. */
#define BRISK_STATS_CLASSES 106

/* One size class of the general allocator. */
typedef struct brisk_class_stats_s {
  size_t block_size;        /* bytes per block */
  uint64_t allocations;     /* blocks handed out */
  uint64_t frees;           /* blocks given back (by any thread) */
  uint64_t remote_frees;    /* ... of which by a thread other than the owner */
  /* allocations - frees since the start; a gauge that brisk_stats_reset
   * leaves as it is (the two counts restart there) */
  size_t blocks_in_use;
  size_t pages;             /* pages serving the class now */
} brisk_class_stats_t;

typedef struct brisk_general_stats_s {
  uint64_t allocations;     /* every block handed out: classes and huge */
  uint64_t frees;
  uint64_t remote_frees;    /* frees by a thread that does not own the block */
  uint64_t bytes_requested; /* sum of the sizes asked for, ever */
  size_t bytes_in_use;      /* live blocks, by block size (class or huge mapping) */
  size_t bytes_in_use_peak; /* most bytes_in_use at once: huge blocks at once;
                               blocks of a size class as each thread publishes
                               them, in steps of 256 KiB, once their page has
                               filled (or a snapshot read them), so blocks taken
                               and freed on a page that never filled meanwhile
                               can be missed: up to a page (64 KiB, 512 KiB or
                               4 MiB) per size class and thread */
  size_t huge_blocks;       /* live blocks above 512 KiB, each its own mapping */
  size_t huge_bytes;        /* their mapped bytes */
  uint64_t huge_allocations;
  size_t huge_cached_bytes; /* freed huge mappings kept for reuse */
  size_t pages_in_use;      /* pages serving a size class */
  size_t pages_committed;   /* free pages still backed, waiting to be purged */
  size_t bytes_held;        /* memory held from the system now: pages in use
                               and free pages not yet purged, segment headers,
                               huge mappings and the huge cache */
  size_t segments;          /* segments (32 MiB reservations) held now */
  size_t bytes_reserved;    /* address space of those segments and huge blocks (the secure
                               build's guard pages around them not counted) */
  uint64_t bytes_purged;    /* free pages given back to the system, ever */
  uint64_t slow_mallocs;    /* mallocs that took the slow path */
  uint64_t slow_frees;      /* frees that took a slow path (remote, huge, page events) */
  uint64_t heaps_created;   /* thread heaps made (one per concurrent thread, at most) */
  uint64_t heaps_abandoned; /* ... left by an exiting thread */
  uint64_t heaps_adopted;   /* ... taken over by a new thread */
  size_t heaps_live;        /* heaps owned by a running thread now */
} brisk_general_stats_t;

/* System calls of the OS layer, by every part of brisk, counted one by one. */
typedef struct brisk_os_stats_s {
  uint64_t map_calls, map_bytes;           /* mmap */
  uint64_t unmap_calls, unmap_bytes;       /* munmap */
  uint64_t commit_calls, commit_bytes;     /* mprotect making reserved memory usable */
  uint64_t decommit_calls, decommit_bytes; /* madvise(MADV_DONTNEED) and uncommits */
  uint64_t remap_calls, remap_bytes;       /* mremap (huge blocks resized or moved) */
  uint64_t other_calls, other_bytes;       /* prefault, mlock, huge-page advice */
  uint64_t failed_calls;                   /* calls the kernel refused */
  size_t bytes_mapped;                     /* address space mapped now */
} brisk_os_stats_t;

typedef enum brisk_region_kind_e {
  BRISK_REGION_ARENA,
  BRISK_REGION_STACK,
  BRISK_REGION_FIFO,
  BRISK_REGION_POOL,
  BRISK_REGION_BUDDY,
  BRISK_REGION_HYBRID,
  BRISK_REGION_KINDS
} brisk_region_kind_t;

/* The live allocators of one kind, summed. A hybrid's pools and buddies are
 * counted under the hybrid only. */
typedef struct brisk_region_kind_stats_s {
  size_t live;              /* created and not yet destroyed */
  uint64_t created;         /* ever */
  brisk_region_stats_t totals;
} brisk_region_kind_stats_t;

/*
 * The OS layer's cache of region allocators' mappings: what a destroyed
 * arena, stack, fifo, pool, buddy or hybrid (or a stack or fifo trimming
 * its spare blocks) gave back, kept a short while for the next allocator
 * of the same kind that asks for a mapping of that size. Its memory is
 * counted in os.bytes_mapped and in no allocator's totals. Bytes are the
 * mappings' sizes. `entries` to `delay_ms` are values now; the rest count
 * since the start (or brisk_stats_reset), and between two snapshots taken
 * while no allocator is made or destroyed,
 * kept = hits + expired + evicted + flushed + (the change in entries).
 */
typedef struct brisk_region_cache_stats_s {
  size_t entries;           /* mappings held now */
  size_t bytes;             /* their size (address space) */
  size_t resident_bytes;    /* their resident bytes when kept: what max_bytes bounds */
  size_t max_bytes;         /* the bound on resident bytes (BRISK_REGION_CACHE_MB; 0: off) */
  uint64_t delay_ms;        /* how long a mapping is kept (BRISK_REGION_CACHE_MS) */
  uint64_t hits, hit_bytes; /* mappings handed to an allocator from the cache */
  uint64_t misses;          /* requests it could not serve (a fresh mapping was made) */
  uint64_t kept, kept_bytes;         /* mappings given back and kept */
  uint64_t declined, declined_bytes; /* ... released at once instead (over the bound, cache
                                        off, or its lock busy) */
  uint64_t expired, expired_bytes;   /* released after the delay */
  uint64_t evicted, evicted_bytes;   /* released to make room for a newer one */
  uint64_t flushed, flushed_bytes;   /* released at once by brisk_collect(true), malloc_trim */
} brisk_region_cache_stats_t;

/*
 * Purging (BRISK_PURGE_DELAY_MS, BRISK_PURGE_DELAY_MAX_MS): a heap gives a
 * free page back to the system after the base delay, except the free pages
 * it has learnt it takes back later (it keeps up to as many bytes as it
 * faulted in again soon after purging them, for at most the maximum delay).
 * The two counts run since the start (or brisk_stats_reset).
 */
typedef struct brisk_purge_stats_s {
  uint64_t delay_ms;          /* the base delay (BRISK_PURGE_DELAY_MS; 0: at once) */
  uint64_t max_delay_ms;      /* the longest a kept page waits (BRISK_PURGE_DELAY_MAX_MS) */
  uint64_t bytes_refaulted;   /* pages faulted in soon after a purge by delay of as many
                                 bytes of their kind (purged pages, or fresh ones taken in
                                 their stead): faults that keeping the purged pages would
                                 have saved, and what each heap learnt to keep */
  uint64_t bytes_reused_late; /* free pages taken back after more than the base delay,
                                 each a page the base delay alone would have purged */
} brisk_purge_stats_t;

typedef struct brisk_stats_s {
  uint32_t version;         /* BRISK_STATS_VERSION of the library that filled it */
  uint32_t size;            /* set by the caller to sizeof(brisk_stats_t) */
  uint64_t time_ms;         /* milliseconds since brisk started (monotonic) */
  brisk_general_stats_t general;
  brisk_class_stats_t classes[BRISK_STATS_CLASSES];
  brisk_os_stats_t os;
  brisk_region_kind_stats_t regions[BRISK_REGION_KINDS];
  /* Fields are only ever added here, at the end: a caller's `size` says
   * which it has, and the `size` brisk_stats_get leaves says which the
   * library filled. */
  brisk_region_cache_stats_t region_cache;
  brisk_purge_stats_t purge;
} brisk_stats_t;

/*
 * brisk_stats_get: a snapshot into *out, whose `size` the caller sets to
 * sizeof(brisk_stats_t) first (a program built against an older, smaller
 * struct gets the fields it knows; `size` is left at the bytes filled, so
 * a program built against a newer header sees what an older library left
 * out). Returns 0, or -1 with errno EINVAL for NULL or a size too small for
 * the version and size fields. Allocates nothing; thread-safe.
 */
BRISK_API int brisk_stats_get(brisk_stats_t *out);
/* A human-readable table with units (what BRISK_STATS=1 prints at exit). */
BRISK_API void brisk_stats_print(FILE *out);
/* The same snapshot as one JSON object on one line, ending in a newline. */
BRISK_API void brisk_stats_json(FILE *out);
/* Start the counters again: every count and peak of the general allocator,
 * the OS layer and the region mapping cache, and the region kinds'
 * `created`, read from now on as if the program started now. Gauges (bytes
 * in use, held, the cache's entries and bytes) are not touched, nor are the
 * region totals, which are those of the allocators live now. */
BRISK_API void brisk_stats_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_STATS_H */
