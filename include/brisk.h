/*
 * brisk.h — the one header a brisk user includes: every part of brisk's
 * API, each also available on its own.
 *
 * brisk is a general-purpose allocator for Linux: linking libbrisk
 * (-lbrisk) or preloading it (LD_PRELOAD=libbrisk.so) replaces malloc, free
 * and the C++ operators new/delete for the whole program. Beside it, region
 * allocators that a program calls on purpose for memory whose lifetime it
 * knows.
 *
 *   <brisk/malloc.h>   the general allocator by name (brisk_malloc, ...),
 *                      brisk_collect, the version
 *   <brisk/stats.h>    statistics of all of brisk in one snapshot
 *   <brisk/region.h>   what the region allocators share: their statistics'
 *                      words, the pools' flags
 *   <brisk/arena.h>    a lock-free bump allocator over reserved memory
 *   <brisk/stack.h>    a frame allocator (push, pop, scopes)
 *   <brisk/fifo.h>     a FIFO allocator of zeroed blocks
 *   <brisk/pool.h>     a lock-free fixed-size pool, and local caches of it
 *   <brisk/buddy.h>    a lock-free buddy allocator
 *   <brisk/hybrid.h>   a bounded hybrid of pools and buddy regions
 *   <brisk/internal.h> not API: what the others need to inline their fast
 *                      paths
 *
 * Every function that cannot serve a size returns NULL with errno set to
 * ENOMEM, and a failed call leaves nothing half-changed.
 */
#ifndef BRISK_H
#define BRISK_H

#include "brisk/malloc.h"
#include "brisk/stats.h"
#include "brisk/region.h"
#include "brisk/arena.h"
#include "brisk/stack.h"
#include "brisk/fifo.h"
#include "brisk/pool.h"
#include "brisk/buddy.h"
#include "brisk/hybrid.h"

#endif /* BRISK_H */
