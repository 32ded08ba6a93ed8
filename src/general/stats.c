/*
 * stats.c — statistics of the general allocator, the OS layer (its calls
 * and its mapping cache) and the region allocators: the snapshot
 * (brisk_stats_get), its table and JSON forms, the reset, the interval
 * writer (BRISK_STATS_FILE) and the report at exit (BRISK_STATS).
 *
 * Where the counts come from:
 *   - malloc's fast path adds one to its heap's count for the direct-table
 *     entry it used, and the size to the heap's requested bytes (owner-only
 *     plain fields: the two instructions statistics cost the fast paths;
 *     free's fast path counts nothing); malloc's slow paths count
 *     allocations per class. The owner folds these plain counts into its
 *     heap's `stats` now and then (_brisk_heap_fold_counts);
 *   - blocks live now are the pages' `used`, which malloc and free keep
 *     anyway; frees are allocations minus live blocks;
 *   - segments, pages, huge blocks and heaps are counted process-wide on the
 *     slow paths that make and drop them (_brisk_global_stats).
 * A snapshot reads every heap (heaps are never freed) as it is now, running,
 * sleeping or abandoned: its folded and unfolded counts (a sequence count
 * keeps a fold from being counted twice or not at all) and the `used` of
 * every page of its segments (under the heap's memory lock). The owner's
 * plain fields are read while the owner may change them: the snapshot is a
 * few operations old per heap, never a fold behind.
 *
 * The peak of bytes in use is kept process-wide: a page tells its heap how
 * many blocks it holds on its slow-path events (_brisk_page_fold_stats), and
 * each heap publishes its change in steps of BRISK_STATS_PUBLISH_BYTES.
 */
#define _GNU_SOURCE
#include <brisk/stats.h>
#include "general/internal.h"
#include "general/options.h"
#include "general/size_class.h"
#include "os/os.h"
#include "regions/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Static_assert(BRISK_STATS_CLASSES >= BRISK_CLASS_COUNT, "brisk/stats.h has room for every class");

_Atomic(int64_t) _brisk_global_stats[BRISK_STAT_COUNT];
_Atomic(int64_t) _brisk_class_pages[BRISK_CLASS_COUNT];

/* Live bytes a heap keeps to itself before adding them to the process total:
 * the total (and its peak) is then right to within this much per heap, and
 * the shared counter is touched once per this many bytes of change. */
#define BRISK_STATS_PUBLISH_BYTES ((int64_t)256 * 1024)

static uint64_t start_ms;

/* ---- folding ---- */

void _brisk_page_fold_stats(brisk_heap_t *heap, brisk_page_t *page) {
  uint32_t live = _brisk_page_live_blocks(heap, page);
  int64_t live_change = (int64_t)live - (int64_t)page->live_at_fold;
  if (live_change == 0) return;
  page->live_at_fold = (uint16_t)live; /* a page holds at most 65535 blocks */
  _brisk_heap_stats_in_use(heap, live_change * (int64_t)brisk_page_block_size(page));
}

static int64_t global_stat(brisk_global_stat_t which) {
  return atomic_load_explicit(&_brisk_global_stats[which], memory_order_relaxed);
}

/* The peak of bytes in use, blocks of a size class (as published) and huge
 * blocks together: raised by whichever of the two grows, so that it keeps
 * the huge bytes of its moment after they are freed. */
static void raise_peak(int64_t total) {
  int64_t peak = global_stat(BRISK_STAT_IN_USE_PEAK);
  while (total > peak && !atomic_compare_exchange_weak_explicit(
                             &_brisk_global_stats[BRISK_STAT_IN_USE_PEAK], &peak, total,
                             memory_order_relaxed, memory_order_relaxed)) {
  }
}

void _brisk_heap_stats_in_use(brisk_heap_t *heap, int64_t bytes) {
  heap->in_use_unpublished += bytes;
  if (heap->in_use_unpublished < BRISK_STATS_PUBLISH_BYTES &&
      heap->in_use_unpublished > -BRISK_STATS_PUBLISH_BYTES) {
    return;
  }
  int64_t change = heap->in_use_unpublished;
  heap->in_use_unpublished = 0;
  int64_t total = atomic_fetch_add_explicit(&_brisk_global_stats[BRISK_STAT_IN_USE_BYTES], change,
                                            memory_order_relaxed) + change;
  if (change > 0) raise_peak(total + global_stat(BRISK_STAT_HUGE_BYTES));
}

void _brisk_stats_huge_in_use(int64_t blocks, int64_t bytes) {
  brisk_global_stat_add(BRISK_STAT_HUGE_BLOCKS, blocks);
  int64_t huge = atomic_fetch_add_explicit(&_brisk_global_stats[BRISK_STAT_HUGE_BYTES], bytes,
                                           memory_order_relaxed) + bytes;
  if (bytes > 0) raise_peak(huge + global_stat(BRISK_STAT_IN_USE_BYTES));
}

static void fold_queue(brisk_heap_t *heap, brisk_page_t *page) {
  for (; page != NULL; page = page->next) _brisk_page_fold_stats(heap, page);
}

/* Add an owner's plain count (`count`, read from `owner_word`) into its
 * `stats` counter and set `owner_word` back to `restart`; a snapshot reads
 * both (heap_allocations). */
#define FOLD_COUNT(counter, count, owner_word, restart)                        \
  do {                                                                         \
    uint64_t unfolded_count_ = (count);                                        \
    if (unfolded_count_ != 0) {                                                \
      /* release: after the odd sequence count (_brisk_heap_fold_counts). */   \
      atomic_store_explicit((counter), atomic_load_explicit((counter), memory_order_relaxed) + \
                            unfolded_count_, memory_order_release);           \
      __atomic_store_n(&(owner_word), (restart), __ATOMIC_RELEASE);            \
    }                                                                          \
  } while (0)
/* A count kept up from 0. */
#define FOLD_INTO(counter, unfolded) FOLD_COUNT(counter, unfolded, unfolded, 0)

/* The class whose blocks serve every size that reads this word of the direct
 * table (class sizes are multiples of 8). */
static size_t direct_word_class(size_t word) {
  return brisk_size_to_class(word == 0 ? 1 : word * 8);
}

/* The owner's plain counts into `stats`, between an odd and an even
 * sequence count. Every store in between is a release store, so a reader
 * that sees any of them sees the odd count too (a fence would do the same,
 * but ThreadSanitizer does not model fences); the even count is stored with
 * release after them all. */
void _brisk_heap_fold_counts(brisk_heap_t *heap) {
  uint32_t sequence = atomic_load_explicit(&heap->stats.fold_sequence, memory_order_relaxed);
  atomic_store_explicit(&heap->stats.fold_sequence, sequence + 1, memory_order_relaxed);
  for (size_t word = 0; word < BRISK_DIRECT_COUNT; word++) {
    /* A count down: the blocks handed out are what it has come down by. */
    FOLD_COUNT(&heap->stats.allocations[direct_word_class(word)],
               BRISK_ALLOCATIONS_PER_FOLD - heap->small_allocations_left[word],
               heap->small_allocations_left[word], BRISK_ALLOCATIONS_PER_FOLD);
  }
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    FOLD_INTO(&heap->stats.allocations[class_index], heap->class_allocations_unfolded[class_index]);
  }
  FOLD_INTO(&heap->stats.slow_mallocs, heap->slow_mallocs_unfolded);
  FOLD_INTO(&heap->stats.slow_frees, heap->slow_frees_unfolded);
  FOLD_INTO(&heap->stats.bytes_requested, heap->bytes_requested_unfolded);
  atomic_store_explicit(&heap->stats.fold_sequence, sequence + 2, memory_order_release);
}

#undef FOLD_INTO
#undef FOLD_COUNT

void _brisk_heap_fold_stats(brisk_heap_t *heap) {
  if (heap->is_empty_heap) return;
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    fold_queue(heap, heap->queues[class_index].head);
  }
  fold_queue(heap, heap->full_pages.head);
  _brisk_heap_fold_counts(heap);
}

/* ---- the snapshot ---- */

/* brisk_stats_reset's baseline: counts read from here on are the raw ones
 * minus these. Gauges have none. */
static pthread_mutex_t baseline_lock = PTHREAD_MUTEX_INITIALIZER;
static brisk_stats_t baseline;
static bool have_baseline;

/* A heap's counts as `stats` plus the owner's plain counts not folded in
 * yet. The owner may be folding or counting while we read (the plain fields
 * are read without atomics, hence no ThreadSanitizer here): the sequence
 * count says when a fold ran meanwhile, and the read is taken again. After
 * many tries (an owner preempted in the middle of a fold) the last read
 * stands; it is off by that one fold at most. */
static BRISK_NOINLINE BRISK_NO_TSAN void heap_allocations(const brisk_heap_t *heap,
                                                         brisk_stats_t *out) {
  uint64_t allocations[BRISK_CLASS_COUNT];
  uint64_t bytes_requested, slow_mallocs, slow_frees;
  for (int attempt = 0; attempt < 1000; attempt++) {
    /* acquire: pairs with the fold's release stores, below and there. */
    uint32_t before = atomic_load_explicit(&heap->stats.fold_sequence, memory_order_acquire);
    for (size_t c = 0; c < BRISK_CLASS_COUNT; c++) {
      allocations[c] = atomic_load_explicit(&heap->stats.allocations[c], memory_order_acquire) +
                       __atomic_load_n(&heap->class_allocations_unfolded[c], __ATOMIC_ACQUIRE);
    }
    for (size_t word = 0; word < BRISK_DIRECT_COUNT; word++) {
      allocations[direct_word_class(word)] +=
          BRISK_ALLOCATIONS_PER_FOLD -
          __atomic_load_n(&heap->small_allocations_left[word], __ATOMIC_ACQUIRE);
    }
    bytes_requested = atomic_load_explicit(&heap->stats.bytes_requested, memory_order_acquire) +
                      __atomic_load_n(&heap->bytes_requested_unfolded, __ATOMIC_ACQUIRE);
    slow_mallocs = atomic_load_explicit(&heap->stats.slow_mallocs, memory_order_acquire) +
                   __atomic_load_n(&heap->slow_mallocs_unfolded, __ATOMIC_ACQUIRE);
    slow_frees = atomic_load_explicit(&heap->stats.slow_frees, memory_order_acquire) +
                 __atomic_load_n(&heap->slow_frees_unfolded, __ATOMIC_ACQUIRE);
    /* The acquire loads above keep this load after them. */
    if ((before & 1) == 0 &&
        atomic_load_explicit(&heap->stats.fold_sequence, memory_order_relaxed) == before) {
      break;
    }
    sched_yield();
  }
  for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) out->classes[c].allocations += allocations[c];
  out->general.bytes_requested += bytes_requested;
  out->general.slow_mallocs += slow_mallocs;
  out->general.slow_frees += slow_frees;
}

static void add_heap(brisk_heap_t *heap, void *context) {
  if (heap->is_empty_heap) return;
  brisk_stats_t *out = context;
  heap_allocations(heap, out);
  uint64_t live[BRISK_CLASS_COUNT] = {0};
  /* A heap whose memory lock is held by a stopped thread is counted
   * without its live blocks (its frees then read too high) rather than
   * hang the snapshot. */
  _brisk_heap_count_live_blocks(heap, live);
  for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) {
    /* frees holds live blocks until the sum is complete (raw_snapshot). */
    out->classes[c].frees += live[c];
    out->classes[c].remote_frees += atomic_load_explicit(&heap->stats.remote_frees[c], memory_order_relaxed);
  }
}

static size_t gauge(brisk_global_stat_t which) {
  int64_t value = global_stat(which);
  return value > 0 ? (size_t)value : 0; /* counts race with each other by a little */
}

static void os_stats(brisk_os_stats_t *out) {
  brisk_os_counts_t counts;
  _brisk_os_counts(&counts);
  out->map_calls = counts.calls[BRISK_OS_MAP];
  out->map_bytes = counts.bytes[BRISK_OS_MAP];
  out->unmap_calls = counts.calls[BRISK_OS_UNMAP];
  out->unmap_bytes = counts.bytes[BRISK_OS_UNMAP];
  out->commit_calls = counts.calls[BRISK_OS_COMMIT];
  out->commit_bytes = counts.bytes[BRISK_OS_COMMIT];
  out->decommit_calls = counts.calls[BRISK_OS_DECOMMIT];
  out->decommit_bytes = counts.bytes[BRISK_OS_DECOMMIT];
  out->remap_calls = counts.calls[BRISK_OS_REMAP];
  out->remap_bytes = counts.bytes[BRISK_OS_REMAP];
  out->other_calls = counts.calls[BRISK_OS_OTHER];
  out->other_bytes = counts.bytes[BRISK_OS_OTHER];
  out->failed_calls = counts.failed_calls;
  out->bytes_mapped = counts.bytes_mapped;
}

static void raw_snapshot(brisk_stats_t *out) {
  memset(out, 0, sizeof *out);
  out->version = BRISK_STATS_VERSION;
  out->size = sizeof *out;
  out->time_ms = _brisk_os_now_ms() - start_ms;
  _brisk_heaps_for_each(add_heap, out);

  brisk_general_stats_t *general = &out->general;
  for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) {
    brisk_class_stats_t *cls = &out->classes[c];
    cls->block_size = brisk_class_to_size(c);
    /* A running thread's count and its pages are read a few operations
     * apart, so its live blocks can run ahead of its allocations by those. */
    uint64_t live = cls->frees;
    if (live > cls->allocations) live = cls->allocations;
    cls->blocks_in_use = (size_t)live;
    cls->frees = cls->allocations - live;
    int64_t pages = atomic_load_explicit(&_brisk_class_pages[c], memory_order_relaxed);
    cls->pages = pages > 0 ? (size_t)pages : 0;
    general->allocations += cls->allocations;
    general->frees += cls->frees;
    general->remote_frees += cls->remote_frees;
    general->bytes_in_use += cls->blocks_in_use * cls->block_size;
  }
  general->huge_blocks = gauge(BRISK_STAT_HUGE_BLOCKS);
  general->huge_bytes = gauge(BRISK_STAT_HUGE_BYTES);
  general->huge_allocations = (uint64_t)global_stat(BRISK_STAT_HUGE_ALLOCATIONS);
  general->allocations += general->huge_allocations;
  general->frees += (uint64_t)global_stat(BRISK_STAT_HUGE_FREES);
  general->bytes_in_use += general->huge_bytes;
  general->huge_cached_bytes = gauge(BRISK_STAT_HUGE_CACHED_BYTES);
  general->pages_in_use = gauge(BRISK_STAT_PAGES_IN_USE);
  general->pages_committed = gauge(BRISK_STAT_FREE_PAGES_COMMITTED);
  general->segments = gauge(BRISK_STAT_SEGMENTS);
  general->bytes_reserved = gauge(BRISK_STAT_SEGMENT_BYTES) + general->huge_bytes +
                            general->huge_cached_bytes;
  /* Each segment's header page (page 0) is held as long as the segment. */
  general->bytes_held = gauge(BRISK_STAT_PAGE_BYTES_IN_USE) +
                        gauge(BRISK_STAT_FREE_PAGE_BYTES_COMMITTED) +
                        general->segments * ((size_t)1 << BRISK_SMALL_PAGE_SHIFT) +
                        general->huge_bytes + general->huge_cached_bytes;
  general->bytes_purged = (uint64_t)global_stat(BRISK_STAT_BYTES_PURGED);
  out->purge.delay_ms = _brisk_options.purge_delay_ms;
  out->purge.max_delay_ms = _brisk_options.purge_delay_max_ms;
  out->purge.bytes_refaulted = (uint64_t)global_stat(BRISK_STAT_BYTES_REFAULTED);
  out->purge.bytes_reused_late = (uint64_t)global_stat(BRISK_STAT_BYTES_REUSED_LATE);
  /* The published total lags each heap by up to BRISK_STATS_PUBLISH_BYTES;
   * the peak is at least what this snapshot counted, and stays so for the
   * snapshots after it. */
  raise_peak((int64_t)general->bytes_in_use);
  size_t peak = gauge(BRISK_STAT_IN_USE_PEAK);
  general->bytes_in_use_peak = peak > general->bytes_in_use ? peak : general->bytes_in_use;
  general->heaps_created = (uint64_t)global_stat(BRISK_STAT_HEAPS_CREATED);
  general->heaps_abandoned = (uint64_t)global_stat(BRISK_STAT_HEAPS_ABANDONED);
  general->heaps_adopted = (uint64_t)global_stat(BRISK_STAT_HEAPS_ADOPTED);
  int64_t live = (int64_t)(general->heaps_created + general->heaps_adopted - general->heaps_abandoned);
  general->heaps_live = live > 0 ? (size_t)live : 0;

  os_stats(&out->os);
  _brisk_regions_stats(out->regions);
  _brisk_os_cache_stats(&out->region_cache);
}

/* A count since the reset; 0 where it reads below the baseline. Frees are
 * allocations less the blocks live, which a snapshot reads a few operations
 * after a running thread's allocations: the mallocs in between count as
 * live and not yet as allocated, so a snapshot may find a few frees fewer
 * than the baseline did, and the difference must not wrap around. (A count
 * read after an owner stalled in a fold may be one fold low too:
 * heap_allocations.) */
#define SUBTRACT(field) \
  out->field = out->field > baseline.field ? out->field - baseline.field : 0

static void subtract_baseline(brisk_stats_t *out) {
  for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) {
    SUBTRACT(classes[c].allocations);
    SUBTRACT(classes[c].frees);
    SUBTRACT(classes[c].remote_frees);
  }
  SUBTRACT(general.allocations);
  SUBTRACT(general.frees);
  SUBTRACT(general.remote_frees);
  SUBTRACT(general.bytes_requested);
  SUBTRACT(general.huge_allocations);
  SUBTRACT(general.bytes_purged);
  SUBTRACT(general.slow_mallocs);
  SUBTRACT(general.slow_frees);
  SUBTRACT(general.heaps_created);
  SUBTRACT(general.heaps_abandoned);
  SUBTRACT(general.heaps_adopted);
  SUBTRACT(os.map_calls);
  SUBTRACT(os.map_bytes);
  SUBTRACT(os.unmap_calls);
  SUBTRACT(os.unmap_bytes);
  SUBTRACT(os.commit_calls);
  SUBTRACT(os.commit_bytes);
  SUBTRACT(os.decommit_calls);
  SUBTRACT(os.decommit_bytes);
  SUBTRACT(os.remap_calls);
  SUBTRACT(os.remap_bytes);
  SUBTRACT(os.other_calls);
  SUBTRACT(os.other_bytes);
  SUBTRACT(os.failed_calls);
  for (size_t k = 0; k < BRISK_REGION_KINDS; k++) {
    /* Only `created`: the totals are of the allocators live now, so one
     * destroyed since the reset would take more away than it adds. */
    SUBTRACT(regions[k].created);
  }
  SUBTRACT(region_cache.hits);
  SUBTRACT(region_cache.hit_bytes);
  SUBTRACT(region_cache.misses);
  SUBTRACT(region_cache.kept);
  SUBTRACT(region_cache.kept_bytes);
  SUBTRACT(region_cache.declined);
  SUBTRACT(region_cache.declined_bytes);
  SUBTRACT(region_cache.expired);
  SUBTRACT(region_cache.expired_bytes);
  SUBTRACT(region_cache.evicted);
  SUBTRACT(region_cache.evicted_bytes);
  SUBTRACT(region_cache.flushed);
  SUBTRACT(region_cache.flushed_bytes);
  SUBTRACT(purge.bytes_refaulted);
  SUBTRACT(purge.bytes_reused_late);
}

#undef SUBTRACT

static void snapshot(brisk_stats_t *out) {
  raw_snapshot(out);
  pthread_mutex_lock(&baseline_lock);
  if (have_baseline) subtract_baseline(out); /* the peak restarted at the reset itself */
  pthread_mutex_unlock(&baseline_lock);
}

int brisk_stats_get(brisk_stats_t *out) {
  if (out == NULL || out->size < offsetof(brisk_stats_t, time_ms)) {
    errno = EINVAL;
    return -1;
  }
  uint32_t caller_size = out->size;
  if (caller_size >= sizeof(brisk_stats_t)) {
    snapshot(out);
    return 0;
  }
  brisk_stats_t whole;
  snapshot(&whole);
  memcpy(out, &whole, caller_size);
  out->size = caller_size;
  return 0;
}

void brisk_stats_reset(void) {
  brisk_stats_t now;
  raw_snapshot(&now);
  pthread_mutex_lock(&baseline_lock);
  baseline = now;
  have_baseline = true;
  pthread_mutex_unlock(&baseline_lock);
  /* The peak starts again from what is in use now. */
  atomic_store_explicit(&_brisk_global_stats[BRISK_STAT_IN_USE_PEAK],
                        global_stat(BRISK_STAT_IN_USE_BYTES) + global_stat(BRISK_STAT_HUGE_BYTES),
                        memory_order_relaxed);
}

/* ---- text forms, written into a caller's buffer (nothing allocated) ---- */

typedef struct text_s {
  char *buffer;
  size_t capacity;
  size_t length;
} text_t;

static void __attribute__((format(printf, 2, 3))) text_add(text_t *text, const char *format, ...) {
  if (text->length >= text->capacity) return;
  va_list args;
  va_start(args, format);
  int n = vsnprintf(text->buffer + text->length, text->capacity - text->length, format, args);
  va_end(args);
  if (n > 0) text->length += (size_t)n;
  if (text->length > text->capacity) text->length = text->capacity;
}

static const char *const region_names[BRISK_REGION_KINDS] = {"arena", "stack", "fifo",
                                                             "pool",  "buddy", "hybrid"};

static void format_json(text_t *t, const brisk_stats_t *s, bool with_classes) {
  const brisk_general_stats_t *g = &s->general;
  text_add(t, "{\"version\":%u,\"time_ms\":%" PRIu64 ",\"pid\":%d,", s->version, s->time_ms,
           (int)getpid());
  text_add(t,
           "\"general\":{\"bytes_in_use\":%zu,\"bytes_in_use_peak\":%zu,\"bytes_held\":%zu,"
           "\"bytes_reserved\":%zu,\"allocations\":%" PRIu64 ",\"frees\":%" PRIu64
           ",\"remote_frees\":%" PRIu64 ",\"bytes_requested\":%" PRIu64
           ",\"huge_blocks\":%zu,\"huge_bytes\":%zu,\"huge_allocations\":%" PRIu64
           ",\"huge_cached_bytes\":%zu,\"pages_held\":%zu,\"pages_committed\":%zu,"
           "\"segments_held\":%zu,\"bytes_purged\":%" PRIu64 ",\"slow_mallocs\":%" PRIu64
           ",\"slow_frees\":%" PRIu64 ",\"heaps_created\":%" PRIu64 ",\"heaps_abandoned\":%" PRIu64
           ",\"heaps_adopted\":%" PRIu64 ",\"heaps_live\":%zu}",
           g->bytes_in_use, g->bytes_in_use_peak, g->bytes_held, g->bytes_reserved, g->allocations,
           g->frees, g->remote_frees, g->bytes_requested, g->huge_blocks, g->huge_bytes,
           g->huge_allocations, g->huge_cached_bytes, g->pages_in_use, g->pages_committed,
           g->segments, g->bytes_purged, g->slow_mallocs, g->slow_frees, g->heaps_created,
           g->heaps_abandoned, g->heaps_adopted, g->heaps_live);
  const brisk_os_stats_t *o = &s->os;
  text_add(t,
           ",\"os\":{\"map_calls\":%" PRIu64 ",\"map_bytes\":%" PRIu64 ",\"unmap_calls\":%" PRIu64
           ",\"unmap_bytes\":%" PRIu64 ",\"commit_calls\":%" PRIu64 ",\"commit_bytes\":%" PRIu64
           ",\"decommit_calls\":%" PRIu64 ",\"decommit_bytes\":%" PRIu64 ",\"remap_calls\":%" PRIu64
           ",\"remap_bytes\":%" PRIu64 ",\"other_calls\":%" PRIu64 ",\"other_bytes\":%" PRIu64
           ",\"failed_calls\":%" PRIu64 ",\"bytes_mapped\":%zu}",
           o->map_calls, o->map_bytes, o->unmap_calls, o->unmap_bytes, o->commit_calls,
           o->commit_bytes, o->decommit_calls, o->decommit_bytes, o->remap_calls, o->remap_bytes,
           o->other_calls, o->other_bytes, o->failed_calls, o->bytes_mapped);
  text_add(t, ",\"regions\":{");
  bool first = true;
  for (size_t k = 0; k < BRISK_REGION_KINDS; k++) {
    const brisk_region_kind_stats_t *r = &s->regions[k];
    if (r->created == 0 && r->live == 0) continue;
    text_add(t,
             "%s\"%s\":{\"live\":%zu,\"created\":%" PRIu64 ",\"bytes_in_use\":%zu,"
             "\"bytes_held\":%zu,\"bytes_requested\":%zu,\"allocations\":%zu,"
             "\"system_requests\":%zu}",
             first ? "" : ",", region_names[k], r->live, r->created, r->totals.bytes_in_use,
             r->totals.bytes_held, r->totals.bytes_requested, r->totals.allocations,
             r->totals.system_requests);
    first = false;
  }
  text_add(t, "}");
  const brisk_region_cache_stats_t *m = &s->region_cache;
  text_add(t,
           ",\"region_cache\":{\"entries\":%zu,\"bytes\":%zu,\"resident_bytes\":%zu,"
           "\"max_bytes\":%zu,\"delay_ms\":%" PRIu64 ",\"hits\":%" PRIu64 ",\"hit_bytes\":%" PRIu64
           ",\"misses\":%" PRIu64 ",\"kept\":%" PRIu64 ",\"kept_bytes\":%" PRIu64
           ",\"declined\":%" PRIu64 ",\"declined_bytes\":%" PRIu64 ",\"expired\":%" PRIu64
           ",\"expired_bytes\":%" PRIu64 ",\"evicted\":%" PRIu64 ",\"evicted_bytes\":%" PRIu64
           ",\"flushed\":%" PRIu64 ",\"flushed_bytes\":%" PRIu64 "}",
           m->entries, m->bytes, m->resident_bytes, m->max_bytes, m->delay_ms, m->hits,
           m->hit_bytes, m->misses, m->kept, m->kept_bytes, m->declined, m->declined_bytes,
           m->expired, m->expired_bytes, m->evicted, m->evicted_bytes, m->flushed,
           m->flushed_bytes);
  const brisk_purge_stats_t *u = &s->purge;
  text_add(t,
           ",\"purge\":{\"delay_ms\":%" PRIu64 ",\"max_delay_ms\":%" PRIu64
           ",\"bytes_refaulted\":%" PRIu64 ",\"bytes_reused_late\":%" PRIu64 "}",
           u->delay_ms, u->max_delay_ms, u->bytes_refaulted, u->bytes_reused_late);
  if (with_classes) {
    text_add(t, ",\"classes\":[");
    first = true;
    for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) {
      const brisk_class_stats_t *cls = &s->classes[c];
      if (cls->allocations == 0 && cls->pages == 0) continue;
      text_add(t,
               "%s{\"block_size\":%zu,\"allocations\":%" PRIu64 ",\"frees\":%" PRIu64
               ",\"remote_frees\":%" PRIu64 ",\"blocks_in_use\":%zu,\"pages\":%zu}",
               first ? "" : ",", cls->block_size, cls->allocations, cls->frees, cls->remote_frees,
               cls->blocks_in_use, cls->pages);
      first = false;
    }
    text_add(t, "]");
  }
  text_add(t, "}\n");
}

/* "12.3 MiB" and the like, into buffer. */
static const char *bytes_text(char *buffer, size_t size, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < sizeof units / sizeof units[0]) {
    value /= 1024;
    unit++;
  }
  if (unit == 0) snprintf(buffer, size, "%" PRIu64 " B", bytes);
  else snprintf(buffer, size, "%.1f %s", value, units[unit]);
  return buffer;
}

static void format_table(text_t *t, const brisk_stats_t *s) {
  const brisk_general_stats_t *g = &s->general;
  char a[32], b[32], c[32], d[32];
  text_add(t, "brisk statistics at %.3f s (pid %d)\n", (double)s->time_ms / 1000, (int)getpid());
  text_add(t, "general heap\n");
  text_add(t, "  in use     %12s   peak %s   requested (ever) %s\n",
           bytes_text(a, sizeof a, g->bytes_in_use), bytes_text(b, sizeof b, g->bytes_in_use_peak),
           bytes_text(c, sizeof c, g->bytes_requested));
  text_add(t, "  held       %12s   reserved %s   purged (ever) %s\n",
           bytes_text(a, sizeof a, g->bytes_held), bytes_text(b, sizeof b, g->bytes_reserved),
           bytes_text(c, sizeof c, g->bytes_purged));
  text_add(t, "  calls      %12" PRIu64 " allocations, %" PRIu64 " frees (%" PRIu64
           " remote); slow paths: %" PRIu64 " mallocs, %" PRIu64 " frees\n",
           g->allocations, g->frees, g->remote_frees, g->slow_mallocs, g->slow_frees);
  text_add(t, "  pages      %12zu in use, %zu free and backed; %zu segments\n", g->pages_in_use,
           g->pages_committed, g->segments);
  text_add(t, "  purging    %9" PRIu64 " ms delay, kept pages up to %" PRIu64
           " ms: faulted in again soon after a purge %s, reused past the delay %s\n",
           s->purge.delay_ms, s->purge.max_delay_ms,
           bytes_text(a, sizeof a, s->purge.bytes_refaulted),
           bytes_text(b, sizeof b, s->purge.bytes_reused_late));
  text_add(t, "  huge       %12zu blocks (%s), %" PRIu64 " allocated (ever), cache %s\n",
           g->huge_blocks, bytes_text(a, sizeof a, g->huge_bytes), g->huge_allocations,
           bytes_text(b, sizeof b, g->huge_cached_bytes));
  text_add(t, "  heaps      %12zu live; %" PRIu64 " created, %" PRIu64 " abandoned, %" PRIu64
           " adopted\n", g->heaps_live, g->heaps_created, g->heaps_abandoned, g->heaps_adopted);
  text_add(t, "  %10s %14s %14s %14s %12s %12s %6s\n", "block", "allocations", "frees",
           "remote frees", "live blocks", "live bytes", "pages");
  for (size_t i = 1; i < BRISK_CLASS_COUNT; i++) {
    const brisk_class_stats_t *cls = &s->classes[i];
    if (cls->allocations == 0 && cls->pages == 0) continue;
    text_add(t, "  %10s %14" PRIu64 " %14" PRIu64 " %14" PRIu64 " %12zu %12s %6zu\n",
             bytes_text(a, sizeof a, cls->block_size), cls->allocations, cls->frees,
             cls->remote_frees, cls->blocks_in_use,
             bytes_text(b, sizeof b, (uint64_t)cls->blocks_in_use * cls->block_size), cls->pages);
  }
  const brisk_os_stats_t *o = &s->os;
  text_add(t, "system calls (%s mapped now; %" PRIu64 " refused)\n",
           bytes_text(a, sizeof a, o->bytes_mapped), o->failed_calls);
  text_add(t, "  map %" PRIu64 " (%s), unmap %" PRIu64 " (%s), commit %" PRIu64 " (%s),\n",
           o->map_calls, bytes_text(a, sizeof a, o->map_bytes), o->unmap_calls,
           bytes_text(b, sizeof b, o->unmap_bytes), o->commit_calls,
           bytes_text(c, sizeof c, o->commit_bytes));
  text_add(t, "  decommit %" PRIu64 " (%s), remap %" PRIu64 " (%s), other %" PRIu64 " (%s)\n",
           o->decommit_calls, bytes_text(a, sizeof a, o->decommit_bytes), o->remap_calls,
           bytes_text(b, sizeof b, o->remap_bytes), o->other_calls,
           bytes_text(d, sizeof d, o->other_bytes));
  for (size_t k = 0; k < BRISK_REGION_KINDS; k++) {
    const brisk_region_kind_stats_t *r = &s->regions[k];
    if (r->created == 0 && r->live == 0) continue;
    text_add(t, "%-6s %zu live (%" PRIu64 " created): in use %s, held %s, requested %s, "
             "%zu allocations, %zu system calls\n",
             region_names[k], r->live, r->created, bytes_text(a, sizeof a, r->totals.bytes_in_use),
             bytes_text(b, sizeof b, r->totals.bytes_held),
             bytes_text(c, sizeof c, r->totals.bytes_requested), r->totals.allocations,
             r->totals.system_requests);
  }
  const brisk_region_cache_stats_t *m = &s->region_cache;
  if (m->entries != 0 || m->hits != 0 || m->misses != 0 || m->kept != 0 || m->declined != 0) {
    text_add(t, "region mapping cache: %zu mappings, %s (%s resident; bound %s, %" PRIu64
             " ms)\n", m->entries, bytes_text(a, sizeof a, m->bytes),
             bytes_text(b, sizeof b, m->resident_bytes), bytes_text(c, sizeof c, m->max_bytes),
             m->delay_ms);
    text_add(t, "  taken      %12" PRIu64 " hits (%s), %" PRIu64 " misses (mapped afresh)\n",
             m->hits, bytes_text(a, sizeof a, m->hit_bytes), m->misses);
    text_add(t, "  given back %12" PRIu64 " kept (%s), %" PRIu64 " released at once (%s)\n",
             m->kept, bytes_text(a, sizeof a, m->kept_bytes), m->declined,
             bytes_text(b, sizeof b, m->declined_bytes));
    text_add(t, "  released   %12" PRIu64 " after the delay (%s), %" PRIu64
             " to make room (%s), %" PRIu64 " by collect or trim (%s)\n",
             m->expired, bytes_text(a, sizeof a, m->expired_bytes), m->evicted,
             bytes_text(b, sizeof b, m->evicted_bytes), m->flushed,
             bytes_text(c, sizeof c, m->flushed_bytes));
  }
}

/* The snapshot and a text buffer are large: kept off small thread stacks. */
enum { TEXT_CAPACITY = 24 * 1024 };

/* The text of an errno value for a warning from the writer thread, which
 * must not allocate: glibc's strerror translates through gettext, which
 * may; strerrordesc_np returns its fixed English text. */
static const char *error_text(int error) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  const char *text = strerrordesc_np(error);
  return text != NULL ? text : "unknown error";
#else
  return strerror(error);
#endif
}

/* 0 when every byte went, else the error that stopped the write. */
static int write_all(int fd, const char *bytes, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, bytes, length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    bytes += n;
    length -= (size_t)n;
  }
  return 0;
}

typedef enum text_form_e { FORM_TABLE, FORM_JSON, FORM_JSON_LINE } text_form_t;

/* The one snapshot and text buffer every printed form is made in. A forked
 * child re-initialises the lock (stats_fork_child): a thread of the parent
 * may have held it across fork(). */
static pthread_mutex_t text_lock = PTHREAD_MUTEX_INITIALIZER;

/* A snapshot in `form`, to `file` (through stdio) or, with file NULL, to
 * the descriptor fd with write(2): nothing allocated on that way. The JSON
 * line of the statistics file leaves out the size classes. 0, or the error
 * that stopped write(2). */
static int print_snapshot(text_form_t form, FILE *file, int fd) {
  static brisk_stats_t s;
  static char buffer[TEXT_CAPACITY];
  pthread_mutex_lock(&text_lock);
  snapshot(&s);
  text_t t = {buffer, sizeof buffer, 0};
  if (form == FORM_TABLE) format_table(&t, &s);
  else format_json(&t, &s, form == FORM_JSON);
  int error = 0;
  if (file != NULL) {
    fwrite(buffer, 1, t.length, file);
    fflush(file);
  } else {
    error = write_all(fd, buffer, t.length);
  }
  pthread_mutex_unlock(&text_lock);
  return error;
}

void brisk_stats_print(FILE *out) { (void)print_snapshot(FORM_TABLE, out, -1); }

void brisk_stats_json(FILE *out) { (void)print_snapshot(FORM_JSON, out, -1); }

/* ---- BRISK_STATS_FILE: the interval writer ----
 * A thread that sleeps on a condition variable (so exit can wake it), takes
 * a snapshot and appends one line with write(2): it calls no malloc, so it
 * never gets a heap of its own. After fork, the child starts its own writer
 * (its lines carry its pid); at exit the writer is stopped and joined, and
 * one last line is written. The writer never keeps a process alive: when
 * it is the last thread running, it ends (writer_main). writer_lock guards the writer's state only;
 * neither it nor baseline_lock is held while a snapshot takes heaps_lock, so
 * fork's handlers may take them and heap.c's heaps_lock in either order.
 * text_lock is held across a snapshot, so fork's handlers leave it alone and
 * the child initialises it again. Both descriptors are used only while they
 * still refer to the files opened (_brisk_os_file_is): a program that closed
 * them may have the numbers back for files of its own. */

static pthread_mutex_t writer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t writer_wake;
static pthread_t writer_thread;
static bool writer_running;
static bool writer_stop;
static int writer_fd = -1;
static brisk_os_file_id_t writer_file;
static bool writer_file_lost; /* written by write_line only */
static int writer_status_fd = -1; /* /proc/self/stat: is the writer alone? */
static brisk_os_file_id_t writer_status_file;

/* One line: "brisk: BRISK_STATS_FILE=<path>: <error>; <outcome>". */
static void warn_stats_file(int error, const char *outcome) {
  char message[BRISK_QUOTE_CAPACITY + 256];
  char quoted[BRISK_QUOTE_CAPACITY];
  snprintf(message, sizeof message, "brisk: BRISK_STATS_FILE=%s: %s; %s\n",
           _brisk_options_quote(quoted, sizeof quoted, _brisk_options.stats_file),
           error_text(error), outcome);
  _brisk_os_write_warning(message);
}

/* The writer thread's lines, and the last one at exit (after the thread is
 * joined), to the file while writer_fd still refers to it and takes what
 * is written; once not, no more lines, and one warning (a line cut short
 * by a full disk is not followed by whole ones). */
static void write_line(void) {
  if (writer_file_lost) return;
  if (!_brisk_os_file_is(writer_fd, &writer_file)) {
    writer_file_lost = true;
    _brisk_os_write_warning("brisk: BRISK_STATS_FILE: the program closed the file's descriptor; "
                            "no more statistics lines\n");
    return;
  }
  int error = print_snapshot(FORM_JSON_LINE, NULL, writer_fd);
  if (error != 0) {
    writer_file_lost = true;
    warn_stats_file(error, "no more statistics lines");
  }
}

/* This process's /proc/self/stat, in writer_status_fd. The one there before
 * is closed only where it is still brisk's. */
static void open_process_status(void) {
  if (writer_status_fd >= 0 && _brisk_os_file_is(writer_status_fd, &writer_status_file)) {
    close(writer_status_fd);
  }
  writer_status_fd = _brisk_os_open_process_status();
  _brisk_os_file_id(writer_status_fd, &writer_status_file);
}

/* How often the writer looks whether the program's own threads have all
 * ended (a main thread that called pthread_exit, the last thread of a child
 * forked from a thread returning): the writer then ends too, and the process
 * exits as it would have without it (glibc calls exit(0) when its last
 * thread ends, so the report at exit is still written). */
#define LAST_THREAD_CHECK_MS 50

static void wait_ms(uint64_t milliseconds) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += (time_t)(milliseconds / 1000);
  until.tv_nsec += (long)(milliseconds % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&writer_wake, &writer_lock, &until);
}

static void *writer_main(void *unused) {
  (void)unused;
  uint64_t interval = _brisk_options.stats_interval_ms;
  uint64_t next_line_ms = _brisk_os_now_ms() + interval;
  pthread_mutex_lock(&writer_lock);
  while (!writer_stop) {
    uint64_t now = _brisk_os_now_ms();
    if (now >= next_line_ms) {
      pthread_mutex_unlock(&writer_lock);
      write_line(); /* only this thread writes lines while it runs */
      pthread_mutex_lock(&writer_lock);
      next_line_ms = now + interval;
      continue;
    }
    uint64_t until_line = next_line_ms - now;
    wait_ms(until_line < LAST_THREAD_CHECK_MS ? until_line : LAST_THREAD_CHECK_MS);
    if (writer_stop) break;
    pthread_mutex_unlock(&writer_lock);
    if (!_brisk_os_file_is(writer_status_fd, &writer_status_file)) open_process_status();
    bool alone = _brisk_os_only_thread_left(writer_status_fd);
    pthread_mutex_lock(&writer_lock);
    if (alone) {
      /* Nobody joins us now; the report at exit runs on this thread. */
      writer_running = false;
      writer_stop = true;
    }
  }
  pthread_mutex_unlock(&writer_lock);
  return NULL;
}

static void writer_start(void) {
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&writer_wake, &attributes);
  pthread_condattr_destroy(&attributes);
  writer_stop = false;
  /* This process's own (a forked child's refers to the child). */
  open_process_status();
  /* The writer takes no signal: a program that blocks one in its threads
   * to wait for it (sigwait, signalfd) must not see it go to ours. */
  sigset_t all_signals, previous;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &previous);
  writer_running = pthread_create(&writer_thread, NULL, writer_main, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &previous, NULL);
  if (!writer_running) {
    _brisk_os_write_warning("brisk: BRISK_STATS_FILE: cannot start the writer thread\n");
  }
}

/* fork: no lock of this file may be inherited held by a thread that is
 * gone in the child. */
static void stats_fork_prepare(void) {
  pthread_mutex_lock(&writer_lock);
  pthread_mutex_lock(&baseline_lock);
}

static void stats_fork_parent(void) {
  pthread_mutex_unlock(&baseline_lock);
  pthread_mutex_unlock(&writer_lock);
}

static void stats_fork_child(void) {
  pthread_mutex_init(&text_lock, NULL);
  pthread_mutex_unlock(&baseline_lock);
  pthread_mutex_unlock(&writer_lock);
  if (writer_running) writer_start();
}

static void stats_at_exit(void) {
  if (writer_fd >= 0) {
    pthread_mutex_lock(&writer_lock);
    bool running = writer_running;
    writer_stop = true;
    writer_running = false;
    pthread_cond_signal(&writer_wake);
    pthread_mutex_unlock(&writer_lock);
    if (running) pthread_join(writer_thread, NULL);
    write_line();
  }
  /* Not into a file of the program's that took descriptor 2 (os.h). */
  if (_brisk_options.stats && _brisk_os_stderr_is_ours()) {
    (void)print_snapshot(FORM_TABLE, NULL, STDERR_FILENO);
  }
}

void _brisk_stats_start(void) {
  start_ms = _brisk_os_now_ms();
  if (_brisk_options.stats_file != NULL) {
    writer_fd = open(_brisk_options.stats_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (writer_fd < 0) {
      warn_stats_file(errno, "no statistics file");
    } else {
      _brisk_os_file_id(writer_fd, &writer_file);
      writer_start();
    }
  }
  pthread_atfork(stats_fork_prepare, stats_fork_parent, stats_fork_child);
  if (_brisk_options.stats || writer_fd >= 0) atexit(stats_at_exit);
}

/* The system's settings and the options first, then what they ask for,
 * when the library is loaded.
 * Mallocs that come earlier (other libraries' constructors) see defaults.
 * The heaps' fork handlers before the statistics' (whose child handler
 * starts a thread, which allocates), and before any other library's or
 * the program's (heap.c: _brisk_heaps_register_fork_handlers). */
static void __attribute__((constructor(101))) brisk_start(void) {
  _brisk_os_start();
  _brisk_options_init();
  _brisk_heaps_register_fork_handlers();
  _brisk_stats_start();
}
