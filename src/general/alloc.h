/*
 * alloc.h — malloc's and free's fast paths, inline for api.c and override/.
 *
 * Call tree:
 *   brisk_malloc_inline(size)
 *     size <= 1 KiB and the page has a free block: pop it        (fast)
 *     else _brisk_malloc_generic                                  (page.c)
 *   brisk_free_inline(p)
 *     p's segment slot is not brisk's (NULL, a foreign pointer, a
 *       segment-aligned huge block): _brisk_free_generic          (free.c)
 *     page owned by this thread's heap: push to page->local_free  (fast)
 *       p not a block's start (one multiplication, internal.h's
 *         brisk_page_is_block_start): "not the start of a block", abort
 *       page became empty or was full: _brisk_page_free_slow     (page.c)
 *     else _brisk_free_not_local(p, page): remote frees into the
 *       outbox, huge blocks, interior aligned pointers, misuse    (free.c)
 *
 * No atomics and no locks on either fast path; the shared words read are the
 * segment map and page->owner (both relaxed; see types.h).
 */
#ifndef BRISK_GENERAL_ALLOC_H
#define BRISK_GENERAL_ALLOC_H

#include "general/internal.h"

BRISK_INLINE void *brisk_malloc_inline(size_t size) {
  brisk_heap_t *heap = _brisk_tls_heap;
  if (BRISK_LIKELY(size <= BRISK_DIRECT_MAX)) {
    size_t word = (size + 7) >> 3;
    brisk_page_t *page = heap->direct[word];
    brisk_block_t *block = page->free;
    if (BRISK_LIKELY(block != NULL)) {
      page->free = block->next;
      page->used++;
      /* Statistics: two plain adds to the heap's own lines. */
      heap->small_allocations_unfolded[word]++;
      heap->bytes_requested_unfolded += size;
      return block;
    }
  }
  return _brisk_malloc_generic(size, heap, false);
}

BRISK_INLINE void brisk_free_inline(void *p) {
  uintptr_t address = (uintptr_t)p;
  size_t page_shift = brisk_segment_map_shift(address);
  if (BRISK_UNLIKELY(page_shift == 0)) {
    _brisk_free_generic(p);
    return;
  }
  brisk_segment_t *segment = brisk_segment_of(address);
  brisk_page_t *page = &segment->pages[(address & BRISK_SEGMENT_MASK) >> page_shift];
  BRISK_KEEP_IN_REGISTER(page);
  brisk_heap_t *heap = _brisk_tls_heap;
  if (BRISK_LIKELY(brisk_load_relaxed(&page->owner) == (uintptr_t)heap)) {
    brisk_block_t *block = (brisk_block_t *)p;
    block->next = page->local_free;
    page->local_free = block;
    /* A pointer inside a block (free(p + 32)) must not stay on the list,
     * where malloc would hand it out over live blocks. Tested after the
     * push, which leaves p's register free for the test; the failure path
     * reads p back from local_free and aborts. */
    if (BRISK_UNLIKELY(!brisk_page_is_block_start(page, address))) {
      _brisk_free_local_not_block_start(page);
    }
    /* One test for "now empty" and for the full flag (the sign bit). */
    if (BRISK_UNLIKELY(brisk_decrement_was_at_most_one(&page->used))) {
      _brisk_page_free_slow(heap, page);
    }
    return;
  }
  _brisk_free_not_local(p, page);
}

#endif /* BRISK_GENERAL_ALLOC_H */
