/*
 * pool.c — the lock-free fixed-size pool (seeds 000 and 003): objects of
 * one size carved from one reservation; free objects hold the link of
 * Treiber stacks ("shards") found through one atomic bitmap and ctz.
 *
 * Layout of a reservation (one _brisk_os_reserve_address_space call; a
 * bounded pool reserves capacity objects, capacity 0 up to 64 GiB or 2^32 - 1
 * objects, whichever is fewer, and a quarter as much again and again down to
 * 64 MiB where the OS, or Valgrind, refuses that much):
 *
 *   [ header: brisk_pool_t ][ live bitmap (BRISK_DEBUG only) ][ objects ... ]
 *   base                     bits                               objects
 *
 * The header pages are committed at creation. A bounded pool commits all
 * its objects there too (one mprotect; with BRISK_REGION_PREFAULT or _LOCK
 * also faulted in and mlocked), so its alloc and free never make a system
 * call afterwards (nor take a page fault, with PREFAULT). An unbounded
 * pool commits objects (and the bitmap bits that cover them) lazily in
 * slabs (256 KiB, growing to a quarter of what is committed, at most
 * 64 MiB) by the thread whose carve crosses the committed frontier, as
 * arena.c does: others never wait; with PREFAULT/LOCK each slab is
 * faulted in (and locked) as it is committed. Creation is O(1)
 * otherwise: no free list is built, objects are carved from the frontier
 * (`carved`, an atomic counter) when every list is empty.
 *
 * Object i (0-based) lies at objects + i * stride, stride = obj_size rounded
 * up to max(align, 8); objects start page-aligned, so every object is
 * aligned to align (at most 4096). A free object's first 4 bytes hold its
 * link: the index + 1 of the next free object, 0 at the end. A list head is
 * one 64-bit word, (32-bit ABA tag << 32) | (index + 1), changed only by a
 * 64-bit CAS that adds one to the tag: a CAS that succeeds proves that no
 * other CAS changed the list since the head was read (a tag repeats only
 * after 2^32 changes during one thread's pop, which is not guarded against).
 * Indexes fit 32 bits: at most 2^32 - 1 objects.
 *
 * Call tree:
 *   brisk_pool_create(_ex)  check arguments, reserve, commit the header
 *                           (bounded + PREFAULT/LOCK: commit, prefault and
 *                           lock everything), register (registry.h; a
 *                           hybrid's buckets, made by _brisk_pool_create,
 *                           do not)
 *   brisk_pool_alloc        one branch on the mode, then:
 *     shards (default)      pop the home shard (slot % SHARDS): one CAS
 *       alloc_slow          (noinline) take_shared: other shards through the
 *                           bitmap (steal), then every head once; carve 1;
 *                           else fail (ENOMEM)
 *     THREAD_CACHE          pop the thread's magazine: no atomics
 *       cache_refill        (noinline) take_shared a batch (ONE CAS), else
 *                           carve a batch, else fail
 *   brisk_pool_free         index_of (range + object start, O(1), abort if
 *                           bad); [debug] live bit; then by mode:
 *     shards                push onto the home shard (CAS), mark_nonempty
 *     THREAD_CACHE          push onto the magazine; full: cache_flush pushes
 *                           half of it as one chain (ONE CAS)
 *   carve                   commit up to the claim, then CAS(carved);
 *     ensure_committed      (cold) commit a slab, CAS-max `committed`
 *   brisk_pool_stats / _brisk_pool_counters: sum the per-slot counters
 *   brisk_pool_destroy      unregister, release the reservation
 *   brisk_pool_local_*      a caller-owned cache popped and pushed inline in
 *                           brisk.h; its slow paths (end of this file) move
 *                           batches through brisk_pool_alloc / _free
 *
 * Who touches which field, and with what memory order:
 *   shards[s].head   every thread, alone on its cache line. Loads acquire
 *                    (the links and bytes a pusher wrote before its CAS are
 *                    visible to the thread that pops the object); pushes CAS
 *                    seq_cst (release for the link, and the store side of
 *                    the bitmap protocol below); pops CAS acquire.
 *   object links     written (relaxed atomic store) by the thread that owns
 *                    the free object, before the release CAS that publishes
 *                    it. Read by poppers after an acquire load of the head:
 *                    that read (racy_link) races by design with a thread that
 *                    popped the same object meanwhile and writes its data
 *                    there; the value is then stale, and the CAS fails
 *                    because the tag moved. The read itself is safe: the
 *                    memory stays mapped and committed while the pool lives
 *                    and the link bytes are never poisoned. A batch pop
 *                    follows links before its CAS, so it bounds-checks each
 *                    one against the committed objects before following it.
 *   nonempty         bit s set: shard s may be non-empty. A push loads it
 *                    (seq_cst) after its CAS and sets the bit (fetch_or,
 *                    seq_cst) only if clear; a thread that finds shard s
 *                    empty clears the bit (fetch_and, seq_cst), then loads
 *                    the head again (seq_cst) and re-sets the bit if the
 *                    shard filled meanwhile. In the single total order of
 *                    seq_cst operations either the pusher's load follows the
 *                    clear (it sets the bit) or the re-load follows the push
 *                    (the clearer re-sets it): a non-empty shard never stays
 *                    invisible. Before carving or failing, alloc also looks
 *                    at every head once, so the bitmap is only a hint.
 *   carved           objects carved so far, never above max_objects and
 *                    never covering an object not yet committed: advanced
 *                    by a CAS (relaxed; carving is a slow path) after the
 *                    claim's commit. It partitions indexes (the objects'
 *                    memory is ordered by `committed`) and bounds free's
 *                    check: an index at or above it was never handed out.
 *                    Read relaxed by every free: a free of an object
 *                    carved for another thread comes after that carve (the
 *                    program passed the object on), so it sees it.
 *   committed        bytes of objects accessible: acquire loads by carving
 *                    threads, advanced after the committing thread's own
 *                    mprotect by a CAS-max (acq_rel), as in arena.c. Several
 *                    threads may commit overlapping ranges; nobody waits.
 *   system_requests  OS calls made for the pool: set at creation, then a
 *                    relaxed fetch_add per commit (a statistic).
 *   slots[i]         per-thread entry i (thread_slot.h): only the thread
 *                    holding slot i touches it, so the magazine fields are
 *                    plain and the counters are relaxed load + store (atomic
 *                    only so that stats may read them). slots[NO_SLOT] is
 *                    shared by the threads without a slot: fetch_add on its
 *                    counters, and its magazine is never used.
 *   live bits        BRISK_DEBUG only: bit i set while object i is handed
 *                    out; fetch_or on alloc, fetch_and on free (relaxed:
 *                    the bit orders nothing, the RMW alone catches a double
 *                    free even between threads).
 *   everything else  written at creation, read-only until destroy.
 *
 * THREAD_CACHE: a magazine per thread slot holds up to mag_max free objects
 * as a chain of pointers through their first 8 bytes (head, count); batches
 * to and from the shards are relinked by index. An empty magazine is
 * refilled with a batch (mag_max / 2) taken from one shard in one CAS; a
 * full one pushes its older half onto the home shard as one chain in one
 * CAS. A bounded pool gets smaller magazines (capacity / 8, at least 2, at
 * most 32), yet objects cached by other threads can make it report
 * exhaustion early: at most mag_max objects per other thread. The thread
 * that allocates sees its own magazine first, so a single thread sees the
 * capacity honoured exactly. Objects stay in a magazine when its thread
 * exits: the next thread given the slot uses them.
 *
 * Measured (bench/region_pool, 64-byte objects, a 2-core shared machine):
 * single-thread instructions per alloc+free pair (callgrind; the loop
 * included) 98 lock-free, 63 with THREAD_CACHE, 111 spinlocked, against 57
 * for brisk_malloc/brisk_free. The cache went from 80 to 63 by: magazines
 * of pointers, not indexes (a pop needs no multiply); counting by batch
 * (its alloc counted nothing then; it now counts each allocation, one
 * unlocked add to the line it already writes, so that `allocations` is
 * counted rather than derived); the thread's entry found from one TLS word
 * (_brisk_thread_slot_line) with one zero test; per-thread counters bumped
 * with one unlocked add (brisk_owner_add); and the other modes' free in a
 * function of its own (free_to_shared), so the magazine path computes
 * nothing for them.
 *
 * Destroy must not run concurrently with alloc or free on the same pool.
 *
 * Statistics cost the hot path no shared atomic: per-slot counters of
 * allocations and frees (every mode counts each call), summed when asked;
 * in use is their difference. A caller asks for obj_size bytes per
 * allocation, so bytes_requested is allocations x obj_size; an object
 * takes stride bytes, so bytes_in_use is objects in use x stride.
 * system_requests counts every OS call made for the pool (each of the
 * reservation's, commits, prefaults, mlocks). high_water counts carved
 * objects, cached and listed ones too.
 *
 * Tools: a free object is ASan-poisoned except its first 8 bytes (the link
 * that concurrent pops may read; ASan granules are 8 bytes), and unpoisoned
 * in full (stride bytes) when handed out. Objects committed for the first
 * time are not poisoned. Under Valgrind the pool is a mempool (as arena.c),
 * so destroy frees every object at once; a freed object's link is marked
 * defined so the pool may read and write it.
 */
#include "regions/pool.h"

#include "base/annotate.h"
#include "base/base.h"
#include "os/os.h"
#include "regions/registry.h"
#include "regions/thread_slot.h"

#include <errno.h>

#define SHARDS 8u
#define MAX_ALIGN ((size_t)4096)
#define DEFAULT_ALIGN ((size_t)16)
#define MIN_STRIDE ((size_t)8)
/* An index + 1 fits 32 bits (0 is the end of a list). */
#define MAX_OBJECTS ((size_t)UINT32_MAX)
/* Capacity 0: reserve this many bytes of objects at most. */
#define UNBOUNDED_BYTES ((size_t)64 << 30)
/* ... or less, down to this, where the OS refuses that much. */
#define MIN_UNBOUNDED_BYTES ((size_t)64 << 20)
/* A bounded pool's objects: at most 64 TiB of address space. */
#define MAX_RESERVE ((size_t)1 << 46)
#define MIN_SLAB ((size_t)256 << 10)
#define MAX_SLAB ((size_t)64 << 20)
#define MAG_MAX 32u
#define LINK_BYTES ((size_t)4)
#define TAG_ONE ((uint64_t)1 << 32)

enum pool_mode { MODE_SHARDS = 0, MODE_CACHE = 1 };

typedef struct shard_s {
  _Atomic uint64_t head; /* (tag << 32) | (index + 1) */
} BRISK_ALIGNED(BRISK_CACHE_LINE) shard_t;

typedef struct slot_s {
  _Atomic size_t allocs;    /* objects handed out by this slot's thread */
  _Atomic size_t frees;     /* objects it gave back */
  _Atomic size_t failures;
  uint8_t *mag_head;        /* the magazine's newest object, NULL when empty */
  uint32_t mag_count;       /* objects in the magazine (the slot's thread only) */
} BRISK_ALIGNED(BRISK_CACHE_LINE) slot_t;

struct brisk_pool_s {
  /* Read by every call, written at creation only (and `committed`, rarely). */
  uintptr_t bias;       /* objects - stride: object index+1 i is at bias + i * stride */
  uint8_t *objects;
  size_t stride;
  uint64_t inverse;     /* of stride's odd factor, mod 2^64 (index_of) */
  uint32_t shift;       /* log2 of stride's power-of-two factor */
  uint32_t mode;        /* enum pool_mode */
  size_t max_objects;   /* capacity, or the unbounded reservation's */
  uint32_t mag_max;     /* THREAD_CACHE: magazine size, refill batch mag_max / 2 */
  uint32_t flags;
  _Atomic size_t committed; /* bytes of objects accessible */
  _Atomic uint64_t *live;   /* BRISK_DEBUG: one bit per object */
  /* Cold: creation, the commit path, stats, destroy. */
  uint8_t *base;
  size_t reservation_size;
  size_t header_size;   /* header pages, committed at creation */
  size_t bitmap_size;   /* bytes reserved for the live bits (0 without BRISK_DEBUG) */
  size_t obj_size;
  size_t page;
  brisk_region_entry_t entry; /* registry.h; its links NULL when not registered */
  /* Contended words, one line each. */
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t carved;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic uint64_t nonempty;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t system_requests;
  shard_t shards[SHARDS];
  slot_t slots[BRISK_THREAD_SLOTS + 1];
};

_Static_assert(SHARDS <= 64 && (SHARDS & (SHARDS - 1)) == 0, "shards: a power of two, one bitmap word");

/* ---- Misuse ---- */

static BRISK_COLD BRISK_NORETURN void fatal(const char *caller, const void *p, const char *why) {
  _brisk_os_fatal_pointer(caller, p, why);
}

/* ---- Objects and links ---- */

BRISK_INLINE uint8_t *object_at(const brisk_pool_t *pool, uint32_t index1) {
  return (uint8_t *)(pool->bias + (uintptr_t)index1 * pool->stride);
}

/* A link of an object this thread owns (free, in its hands or magazine). */
BRISK_INLINE uint32_t link_load(const uint8_t *object) {
  return atomic_load_explicit((_Atomic uint32_t *)object, memory_order_relaxed);
}

BRISK_INLINE void link_store(uint8_t *object, uint32_t next1) {
  atomic_store_explicit((_Atomic uint32_t *)object, next1, memory_order_relaxed);
}

/* A magazine's link: the next object itself (8 bytes at the object's start,
 * the same bytes as the shard link), so popping a magazine needs no
 * index-to-address multiply. Only the slot's thread touches these. */
BRISK_INLINE uint8_t *mag_link_load(const uint8_t *object) {
  return atomic_load_explicit((_Atomic(uint8_t *) *)object, memory_order_relaxed);
}

BRISK_INLINE void mag_link_store(uint8_t *object, uint8_t *next) {
  atomic_store_explicit((_Atomic(uint8_t *) *)object, next, memory_order_relaxed);
}

/*
 * The link of a list's head object, read before the CAS that would pop it.
 * Races by design: another thread may have popped the object meanwhile and
 * be writing its own data there with plain stores; the value read is then
 * stale and the CAS fails, because every successful CAS moved the tag. The
 * memory stays mapped, committed and unpoisoned (link bytes) while the pool
 * lives, so the read itself is safe; TSan is kept from reporting it (not
 * inlined into instrumented code under TSan, inlined elsewhere).
 */
static BRISK_NO_TSAN uint32_t racy_link(const uint8_t *object) {
  return atomic_load_explicit((_Atomic uint32_t *)object, memory_order_relaxed);
}

/*
 * The index of the object at p, or a value >= max_objects if p is no object
 * start of this pool. stride = odd << shift: rotating the offset right by
 * shift moves any low bits to the top, and multiplying by the odd factor's
 * inverse divides exactly the multiples of it and sends everything else
 * above max_objects (for x < 2^64 not a multiple of odd, x * inverse mod 2^64
 * exceeds (2^64 - 1) / odd >= max_objects). Offsets below the objects wrap
 * to huge values, above max_objects too. One rotate, one multiply.
 */
BRISK_INLINE size_t index_of(const brisk_pool_t *pool, const void *p) {
  uint64_t offset = (uint64_t)((uintptr_t)p - (uintptr_t)pool->objects);
  uint32_t s = pool->shift;
  uint64_t rotated = (offset >> s) | (offset << ((64 - s) & 63));
  return (size_t)(rotated * pool->inverse);
}

/* ---- Tools (annotate.h: the pool is a Valgrind mempool) ---- */

/* The object at p goes to the program (all of its stride is usable);
 * returns p. */
BRISK_INLINE void *announce_alloc(brisk_pool_t *pool, uint8_t *p) {
  return brisk_annotate_mempool_alloc(pool, p, pool->stride);
}

/* The object at p comes back: no access but its link. */
BRISK_INLINE void announce_free(brisk_pool_t *pool, uint8_t *p) {
  brisk_annotate_mempool_free(pool, p, pool->stride, LINK_BYTES);
}

/* ---- Debug: the live bitmap (compiles to nothing without BRISK_DEBUG) ---- */

BRISK_INLINE void debug_mark_live(brisk_pool_t *pool, uint32_t index1) {
#if BRISK_DEBUG
  size_t i = index1 - 1;
  if (i >= pool->max_objects) fatal("brisk_pool_alloc", object_at(pool, index1), "free list corrupted (a write after free?)");
  uint64_t bit = (uint64_t)1 << (i % 64);
  uint64_t old = atomic_fetch_or_explicit(&pool->live[i / 64], bit, memory_order_relaxed);
  if (old & bit) fatal("brisk_pool_alloc", object_at(pool, index1), "object handed out twice: free list corrupted (a write after free?)");
#endif
  (void)pool;
  (void)index1;
}

BRISK_INLINE void debug_mark_free(brisk_pool_t *pool, size_t index, const void *p) {
#if BRISK_DEBUG
  if (index >= atomic_load_explicit(&pool->carved, memory_order_relaxed))
    fatal("brisk_pool_free", p, "not an object of this pool (never handed out)");
  uint64_t bit = (uint64_t)1 << (index % 64);
  uint64_t old = atomic_fetch_and_explicit(&pool->live[index / 64], ~bit, memory_order_relaxed);
  if (!(old & bit)) fatal("brisk_pool_free", p, "double free");
#endif
  (void)pool;
  (void)index;
  (void)p;
}

/* ---- Counters ---- */

/* A counter of the calling thread's own slot: no atomic RMW. */
BRISK_INLINE void bump(_Atomic size_t *counter) { brisk_owner_add(counter, 1); }

/* The slow paths' version: the shared entry of threads without a slot
 * needs an atomic RMW. */
BRISK_INLINE void count(_Atomic size_t *counter, uint32_t slot) {
  if (BRISK_LIKELY(slot != BRISK_NO_THREAD_SLOT)) {
    brisk_owner_add(counter, 1);
  } else {
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  }
}

BRISK_INLINE void set_mag_count(slot_t *entry, uint32_t n) { entry->mag_count = n; }

BRISK_INLINE uint32_t get_mag_count(const slot_t *entry) { return entry->mag_count; }

/* The object goes to the program (counted by the caller). */
BRISK_INLINE void *hand_out(brisk_pool_t *pool, uint8_t *p) {
#if BRISK_DEBUG
  debug_mark_live(pool, (uint32_t)index_of(pool, p) + 1);
#endif
  return announce_alloc(pool, p);
}

static BRISK_COLD void *fail(slot_t *entry, uint32_t slot) {
  count(&entry->failures, slot);
  errno = ENOMEM;
  return NULL;
}

/* ---- Committing and carving ---- */

static size_t slab_size(size_t committed) {
  size_t slab = committed / 4;
  if (slab < MIN_SLAB) return MIN_SLAB;
  if (slab > MAX_SLAB) return MAX_SLAB;
  return slab;
}

/* Page range of the live bits that cover objects [0, objects). */
static size_t bitmap_bytes_for(const brisk_pool_t *pool, size_t objects) {
  if (pool->bitmap_size == 0) return 0;
  size_t bytes = brisk_align_up((objects + 63) / 64 * 8, pool->page);
  return bytes < pool->bitmap_size ? bytes : pool->bitmap_size;
}

/* Commit (and with PREFAULT/LOCK, fault in and lock) a page-aligned range,
 * counting the system calls. */
static bool commit_range(brisk_pool_t *pool, uint8_t *p, size_t size) {
  if (size == 0) return true;
  size_t calls = 0;
  bool ok = _brisk_os_commit(p, size, &calls) &&
            (!(pool->flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) ||
             _brisk_os_prefault(p, size, &calls)) &&
            (!(pool->flags & BRISK_REGION_LOCK) || _brisk_os_lock(p, size, &calls));
  atomic_fetch_add_explicit(&pool->system_requests, calls, memory_order_relaxed);
  return ok;
}

/* Make objects[0, end) accessible (and their live bits). As arena.c: the
 * thread that needs it commits it; the frontier advances by a CAS-max. */
static BRISK_COLD bool ensure_committed(brisk_pool_t *pool, size_t end) {
  size_t cur = atomic_load_explicit(&pool->committed, memory_order_acquire);
  if (cur >= end) return true;
  size_t limit = brisk_align_up(pool->max_objects * pool->stride, pool->page);
  size_t target = cur + slab_size(cur);
  if (target < end) target = end;
  target = brisk_align_up(target, pool->page);
  if (target > limit) target = limit;
  size_t bits_from = bitmap_bytes_for(pool, cur / pool->stride);
  if (bits_from != 0) bits_from -= pool->page; /* the partly used page, again */
  size_t bits_to = bitmap_bytes_for(pool, target / pool->stride + 1);
  if (!commit_range(pool, (uint8_t *)pool->live + bits_from, bits_to - bits_from)) return false;
  if (!commit_range(pool, pool->objects + cur, target - cur)) return false;
  while (cur < target &&
         !atomic_compare_exchange_weak_explicit(&pool->committed, &cur, target, memory_order_acq_rel,
                                                memory_order_acquire)) {
  }
  return true;
}

/*
 * Claim up to `want` never-used objects: returns how many (0 when the
 * reservation is exhausted or the kernel refuses to commit) and their first
 * index + 1. The claim is committed before the CAS that takes it, so
 * `carved` never covers memory that is not accessible (free trusts it); a
 * failed CAS retries from the new value (another carve succeeded: lock-free)
 * and at worst committed a little early.
 */
static uint32_t carve(brisk_pool_t *pool, uint32_t want, uint32_t *first1) {
  size_t max = pool->max_objects;
  size_t start = atomic_load_explicit(&pool->carved, memory_order_relaxed);
  for (;;) {
    if (start >= max) return 0;
    size_t n = want < max - start ? want : max - start;
    size_t end = (start + n) * pool->stride;
    if (end > atomic_load_explicit(&pool->committed, memory_order_acquire) &&
        !ensure_committed(pool, end))
      return 0;
    if (atomic_compare_exchange_weak_explicit(&pool->carved, &start, start + n,
                                              memory_order_relaxed, memory_order_relaxed)) {
      *first1 = (uint32_t)(start + 1);
      return (uint32_t)n;
    }
  }
}

/* ---- The shards ---- */

BRISK_INLINE uint64_t next_head(uint64_t head, uint32_t first1) {
  return ((head & ~(uint64_t)UINT32_MAX) + TAG_ONE) | first1;
}

/* Shard s may be non-empty: set its bit unless set (see the header). */
BRISK_INLINE void mark_nonempty(brisk_pool_t *pool, uint32_t s) {
  uint64_t bit = (uint64_t)1 << s;
  if (!(atomic_load_explicit(&pool->nonempty, memory_order_seq_cst) & bit))
    atomic_fetch_or_explicit(&pool->nonempty, bit, memory_order_seq_cst);
}

/* Push the chain first1 .. last (linked, last's link to be set) onto s. */
BRISK_INLINE void push_chain(brisk_pool_t *pool, uint32_t s, uint32_t first1, uint8_t *last) {
  _Atomic uint64_t *head = &pool->shards[s].head;
  uint64_t old = atomic_load_explicit(head, memory_order_relaxed);
  do {
    link_store(last, (uint32_t)old);
  } while (!atomic_compare_exchange_weak_explicit(head, &old, next_head(old, first1),
                                                  memory_order_seq_cst, memory_order_relaxed));
  mark_nonempty(pool, s);
}

/*
 * Pop up to `want` objects from shard s in one CAS: follow want - 1 links
 * from the head (racy reads, each bounds-checked before it is followed),
 * then swing the head past them. Returns how many (0: empty), with the
 * chain's first and last index + 1; the last one's link is meaningless.
 */
static uint32_t pop_batch(brisk_pool_t *pool, uint32_t s, uint32_t want, uint32_t *first1,
                          uint32_t *last1) {
  _Atomic uint64_t *head = &pool->shards[s].head;
  uint64_t old = atomic_load_explicit(head, memory_order_acquire);
  size_t limit = 0;
  for (;;) {
    uint32_t first = (uint32_t)old;
    if (first == 0) return 0;
    uint32_t last = first, n = 1;
    uint32_t next = racy_link(object_at(pool, first));
    while (n < want && next != 0) {
      if (limit == 0) limit = atomic_load_explicit(&pool->committed, memory_order_acquire) / pool->stride;
      /* Past the objects committed when we looked: a stale link (the CAS
       * fails), or objects carved since (a shorter batch is fine). */
      if (next - 1 >= limit) break;
      last = next;
      n++;
      next = racy_link(object_at(pool, last));
    }
    if (atomic_compare_exchange_weak_explicit(head, &old, next_head(old, next),
                                              memory_order_acquire, memory_order_acquire)) {
      *first1 = first;
      *last1 = last;
      return n;
    }
  }
}

/* Shard s was found empty: clear its bit, and set it back if it filled
 * meanwhile (true then: worth another look). */
static bool clear_nonempty(brisk_pool_t *pool, uint32_t s) {
  uint64_t bit = (uint64_t)1 << s;
  atomic_fetch_and_explicit(&pool->nonempty, ~bit, memory_order_seq_cst);
  if ((uint32_t)atomic_load_explicit(&pool->shards[s].head, memory_order_seq_cst) == 0) return false;
  atomic_fetch_or_explicit(&pool->nonempty, bit, memory_order_seq_cst);
  return true;
}

/*
 * Up to `want` objects from the shards, in this order: home; the shards
 * whose bit is set, nearest after home first (the bitmap rotated by home,
 * then ctz: seed 000); then every head once, so that no object is missed
 * for a lagging bit before the caller carves or fails.
 */
static uint32_t take_shared(brisk_pool_t *pool, uint32_t home, uint32_t want, uint32_t *first1,
                            uint32_t *last1) {
  uint32_t n = pop_batch(pool, home, want, first1, last1);
  if (n != 0) return n;
  uint64_t bits = atomic_load_explicit(&pool->nonempty, memory_order_seq_cst);
  bits &= ~((uint64_t)1 << home);
  while (bits != 0) {
    uint64_t rotated = ((bits >> home) | (bits << (SHARDS - home))) & (((uint64_t)1 << SHARDS) - 1);
    uint32_t s = (home + (uint32_t)brisk_count_trailing_zeros(rotated)) & (SHARDS - 1);
    bits &= ~((uint64_t)1 << s);
    n = pop_batch(pool, s, want, first1, last1);
    if (n != 0) return n;
    if (clear_nonempty(pool, s) && (n = pop_batch(pool, s, want, first1, last1)) != 0) return n;
  }
  for (uint32_t i = 0; i < SHARDS; i++) {
    n = pop_batch(pool, (home + i) & (SHARDS - 1), want, first1, last1);
    if (n != 0) return n;
  }
  return 0;
}

BRISK_INLINE uint32_t home_shard(uint32_t slot) { return slot & (SHARDS - 1); }

/* Shards mode: the home shard was empty. */
static BRISK_NOINLINE void *alloc_slow(brisk_pool_t *pool, slot_t *entry, uint32_t slot) {
  uint32_t first1, last1;
  if (take_shared(pool, home_shard(slot), 1, &first1, &last1) != 0 || carve(pool, 1, &first1) != 0) {
    count(&entry->allocs, slot);
    return hand_out(pool, object_at(pool, first1));
  }
  return fail(entry, slot);
}

/* ---- THREAD_CACHE: the magazines ---- */

/* The magazine is empty: a batch from the shards (one CAS), else freshly
 * carved objects; the first is handed out, the rest fill the magazine. A
 * thread without a slot takes one object: it has no magazine. Reached only
 * with an empty magazine, so "the whole pool is exhausted" never leaves
 * objects of the calling thread's own magazine unused. */
static BRISK_NOINLINE void *cache_refill(brisk_pool_t *pool, slot_t *entry, uint32_t slot) {
  uint32_t want = slot != BRISK_NO_THREAD_SLOT ? pool->mag_max / 2 : 1;
  uint32_t first1 = 0, last1 = 0;
  uint32_t n = take_shared(pool, home_shard(slot), want, &first1, &last1);
  bool carved = false;
  if (n == 0) {
    n = carve(pool, want, &first1);
    if (n == 0) return fail(entry, slot);
    carved = true;
  }
  /* The rest of the batch becomes the magazine, its index links rewritten
   * as pointers (freshly carved objects have no links: they are consecutive). */
  uint8_t *first = object_at(pool, first1);
  if (n > 1) {
    uint8_t *object = first;
    uint32_t index1 = first1;
    for (uint32_t i = 1; i < n; i++) {
      index1 = carved ? index1 + 1 : link_load(object);
      uint8_t *next = object_at(pool, index1);
      if (i > 1)
        mag_link_store(object, next);
      else
        entry->mag_head = next;
      object = next;
    }
    mag_link_store(object, NULL);
  }
  count(&entry->allocs, slot);
  if (n > 1) set_mag_count(entry, n - 1);
  return hand_out(pool, first);
}

/* The magazine is full: its older half goes to the home shard as one chain
 * (one CAS), then p joins the magazine. Walking the chain to its end here
 * (objects this thread freed lately, in cache) keeps a tail pointer off the
 * fast path. */
static BRISK_NOINLINE void cache_flush(brisk_pool_t *pool, slot_t *entry, uint32_t slot, uint8_t *p) {
  uint32_t count = get_mag_count(entry), keep = count - count / 2;
  uint8_t *cut = entry->mag_head;
  for (uint32_t i = 1; i < keep; i++) cut = mag_link_load(cut);
  /* The older half, cut's successors, relinked by index for the shard. */
  uint8_t *first = mag_link_load(cut), *last = first;
  for (uint32_t i = keep + 1; i < count; i++) {
    uint8_t *next = mag_link_load(last);
    link_store(last, (uint32_t)index_of(pool, next) + 1);
    last = next;
  }
  mag_link_store(cut, NULL);
  push_chain(pool, home_shard(slot), (uint32_t)index_of(pool, first) + 1, last);
  mag_link_store(p, entry->mag_head);
  entry->mag_head = p;
  set_mag_count(entry, keep + 1);
}

/* ---- The API ---- */

/* The calling thread has no slot yet (its first call), or none at all
 * (more than BRISK_THREAD_SLOTS threads live): the shared entry, no magazine. */
static BRISK_NOINLINE void *alloc_no_slot(brisk_pool_t *pool) {
  uint32_t slot = brisk_thread_slot();
  if (slot != BRISK_NO_THREAD_SLOT) return brisk_pool_alloc(pool);
  slot_t *entry = &pool->slots[slot];
  if (pool->mode == MODE_CACHE) return cache_refill(pool, entry, slot);
  return alloc_slow(pool, entry, slot);
}

/*
 * The fast paths read thread_slot.h's _brisk_thread_slot_line, the offset
 * of the thread's entry: one zero test sends both "no slot yet" and "no
 * slot at all" out of line, so the counters below need no test and no
 * atomic RMW, and the entry is one add away.
 */
_Static_assert(sizeof(slot_t) == BRISK_CACHE_LINE, "slot entries are one cache line");

BRISK_INLINE slot_t *entry_at(brisk_pool_t *pool, uint32_t line) {
  return (slot_t *)((char *)pool->slots + line) - 1;
}

BRISK_INLINE uint32_t slot_of(uint32_t line) { return line / BRISK_CACHE_LINE - 1; }

void *brisk_pool_alloc(brisk_pool_t *pool) {
  uint32_t line = _brisk_thread_slot_line;
  if (BRISK_UNLIKELY(line == 0)) return alloc_no_slot(pool);
  slot_t *entry = entry_at(pool, line);
  uint32_t slot = slot_of(line);
  uint32_t mode = pool->mode;
  uint8_t *p;
  if (mode == MODE_CACHE) {
    p = entry->mag_head;
    if (BRISK_UNLIKELY(p == NULL)) return cache_refill(pool, entry, slot);
    entry->mag_head = mag_link_load(p);
    set_mag_count(entry, get_mag_count(entry) - 1);
    bump(&entry->allocs);
    return hand_out(pool, p);
  } else {
    _Atomic uint64_t *head = &pool->shards[home_shard(slot)].head;
    uint64_t old = atomic_load_explicit(head, memory_order_acquire);
    for (;;) {
      if (BRISK_UNLIKELY((uint32_t)old == 0)) return alloc_slow(pool, entry, slot);
      p = object_at(pool, (uint32_t)old);
      uint32_t next = racy_link(p);
      if (atomic_compare_exchange_weak_explicit(head, &old, next_head(old, next),
                                                memory_order_acquire, memory_order_acquire))
        break;
    }
  }
  bump(&entry->allocs);
  return hand_out(pool, p);
}

static BRISK_COLD BRISK_NORETURN void bad_free(const void *p) {
  fatal("brisk_pool_free", p, "not an object of this pool (or never handed out)");
}

/* See alloc_no_slot. */
static BRISK_NOINLINE void free_no_slot(brisk_pool_t *pool, uint8_t *p, size_t index) {
  uint32_t slot = brisk_thread_slot();
  if (slot != BRISK_NO_THREAD_SLOT) {
    brisk_pool_free(pool, p);
    return;
  }
  debug_mark_free(pool, index, p);
  announce_free(pool, p);
  count(&pool->slots[slot].frees, slot);
  push_chain(pool, home_shard(slot), (uint32_t)index + 1, p);
}

/* Shards mode: the free after the checks (a tail call from
 * brisk_pool_free, so that the magazine path there computes nothing for
 * it). */
static BRISK_NOINLINE void free_to_shared(brisk_pool_t *pool, uint32_t line, uint8_t *p,
                                          size_t index) {
  push_chain(pool, home_shard(slot_of(line)), (uint32_t)index + 1, p);
}

void brisk_pool_free(brisk_pool_t *pool, void *ptr) {
  if (ptr == NULL) return;
  uint8_t *p = ptr;
  size_t index = index_of(pool, p);
  /* carved <= max_objects: one compare catches foreign, interior and
   * never-handed-out pointers. */
  if (BRISK_UNLIKELY(index >= atomic_load_explicit(&pool->carved, memory_order_relaxed)))
    bad_free(p);
  uint32_t line = _brisk_thread_slot_line;
  if (BRISK_UNLIKELY(line == 0)) {
    free_no_slot(pool, p, index);
    return;
  }
  debug_mark_free(pool, index, p);
  announce_free(pool, p);
  slot_t *entry = entry_at(pool, line);
  bump(&entry->frees);
  if (BRISK_LIKELY(pool->mode == MODE_CACHE)) {
    uint32_t n = get_mag_count(entry);
    if (BRISK_UNLIKELY(n >= pool->mag_max)) {
      cache_flush(pool, entry, slot_of(line), p);
      return;
    }
    mag_link_store(p, entry->mag_head);
    entry->mag_head = p;
    set_mag_count(entry, n + 1);
    return;
  }
  free_to_shared(pool, line, p, index);
}

/* The multiplicative inverse of an odd number mod 2^64 (Newton's method:
 * each step doubles the correct low bits, 3 -> 6 -> ... -> 96). */
static uint64_t odd_inverse(uint64_t odd) {
  uint64_t x = odd;
  for (int i = 0; i < 5; i++) x *= 2 - odd * x;
  return x;
}

static BRISK_COLD brisk_pool_t *invalid(void) {
  errno = EINVAL;
  return NULL;
}

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  brisk_pool_stats((const brisk_pool_t *)((const char *)entry - offsetof(brisk_pool_t, entry)), out);
}

brisk_pool_t *_brisk_pool_create(size_t obj_size, size_t align, size_t capacity, unsigned flags,
                                 bool registered) {
  const unsigned known = BRISK_REGION_PREFAULT | BRISK_REGION_LOCK | BRISK_REGION_THREAD_CACHE;
  if (align == 0) align = DEFAULT_ALIGN;
  if (obj_size == 0 || !brisk_is_power_of_two(align) || align > MAX_ALIGN || (flags & ~known) != 0)
    return invalid();
  size_t unit = align > MIN_STRIDE ? align : MIN_STRIDE;
  if (obj_size > SIZE_MAX - unit) return invalid();
  size_t stride = brisk_align_up(obj_size, unit);
  size_t max_objects = capacity, object_bytes;
  if (capacity == 0) {
    max_objects = UNBOUNDED_BYTES / stride;
    if (max_objects > MAX_OBJECTS) max_objects = MAX_OBJECTS;
    if (max_objects == 0) max_objects = 1;
  } else if (capacity > MAX_OBJECTS || brisk_mul_overflows(obj_size, capacity, &object_bytes) ||
             brisk_mul_overflows(stride, capacity, &object_bytes)) {
    return invalid();
  }
  if (brisk_mul_overflows(stride, max_objects, &object_bytes) || object_bytes > MAX_RESERVE) {
    errno = ENOMEM;
    return NULL;
  }
  size_t page = _brisk_os_page_size();
  size_t header_size = brisk_align_up(sizeof(brisk_pool_t), page);
  size_t bitmap_size, total;
  size_t calls = 0; /* system calls, refused reservations included */
  uint8_t *base;
  for (;;) {
    bitmap_size = BRISK_DEBUG ? brisk_align_up((max_objects + 63) / 64 * 8, page) : 0;
    object_bytes = brisk_align_up(max_objects * stride, page);
    total = header_size + bitmap_size + object_bytes;
    base = _brisk_os_reserve_address_space(total, page, &calls);
    if (base != NULL) break;
    /* Capacity 0: a smaller reservation where the address space is
     * limited (ulimit -v, or Valgrind, which refuses 64 GiB). */
    if (capacity != 0 || object_bytes <= MIN_UNBOUNDED_BYTES || max_objects < 4) return NULL;
    max_objects /= 4;
  }
  if (!_brisk_os_commit(base, header_size, &calls)) {
    _brisk_os_release(base, total, NULL);
    errno = ENOMEM;
    return NULL;
  }
  /* Fresh pages read as zero: heads, bitmap, counters and magazines start
   * empty. */
  brisk_pool_t *pool = (brisk_pool_t *)base;
  pool->objects = base + header_size + bitmap_size;
  pool->bias = (uintptr_t)pool->objects - stride;
  pool->stride = stride;
  uint32_t shift = (uint32_t)brisk_count_trailing_zeros(stride);
  pool->shift = shift;
  pool->inverse = odd_inverse(stride >> shift);
  pool->max_objects = max_objects;
  pool->flags = flags;
  pool->mode = (flags & BRISK_REGION_THREAD_CACHE) ? MODE_CACHE : MODE_SHARDS;
  size_t mag = capacity == 0 ? MAG_MAX : capacity / 8;
  if (mag < 2) mag = 2;
  if (mag > MAG_MAX) mag = MAG_MAX;
  pool->mag_max = (uint32_t)mag;
  pool->live = (_Atomic uint64_t *)(base + header_size);
  pool->base = base;
  pool->reservation_size = total;
  pool->header_size = header_size;
  pool->bitmap_size = bitmap_size;
  pool->obj_size = obj_size;
  pool->page = page;
  atomic_init(&pool->committed, 0);
  atomic_init(&pool->carved, 0);
  atomic_init(&pool->nonempty, 0);
  bool pin = (flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) != 0;
  int error = ENOMEM;
  errno = 0;
  if (pin && (!_brisk_os_prefault(base, header_size, &calls) ||
              ((flags & BRISK_REGION_LOCK) && !_brisk_os_lock(base, header_size, &calls))))
    goto failed;
  atomic_init(&pool->system_requests, calls); /* commit_range adds its own */
  /* A bounded pool commits everything now (faulted in and locked too with
   * PREFAULT/LOCK), so its alloc and free never call the OS. */
  if (capacity != 0) {
    if (!commit_range(pool, base + header_size, bitmap_size + object_bytes)) goto failed;
    atomic_init(&pool->committed, object_bytes);
  }
  brisk_annotate_mempool_create(pool);
  if (registered) _brisk_region_register(&pool->entry, BRISK_REGION_POOL, registry_stats);
  return pool;
failed:
  if (errno != 0) error = errno;
  _brisk_os_release(base, total, NULL);
  errno = error;
  return NULL;
}

brisk_pool_t *brisk_pool_create_ex(size_t obj_size, size_t align, size_t capacity, unsigned flags) {
  return _brisk_pool_create(obj_size, align, capacity, flags, true);
}

brisk_pool_t *brisk_pool_create(size_t obj_size, size_t align, size_t capacity) {
  return _brisk_pool_create(obj_size, align, capacity, 0, true);
}

void brisk_pool_destroy(brisk_pool_t *pool) {
  if (pool == NULL) return;
  _brisk_region_unregister(&pool->entry); /* nothing for a hybrid's bucket */
  /* Clear our poisoning, so whatever is mapped here next starts clean. */
#if BRISK_ASAN
  brisk_annotate_internal(pool->objects, atomic_load_explicit(&pool->committed, memory_order_relaxed));
#endif
  brisk_annotate_mempool_destroy(pool);
  _brisk_os_release(pool->base, pool->reservation_size, NULL);
}

void _brisk_pool_range(const brisk_pool_t *pool, uintptr_t *lo, uintptr_t *hi) {
  *lo = (uintptr_t)pool->objects;
  *hi = (uintptr_t)pool->objects + pool->max_objects * pool->stride;
}

size_t _brisk_pool_object_size(const brisk_pool_t *pool) { return pool->stride; }

void _brisk_pool_counters(const brisk_pool_t *pool, brisk_pool_counters_t *out) {
  brisk_pool_t *p = (brisk_pool_t *)pool;
  size_t allocations = 0, frees = 0, failures = 0;
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    const slot_t *entry = &p->slots[i];
    allocations += atomic_load_explicit(&entry->allocs, memory_order_relaxed);
    frees += atomic_load_explicit(&entry->frees, memory_order_relaxed);
    failures += atomic_load_explicit(&entry->failures, memory_order_relaxed);
  }
  /* A slot's frees may exceed its allocations (its thread frees what
   * others allocated), and a free read before the allocation it undoes can
   * make the sum dip below zero for a moment: clamped. */
  size_t in_use = allocations > frees ? allocations - frees : 0;
  out->in_use = in_use;
  out->high_water = atomic_load_explicit(&p->carved, memory_order_relaxed);
  out->allocations = allocations;
  out->failures = failures;
}

void brisk_pool_stats(const brisk_pool_t *pool, brisk_region_stats_t *out) {
  brisk_pool_counters_t counters;
  _brisk_pool_counters(pool, &counters);
  brisk_pool_t *p = (brisk_pool_t *)pool;
  size_t committed = atomic_load_explicit(&p->committed, memory_order_relaxed);
  /* Every allocation asks for obj_size bytes and takes stride. */
  out->bytes_requested = counters.allocations * p->obj_size;
  out->bytes_in_use = counters.in_use * p->stride;
  out->bytes_held = p->header_size + bitmap_bytes_for(p, committed / p->stride) + committed;
  out->system_requests = atomic_load_explicit(&p->system_requests, memory_order_relaxed);
  out->allocations = counters.allocations;
}

/* ---- Local caches (brisk.h's brisk_pool_local_*) ----
 *
 * A caller-owned stack of free objects that brisk.h pops and pushes inline.
 * It meets the pool only through brisk_pool_alloc and brisk_pool_free, in
 * batches of max / 2, so the pool's checks, counters and tools see every
 * object that crosses; inside the local cache an object is the program's
 * (in use, for the statistics). The inline free trusts an address inside
 * [lo, lo + span): span is the bytes the pool had carved at the last slow
 * call, so anything the pool has not handed out goes out of line and is
 * checked here.
 */

#define LOCAL_DEFAULT_MAX 32u


static void local_push(brisk_pool_local_t *local, void *p) {
  *(void **)p = local->head;
  local->head = p;
  local->count += 1;
}

static void *local_pop(brisk_pool_local_t *local) {
  void *p = local->head;
  local->head = *(void **)p;
  local->count -= 1;
  return p;
}

static void local_update_span(brisk_pool_local_t *local) {
  brisk_pool_t *pool = local->pool;
  local->span = atomic_load_explicit(&pool->carved, memory_order_relaxed) * pool->stride;
}

void brisk_pool_local_init(brisk_pool_local_t *local, brisk_pool_t *pool, unsigned max) {
  if (max == 0) max = LOCAL_DEFAULT_MAX;
  if (max < 2) max = 2;
  local->head = NULL;
  local->count = 0;
  /* Debug checks or a watching tool must see every object: max 0 sends
   * every call to the pool (the inline paths never succeed). */
  local->max = BRISK_DEBUG || brisk_tools_watch_blocks() ? 0 : max;
  local->lo = (uintptr_t)pool->objects;
  local->span = 0;
  local->pool = pool;
}

void brisk_pool_local_flush(brisk_pool_local_t *local) {
  while (local->head != NULL) brisk_pool_free(local->pool, local_pop(local));
}

/* Empty: one object for the caller and up to max / 2 - 1 more from the
 * pool. A refill that meets the bound keeps what it got (the pool counts
 * that one failure) and leaves errno as the caller's success found it. */
void *brisk_pool_local_alloc_slow_(brisk_pool_local_t *local) {
  brisk_pool_t *pool = local->pool;
  void *first = brisk_pool_alloc(pool);
  if (first == NULL || local->max == 0) return first;
  int saved_errno = errno;
  for (unsigned i = 1; i < local->max / 2; i++) {
    void *p = brisk_pool_alloc(pool);
    if (p == NULL) break;
    local_push(local, p);
  }
  errno = saved_errno;
  local_update_span(local);
  return first;
}

/* Out of range for the inline check (maybe only because span is stale),
 * or the cache is full: check p as brisk_pool_free would, hand half of the
 * cache back if full, keep p. */
void brisk_pool_local_free_slow_(brisk_pool_local_t *local, void *p) {
  if (p == NULL) return;
  brisk_pool_t *pool = local->pool;
  if (local->max == 0) {
    brisk_pool_free(pool, p);
    return;
  }
  if (BRISK_UNLIKELY(index_of(pool, p) >= atomic_load_explicit(&pool->carved, memory_order_relaxed)))
    bad_free(p);
  if (local->count >= local->max) {
    for (unsigned n = local->max / 2; n > 0; n--) brisk_pool_free(pool, local_pop(local));
  }
  local_update_span(local);
  local_push(local, p);
}
