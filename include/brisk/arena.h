/*
 * brisk/arena.h — the arena: a lock-free bump allocator over reserved
 * virtual memory, and cursors, a thread's inline window into one.
 *
 * brisk_arena_create reserves `reserve` bytes of address space (64 GiB is
 * fine) and commits physical memory lazily, in chunks, as allocation
 * crosses the committed frontier. brisk_arena_alloc may be called by any
 * number of threads at once: it is one atomic fetch_add on the offset.
 * Blocks are never freed one by one; brisk_arena_reset frees all at once.
 *
 * A NULL arena, as NULL is to free: brisk_arena_alloc and every
 * allocation of a cursor made on it fail with EINVAL, reset and destroy
 * do nothing, brisk_arena_used is 0 and brisk_arena_stats all zero. A
 * NULL cursor is not tested for (brisk_arena_cursor_alloc is inline).
 *
 * A destroyed arena: brisk_arena_destroy of it again, or of another
 * kind's handle, aborts with a message (brisk/region.h: destroyed
 * handles). So does every other call with it while the mapping cache
 * keeps its reservation (a second, by default): brisk_arena_alloc,
 * reset, used, stats, brisk_arena_cursor_init, and every allocation of a
 * cursor made on it, the inline ones within a chunk it claimed before
 * too ("brisk: brisk_arena_alloc(<arena>): not a live arena (destroyed
 * already?)"), at no cost to a live arena's allocations. Once the
 * reservation went back to the system (the cache let it go, or is full or
 * turned off) they may crash (SIGSEGV); once a new arena of the same size
 * took it, they are calls on that arena, but a cursor made on the
 * destroyed arena still aborts at its next allocation (inline ones
 * included): every creation, reset and destroy gives the arena a new
 * number from one process-wide count, and the cursor's is older than the
 * new arena.
 */
#ifndef BRISK_ARENA_H
#define BRISK_ARENA_H

#include <stddef.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_arena_s brisk_arena_t;

/* NULL/EINVAL for 0; NULL/ENOMEM for more than 64 TiB or when the system
 * refuses the address space. */
BRISK_API brisk_arena_t *brisk_arena_create(size_t reserve);
BRISK_API void brisk_arena_destroy(brisk_arena_t *arena);
/*
 * `size` bytes aligned to `align` (a power of two; 0 means 16), not zeroed:
 * a new arena may be given a destroyed one's pages, contents and all (the
 * OS layer keeps them a second for it). Thread-safe and lock-free.
 * NULL/EINVAL for a bad alignment, NULL/ENOMEM when the reservation is
 * exhausted (never an overlapping block): a request that fits the
 * reservation but not what is left of it fails and leaves the arena full
 * until reset (its claim cannot be taken back), while one that could
 * never fit (its size, plus align - 16 bytes for an alignment above 16,
 * above the reservation) is refused before it claims anything. size 0
 * gives a valid, unique pointer.
 */
BRISK_API void *brisk_arena_alloc(brisk_arena_t *arena, size_t size, size_t align);
/*
 * Forget every allocation at once. NOT thread-safe: no brisk_arena_alloc
 * may run concurrently. keep_committed != 0 keeps the committed memory for
 * reuse; 0 returns it to the system.
 */
BRISK_API void brisk_arena_reset(brisk_arena_t *arena, int keep_committed);
/* Bytes handed out since creation or the last reset (padding included). */
BRISK_API size_t brisk_arena_used(const brisk_arena_t *arena);
/*
 * allocations and bytes_requested: successful brisk_arena_alloc calls and
 * the sizes they asked for, ever (resets included; a cursor's chunk is one
 * allocation of the chunk's size). bytes_in_use: brisk_arena_used.
 * bytes_held: the header and the committed pages. Any thread, any time.
 */
BRISK_API void brisk_arena_stats(const brisk_arena_t *arena, brisk_region_stats_t *out);

/*
 * A cursor: one thread's private window into an arena. brisk_arena_alloc
 * costs one atomic fetch_add per block, which on its own is a few
 * nanoseconds even uncontended; a cursor claims a chunk of the arena with
 * that fetch_add and then bumps a pointer inside it, inline, with no atomic
 * at all, so most allocations touch no shared cache line.
 *
 *   brisk_arena_cursor_t c;
 *   brisk_arena_cursor_init(&c, arena, 0);      (0: 64 KiB chunks)
 *   p = brisk_arena_cursor_alloc(&c, size, 0);   (same rules as brisk_arena_alloc)
 *
 * A cursor belongs to one thread (each thread makes its own; it may live on
 * the stack or in a thread_local). It owns no memory: nothing to destroy.
 * After brisk_arena_reset it notices the reset and claims afresh, so a
 * cursor never hands out memory from before a reset. The unused tail of a
 * chunk is lost until the next reset (at most one chunk per cursor), so an
 * arena with cursors can report ENOMEM with up to that much unclaimed.
 * ASan and Valgrind see each chunk as one block.
 */
typedef struct brisk_arena_cursor_s {
  unsigned char *pos;          /* next free byte of the chunk */
  unsigned char *end;          /* end of the chunk */
  const size_t *arena_resets;  /* the number of the arena's last reset or creation... */
  size_t resets;               /* ...when this chunk was claimed */
  brisk_arena_t *arena;
  size_t chunk;                /* bytes claimed at a time */
} brisk_arena_cursor_t;

/* chunk: bytes to claim at a time (0: 64 KiB; rounded up to 16). */
BRISK_API void brisk_arena_cursor_init(brisk_arena_cursor_t *cursor, brisk_arena_t *arena,
                                       size_t chunk);
/* Out of line: a new chunk, a reset seen, bad arguments, size 0. */
BRISK_API void *brisk_arena_cursor_alloc_slow_(brisk_arena_cursor_t *cursor, size_t size,
                                               size_t align);

/* `size` bytes aligned to `align` (power of two, 0 means 16); errors as for
 * brisk_arena_alloc. Inline: a bump inside the cursor's chunk. Every block
 * starts 16-aligned and takes a multiple of 16 bytes, so the position stays
 * 16-aligned and alignments up to 16 cost nothing: the only dependency from
 * one allocation to the next is one addition. */
static inline void *brisk_arena_cursor_alloc(brisk_arena_cursor_t *cursor, size_t size,
                                             size_t align) {
  size_t take = (size + 15) & ~(size_t)15;
  /* take - 1 wraps for size 0 (which needs a unique pointer) and for sizes
   * near SIZE_MAX: one comparison sends both out of line. */
  if (__builtin_expect(align <= 16 && (align & (align - 1)) == 0 &&
                           take - 1 < (size_t)(cursor->end - cursor->pos) &&
                           cursor->resets == *cursor->arena_resets,
                       1)) {
    unsigned char *p = cursor->pos;
    cursor->pos = p + take;
    return p;
  }
  return brisk_arena_cursor_alloc_slow_(cursor, size, align);
}

#ifdef __cplusplus
}
#endif

#endif /* BRISK_ARENA_H */
