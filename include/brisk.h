/*
 * brisk.h — the one header a brisk user includes.
 *
 * brisk is a general-purpose allocator for Linux/x86-64. Linking libbrisk
 * (-lbrisk) or preloading it (LD_PRELOAD=libbrisk.so) replaces malloc, free
 * and the C++ operators new/delete for the whole program; the functions
 * below reach the same allocator under their own names, which is what a
 * program (or a sanitizer build, whose runtime owns malloc) uses to call
 * brisk explicitly.
 *
 * Common rules for every function here:
 *   - Memory from any brisk_* allocation function may be freed by any thread
 *     with brisk_free (or free() when brisk is the process allocator).
 *   - A size that cannot be served returns NULL with errno set to ENOMEM;
 *     nothing is ever left half-changed by a failed call.
 *   - Every block of the general allocator (brisk_malloc and friends) of more
 *     than 8 bytes is aligned to 16 bytes, alignof(max_align_t) on x86-64,
 *     which compilers assume of malloc's result; a block of 8 bytes or less
 *     is aligned to 8, the most an object of that size can need.
 *   - Freeing a pointer outside brisk's memory (the stack, another
 *     allocator's block, a segment header) prints the address to stderr and
 *     aborts. Inside brisk's memory, a double free or an interior pointer is
 *     caught wherever the check is O(1) on a slow path (huge blocks, frees
 *     from another thread, a page's last block, realloc, usable_size); a
 *     same-thread free of a small block takes the fast path and is not
 *     checked.
 */
#ifndef BRISK_H
#define BRISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BRISK_API __attribute__((visibility("default")))
#define BRISK_ATTR_MALLOC __attribute__((malloc, warn_unused_result))
#else
#define BRISK_API
#define BRISK_ATTR_MALLOC
#endif

/* The version of the library, as major * 10000 + minor * 100 + patch. */
#define BRISK_VERSION 100

/*
 * brisk_malloc: a block of at least `size` bytes, uninitialised.
 * size 0 gives a unique, freeable pointer. NULL/ENOMEM when size can't be
 * served (for example SIZE_MAX).
 */
BRISK_API BRISK_ATTR_MALLOC void *brisk_malloc(size_t size);

/*
 * brisk_calloc: count * size bytes, all zero (also when a dirty block is
 * reused). NULL/ENOMEM when count * size overflows.
 */
BRISK_API BRISK_ATTR_MALLOC void *brisk_calloc(size_t count, size_t size);

/*
 * brisk_realloc: resize `p` to `size` bytes, keeping its contents up to the
 * smaller of both sizes. p == NULL behaves as brisk_malloc(size).
 * size == 0 with p != NULL frees p and returns NULL, as glibc does.
 * On failure returns NULL with errno ENOMEM and leaves p untouched.
 */
BRISK_API void *brisk_realloc(void *p, size_t size);

/* brisk_free: release a block from any brisk allocation. NULL does nothing. */
BRISK_API void brisk_free(void *p);

/*
 * brisk_aligned_alloc: `size` bytes aligned to `alignment`, which must be a
 * power of two (any power of two is accepted; alignments above the block
 * size are fine). Returns NULL with errno EINVAL for an alignment that is
 * not a power of two, NULL/ENOMEM when the request can't be served. Unlike
 * C11 aligned_alloc, size need not be a multiple of alignment.
 */
BRISK_API BRISK_ATTR_MALLOC void *brisk_aligned_alloc(size_t alignment, size_t size);

/*
 * brisk_usable_size: how many bytes of the block at p may be used (at least
 * the size asked for; all of them are writable). 0 for NULL.
 */
BRISK_API size_t brisk_usable_size(const void *p);

/*
 * brisk_collect: give back what is held and not used, now instead of on the
 * usual delays. Thread-safe; call it from a thread about to sit idle, or
 * after a peak. It always does this for the calling thread: blocks it freed
 * for other threads are sent to them (they are batched, and would otherwise
 * wait for this thread's next slow path), blocks other threads freed for it
 * are returned to its pages, and its empty pages and cached huge mappings
 * go back to the system; so do the heaps of exited threads that no thread
 * has taken over. With force, the free pages and cached huge mappings of
 * every other thread's heap go back too, including those of threads that
 * are blocked or idle and will not call malloc again (what malloc_trim
 * does). Returns true when memory went back to the system.
 */
BRISK_API bool brisk_collect(bool force);

/* ======================================================================
 * Statistics: the general allocator, the OS calls, and the region
 * allocators by kind, in one snapshot. Counting costs malloc's fast path two
 * plain per-thread adds (its count by size, its requested bytes) and free's
 * nothing; the rest is counted on slow paths and merged on demand.
 *
 * How current a snapshot is: the calling thread's counts are exact, and so
 * are those of exited threads. Another running thread's are as of its last
 * fold: its pages' live blocks are folded into its heap when a page fills
 * or empties, and everything at its first housekeeping (every 64 slow-path
 * mallocs) after a snapshot was asked for; an idle thread's wait until it
 * runs. Frees per class are allocations minus live blocks, so until such a
 * fold another thread's frees lag its allocations.
 * ====================================================================== */

#define BRISK_STATS_VERSION 1
/* Size classes of the general allocator; classes[0] is unused. */
#define BRISK_STATS_CLASSES 106

/* One size class of the general allocator. */
typedef struct brisk_class_stats_s {
  size_t block_size;        /* bytes per block */
  uint64_t allocations;     /* blocks handed out */
  uint64_t frees;           /* blocks given back (by any thread) */
  uint64_t remote_frees;    /* ... of which by a thread other than the owner */
  size_t blocks_in_use;     /* allocations - frees, since the start */
  size_t pages;             /* pages serving the class now */
} brisk_class_stats_t;

typedef struct brisk_general_stats_s {
  uint64_t allocations;     /* every block handed out: classes and huge */
  uint64_t frees;
  uint64_t remote_frees;    /* frees by a thread that does not own the block */
  uint64_t bytes_requested; /* sum of the sizes asked for, ever */
  size_t bytes_in_use;      /* live blocks, by block size (class or huge mapping) */
  size_t bytes_in_use_peak; /* most bytes_in_use at once, to within 256 KiB per
                               thread (threads publish their changes in steps) */
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
  size_t bytes_reserved;    /* address space of those segments and huge blocks */
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

/* What a region allocator has asked of the program and of the system. The
 * words mean the same in every allocator. */
typedef struct brisk_region_stats_s {
  size_t bytes_requested;   /* sum of the sizes callers asked for, ever */
  size_t bytes_in_use;      /* bytes handed out and not yet given back */
  size_t bytes_held;        /* bytes currently taken from the system */
  size_t system_requests;   /* OS calls made so far, each one counted */
  size_t allocations;       /* successful allocation calls, counted */
} brisk_region_stats_t;

/* The live allocators of one kind, summed. A hybrid's pools and buddies are
 * counted under the hybrid only. */
typedef struct brisk_region_kind_stats_s {
  size_t live;              /* created and not yet destroyed */
  uint64_t created;         /* ever */
  brisk_region_stats_t totals;
} brisk_region_kind_stats_t;

typedef struct brisk_stats_s {
  uint32_t version;         /* BRISK_STATS_VERSION of the library that filled it */
  uint32_t size;            /* set by the caller to sizeof(brisk_stats_t) */
  uint64_t time_ms;         /* milliseconds since brisk started (monotonic) */
  brisk_general_stats_t general;
  brisk_class_stats_t classes[BRISK_STATS_CLASSES];
  brisk_os_stats_t os;
  brisk_region_kind_stats_t regions[BRISK_REGION_KINDS];
} brisk_stats_t;

/*
 * brisk_stats_get: a snapshot into *out, whose `size` the caller sets to
 * sizeof(brisk_stats_t) first (a program built against an older, smaller
 * struct gets the fields it knows). Returns 0, or -1 with errno EINVAL for
 * NULL or a size too small for the version and size fields. Allocates
 * nothing; thread-safe.
 */
BRISK_API int brisk_stats_get(brisk_stats_t *out);
/* A human-readable table with units (what BRISK_STATS=1 prints at exit). */
BRISK_API void brisk_stats_print(FILE *out);
/* The same snapshot as one JSON object on one line, ending in a newline. */
BRISK_API void brisk_stats_json(FILE *out);
/* Start the counters again: every count and peak of the general allocator
 * and the OS layer, and the region kinds' `created`, read from now on as if
 * the program started now. Gauges (bytes in use, held) are not touched, nor
 * are the region totals, which are those of the allocators live now. */
BRISK_API void brisk_stats_reset(void);

/* ======================================================================
 * Region allocators: memory whose lifetime the program knows. Each one is
 * built on brisk's OS layer, not on malloc. Statistics are per allocator.
 * ====================================================================== */


/* ---- Arena: a lock-free bump allocator over reserved virtual memory ----
 *
 * brisk_arena_create reserves `reserve` bytes of address space (64 GiB is
 * fine) and commits physical memory lazily, in chunks, as allocation
 * crosses the committed frontier. brisk_arena_alloc may be called by any
 * number of threads at once: it is one atomic fetch_add on the offset.
 * Blocks are never freed one by one; brisk_arena_reset frees all at once.
 */
typedef struct brisk_arena_s brisk_arena_t;

/* NULL/ENOMEM if the address space can't be reserved, EINVAL for 0. */
BRISK_API brisk_arena_t *brisk_arena_create(size_t reserve);
BRISK_API void brisk_arena_destroy(brisk_arena_t *arena);
/*
 * `size` bytes aligned to `align` (a power of two; 0 means 16). Thread-safe
 * and lock-free. NULL/EINVAL for a bad alignment, NULL/ENOMEM when the
 * reservation is exhausted (never an overlapping block). size 0 gives a
 * valid, unique pointer.
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
  const size_t *arena_resets;  /* the arena's reset count... */
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

/* ---- Stack (frame) allocator, after Intersec's t_stack ----
 *
 * Allocations live until the frame they were made in is popped. Frames
 * nest: brisk_stack_pop restores exactly the state of the matching
 * brisk_stack_push. One stack belongs to one thread at a time.
 */
typedef struct brisk_stack_s brisk_stack_t;

/* first_block: size of the first block of memory (0: a sensible default). */
BRISK_API brisk_stack_t *brisk_stack_create(size_t first_block);
BRISK_API void brisk_stack_destroy(brisk_stack_t *stack);
/*
 * Resize p (from this stack, old_size bytes) to new_size: in place when p
 * is the last allocation of the top frame and its block has room, else a
 * copy in the top frame. p == NULL allocates.
 */
BRISK_API void *brisk_stack_realloc(brisk_stack_t *stack, void *p, size_t old_size,
                                    size_t new_size, size_t align);
/* The calling thread's own default stack, created on first use. */
BRISK_API brisk_stack_t *brisk_stack_tls(void);
/*
 * allocations and bytes_requested: successful alloc and realloc calls
 * (a realloc is one allocation of its new size) and the sizes asked.
 * bytes_in_use: the bytes asked in live frames (nothing is rounded).
 * bytes_held: blocks, the stack's own page and its frame records. Exact in
 * the owner's thread; from another thread, a racy read of the owner's
 * counters (each a value it wrote, the set a moment apart).
 */
BRISK_API void brisk_stack_stats(const brisk_stack_t *stack, brisk_region_stats_t *out);

/*
 * Implementation detail of the inline functions below, not API (it may
 * change in any release, with them): the first fields of every
 * brisk_stack_t, which alloc, push and pop use, and one frame record.
 * The library's out-of-line paths (brisk_stack_*_slow_) do everything else.
 */
struct brisk_stack_block_s;
typedef struct brisk_stack_frame_s {
  struct brisk_stack_block_s *blk;
  unsigned char *pos;
  unsigned char *last;
  size_t in_use;
} brisk_stack_frame_t;
typedef struct brisk_stack_hot_s {
  unsigned char *pos;   /* next free byte of the current block */
  unsigned char *end;   /* end of the usable part of the current block */
  unsigned char *last;  /* last allocation of the top frame, NULL if none */
  size_t requested;     /* bytes asked in total */
  size_t average_sum;   /* the seed's running mean of request sizes */
  size_t average_nb;
  size_t average_mark;
  struct brisk_stack_block_s *blk; /* current block */
  brisk_stack_frame_t *frames;     /* frames[depth - 1] is the top frame */
  size_t depth;
  size_t capacity;
  size_t released;      /* bytes given back by pop */
  size_t annotated;     /* ASan build or under Valgrind: pop always goes out of line */
} brisk_stack_hot_t;
#define BRISK_STACK_AVERAGE_MAX_NB_ 65535u
BRISK_API void *brisk_stack_alloc_slow_(brisk_stack_t *stack, size_t size, size_t align);
BRISK_API void brisk_stack_push_slow_(brisk_stack_t *stack);
BRISK_API void brisk_stack_pop_slow_(brisk_stack_t *stack);

/*
 * `size` bytes aligned to `align` (power of two; 0 means 16) in the top
 * frame (or the stack's base frame if none is pushed). NULL/EINVAL for a bad
 * alignment, NULL/ENOMEM when memory can't be had. Inline: a bump of the
 * current block's position; anything else goes to the library.
 */
static inline void *brisk_stack_alloc(brisk_stack_t *stack, size_t size, size_t align) {
  brisk_stack_hot_t *hot = (brisk_stack_hot_t *)stack;
  size_t a = align != 0 ? align : 16;
  uintptr_t at = ((uintptr_t)hot->pos + a - 1) & ~(uintptr_t)(a - 1);
  /* size - 1 wraps for 0, which (like sizes above PTRDIFF_MAX) goes out of line. */
  if (__builtin_expect((a & (a - 1)) == 0 && size - 1 < (size_t)PTRDIFF_MAX &&
                           at + size <= (uintptr_t)hot->end &&
                           hot->average_nb < BRISK_STACK_AVERAGE_MAX_NB_,
                       1)) {
    hot->pos = (unsigned char *)(at + size);
    hot->last = (unsigned char *)at;
    hot->requested += size;
    hot->average_nb += 1;
    return (void *)at;
  }
  return brisk_stack_alloc_slow_(stack, size, align);
}

/* Push a frame: records where the stack stands. Inline. */
static inline void brisk_stack_push(brisk_stack_t *stack) {
  brisk_stack_hot_t *hot = (brisk_stack_hot_t *)stack;
  if (__builtin_expect(hot->depth == hot->capacity, 0)) {
    brisk_stack_push_slow_(stack);
    return;
  }
  brisk_stack_frame_t *frame = &hot->frames[hot->depth++];
  frame->blk = hot->blk;
  frame->pos = hot->pos;
  frame->last = hot->last;
  frame->in_use = hot->requested - hot->released;
  hot->last = NULL;
}

/* Pops the top frame; popping with no frame pushed aborts with a message.
 * Inline when the frame did not leave its block. */
static inline void brisk_stack_pop(brisk_stack_t *stack) {
  brisk_stack_hot_t *hot = (brisk_stack_hot_t *)stack;
  size_t depth = hot->depth;
  if (__builtin_expect(depth != 0 && !hot->annotated, 1)) {
    const brisk_stack_frame_t *frame = &hot->frames[depth - 1];
    if (__builtin_expect(frame->blk == hot->blk, 1)) {
      hot->depth = depth - 1;
      hot->pos = frame->pos;
      hot->last = frame->last;
      hot->released = hot->requested - frame->in_use;
      return;
    }
  }
  brisk_stack_pop_slow_(stack);
}

/* Implementation details of BRISK_STACK_SCOPE: push and return the stack;
 * pop it. */
static inline brisk_stack_t *brisk_stack_scope_begin_(brisk_stack_t *stack) {
  brisk_stack_push(stack);
  return stack;
}
static inline void brisk_stack_scope_end_(brisk_stack_t **stack) { brisk_stack_pop(*stack); }
#define BRISK_STACK_CONCAT2_(a, b) a##b
#define BRISK_STACK_CONCAT_(a, b) BRISK_STACK_CONCAT2_(a, b)
/*
 * BRISK_STACK_SCOPE(stack); pushes a frame that is popped when the
 * enclosing C block ends, however it ends (return, break, goto out):
 *
 *   { BRISK_STACK_SCOPE(s); char *tmp = brisk_stack_alloc(s, 100, 0); ... }
 *
 * `stack` is evaluated once; several scopes may share a block (they pop in
 * reverse order).
 */
#define BRISK_STACK_SCOPE(stack)                                                       \
  brisk_stack_t *BRISK_STACK_CONCAT_(brisk_scope_, __COUNTER__)                         \
      __attribute__((cleanup(brisk_stack_scope_end_), unused)) =                       \
          brisk_stack_scope_begin_(stack)

/* ---- FIFO allocator, after Intersec's mem-fifo ----
 *
 * Variable-size blocks carved in order from pages; a page is reused when all
 * its blocks are freed, so memory freed roughly in allocation order comes
 * back cheaply. Single-threaded by design: one thread at a time per fifo.
 */
typedef struct brisk_fifo_s brisk_fifo_t;

/* page_size: bytes per page (0: 64 KiB). Larger requests get a page of their own. */
BRISK_API brisk_fifo_t *brisk_fifo_create(size_t page_size);
/* Zeroed memory, aligned to 8 bytes at least. NULL/ENOMEM on failure. */
BRISK_API void *brisk_fifo_alloc(brisk_fifo_t *fifo, size_t size);
/*
 * The same pointer when shrinking, or when p is the last block of its page
 * and the page has room; else a new zeroed block with p's contents.
 */
BRISK_API void *brisk_fifo_realloc(brisk_fifo_t *fifo, void *p, size_t new_size);
BRISK_API void brisk_fifo_free(brisk_fifo_t *fifo, void *p);
/*
 * Destroy the fifo. If blocks are still alive, its memory stays until the
 * last of them is freed with brisk_fifo_free (then everything goes).
 */
BRISK_API void brisk_fifo_destroy(brisk_fifo_t *fifo);
/*
 * allocations and bytes_requested: successful alloc and realloc calls
 * (a realloc is one allocation of its new size) and the sizes asked.
 * bytes_in_use: the live blocks with their 8-byte headers, rounded to 16.
 * bytes_held: the pages mapped (kept ones too) and the control page. Exact
 * in the owner's thread; from another thread, as brisk_stack_stats.
 */
BRISK_API void brisk_fifo_stats(const brisk_fifo_t *fifo, brisk_region_stats_t *out);

/* ======================================================================
 * Pools for real-time and networking code: lock-free, bounded, and free of
 * system calls after creation when asked (seeds 000 and 003).
 * ====================================================================== */

/* Flags for brisk_pool_create_ex / brisk_buddy_create_ex. */
#define BRISK_REGION_PREFAULT     0x1u /* fault every page in at create */
#define BRISK_REGION_LOCK         0x2u /* also mlock it (create fails, errno from mlock, if refused) */
#define BRISK_REGION_THREAD_CACHE 0x4u /* a small per-thread cache in front of the shared lists */

/* ---- Fixed-size pool ----
 *
 * Objects of one size carved from one contiguous reservation; free objects
 * hold the link of a lock-free list (ABA-tagged head) split over several
 * shards, found through one atomic bitmap of non-empty shards and ctz.
 * Any thread may allocate and free. With BRISK_REGION_THREAD_CACHE, up to a
 * few dozen objects per thread wait in a per-thread cache, so a bounded
 * pool may report exhaustion while other threads cache free objects.
 */
typedef struct brisk_pool_s brisk_pool_t;

/*
 * obj_size bytes (> 0) aligned to align (power of two up to 4096, 0 means
 * 16). capacity 0: grows slab by slab; otherwise a hard bound on live
 * objects (at most 2^32 - 1), all committed at create (so alloc and free
 * never call the OS; add BRISK_REGION_PREFAULT to take no page fault
 * either). NULL/EINVAL for a bad size, alignment, capacity or flag,
 * NULL/ENOMEM when memory can't be reserved.
 */
BRISK_API brisk_pool_t *brisk_pool_create(size_t obj_size, size_t align, size_t capacity);
BRISK_API brisk_pool_t *brisk_pool_create_ex(size_t obj_size, size_t align, size_t capacity,
                                             unsigned flags);
/* An object, uninitialised. NULL/ENOMEM when the capacity is reached. */
BRISK_API void *brisk_pool_alloc(brisk_pool_t *pool);
/* NULL does nothing. A pointer outside the pool, not at an object's start,
 * or at an object never handed out aborts with a message; so does a double
 * free in debug builds (BRISK_DEBUG). */
BRISK_API void brisk_pool_free(brisk_pool_t *pool, void *p);
BRISK_API void brisk_pool_destroy(brisk_pool_t *pool);
/*
 * allocations: successful brisk_pool_alloc calls, counted per thread;
 * bytes_requested: allocations x obj_size (what each call asks for).
 * bytes_in_use: objects in use x their stride (obj_size rounded up to the
 * alignment). bytes_held: header and committed objects. Any thread, any
 * time: per-thread counts summed without stopping their threads.
 */
BRISK_API void brisk_pool_stats(const brisk_pool_t *pool, brisk_region_stats_t *out);

/*
 * A local cache: one thread's private stack of a pool's free objects, used
 * inline (no call, no atomic, no TLS lookup): what a packet loop or a game
 * frame holds on to. Objects come from the pool in batches through
 * brisk_pool_alloc and go back through brisk_pool_free, so every check and
 * count of the pool applies at the boundary; objects sitting in a local
 * cache count as in use in the pool's statistics.
 *
 *   brisk_pool_local_t local;
 *   brisk_pool_local_init(&local, pool, 0);     (0: up to 32 objects)
 *   p = brisk_pool_local_alloc(&local);  ...  brisk_pool_local_free(&local, p);
 *   brisk_pool_local_flush(&local);             (before the thread or the cache goes)
 *
 * One thread per local cache. Its inline free checks only that p lies in
 * objects the pool has handed out; a double free or an interior pointer
 * given to it is not caught (as brisk_free's fast path). Objects not
 * flushed are lost to the pool until it is destroyed. Debug, ASan and
 * Valgrind builds send every call through the pool itself.
 */
typedef struct brisk_pool_local_s {
  void *head;        /* free objects, each holding the next in its first 8 bytes */
  unsigned count;    /* objects in the list */
  unsigned max;      /* a free with this many hands half back; 0: always out of line */
  uintptr_t lo;      /* the pool's first object... */
  uintptr_t span;    /* ...and the bytes from there that the pool had handed out */
  brisk_pool_t *pool;
} brisk_pool_local_t;

/* max: objects to keep at most (0: 32; at least 2). */
BRISK_API void brisk_pool_local_init(brisk_pool_local_t *local, brisk_pool_t *pool, unsigned max);
/* Every cached object back to the pool. */
BRISK_API void brisk_pool_local_flush(brisk_pool_local_t *local);
BRISK_API void *brisk_pool_local_alloc_slow_(brisk_pool_local_t *local);
BRISK_API void brisk_pool_local_free_slow_(brisk_pool_local_t *local, void *p);

/* An object of the pool; NULL/ENOMEM as brisk_pool_alloc. Inline. */
static inline void *brisk_pool_local_alloc(brisk_pool_local_t *local) {
  void *p = local->head;
  if (__builtin_expect(p != NULL, 1)) {
    local->head = *(void **)p;
    local->count -= 1;
    return p;
  }
  return brisk_pool_local_alloc_slow_(local);
}

/* NULL does nothing. Inline while p is in range and the cache has room. */
static inline void brisk_pool_local_free(brisk_pool_local_t *local, void *p) {
  if (__builtin_expect((uintptr_t)p - local->lo < local->span && local->count < local->max, 1)) {
    *(void **)p = local->head;
    local->head = p;
    local->count += 1;
    return;
  }
  brisk_pool_local_free_slow_(local, p);
}

/* ---- Buddy allocator (after Marotta et al., "A Non-blocking Buddy System") ----
 *
 * Power-of-two blocks from min_block up to max_block over one reservation,
 * tracked in an implicit binary tree whose nodes change only by atomic
 * operations: no lock. Blocks are aligned to their own size.
 */
typedef struct brisk_buddy_s brisk_buddy_t;

/* total and min_block are rounded up to powers of two (min_block at least
 * 16); blocks up to `total`. NULL/EINVAL for 0 or min_block > total. */
BRISK_API brisk_buddy_t *brisk_buddy_create(size_t total, size_t min_block);
/* max_block (0: total) caps the block size; total becomes a multiple of it
 * and the region a row of max_block trees, which spreads contention.
 * Unknown flags: EINVAL. */
BRISK_API brisk_buddy_t *brisk_buddy_create_ex(size_t total, size_t min_block, size_t max_block,
                                               unsigned flags);
/* NULL/EINVAL for size 0 or a bad alignment; NULL/ENOMEM when no block of
 * the size fits (size or alignment above max_block included). The block is
 * size rounded up to a power of two (at least min_block and align) and is
 * aligned to that. */
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

/* ---- Hybrid bounded pool (seed 003) ----
 *
 * Fixed-size buckets (lock-free pools) in front of buddy regions, all
 * reserved (and optionally pre-faulted and locked) at creation, so alloc
 * and free make no system call afterwards. Frees dispatch by address
 * through a read-only table of ranges.
 */
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
 * fallback: any size up to 1 MiB without further setup. */
BRISK_API void brisk_hybrid_default_config(brisk_hybrid_config_t *out);
/* NULL config: the default. NULL/EINVAL for a bad config, ENOMEM (or
 * mlock's errno) when memory can't be reserved. */
BRISK_API brisk_hybrid_t *brisk_hybrid_create(const brisk_hybrid_config_t *config);
/*
 * The smallest bucket that holds size, if its objects have the alignment
 * (align 0: what malloc would give, 16 for sizes that are multiples of 16,
 * else 8); then each buddy region; then brisk_malloc if the config allows
 * it. NULL/EINVAL for size 0 or an alignment that is not a power of two;
 * NULL/ENOMEM when every section is full. Lock-free, no system call.
 */
BRISK_API void *brisk_hybrid_alloc(brisk_hybrid_t *hybrid, size_t size, size_t align);
/* NULL does nothing; a pointer from no section (and not from brisk_malloc
 * with the fallback on) aborts with a message. */
BRISK_API void brisk_hybrid_free(brisk_hybrid_t *hybrid, void *p);
BRISK_API void brisk_hybrid_destroy(brisk_hybrid_t *hybrid);

typedef struct brisk_hybrid_section_stats_s {
  size_t block_size;     /* bucket object size, or 0 for a buddy region */
  size_t bytes_reserved; /* memory the section owns */
  size_t in_use;         /* bytes in live blocks now */
  size_t high_water;     /* most bytes in live blocks at once; for a bucket,
                            the bytes of objects ever taken from its store,
                            which with THREAD_CACHE counts objects cached
                            per thread too (up to 16 per refill) */
  size_t allocations;    /* successful allocations */
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
 * bytes_held: its sections' (a fallback block is the general allocator's),
 * bytes_held plus the hybrid's own pages. system_requests: the hybrid's
 * and its sections', all made at creation. Any thread, any time.
 */
BRISK_API void brisk_hybrid_totals(const brisk_hybrid_t *hybrid, brisk_region_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_H */
