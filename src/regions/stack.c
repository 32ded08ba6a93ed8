/*
 * stack.c — the frame (stack) allocator of <brisk/stack.h>, after Intersec's
 * t_stack (seed 002). One stack belongs to one thread at a time; nothing
 * here is atomic or locked but the list of the threads' default stacks
 * (brisk_stack_tls, at the end of this file, with its threading rules).
 *
 * Call tree. brisk_stack_alloc, push and pop are inline in <brisk/stack.h> (a
 * bump of hot.pos; a frame record) and call brisk_stack_{alloc,push,pop}
 * _slow_ for anything else, which run the full paths below; the public
 * functions here call inline helpers, never each other, so nothing goes
 * through the PLT.
 *
 *   brisk_stack_alloc ── stack_alloc: bump pos in the current block, count
 *                          │   (the count's carry: average_decay, the seed's mean)
 *                          └─(no room, bad argument, size 0 or >= 4 GiB)── alloc_slow
 *                               ├─ next_block: reuse a free block, destroying too-small
 *                               │    ones on the way (bounded), or block_create
 *                               ├─ adopt_block: make it current; empty frames move to it
 *                               └─ open_to (annotated builds): unpoison what is handed out
 *   brisk_stack_realloc ── in place (last allocation, room) | check_owned (p in a live
 *                          frame's blocks, else abort) and in place or stack_alloc + memcpy
 *   brisk_stack_push ── stack_push: save (block, pos, in use)
 *                         └─(records full)── push_slow: double the records
 *   brisk_stack_pop ── stack_pop: restore ──(frame spanned blocks)── pop_slow: poison,
 *                                          │                                trim_free_blocks
 *                                          └─(annotated builds)── close_from: poison
 *   BRISK_STACK_SCOPE ── brisk_stack_scope_begin_ / _end_ (cleanup), inline push / pop
 *   brisk_stack_tls ──(first use in a thread)── tls_create_slow: brisk_stack_create, its
 *                     │   exit token held, linked in tls_stacks (tls_lock), a pthread key
 *                     │   whose destructor is tls_destroy; when the list has doubled,
 *                     └── tls_unlink_dead: the stacks of threads that died without
 *                         tls_destroy (a call in glibc's last destructor round) destroyed
 *   tls_destroy (key destructor) ── unlink, drop the token, unregister, stack_destroy
 *                     (brisk_stack_destroy of a default stack aborts: it is destroyed
 *                     here; of a handle that is no live stack too)
 *
 * Data layout
 *
 *   struct brisk_stack_s   one page from the OS layer: the hot allocation
 *                          state on the first cache line, then the block
 *                          list, counters, a default stack's links and
 *                          exit token (brisk_stack_tls), and the first
 *                          frame records.
 *   block_t                one mapping per block: a 64-byte header, then
 *                          the area that allocations are bumped from.
 *                          Blocks, frame records and the stack's page go
 *                          to the OS layer's mapping cache when they are
 *                          let go, and come from it when it has one of the
 *                          size (os.h): a stack made per task takes no
 *                          system call and no page fault for them. Their
 *                          bytes are then what the last owner left: a
 *                          stack hands out memory as it finds it.
 *                          The blocks form one list: every block up to the
 *                          current one (stack->hot.blk) is in use by some live
 *                          frame; every block after it is free, kept for
 *                          reuse. Popping a frame moves the current block
 *                          back, which frees the later blocks in O(1).
 *   frame_t[]              one record per pushed frame: the (block, pos,
 *                          in_use) state at push, which pop restores
 *                          exactly. The first records live in the stack's
 *                          own page; deeper stacks grow the array from the
 *                          OS layer (doubling). Never from malloc, and
 *                          never inside the allocation area, so the first
 *                          allocation after a pop lands where the first
 *                          allocation after the matching push did.
 *
 * Policies (seed 002, measured there; worst_case() is in bench/region_stack.c)
 *
 *   - Block size: at least the stack's minimum (first_block, 64 KiB by
 *     default, as the seed's t_pool) and at least 64 times the running mean
 *     request size (up to 64 MiB; a bigger request gets a block its size),
 *     kept the seed's way (average_t: sum and count, both divided by 4 when
 *     the count reaches 65535, so the distant past fades smoothly).
 *   - The current frame remembers a new block: when a frame that has not
 *     allocated anything in an almost full block (less than 1/8 left) gets
 *     a new block, its record (and those of the empty frames right below
 *     it) moves to the new block, so the next push at that level does not
 *     fetch the same block again (the seed got this from allocating frame
 *     headers in the parent frame).
 *   - Free blocks are kept and reused. The search for a block that fits
 *     destroys too-small free blocks only while the free blocks exceed the
 *     bound below, and stops destroying once it has destroyed as many bytes
 *     as it needs (the seed's worst_case() fix).
 *   - Bound: the free blocks are kept up to max(1 MiB, peak), peak being
 *     the most block bytes in use at once, halved every 256 pops that cross
 *     a block (but never below the most in use since the previous halving).
 *     Pops that cross a block give the surplus back to the OS, farthest
 *     blocks first. The search looks at 64 free blocks at most.
 *   - Alignment by a power-of-two mask on the pointer; sizes are never
 *     rounded (a 1-byte object takes 1 byte). Size 0 takes 1 byte, so its
 *     pointer is unique.
 *
 * Statistics: allocations counts the successful alloc and realloc calls,
 * bytes_requested sums the sizes they asked for (a realloc counts as one
 * allocation of its new size, in place or not); bytes_in_use is the bytes
 * asked in live frames (the stack rounds nothing; a copying realloc keeps
 * the old copy until pop, and a shrink in place of any allocation but the
 * top frame's last its old size); bytes_held the bytes mapped now (blocks,
 * the stack's page, frame records beyond it); system_requests every OS call
 * made for the stack (its page, blocks and frame records mapped and
 * released; each call of a reservation's). The fast path's own counts
 * serve: `asked` (bytes and requests in one word, folded into
 * `requested` when the mean decays; the mean's sum follows the bytes) and
 * `released` (what pop gives back, in asked's terms), whose decay hands
 * what it takes from the count to allocations_decayed, so every
 * allocation is counted once without another add on the fast path; realloc
 * adds what its in-place paths leave out (realloc_calls, realloc_asked).
 * brisk_stack_stats may run in another thread (a process-wide snapshot):
 * it reads the owner's words without synchronising, see there.
 *
 * A destroyed stack (its page as stack_destroy leaves it, while the
 * mapping cache keeps it): no records (frames, top and limit NULL), no
 * block (pos, end, blk NULL) and pop_floor at the top of the address
 * space, which no live stack has. brisk/stack.h's inline alloc then finds
 * no room below end, push finds its records full and pop finds no record
 * above pop_floor: each goes out of line, where the slow paths of alloc,
 * push and pop, realloc and stats test frames first and abort, "not a
 * live stack (destroyed already?)", at no cost to the inline paths of a
 * live stack.
 * The marks are plain stores, read plainly: a correct program's calls
 * with a stack all happen before its destroy (a stack is one thread's at
 * a time, and handing it on or destroying it from another thread takes
 * the program's own ordering), so only a use after the destroy reads
 * them.
 *
 * Sanitizers and Valgrind (hot.annotated: an ASan build, or a build that
 * has <valgrind/memcheck.h> running under Valgrind): a block's area is
 * poisoned when mapped and when popped. stack->hot.end, the limit of the fast path, is then the end of
 * the *open* part of the current block rather than the block's end; the
 * slow path opens more (brisk_annotate_internal; open_to says why not
 * brisk_annotate_alloc) and pop closes it again (brisk_annotate_no_access).
 * Under ASan it opens exactly the allocation, so nothing unallocated is
 * addressable; in other builds it opens 4 KiB at a time, so the Valgrind
 * client requests (a dozen instructions each, even when not under
 * Valgrind) run once per 4 KiB and once per pop, not once per allocation.
 * Block headers and frame records are never poisoned; a block is
 * unpoisoned whole before it goes back to the OS, so that a later mapping
 * at that address starts clean.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "base/annotate.h"
#include "base/base.h"
#include <brisk/stack.h>
#include "os/os.h"
#include "regions/exit_token.h"
#include "regions/registry.h"
#include "regions/stack.h"

#define STACK_DEFAULT_BLOCK  ((size_t)64 << 10)
#define STACK_DEFAULT_ALIGN  16 /* also brisk/stack.h's inline alloc's (align 0) */
#define STACK_MEAN_FACTOR    64              /* a new block holds >= 64 mean requests */
#define STACK_MEAN_BLOCK_MAX ((size_t)64 << 20) /* ...up to 64 MiB (a bigger request: its size) */
#define STACK_KEEP_MIN       ((size_t)1 << 20)
#define STACK_PEAK_DECAY     256             /* block-crossing pops between halvings */
/* The seed's 16-bit count; brisk/stack.h's inline alloc tests the same bound. */
#define STACK_AVERAGE_MAX_NB BRISK_STACK_AVERAGE_MAX_NB_
#define STACK_SEARCH_MAX     64              /* free blocks looked at per search */

/* Under a sanitizer or Valgrind, the part of the current block past
 * stack->hot.end stays poisoned and is opened a chunk at a time (the exact
 * allocation under ASan, so that nothing unallocated is open). */
/* Whether a stack is annotated is decided at creation
 * (brisk_tools_watch_blocks) and kept in hot.annotated, which also sends
 * brisk/stack.h's inline pop out of line. */
#define STACK_OPEN_CHUNK     (BRISK_ASAN ? 0 : (size_t)4096)

typedef struct brisk_stack_block_s {
  struct brisk_stack_block_s *prev;
  struct brisk_stack_block_s *next;
  size_t size;       /* bytes of the mapping, header included */
  size_t below;      /* bytes of this block and all before it (valid while in use) */
  uint8_t *end;      /* end of the area (= end of the mapping) */
} BRISK_ALIGNED(64) block_t;

/* One pushed frame (the layout is brisk/internal.h's: push and pop are inline). */
typedef brisk_stack_frame_t frame_t;
_Static_assert(offsetof(brisk_stack_hot_t, frames) == BRISK_CACHE_LINE,
               "the inline alloc's, push's and pop's words fill cache line 0");


struct brisk_stack_s {
  /* What the inline alloc, push and pop of brisk/stack.h touch, on cache
   * line 0 (pos, blk, end, asked, the frame records' top, released, the
   * records' limit, pop_floor), then what the slow paths add (the records,
   * the seed's running mean as average_sum with average_mark; see
   * brisk_stack_hot_t). average_sum is folded lazily: see average_sum(). */
  brisk_stack_hot_t hot;
  /* Bytes asked, but for the inline path's since the last fold (the low
   * bits of hot.asked): requested_total(). */
  size_t requested;

  /* Slow paths. */
  block_t head;       /* list sentinel: head.next is the first block */
  size_t min_block;   /* smallest block mapped, page multiple */
  size_t frames_bytes;  /* mapping size of `frames` when it is not inline */
  size_t held;        /* bytes of all blocks */
  size_t peak;        /* most block bytes in use at once (decaying) */
  size_t recent;      /* most block bytes in use since the last decay */
  size_t mapped_total;
  size_t system_requests;     /* OS calls made for this stack so far */
  size_t allocations_decayed; /* allocations the mean's decay took from average_nb */
  size_t decay_seq;           /* odd while a decay moves counts (brisk_stack_stats) */
  size_t realloc_calls;       /* reallocs that kept their block (not via stack_alloc) */
  size_t realloc_asked;       /* what those asked beyond what they added to `requested` */
  unsigned decay_clock;
  brisk_region_entry_t entry;
  /* A thread's default stack only (brisk_stack_tls): its links in
   * tls_stacks (tls_lock) and the exit token its thread holds. */
  struct brisk_stack_s *tls_next, **tls_pprev;
  brisk_exit_token_t tls_token;
  frame_t inline_frames[];  /* up to the end of the stack's page */
};

/* ---- Small helpers ---------------------------------------------------- */

BRISK_INLINE uint8_t *block_area(block_t *blk) { return (uint8_t *)(blk + 1); }

BRISK_INLINE uintptr_t align_ptr(const uint8_t *p, size_t align) {
  return ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
}

/* hot.asked (brisk/internal.h): the inline path's bytes in the low bits,
 * the seed's request count plus 1 above them. */
#define ASKED_BITS  BRISK_STACK_ASKED_BITS_
#define ASKED_MASK  (((size_t)1 << ASKED_BITS) - 1)
#define ONE_REQUEST ((size_t)1 << ASKED_BITS)
_Static_assert((STACK_AVERAGE_MAX_NB + (size_t)1) << ASKED_BITS == 0,
               "the count's carry out of `asked` is the mean's decay");
_Static_assert((size_t)STACK_AVERAGE_MAX_NB * (BRISK_STACK_INLINE_MAX_ - 1) < ONE_REQUEST,
               "the inline path's bytes between two folds fit their bits");

/* Bytes asked by every allocation so far (realloc's in-place growth in). */
BRISK_INLINE size_t requested_total(const brisk_stack_t *stack) {
  return stack->requested + (stack->hot.asked & ASKED_MASK);
}

/* Bytes asked in live frames: asked - released in the low bits (less than
 * 2^48: they are in blocks). */
BRISK_INLINE size_t in_use_of(size_t asked, size_t released) {
  return (asked - released) & ASKED_MASK;
}

/*
 * The seed's average_t, with the sum kept lazily: requests are counted,
 * and the bytes they ask added, by the add of `asked` (or for the slow
 * paths' allocations, `requested`), which the sum follows, so the seed's
 * sum is average_sum + (requested_total() - average_mark) at any time.
 * When nb reaches UINT16_MAX (the count's carry), sum and nb are divided
 * by 4 as in the seed, right after the request that took nb there rather
 * than at the start of the next one: the same state when that next
 * request is counted.
 */
BRISK_INLINE size_t average_sum(const brisk_stack_t *stack) {
  return stack->hot.average_sum + (requested_total(stack) - stack->hot.average_mark);
}

/* The seed's nb: asked's count less 1 (65,535 once it carried out to 0). */
BRISK_INLINE size_t nb_of(size_t asked) {
  return ((asked >> ASKED_BITS) - 1) & STACK_AVERAGE_MAX_NB;
}
BRISK_INLINE size_t average_nb(const brisk_stack_t *stack) { return nb_of(stack->hot.asked); }

/*
 * The count of allocations is allocations_decayed + the seed's nb, so the
 * decay hands over what it takes from the count; it also folds the inline
 * path's bytes into `requested` (and `released` follows, so that the
 * bytes in use stay). Called when the count carries out of `asked`: by
 * brisk/stack.h's inline alloc (brisk_stack_decay_slow_) and by
 * account(). A snapshot in another
 * thread (brisk_stack_stats) reads the words it changes between two reads
 * of decay_seq, which is odd while they change, so it never sums an old
 * word and a new one (a sequence lock without fences: the words are
 * stored with release after the odd count, and read with acquire before
 * the count is read again).
 */
static BRISK_NOINLINE void average_decay(brisk_stack_t *stack) {
  size_t seq = stack->decay_seq, nb = average_nb(stack);
  size_t bytes = stack->hot.asked & ASKED_MASK;
  __atomic_store_n(&stack->decay_seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&stack->allocations_decayed, stack->allocations_decayed + nb - nb / 4,
                   __ATOMIC_RELEASE);
  stack->hot.average_sum = average_sum(stack) / 4;
  stack->hot.average_mark = requested_total(stack);
  __atomic_store_n(&stack->requested, stack->requested + bytes, __ATOMIC_RELEASE);
  __atomic_store_n(&stack->hot.released, stack->hot.released - bytes, __ATOMIC_RELEASE);
  __atomic_store_n(&stack->hot.asked, (nb / 4 + 1) << ASKED_BITS, __ATOMIC_RELEASE);
  __atomic_store_n(&stack->decay_seq, seq + 2, __ATOMIC_RELEASE);
}

void brisk_stack_decay_slow_(brisk_stack_t *stack) { average_decay(stack); }

/* A slow path's allocation of `size` bytes: asked, in use (released goes
 * down, asked's bytes are the inline path's alone), counted. */
BRISK_INLINE void account(brisk_stack_t *stack, size_t size) {
  stack->requested += size;
  stack->hot.released -= size;
  if (BRISK_UNLIKELY(__builtin_add_overflow(stack->hot.asked, ONE_REQUEST, &stack->hot.asked)))
    average_decay(stack);
}

BRISK_INLINE size_t average_get(const brisk_stack_t *stack) {
  size_t nb = average_nb(stack);
  return nb != 0 ? average_sum(stack) / nb : 0;
}

/* Frames pushed, and the records there is room for. */
BRISK_INLINE size_t stack_depth(const brisk_stack_t *stack) {
  return (size_t)(stack->hot.top - stack->hot.frames);
}
BRISK_INLINE size_t stack_capacity(const brisk_stack_t *stack) {
  return (size_t)(stack->hot.limit - stack->hot.frames);
}

/* Where the inline pop's records must lie above: the records' start, or
 * for an annotated stack the highest address, so that every pop goes out
 * of line (and closes what it gives back). */
BRISK_INLINE void set_pop_floor(brisk_stack_t *stack) {
  stack->hot.pop_floor = stack->hot.annotated ? UINTPTR_MAX : (uintptr_t)stack->hot.frames;
}

static BRISK_COLD BRISK_NORETURN void stack_fatal(const char *caller, const char *why) {
  _brisk_os_write_error("brisk: ");
  _brisk_os_write_error(caller);
  _brisk_os_write_error(": ");
  _brisk_os_write_error(why);
  _brisk_os_write_error("\n");
  _brisk_os_abort();
}

static BRISK_COLD BRISK_NORETURN void not_live(const char *caller, const brisk_stack_t *stack) {
  _brisk_os_fatal_pointer(caller, stack, "not a live stack (destroyed already?)");
}

/* Every call past the inline paths: a destroyed stack (see the top) has
 * no frame records. */
BRISK_INLINE void check_live(const char *caller, const brisk_stack_t *stack) {
  if (BRISK_UNLIKELY(stack->hot.frames == NULL)) not_live(caller, stack);
}

/* ---- Blocks ----------------------------------------------------------- */

BRISK_INLINE void list_remove(block_t *blk) {
  blk->prev->next = blk->next;
  blk->next->prev = blk->prev;
}

BRISK_INLINE void list_insert_after(block_t *where, block_t *blk) {
  blk->prev = where;
  blk->next = where->next;
  where->next->prev = blk;
  where->next = blk;
}

/* A block whose area holds `take` bytes aligned to `align`. */
static block_t *block_create(brisk_stack_t *stack, size_t take, size_t align) {
  size_t page = _brisk_os_page_size();
  size_t mean = average_get(stack);
  size_t want = mean < STACK_MEAN_BLOCK_MAX / STACK_MEAN_FACTOR ? STACK_MEAN_FACTOR * mean
                                                                : STACK_MEAN_BLOCK_MAX;
  if (want < stack->min_block) want = stack->min_block;
  size_t pad = align > sizeof(block_t) ? align : 0;
  if (take >= PTRDIFF_MAX / 2 || pad >= PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  size_t need = sizeof(block_t) + pad + take;
  if (want < need) want = need;
  size_t size = brisk_align_up(want, page);
  bool reused;
  block_t *blk = _brisk_os_reserve_cached(BRISK_OS_CACHE_STACK, size, page, &reused,
                                          &stack->system_requests);
  if (blk == NULL) return NULL;
  brisk_annotate_internal(blk, sizeof *blk);
  blk->prev = blk->next = NULL;
  blk->size = size;
  blk->below = 0;
  blk->end = (uint8_t *)blk + size;
  brisk_annotate_no_access(block_area(blk), size - sizeof *blk);
  stack->held += size;
  stack->mapped_total += size;
  return blk;
}

/* A block, the frame records or the stack's page to the OS layer's
 * mapping cache, which refuses memory it holds already: what a stack used
 * after its destroy (its blocks went with it) would give it again, for
 * two later stacks to share. `caller`: the call the program made. */
static void release_cached(void *p, size_t size, size_t *calls, const char *caller) {
  if (BRISK_UNLIKELY(!_brisk_os_release_cached(BRISK_OS_CACHE_STACK, p, size, calls)))
    _brisk_os_fatal_pointer(caller, p,
                            "memory the mapping cache holds already (the stack was destroyed?)");
}

static void block_destroy(brisk_stack_t *stack, block_t *blk, const char *caller) {
  list_remove(blk);
  stack->held -= blk->size;
  size_t size = blk->size;
  brisk_annotate_internal(blk, size);
  release_cached(blk, size, &stack->system_requests, caller);
}

/*
 * A free block for `take` bytes aligned to `align`: the first free block
 * that fits, else a new one. Too-small free blocks met on the way are
 * destroyed while the free blocks exceed the bound, and only until as many
 * bytes as are needed have gone (the seed's worst_case() fix).
 */
static block_t *next_block(brisk_stack_t *stack, size_t take, size_t align, const char *caller) {
  block_t *cur = stack->hot.blk;
  size_t keep = stack->peak > STACK_KEEP_MIN ? stack->peak : STACK_KEEP_MIN;
  size_t destroyed = 0;
  size_t looked = 0;
  for (block_t *blk = cur->next, *next; blk != &stack->head && looked < STACK_SEARCH_MAX;
       blk = next, looked++) {
    next = blk->next;
    uintptr_t at = align_ptr(block_area(blk), align);
    if (at + take <= (uintptr_t)blk->end) return blk;
    size_t needed = take + (size_t)(at - (uintptr_t)block_area(blk));
    if (destroyed >= needed) break;
    if (stack->held - cur->below <= keep) continue;
    destroyed += blk->size;
    block_destroy(stack, blk, caller);
  }
  return block_create(stack, take, align);
}

/*
 * Make blk (free, or new) the current block, right after the old current
 * one. Frames that have allocated nothing in an almost full block start in
 * the new block instead, so the parent remembers it after their pop.
 */
static void adopt_block(brisk_stack_t *stack, block_t *blk) {
  block_t *cur = stack->hot.blk;
  if (blk->next != NULL) list_remove(blk);
  list_insert_after(cur, blk);
  blk->below = cur->below + blk->size;
  if (blk->below > stack->recent) stack->recent = blk->below;
  if (blk->below > stack->peak) stack->peak = blk->below;

  size_t room = (size_t)(cur->end - stack->hot.pos);
  if (room < (cur->size >> 3)) {
    for (frame_t *frame = stack->hot.top; frame-- > stack->hot.frames;) {
      if (frame->blk != cur || frame->pos != stack->hot.pos) break;
      frame->blk = blk;
      frame->pos = block_area(blk);
    }
  }
  stack->hot.blk = blk;
  stack->hot.pos = block_area(blk);
  stack->hot.end = stack->hot.annotated ? stack->hot.pos : blk->end;
}

/*
 * Annotated builds: open the current block up to `to` at least. Not
 * brisk_annotate_alloc: its Valgrind half registers a heap block
 * (MALLOCLIKE) that a pop, which frees many objects at once and knows none
 * of them, could never unregister; reopening the same bytes then registers
 * overlapping blocks, and memcheck's leak check aborts on them (seen with
 * Valgrind 3.19). Opened memory counts as defined for Valgrind; ASan only
 * unpoisons either way.
 */
static inline void open_to(brisk_stack_t *stack, uint8_t *to) {
  uint8_t *from = stack->hot.end;
  size_t chunk = STACK_OPEN_CHUNK;
  size_t left = (size_t)(stack->hot.blk->end - from);
  uint8_t *upto = from + (chunk < left ? chunk : left);
  if (upto < to) upto = to;
  brisk_annotate_internal(from, (size_t)(upto - from));
  stack->hot.end = upto;
}

/* Annotated builds: close the current block from `from` (<= stack->hot.end):
 * a pop, or a shrinking realloc, took that memory back. */
static BRISK_NOINLINE void close_from(brisk_stack_t *stack, uint8_t *from) {
  brisk_annotate_no_access(from, (size_t)(stack->hot.end - from));
  stack->hot.end = from;
}

/* ---- Allocation ------------------------------------------------------- */

/* True when `size` bytes at `at` (aligned to `align`) fit in the current
 * block and the arguments need nothing of the slow path: a bad alignment,
 * size 0 (which takes one byte, so that its pointer is unique) and sizes
 * above PTRDIFF_MAX go there (size - 1 wraps for 0: one comparison). */
BRISK_INLINE bool fits_fast(const brisk_stack_t *stack, uintptr_t at, size_t size, size_t align) {
  return (align & (align - 1)) == 0 && size - 1 < PTRDIFF_MAX && at + size <= (uintptr_t)stack->hot.end;
}


/* The request needs another block: a free one, or a new one. */
static BRISK_NOINLINE void *alloc_block_slow(brisk_stack_t *stack, size_t size, size_t take,
                                             size_t align, const char *caller) {
  block_t *blk = next_block(stack, take, align, caller);
  if (blk == NULL) return NULL;
  adopt_block(stack, blk);
  uintptr_t at = align_ptr(stack->hot.pos, align);
  if (stack->hot.annotated) open_to(stack, (uint8_t *)(at + take));
  stack->hot.pos = (uint8_t *)(at + take);
  account(stack, size);
  return (void *)at;
}

/* Whatever the fast path does not do: bad arguments, size 0, a full block,
 * and (annotated builds) memory of the current block not yet opened.
 * `caller`, here and below: the call the program made, which a misuse
 * message names (brisk_stack_alloc, or brisk_stack_realloc that
 * allocates; brisk_stack_push and brisk_stack_pop, or BRISK_STACK_SCOPE's
 * own push and pop). */
static BRISK_NOINLINE void *alloc_slow(brisk_stack_t *stack, size_t size, size_t align,
                                       const char *caller) {
  if (!brisk_is_power_of_two(align)) {
    errno = EINVAL;
    return NULL;
  }
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  size_t take = size + (size == 0);
  uintptr_t at = align_ptr(stack->hot.pos, align);
  if (at + take > (uintptr_t)stack->hot.blk->end)
    return alloc_block_slow(stack, size, take, align, caller);
  if (stack->hot.annotated && at + take > (uintptr_t)stack->hot.end)
    open_to(stack, (uint8_t *)(at + take));
  stack->hot.pos = (uint8_t *)(at + take);
  account(stack, size);
  return (void *)at;
}

/* The fast path: bump the position in the current block. The public
 * functions call these inline helpers, never each other, so nothing goes
 * through the PLT. */
BRISK_INLINE void *stack_alloc(brisk_stack_t *stack, size_t size, size_t align,
                               const char *caller) {
  if (align == 0) align = STACK_DEFAULT_ALIGN;
  uintptr_t at = align_ptr(stack->hot.pos, align);
  if (BRISK_UNLIKELY(!fits_fast(stack, at, size, align)))
    return alloc_slow(stack, size, align, caller);
  stack->hot.pos = (uint8_t *)(at + size);
  account(stack, size);
  return (void *)at;
}

/* brisk/stack.h's inline brisk_stack_alloc comes here for all it does not do. */
void *brisk_stack_alloc_slow_(brisk_stack_t *stack, size_t size, size_t align) {
  check_live("brisk_stack_alloc", stack);
  return stack_alloc(stack, size, align, "brisk_stack_alloc");
}

/*
 * Whether p (old_size bytes) is the top frame's last allocation: it ends
 * where the next one would start, in the current block, at or past where
 * the top frame started there. (Nothing tracks it on the fast path: sizes
 * are never rounded, so the last allocation ends at pos.)
 */
static bool is_last(const brisk_stack_t *stack, const uint8_t *p, size_t old_size) {
  const block_t *blk = stack->hot.blk;
  size_t took = old_size + (old_size == 0);
  if (p < block_area((block_t *)blk) || p >= blk->end || took > (size_t)(blk->end - p) ||
      p + took != stack->hot.pos)
    return false;
  if (stack->hot.top == stack->hot.frames) return true;
  const frame_t *top = stack->hot.top - 1;
  return top->blk != blk || p >= top->pos;
}

/*
 * realloc's check of a p that is not the top frame's last allocation: its
 * old_size bytes (one for 0) must lie in what the live frames hold, the
 * current block below pos or a block before it (each in use), else the
 * stack never handed p out, or a pop took it back: a malloc'd pointer,
 * another stack's, one past the live part. The blocks before the current
 * one are walked back from it, so this costs a compare or two when p is in
 * the current block, one step per block it lies behind otherwise. Not
 * told apart: a pointer inside a live allocation, or an old_size larger
 * than p's own that stays within the block (the stack keeps no record of
 * single allocations), and in an earlier block the tail that its frames
 * left unused.
 */
static void check_owned(const brisk_stack_t *stack, const uint8_t *p, size_t old_size) {
  const block_t *blk = stack->hot.blk;
  size_t took = old_size + (old_size == 0);
  const uint8_t *live_end = stack->hot.pos;
  while (blk != &stack->head) {
    if (p >= block_area((block_t *)blk) && p < blk->end) {
      if (p >= live_end)
        _brisk_os_fatal_pointer("brisk_stack_realloc", p,
                                "not an allocation of this stack (or popped already)");
      if (took > (size_t)(live_end - p))
        _brisk_os_fatal_pointer("brisk_stack_realloc", p,
                                "old_size runs past what this stack handed out");
      return;
    }
    blk = blk->prev;
    live_end = blk->end;
  }
  _brisk_os_fatal_pointer("brisk_stack_realloc", p,
                          "not an allocation of this stack (or popped already)");
}

void *brisk_stack_realloc(brisk_stack_t *stack, void *p, size_t old_size, size_t new_size,
                          size_t align) {
  if (BRISK_UNLIKELY(stack == NULL)) {
    errno = EINVAL;
    return NULL;
  }
  check_live("brisk_stack_realloc", stack);
  if (p == NULL) return stack_alloc(stack, new_size, align, "brisk_stack_realloc");
  uint8_t *old = p;
  bool last = is_last(stack, old, old_size);
  if (!last) check_owned(stack, old, old_size);
  if (align == 0) align = STACK_DEFAULT_ALIGN;
  if (!brisk_is_power_of_two(align)) {
    errno = EINVAL;
    return NULL;
  }
  if (new_size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  bool aligned = ((uintptr_t)old & (align - 1)) == 0;
  size_t take = new_size + (new_size == 0);
  if (last && aligned && take <= (size_t)(stack->hot.blk->end - old)) {
    if (stack->hot.annotated && old + take > stack->hot.end) open_to(stack, old + take);
    stack->hot.pos = old + take;
    stack->realloc_calls++;
    if (new_size >= old_size) {
      stack->requested += new_size - old_size;
      stack->hot.released -= new_size - old_size;
      stack->realloc_asked += old_size;
    } else {
      stack->hot.released += old_size - new_size;
      stack->realloc_asked += new_size;
      if (stack->hot.annotated) close_from(stack, stack->hot.pos); /* reopened on the next allocation */
    }
    return old;
  }
  if (new_size <= old_size && aligned) {
    if (old_size > take) brisk_annotate_no_access(old + take, old_size - take);
    stack->realloc_calls++;
    stack->realloc_asked += new_size;
    return old;
  }
  void *q = stack_alloc(stack, new_size, align, "brisk_stack_realloc");
  if (q == NULL) return NULL;
  memcpy(q, old, old_size < new_size ? old_size : new_size);
  brisk_annotate_no_access(old, old_size);
  return q;
}

/* ---- Frames ----------------------------------------------------------- */

BRISK_INLINE void save_frame(brisk_stack_t *stack) {
  frame_t *frame = stack->hot.top++;
  frame->blk = stack->hot.blk;
  frame->pos = stack->hot.pos;
  frame->in_use = stack->hot.asked - stack->hot.released;
}

/* The frame records are full: double them (a new mapping, copied). */
static BRISK_NOINLINE void push_slow(brisk_stack_t *stack, const char *caller) {
  size_t depth = stack_depth(stack);
  size_t used = stack_capacity(stack) * sizeof(frame_t);
  size_t bytes = brisk_align_up(2 * used, _brisk_os_page_size());
  bool reused;
  frame_t *bigger = _brisk_os_reserve_cached(BRISK_OS_CACHE_STACK, bytes, _brisk_os_page_size(),
                                             &reused, &stack->system_requests);
  if (bigger == NULL) stack_fatal(caller, "out of memory for frame records");
  memcpy(bigger, stack->hot.frames, used);
  if (stack->hot.frames != stack->inline_frames)
    release_cached(stack->hot.frames, stack->frames_bytes, &stack->system_requests, caller);
  stack->hot.frames = bigger;
  stack->frames_bytes = bytes;
  stack->hot.top = bigger + depth;
  stack->hot.limit = bigger + bytes / sizeof(frame_t);
  set_pop_floor(stack);
  save_frame(stack);
}

BRISK_INLINE void stack_push(brisk_stack_t *stack, const char *caller) {
  if (BRISK_UNLIKELY(stack->hot.top == stack->hot.limit)) {
    push_slow(stack, caller);
    return;
  }
  save_frame(stack);
}

void brisk_stack_push_slow_(brisk_stack_t *stack) {
  check_live("brisk_stack_push", stack);
  stack_push(stack, "brisk_stack_push");
}

void brisk_stack_scope_push_slow_(brisk_stack_t *stack) {
  check_live("BRISK_STACK_SCOPE", stack);
  stack_push(stack, "BRISK_STACK_SCOPE");
}

/* Give free blocks beyond the bound back to the OS, farthest first. */
static void trim_free_blocks(brisk_stack_t *stack, const char *caller) {
  size_t in_use = stack->hot.blk->below;
  if (++stack->decay_clock % STACK_PEAK_DECAY == 0) {
    stack->peak /= 2;
    if (stack->peak < stack->recent) stack->peak = stack->recent;
    if (stack->peak < in_use) stack->peak = in_use;
    stack->recent = in_use;
  }
  size_t keep = stack->peak > STACK_KEEP_MIN ? stack->peak : STACK_KEEP_MIN;
  while (stack->held - in_use > keep) block_destroy(stack, stack->head.prev, caller);
}

/* The popped frame spanned blocks: poison them and trim the free list. */
static BRISK_NOINLINE void pop_slow(brisk_stack_t *stack, const frame_t *frame,
                                    const char *caller) {
  block_t *blk = frame->blk;
  brisk_annotate_no_access(frame->pos, (size_t)(blk->end - frame->pos));
  while (blk != stack->hot.blk) {
    blk = blk->next;
    brisk_annotate_no_access(block_area(blk), (size_t)(blk->end - block_area(blk)));
  }
  stack->hot.blk = frame->blk;
  stack->hot.pos = frame->pos;
  stack->hot.end = stack->hot.annotated ? frame->pos : frame->blk->end;
  stack->hot.released = stack->hot.asked - frame->in_use;
  trim_free_blocks(stack, caller);
}

BRISK_INLINE void stack_pop(brisk_stack_t *stack, const char *caller) {
  if (BRISK_UNLIKELY(stack->hot.top == stack->hot.frames))
    stack_fatal(caller, "no frame to pop (more pops than pushes)");
  const frame_t *frame = --stack->hot.top;
  if (BRISK_UNLIKELY(frame->blk != stack->hot.blk)) {
    pop_slow(stack, frame, caller);
    return;
  }
  if (stack->hot.annotated && stack->hot.end != frame->pos) close_from(stack, frame->pos);
  stack->hot.pos = frame->pos;
  stack->hot.released = stack->hot.asked - frame->in_use;
}

void brisk_stack_pop_slow_(brisk_stack_t *stack) {
  check_live("brisk_stack_pop", stack);
  stack_pop(stack, "brisk_stack_pop");
}

void brisk_stack_scope_pop_slow_(brisk_stack_t *stack) {
  check_live("BRISK_STACK_SCOPE", stack);
  stack_pop(stack, "BRISK_STACK_SCOPE");
}

/* ---- Life cycle --------------------------------------------------------- */

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  brisk_stack_stats((const brisk_stack_t *)((const char *)entry - offsetof(brisk_stack_t, entry)),
                    out);
}

brisk_stack_t *brisk_stack_create(size_t first_block) {
  size_t page = _brisk_os_page_size();
  if (first_block == 0) first_block = STACK_DEFAULT_BLOCK;
  if (first_block > PTRDIFF_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  size_t calls = 0;
  bool reused;
  brisk_stack_t *stack =
      _brisk_os_reserve_cached(BRISK_OS_CACHE_STACK, page, page, &reused, &calls);
  if (stack == NULL) return NULL;
  memset(stack, 0, sizeof *stack);
  stack->system_requests = calls;
  stack->head.prev = stack->head.next = &stack->head;
  stack->min_block = brisk_align_up(first_block, page);
  stack->hot.frames = stack->inline_frames;
  stack->hot.top = stack->inline_frames;
  stack->hot.limit = stack->inline_frames + (page - sizeof *stack) / sizeof(frame_t);
  stack->hot.asked = ONE_REQUEST; /* no request counted, no byte asked */

  block_t *blk = block_create(stack, stack->min_block - sizeof(block_t), STACK_DEFAULT_ALIGN);
  if (blk == NULL) {
    release_cached(stack, page, NULL, "brisk_stack_create");
    return NULL;
  }
  list_insert_after(&stack->head, blk);
  blk->below = blk->size;
  stack->peak = blk->size;
  stack->hot.blk = blk;
  stack->hot.pos = block_area(blk);
  stack->hot.annotated = brisk_tools_watch_blocks();
  stack->hot.end = stack->hot.annotated ? stack->hot.pos : blk->end;
  set_pop_floor(stack);
  _brisk_region_register(&stack->entry, BRISK_REGION_STACK, registry_stats);
  return stack;
}

/* A stack unregistered already: its blocks, frame records and page to
 * the mapping cache, the page left destroyed (see the top). */
static void stack_destroy(brisk_stack_t *stack) {
  while (stack->head.next != &stack->head)
    block_destroy(stack, stack->head.next, "brisk_stack_destroy");
  if (stack->hot.frames != stack->inline_frames)
    release_cached(stack->hot.frames, stack->frames_bytes, NULL, "brisk_stack_destroy");
  stack->hot.pos = stack->hot.end = NULL;
  stack->hot.blk = NULL;
  stack->hot.frames = stack->hot.top = stack->hot.limit = NULL;
  stack->hot.pop_floor = UINTPTR_MAX;
  release_cached(stack, _brisk_os_page_size(), NULL, "brisk_stack_destroy");
}

/* A handle that is no live stack (destroyed already: its page in the
 * mapping cache as destroy left it, or back with the system; another
 * kind's) has no live entry, found without reading the handle, and
 * destroying it again would give its blocks to the cache twice. A
 * thread's default stack is linked in tls_stacks (tls_pprev set) until
 * its thread's destructor or a sweep destroys it: destroyed here, it would
 * be destroyed again by them. */
void brisk_stack_destroy(brisk_stack_t *stack) {
  if (stack == NULL) return;
  if (BRISK_UNLIKELY(!_brisk_region_unregister(&stack->entry, BRISK_REGION_STACK)))
    not_live("brisk_stack_destroy", stack);
  if (BRISK_UNLIKELY(stack->tls_pprev != NULL))
    _brisk_os_fatal_pointer("brisk_stack_destroy", stack,
                            "a thread's default stack (brisk_stack_tls), destroyed when the "
                            "thread exits");
  stack_destroy(stack);
}

/* One of the owner's words, read from any thread (see brisk_stack_stats). */
#define OWNER_WORD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/*
 * The owner's thread gets exact numbers. Another thread (a process-wide
 * snapshot, through the registry) reads the owner's words while it may be
 * writing them with plain stores: a racy read by design, kept from
 * ThreadSanitizer as pool.c's racy_link is. Each word is read whole (an
 * aligned word load), so each count is one the owner wrote, but the counts
 * may be a few operations apart (bytes_in_use a moment ahead of
 * bytes_held, say); the stack itself is never written.
 */
BRISK_NO_TSAN void brisk_stack_stats(const brisk_stack_t *stack, brisk_region_stats_t *out) {
  if (stack == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  /* The blocks, the stack's own page, and its frame records if mapped. */
  const frame_t *frames = OWNER_WORD(stack->hot.frames);
  if (BRISK_UNLIKELY(frames == NULL)) not_live("brisk_stack_stats", stack);
  size_t frames_held = frames != stack->inline_frames ? OWNER_WORD(stack->frames_bytes) : 0;
  out->bytes_held = OWNER_WORD(stack->held) + _brisk_os_page_size() + frames_held;
  out->system_requests = OWNER_WORD(stack->system_requests);
  /* The words a decay moves, read under its sequence count (see
   * brisk_stack_decay_slow_); the owner never waits. */
  size_t seq, decayed, requested, asked, released;
  for (;;) {
    seq = __atomic_load_n(&stack->decay_seq, __ATOMIC_ACQUIRE);
    decayed = __atomic_load_n(&stack->allocations_decayed, __ATOMIC_ACQUIRE);
    requested = __atomic_load_n(&stack->requested, __ATOMIC_ACQUIRE);
    /* released before asked: a pop sets released from an asked no newer
     * than the one read after it, so the bytes in use do not wrap. */
    released = __atomic_load_n(&stack->hot.released, __ATOMIC_ACQUIRE);
    asked = __atomic_load_n(&stack->hot.asked, __ATOMIC_ACQUIRE);
    if ((seq & 1) == 0 && __atomic_load_n(&stack->decay_seq, __ATOMIC_RELAXED) == seq) break;
    brisk_cpu_relax();
  }
  out->bytes_requested = requested + (asked & ASKED_MASK) + OWNER_WORD(stack->realloc_asked);
  out->bytes_in_use = in_use_of(asked, released);
  out->allocations = decayed + nb_of(asked) + OWNER_WORD(stack->realloc_calls);
}

size_t _brisk_stack_mapped_total(const brisk_stack_t *stack) { return stack->mapped_total; }

/* ---- The per-thread default stack ---------------------------------------
 *
 * brisk_stack_tls gives each thread a stack of its own, made on its first
 * call (tls_create_slow) and destroyed by a pthread key destructor
 * (tls_destroy). That destructor may never run for a stack made late in
 * the thread's exit: glibc runs key destructors in at most
 * PTHREAD_DESTRUCTOR_ITERATIONS rounds, each in key order, and drops a
 * value set in the last round for a key it has passed, so a call from a
 * later key's destructor in that round (after tls_destroy destroyed the
 * thread's stack, or as its first call) makes a stack nobody would
 * destroy. The thread cannot tell that it is in that round (exit_token.h),
 * so every default stack holds an exit token for its thread and is linked
 * in tls_stacks: tls_destroy unlinks it, drops the token and destroys it;
 * a stack whose token says its thread died holding it never met its
 * destructor, and a sweep (tls_unlink_dead) destroys it. tls_create_slow
 * sweeps whenever the list has grown to tls_sweep_at, twice what it held
 * after the previous sweep plus TLS_SWEEP_MIN: a sweep costs one probe per
 * stack listed, at most two per stack made since the previous sweep, and
 * the list, dead threads' stacks included, never holds more than
 * tls_sweep_at.
 *
 * Threading: tls_stack is the thread's own; tls_lock guards tls_stacks,
 * tls_count and tls_sweep_at (creation, destruction and sweeps only, never
 * brisk_stack_tls's own path); a stack is made, used and destroyed by its
 * thread, or destroyed by a sweep once its thread is dead (the token's
 * probe is an acquire of everything that thread did). tls_lock is taken
 * with no other lock held and is released before anything that takes one
 * (brisk_stack_create and _destroy take the registry's); pthread_atfork
 * holds it across fork, as registry.c does registry_lock.
 */

#define TLS_SWEEP_MIN 16

static BRISK_TLS brisk_stack_t *tls_stack;
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t tls_lock = PTHREAD_MUTEX_INITIALIZER;
static brisk_stack_t *tls_stacks;
static size_t tls_count;
static size_t tls_sweep_at = TLS_SWEEP_MIN;

static void tls_link(brisk_stack_t *stack) {
  stack->tls_next = tls_stacks;
  stack->tls_pprev = &tls_stacks;
  if (tls_stacks != NULL) tls_stacks->tls_pprev = &stack->tls_next;
  tls_stacks = stack;
  tls_count++;
}

static void tls_unlink(brisk_stack_t *stack) {
  *stack->tls_pprev = stack->tls_next;
  if (stack->tls_next != NULL) stack->tls_next->tls_pprev = stack->tls_pprev;
  tls_count--;
}

/* Under tls_lock: the listed stacks whose thread died holding their token,
 * unlinked and chained through tls_next; the next sweep's threshold. */
static brisk_stack_t *tls_unlink_dead(void) {
  brisk_stack_t *dead = NULL;
  for (brisk_stack_t *stack = tls_stacks, *next; stack != NULL; stack = next) {
    next = stack->tls_next;
    if (!_brisk_exit_token_holder_died(&stack->tls_token)) continue;
    tls_unlink(stack);
    stack->tls_next = dead;
    dead = stack;
  }
  tls_sweep_at = 2 * tls_count + TLS_SWEEP_MIN;
  return dead;
}

/* A stack unlinked, its token unheld: the token, then the stack. */
static void tls_stack_destroy(brisk_stack_t *stack) {
  _brisk_exit_token_fini(&stack->tls_token);
  /* Registered by brisk_stack_create, and unregistered only here. */
  (void)_brisk_region_unregister(&stack->entry, BRISK_REGION_STACK);
  stack_destroy(stack);
}

static size_t tls_destroy_chain(brisk_stack_t *dead) {
  size_t destroyed = 0;
  for (brisk_stack_t *next; dead != NULL; dead = next, destroyed++) {
    next = dead->tls_next;
    tls_stack_destroy(dead);
  }
  return destroyed;
}

static void tls_destroy(void *value) {
  brisk_stack_t *stack = value;
  if (tls_stack == stack) tls_stack = NULL;
  /* Unlinked before the token is dropped: a sweep never probes a stack its
   * thread is destroying. */
  pthread_mutex_lock(&tls_lock);
  tls_unlink(stack);
  pthread_mutex_unlock(&tls_lock);
  _brisk_exit_token_drop(&stack->tls_token);
  tls_stack_destroy(stack);
}

static void tls_fork_prepare(void) { pthread_mutex_lock(&tls_lock); }
static void tls_fork_parent(void) { pthread_mutex_unlock(&tls_lock); }
static void tls_fork_child(void) { pthread_mutex_unlock(&tls_lock); }

static void tls_key_create(void) {
  if (pthread_key_create(&tls_key, tls_destroy) != 0)
    stack_fatal("brisk_stack_tls", "pthread_key_create failed");
  pthread_atfork(tls_fork_prepare, tls_fork_parent, tls_fork_child);
}

static BRISK_NOINLINE brisk_stack_t *tls_create_slow(void) {
  pthread_once(&tls_once, tls_key_create);
  brisk_stack_t *stack = brisk_stack_create(0);
  if (stack == NULL) stack_fatal("brisk_stack_tls", "out of memory");
  _brisk_exit_token_init(&stack->tls_token);
  /* Fresh and not yet listed: nobody else can be holding it. */
  _brisk_exit_token_hold(&stack->tls_token);
  brisk_stack_t *dead = NULL;
  pthread_mutex_lock(&tls_lock);
  tls_link(stack);
  if (tls_count >= tls_sweep_at) dead = tls_unlink_dead();
  pthread_mutex_unlock(&tls_lock);
  tls_destroy_chain(dead);
  if (pthread_setspecific(tls_key, stack) != 0)
    stack_fatal("brisk_stack_tls", "pthread_setspecific failed");
  tls_stack = stack;
  return stack;
}

brisk_stack_t *brisk_stack_tls(void) {
  brisk_stack_t *stack = tls_stack;
  if (BRISK_UNLIKELY(stack == NULL)) stack = tls_create_slow();
  return stack;
}

size_t _brisk_stack_tls_sweep(void) {
  pthread_mutex_lock(&tls_lock);
  brisk_stack_t *dead = tls_unlink_dead();
  pthread_mutex_unlock(&tls_lock);
  return tls_destroy_chain(dead);
}
