/*
 * brisk/stack.h — the stack (frame) allocator, after Intersec's t_stack.
 *
 * Allocations live until the frame they were made in is popped. Frames
 * nest: brisk_stack_pop restores exactly the state of the matching
 * brisk_stack_push. One stack belongs to one thread at a time.
 *
 * A NULL stack: brisk_stack_realloc fails with EINVAL, destroy does
 * nothing, brisk_stack_stats gives all zero. The inline brisk_stack_alloc,
 * push, pop and BRISK_STACK_SCOPE read the stack without a test: a NULL
 * stack crashes them.
 *
 * A destroyed stack (a thread's default stack after its thread exited
 * too): brisk_stack_destroy of it again, or of another kind's handle,
 * aborts with a message (brisk/region.h: destroyed handles). So does every
 * other call with it while the mapping cache keeps its page (a second, by
 * default): brisk_stack_alloc, push, pop and BRISK_STACK_SCOPE (whose
 * inline paths find it out of room and go to the library), realloc and
 * stats ("brisk: brisk_stack_alloc(<stack>): not a live stack (destroyed
 * already?)"), at no cost to a live stack's inline paths. Every message
 * names the call the program made: brisk_stack_realloc also where it
 * allocates, BRISK_STACK_SCOPE for a scope's own push and pop. Once the
 * page went back to the system they may crash (SIGSEGV); once another stack
 * took it (as its own page, or as a block or frame records, which the
 * cache hands out by size alike) they work on that stack's memory.
 *
 * Not caught: a frame popped by hand inside a BRISK_STACK_SCOPE (the
 * scope's own pop then takes the frame below it, or aborts with
 * "BRISK_STACK_SCOPE: no frame to pop"), and a stack used by two threads
 * at once.
 */
#ifndef BRISK_STACK_H
#define BRISK_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_stack_s brisk_stack_t;

/* first_block: size of the first block of memory (0: a sensible default,
 * 64 KiB). NULL/ENOMEM when the system refuses the memory (a first block
 * too large for it included). */
BRISK_API brisk_stack_t *brisk_stack_create(size_t first_block);
BRISK_API void brisk_stack_destroy(brisk_stack_t *stack);
/*
 * Resize p (from this stack, old_size bytes) to new_size: in place when p
 * is the last allocation of the top frame and its block has room, else a
 * copy in the top frame. p == NULL allocates. NULL/EINVAL for a bad
 * alignment, NULL/ENOMEM when memory can't be had (p is left as it was).
 * A p that no live frame holds (malloc's, another stack's, popped
 * already) or an old_size that runs past what the stack has handed out
 * aborts with a message. Not caught, and copied as given: a pointer
 * inside a live allocation, or an old_size larger than p's own that stays
 * within what the stack has handed out (it keeps no record of single
 * allocations).
 */
BRISK_API void *brisk_stack_realloc(brisk_stack_t *stack, void *p, size_t old_size,
                                    size_t new_size, size_t align);
/* The calling thread's own default stack, created on first use and
 * destroyed when the thread exits: brisk_stack_destroy of it aborts with
 * a message. */
BRISK_API brisk_stack_t *brisk_stack_tls(void);
/*
 * allocations and bytes_requested: successful alloc and realloc calls
 * (a realloc is one allocation of its new size) and the sizes asked.
 * bytes_in_use: the bytes asked in live frames (nothing is rounded); a
 * realloc that moves a block, or shrinks one in place that is not the top
 * frame's last, leaves the old size counted until its frame is popped.
 * bytes_held: blocks, the stack's own page and its frame records. Exact in
 * the owner's thread; from another thread, a racy read of the owner's
 * counters (each a value it wrote, the set a moment apart).
 */
BRISK_API void brisk_stack_stats(const brisk_stack_t *stack, brisk_region_stats_t *out);

/* The library's out-of-line paths of the inline functions below (not API). */
BRISK_API void *brisk_stack_alloc_slow_(brisk_stack_t *stack, size_t size, size_t align);
BRISK_API void brisk_stack_decay_slow_(brisk_stack_t *stack);
BRISK_API void brisk_stack_push_slow_(brisk_stack_t *stack);
BRISK_API void brisk_stack_pop_slow_(brisk_stack_t *stack);
/* BRISK_STACK_SCOPE's push and pop past their inline paths: the same as
 * the two above, but a misuse message names BRISK_STACK_SCOPE. */
BRISK_API void brisk_stack_scope_push_slow_(brisk_stack_t *stack);
BRISK_API void brisk_stack_scope_pop_slow_(brisk_stack_t *stack);

/*
 * `size` bytes aligned to `align` (power of two; 0 means 16) in the top
 * frame (or the stack's base frame if none is pushed), not zeroed. NULL/EINVAL for a bad
 * alignment, NULL/ENOMEM when memory can't be had. Inline: a bump of the
 * current block's position and one add that counts the request and its
 * size (the count's carry, every 65,535th request, calls the library to
 * decay the seed's mean); anything else goes to the library. The bumped
 * position is never NULL, which the compiler is told, so that a caller's
 * NULL test costs nothing on this path.
 */
static inline void *brisk_stack_alloc(brisk_stack_t *stack, size_t size, size_t align) {
  brisk_stack_hot_t *hot = (brisk_stack_hot_t *)stack;
  size_t a = align != 0 ? align : 16;
  uintptr_t at = ((uintptr_t)hot->pos + a - 1) & ~(uintptr_t)(a - 1);
  /* size - 1 wraps for 0, which (like sizes of 4 GiB and more) goes out of line. */
  if (__builtin_expect((a & (a - 1)) == 0 && size - 1 < BRISK_STACK_INLINE_MAX_ - 1 &&
                           at + size <= (uintptr_t)hot->end,
                       1)) {
    if (at == 0) __builtin_unreachable();
    hot->pos = (unsigned char *)(at + size);
    if (__builtin_expect(__builtin_add_overflow(
                             hot->asked, size + ((size_t)1 << BRISK_STACK_ASKED_BITS_),
                             &hot->asked),
                         0))
      brisk_stack_decay_slow_(stack);
    return (void *)at;
  }
  return brisk_stack_alloc_slow_(stack, size, align);
}

/* The inline push and pop, with the library function that does the rest
 * (a constant: the call is direct once inlined). */
static inline void brisk_stack_push_with_(brisk_stack_t *stack,
                                          void (*slow)(brisk_stack_t *stack)) {
  brisk_stack_hot_t *hot = (brisk_stack_hot_t *)stack;
  brisk_stack_frame_t *frame = hot->top;
  if (__builtin_expect(frame == hot->limit, 0)) {
    slow(stack);
    return;
  }
  frame->pos = hot->pos;
  hot->top = frame + 1;
  frame->blk = hot->blk;
  frame->in_use = hot->asked - hot->released;
}

static inline void brisk_stack_pop_with_(brisk_stack_t *stack,
                                         void (*slow)(brisk_stack_t *stack)) {
  brisk_stack_hot_t *hot = (brisk_stack_hot_t *)stack;
  brisk_stack_frame_t *top = hot->top;
  if (__builtin_expect((uintptr_t)top > hot->pop_floor && top[-1].blk == hot->blk, 1)) {
    hot->top = top - 1;
    hot->pos = top[-1].pos;
    hot->released = hot->asked - top[-1].in_use;
    return;
  }
  slow(stack);
}

/* Push a frame: records where the stack stands. Inline. It cannot fail:
 * when no memory can be had for more frame records it aborts with a
 * message. */
static inline void brisk_stack_push(brisk_stack_t *stack) {
  brisk_stack_push_with_(stack, brisk_stack_push_slow_);
}

/* Pops the top frame; popping with no frame pushed aborts with a message.
 * Inline when the frame did not leave its block (and the stack is not
 * annotated: its pop_floor is then above every record). */
static inline void brisk_stack_pop(brisk_stack_t *stack) {
  brisk_stack_pop_with_(stack, brisk_stack_pop_slow_);
}

/* Implementation details of BRISK_STACK_SCOPE: push and return the stack;
 * pop it. Their messages name BRISK_STACK_SCOPE. */
static inline brisk_stack_t *brisk_stack_scope_begin_(brisk_stack_t *stack) {
  brisk_stack_push_with_(stack, brisk_stack_scope_push_slow_);
  return stack;
}
static inline void brisk_stack_scope_end_(brisk_stack_t **stack) {
  brisk_stack_pop_with_(*stack, brisk_stack_scope_pop_slow_);
}
#define BRISK_STACK_CONCAT2_(a, b) a##b
#define BRISK_STACK_CONCAT_(a, b) BRISK_STACK_CONCAT2_(a, b)
/*
 * BRISK_STACK_SCOPE(stack); pushes a frame that is popped when the
 * enclosing C block ends, however it ends (return, break, goto out):
 *
 *   { BRISK_STACK_SCOPE(s); char *tmp = brisk_stack_alloc(s, 100, 0); ... }
 *
 * `stack` is evaluated once; several scopes may share a block (they pop in
 * reverse order).
 */
#define BRISK_STACK_SCOPE(stack)                                                       \
  brisk_stack_t *BRISK_STACK_CONCAT_(brisk_scope_, __COUNTER__)                         \
      __attribute__((cleanup(brisk_stack_scope_end_), unused)) =                       \
          brisk_stack_scope_begin_(stack)

#ifdef __cplusplus
}
#endif

#endif /* BRISK_STACK_H */
