/*
 * brisk/malloc.h — the general allocator under brisk's own names, and the
 * library's version.
 *
 * Linking libbrisk (-lbrisk) or preloading it (LD_PRELOAD=libbrisk.so)
 * replaces malloc, free and the C++ operators new/delete for the whole
 * program; the functions below reach the same allocator under their own
 * names, which is what a program (or a sanitizer build, whose runtime owns
 * malloc) uses to call brisk explicitly.
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
#ifndef BRISK_MALLOC_H
#define BRISK_MALLOC_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
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
 * A block from brisk_aligned_alloc (or memalign, posix_memalign) keeps its
 * alignment only when realloc returns p itself; a block that moves is
 * aligned as brisk_malloc's are, as with glibc's realloc.
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
 * has taken over, and the mappings of destroyed region allocators that
 * have waited a second for the next one. With force, the free pages and
 * cached huge mappings of every other thread's heap go back too, including
 * those of threads that are blocked or idle and will not call malloc again
 * (what malloc_trim does), and every mapping kept for region allocators.
 * Returns true when this call gave memory back to the system.
 */
BRISK_API bool brisk_collect(bool force);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_MALLOC_H */
