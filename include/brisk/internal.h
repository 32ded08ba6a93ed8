/*
 * brisk/internal.h — NOT API. What brisk's public headers need in order to
 * declare their functions and inline their fast paths: the export macros,
 * and the structs that the inline paths of brisk/stack.h and brisk/fifo.h
 * read. Any of it may change in any release, together with the inline
 * functions that use it; a program touches it only through those
 * functions. (The structs a program declares itself, brisk_arena_cursor_t
 * and brisk_pool_local_t, are in their allocators' headers: their size is
 * API, their fields are not.)
 */
#ifndef BRISK_INTERNAL_H
#define BRISK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Exported by the library (it is built with -fvisibility=hidden). */
#if defined(__GNUC__)
#define BRISK_API __attribute__((visibility("default")))
#define BRISK_ATTR_MALLOC __attribute__((malloc, warn_unused_result))
#else
#define BRISK_API
#define BRISK_ATTR_MALLOC
#endif

/*
 * The first fields of every brisk_stack_t, which brisk_stack_alloc, push
 * and pop (brisk/stack.h) use inline, and one frame record. The library's
 * out-of-line paths (brisk_stack_*_slow_) do everything else.
 */
struct brisk_stack_block_s;
typedef struct brisk_stack_frame_s {
  struct brisk_stack_block_s *blk;
  unsigned char *pos;
  size_t in_use;
  size_t unused; /* a record is 32 bytes: frames[depth] is a shift away */
} brisk_stack_frame_t;
typedef struct brisk_stack_hot_s {
  unsigned char *pos;   /* next free byte of the current block */
  unsigned char *end;   /* end of the usable part of the current block */
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

/*
 * What brisk_fifo_alloc and brisk_fifo_free (brisk/fifo.h) use inline: the
 * first fields of every brisk_fifo_t, the first fields of a page header,
 * and the block header's packing. The library's out-of-line paths
 * (brisk_fifo_*_slow_) do everything else; src/regions/fifo.c says why
 * the fields are laid out as they are.
 */
struct brisk_fifo_s;
typedef struct brisk_fifo_page_hot_s {
  uint32_t used_size;         /* bytes of the area carved into blocks */
  uint32_t used_blocks;       /* blocks carved and not freed yet */
  uint32_t size;              /* bytes in the area; 0 for a big page */
  uint32_t color;             /* bytes between the mapping and this header */
  struct brisk_fifo_s *fifo;  /* the owner, checked by free */
} brisk_fifo_page_hot_t;
typedef struct brisk_fifo_hot_s {
  brisk_fifo_page_hot_t *current; /* the page alloc carves from */
  size_t in_use;              /* spans of live blocks (headers included) */
  uintptr_t window_mask;      /* ~(window - 1): a block's address to its page's mapping */
  size_t bytes_requested;     /* sizes asked for by alloc and realloc, ever */
  size_t allocations;         /* successful alloc and realloc calls, ever */
  uint32_t color_shift;       /* address >> color_shift: the window number x 64 */
  uint32_t color_mask;        /* (colors - 1) x 64 */
  uint32_t annotated;         /* ASan build or under Valgrind: alloc and free go out of line */
} brisk_fifo_hot_t;
/* A page's blocks start this many bytes after its header (the whole page
 * header, 8 mod 16, so that block data is 16-aligned). */
#define BRISK_FIFO_AREA_        ((size_t)40)
/* A block header, one little-endian word: bits 0-31 the offset back to the
 * page header, 32-58 the span / 16 (header included; 0: alone on a big
 * page), 59-63 the state. */
#define BRISK_FIFO_HEADER_      ((size_t)8)
#define BRISK_FIFO_UNITS_SHIFT_ 32
#define BRISK_FIFO_UNITS_MASK_  ((1u << 27) - 1)
#define BRISK_FIFO_STATE_SHIFT_ 59
#define BRISK_FIFO_LIVE_        0x0bu
#define BRISK_FIFO_FREED_       0x1bu

#endif /* BRISK_INTERNAL_H */
