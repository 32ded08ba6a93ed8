/*
 * brisk/internal.h — NOT API. What brisk's public headers need in order to
 * declare their functions and inline their fast paths: the export macros,
 * the structs that the inline paths of brisk/stack.h, brisk/fifo.h and
 * brisk/hybrid.h read, and the thread-local word the hybrid's read. Any
 * of it may change in any release, together with the inline functions
 * that use it; a program touches it only through those functions. (The structs a program declares itself, brisk_arena_cursor_t
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
  unsigned char *pos;
  struct brisk_stack_block_s *blk;
  size_t in_use;
  size_t unused; /* a record is 32 bytes */
} brisk_stack_frame_t;
typedef struct brisk_stack_hot_s {
  /* Cache line 0: every word the inline paths touch. The two that alloc
   * changes (pos, asked) are not neighbours, so that GCC does not merge
   * their updates into one vector load and store. */
  unsigned char *pos;   /* next free byte of the current block */
  struct brisk_stack_block_s *blk; /* current block */
  unsigned char *end;   /* end of the usable part of the current block */
  /* Two counts in one word, so that the inline alloc updates both with
   * one add: the low BRISK_STACK_ASKED_BITS_ bits, bytes asked by the
   * inline path since the library last folded them into its total; the
   * high bits, the seed's count of requests plus 1, which carries out of
   * the word (the add overflows) when the count reaches 65,535, the
   * moment the seed's mean decays. */
  size_t asked;
  brisk_stack_frame_t *top;   /* the next free frame record: frames[depth] */
  /* What the bytes in use are counted from: they are asked - released,
   * modulo 2^BRISK_STACK_ASKED_BITS_ (a frame record keeps that
   * difference and pop sets released back from it; the slow paths'
   * allocations lower it). */
  size_t released;
  brisk_stack_frame_t *limit; /* past the last record */
  /* frames' address, or (annotated) the highest one: pop goes inline only
   * above it. */
  uintptr_t pop_floor;
  /* Line 1: the slow paths'. */
  brisk_stack_frame_t *frames;    /* frames[0] is the bottom frame */
  size_t average_sum;   /* the seed's running mean of request sizes */
  size_t average_mark;
  size_t annotated;     /* ASan build or under Valgrind: pop always goes out of line */
} brisk_stack_hot_t;
#define BRISK_STACK_AVERAGE_MAX_NB_ 65535u
#define BRISK_STACK_ASKED_BITS_     48u
/* The inline alloc takes sizes below this: 65,535 of them between two
 * folds stay below 2^BRISK_STACK_ASKED_BITS_. */
#define BRISK_STACK_INLINE_MAX_     ((size_t)1 << 32)

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

/*
 * What brisk_hybrid_alloc and brisk_hybrid_free (brisk/hybrid.h) use
 * inline: the first fields of every brisk_hybrid_t, up to and including
 * the per-thread entries, the code table that lies a fixed distance after
 * it, and the calling thread's slot line. The library declares the same
 * fields with their atomic types (src/regions/hybrid.c, which says what
 * each one holds and asserts that both agree, field by field); here they
 * are plain, for C++ too, and the inline paths reach the ones other
 * threads may write with relaxed __atomic builtins.
 */
#define BRISK_HYBRID_SMALL_MAX_     512u  /* sizes with an entry of their own */
#define BRISK_HYBRID_SIZE_CODES_    (BRISK_HYBRID_SMALL_MAX_ + 1 + 65)
#define BRISK_HYBRID_CLASSES_       19u   /* class 0, 8 buckets, 10 orders */
#define BRISK_HYBRID_ENTRIES_       130u  /* line 0's, 128 slots', the shared one */
#define BRISK_HYBRID_ENTRY_BYTES_   1024u /* 16 cache lines: slot line x 16 */
#define BRISK_HYBRID_ROOM_BITS_     8u    /* a class word: allocs << 8 | room */
#define BRISK_HYBRID_ROOM_MASK_     ((size_t)255)
#define BRISK_HYBRID_GRANULE_SHIFT_ 4u    /* a code per 16 bytes of the blocks */
#define BRISK_HYBRID_CODES_AT_      ((size_t)0x30000) /* the code table, from the hybrid */
typedef struct brisk_hybrid_class_s {
  void *head;       /* the newest cached block; its first word links the next */
  size_t word;      /* blocks handed out << ROOM_BITS | room left in the list */
  size_t requested; /* sizes asked by the class's successful allocations */
  size_t unused;    /* a class is 32 bytes: alloc touches one line */
} brisk_hybrid_class_t;
typedef struct brisk_hybrid_hot_s {
  uintptr_t key;
  uintptr_t base;   /* the first granule's address */
  size_t granules;  /* granules the code table covers */
  uint8_t code_of_size[BRISK_HYBRID_SIZE_CODES_];
  __attribute__((aligned(BRISK_HYBRID_ENTRY_BYTES_)))
  unsigned char entries[BRISK_HYBRID_ENTRIES_][BRISK_HYBRID_ENTRY_BYTES_];
} brisk_hybrid_hot_t;

/* (slot + 1) x 64 while the calling thread holds a thread slot, else 0
 * (src/regions/thread_slot.h). Initial-exec, as all of the library's
 * thread-local storage (built with -ftls-model=initial-exec): it lives in
 * the static TLS block whether libbrisk.a is linked in or libbrisk.so is
 * loaded at start, or with dlopen within glibc's static-TLS surplus, as
 * the library's own thread-locals are (ctest dlopen_brisk). */
extern BRISK_API __thread uint32_t brisk_thread_slot_line_
    __attribute__((tls_model("initial-exec")));

#endif /* BRISK_INTERNAL_H */
