/*
 * spinlocked.h — the baselines of seed 003's comparison: a free list, a
 * buddy allocator and a hybrid of both, each guarded by one spinlock
 * ("the system tested against itself, but without a lock-free approach:
 * every bucket in the SP and GP section guarded by a regular spinlock").
 * brisk's lock-free brisk_pool, brisk_buddy and brisk_hybrid are measured
 * against them in region_hybrid and region_pool. They are benchmark code,
 * not part of the library.
 *
 * Each structure is the library's layout with plain fields under the lock:
 *   spin_pool    fixed-size objects carved from one mapping; free objects
 *                form one list through their first 8 bytes (newest first)
 *   spin_buddy   power-of-two blocks from min_block to max_block in a row
 *                of max_block trees of "used units" counters, searched
 *                top-down, left child first; one index byte per unit says
 *                where a live block of which order starts
 *   spin_hybrid  the hybrid's sections (one spin_pool per bucket, one
 *                spin_buddy per region), each with its own lock; alloc
 *                takes the smallest bucket that holds the size, then each
 *                region in turn; free finds the section by address
 *
 * Any thread may call any function except create and destroy. A lock is
 * test-and-test-and-set with a pause in the wait. Out of memory: NULL with
 * errno ENOMEM. A pointer from no section, or a buddy block freed twice,
 * aborts with a message.
 */
#ifndef BENCH_SPINLOCKED_H
#define BENCH_SPINLOCKED_H

#include <brisk.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spin_pool spin_pool;
typedef struct spin_buddy spin_buddy;
typedef struct spin_hybrid spin_hybrid;

/* capacity objects of obj_size bytes, each aligned to 16 (capacity > 0). */
spin_pool *spin_pool_create(size_t obj_size, size_t capacity);
void *spin_pool_alloc(spin_pool *pool);
void spin_pool_free(spin_pool *pool, void *p);
void spin_pool_destroy(spin_pool *pool);

/* total bytes (a multiple of max_block once rounded), blocks of min_block
 * (at least 16) to max_block (0: total), as brisk_buddy_create_ex rounds
 * them. Blocks are aligned to their size. */
spin_buddy *spin_buddy_create(size_t total, size_t min_block, size_t max_block);
void *spin_buddy_alloc(spin_buddy *buddy, size_t size);
void spin_buddy_free(spin_buddy *buddy, void *p);
void spin_buddy_destroy(spin_buddy *buddy);

/* The sections of a brisk hybrid config (its flags and fallback are not
 * used); bucket sizes must be multiples of 16. NULL config: the default. */
spin_hybrid *spin_hybrid_create(const brisk_hybrid_config_t *config);
void *spin_hybrid_alloc(spin_hybrid *hybrid, size_t size);
void spin_hybrid_free(spin_hybrid *hybrid, void *p);
void spin_hybrid_destroy(spin_hybrid *hybrid);

#ifdef __cplusplus
}
#endif

#endif /* BENCH_SPINLOCKED_H */
