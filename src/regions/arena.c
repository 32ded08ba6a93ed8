/*
 * arena.c — a lock-free bump allocator over one reservation of address
 * space (seed 001: one unconditional fetch_add, the rare commit after it).
 *
 * Layout of a reservation (one _brisk_os_reserve_address_space call):
 *
 *   [ header pages: brisk_arena_t ][ data: limit bytes, committed lazily ... ]
 *   base                           base + header_size
 *
 * The header pages are committed at creation; data pages are committed in
 * chunks (1 MiB, growing to a quarter of what is committed, at most 64 MiB)
 * when an allocation crosses the committed frontier. No malloc anywhere.
 *
 * Transparent huge pages: where the kernel gives them to ranges that ask
 * (os.h: _brisk_os_huge_page_size), a reservation of two huge pages or
 * more is aligned to the huge page and asks for them (MADV_HUGEPAGE)
 * beyond its first huge page, which keeps a small arena small; past that
 * first huge page the commit frontier stops on huge-page boundaries, so
 * the kernel can back each one whole at its first touch (one fault where
 * 4 KiB pages take 512).
 *
 * Reuse: destroy hands the reservation to the OS layer's mapping cache
 * (os.h) with its read-write prefix (`mapped`) and the bytes it touched;
 * a create of the same size takes it back, so an arena made and destroyed
 * per task faults its pages in once, not every time. The new arena clears
 * its header; its data holds what the old one left: brisk_arena_alloc
 * never promised zeroed memory.
 *
 * Call tree:
 *   brisk_arena_create   a cached reservation of the size (cleared header),
 *                        else reserve, commit the header pages, advise huge
 *                        pages; register
 *   brisk_arena_alloc    check size/align; fetch_add(offset); fast return
 *                        when the block ends below `committed`
 *     alloc_slow         (cold) the block ends past the frontier:
 *       exhausted          past the limit: clamp offset, ENOMEM
 *       ensure_committed   commit up to the block's end, CAS-max `committed`
 *     hand_out           count it in the thread's slot; ASan/Valgrind
 *   brisk_arena_reset    poison what was used, offset = 0, maybe uncommit
 *   brisk_arena_used / brisk_arena_stats / brisk_arena_destroy (unregister
 *                        first, aborting for a handle that is no live
 *                        arena; the header left destroyed, below; then to
 *                        the mapping cache)
 *
 * Who touches which field, and with what memory order:
 *   offset         every allocating thread: fetch_add, relaxed. It only
 *                  partitions the address range: the atomicity of the RMW
 *                  alone gives every thread a disjoint [start, start+claim);
 *                  no data is published through it (handing a block to
 *                  another thread is the program's own synchronisation).
 *                  A failed allocation stores `limit` into it (relaxed, see
 *                  exhausted()); reset stores 0 with no allocation running.
 *                  Alone on its cache line: it is the only contended line.
 *   committed      read by every allocation (acquire), advanced by the
 *                  slow path only, with a CAS-max (acq_rel on success) after
 *                  the thread's own mprotect has returned. Acquire/release
 *                  orders "pages made accessible" before "a thread that saw
 *                  the new frontier writes its block". Several threads that
 *                  cross the frontier together each commit the range they
 *                  need themselves (mprotect of a range already read-write
 *                  is harmless and keeps its contents), so nobody waits for
 *                  anybody: lock-free, not even a spin.
 *   mapped         data bytes read-write in the reservation: at least
 *                  `committed`, more when the reservation came from the
 *                  cache with more committed, or a commit rounded past the
 *                  limit. CAS-max (release) by the commit path after its
 *                  own mprotect has returned; the commit path loads it
 *                  (acquire) to skip what is read-write already, so the
 *                  mprotect behind a value it sees comes before the
 *                  frontier it then publishes. Reset and destroy read it
 *                  alone.
 *   touched        the most data bytes handed out since the reservation's
 *                  pages were last dropped: reset (keeping them) and
 *                  destroy only, never concurrent with allocation.
 *   system_requests  OS calls made for the arena: set at creation, then
 *                  relaxed fetch_adds by the commit path and by reset.
 *   slots[i]       per-thread counts of allocations and requested bytes
 *                  (thread_slot.h): only slot i's holder writes entry i, a
 *                  relaxed load + store (brisk_owner_add, no RMW); threads
 *                  without a slot share slots[BRISK_THREAD_SLOTS] with
 *                  fetch_add. Stats sum them with relaxed loads.
 *   data, limit, base, reservation_size, header_size, huge: written
 *                  at creation, read-only after; they share the read-mostly
 *                  line with `committed`.
 *   resets, born   epochs (arena_epoch, below): `born` at creation, `resets`
 *                  set anew by create, reset and destroy (never concurrent
 *                  with allocation, so plain loads and stores do), read
 *                  plainly by cursors.
 *   poisoned_end   reset and destroy only, never concurrent with reset
 *                  (documented).
 *   entry          the registry's (registry.h), under its lock.
 *
 * A destroyed arena (its header as destroy leaves it, while the mapping
 * cache keeps the reservation): limit and committed 0 and resets moved
 * on, which no live arena has (its limit is at least 16). Every path of a
 * call with it meets that before it hands anything out: an allocation
 * of any size is too large for limit 0 (too_large), or, size 0, ends past
 * committed 0 (alloc_slow); a cursor's inline path sees the resets move
 * and goes out of line; the out-of-line calls test limit first. Each
 * then aborts, "not a live arena (destroyed already?)", at no cost to a
 * live arena's allocations. The marks are plain stores, read plainly: a
 * correct program's calls with an arena all happen before its destroy
 * (the program's own ordering, which destroy needs anyway), so they read
 * the live values; a call made after the destroy, in its thread or in
 * one the program ordered after it, reads the marks. Only a call racing
 * with destroy, a bug of the program, reads them in a race.
 *
 * A new arena may take a destroyed one's reservation from the cache, at
 * the same address: the old handle is then the new arena's, and nothing
 * can tell a call with it from the new arena's own. A cursor can be told:
 * it remembers the `resets` value it last claimed under, and every value
 * `resets` takes, in every arena, is a new epoch of one process-wide
 * counter, so a cursor made before the new arena was created holds a
 * value below the new arena's `born`. Its inline path sees `resets`
 * differ and goes out of line, which aborts, "not a live arena (destroyed
 * already?)", where a reset alone would have claimed afresh.
 *
 * Claims are multiples of 16 and the data starts page-aligned, so every
 * block starts 16-aligned; a larger alignment A claims A - 16 more bytes and
 * aligns the pointer inside its claim, so one fetch_add serves any A.
 *
 * Statistics: bytes_in_use is the offset (claims: sizes rounded up to 16,
 * alignment padding included), bytes_held the header and the committed
 * data pages, system_requests every OS call made for the arena (each call
 * of a reservation's, two per uncommit). allocations and bytes_requested
 * (the sizes asked, not rounded) are counted per thread, in the calling
 * thread's slot, so the hot path gains no shared atomic: one TLS load and
 * two unlocked adds to a line only this thread writes. A cursor is one
 * caller: the arena counts each chunk it claims as one allocation of the
 * chunk's size, not the blocks carved from it inline.
 *
 * Tools: every block is unpoisoned as it is handed out; reset poisons
 * everything committed, so a use after reset (or past the end of a block
 * into padding, after the first reset) is an ASan error. Memory committed
 * for the first time is not poisoned: two threads committing the same
 * range would otherwise race to poison a block a third one has unpoisoned.
 * Under Valgrind the arena is a mempool (annotate.h) that reset empties at
 * once.
 */
#include "base/annotate.h"
#include "base/base.h"
#include "os/os.h"
#include "regions/registry.h"
#include "regions/thread_slot.h"

#include <brisk/arena.h>
#include <errno.h>
#include <string.h>

#define MIN_CHUNK ((size_t)1 << 20)
#define MAX_CHUNK ((size_t)64 << 20)
/* 64 TiB: keeps every claim and every offset far from wrapping around. */
#define MAX_RESERVE ((size_t)1 << 46)
#define CLAIM_ALIGN ((size_t)16)
/* brisk/arena.h's inline cursor path rounds to 16, keeping positions 16-aligned. */
_Static_assert(CLAIM_ALIGN == 16, "brisk_arena_cursor_alloc assumes 16-byte claims");

/* One thread's counts (see thread_slot.h), a cache line of its own. */
typedef struct arena_slot_s {
  _Atomic size_t allocations; /* successful allocations */
  _Atomic size_t requested;   /* the sizes they asked for */
} BRISK_ALIGNED(BRISK_CACHE_LINE) arena_slot_t;

struct brisk_arena_s {
  /* Read by every allocation, written rarely. */
  uint8_t *data;
  size_t limit; /* bytes usable at data: what was asked at creation, rounded up to 16 */
  _Atomic size_t committed; /* data bytes accessible, <= limit */
  uint8_t *base;            /* the reservation (header pages first) */
  size_t reservation_size;
  size_t header_size;       /* pages of this struct, committed at creation */
  size_t page;
  size_t huge;              /* transparent huge page size, 0 when not asked for */
  /* Hand each block to ASan/Valgrind: brisk_tools_watch_blocks at
   * creation, so that other builds pay a predictable branch per allocation
   * rather than a client request. */
  bool announce;
  /* The epoch of the last reset, or of creation (destroy moves it on
   * too). Cursors compare it with the one they claimed their chunk under;
   * create, reset and destroy (never concurrent with allocation) are its
   * only writers, so plain loads and stores do. */
  size_t resets;
  size_t born; /* the epoch of creation: a cursor with an older one is stale */
  /* Single-threaded (reset, destroy). */
  size_t poisoned_end; /* ASan shadow poisoned over data[0, poisoned_end) */
  size_t touched;      /* most data bytes handed out since the pages were last dropped */
  brisk_region_entry_t entry;
  /* The one contended word. */
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t offset;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t system_requests;
  _Atomic size_t mapped; /* data bytes read-write (see the top) */
  arena_slot_t slots[BRISK_THREAD_SLOTS + 1]; /* the last: threads without a slot */
};

_Static_assert(sizeof(arena_slot_t) == BRISK_CACHE_LINE, "slot entries are one cache line");

/* Each creation, reset and destroy of any arena takes the next epoch
 * (relaxed: the counter's own order makes the epoch of a creation that
 * follows a destroy larger than every epoch taken before that destroy). */
static _Atomic size_t arena_epoch;

static size_t next_epoch(void) {
  return atomic_fetch_add_explicit(&arena_epoch, 1, memory_order_relaxed) + 1;
}

/* ---- Counting ---- */

/* The thread's entry had no slot behind it: take one now, or count in the
 * shared entry of threads without one. */
static BRISK_NOINLINE void count_alloc_no_slot(brisk_arena_t *arena, size_t size) {
  uint32_t slot = brisk_thread_slot();
  arena_slot_t *e = &arena->slots[slot];
  if (slot != BRISK_NO_THREAD_SLOT) {
    brisk_owner_add(&e->allocations, 1);
    brisk_owner_add(&e->requested, size);
    return;
  }
  atomic_fetch_add_explicit(&e->allocations, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&e->requested, size, memory_order_relaxed);
}

/* A successful allocation of `size` bytes (as asked), in the calling
 * thread's own entry: found from one TLS word, no atomic RMW. */
BRISK_INLINE void count_alloc(brisk_arena_t *arena, size_t size) {
  uint32_t line = brisk_thread_slot_line_;
  if (BRISK_UNLIKELY(line == 0)) {
    count_alloc_no_slot(arena, size);
    return;
  }
  arena_slot_t *e = (arena_slot_t *)((char *)arena->slots + line) - 1;
  brisk_owner_add(&e->allocations, 1);
  brisk_owner_add(&e->requested, size);
}

static void count_calls(brisk_arena_t *arena, size_t calls) {
  atomic_fetch_add_explicit(&arena->system_requests, calls, memory_order_relaxed);
}

/* Bytes handed out since creation or the last reset. */
static size_t used_of(const brisk_arena_t *arena) {
  size_t offset = atomic_load_explicit(&((brisk_arena_t *)arena)->offset, memory_order_relaxed);
  return offset < arena->limit ? offset : arena->limit;
}

/* A destroyed arena (see the top). */
BRISK_INLINE bool destroyed(const brisk_arena_t *arena) { return arena->limit == 0; }

static BRISK_COLD BRISK_NORETURN void not_live(const char *caller, const brisk_arena_t *arena) {
  _brisk_os_fatal_pointer(caller, arena, "not a live arena (destroyed already?)");
}

/* The checks of the calls that are not allocations. */
BRISK_INLINE void check_live(const char *caller, const brisk_arena_t *arena) {
  if (BRISK_UNLIKELY(destroyed(arena))) not_live(caller, arena);
}

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  brisk_arena_stats((const brisk_arena_t *)((const char *)entry - offsetof(brisk_arena_t, entry)),
                    out);
}

/* ---- The arena ---- */

/* Where the reservation starts: on a huge page when it asks for them. */
static size_t reservation_align(size_t total, size_t page, size_t huge) {
  return huge != 0 && total >= 2 * huge ? huge : page;
}

brisk_arena_t *brisk_arena_create(size_t reserve) {
  if (reserve == 0) {
    errno = EINVAL;
    return NULL;
  }
  if (reserve > MAX_RESERVE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t page = _brisk_os_page_size();
  size_t header_size = brisk_align_up(sizeof(brisk_arena_t), page);
  size_t total = header_size + brisk_align_up(reserve, page);
  size_t align = reservation_align(total, page, _brisk_os_huge_page_size());
  size_t calls = 0, committed = 0, resident = 0;
  uint8_t *base =
      _brisk_os_cache_take(BRISK_OS_CACHE_ARENA, total, align, &committed, &resident, &calls);
  if (base != NULL) {
    /* A destroyed arena's reservation: the header pages and `committed`
     * bytes from base are read-write, with its data in them. */
    memset(base, 0, header_size);
  } else {
    base = _brisk_os_reserve_address_space(total, align, &calls);
    if (base == NULL) return NULL;
    if (!_brisk_os_commit(base, header_size, &calls)) {
      _brisk_os_release(base, total, NULL);
      errno = ENOMEM;
      return NULL;
    }
    /* Huge pages past the first one (see the top). */
    if (align > page) _brisk_os_advise_huge_pages(base + align, total - align, &calls);
    committed = header_size;
  }
  /* Cleared or fresh: the slots' counts start at 0. */
  brisk_arena_t *arena = (brisk_arena_t *)base;
  arena->data = base + header_size;
  /* Every claim is a multiple of CLAIM_ALIGN, so the limit is rounded up to
   * one (the data pages are whole pages anyway): an arena of 100 bytes
   * serves a request of 100. */
  arena->limit = brisk_align_up(reserve, CLAIM_ALIGN);
  /* What the cache brought in is committed as far as the limit lets it. */
  size_t data_mapped = committed - header_size;
  atomic_init(&arena->committed, data_mapped < arena->limit ? data_mapped : arena->limit);
  atomic_init(&arena->mapped, data_mapped);
  arena->touched = resident > header_size ? resident - header_size : 0;
  arena->base = base;
  arena->reservation_size = total;
  arena->header_size = header_size;
  arena->page = page;
  arena->huge = align > page ? align : 0;
  arena->announce = brisk_tools_watch_blocks();
  brisk_annotate_mempool_create(arena);
  arena->poisoned_end = 0;
  arena->born = arena->resets = next_epoch();
  atomic_init(&arena->offset, 0);
  atomic_init(&arena->system_requests, calls);
  _brisk_region_register(&arena->entry, BRISK_REGION_ARENA, registry_stats);
  return arena;
}

void brisk_arena_destroy(brisk_arena_t *arena) {
  if (arena == NULL) return;
  /* Before anything is read at the handle: a second destroy (the
   * reservation in the mapping cache, its header as we leave it, or back
   * with the system) or another kind's handle has no live entry, and going
   * on would give a mapping to the cache twice, or one that is no
   * arena's. */
  if (BRISK_UNLIKELY(!_brisk_region_unregister(&arena->entry, BRISK_REGION_ARENA)))
    not_live("brisk_arena_destroy", arena);
  /* Every block goes, and our poisoning with it (resets' and, under
   * Valgrind, the blocks handed out since), so whatever is mapped here
   * next starts clean. */
  size_t committed = atomic_load_explicit(&arena->committed, memory_order_relaxed);
  brisk_annotate_mempool_release(arena, arena->data,
                                 committed > arena->poisoned_end ? committed : arena->poisoned_end);
  size_t mapped = atomic_load_explicit(&arena->mapped, memory_order_relaxed);
  size_t touched = used_of(arena);
  if (touched < arena->touched) touched = arena->touched;
  if (touched > mapped) touched = mapped;
  size_t header_size = arena->header_size;
  /* Destroyed (see the top): every later call with this handle, while the
   * cache keeps the reservation, meets these and aborts. */
  arena->limit = 0;
  atomic_store_explicit(&arena->committed, 0, memory_order_relaxed);
  arena->resets = next_epoch();
  /* Refused where the cache holds the reservation already (a header
   * garbled to name a destroyed one's): kept twice, two later arenas
   * would share it. */
  if (BRISK_UNLIKELY(!_brisk_os_cache_put(BRISK_OS_CACHE_ARENA, arena->base,
                                          arena->reservation_size, header_size + mapped,
                                          header_size + brisk_align_up(touched, arena->page),
                                          NULL)))
    _brisk_os_fatal_pointer("brisk_arena_destroy", arena,
                            "its memory is in the mapping cache already");
}

/* The chunk to commit beyond `committed` bytes: grows with the arena. */
static size_t chunk_size(size_t committed) {
  size_t chunk = committed / 4;
  if (chunk < MIN_CHUNK) return MIN_CHUNK;
  if (chunk > MAX_CHUNK) return MAX_CHUNK;
  return chunk;
}

/* Where a commit up to `target` data bytes stops: on a page, or past the
 * first huge page on a huge page, and within the reservation. */
static size_t commit_end(const brisk_arena_t *arena, size_t target) {
  uintptr_t end = (uintptr_t)arena->data + target;
  bool huge = arena->huge != 0 && end > (uintptr_t)arena->base + arena->huge;
  end = brisk_align_up(end, huge ? arena->huge : arena->page);
  size_t data_pages = arena->reservation_size - arena->header_size;
  target = (size_t)(end - (uintptr_t)arena->data);
  return target < data_pages ? target : data_pages;
}

/*
 * Make data[0, end) accessible (end <= limit). `committed` is always a page
 * multiple or `limit`, and cur < end <= limit, so cur is page-aligned.
 */
static bool ensure_committed(brisk_arena_t *arena, size_t end) {
  size_t cur = atomic_load_explicit(&arena->committed, memory_order_acquire);
  if (cur >= end) return true; /* another thread got there first */
  size_t target = cur + chunk_size(cur);
  if (target < end) target = end;
  target = commit_end(arena, target);
  /* What is read-write already (from the cache, or a commit that went past
   * the limit) needs no mprotect. */
  size_t mapped = atomic_load_explicit(&arena->mapped, memory_order_acquire);
  if (target > mapped) {
    size_t from = cur > mapped ? cur : mapped;
    size_t calls = 0;
    bool ok = _brisk_os_commit(arena->data + from, target - from, &calls);
    count_calls(arena, calls);
    if (!ok) return false;
    while (mapped < target &&
           !atomic_compare_exchange_weak_explicit(&arena->mapped, &mapped, target,
                                                  memory_order_release, memory_order_relaxed)) {
    }
  }
  /* CAS-max: publish the new frontier unless someone published a larger
   * one. Our own mprotect (or an earlier one) already covers [cur, target),
   * so whatever the outcome our block is accessible. */
  size_t frontier = target < arena->limit ? target : arena->limit;
  while (cur < frontier &&
         !atomic_compare_exchange_weak_explicit(&arena->committed, &cur, frontier,
                                                memory_order_acq_rel, memory_order_acquire)) {
  }
  return true;
}

/*
 * The claim ran past the limit. Every block handed out ends at or below
 * `limit`, and the offset has stayed >= limit since the first failure (it
 * only grows, and nothing but reset lowers it below limit), so storing
 * `limit` moves nothing below a live block and keeps the offset from
 * creeping up by failed claims forever.
 */
static void *exhausted(brisk_arena_t *arena) {
  atomic_store_explicit(&arena->offset, arena->limit, memory_order_relaxed);
  errno = ENOMEM;
  return NULL;
}

static inline void *hand_out(brisk_arena_t *arena, size_t start, size_t size, size_t align) {
  uint8_t *p = arena->data + start;
  count_alloc(arena, size);
  if (align > CLAIM_ALIGN) p = (uint8_t *)brisk_align_up((uintptr_t)p, align);
  if (BRISK_ASAN || BRISK_UNLIKELY(arena->announce)) brisk_annotate_mempool_alloc(arena, p, size);
  return p;
}

static BRISK_COLD void *alloc_slow(brisk_arena_t *arena, size_t start, size_t end, size_t size,
                                   size_t align) {
  check_live("brisk_arena_alloc", arena);
  if (end > arena->limit) return exhausted(arena);
  if (!ensure_committed(arena, end)) {
    errno = ENOMEM; /* the kernel's commit limit; the claim is lost */
    return NULL;
  }
  return hand_out(arena, start, size, align);
}

/* The refusals below name the call for a destroyed arena, which every
 * request of a size above 0 meets (limit 0). */
static BRISK_COLD void *bad_alignment(const char *caller, const brisk_arena_t *arena) {
  check_live(caller, arena);
  errno = EINVAL;
  return NULL;
}

static BRISK_COLD void *too_large(const char *caller, const brisk_arena_t *arena) {
  check_live(caller, arena);
  errno = ENOMEM;
  return NULL;
}

static BRISK_COLD void *no_arena(void) {
  errno = EINVAL;
  return NULL;
}

void *brisk_arena_alloc(brisk_arena_t *arena, size_t size, size_t align) {
  if (BRISK_UNLIKELY(arena == NULL)) return no_arena();
  /* Checked before the fetch_add: a claim larger than the whole limit,
   * which could never be served, is refused without filling the arena,
   * and no claim can wrap the offset (it is at most limit, below 2^46).
   * limit and padding are multiples of 16, so the size's rounding up to
   * 16 keeps it within limit - padding. */
  size_t padding = 0;
  if (BRISK_UNLIKELY(align > CLAIM_ALIGN || (align & (align - 1)) != 0)) {
    if (!brisk_is_power_of_two(align)) return bad_alignment("brisk_arena_alloc", arena);
    padding = align - CLAIM_ALIGN;
    if (padding >= arena->limit || size > arena->limit - padding)
      return too_large("brisk_arena_alloc", arena);
  } else if (BRISK_UNLIKELY(size > arena->limit)) {
    return too_large("brisk_arena_alloc", arena);
  }
  /* size 0 claims 16 bytes too, so its pointer is unique. */
  size_t claim = brisk_align_up(size + (size == 0), CLAIM_ALIGN) + padding;
  size_t start = atomic_fetch_add_explicit(&arena->offset, claim, memory_order_relaxed);
  size_t end = start + claim;
  /* committed <= limit, so this one test also catches exhaustion. */
  if (BRISK_UNLIKELY(end > atomic_load_explicit(&arena->committed, memory_order_acquire)))
    return alloc_slow(arena, start, end, size, align);
  return hand_out(arena, start, size, align);
}

void brisk_arena_reset(brisk_arena_t *arena, int keep_committed) {
  if (arena == NULL) return;
  check_live("brisk_arena_reset", arena);
  size_t committed = atomic_load_explicit(&arena->committed, memory_order_relaxed);
  /* Everything committed (all that was used, and more) becomes no-access
   * for the tools until handed out again. */
  brisk_annotate_mempool_destroy(arena); /* every block at once */
  brisk_annotate_mempool_create(arena);
  brisk_annotate_no_access(arena->data, committed);
  if (committed > arena->poisoned_end) arena->poisoned_end = committed;
  size_t used = used_of(arena);
  if (used > arena->touched) arena->touched = used;
  size_t mapped = atomic_load_explicit(&arena->mapped, memory_order_relaxed);
  if (!keep_committed && mapped != 0) {
    size_t calls = 0;
    _brisk_os_uncommit(arena->data, mapped, &calls);
    count_calls(arena, calls);
    atomic_store_explicit(&arena->committed, 0, memory_order_relaxed);
    atomic_store_explicit(&arena->mapped, 0, memory_order_relaxed);
    arena->touched = 0;
  }
  atomic_store_explicit(&arena->offset, 0, memory_order_relaxed);
  arena->resets = next_epoch();
}

/* ---- Cursors ----------------------------------------------------------- */

#define CURSOR_DEFAULT_CHUNK ((size_t)64 << 10)

/* What a cursor of no arena reads for the arena's resets: it has no chunk,
 * so every allocation goes out of line, which fails it with EINVAL. */
static const size_t no_arena_resets = 0;

void brisk_arena_cursor_init(brisk_arena_cursor_t *cursor, brisk_arena_t *arena, size_t chunk) {
  if (arena != NULL) check_live("brisk_arena_cursor_init", arena);
  if (chunk == 0) chunk = CURSOR_DEFAULT_CHUNK;
  cursor->pos = cursor->end = NULL;
  cursor->arena = arena;
  cursor->arena_resets = arena != NULL ? &arena->resets : &no_arena_resets;
  cursor->resets = *cursor->arena_resets;
  cursor->chunk = brisk_align_up(chunk, CLAIM_ALIGN);
}

/*
 * The inline path could not serve: the chunk is used up (or was claimed
 * before a reset), or the arguments need checking. A request larger than
 * half a chunk is claimed on its own, so the current chunk's tail is kept;
 * otherwise a new chunk replaces the current one. When the arena has no
 * room left for a whole chunk, the request alone is claimed (a chunk claim
 * that failed would leave the arena full), so a cursor fails only where
 * brisk_arena_alloc would.
 */
void *brisk_arena_cursor_alloc_slow_(brisk_arena_cursor_t *cursor, size_t size, size_t align) {
  brisk_arena_t *arena = cursor->arena;
  if (BRISK_UNLIKELY(arena == NULL)) return no_arena();
  /* A destroyed arena's cursor comes here at its first allocation after
   * the destroy: its resets moved on. So it does where a new arena has
   * taken the destroyed one's place: older than that arena (see the top). */
  check_live("brisk_arena_cursor_alloc", arena);
  if (BRISK_UNLIKELY(cursor->resets < arena->born)) not_live("brisk_arena_cursor_alloc", arena);
  if (align == 0) align = CLAIM_ALIGN;
  if (!brisk_is_power_of_two(align)) return bad_alignment("brisk_arena_cursor_alloc", arena);
  /* Before take is computed: rounding sizes near SIZE_MAX wraps to 0. */
  if (size > arena->limit) return too_large("brisk_arena_cursor_alloc", arena);
  if (cursor->resets != arena->resets) {
    cursor->pos = cursor->end = NULL;
    cursor->resets = arena->resets;
  }
  /* Multiples of 16 from a 16-aligned start: brisk/arena.h's inline path relies
   * on the position staying 16-aligned. */
  size_t take = brisk_align_up(size + (size == 0), CLAIM_ALIGN);
  uintptr_t at = brisk_align_up((uintptr_t)cursor->pos, align);
  if (cursor->pos != NULL && at <= (uintptr_t)cursor->end &&
      take <= (uintptr_t)cursor->end - at) {
    cursor->pos = (uint8_t *)(at + take);
    return (void *)at;
  }
  /* A claim past the limit fills the arena until reset (exhausted()), so a
   * chunk the arena has no room for is not claimed: the request alone is.
   * (A racing allocation can still take the room after this look; the
   * arena is then full for it too.) */
  if (size > cursor->chunk / 2 || align > cursor->chunk / 4 ||
      cursor->chunk > arena->limit - used_of(arena))
    return brisk_arena_alloc(arena, size, align);
  uint8_t *chunk = brisk_arena_alloc(arena, cursor->chunk, CLAIM_ALIGN);
  if (chunk == NULL) return brisk_arena_alloc(arena, size, align);
  at = brisk_align_up((uintptr_t)chunk, align);
  cursor->pos = (uint8_t *)(at + take);
  cursor->end = chunk + cursor->chunk;
  return (void *)at;
}

size_t brisk_arena_used(const brisk_arena_t *arena) {
  if (arena == NULL) return 0;
  check_live("brisk_arena_used", arena);
  return used_of(arena);
}

/* Any thread, at any time: the per-thread counts are summed with relaxed
 * loads, so a count is exact once the allocations it covers have returned
 * (and are visible to the caller), and never counts one twice. */
void brisk_arena_stats(const brisk_arena_t *arena, brisk_region_stats_t *out) {
  if (arena == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  check_live("brisk_arena_stats", arena);
  brisk_arena_t *a = (brisk_arena_t *)arena;
  size_t allocations = 0, requested = 0;
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    allocations += atomic_load_explicit(&a->slots[i].allocations, memory_order_relaxed);
    requested += atomic_load_explicit(&a->slots[i].requested, memory_order_relaxed);
  }
  size_t committed = atomic_load_explicit(&a->committed, memory_order_relaxed);
  out->bytes_requested = requested;
  out->bytes_in_use = used_of(arena);
  out->bytes_held = a->header_size + brisk_align_up(committed, a->page);
  out->system_requests = atomic_load_explicit(&a->system_requests, memory_order_relaxed);
  out->allocations = allocations;
}
