/*
 * pool.c — the lock-free fixed-size pool (seeds 000 and 003): objects of
 * one size carved from one reservation; free objects hold the link of
 * Treiber stacks ("shards") found through one atomic bitmap and ctz. The
 * layout and who touches which field: pool_internal.h. The caches in front
 * of the shards (THREAD_CACHE's magazines, brisk_pool_local_t): pool_cache.c.
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
 * Reuse: destroy hands the reservation to the OS layer's mapping cache
 * (os.h) with what it committed; a pool created with the same layout
 * takes it back, clears its header and, when everything is read-write
 * already and nothing is to be pinned, makes no system call at all. Its
 * objects hold what the old pool's held: pools never promised zeroes.
 * Debug builds keep their pools out of it (their live bits would come in
 * set).
 *
 * Call tree:
 *   brisk_pool_create(_ex)  check arguments, a cached reservation (cleared
 *                           header) or reserve and commit the header
 *                           (bounded + PREFAULT/LOCK: commit, prefault and
 *                           lock everything), register (registry.h; a
 *                           hybrid's buckets, made by _brisk_pool_create,
 *                           do not); a key of its own (_brisk_pool_new_key,
 *                           which the hybrid's create calls too)
 *   _brisk_pool_create_in   the same over memory its creator gives (a
 *                           hybrid's bucket): the header cleared, no system
 *                           call but PREFAULT/LOCK's; destroy leaves the
 *                           memory to the creator
 *   brisk_pool_alloc        one branch on the mode, then:
 *     shards (default)      pop the home shard (slot % SHARDS): one CAS
 *       alloc_slow          (noinline) take_shared: other shards through the
 *                           bitmap (steal), then every head once; carve 1;
 *                           else fail (ENOMEM)
 *     THREAD_CACHE          pop the thread's magazine: no atomics
 *       cache_refill        (pool_cache.c)
 *   brisk_pool_free         index_of (range + object start, O(1), abort if
 *                           bad); [debug] live bit; the key (abort if the
 *                           object carries it: a double free; else set);
 *                           then by mode:
 *     shards                push onto the home shard (CAS), mark nonempty
 *     THREAD_CACHE          push onto the magazine; full: cache_flush
 *                           (pool_cache.c)
 *   _brisk_pool_take_batch  a cache in front (the hybrid's lists) refills:
 *                           take_shared a batch (one CAS), else carve one
 *   _brisk_pool_give_batch  ... and gives back: each object checked as by
 *                           free, one chain onto the home shard (one CAS)
 *   _brisk_pool_free_as     brisk_pool_free naming another call (a hybrid's
 *                           buckets, local caches)
 *   carve                   commit up to the claim, then CAS(carved);
 *     ensure_committed      (cold) commit a slab, CAS-max `committed`
 *   brisk_pool_stats / _brisk_pool_counters: sum the per-slot counters
 *   brisk_pool_destroy      unregister (abort for a handle that is no live
 *                           pool), the reservation to the mapping cache;
 *                           _brisk_pool_destroy_unregistered: a hybrid's
 *                           bucket, its memory left to the hybrid
 *   _brisk_pool_validate    (pool_validate.c) every free object against the
 *                           geometry and counters, at a quiet point
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
 */
#include "regions/pool_internal.h"

#include <errno.h>
#include <string.h>

/* Objects start page-aligned: any alignment up to the smallest page. */
#define MAX_ALIGN BRISK_OS_MIN_PAGE_SIZE
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

/* ---- Tools and debug checks (annotate.h: the pool is a Valgrind mempool) ---- */

/* The object at p comes back: no access but its link. */
BRISK_INLINE void announce_free(brisk_pool_t *pool, uint8_t *p) {
  brisk_annotate_mempool_free(pool, p, pool->stride, BRISK_POOL_LINK_BYTES);
}

/* The object at p comes back: its live bit must be set (debug builds). */
BRISK_INLINE void debug_mark_free(brisk_pool_t *pool, size_t index, const void *p,
                                  const char *caller) {
#if BRISK_DEBUG
  if (index >= atomic_load_explicit(&pool->carved, memory_order_relaxed))
    _brisk_os_fatal_pointer(caller, p, "not an object of this pool (never handed out)");
  uint64_t bit = (uint64_t)1 << (index % 64);
  uint64_t old = atomic_fetch_and_explicit(&pool->live[index / 64], ~bit, memory_order_relaxed);
  if (!(old & bit)) _brisk_os_fatal_pointer(caller, p, "double free");
#endif
  (void)pool;
  (void)index;
  (void)p;
  (void)caller;
}

/* ---- Counters ---- */

/* A counter of the calling thread's own slot: no atomic RMW. */
BRISK_INLINE void bump(_Atomic size_t *counter) { brisk_owner_add(counter, 1); }

void _brisk_pool_not_live(const brisk_pool_t *pool, const char *caller) {
  _brisk_os_fatal_pointer(caller, pool, "not a live pool (destroyed already?)");
}

void *_brisk_pool_fail(brisk_pool_t *pool, brisk_pool_slot_t *entry, uint32_t slot) {
  /* Every allocation with a destroyed pool ends here: it has nothing to
   * carve (pool_internal.h: Destroyed). */
  if (brisk_pool_destroyed(pool)) _brisk_pool_not_live(pool, "brisk_pool_alloc");
  brisk_pool_count(&entry->failures, slot);
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
             _brisk_os_make_resident(p, size, (pool->flags & BRISK_REGION_LOCK) != 0, &calls));
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
uint32_t _brisk_pool_carve(brisk_pool_t *pool, uint32_t want, uint32_t *first1) {
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
    uint32_t next = racy_link(brisk_pool_object_at(pool, first));
    while (n < want && next != 0) {
      if (limit == 0) limit = atomic_load_explicit(&pool->committed, memory_order_acquire) / pool->stride;
      /* Past the objects committed when we looked: a stale link (the CAS
       * fails), or objects carved since (a shorter batch is fine). */
      if (next - 1 >= limit) break;
      last = next;
      n++;
      next = racy_link(brisk_pool_object_at(pool, last));
    }
    if (atomic_compare_exchange_weak_explicit(head, &old, brisk_pool_next_head(old, next),
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
uint32_t _brisk_pool_take_shared(brisk_pool_t *pool, uint32_t home, uint32_t want,
                                 uint32_t *first1, uint32_t *last1) {
  uint32_t n = pop_batch(pool, home, want, first1, last1);
  if (n != 0) return n;
  uint64_t bits = atomic_load_explicit(&pool->nonempty, memory_order_seq_cst);
  bits &= ~((uint64_t)1 << home);
  while (bits != 0) {
    uint64_t rotated = ((bits >> home) | (bits << (BRISK_POOL_SHARDS - home))) &
                       (((uint64_t)1 << BRISK_POOL_SHARDS) - 1);
    uint32_t s = (home + (uint32_t)brisk_count_trailing_zeros(rotated)) & (BRISK_POOL_SHARDS - 1);
    bits &= ~((uint64_t)1 << s);
    n = pop_batch(pool, s, want, first1, last1);
    if (n != 0) return n;
    if (clear_nonempty(pool, s) && (n = pop_batch(pool, s, want, first1, last1)) != 0) return n;
  }
  for (uint32_t i = 0; i < BRISK_POOL_SHARDS; i++) {
    n = pop_batch(pool, (home + i) & (BRISK_POOL_SHARDS - 1), want, first1, last1);
    if (n != 0) return n;
  }
  return 0;
}

/* Shards mode: the home shard was empty. */
static BRISK_NOINLINE void *alloc_slow(brisk_pool_t *pool, brisk_pool_slot_t *entry,
                                        uint32_t slot) {
  uint32_t first1, last1;
  if (_brisk_pool_take_shared(pool, brisk_pool_home_shard(slot), 1, &first1, &last1) != 0 ||
      _brisk_pool_carve(pool, 1, &first1) != 0) {
    brisk_pool_count(&entry->allocs, slot);
    return brisk_pool_hand_out(pool, brisk_pool_object_at(pool, first1));
  }
  return _brisk_pool_fail(pool, entry, slot);
}

/* ---- The API ---- */

/* The calling thread has no slot yet (its first call), or none at all
 * (more than BRISK_THREAD_SLOTS threads live): the shared entry, no magazine. */
static BRISK_NOINLINE void *alloc_no_slot(brisk_pool_t *pool) {
  uint32_t slot = brisk_thread_slot();
  if (slot != BRISK_NO_THREAD_SLOT) return brisk_pool_alloc(pool);
  brisk_pool_slot_t *entry = &pool->slots[slot];
  if (pool->mode == BRISK_POOL_CACHED) return _brisk_pool_cache_refill(pool, entry, slot);
  return alloc_slow(pool, entry, slot);
}

/*
 * The fast paths read brisk_thread_slot_line_ (brisk/internal.h), the
 * offset of the thread's entry: one zero test sends both "no slot yet" and "no
 * slot at all" out of line, so the counters below need no test and no
 * atomic RMW, and the entry is one add away.
 */
_Static_assert(sizeof(brisk_pool_slot_t) == BRISK_CACHE_LINE, "slot entries are one cache line");

BRISK_INLINE brisk_pool_slot_t *entry_at(brisk_pool_t *pool, uint32_t line) {
  return (brisk_pool_slot_t *)((char *)pool->slots + line) - 1;
}

BRISK_INLINE uint32_t slot_of(uint32_t line) { return line / BRISK_CACHE_LINE - 1; }

/* A NULL pool: NULL/EINVAL (brisk/pool.h's NULL handles). */
static BRISK_COLD void *no_pool(void) {
  errno = EINVAL;
  return NULL;
}

void *brisk_pool_alloc(brisk_pool_t *pool) {
  if (BRISK_UNLIKELY(pool == NULL)) return no_pool();
  uint32_t line = brisk_thread_slot_line_;
  if (BRISK_UNLIKELY(line == 0)) return alloc_no_slot(pool);
  brisk_pool_slot_t *entry = entry_at(pool, line);
  uint32_t slot = slot_of(line);
  uint32_t mode = pool->mode;
  uint8_t *p;
  if (mode == BRISK_POOL_CACHED) {
    p = entry->mag_head;
    if (BRISK_UNLIKELY(p == NULL)) return _brisk_pool_cache_refill(pool, entry, slot);
    entry->mag_head = brisk_pool_mag_link_load(p);
    entry->mag_count -= 1;
    bump(&entry->allocs);
    return brisk_pool_hand_out(pool, p);
  } else {
    _Atomic uint64_t *head = &pool->shards[brisk_pool_home_shard(slot)].head;
    uint64_t old = atomic_load_explicit(head, memory_order_acquire);
    for (;;) {
      if (BRISK_UNLIKELY((uint32_t)old == 0)) return alloc_slow(pool, entry, slot);
      p = brisk_pool_object_at(pool, (uint32_t)old);
      uint32_t next = racy_link(p);
      if (atomic_compare_exchange_weak_explicit(head, &old, brisk_pool_next_head(old, next),
                                                memory_order_acquire, memory_order_acquire))
        break;
    }
  }
  bump(&entry->allocs);
  return brisk_pool_hand_out(pool, p);
}

void _brisk_pool_bad_free(const brisk_pool_t *pool, const void *p, const char *caller) {
  /* Every free to a destroyed pool ends here: none of its objects is
   * carved (pool_internal.h: Destroyed). */
  if (brisk_pool_destroyed(pool)) _brisk_pool_not_live(pool, caller);
  _brisk_os_fatal_pointer(caller, p, "not an object of this pool (or never handed out)");
}

void _brisk_pool_double_free(const void *p, const char *caller) {
  _brisk_os_fatal_pointer(caller, p, "double free");
}

/* See alloc_no_slot. */
static BRISK_NOINLINE void free_no_slot(brisk_pool_t *pool, uint8_t *p, size_t index,
                                        const char *caller) {
  uint32_t slot = brisk_thread_slot();
  if (slot != BRISK_NO_THREAD_SLOT) {
    _brisk_pool_free_as(pool, p, caller);
    return;
  }
  debug_mark_free(pool, index, p, caller);
  brisk_pool_key_in(pool, p, caller);
  announce_free(pool, p);
  brisk_pool_count(&pool->slots[slot].frees, slot);
  brisk_pool_push_chain(pool, brisk_pool_home_shard(slot), (uint32_t)index + 1, p);
}

/* Shards mode: the free after the checks (a tail call from
 * brisk_pool_free, so that the magazine path there computes nothing for
 * it). */
static BRISK_NOINLINE void free_to_shared(brisk_pool_t *pool, uint32_t line, uint8_t *p,
                                          size_t index) {
  brisk_pool_push_chain(pool, brisk_pool_home_shard(slot_of(line)), (uint32_t)index + 1, p);
}

/* brisk_pool_free's body, its messages naming `caller` (a constant in
 * each copy): brisk_pool_free and _brisk_pool_free_as. */
BRISK_INLINE void free_object(brisk_pool_t *pool, void *ptr, const char *caller) {
  if (ptr == NULL) return;
  if (BRISK_UNLIKELY(pool == NULL)) _brisk_os_fatal_pointer(caller, ptr, "the pool is NULL");
  uint8_t *p = ptr;
  size_t index = brisk_pool_index_of(pool, p);
  /* carved <= max_objects: one compare catches foreign, interior and
   * never-handed-out pointers. */
  if (BRISK_UNLIKELY(index >= atomic_load_explicit(&pool->carved, memory_order_relaxed)))
    _brisk_pool_bad_free(pool, p, caller);
  uint32_t line = brisk_thread_slot_line_;
  if (BRISK_UNLIKELY(line == 0)) {
    free_no_slot(pool, p, index, caller);
    return;
  }
  debug_mark_free(pool, index, p, caller);
  /* An object already free (on a shard, in a magazine or a local cache)
   * carries the key: a double free. */
  brisk_pool_key_in(pool, p, caller);
  announce_free(pool, p);
  brisk_pool_slot_t *entry = entry_at(pool, line);
  bump(&entry->frees);
  if (BRISK_LIKELY(pool->mode == BRISK_POOL_CACHED)) {
    uint32_t n = entry->mag_count;
    if (BRISK_UNLIKELY(n >= pool->mag_max)) {
      _brisk_pool_cache_flush(pool, entry, slot_of(line), p);
      return;
    }
    brisk_pool_mag_link_store(p, entry->mag_head);
    entry->mag_head = p;
    entry->mag_count = n + 1;
    return;
  }
  free_to_shared(pool, line, p, index);
}

void brisk_pool_free(brisk_pool_t *pool, void *ptr) { free_object(pool, ptr, "brisk_pool_free"); }

void _brisk_pool_free_as(brisk_pool_t *pool, void *ptr, const char *caller) {
  free_object(pool, ptr, caller);
}

/* ---- Batches for a cache in front (the hybrid's thread lists) ---- */

/* Add n to a counter of slot `slot`'s entry (brisk_pool_count's n). */
BRISK_INLINE void count_n(_Atomic size_t *counter, uint32_t slot, size_t n) {
  if (BRISK_LIKELY(slot != BRISK_NO_THREAD_SLOT))
    brisk_owner_add(counter, n);
  else
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

size_t _brisk_pool_take_batch(brisk_pool_t *pool, size_t want, void **out) {
  uint32_t slot = brisk_thread_slot();
  brisk_pool_slot_t *entry = &pool->slots[slot];
  uint32_t w = want < UINT32_MAX ? (uint32_t)want : UINT32_MAX;
  uint32_t first1 = 0, last1 = 0;
  uint32_t n = _brisk_pool_take_shared(pool, brisk_pool_home_shard(slot), w, &first1, &last1);
  bool carved = false;
  if (n == 0) {
    n = _brisk_pool_carve(pool, w, &first1);
    if (n == 0) {
      (void)_brisk_pool_fail(pool, entry, slot);
      return 0;
    }
    carved = true;
  }
  /* Each object's link is read before it is handed out (a tool may mark
   * it undefined then); freshly carved objects are consecutive. */
  uint32_t index1 = first1;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *p = brisk_pool_object_at(pool, index1);
    if (i + 1 < n) index1 = carved ? index1 + 1 : brisk_pool_link_load(p);
    out[i] = brisk_pool_hand_out(pool, p);
  }
  count_n(&entry->allocs, slot, n);
  return n;
}

void _brisk_pool_give_batch(brisk_pool_t *pool, void *const *objects, size_t n,
                            const char *caller) {
  if (n == 0) return;
  uint32_t slot = brisk_thread_slot();
  size_t carved = atomic_load_explicit(&pool->carved, memory_order_relaxed);
  uint32_t first1 = 0;
  uint8_t *prev = NULL;
  for (size_t i = 0; i < n; i++) {
    uint8_t *p = objects[i];
    size_t index = brisk_pool_index_of(pool, p);
    if (BRISK_UNLIKELY(index >= carved)) _brisk_pool_bad_free(pool, p, caller);
    debug_mark_free(pool, index, p, caller);
    brisk_pool_key_in(pool, p, caller);
    announce_free(pool, p);
    if (prev != NULL)
      brisk_pool_link_store(prev, (uint32_t)index + 1);
    else
      first1 = (uint32_t)index + 1;
    prev = p;
  }
  count_n(&pool->slots[slot].frees, slot, n);
  brisk_pool_push_chain(pool, brisk_pool_home_shard(slot), first1, prev);
}

/* The multiplicative inverse of an odd number mod 2^64 (Newton's method:
 * each step doubles the correct low bits, 3 -> 6 -> ... -> 96). */
static uint64_t odd_inverse(uint64_t odd) {
  uint64_t x = odd;
  for (int i = 0; i < 5; i++) x *= 2 - odd * x;
  return x;
}

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  brisk_pool_stats((const brisk_pool_t *)((const char *)entry - offsetof(brisk_pool_t, entry)), out);
}

/* The stride and object count of a pool of these arguments: 0, or the
 * errno create fails with. */
static int pool_shape(size_t obj_size, size_t align, size_t capacity, unsigned flags,
                      size_t *stride_out, size_t *max_objects_out) {
  const unsigned known = BRISK_REGION_PREFAULT | BRISK_REGION_LOCK | BRISK_REGION_THREAD_CACHE;
  if (align == 0) align = DEFAULT_ALIGN;
  if (obj_size == 0 || !brisk_is_power_of_two(align) || align > MAX_ALIGN || (flags & ~known) != 0)
    return EINVAL;
  size_t unit = align > MIN_STRIDE ? align : MIN_STRIDE;
  if (obj_size > SIZE_MAX - unit) return EINVAL;
  size_t stride = brisk_align_up(obj_size, unit);
  size_t max_objects = capacity, object_bytes;
  if (capacity == 0) {
    max_objects = UNBOUNDED_BYTES / stride;
    if (max_objects > MAX_OBJECTS) max_objects = MAX_OBJECTS;
    if (max_objects == 0) max_objects = 1;
  } else if (capacity > MAX_OBJECTS || brisk_mul_overflows(obj_size, capacity, &object_bytes) ||
             brisk_mul_overflows(stride, capacity, &object_bytes)) {
    return EINVAL;
  }
  if (brisk_mul_overflows(stride, max_objects, &object_bytes) || object_bytes > MAX_RESERVE)
    return ENOMEM;
  *stride_out = stride;
  *max_objects_out = max_objects;
  return 0;
}

/* The header pages, live bits (debug builds) and objects of a pool of
 * max_objects objects of `stride` bytes. */
static size_t header_bytes(size_t page) { return brisk_align_up(sizeof(brisk_pool_t), page); }
static size_t bitmap_bytes(size_t max_objects, size_t page) {
  return BRISK_DEBUG ? brisk_align_up((max_objects + 63) / 64 * 8, page) : 0;
}

/*
 * A key (pool_internal.h's Keys) that no pool or hybrid of this process
 * has had: the n-th is ((n ^ salt) * C) << 1 | 1, odd, and distinct for
 * every n below 2^63 (C is odd, so multiplying by it permutes the numbers
 * mod 2^63). A destroyed pool's or hybrid's free objects keep its key in
 * memory that the mapping cache hands to the next one of its size, at the
 * same address; with a key that can repeat (one drawn from the address and
 * the time does, within a millisecond), bytes there that the program never
 * wrote, copied into an object's second word, would pass for a free
 * object's. The salt, drawn once from an address and the time, makes the
 * keys differ from one run to the next.
 */
uintptr_t _brisk_pool_new_key(void) {
  static _Atomic uintptr_t made, salt;
  uintptr_t s = atomic_load_explicit(&salt, memory_order_relaxed);
  if (s == 0) {
    uintptr_t drawn = ((uintptr_t)&made ^ (uintptr_t)_brisk_os_now_ms() << 20) | 1;
    /* The first thread's salt serves every thread (s: the winner's). */
    if (atomic_compare_exchange_strong_explicit(&salt, &s, drawn, memory_order_relaxed,
                                                memory_order_relaxed))
      s = drawn;
  }
  uintptr_t n = atomic_fetch_add_explicit(&made, 1, memory_order_relaxed);
  return ((n ^ s) * 0x9E3779B97F4A7C15ull) << 1 | 1;
}

/* Fill in the header of a pool at base (zero: fresh or cleared), its live
 * bits after it, its objects at `objects`; key 0: a key of its own. */
static brisk_pool_t *init_pool(uint8_t *base, uint8_t *objects, size_t total, size_t bitmap_size,
                               size_t obj_size, size_t stride, size_t capacity, size_t max_objects,
                               unsigned flags, uintptr_t key) {
  size_t page = _brisk_os_page_size();
  size_t header_size = header_bytes(page);
  brisk_pool_t *pool = (brisk_pool_t *)base;
  pool->objects = objects;
  pool->bias = (uintptr_t)pool->objects - stride;
  pool->stride = stride;
  uint32_t shift = (uint32_t)brisk_count_trailing_zeros(stride);
  pool->shift = shift;
  pool->inverse = odd_inverse(stride >> shift);
  pool->max_objects = max_objects;
  pool->flags = flags;
  pool->mode = (flags & BRISK_REGION_THREAD_CACHE) ? BRISK_POOL_CACHED : BRISK_POOL_SHARDED;
  size_t mag = capacity == 0 ? MAG_MAX : capacity / 8;
  if (mag < 2) mag = 2;
  if (mag > MAG_MAX) mag = MAG_MAX;
  pool->mag_max = (uint32_t)mag;
  /* The key (pool_internal.h's Keys): the hybrid's for its buckets, else
   * one of its own. An object of 8 bytes has no second word for it. */
  pool->key = key != 0 ? key : _brisk_pool_new_key();
  pool->key_at = stride >= 2 * sizeof(uintptr_t) ? sizeof(uintptr_t) : 0;
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
  return pool;
}

brisk_pool_t *_brisk_pool_create(size_t obj_size, size_t align, size_t capacity, unsigned flags,
                                 bool registered) {
  size_t stride, max_objects;
  int shape_error = pool_shape(obj_size, align, capacity, flags, &stride, &max_objects);
  if (shape_error != 0) {
    errno = shape_error;
    return NULL;
  }
  _brisk_thread_slots_init(); /* here, not in a first allocation */
  /* A refused reservation (retried smaller) or the checks below may set
   * errno on the way to a pool: put back on success. */
  int saved_errno = errno;
  size_t page = _brisk_os_page_size();
  size_t header_size = header_bytes(page);
  size_t bitmap_size, object_bytes, total;
  size_t calls = 0; /* system calls, refused reservations included */
  uint8_t *base = NULL;
  size_t cached_committed = 0, cached_resident;
  /* A destroyed pool's reservation of the same size, from the OS layer's
   * cache: not in debug builds, whose live bits it would bring in set. */
  bitmap_size = bitmap_bytes(max_objects, page);
  object_bytes = brisk_align_up(max_objects * stride, page);
  total = header_size + bitmap_size + object_bytes;
  if (bitmap_size == 0)
    base = _brisk_os_cache_take(BRISK_OS_CACHE_POOL, total, page, &cached_committed,
                                &cached_resident, &calls);
  if (base != NULL) {
    memset(base, 0, header_size);
  }
  for (; base == NULL;) {
    bitmap_size = bitmap_bytes(max_objects, page);
    object_bytes = brisk_align_up(max_objects * stride, page);
    total = header_size + bitmap_size + object_bytes;
    base = _brisk_os_reserve_address_space(total, page, &calls);
    if (base != NULL) {
      if (!_brisk_os_commit(base, header_size, &calls)) {
        _brisk_os_release(base, total, NULL);
        errno = ENOMEM;
        return NULL;
      }
      break;
    }
    /* Capacity 0: a smaller reservation where the address space is
     * limited (ulimit -v, or Valgrind, which refuses 64 GiB). */
    if (capacity != 0 || object_bytes <= MIN_UNBOUNDED_BYTES || max_objects < 4) return NULL;
    max_objects /= 4;
  }
  /* Fresh (or cleared) pages read as zero: heads, bitmap, counters and
   * magazines start empty. */
  brisk_pool_t *pool = init_pool(base, base + header_size + bitmap_size, total, bitmap_size,
                                 obj_size, stride, capacity, max_objects, flags, 0);
  bool pin = (flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) != 0;
  /* errno 0 to learn whether a refusal below set one. */
  int error = ENOMEM;
  errno = 0;
  if (pin && !_brisk_os_make_resident(base, header_size, (flags & BRISK_REGION_LOCK) != 0, &calls))
    goto failed;
  atomic_init(&pool->system_requests, calls); /* commit_range adds its own */
  /* A bounded pool commits everything now (faulted in and locked too with
   * PREFAULT/LOCK), so its alloc and free never call the OS. */
  if (capacity != 0) {
    /* A cached reservation may have it all read-write already. */
    bool mapped = cached_committed >= total;
    if (!(mapped && !pin) && !commit_range(pool, base + header_size, bitmap_size + object_bytes))
      goto failed;
    atomic_init(&pool->committed, object_bytes);
  } else if (!pin && cached_committed > header_size + bitmap_size) {
    /* A growing pool on a cached reservation: the objects its predecessor
     * committed are read-write already, so its first carves commit
     * nothing again (only PREFAULT/LOCK need commit_range's work). */
    size_t objects_mapped = cached_committed - header_size - bitmap_size;
    atomic_init(&pool->committed, objects_mapped < object_bytes ? objects_mapped : object_bytes);
  }
  brisk_annotate_mempool_create(pool);
  if (registered) _brisk_region_register(&pool->entry, BRISK_REGION_POOL, registry_stats);
  errno = saved_errno;
  return pool;
failed:
  if (errno != 0) error = errno;
  _brisk_os_release(base, total, NULL);
  errno = error;
  return NULL;
}

int _brisk_pool_footprint(size_t obj_size, size_t align, size_t capacity, size_t *header,
                          size_t *objects) {
  size_t stride, max_objects;
  int error = capacity == 0 ? EINVAL
                            : pool_shape(obj_size, align, capacity, 0, &stride, &max_objects);
  if (error != 0) return error;
  size_t page = _brisk_os_page_size();
  *header = header_bytes(page) + bitmap_bytes(max_objects, page);
  *objects = brisk_align_up(max_objects * stride, page);
  return 0;
}

brisk_pool_t *_brisk_pool_create_in(void *header, void *objects, size_t obj_size, size_t align,
                                    size_t capacity, unsigned flags, uintptr_t key) {
  size_t stride, max_objects;
  int shape_error = capacity == 0 ? EINVAL
                                  : pool_shape(obj_size, align, capacity, flags, &stride,
                                               &max_objects);
  if (shape_error != 0) {
    errno = shape_error;
    return NULL;
  }
  _brisk_thread_slots_init(); /* here, not in a first allocation */
  size_t page = _brisk_os_page_size();
  size_t bitmap_size = bitmap_bytes(max_objects, page);
  size_t header_size = header_bytes(page) + bitmap_size;
  size_t object_bytes = brisk_align_up(max_objects * stride, page);
  /* The memory may hold anything: the header and the live bits start
   * zero (the objects need not). */
  memset(header, 0, header_size);
  brisk_pool_t *pool = init_pool(header, objects, header_size, bitmap_size, obj_size, stride,
                                 capacity, max_objects, flags, key);
  pool->external = true;
  atomic_init(&pool->system_requests, 0);
  atomic_init(&pool->committed, object_bytes);
  /* Everything is read-write already; PREFAULT and LOCK still apply. */
  if ((flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) != 0) {
    size_t calls = 0;
    /* errno 0 to learn whether a refusal set one; put back on success. */
    int saved_errno = errno;
    errno = 0;
    bool lock = (flags & BRISK_REGION_LOCK) != 0;
    bool ok = _brisk_os_make_resident(header, header_size, lock, &calls) &&
              _brisk_os_make_resident(objects, object_bytes, lock, &calls);
    atomic_init(&pool->system_requests, calls);
    if (!ok) {
      if (errno == 0) errno = ENOMEM;
      return NULL;
    }
    errno = saved_errno;
  }
  brisk_annotate_mempool_create(pool);
  return pool;
}

size_t _brisk_pool_resident(const brisk_pool_t *pool) {
  brisk_pool_t *p = (brisk_pool_t *)pool;
  size_t carved = atomic_load_explicit(&p->carved, memory_order_relaxed) * p->stride;
  return p->header_size + p->bitmap_size + brisk_align_up(carved, p->page);
}

brisk_pool_t *brisk_pool_create_ex(size_t obj_size, size_t align, size_t capacity, unsigned flags) {
  return _brisk_pool_create(obj_size, align, capacity, flags, true);
}

brisk_pool_t *brisk_pool_create(size_t obj_size, size_t align, size_t capacity) {
  return _brisk_pool_create(obj_size, align, capacity, 0, true);
}

/* A pool no longer (or never) registered: its memory to the mapping
 * cache, back to the system, or to its creator, its header left
 * destroyed (pool_internal.h: Destroyed). */
static void pool_destroy(brisk_pool_t *pool) {
  /* Every object goes, and our poisoning with it (Valgrind's too: a free
   * object is no-access but its link), so whatever is laid here next (a
   * hybrid's bucket's memory is its mapping's) starts clean. */
  size_t objects_committed = atomic_load_explicit(&pool->committed, memory_order_relaxed);
  brisk_annotate_mempool_release(pool, pool->objects, objects_committed);
  size_t committed = pool->header_size + objects_committed;
  /* In RAM at most: the header and the objects ever carved. */
  size_t carved = atomic_load_explicit(&pool->carved, memory_order_relaxed) * pool->stride;
  size_t resident = pool->header_size + brisk_align_up(carved, pool->page);
  pool->max_objects = 0;
  pool->mode = BRISK_POOL_SHARDED;
  atomic_store_explicit(&pool->carved, 0, memory_order_relaxed);
  atomic_store_explicit(&pool->nonempty, 0, memory_order_relaxed);
  for (uint32_t s = 0; s < BRISK_POOL_SHARDS; s++)
    atomic_store_explicit(&pool->shards[s].head, 0, memory_order_relaxed);
  if (pool->external) return; /* its memory is its creator's */
  /* To the OS layer's cache: the header and the objects committed so far
   * are read-write (debug builds' live bits keep it from the cache). */
  if (pool->bitmap_size != 0 || (pool->flags & BRISK_REGION_LOCK) != 0) {
    /* ... nor mlock'ed memory, which would stay locked (and count against
     * RLIMIT_MEMLOCK) after its pool is gone. */
    _brisk_os_release(pool->base, pool->reservation_size, NULL);
    return;
  }
  /* Refused where the cache holds the reservation already (a header
   * garbled to name a destroyed one's): kept twice, two later pools would
   * share it. */
  if (BRISK_UNLIKELY(!_brisk_os_cache_put(BRISK_OS_CACHE_POOL, pool->base, pool->reservation_size,
                                          committed, resident < committed ? resident : committed,
                                          NULL)))
    _brisk_os_fatal_pointer("brisk_pool_destroy", pool,
                            "its memory is in the mapping cache already");
}

void brisk_pool_destroy(brisk_pool_t *pool) {
  if (pool == NULL) return;
  /* A pool destroyed already (its reservation in the mapping cache, the
   * header as destroy left it, or back with the system), a hybrid's
   * bucket or another kind's handle has no live entry: destroying it
   * would give the cache a mapping twice, or one that is no pool's. */
  if (BRISK_UNLIKELY(!_brisk_region_unregister(&pool->entry, BRISK_REGION_POOL)))
    _brisk_pool_not_live(pool, "brisk_pool_destroy");
  pool_destroy(pool);
}

void _brisk_pool_destroy_unregistered(brisk_pool_t *pool) { pool_destroy(pool); }

void _brisk_pool_range(const brisk_pool_t *pool, uintptr_t *lo, uintptr_t *hi) {
  *lo = (uintptr_t)pool->objects;
  *hi = (uintptr_t)pool->objects + pool->max_objects * pool->stride;
}

size_t _brisk_pool_object_size(const brisk_pool_t *pool) { return pool->stride; }

void _brisk_pool_geometry(const brisk_pool_t *pool, brisk_pool_geometry_t *out) {
  out->objects = (uintptr_t)pool->objects;
  out->inverse = pool->inverse;
  out->shift = pool->shift;
  out->carved = &pool->carved;
}

void _brisk_pool_counters(const brisk_pool_t *pool, brisk_pool_counters_t *out) {
  brisk_pool_t *p = (brisk_pool_t *)pool;
  size_t allocations = 0, frees = 0, failures = 0;
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    const brisk_pool_slot_t *entry = &p->slots[i];
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
  if (pool == NULL) {
    memset(out, 0, sizeof *out);
    errno = EINVAL;
    return;
  }
  if (BRISK_UNLIKELY(brisk_pool_destroyed(pool))) _brisk_pool_not_live(pool, "brisk_pool_stats");
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
