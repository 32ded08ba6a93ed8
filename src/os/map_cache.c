/*
 * map_cache.c — the mapping cache of os.h: mappings of destroyed region
 * allocators, kept a short while for the next allocator of the same kind
 * and size (an arena, stack, fifo, pool, buddy or hybrid created and
 * destroyed per task then takes no system call and, for what its
 * predecessor touched, no page fault). Portable: it calls the OS only
 * through os.h.
 *
 * Call tree:
 *   _brisk_os_cache_put     measure what is resident if asked (mincore);
 *                           under the lock: refuse a range that overlaps
 *                           an entry, expire, make room (oldest first),
 *                           keep it; after the lock: release what went
 *                           (munmap), or the mapping itself when it cannot
 *                           be kept
 *   _brisk_os_cache_take    under the lock: expire, take the newest entry
 *                           of the kind and size; after it: release
 *   _brisk_os_cache_expire  one relaxed load of the oldest entry's time;
 *                           past the delay: under the lock, take out what
 *                           is due, release it after
 *   _brisk_os_cache_flush   everything out (brisk_collect(true))
 *   _brisk_os_cache_stats   the counts below, without the lock (brisk_stats_get)
 *
 * Bounds: BRISK_OS_CACHE_MAX_ENTRIES mappings (max_entries), max_bytes of
 * their `resident` bytes (what put was told, or measured), delay_ms for
 * each. Time is read only by put and take, and by expire's callers.
 *
 * Threads: every field below except `oldest_ms` and `stats` is read and
 * written only with `lock_word` held. The lock is a test-and-set word
 * that is never waited for long: a call that fails to take it after a few
 * tries goes without the cache (put releases the mapping, take finds
 * nothing, expire tries next time), so no thread ever blocks on another,
 * and a fork while a thread holds it leaves a child that only loses the
 * cache. Acquire on taking the lock, release on giving it back: the
 * entries a thread wrote are seen by the next holder. oldest_ms is stored
 * under the lock and read without it (relaxed) by expire's early test;
 * a stale read only moves an expiry to the next call.
 *
 * Statistics (`stats`): relaxed atomics, so that a snapshot reads them
 * without the lock and never waits on it (a forked child may have inherited
 * it held; the report at exit must not hang). The counts of what enters and
 * leaves the cache are added under the lock, where each is decided; misses
 * that never take the lock (nothing kept, lock busy) are added without it.
 * The gauges (entries, bytes, limits) are stored under the lock at the end
 * of each section that changes them (publish_locked). Relaxed: each number
 * is a statistic on its own, nothing is published through them; a snapshot
 * may read one a moment newer than another.
 */
#include "os/os.h"

#include <brisk/stats.h>

/* _brisk_os_release_cached counts the resident pages of bigger mappings. */
#define MEASURE_ABOVE ((size_t)1 << 20)
/* Tries of the lock before going without the cache. */
#define LOCK_TRIES 64

typedef struct entry_s {
  uint8_t *p;
  size_t size;
  size_t committed;
  size_t resident;
  uint64_t since_ms;
  uint64_t seq;   /* order of the puts: the clock's milliseconds tie */
  brisk_os_cache_kind_t kind;
} entry_t;

static _Atomic bool lock_word;
static entry_t entries[BRISK_OS_CACHE_MAX_ENTRIES];
static size_t count;
static size_t resident_total;
static size_t bytes_total; /* the entries' sizes */
static size_t max_bytes = BRISK_OS_CACHE_DEFAULT_BYTES;
static size_t max_entries = BRISK_OS_CACHE_MAX_ENTRIES;
static uint64_t next_seq;
static uint64_t delay_ms = BRISK_OS_CACHE_DEFAULT_DELAY_MS;
/* The oldest entry's since_ms, UINT64_MAX when there is none. */
static _Atomic uint64_t oldest_ms = UINT64_MAX;

/* What brisk_stats_get reports of the cache (brisk_region_cache_stats_t). */
static struct {
  _Atomic uint64_t hits, hit_bytes, misses;
  _Atomic uint64_t kept, kept_bytes, declined, declined_bytes;
  _Atomic uint64_t expired, expired_bytes, evicted, evicted_bytes, flushed, flushed_bytes;
  _Atomic size_t entries, bytes, resident_bytes;
  _Atomic size_t max_bytes;
  _Atomic uint64_t delay_ms;
} stats = {.max_bytes = BRISK_OS_CACHE_DEFAULT_BYTES, .delay_ms = BRISK_OS_CACHE_DEFAULT_DELAY_MS};

/* One more in `n`, and size more in `bytes` unless it is NULL. */
static void count_one(_Atomic uint64_t *n, _Atomic uint64_t *bytes, size_t size) {
  atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
  if (bytes != NULL) atomic_fetch_add_explicit(bytes, size, memory_order_relaxed);
}

static bool try_lock(void) {
  for (int i = 0; i < LOCK_TRIES; i++) {
    if (!atomic_load_explicit(&lock_word, memory_order_relaxed) &&
        !atomic_exchange_explicit(&lock_word, true, memory_order_acquire))
      return true;
    brisk_cpu_relax();
  }
  return false;
}

static void unlock(void) { atomic_store_explicit(&lock_word, false, memory_order_release); }

/* What left the cache under the lock, released after it. */
typedef struct victims_s {
  entry_t list[BRISK_OS_CACHE_MAX_ENTRIES + 1];
  size_t n;
} victims_t;

static void release_victims(const victims_t *v, size_t *calls) {
  for (size_t i = 0; i < v->n; i++) _brisk_os_release(v->list[i].p, v->list[i].size, calls);
}

/* Why an entry leaves the cache: the counter it is added to. */
typedef enum why_e { TAKEN, EXPIRED, EVICTED, FLUSHED } why_t;

/* Under the lock. Every reason but TAKEN puts it on v, to be released. */
static void remove_at(size_t i, victims_t *v, why_t why) {
  const entry_t *e = &entries[i];
  switch (why) {
    case TAKEN: count_one(&stats.hits, &stats.hit_bytes, e->size); break;
    case EXPIRED: count_one(&stats.expired, &stats.expired_bytes, e->size); break;
    case EVICTED: count_one(&stats.evicted, &stats.evicted_bytes, e->size); break;
    case FLUSHED: count_one(&stats.flushed, &stats.flushed_bytes, e->size); break;
  }
  if (why != TAKEN) v->list[v->n++] = *e;
  resident_total -= e->resident;
  bytes_total -= e->size;
  entries[i] = entries[--count];
}

/* Under the lock, at the end of every section that changed the entries or
 * the limits: the oldest entry's time for expire's early test, and the
 * gauges for statistics. */
static void publish_locked(void) {
  uint64_t oldest = UINT64_MAX;
  for (size_t i = 0; i < count; i++)
    if (entries[i].since_ms < oldest) oldest = entries[i].since_ms;
  atomic_store_explicit(&oldest_ms, oldest, memory_order_relaxed);
  atomic_store_explicit(&stats.entries, count, memory_order_relaxed);
  atomic_store_explicit(&stats.bytes, bytes_total, memory_order_relaxed);
  atomic_store_explicit(&stats.resident_bytes, resident_total, memory_order_relaxed);
  atomic_store_explicit(&stats.max_bytes, max_bytes, memory_order_relaxed);
  atomic_store_explicit(&stats.delay_ms, delay_ms, memory_order_relaxed);
}

static size_t oldest_index(void) {
  size_t best = 0;
  for (size_t i = 1; i < count; i++)
    if (entries[i].seq < entries[best].seq) best = i;
  return best;
}

/* Under the lock: out with every entry kept since before now - delay. */
static void expire_locked(uint64_t now, victims_t *v) {
  for (size_t i = 0; i < count;) {
    /* since_ms may be a moment ahead of `now`, read by another thread. */
    if (now >= entries[i].since_ms && now - entries[i].since_ms >= delay_ms)
      remove_at(i, v, EXPIRED);
    else
      i++;
  }
}

/* Under the lock: whether [p, p + size) overlaps a kept mapping. */
static bool overlaps_locked(const uint8_t *p, size_t size) {
  for (size_t i = 0; i < count; i++)
    if ((uintptr_t)p - (uintptr_t)entries[i].p < entries[i].size ||
        (uintptr_t)entries[i].p - (uintptr_t)p < size)
      return true;
  return false;
}

bool _brisk_os_cache_put(brisk_os_cache_kind_t kind, void *p, size_t size, size_t committed,
                         size_t resident, size_t *calls) {
  if (p == NULL || size == 0) return true;
  if (resident == BRISK_OS_CACHE_MEASURE) resident = _brisk_os_resident(p, committed, calls);
  if (resident > committed) resident = committed;
  uint64_t now = _brisk_os_now_ms();
  victims_t v = {.n = 0};
  bool kept = false;
  if (try_lock()) {
    /* Memory the cache holds already, given again (a region allocator
     * destroyed twice, say): kept twice, two takers would share it;
     * released, the cache would hand out a hole. Neither: the caller
     * names the misuse. */
    if (BRISK_UNLIKELY(overlaps_locked(p, size))) {
      unlock();
      return false;
    }
    expire_locked(now, &v);
    /* A bound of 0 (bytes, entries or delay) keeps nothing, not even a
     * mapping with nothing resident. */
    if (max_entries != 0 && max_bytes != 0 && resident <= max_bytes && delay_ms != 0) {
      while (count != 0 && (count >= max_entries || resident_total + resident > max_bytes))
        remove_at(oldest_index(), &v, EVICTED);
      entries[count++] = (entry_t){p, size, committed, resident, now, next_seq++, kind};
      resident_total += resident;
      bytes_total += size;
      kept = true;
      count_one(&stats.kept, &stats.kept_bytes, size);
    }
    publish_locked();
    unlock();
  }
  release_victims(&v, calls);
  if (!kept) {
    count_one(&stats.declined, &stats.declined_bytes, size);
    _brisk_os_release(p, size, calls);
  }
  return true;
}

void *_brisk_os_reserve_cached(brisk_os_cache_kind_t kind, size_t size, size_t align,
                               bool *reused, size_t *calls) {
  size_t page = _brisk_os_page_size(), committed, resident;
  void *p = _brisk_os_cache_take(kind, size, align > page ? align : page, &committed, &resident,
                                 calls);
  *reused = p != NULL;
  return p != NULL ? p : _brisk_os_reserve(size, align, 0, calls);
}

bool _brisk_os_release_cached(brisk_os_cache_kind_t kind, void *p, size_t size, size_t *calls) {
  return _brisk_os_cache_put(kind, p, size, size,
                             size <= MEASURE_ABOVE ? size : BRISK_OS_CACHE_MEASURE, calls);
}

void *_brisk_os_cache_take(brisk_os_cache_kind_t kind, size_t size, size_t align,
                           size_t *committed, size_t *resident, size_t *calls) {
  /* Nothing kept: no lock, no clock. */
  if (atomic_load_explicit(&oldest_ms, memory_order_relaxed) == UINT64_MAX) {
    count_one(&stats.misses, NULL, 0);
    return NULL;
  }
  uint64_t now = _brisk_os_now_ms();
  victims_t v = {.n = 0};
  void *p = NULL;
  if (!try_lock()) {
    count_one(&stats.misses, NULL, 0);
    return NULL;
  }
  expire_locked(now, &v);
  size_t best = count;
  for (size_t i = 0; i < count; i++) {
    const entry_t *e = &entries[i];
    if (e->kind == kind && e->size == size && ((uintptr_t)e->p & (align - 1)) == 0 &&
        (best == count || e->seq > entries[best].seq))
      best = i; /* the newest: its pages are the likeliest to be in cache */
  }
  if (best != count) {
    p = entries[best].p;
    *committed = entries[best].committed;
    *resident = entries[best].resident;
    remove_at(best, NULL, TAKEN);
  } else {
    count_one(&stats.misses, NULL, 0);
  }
  publish_locked();
  unlock();
  release_victims(&v, calls);
  return p;
}

void _brisk_os_cache_expire(uint64_t now_ms) {
  uint64_t oldest = atomic_load_explicit(&oldest_ms, memory_order_relaxed);
  if (oldest == UINT64_MAX || now_ms < oldest || now_ms - oldest < delay_ms) return;
  victims_t v = {.n = 0};
  if (!try_lock()) return;
  expire_locked(now_ms, &v);
  publish_locked();
  unlock();
  release_victims(&v, NULL);
}

void _brisk_os_cache_flush(void) {
  if (atomic_load_explicit(&oldest_ms, memory_order_relaxed) == UINT64_MAX) return;
  victims_t v = {.n = 0};
  if (!try_lock()) return;
  while (count != 0) remove_at(count - 1, &v, FLUSHED);
  publish_locked();
  unlock();
  release_victims(&v, NULL);
}

void _brisk_os_cache_info(brisk_os_cache_info_t *out) {
  *out = (brisk_os_cache_info_t){0};
  /* Spin: a test's reading must not come back empty for a busy lock. */
  while (!try_lock()) {
  }
  out->entries = count;
  out->resident = resident_total;
  out->max_bytes = max_bytes;
  out->max_entries = max_entries;
  out->delay_ms = delay_ms;
  unlock();
  out->hits = atomic_load_explicit(&stats.hits, memory_order_relaxed);
  out->puts = atomic_load_explicit(&stats.kept, memory_order_relaxed);
  out->releases = atomic_load_explicit(&stats.expired, memory_order_relaxed) +
                  atomic_load_explicit(&stats.evicted, memory_order_relaxed) +
                  atomic_load_explicit(&stats.flushed, memory_order_relaxed);
}

void _brisk_os_cache_stats(brisk_region_cache_stats_t *out) {
#define READ(field) out->field = atomic_load_explicit(&stats.field, memory_order_relaxed)
  READ(entries);
  READ(bytes);
  READ(resident_bytes);
  READ(max_bytes);
  READ(delay_ms);
  READ(hits);
  READ(hit_bytes);
  READ(misses);
  READ(kept);
  READ(kept_bytes);
  READ(declined);
  READ(declined_bytes);
  READ(expired);
  READ(expired_bytes);
  READ(evicted);
  READ(evicted_bytes);
  READ(flushed);
  READ(flushed_bytes);
#undef READ
}

bool _brisk_os_cache_holds(const void *p) {
  while (!try_lock()) {
  }
  bool found = false;
  for (size_t i = 0; i < count && !found; i++)
    found = (uintptr_t)p - (uintptr_t)entries[i].p < entries[i].size;
  unlock();
  return found;
}

void _brisk_os_cache_configure(size_t bytes, size_t entries_max, uint64_t delay) {
  if (entries_max > BRISK_OS_CACHE_MAX_ENTRIES) entries_max = BRISK_OS_CACHE_MAX_ENTRIES;
  victims_t v = {.n = 0};
  while (!try_lock()) {
  }
  max_bytes = bytes;
  max_entries = entries_max;
  delay_ms = delay;
  while (count != 0 && (count > max_entries || resident_total > max_bytes || max_bytes == 0 ||
                        delay_ms == 0))
    remove_at(oldest_index(), &v, FLUSHED);
  publish_locked();
  unlock();
  release_victims(&v, NULL);
}
