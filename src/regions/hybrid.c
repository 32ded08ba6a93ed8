/*
 * hybrid.c — seed 003's bounded hybrid pool: fixed-size buckets (lock-free
 * pools, the seed's SP section) in front of buddy regions (lock-free buddy
 * trees, the GP section), with frees dispatched by address.
 *
 * Layout: the brisk_hybrid_t itself sits in pages of its own from the OS
 * layer. Every bucket is a bounded brisk_pool_t and every region a
 * brisk_buddy_t, each over its own reservation; all of them are created,
 * committed (and with BRISK_REGION_PREFAULT / LOCK faulted in and locked)
 * by brisk_hybrid_create, so alloc and free make no system call afterwards.
 *
 * Call tree:
 *   brisk_hybrid_create   check the config, create the buckets and regions
 *                         (not registered: registry.h counts them under
 *                         the hybrid), build the size → bucket table and
 *                         the range table, register the hybrid
 *   brisk_hybrid_alloc    size → smallest fitting bucket (one table load)
 *                         → brisk_pool_alloc; on NULL or an alignment the
 *                         bucket can't give, each region in turn
 *                         → brisk_buddy_alloc; then brisk_malloc (if the
 *                         config allows it) or NULL/ENOMEM; a success is
 *                         counted in the thread's slot
 *   brisk_hybrid_free     range table → brisk_pool_free / brisk_buddy_free;
 *                         outside every range → brisk_free (fallback on) or
 *                         a message and abort
 *   brisk_hybrid_stats    each section's counters, summed per thread slot
 *                         by the pool and buddy themselves
 *   brisk_hybrid_totals   the whole hybrid in brisk_region_stats_t's words
 *   brisk_hybrid_destroy  unregisters, destroys every section (no
 *                         concurrent calls)
 *
 * Threads: every field of brisk_hybrid_t except `fallbacks`, `slots` and
 * `entry` is written by create and only read afterwards (the seed's
 * "read-only acceleration structure": dispatch needs no synchronisation at
 * all); the hybrid is published to other threads by whatever the program
 * uses to share the pointer. `fallbacks` is a relaxed counter bumped only
 * on the fallback path. slots[i] counts the allocations of the thread
 * holding slot i and the sizes they asked for (thread_slot.h): only that
 * thread writes it, with a relaxed load + store; threads without a slot
 * share slots[BRISK_THREAD_SLOTS] with fetch_add; totals sum them with
 * relaxed loads. `entry` is the registry's, under its lock. All other
 * concurrency lives inside the pools and buddies, which are lock-free.
 *
 * Statistics (brisk_hybrid_totals, the registry): allocations and
 * bytes_requested are the hybrid's own counts of its successful
 * brisk_hybrid_alloc calls and the sizes they asked for (a bucket's pool
 * knows only its object size), fallbacks included; bytes_in_use and
 * bytes_held are the sections' (a fallback block is the general
 * allocator's), bytes_held plus the hybrid's own pages; system_requests
 * the OS calls made for the hybrid and its sections, all at creation.
 */
#include "base/base.h"
#include "os/os.h"
#include "regions/buddy.h"
#include "regions/pool.h"
#include "regions/registry.h"
#include "regions/thread_slot.h"

#include <brisk/hybrid.h>
#include <brisk/malloc.h>
#include <errno.h>
#include <string.h>

#define MAX_BUCKET_SIZE ((size_t)512)
#define SIZE_TABLE_ENTRIES (MAX_BUCKET_SIZE / 8 + 1)
#define MAX_SECTIONS (BRISK_HYBRID_MAX_BUCKETS + BRISK_HYBRID_MAX_REGIONS)
#define NO_BUCKET 0xFF

#define DEFAULT_REGION_SIZE ((size_t)64 << 20)
#define DEFAULT_MAX_BLOCK ((size_t)1 << 20)
#define DEFAULT_BUCKET_COUNT ((size_t)64 << 10)

/* An address range of one section, for free's dispatch. */
typedef struct section_range_s {
  uintptr_t lo;
  uintptr_t size; /* hi - lo: one unsigned compare tests lo <= p < hi */
  uint8_t is_bucket;
  uint8_t index; /* into buckets[] or regions[] */
} section_range_t;

/* One thread's counts (see thread_slot.h), a cache line of its own. */
typedef struct hybrid_slot_s {
  _Atomic size_t allocations; /* successful brisk_hybrid_alloc calls */
  _Atomic size_t requested;   /* the sizes they asked for */
} BRISK_ALIGNED(BRISK_CACHE_LINE) hybrid_slot_t;

struct brisk_hybrid_s {
  /* Read-only after create. */
  size_t bucket_count;
  size_t region_count;
  size_t range_count;
  size_t largest_bucket;  /* bytes; 0 when there is no bucket */
  /* (size + 7) / 8 → the smallest bucket that holds size, or NO_BUCKET. */
  uint8_t bucket_for_size[SIZE_TABLE_ENTRIES];
  size_t bucket_align[BRISK_HYBRID_MAX_BUCKETS]; /* alignment every object has */
  brisk_pool_t *buckets[BRISK_HYBRID_MAX_BUCKETS];
  size_t bucket_sizes[BRISK_HYBRID_MAX_BUCKETS];
  brisk_buddy_t *regions[BRISK_HYBRID_MAX_REGIONS];
  section_range_t ranges[MAX_SECTIONS]; /* buckets first: small sizes are the common case */
  bool fallback_to_malloc;
  size_t mapping_size;
  size_t system_requests;  /* the OS calls for this mapping (the sections count theirs) */
  brisk_region_entry_t entry;
  /* Written on the fallback path only. */
  _Atomic size_t fallbacks;
  hybrid_slot_t slots[BRISK_THREAD_SLOTS + 1]; /* the last: threads without a slot */
};

_Static_assert(sizeof(hybrid_slot_t) == BRISK_CACHE_LINE, "slot entries are one cache line");


void brisk_hybrid_default_config(brisk_hybrid_config_t *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  static const size_t sizes[] = {16, 32, 64};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    out->bucket_sizes[i] = sizes[i];
    out->bucket_counts[i] = DEFAULT_BUCKET_COUNT;
  }
  out->region_sizes[0] = DEFAULT_REGION_SIZE;
  out->region_min_block = 0;
  out->region_max_block = DEFAULT_MAX_BLOCK;
  out->flags = BRISK_REGION_THREAD_CACHE;
  out->fallback_to_malloc = 0;
}

/* The alignment brisk_malloc gives a block of this size (brisk/malloc.h): 16 when
 * the size is a multiple of 16 or at least 128, else 8. A bucket's objects
 * get that of the bucket size, and an align-0 request needs that of its own
 * size, so a 16-byte request never lands 8-aligned in a 24-byte bucket. */
static size_t natural_align(size_t size) { return size % 16 == 0 || size >= 128 ? 16 : 8; }

static bool config_is_valid(const brisk_hybrid_config_t *c, size_t *bucket_count,
                            size_t *region_count) {
  size_t buckets = 0;
  while (buckets < BRISK_HYBRID_MAX_BUCKETS && c->bucket_sizes[buckets] != 0) {
    size_t size = c->bucket_sizes[buckets];
    if (size < 8 || size > MAX_BUCKET_SIZE || size % 8 != 0 || c->bucket_counts[buckets] == 0)
      return false;
    if (buckets > 0 && size <= c->bucket_sizes[buckets - 1]) return false;
    buckets++;
  }
  size_t regions = 0;
  while (regions < BRISK_HYBRID_MAX_REGIONS && c->region_sizes[regions] != 0) regions++;
  if (buckets + regions == 0) return false;
  if (c->region_min_block != 0 && !brisk_is_power_of_two(c->region_min_block)) return false;
  if (c->region_max_block != 0 && !brisk_is_power_of_two(c->region_max_block)) return false;
  if (c->region_min_block != 0 && c->region_max_block != 0 &&
      c->region_min_block > c->region_max_block)
    return false;
  const unsigned known = BRISK_REGION_PREFAULT | BRISK_REGION_LOCK | BRISK_REGION_THREAD_CACHE;
  if ((c->flags & ~known) != 0) return false;
  *bucket_count = buckets;
  *region_count = regions;
  return true;
}

static size_t region_min_block_for(const brisk_hybrid_config_t *c, size_t bucket_count) {
  if (c->region_min_block != 0) return c->region_min_block;
  size_t above = bucket_count ? c->bucket_sizes[bucket_count - 1] + 1 : 16;
  size_t min_block = 16;
  while (min_block < above) min_block <<= 1;
  return min_block;
}

static void add_range(brisk_hybrid_t *h, uintptr_t lo, uintptr_t hi, bool is_bucket,
                      size_t index) {
  section_range_t *r = &h->ranges[h->range_count++];
  r->lo = lo;
  r->size = hi - lo;
  r->is_bucket = is_bucket;
  r->index = (uint8_t)index;
}

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  const char *hybrid = (const char *)entry - offsetof(brisk_hybrid_t, entry);
  brisk_hybrid_totals((const brisk_hybrid_t *)hybrid, out);
}

static void destroy_sections(brisk_hybrid_t *h) {
  for (size_t i = 0; i < BRISK_HYBRID_MAX_BUCKETS; i++)
    if (h->buckets[i] != NULL) brisk_pool_destroy(h->buckets[i]);
  for (size_t i = 0; i < BRISK_HYBRID_MAX_REGIONS; i++)
    if (h->regions[i] != NULL) brisk_buddy_destroy(h->regions[i]);
}

brisk_hybrid_t *brisk_hybrid_create(const brisk_hybrid_config_t *config) {
  brisk_hybrid_config_t defaults;
  if (config == NULL) {
    brisk_hybrid_default_config(&defaults);
    config = &defaults;
  }
  size_t bucket_count, region_count;
  if (!config_is_valid(config, &bucket_count, &region_count)) {
    errno = EINVAL;
    return NULL;
  }
  size_t mapping_size = brisk_align_up(sizeof(brisk_hybrid_t), _brisk_os_page_size());
  size_t calls = 0;
  bool reused;
  brisk_hybrid_t *h = _brisk_os_reserve_cached(BRISK_OS_CACHE_HYBRID, mapping_size, 0, &reused,
                                               &calls);
  if (h == NULL) return NULL;
  /* Fresh pages are zero (a kept mapping is cleared): every pointer NULL,
   * every counter 0. */
  if (reused) memset(h, 0, mapping_size);
  h->mapping_size = mapping_size;
  h->system_requests = calls;
  h->bucket_count = bucket_count;
  h->region_count = region_count;
  h->fallback_to_malloc = config->fallback_to_malloc != 0;
  /* Every section gets the config's flags: PREFAULT, LOCK, THREAD_CACHE. */
  unsigned flags = config->flags;

  for (size_t i = 0; i < bucket_count; i++) {
    size_t size = config->bucket_sizes[i];
    h->bucket_sizes[i] = size;
    h->bucket_align[i] = natural_align(size);
    h->buckets[i] = _brisk_pool_create(size, h->bucket_align[i], config->bucket_counts[i],
                                       flags, false);
    if (h->buckets[i] == NULL) goto fail;
    uintptr_t lo, hi;
    _brisk_pool_range(h->buckets[i], &lo, &hi);
    add_range(h, lo, hi, true, i);
  }
  h->largest_bucket = bucket_count ? config->bucket_sizes[bucket_count - 1] : 0;
  for (size_t slot = 0, b = 0; slot < SIZE_TABLE_ENTRIES; slot++) {
    while (b < bucket_count && h->bucket_sizes[b] < slot * 8) b++;
    h->bucket_for_size[slot] = b < bucket_count ? (uint8_t)b : NO_BUCKET;
  }

  size_t min_block = region_min_block_for(config, bucket_count);
  for (size_t i = 0; i < region_count; i++) {
    size_t max_block = config->region_max_block ? config->region_max_block : DEFAULT_MAX_BLOCK;
    size_t size = config->region_sizes[i];
    if (max_block > size) {
      /* A small region is one tree of its own (rounded up to a power of two). */
      max_block = 1;
      while (max_block < size) max_block <<= 1;
    }
    if (max_block < min_block) max_block = min_block;
    h->regions[i] = _brisk_buddy_create(size, min_block, max_block, flags, false);
    if (h->regions[i] == NULL) goto fail;
    uintptr_t lo, hi;
    _brisk_buddy_range(h->regions[i], &lo, &hi);
    add_range(h, lo, hi, false, i);
  }
  _brisk_region_register(&h->entry, BRISK_REGION_HYBRID, registry_stats);
  return h;

fail:;
  /* The section's own error (ENOMEM, or mlock's EPERM/EAGAIN) survives the
   * cleanup. */
  int saved_errno = errno;
  destroy_sections(h);
  _brisk_os_release_cached(BRISK_OS_CACHE_HYBRID, h, mapping_size, NULL);
  errno = saved_errno ? saved_errno : ENOMEM;
  return NULL;
}

void brisk_hybrid_destroy(brisk_hybrid_t *h) {
  if (h == NULL) return;
  _brisk_region_unregister(&h->entry);
  destroy_sections(h);
  _brisk_os_release_cached(BRISK_OS_CACHE_HYBRID, h, h->mapping_size, NULL);
}

/* The calling thread had no slot behind its entry: take one now, or count
 * in the shared entry of threads without one. */
static BRISK_NOINLINE void *count_alloc_no_slot(brisk_hybrid_t *h, void *p, size_t size) {
  uint32_t slot = brisk_thread_slot();
  hybrid_slot_t *e = &h->slots[slot];
  if (slot != BRISK_NO_THREAD_SLOT) {
    brisk_owner_add(&e->allocations, 1);
    brisk_owner_add(&e->requested, size);
  } else {
    atomic_fetch_add_explicit(&e->allocations, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&e->requested, size, memory_order_relaxed);
  }
  return p;
}

/* p (not NULL) goes to the program for a request of `size` bytes: counted
 * in the calling thread's own entry (one TLS word, no atomic RMW). */
BRISK_INLINE void *count_alloc(brisk_hybrid_t *h, void *p, size_t size) {
  uint32_t line = _brisk_thread_slot_line;
  if (BRISK_UNLIKELY(line == 0)) return count_alloc_no_slot(h, p, size);
  hybrid_slot_t *e = (hybrid_slot_t *)((char *)h->slots + line) - 1;
  brisk_owner_add(&e->allocations, 1);
  brisk_owner_add(&e->requested, size);
  return p;
}

static BRISK_NOINLINE void *alloc_from_regions(brisk_hybrid_t *h, size_t size, size_t align) {
  for (size_t i = 0; i < h->region_count; i++) {
    void *p = brisk_buddy_alloc(h->regions[i], size, align);
    if (p != NULL) return count_alloc(h, p, size);
  }
  if (h->fallback_to_malloc) {
    void *p = align <= natural_align(size) ? brisk_malloc(size) : brisk_aligned_alloc(align, size);
    if (p == NULL) return NULL;
    atomic_fetch_add_explicit(&h->fallbacks, 1, memory_order_relaxed);
    return count_alloc(h, p, size);
  }
  errno = ENOMEM;
  return NULL;
}

void *brisk_hybrid_alloc(brisk_hybrid_t *h, size_t size, size_t align) {
  if (BRISK_UNLIKELY(size == 0 || (align & (align - 1)) != 0)) {
    errno = EINVAL;
    return NULL;
  }
  if (BRISK_LIKELY(size <= h->largest_bucket)) {
    size_t b = h->bucket_for_size[(size + 7) / 8];
    /* align 0: what malloc would give an object of this size. */
    size_t need = align != 0 ? align : natural_align(size);
    if (BRISK_LIKELY(need <= h->bucket_align[b])) {
      void *p = brisk_pool_alloc(h->buckets[b]);
      if (BRISK_LIKELY(p != NULL)) return count_alloc(h, p, size);
    }
  }
  return alloc_from_regions(h, size, align != 0 ? align : natural_align(size));
}

void brisk_hybrid_free(brisk_hybrid_t *h, void *p) {
  if (p == NULL) return;
  uintptr_t address = (uintptr_t)p;
  for (size_t i = 0; i < h->range_count; i++) {
    const section_range_t *r = &h->ranges[i];
    if (address - r->lo < r->size) {
      if (r->is_bucket)
        brisk_pool_free(h->buckets[r->index], p);
      else
        brisk_buddy_free(h->regions[r->index], p);
      return;
    }
  }
  if (!h->fallback_to_malloc)
    _brisk_os_fatal_pointer("brisk_hybrid_free", p, "pointer not from this hybrid pool");
  brisk_free(p);
}

size_t brisk_hybrid_stats(const brisk_hybrid_t *h, brisk_hybrid_section_stats_t *out, size_t max,
                          size_t *fallbacks) {
  if (h == NULL) return 0;
  size_t n = 0;
  for (size_t i = 0; i < h->bucket_count; i++, n++) {
    if (n >= max || out == NULL) continue;
    brisk_pool_counters_t c;
    _brisk_pool_counters(h->buckets[i], &c);
    uintptr_t lo, hi;
    _brisk_pool_range(h->buckets[i], &lo, &hi);
    size_t size = h->bucket_sizes[i];
    out[n] = (brisk_hybrid_section_stats_t){
        .block_size = size,
        .bytes_reserved = hi - lo,
        .in_use = c.in_use * size,
        .high_water = c.high_water * size,
        .allocations = c.allocations,
        .failures = c.failures,
    };
  }
  for (size_t i = 0; i < h->region_count; i++, n++) {
    if (n >= max || out == NULL) continue;
    brisk_buddy_counters_t c;
    _brisk_buddy_counters(h->regions[i], &c);
    uintptr_t lo, hi;
    _brisk_buddy_range(h->regions[i], &lo, &hi);
    out[n] = (brisk_hybrid_section_stats_t){
        .block_size = 0,
        .bytes_reserved = hi - lo,
        .in_use = c.in_use,
        .high_water = c.high_water,
        .allocations = c.allocations,
        .failures = c.failures,
    };
  }
  if (fallbacks != NULL) *fallbacks = atomic_load_explicit(&h->fallbacks, memory_order_relaxed);
  return n;
}

void brisk_hybrid_totals(const brisk_hybrid_t *h, brisk_region_stats_t *out) {
  brisk_hybrid_t *m = (brisk_hybrid_t *)h;
  brisk_region_stats_t total = {
      .bytes_held = h->mapping_size,
      .system_requests = h->system_requests,
  };
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    total.allocations += atomic_load_explicit(&m->slots[i].allocations, memory_order_relaxed);
    total.bytes_requested += atomic_load_explicit(&m->slots[i].requested, memory_order_relaxed);
  }
  brisk_region_stats_t section;
  for (size_t i = 0; i < h->bucket_count; i++) {
    brisk_pool_stats(h->buckets[i], &section);
    total.bytes_in_use += section.bytes_in_use;
    total.bytes_held += section.bytes_held;
    total.system_requests += section.system_requests;
  }
  for (size_t i = 0; i < h->region_count; i++) {
    brisk_buddy_stats(h->regions[i], &section);
    total.bytes_in_use += section.bytes_in_use;
    total.bytes_held += section.bytes_held;
    total.system_requests += section.system_requests;
  }
  *out = total;
}
