/*
 * pool_validate.c — the fixed-size pool's validator: every free object the
 * pool holds (its shards and magazines) and, when the caller names them,
 * its local caches, checked against the pool's geometry and counters. The
 * first disagreement prints one line, "brisk: brisk_pool_validate(0x...):
 * what", at the object (or pool) concerned, and aborts.
 *
 *   _brisk_pool_validate(pool, locals, n)   (regions/pool.h)
 *     geometry   carved <= max_objects (a bounded pool's capacity); every
 *                carved object committed; committed within the objects'
 *                reservation; the mode as the flags say; magazines of 2
 *                to 32 objects
 *     shards     each list: every index + 1 in [1, carved] (an index names
 *                an object start by construction), no object twice (one
 *                mark per carved object, shared by every list below, so
 *                an object on two lists is caught too); a non-empty shard
 *                has its nonempty bit (the bitmap protocol's promise once
 *                every push has returned); no bit past the shards
 *     magazines  empty but in THREAD_CACHE mode, and the shared entry's
 *                always; otherwise at most mag_max objects, as many as
 *                mag_count says, each a carved object's start
 *     locals     each brisk_pool_local_t named: of this pool, at most max
 *                objects (none where max is 0), as many as count says,
 *                each a carved object's start; its span within carved
 *     counters   free objects (shards + magazines) + allocations - frees
 *                == carved: every carved object is free or in use, once;
 *                frees <= allocations; the local caches hold no more than
 *                the objects in use (they count as in use)
 *     live bits  (BRISK_DEBUG) clear on every free object and past carved,
 *                set on every object in a local cache; as many set as
 *                objects in use
 *
 * At a quiet point only: no thread may be inside brisk_pool_alloc or
 * brisk_pool_free of this pool meanwhile, nor use a local cache named. The
 * lists are lock-free and change under a walk, so unlike the general
 * allocator (one owner per heap) and the fifo (one thread per fifo), the
 * pool's slow paths do not call it in debug builds: no thread ever knows
 * that the others are quiet. Tests call it after joining their threads;
 * the join orders every thread's writes (plain magazine fields included)
 * before the walk.
 *
 * The marks: carved / 8 bytes mapped from the OS layer for the call and
 * released after (nothing else in regions/ may call malloc). Where the
 * mapping is refused, the walk runs without them: bounded by carved, with
 * the counts, but without the test for an object met twice.
 *
 * Reads: list heads and links by relaxed atomic loads (the quiet point
 * orders them); a free object's first 8 bytes are never poisoned (ASan) and
 * a local cache's objects are the program's, so the walk reads nothing a
 * tool forbids.
 */
#include "regions/pool_internal.h"

#include <stdio.h>

typedef struct check_s {
  const brisk_pool_t *pool;
  size_t carved;
  uint64_t *marks;     /* one bit per carved object, NULL without */
  size_t marks_bytes;
  size_t free_objects; /* on the shards and in magazines */
} check_t;

static BRISK_COLD BRISK_NORETURN void check_failed(const void *p, const char *what,
                                                   const char *where, size_t n) {
  char why[160];
  if (where != NULL) {
    snprintf(why, sizeof why, "%s (%s %zu)", what, where, n);
  } else {
    snprintf(why, sizeof why, "%s", what);
  }
  _brisk_os_fatal_pointer("brisk_pool_validate", p, why);
}

#define CHECK(condition, p, what, where, n) \
  do {                                      \
    if (BRISK_UNLIKELY(!(condition))) check_failed((p), (what), (where), (n)); \
  } while (0)

/* Object `index` found free or cached: marked once; debug builds' live bit
 * (set while handed out) clear on a free one, set on one in a local cache. */
static void mark(check_t *c, size_t index, bool free_object, const char *where, size_t n) {
  const brisk_pool_t *pool = c->pool;
  const void *p = brisk_pool_object_at(pool, (uint32_t)(index + 1));
  if (c->marks != NULL) {
    uint64_t bit = (uint64_t)1 << (index % 64);
    CHECK((c->marks[index / 64] & bit) == 0, p, "an object is free twice (double free?)", where, n);
    c->marks[index / 64] |= bit;
  }
#if BRISK_DEBUG
  uint64_t word = atomic_load_explicit(&pool->live[index / 64], memory_order_relaxed);
  bool live = (word >> (index % 64) & 1) != 0;
  CHECK(!(free_object && live), p, "a free object is marked live", where, n);
  CHECK(free_object || live, p, "an object in a local cache is not marked live", where, n);
#endif
  (void)free_object;
}

/* Shard s's list: indexes + 1 chained through the objects' first 4 bytes. */
static void check_shard(check_t *c, uint32_t s) {
  const brisk_pool_t *pool = c->pool;
  uint32_t index1 = (uint32_t)atomic_load_explicit(&pool->shards[s].head, memory_order_relaxed);
  const void *from = pool;
  size_t length = 0;
  while (index1 != 0) {
    CHECK(index1 <= c->carved, from, "a free list leads past the carved objects", "shard", s);
    mark(c, index1 - 1, true, "shard", s);
    CHECK(++length <= c->carved, from, "a free list is longer than the objects carved", "shard", s);
    const uint8_t *object = brisk_pool_object_at(pool, index1);
    from = object;
    index1 = brisk_pool_link_load(object);
  }
  c->free_objects += length;
  uint64_t nonempty = atomic_load_explicit(&pool->nonempty, memory_order_relaxed);
  CHECK(length == 0 || (nonempty >> s & 1) != 0, pool,
        "a shard holds objects and its nonempty bit is clear", "shard", s);
}

/* A chain of objects linked by pointer through their first 8 bytes (a
 * magazine, a local cache), `count` long by its owner's count and at most
 * `max`; free_objects: a magazine's (a local cache's are in use). */
static void check_chain(check_t *c, const uint8_t *head, size_t count, size_t max,
                        bool free_objects, const char *where, size_t n) {
  const brisk_pool_t *pool = c->pool;
  CHECK(count <= max, pool, "a cache holds more objects than its limit", where, n);
  size_t length = 0;
  for (const uint8_t *p = head; p != NULL; p = brisk_pool_mag_link_load(p)) {
    size_t index = brisk_pool_index_of(pool, p);
    CHECK(index < c->carved, p, "a cache holds a pointer that is no object (interior or foreign?)",
          where, n);
    mark(c, index, free_objects, where, n);
    CHECK(++length <= count, p, "a cache holds more objects than its count", where, n);
  }
  CHECK(length == count, pool, "a cache holds fewer objects than its count", where, n);
  if (free_objects) c->free_objects += length;
}

static void check_local(check_t *c, const brisk_pool_local_t *local, size_t i) {
  const brisk_pool_t *pool = c->pool;
  CHECK(local->pool == pool, local, "a local cache of another pool", "local cache", i);
  CHECK(local->lo == (uintptr_t)pool->objects && local->span <= c->carved * pool->stride, local,
        "a local cache's range is not the pool's carved objects", "local cache", i);
  check_chain(c, local->head, local->count, local->max, false, "local cache", i);
}

/* Debug builds: the live bits against the objects in use. */
static void check_live_bits(const check_t *c, size_t in_use) {
#if BRISK_DEBUG
  const brisk_pool_t *pool = c->pool;
  size_t live = 0, words = c->carved / 64;
  for (size_t w = 0; w < words; w++)
    live += (size_t)__builtin_popcountll(atomic_load_explicit(&pool->live[w], memory_order_relaxed));
  if (c->carved % 64 != 0) {
    uint64_t word = atomic_load_explicit(&pool->live[words], memory_order_relaxed);
    uint64_t carved_bits = ((uint64_t)1 << (c->carved % 64)) - 1;
    CHECK((word & ~carved_bits) == 0, pool, "an object never carved is marked live", NULL, 0);
    live += (size_t)__builtin_popcountll(word);
  }
  CHECK(live == in_use, pool, "the live bits disagree with the objects in use", NULL, 0);
#else
  (void)c;
  (void)in_use;
#endif
}

void _brisk_pool_validate(const brisk_pool_t *pool, const brisk_pool_local_t *const *locals,
                          size_t local_count) {
  check_t c = {.pool = pool, .carved = atomic_load_explicit(&pool->carved, memory_order_relaxed)};
  size_t committed = atomic_load_explicit(&pool->committed, memory_order_relaxed);
  CHECK(c.carved <= pool->max_objects, pool, "more objects carved than the pool holds", NULL, 0);
  CHECK(c.carved * pool->stride <= committed, pool, "objects carved past the committed ones",
        NULL, 0);
  CHECK(committed <= brisk_align_up(pool->max_objects * pool->stride, pool->page), pool,
        "objects committed past the reservation", NULL, 0);
  bool cached = pool->mode == BRISK_POOL_CACHED;
  CHECK(cached == ((pool->flags & BRISK_REGION_THREAD_CACHE) != 0) &&
            (cached || pool->mode == BRISK_POOL_SHARDED),
        pool, "the pool's mode disagrees with its flags", NULL, 0);
  CHECK(pool->mag_max >= 2 && pool->mag_max <= 32, pool, "the magazine size is out of range",
        NULL, 0);
  if (c.carved != 0) {
    c.marks_bytes = brisk_align_up((c.carved + 63) / 64 * 8, _brisk_os_page_size());
    c.marks = _brisk_os_reserve(c.marks_bytes, _brisk_os_page_size(), 0, NULL);
  }

  uint64_t nonempty = atomic_load_explicit(&pool->nonempty, memory_order_relaxed);
  CHECK((nonempty >> (BRISK_POOL_SHARDS - 1) >> 1) == 0, pool, "nonempty bits past the shards",
        NULL, 0);
  for (uint32_t s = 0; s < BRISK_POOL_SHARDS; s++) check_shard(&c, s);
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    const brisk_pool_slot_t *entry = &pool->slots[i];
    /* The shared entry (threads without a slot) never caches. */
    size_t max = cached && i != BRISK_NO_THREAD_SLOT ? pool->mag_max : 0;
    check_chain(&c, entry->mag_head, entry->mag_count, max, true, "magazine of slot", i);
  }
  for (size_t i = 0; i < local_count; i++) check_local(&c, locals[i], i);

  size_t allocations = 0, frees = 0;
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    allocations += atomic_load_explicit(&pool->slots[i].allocs, memory_order_relaxed);
    frees += atomic_load_explicit(&pool->slots[i].frees, memory_order_relaxed);
  }
  CHECK(frees <= allocations, pool, "more frees than allocations (double free?)", NULL, 0);
  size_t in_use = allocations - frees;
  CHECK(c.free_objects + in_use == c.carved, pool,
        "free and in-use objects do not add up to the carved ones (objects lost?)", NULL, 0);
  size_t held_locally = 0;
  for (size_t i = 0; i < local_count; i++) held_locally += locals[i]->count;
  CHECK(held_locally <= in_use, pool, "local caches hold more objects than are in use", NULL, 0);
  check_live_bits(&c, in_use);
  if (c.marks != NULL) _brisk_os_release(c.marks, c.marks_bytes, NULL);
}
