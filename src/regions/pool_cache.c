/*
 * pool_cache.c — the caches in front of a fixed-size pool's shared lists
 * (pool.c; the layout is pool_internal.h's): the per-thread magazines of
 * BRISK_REGION_THREAD_CACHE, whose pops and pushes brisk_pool_alloc and
 * brisk_pool_free make inline, and the caller-owned brisk_pool_local_t,
 * which brisk/pool.h pops and pushes inline. This file holds their slow paths.
 *
 * Call tree:
 *   brisk_pool_alloc        THREAD_CACHE, the magazine empty:
 *     _brisk_pool_cache_refill  take_shared a batch (ONE CAS), else carve
 *                           a batch (each given the key), else the
 *                           magazines of slots no thread holds back to
 *                           the shards and take_shared again, else fail;
 *                           one object out, the rest into the magazine
 *   brisk_pool_free         THREAD_CACHE, the magazine full:
 *     _brisk_pool_cache_flush   its older half to the home shard as one
 *                           chain (ONE CAS), then the object in
 *   brisk_pool_local_init / _flush, and the inline alloc and free's
 *   brisk_pool_local_alloc_slow_ / _free_slow_: batches through
 *                           brisk_pool_alloc / brisk_pool_free
 *
 * THREAD_CACHE: a magazine per thread slot holds up to mag_max free objects
 * as a chain of pointers through their first 8 bytes (head, count); batches
 * to and from the shards are relinked by index. An empty magazine is
 * refilled with a batch (mag_max / 2) taken from one shard in one CAS; a
 * full one pushes its older half onto the home shard as one chain in one
 * CAS. A bounded pool gets smaller magazines (capacity / 8, at least 2, at
 * most 32), yet objects cached by other live threads can make it report
 * exhaustion early: at most mag_max objects per other thread. The thread
 * that allocates sees its own magazine first, so a single thread sees the
 * capacity honoured exactly. Objects stay in a magazine when its thread
 * exits: the next thread given the slot uses them, or an allocation that
 * finds the pool exhausted first takes every magazine of a slot no thread
 * holds back to the shards (_brisk_thread_slots_take_back, holding the
 * slot meanwhile), so exited threads' magazines never make it fail. Only
 * the slot's holder touches its magazine (pool_internal.h: slots[i]).
 *
 * What keeps a magazine's pop and push short: magazines link objects by
 * pointer, not index (a pop needs no multiply); the thread's entry is
 * found from one TLS word (brisk_thread_slot_line_) with one zero test;
 * its counters are bumped with one unlocked add (brisk_owner_add); and the
 * shards' free is a function of its own (pool.c's free_to_shared), so the
 * magazine path computes nothing for it.
 */
#include "regions/pool_internal.h"

#include <errno.h>

/* ---- THREAD_CACHE: the magazines ---- */

/* The n objects of a magazine's chain from first on, relinked by index, go
 * to shard s as one chain (one CAS). */
static void push_magazine_chain(brisk_pool_t *pool, uint32_t s, uint8_t *first, uint32_t n) {
  uint8_t *last = first;
  for (uint32_t i = 1; i < n; i++) {
    uint8_t *next = brisk_pool_mag_link_load(last);
    brisk_pool_link_store(last, (uint32_t)brisk_pool_index_of(pool, next) + 1);
    last = next;
  }
  brisk_pool_push_chain(pool, s, (uint32_t)brisk_pool_index_of(pool, first) + 1, last);
}

/* _brisk_thread_slots_take_back's call for a slot no thread holds: its
 * magazine, whole, to the slot's home shard. */
static size_t magazine_take_back(void *context, uint32_t slot) {
  brisk_pool_t *pool = context;
  brisk_pool_slot_t *entry = &pool->slots[slot];
  uint32_t count = entry->mag_count;
  if (count == 0) return 0;
  push_magazine_chain(pool, brisk_pool_home_shard(slot), entry->mag_head, count);
  entry->mag_head = NULL;
  entry->mag_count = 0;
  return count;
}

/* The magazine is empty: a batch from the shards (one CAS), else freshly
 * carved objects; the first is handed out, the rest fill the magazine. A
 * thread without a slot takes one object: it has no magazine. Reached only
 * with an empty magazine, so "the whole pool is exhausted" never leaves
 * objects of the calling thread's own magazine unused. */
void *_brisk_pool_cache_refill(brisk_pool_t *pool, brisk_pool_slot_t *entry, uint32_t slot) {
  uint32_t want = slot != BRISK_NO_THREAD_SLOT ? pool->mag_max / 2 : 1;
  uint32_t first1 = 0, last1 = 0;
  uint32_t home = brisk_pool_home_shard(slot);
  uint32_t n = _brisk_pool_take_shared(pool, home, want, &first1, &last1);
  bool carved = false;
  if (n == 0) {
    n = _brisk_pool_carve(pool, want, &first1);
    carved = n != 0;
  }
  /* Exhausted: the magazines of threads that exited may hold objects that
   * only their slots' next holders would use. Back to the shards, and one
   * more take. (Not for a destroyed pool, whose magazines point into
   * memory it no longer has: _brisk_pool_fail names the call.) */
  if (n == 0 && !brisk_pool_destroyed(pool) &&
      _brisk_thread_slots_take_back(magazine_take_back, pool) != 0)
    n = _brisk_pool_take_shared(pool, home, want, &first1, &last1);
  if (n == 0) return _brisk_pool_fail(pool, entry, slot);
  /* The rest of the batch becomes the magazine, its index links rewritten
   * as pointers. Freshly carved objects have no links (they are
   * consecutive) and no key yet: each gets the key every free object
   * carries, before its link, which may share its word. */
  uint8_t *first = brisk_pool_object_at(pool, first1);
  if (n > 1) {
    uint8_t *object = first;
    uint32_t index1 = first1;
    for (uint32_t i = 1; i < n; i++) {
      index1 = carved ? index1 + 1 : brisk_pool_link_load(object);
      uint8_t *next = brisk_pool_object_at(pool, index1);
      if (carved) *brisk_pool_key_word(pool, next) = pool->key;
      if (i > 1)
        brisk_pool_mag_link_store(object, next);
      else
        entry->mag_head = next;
      object = next;
    }
    brisk_pool_mag_link_store(object, NULL);
  }
  brisk_pool_count(&entry->allocs, slot);
  if (n > 1) entry->mag_count = n - 1;
  return brisk_pool_hand_out(pool, first);
}

/* The magazine is full: its older half goes to the home shard as one chain
 * (one CAS), then p joins the magazine. Walking the chain to its end here
 * (objects this thread freed lately, in cache) keeps a tail pointer off the
 * fast path. */
void _brisk_pool_cache_flush(brisk_pool_t *pool, brisk_pool_slot_t *entry, uint32_t slot,
                             uint8_t *p) {
  uint32_t count = entry->mag_count, keep = count - count / 2;
  uint8_t *cut = entry->mag_head;
  for (uint32_t i = 1; i < keep; i++) cut = brisk_pool_mag_link_load(cut);
  /* The older half, cut's successors. */
  uint8_t *first = brisk_pool_mag_link_load(cut);
  brisk_pool_mag_link_store(cut, NULL);
  push_magazine_chain(pool, brisk_pool_home_shard(slot), first, count - keep);
  brisk_pool_mag_link_store(p, entry->mag_head);
  entry->mag_head = p;
  entry->mag_count = keep + 1;
}

/* ---- Local caches (brisk/pool.h's brisk_pool_local_*) ----
 *
 * A caller-owned stack of free objects that brisk/pool.h pops and pushes inline.
 * It meets the pool only through brisk_pool_alloc and brisk_pool_free, in
 * batches of max / 2, so the pool's checks, counters and tools see every
 * object that crosses; inside the local cache an object is the program's
 * (in use, for the statistics). The inline free trusts an address inside
 * [lo, lo + span): span is the bytes the pool had carved at the last slow
 * call, so anything the pool has not handed out goes out of line and is
 * checked here. An object in a local cache carries the pool's key as one
 * in the pool does (pool_internal.h's Keys: pushed with it, popped
 * without it), so a free of it, to the local cache or to the pool, finds
 * it. Its messages name the call the program made.
 */

#define LOCAL_DEFAULT_MAX 32u

static void local_push(brisk_pool_local_t *local, void *p) {
  *(uintptr_t *)(void *)((uint8_t *)p + local->key_at) = local->key;
  *(void **)p = local->head;
  local->head = p;
  local->count += 1;
}

static void *local_pop(brisk_pool_local_t *local) {
  void *p = local->head;
  local->head = *(void **)p;
  *(uintptr_t *)(void *)((uint8_t *)p + local->key_at) = 0;
  local->count -= 1;
  return p;
}

static void local_update_span(brisk_pool_local_t *local) {
  brisk_pool_t *pool = local->pool;
  local->span = atomic_load_explicit(&pool->carved, memory_order_relaxed) * pool->stride;
}

/* A local cache of a destroyed pool: the calls below abort before they
 * touch an object (pool_internal.h: Destroyed). Its inline paths, which
 * read only the local cache, do not see it. */
BRISK_INLINE void local_check(const brisk_pool_t *pool, const char *caller) {
  if (pool != NULL && BRISK_UNLIKELY(brisk_pool_destroyed(pool)))
    _brisk_pool_not_live(pool, caller);
}

void brisk_pool_local_init(brisk_pool_local_t *local, brisk_pool_t *pool, unsigned max) {
  local_check(pool, "brisk_pool_local_init");
  if (max == 0) max = LOCAL_DEFAULT_MAX;
  if (max < 2) max = 2;
  local->head = NULL;
  local->count = 0;
  /* Debug checks or a watching tool must see every object, and a NULL
   * pool has none: max 0 sends every call out of line (the inline paths
   * never succeed: the list stays empty, nothing is in range). */
  local->max = BRISK_DEBUG || brisk_tools_watch_blocks() || pool == NULL ? 0 : max;
  local->lo = pool != NULL ? (uintptr_t)pool->objects : 0;
  local->span = 0;
  local->key = pool != NULL ? pool->key : 0;
  local->key_at = pool != NULL ? pool->key_at : 0;
  local->pool = pool;
}

void brisk_pool_local_flush(brisk_pool_local_t *local) {
  if (local->head != NULL) local_check(local->pool, "brisk_pool_local_flush");
  while (local->head != NULL)
    _brisk_pool_free_as(local->pool, local_pop(local), "brisk_pool_local_flush");
}

/* Empty: one object for the caller and up to max / 2 - 1 more from the
 * pool. A refill that meets the bound keeps what it got (the pool counts
 * that one failure) and leaves errno as the caller's success found it. */
void *brisk_pool_local_alloc_slow_(brisk_pool_local_t *local) {
  brisk_pool_t *pool = local->pool;
  local_check(pool, "brisk_pool_local_alloc");
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
 * the key seen, or the cache is full: check p as brisk_pool_free would,
 * hand half of the cache back if full, keep p. */
void brisk_pool_local_free_slow_(brisk_pool_local_t *local, void *p) {
  if (p == NULL) return;
  brisk_pool_t *pool = local->pool;
  local_check(pool, "brisk_pool_local_free");
  if (local->max == 0) {
    _brisk_pool_free_as(pool, p, "brisk_pool_local_free");
    return;
  }
  size_t carved = atomic_load_explicit(&pool->carved, memory_order_relaxed);
  if (BRISK_UNLIKELY(brisk_pool_index_of(pool, p) >= carved))
    _brisk_pool_bad_free(pool, p, "brisk_pool_local_free");
  /* Free already: in this local cache, another, or the pool. */
  if (BRISK_UNLIKELY(*brisk_pool_key_word(pool, p) == pool->key))
    _brisk_pool_double_free(p, "brisk_pool_local_free");
  if (local->count >= local->max) {
    for (unsigned n = local->max / 2; n > 0; n--)
      _brisk_pool_free_as(pool, local_pop(local), "brisk_pool_local_free");
  }
  local_update_span(local);
  local_push(local, p);
}
