/*
 * annotate.h — tell AddressSanitizer and Valgrind what brisk's region
 * allocators hand out and take back, so a use after pop/reset/free is
 * caught by ASan and Valgrind's memcheck sees region objects as heap blocks.
 * Every function compiles to nothing when neither tool is in play (Valgrind
 * client requests cost a handful of instructions when not under Valgrind).
 */
#ifndef BRISK_BASE_ANNOTATE_H
#define BRISK_BASE_ANNOTATE_H

#include "base/base.h"

#if BRISK_ASAN /* base.h */
#include <sanitizer/asan_interface.h>
#endif

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>) && !BRISK_SANITIZED
#include <valgrind/memcheck.h>
#define BRISK_VALGRIND 1
#endif
#endif
#ifndef BRISK_VALGRIND
#define BRISK_VALGRIND 0
#endif

#if BRISK_VALGRIND
/* Whether the process runs under Valgrind, asked once at load time: a
 * client request costs a few nanoseconds even outside Valgrind, too much
 * for a region allocator's fast path; a predictable branch costs nothing. */
extern BRISK_HIDDEN bool _brisk_under_valgrind;
#define BRISK_IF_VALGRIND(statement)                 \
  do {                                               \
    if (BRISK_UNLIKELY(_brisk_under_valgrind)) {     \
      statement;                                     \
    }                                                \
  } while (0)
#else
#define BRISK_IF_VALGRIND(statement) ((void)0)
#endif

/*
 * Whether a tool watches each block: an ASan build, or a Valgrind tool
 * that tracks heap blocks (annotate.c). Region allocators whose inline or
 * bulk paths skip the per-block annotations ask this once, at creation,
 * and take their annotated paths when it is true.
 */
BRISK_INLINE bool brisk_tools_watch_blocks(void) {
#if BRISK_ASAN
  return true;
#elif BRISK_VALGRIND
  return _brisk_under_valgrind;
#else
  return false;
#endif
}

/* A block of `size` bytes at p is handed to the program. */
BRISK_INLINE void brisk_annotate_alloc(void *p, size_t size, bool zeroed) {
#if BRISK_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
  BRISK_IF_VALGRIND(VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zeroed));
  (void)p;
  (void)size;
  (void)zeroed;
}

/* The block at p (size bytes) is given back: any further use is an error. */
BRISK_INLINE void brisk_annotate_free(void *p, size_t size) {
  BRISK_IF_VALGRIND(VALGRIND_FREELIKE_BLOCK(p, 0));
#if BRISK_ASAN
  ASAN_POISON_MEMORY_REGION(p, size);
#endif
  (void)p;
  (void)size;
}

/* Memory the allocator owns but has not handed out (free space of a page). */
BRISK_INLINE void brisk_annotate_no_access(void *p, size_t size) {
#if BRISK_ASAN
  ASAN_POISON_MEMORY_REGION(p, size);
#endif
  BRISK_IF_VALGRIND(VALGRIND_MAKE_MEM_NOACCESS(p, size));
  (void)p;
  (void)size;
}

/* Memory the allocator itself is about to read or write (its own headers). */
BRISK_INLINE void brisk_annotate_internal(void *p, size_t size) {
#if BRISK_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
  BRISK_IF_VALGRIND(VALGRIND_MAKE_MEM_DEFINED(p, size));
  (void)p;
  (void)size;
}

/* ---- Allocators as Valgrind mempools (the arena, the pool, the buddy) ----
 *
 * An allocator whose blocks can go all at once (an arena's reset) is a
 * Valgrind mempool whose handle is its header: MALLOCLIKE blocks
 * (brisk_annotate_alloc) cannot be freed all at once, and memcheck's leak
 * check aborts ("the impossible happened") once the address of a block
 * never freed is handed out again. A mempool is emptied by destroying it.
 * Under ASan its blocks are unpoisoned and poisoned as above.
 */

#if BRISK_VALGRIND
/* The Valgrind requests of alloc and free, out of line: a client request's
 * argument block would give the caller's fast path a stack frame. Static
 * (a copy per file that uses them), so that GCC knows which registers they
 * leave alone and the fast path saves none around the call. */
static BRISK_NOINLINE __attribute__((unused)) void *
brisk_valgrind_mempool_alloc(const void *pool, void *p, size_t size) {
  VALGRIND_MEMPOOL_ALLOC(pool, p, size);
  return p;
}

static BRISK_NOINLINE __attribute__((unused)) void *
brisk_valgrind_mempool_alloc_clear(const void *pool, void *p, size_t size, size_t word_at) {
  VALGRIND_MEMPOOL_ALLOC(pool, p, size);
  *(uintptr_t *)(void *)((char *)p + word_at) = 0;
  return p;
}

static BRISK_NOINLINE __attribute__((unused)) void
brisk_valgrind_mempool_free(const void *pool, void *p, size_t keep) {
  VALGRIND_MEMPOOL_FREE(pool, p);
  if (keep != 0) VALGRIND_MAKE_MEM_DEFINED(p, keep);
}
#endif

BRISK_INLINE void brisk_annotate_mempool_create(const void *pool) {
  BRISK_IF_VALGRIND(VALGRIND_CREATE_MEMPOOL(pool, 0, 0));
  (void)pool;
}

/* Every block of the mempool is given back with it. */
BRISK_INLINE void brisk_annotate_mempool_destroy(const void *pool) {
  BRISK_IF_VALGRIND(VALGRIND_DESTROY_MEMPOOL(pool));
  (void)pool;
}

/* The allocator goes: its mempool, every block with it, and then the size
 * bytes at p (where its blocks lay) plain memory again for whatever is
 * laid there next (the next allocator to take the mapping from the OS
 * layer's cache). In this order: destroying a Valgrind mempool makes its
 * live blocks no-access. */
BRISK_INLINE void brisk_annotate_mempool_release(const void *pool, void *p, size_t size) {
  brisk_annotate_mempool_destroy(pool);
  brisk_annotate_internal(p, size);
}

/* A block of `size` bytes at p goes to the program; returns p (so that a
 * fast path may end in a tail call). */
BRISK_INLINE void *brisk_annotate_mempool_alloc(const void *pool, void *p, size_t size) {
#if BRISK_VALGRIND
  if (BRISK_UNLIKELY(_brisk_under_valgrind)) return brisk_valgrind_mempool_alloc(pool, p, size);
#endif
#if BRISK_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
  (void)pool;
  (void)size;
  return p;
}

/* As brisk_annotate_mempool_alloc, then the word at p + word_at (inside
 * the block) set to 0, once the tools let the allocator write it: still
 * one tail call at most. */
BRISK_INLINE void *brisk_annotate_mempool_alloc_clear(const void *pool, void *p, size_t size,
                                                      size_t word_at) {
#if BRISK_VALGRIND
  if (BRISK_UNLIKELY(_brisk_under_valgrind))
    return brisk_valgrind_mempool_alloc_clear(pool, p, size, word_at);
#endif
#if BRISK_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
  (void)pool;
  (void)size;
  *(uintptr_t *)(void *)((char *)p + word_at) = 0;
  return p;
}

/* The block at p (size bytes) comes back: no access but its first `keep`
 * bytes, which the allocator goes on using (a free list's link; ASan keeps
 * whole 8-byte granules, so keep is rounded up to 8 there). */
BRISK_INLINE void brisk_annotate_mempool_free(const void *pool, void *p, size_t size, size_t keep) {
  BRISK_IF_VALGRIND(brisk_valgrind_mempool_free(pool, p, keep));
#if BRISK_ASAN
  size_t kept = brisk_align_up(keep, 8);
  if (size > kept) ASAN_POISON_MEMORY_REGION((char *)p + kept, size - kept);
#endif
  (void)pool;
  (void)p;
  (void)size;
  (void)keep;
}

#endif /* BRISK_BASE_ANNOTATE_H */
