/*
 * api.c — the brisk_* functions of <brisk/malloc.h> over the fast paths in alloc.h,
 * plus what every entry point shares: aligned allocation, realloc and usable
 * size.
 */
#include <brisk/malloc.h>
#include "general/alloc.h"
#include "general/size_class.h"
#include "os/os.h"

#include <errno.h>
#include <string.h>

/* Mark a page as one that holds blocks handed out at an interior address. */
static void page_mark_aligned(uint8_t *block) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)block);
  brisk_page_t *page = brisk_page_of(segment, (uintptr_t)block);
  _Atomic(uint8_t) *info = brisk_page_info(page);
  brisk_store_relaxed(info, (uint8_t)(brisk_load_relaxed(info) | BRISK_PAGE_INFO_ALIGNED));
}

/* An aligned block too big for a size class once padded: its own mapping,
 * counted as malloc's slow path counts a huge block. */
static void *huge_aligned(brisk_heap_t *heap, size_t size, size_t alignment, bool zero) {
  void *p = _brisk_huge_alloc(heap, size, alignment, zero);
  if (p != NULL) brisk_count_requested(0, size);
  return p;
}

/* The secure build's aligned blocks of a size class: always over-allocated
 * (an interior address when the block start is not aligned), with room for
 * the canary after the requested size and the next block's header. A
 * request under 16 bytes starts 16 bytes in at least, so that its canary
 * stays off the block's free tag (BRISK_SECURE_SMALL_BLOCK, internal.h). */
static void *secure_malloc_aligned(brisk_heap_t *heap, size_t size, size_t alignment, bool zero) {
  /* Either alone past a size class is huge; tested apart, since the sum
   * below wraps for a size near PTRDIFF_MAX with an alignment of 2^63. */
  if (size > BRISK_LARGE_MAX || alignment > BRISK_LARGE_MAX) {
    return huge_aligned(heap, size, alignment, zero);
  }
  size_t lead = size < 16 ? 16 : 0;
  size_t padded = lead + size + alignment - 1 + BRISK_SECURE_OVERHEAD;
  if (padded > BRISK_LARGE_MAX) return huge_aligned(heap, size, alignment, zero);
  uint8_t *block = brisk_malloc_raw(padded);
  if (block == NULL) return NULL;
  brisk_count_requested(padded, size);
  uint8_t *aligned = (uint8_t *)brisk_align_up((uintptr_t)block + lead, alignment);
  if (aligned != block) page_mark_aligned(block);
  brisk_secure_stamp(block, brisk_block_secret(block), aligned, size);
  if (zero) memset(aligned, 0, size);
  return aligned;
}

void *_brisk_malloc_aligned(size_t size, size_t alignment, bool zero) {
  if (alignment <= 8) return zero ? brisk_calloc(1, size) : brisk_malloc_inline(size);
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  /* A class whose block size is a multiple of the alignment hands out
   * aligned blocks: page starts are 4 KiB-aligned at least. */
  size_t rounded = brisk_align_up(size == 0 ? 1 : size, alignment);
  if (!BRISK_SECURE && rounded <= BRISK_LARGE_MAX && alignment <= 4096 &&
      brisk_class_to_size(brisk_size_to_class(rounded)) % alignment == 0) {
    void *p = brisk_malloc_inline(rounded);
    if (p != NULL) {
      brisk_count_requested(rounded, size);
      if (zero) memset(p, 0, size);
    }
    return p;
  }
  /* A thread's first call makes its heap. After its exit handler ran, the
   * empty heap stands in: malloc_slow takes a heap for the one allocation
   * and hands it back, and a huge block needs none. */
  brisk_heap_t *heap = _brisk_tls_heap;
  if (BRISK_UNLIKELY(heap->is_empty_heap) && !_brisk_thread_exited) {
    heap = _brisk_heap_init_thread(false);
    if (heap == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  if (BRISK_SECURE) return secure_malloc_aligned(heap, size, alignment, zero);
  size_t padded = size + alignment - 1;
  if (padded > BRISK_LARGE_MAX) return huge_aligned(heap, size, alignment, zero);

  /* Over-allocate inside a class and hand out an interior address; the page
   * is flagged so that free() finds the block start again. */
  uint8_t *block = _brisk_malloc_generic(padded, heap, false);
  if (block == NULL) return NULL;
  brisk_count_requested(padded, size);
  uint8_t *aligned = (uint8_t *)brisk_align_up((uintptr_t)block, alignment);
  if (aligned != block) page_mark_aligned(block);
  if (zero) memset(aligned, 0, size);
  return aligned;
}

/* ---- the public API ---- */

void *brisk_malloc(size_t size) { return brisk_malloc_inline(size); }

void brisk_free(void *p) { brisk_free_inline(p); }

void *brisk_calloc(size_t count, size_t size) {
  size_t total;
  if (brisk_mul_overflows(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  brisk_heap_t *heap = _brisk_tls_heap;
  /* The secure build's blocks take their canary from its malloc. */
  if (BRISK_SECURE) return _brisk_secure_malloc(total, true);
  if (BRISK_LIKELY(total <= BRISK_DIRECT_MAX)) {
    void *p = brisk_malloc_inline(total);
    if (p != NULL) memset(p, 0, total);
    return p;
  }
  return _brisk_malloc_generic(total, heap, true);
}

void *brisk_aligned_alloc(size_t alignment, size_t size) {
  if (!brisk_is_power_of_two(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return _brisk_malloc_aligned(size, alignment, false);
}

bool brisk_collect(bool force) {
  brisk_heap_t *heap = _brisk_tls_heap;
  uint64_t releases_before = _brisk_os_thread_releases();
  if (!heap->is_empty_heap) _brisk_heap_collect(heap);
  _brisk_heaps_tidy_all();
  if (force) {
    _brisk_heaps_trim_others(heap);
    _brisk_os_cache_flush(); /* mappings kept for the next region allocator */
  } else {
    _brisk_os_cache_expire(_brisk_os_now_ms());
  }
  /* All of the above runs on this thread: memory went back when it
   * unmapped or decommitted anything. */
  return _brisk_os_thread_releases() != releases_before;
}

size_t brisk_usable_size(const void *p) {
  if (p == NULL) return 0;
  return _brisk_block_usable_size(_brisk_checked_segment(p, "malloc_usable_size"), p, "malloc_usable_size");
}

/* The block must move: a new one (a quarter bigger when growing: code that
 * grows a buffer by small appends then moves once per ~two size classes
 * instead of once per class, copying less and leaving fewer partly used
 * pages behind), the contents, and the old one freed. */
static void *realloc_move(void *p, size_t usable, size_t size) {
  void *q = NULL;
  if (size > usable && size <= BRISK_LARGE_MAX) q = brisk_malloc_inline(size + size / 4);
  if (q == NULL) q = brisk_malloc_inline(size);
  if (q == NULL) return NULL; /* p stays intact; errno is ENOMEM */
  memcpy(q, p, size < usable ? size : usable);
  brisk_free_inline(p);
  return q;
}

/* The secure build's realloc: the block's checks (a freed block, an
 * overflow) through _brisk_block_usable_size, which gives the requested
 * size; a block of a size class always moves, so its canary follows the new
 * size. The checks come first for a huge block too: resizing it in place
 * writes its canary anew at the new size. */
static void *secure_realloc(void *p, size_t size) {
  brisk_segment_t *segment = _brisk_checked_segment(p, "realloc");
  size_t usable = _brisk_block_usable_size(segment, p, "realloc");
  if (size == 0) {
    brisk_free_inline(p);
    return NULL;
  }
  if (segment->kind == BRISK_KIND_HUGE && size > BRISK_LARGE_MAX) {
    void *resized = _brisk_huge_realloc(segment, p, size);
    if (resized != NULL) return resized;
  }
  void *q = brisk_malloc_inline(size);
  if (q == NULL) return NULL; /* p stays intact; errno is ENOMEM */
  memcpy(q, p, size < usable ? size : usable);
  brisk_free_inline(p);
  return q;
}

/* realloc(p, 0) frees p, after the checks of p that every realloc makes,
 * so that a bad pointer is named for the call the program made. */
void *brisk_realloc(void *p, size_t size) {
  if (p == NULL) return brisk_malloc_inline(size);
  if (BRISK_SECURE) return secure_realloc(p, size);
  /* A live block of a size class, the common case: the segment map, owner
   * and block-start checks of the slow path, in a few instructions. A block
   * is kept when the new size fits and wastes at most half of it. */
  uintptr_t address = (uintptr_t)p;
  /* A huge block is told by the segment map, not its header (which a write
   * before the block can reach): the slow path checks that header. */
  size_t map_shift = brisk_segment_map_shift(address);
  if (BRISK_LIKELY((address & BRISK_SEGMENT_MASK) != 0 && map_shift != 0 &&
                   map_shift != BRISK_HUGE_PAGE_SHIFT)) {
    const brisk_segment_t *segment = brisk_segment_of(address);
    const brisk_page_t *page = brisk_page_of(segment, address);
    /* 0 for a page serving no class. */
    uint8_t info = brisk_load_relaxed(&segment->page_info[brisk_page_index(segment, address)]);
    if (BRISK_LIKELY(info != 0 && !(info & BRISK_PAGE_INFO_ALIGNED))) {
      if (!brisk_page_is_block_start(page, address)) {
        _brisk_fatal_not_block_start("realloc", p, page);
      }
      /* Before the block is kept or copied: a freed one would be handed out
       * twice, or named for the free below. */
      if (BRISK_UNLIKELY(brisk_page_counts_no_live_block(segment, page))) {
        _brisk_fatal_freed_block("realloc", p, page);
      }
      if (size == 0) {
        brisk_free_inline(p);
        return NULL;
      }
      size_t usable = brisk_page_block_size(page);
      if (size <= usable && size >= usable / 2) return p;
      return realloc_move(p, usable, size);
    }
  }
  brisk_segment_t *segment = _brisk_checked_segment(p, "realloc");
  if (size == 0) {
    (void)_brisk_block_usable_size(segment, p, "realloc"); /* its checks */
    brisk_free_inline(p);
    return NULL;
  }
  if (segment->kind == BRISK_KIND_HUGE && size > BRISK_LARGE_MAX) {
    void *resized = _brisk_huge_realloc(segment, p, size);
    if (resized != NULL) return resized;
  }
  size_t usable = _brisk_block_usable_size(segment, p, "realloc");
  if (size <= usable && size >= usable / 2) return p;
  return realloc_move(p, usable, size);
}
