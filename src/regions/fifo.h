/*
 * fifo.h — internals of the FIFO allocator (fifo.c) that the tests reach;
 * the API itself is in <brisk/fifo.h>.
 */
#ifndef BRISK_REGIONS_FIFO_H
#define BRISK_REGIONS_FIFO_H

#include "base/base.h"

#include <brisk/fifo.h>

/* fifo.c: check every page the fifo keeps (current, spare, cached) block by
 * block against its counters, and the zeroes it promises; "brisk:
 * brisk_fifo_validate(0x...): ..." and abort at the first broken
 * invariant. By the fifo's thread, between its calls. Debug builds run it
 * from alloc's slow path every 64th time. */
BRISK_HIDDEN void _brisk_fifo_validate(const brisk_fifo_t *fifo);

#endif /* BRISK_REGIONS_FIFO_H */
