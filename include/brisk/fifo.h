/*
 * brisk/fifo.h — the FIFO allocator, after Intersec's mem-fifo.
 *
 * Variable-size blocks carved in order from pages; a page is reused when all
 * its blocks are freed, so memory freed roughly in allocation order comes
 * back cheaply. Single-threaded by design: one thread at a time per fifo.
 *
 * A NULL fifo: brisk_fifo_realloc fails with EINVAL, destroy does
 * nothing, brisk_fifo_stats gives all zero; the library's exported
 * brisk_fifo_alloc fails with EINVAL too, and its brisk_fifo_free aborts
 * with a message for a block (NULL does nothing). The inline
 * brisk_fifo_alloc and brisk_fifo_free that a program compiles read the
 * fifo without a test: a NULL fifo crashes them.
 *
 * A destroyed fifo: brisk_fifo_destroy of it again (or of another kind's
 * handle) aborts with a message (brisk/region.h: destroyed handles). So
 * does every other call with it but the free of a block it still holds
 * ("brisk: brisk_fifo_alloc(<fifo>): not a live fifo (destroyed
 * already?)"): alloc, realloc and stats while its live blocks keep it,
 * and once it holds none (destroyed without live blocks, or after the
 * last one's free) a free of any pointer too, while the mapping cache
 * keeps its control page (a second, by default); at no cost to a live
 * fifo's inline paths. Once the control page went back to the system
 * they may crash (SIGSEGV); once another fifo took it (as its control
 * page, or with 4 KiB pages as a page) they work on that fifo's memory.
 */
#ifndef BRISK_FIFO_H
#define BRISK_FIFO_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_fifo_s brisk_fifo_t;

/* page_size: bytes per page (0: 64 KiB; rounded up to OS pages; above
 * 1 GiB, 1 GiB). Larger requests get a page of their own. NULL/ENOMEM
 * when the system refuses the memory. */
BRISK_API brisk_fifo_t *brisk_fifo_create(size_t page_size);
/*
 * brisk_fifo_alloc(fifo, size): zeroed memory, 16-aligned (every block,
 * those on a page of their own too: its 8-byte header sits 8 bytes past a
 * multiple of 16); NULL/ENOMEM on failure. brisk_fifo_free(fifo, p): NULL
 * does nothing; a pointer that is not a live block of this fifo (freed
 * already, of another fifo, no fifo's at all) aborts with a message. Both
 * are inline (below); the library exports them too, for callers that
 * cannot inline them. The inline free reads the 8 bytes before a
 * 16-aligned p before it knows where p lies (one load, no lookup): a p
 * whose preceding bytes are not mapped or not readable (the first bytes
 * of a mapping after a hole or a guard page; a buddy allocator's or a
 * hybrid's first block), or a p in memory no longer mapped (a block freed
 * again after its page went back to the system: at once for a block of
 * 1 MiB or more, else once the mapping cache lets the page go), crashes
 * it (SIGSEGV). The exported free sends a p at the start of a 4 KiB page
 * out of line, where p is looked up among the fifo's pages first and gets
 * its message; it reads the bytes before any other p, which lie on p's
 * own page, so a p in memory no longer mapped crashes it too.
 */
/*
 * The same pointer when shrinking, or when p is the last block of its page
 * and the page has room; else a new zeroed block with p's contents. p ==
 * NULL allocates; NULL/ENOMEM when memory can't be had (p is left as it
 * was). A p that is not a live block of this fifo aborts with a message,
 * as brisk_fifo_free's: realloc looks p up among the fifo's pages before
 * it reads anything at or before p.
 */
BRISK_API void *brisk_fifo_realloc(brisk_fifo_t *fifo, void *p, size_t new_size);
/*
 * Destroy the fifo. If blocks are still alive, its memory stays until the
 * last of them is freed with brisk_fifo_free (then everything goes).
 */
BRISK_API void brisk_fifo_destroy(brisk_fifo_t *fifo);
/*
 * allocations and bytes_requested: successful alloc and realloc calls
 * (a realloc is one allocation of its new size) and the sizes asked.
 * bytes_in_use: the live blocks with their 8-byte headers, rounded to 16;
 * a block bigger than a page counts the whole mapping of its own after the
 * page header (OS pages, and the color its address gives it), rounded up
 * to 16, however a realloc in place shrinks it.
 * bytes_held: the pages mapped (kept ones too) and the control page. Exact
 * in the owner's thread; from another thread, as brisk_stack_stats.
 */
BRISK_API void brisk_fifo_stats(const brisk_fifo_t *fifo, brisk_region_stats_t *out);

/* The library's out-of-line paths of the inline functions below (not API):
 * alloc and free past their fast paths, and a page other than the current
 * one that free has emptied. */
BRISK_API void *brisk_fifo_alloc_slow_(brisk_fifo_t *fifo, size_t size);
BRISK_API void brisk_fifo_free_slow_(brisk_fifo_t *fifo, void *p);
BRISK_API void brisk_fifo_page_empty_(brisk_fifo_t *fifo, brisk_fifo_page_hot_t *page);

/*
 * Alloc's fast path: the block fits the current page, carved at its
 * used_size (the page's free space is zero already). Sizes too large for
 * the page (a span that wraps included), a destroyed fifo (its current
 * page has no room) and annotated fifos go out of line.
 */
static inline void *brisk_fifo_alloc_inline_(brisk_fifo_t *fifo, size_t size) {
  brisk_fifo_hot_t *hot = (brisk_fifo_hot_t *)fifo;
  brisk_fifo_page_hot_t *page = hot->current;
  size_t span = (size + BRISK_FIFO_HEADER_ + 15) & ~(size_t)15;
  size_t used = page->used_size;
  size_t left = page->size - used;
  if (__builtin_expect(((span > left) | (size > left) | hot->annotated) == 0, 1)) {
    uint64_t *block = (uint64_t *)((char *)page + BRISK_FIFO_AREA_ + used);
    *block = (uint64_t)(BRISK_FIFO_AREA_ + used) | (uint64_t)(span >> 4) << BRISK_FIFO_UNITS_SHIFT_ |
             (uint64_t)BRISK_FIFO_LIVE_ << BRISK_FIFO_STATE_SHIFT_;
    page->used_size = (uint32_t)(used + span);
    page->used_blocks++;
    hot->in_use += span;
    hot->bytes_requested += size;
    hot->allocations++;
    return block + 1;
  }
  return brisk_fifo_alloc_slow_(fifo, size);
}

/*
 * Free's fast path: the page header from p's address alone (the window's
 * mapping and its color), then every check of the slow path: p 16-aligned,
 * its header tagged live and leading back to that very page, the page
 * owned by this fifo. The header is retagged freed. NULL, anything that
 * fails a check (the slow path names the misuse) and annotated fifos
 * (whose block headers are poisoned for ASan) go out of line; the header
 * is read only once p is aligned and the fifo is not annotated, the page
 * only once the header leads to it. Not checked here: that p lies in one
 * of the fifo's pages before its header is read (a lookup per free); the
 * slow path checks that first.
 */
static inline void brisk_fifo_free_inline_(brisk_fifo_t *fifo, void *p) {
  brisk_fifo_hot_t *hot = (brisk_fifo_hot_t *)fifo;
  if (__builtin_expect(p != NULL && ((uintptr_t)p & 15) == 0 && !hot->annotated, 1)) {
    uintptr_t base = (uintptr_t)p & hot->window_mask;
    uintptr_t window_number = base >> hot->color_shift;
    brisk_fifo_page_hot_t *page =
        (brisk_fifo_page_hot_t *)(base + ((window_number ^ (window_number >> 1)) & hot->color_mask));
    uint64_t *block = (uint64_t *)p - 1;
    uint64_t header = *block;
    if (__builtin_expect((header >> BRISK_FIFO_STATE_SHIFT_) == BRISK_FIFO_LIVE_ &&
                             (uintptr_t)block - (uint32_t)header == (uintptr_t)page,
                         1) &&
        __builtin_expect(page->fifo == fifo, 1)) {
      *block = header ^ (uint64_t)(BRISK_FIFO_LIVE_ ^ BRISK_FIFO_FREED_) << BRISK_FIFO_STATE_SHIFT_;
      /* 0 for a big block: brisk_fifo_page_empty_ counts it. */
      hot->in_use -= ((size_t)(header >> BRISK_FIFO_UNITS_SHIFT_) & BRISK_FIFO_UNITS_MASK_) * 16;
      /* An emptied current page waits for alloc to find it full. */
      if (__builtin_expect(--page->used_blocks == 0, 0) && page != hot->current)
        brisk_fifo_page_empty_(fifo, page);
      return;
    }
  }
  brisk_fifo_free_slow_(fifo, p);
}

/* The library defines the exported brisk_fifo_alloc and brisk_fifo_free
 * (src/regions/fifo.c, over the same fast paths); a program inlines them. */
#ifdef BRISK_FIFO_EXPORTS_
BRISK_API void *brisk_fifo_alloc(brisk_fifo_t *fifo, size_t size);
BRISK_API void brisk_fifo_free(brisk_fifo_t *fifo, void *p);
#else
static inline void *brisk_fifo_alloc(brisk_fifo_t *fifo, size_t size) {
  return brisk_fifo_alloc_inline_(fifo, size);
}
static inline void brisk_fifo_free(brisk_fifo_t *fifo, void *p) { brisk_fifo_free_inline_(fifo, p); }
#endif

#ifdef __cplusplus
}
#endif

#endif /* BRISK_FIFO_H */
