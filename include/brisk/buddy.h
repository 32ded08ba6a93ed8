/*
 * brisk/buddy.h — the buddy allocator, after Marotta et al., "A
 * Non-blocking Buddy System".
 *
 * Power-of-two blocks from min_block up to max_block over one reservation,
 * tracked in an implicit binary tree whose nodes change only by atomic
 * operations: no lock. Blocks are aligned to their own size. Its flags are
 * brisk/region.h's BRISK_REGION_*.
 *
 * A NULL buddy allocator: alloc fails with EINVAL, free of a block aborts
 * with a message (of NULL does nothing), destroy and trim do nothing,
 * stats gives all zero, validate returns 0 (errno EINVAL).
 *
 * A destroyed buddy allocator: brisk_buddy_destroy of it again, or of
 * another kind's handle, aborts with a message (brisk/region.h: destroyed
 * handles). So does every other call with it (alloc, free of any pointer
 * but NULL, trim, stats, validate: "brisk: brisk_buddy_alloc(<buddy>):
 * not a live buddy allocator (destroyed already?)") while the mapping
 * cache keeps its header, at no cost to a live one's alloc and free. The
 * cache keeps it (a second, by default) when every block was freed
 * before the destroy; one that still held blocks, or was mlock'ed with
 * BRISK_REGION_LOCK, goes back to the system at destroy, and any other
 * once the cache lets it go: calls with it may then crash (SIGSEGV). Once
 * a new buddy allocator of the same shape took it, they are calls on
 * that one.
 */
#ifndef BRISK_BUDDY_H
#define BRISK_BUDDY_H

#include <stddef.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_buddy_s brisk_buddy_t;

/*
 * total and min_block are rounded up to powers of two, each at least 16;
 * blocks up to `total`, or up to 2^31 x min_block where total is
 * larger (the region is then a row of trees of that size, as with
 * brisk_buddy_create_ex's max_block). Besides the region, create reserves
 * 9 bytes per min_block of it (counters and index), touched where blocks
 * are used. NULL/EINVAL for total 0 or min_block > total (the sizes as
 * given, before rounding: (1000, 1024) is refused); NULL/ENOMEM for
 * a total above 64 TiB, or when the system refuses the memory (1 TiB of
 * 16-byte units asks for 1.56 TiB).
 */
BRISK_API brisk_buddy_t *brisk_buddy_create(size_t total, size_t min_block);
/* max_block (0: as brisk_buddy_create) caps the block size; total becomes
 * a multiple of it and the region a row of max_block trees, which spreads
 * contention (max_block, too, is at least 16). NULL/EINVAL also for
 * min_block > max_block, max_block above total rounded up to a power of
 * two (at least 16), more than 2^31 min_blocks in a
 * max_block, or an unknown flag, whatever the sizes; ENOMEM as above. */
BRISK_API brisk_buddy_t *brisk_buddy_create_ex(size_t total, size_t min_block, size_t max_block,
                                               unsigned flags);
/* A block, not zeroed. NULL/EINVAL for size 0 or a bad alignment;
 * NULL/ENOMEM when no block of the size fits (size or alignment above
 * max_block included). The block is size rounded up to a power of two (at
 * least min_block and align) and is aligned to that. */
BRISK_API void *brisk_buddy_alloc(brisk_buddy_t *buddy, size_t size, size_t align);
/* NULL does nothing; a foreign or interior pointer aborts with a message,
 * and so does a double free, unless the block was allocated again since
 * (its start then belongs to the new block). */
BRISK_API void brisk_buddy_free(brisk_buddy_t *buddy, void *p);
BRISK_API void brisk_buddy_destroy(brisk_buddy_t *buddy);
/*
 * allocations and bytes_requested: successful brisk_buddy_alloc calls and
 * the sizes they asked for (before rounding), counted per thread.
 * bytes_in_use: the live blocks' power-of-two sizes. bytes_held: both
 * reservations. system_requests: all made at creation. Any thread, any
 * time, as brisk_pool_stats.
 */
BRISK_API void brisk_buddy_stats(const brisk_buddy_t *buddy, brisk_region_stats_t *out);
/*
 * Debug validator. Must not run concurrently with alloc/free. Returns 1 if
 * the tree is consistent (no two live blocks overlap, every counter matches
 * its children); 0 otherwise. With every block freed (and thread caches
 * flushed by brisk_buddy_trim), *all_free is set to 1 when the tree is
 * one free root again.
 */
BRISK_API int brisk_buddy_validate(brisk_buddy_t *buddy, int *all_free);
/* Return every thread's cached blocks to the tree. Not concurrent-safe:
 * no alloc/free may run meanwhile. */
BRISK_API void brisk_buddy_trim(brisk_buddy_t *buddy);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_BUDDY_H */
