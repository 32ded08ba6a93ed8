/*
 * brisk/internal.h — NOT API. What brisk's public headers need in order to
 * declare their functions and inline their fast paths: the export macros,
 * and the structs that the inline paths of brisk/stack.h read. Any of it
 * may change in any release, together with the inline functions that use
 * it; a program touches it only through those functions. (The structs a
 * program declares itself, brisk_arena_cursor_t and brisk_pool_local_t,
 * are in their allocators' headers: their size is API, their fields are
 * not.)
 */
#ifndef BRISK_INTERNAL_H
#define BRISK_INTERNAL_H

#include <stddef.h>

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

#endif /* BRISK_INTERNAL_H */
