/*
 * brisk/fifo.h — the FIFO allocator, after Intersec's mem-fifo.
 *
 * Variable-size blocks carved in order from pages; a page is reused when all
 * its blocks are freed, so memory freed roughly in allocation order comes
 * back cheaply. Single-threaded by design: one thread at a time per fifo.
 */
#ifndef BRISK_FIFO_H
#define BRISK_FIFO_H

#include <stddef.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* BRISK_FIFO_H */
