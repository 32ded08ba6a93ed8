/*
 * alloc.h — malloc's and free's fast paths, inline for api.c and override/.
 *
 * Call tree:
 *   brisk_malloc_inline(size)
 *     size <= 1 KiB and the page has a free block: pop it        (fast)
 *     else _brisk_malloc_generic                                  (page.c)
 *   brisk_free_inline(p)
 *     p is NULL or a segment-aligned huge block: _brisk_free_generic
 *     p outside brisk's segments: _brisk_fatal_pointer (abort)
 *     page owned by this thread's heap: push to page->local_free  (fast)
 *       page became empty or was full: _brisk_page_free_slow     (page.c)
 *     else _brisk_free_not_local(segment, page): remote push, huge,
 *       interior aligned pointers, misuse (page.c); the segment and page
 *       found here are passed on, not looked up again
 *
 * No atomics and no locks on either fast path; the only shared word read is
 * page->owner (relaxed; see types.h).
 */
#ifndef BRISK_GENERAL_ALLOC_H
#define BRISK_GENERAL_ALLOC_H

#include "general/internal.h"

BRISK_INLINE void *brisk_malloc_inline(size_t size) {
  brisk_heap_t *heap = _brisk_tls_heap;
  if (BRISK_LIKELY(size <= BRISK_DIRECT_MAX)) {
    brisk_page_t *page = heap->direct[(size + 7) >> 3];
    brisk_block_t *block = page->free;
    if (BRISK_LIKELY(block != NULL)) {
      page->free = block->next;
      page->used++;
      return block;
    }
  }
  return _brisk_malloc_generic(heap, size, false);
}

/* True when p's segment slot belongs to brisk. */
BRISK_INLINE bool brisk_segment_map_contains(uintptr_t address) {
  size_t slot = address >> BRISK_SEGMENT_SHIFT;
  return slot < BRISK_SEGMENT_MAP_SIZE && brisk_load_relaxed(&_brisk_segment_map[slot]) != 0;
}

BRISK_INLINE void brisk_free_inline(void *p) {
  uintptr_t address = (uintptr_t)p;
  /* One test catches NULL and a block aligned to a whole segment (its header
   * sits one segment below): no small block is ever at offset 0. */
  if (BRISK_UNLIKELY((address & BRISK_SEGMENT_MASK) == 0)) {
    _brisk_free_generic(p);
    return;
  }
  if (BRISK_UNLIKELY(!brisk_segment_map_contains(address))) {
    _brisk_fatal_pointer("free", p, "not allocated by brisk");
  }
  brisk_segment_t *segment = brisk_segment_of(address);
  brisk_page_t *page = brisk_page_of(segment, address);
  brisk_heap_t *heap = _brisk_tls_heap;
  if (BRISK_LIKELY(brisk_load_relaxed(&page->owner) == (uintptr_t)heap)) {
    brisk_block_t *block = (brisk_block_t *)p;
    block->next = page->local_free;
    page->local_free = block;
    if (BRISK_UNLIKELY((int32_t)--page->used <= 0)) _brisk_page_free_slow(heap, page);
    return;
  }
  _brisk_free_not_local(segment, page, p);
}

#endif /* BRISK_GENERAL_ALLOC_H */
