/*
 * huge.c — blocks above BRISK_LARGE_MAX (512 KiB), each in a mapping of its
 * own that starts with a segment header, so free() finds it by masking like
 * any other block.
 *
 *   _brisk_huge_alloc: reuse the cached mapping of the calling thread's heap
 *     closest in size, grown with mremap if it is too small (its touched
 *     pages come along), else reserve a new one. Mapping sizes are rounded to
 *     8 steps per doubling.
 *   _brisk_huge_realloc: the same resizing, so growing a huge block never
 *     copies its bytes.
 *   _brisk_huge_free: into the freeing thread's cache, which stays backed, so
 *     a program that allocates and frees blocks of several MiB in a loop
 *     takes no page fault per page on each reuse. The cache holds at most
 *     BRISK_HUGE_CACHE_ENTRIES mappings and HUGE_CACHE_MAX_BYTES, none of
 *     more than half of that; the oldest goes first, and housekeeping
 *     releases entries idle past BRISK_HUGE_CACHE_MAX_AGE_MS (0: nothing is
 *     cached).
 *     The last 64 blocks whose mappings went back to the system are
 *     remembered, so that a second free of one (often from another thread,
 *     whose cache could not keep it) is named a double free.
 *
 * The secure build puts a canary right after each huge block's requested
 * size (huge_stamp) and ends each huge mapping with a guard page (HUGE_GUARD):
 * a linear overflow that runs past the mapping's usable end faults. It is
 * counted in mapped_size, taken off what the block may use
 * (_brisk_huge_end), and made accessible again before a resize (mremap
 * moves one mapping of one protection) and set anew after.
 *
 * Huge segments have no owner heap: any thread may free them into its own
 * cache, so no lock is needed. A block aligned to a segment or more sits one
 * segment above its header (free()'s offset-0 test sends it here).
 */
#include "general/internal.h"
#include "os/os.h"

#include <errno.h>
#include <string.h>

#define HUGE_CACHE_MAX_BYTES (_brisk_options.huge_cache_bytes)
/* Where the block starts in its mapping when it needs no special alignment. */
#define HUGE_BLOCK_OFFSET ((size_t)1024)

_Static_assert(offsetof(brisk_segment_t, pages) + sizeof(brisk_page_t) + sizeof(uint64_t) <=
                   HUGE_BLOCK_OFFSET,
               "the huge header and the word in front of the block fit before the block");

/* The guard page at the end of each huge mapping, secure build only. */
#define HUGE_GUARD brisk_secure_guard_size()
/* Room for the secure build's canary after the requested size. */
#define HUGE_CANARY (BRISK_SECURE ? sizeof(uint64_t) : (size_t)0)

/* The word right before every huge block, in both builds: a write running
 * back from the block towards its header (an underflow) changes it before
 * it reaches anything the header holds, so a free, realloc or
 * malloc_usable_size that finds it changed trusts nothing in the header
 * (_brisk_huge_checked_block). Keyed with the secure build's secret (the
 * release build's is the block's address). */
static uint64_t huge_front_word(const uint8_t *block) {
  return brisk_secure_canary(brisk_block_secret(block)) ^ 0x9E3779B97F4A7C15ull;
}

/* The secure build's huge block: its requested size kept in the header and
 * a canary (brisk_secure_canary of the block's secret) right after that
 * size, so that an overflow of even one byte is caught at free, realloc and
 * malloc_usable_size (_brisk_huge_requested_size). */
static void huge_stamp(brisk_segment_t *segment, size_t size) {
  uint8_t *block = _brisk_huge_block(segment);
  uint64_t front = huge_front_word(block);
  __builtin_memcpy(block - sizeof front, &front, sizeof front);
  if (!BRISK_SECURE) return;
  segment->huge_requested = size;
  uint64_t canary = brisk_secure_canary(brisk_block_secret(block));
  __builtin_memcpy(block + size, &canary, sizeof canary);
}

size_t _brisk_huge_requested_size(const char *caller, const brisk_segment_t *segment) {
  const uint8_t *block = _brisk_huge_block(segment);
  size_t size = segment->huge_requested;
  uint64_t canary;
  /* Heap corruption, not a bad pointer: worded as a size-class block's
   * (_brisk_fatal_block), without "invalid pointer". */
  if (size > (size_t)(_brisk_huge_end(segment) - block) - sizeof canary) {
    _brisk_os_fatal_pointer(caller, block, "heap corruption: a huge block's header was overwritten");
  }
  __builtin_memcpy(&canary, block + size, sizeof canary);
  if (canary != brisk_secure_canary(brisk_block_secret(block))) {
    _brisk_os_fatal_pointer(caller, block, "heap overflow past the requested size, huge block");
  }
  return size;
}

uint8_t *_brisk_huge_end(const brisk_segment_t *segment) {
  return (uint8_t *)segment + segment->mapped_size - HUGE_GUARD;
}

/* Make the mapping's last page its guard; false when the kernel refuses. */
static bool guard_set(brisk_segment_t *segment) {
  if (!BRISK_SECURE) return true;
  return _brisk_os_guard(_brisk_huge_end(segment), HUGE_GUARD, NULL);
}

/* _brisk_segment_resize with the guard moved to the new end; NULL (the old
 * mapping and its guard kept) when it cannot. *guarded (the secure build's
 * concern): false when the kernel refused the new guard (at its limit of
 * mappings) after the resize, which cannot be undone (it may have moved):
 * the resized mapping is returned whole read-write, so that the caller
 * decides whether a block in it is kept without its guard or let go. */
static brisk_segment_t *huge_resize(brisk_segment_t *segment, size_t new_size, bool *guarded) {
  *guarded = true;
  if (BRISK_SECURE && !_brisk_os_commit(_brisk_huge_end(segment), HUGE_GUARD, NULL)) return NULL;
  brisk_segment_t *resized = _brisk_segment_resize(segment, new_size);
  if (resized == NULL) {
    /* mprotect over a page already mapped that back does not fail for
     * want of memory; the old guard is back as it was. */
    guard_set(segment);
    return NULL;
  }
  *guarded = guard_set(resized);
  return resized;
}

/* _brisk_segment_reserve of a huge mapping, its guard set. */
static brisk_segment_t *huge_reserve(size_t mapped_size, size_t block_align) {
  brisk_segment_t *segment = _brisk_segment_reserve(mapped_size, block_align, BRISK_HUGE_PAGE_SHIFT);
  if (segment == NULL) return NULL;
  if (!guard_set(segment)) {
    _brisk_segment_unmap(segment);
    return NULL;
  }
  segment->huge_unguarded = false;
  return segment;
}

uint8_t *_brisk_huge_block(const brisk_segment_t *segment) {
  return brisk_page_start(&segment->pages[0]);
}

uint8_t *_brisk_huge_checked_block(const char *caller, const void *p, const brisk_segment_t *segment) {
  /* The header's fields in the order an underflow reaches them: the block's
   * place (in the page descriptor, the header's last bytes) must lie in the
   * mapping before the word in front of the block is read; the kind and
   * size (its first bytes) are reached last. */
  size_t offset = (uint32_t)(segment->pages[0].start_low - (uint32_t)(uintptr_t)segment);
  bool placed = segment->kind == BRISK_KIND_HUGE && segment->page_shift == BRISK_HUGE_PAGE_SHIFT &&
                offset >= HUGE_BLOCK_OFFSET && offset < segment->mapped_size;
  uint8_t *block = (uint8_t *)segment + offset;
  uint64_t front = 0;
  if (placed) __builtin_memcpy(&front, block - sizeof front, sizeof front);
  if (!placed || front != huge_front_word(block)) {
    _brisk_os_fatal_pointer(caller, p,
                            "heap corruption: a huge block's header was overwritten (a write "
                            "before the block?)");
  }
  return block;
}

/* The last huge blocks whose mappings went back to the system after their
 * free, so that a later free, realloc or malloc_usable_size of one is named
 * a double free rather than a pointer brisk never handed out. Only the
 * messages of an abort read them: relaxed loads and stores, and a lost or
 * stale entry changes nothing but a message's wording. */
enum { UNMAPPED_REMEMBERED = 64 };
static _Atomic(uintptr_t) unmapped_blocks[UNMAPPED_REMEMBERED];
static _Atomic(size_t) unmapped_next;

static void remember_unmapped(const void *block) {
  size_t slot = atomic_fetch_add_explicit(&unmapped_next, 1, memory_order_relaxed);
  atomic_store_explicit(&unmapped_blocks[slot % UNMAPPED_REMEMBERED], (uintptr_t)block,
                        memory_order_relaxed);
}

/* Give back the mapping of a freed huge block, remembering the block. */
static void huge_unmap_freed(brisk_segment_t *segment) {
  remember_unmapped(_brisk_huge_block(segment));
  _brisk_segment_unmap(segment);
}

bool _brisk_huge_was_unmapped(const void *p) {
  for (size_t i = 0; i < UNMAPPED_REMEMBERED; i++) {
    uintptr_t block = atomic_load_explicit(&unmapped_blocks[i], memory_order_relaxed);
    if (block == (uintptr_t)p) return true;
  }
  return false;
}

static size_t round_mapping_size(size_t size) {
  size_t page = _brisk_os_page_size();
  size_t b = brisk_bit_scan_reverse(size);
  size_t step = b >= 3 ? (size_t)1 << (b - 3) : 1;
  if (step < page) step = page;
  return brisk_align_up(size, step);
}

static void huge_init(brisk_segment_t *segment, size_t block_offset) {
  segment->kind = BRISK_KIND_HUGE;
  segment->page_count = 1;
  segment->used_pages = 1;
  segment->heap = NULL;
  brisk_store_relaxed(&segment->owner_thread, 0);
  brisk_page_t *page = &segment->pages[0];
  brisk_page_set_start(page, (uint8_t *)segment + block_offset);
  page->block_magic = 0;
  page->in_use = 1;
  page->used = 1;
  page->class_index = 0;
  page->block_size = 0;
  brisk_store_relaxed(&segment->page_info[0], 0);
}

/* Statistics: a huge block made live (+1) or freed (-1), with its mapping. */
static void huge_counted(const brisk_segment_t *segment, int change) {
  _brisk_stats_huge_in_use(change, change * (int64_t)segment->mapped_size);
  brisk_global_stat_add(change > 0 ? BRISK_STAT_HUGE_ALLOCATIONS : BRISK_STAT_HUGE_FREES, 1);
}

static void cache_remove(brisk_heap_t *heap, size_t index) {
  heap->huge_cache_bytes -= heap->huge_cache[index].size;
  brisk_global_stat_add(BRISK_STAT_HUGE_CACHED_BYTES, -(int64_t)heap->huge_cache[index].size);
  heap->huge_cache[index] = heap->huge_cache[--heap->huge_cache_count];
}

static void cache_trim(brisk_heap_t *heap, uint64_t now_ms, uint64_t max_age_ms);

/* The entry freed longest ago goes back to the system (the cache holds
 * one at least). */
static void cache_drop_oldest(brisk_heap_t *heap) {
  size_t oldest = 0;
  for (size_t i = 1; i < heap->huge_cache_count; i++) {
    if (heap->huge_cache[i].freed_at_ms < heap->huge_cache[oldest].freed_at_ms) oldest = i;
  }
  brisk_segment_t *victim = heap->huge_cache[oldest].segment;
  cache_remove(heap, oldest);
  huge_unmap_freed(victim);
}

/* The cached mapping closest in size to `needed`, made to fit: a smaller
 * one grows (its touched pages come along, so only the new part faults). */
static brisk_segment_t *cache_take(brisk_heap_t *heap, size_t needed) {
  if (heap->huge_cache_count == 0) return NULL;
  size_t best = 0;
  size_t best_distance = SIZE_MAX;
  for (size_t i = 0; i < heap->huge_cache_count; i++) {
    size_t size = heap->huge_cache[i].size;
    size_t distance = size >= needed ? size - needed : needed - size;
    if (distance < best_distance) {
      best = i;
      best_distance = distance;
    }
  }
  brisk_segment_t *segment = heap->huge_cache[best].segment;
  cache_remove(heap, best);
  size_t wanted = round_mapping_size(needed);
  /* A bigger mapping is used whole: trimming would drop pages that are
   * already backed, and the next bigger request would fault them again.
   * Only a mapping over 4x too big gives back its tail. */
  if (segment->mapped_size >= needed && segment->mapped_size / 4 <= wanted) return segment;
  if (segment->mapped_size >= needed) wanted *= 2;
  bool guarded;
  brisk_segment_t *resized = huge_resize(segment, wanted, &guarded);
  if (resized == NULL) {
    huge_unmap_freed(segment);
  } else if (!guarded) {
    /* A free mapping without its guard: let go (the caller maps afresh). */
    huge_unmap_freed(resized);
    resized = NULL;
  }
  return resized;
}

void *_brisk_huge_alloc(brisk_heap_t *heap, size_t size, size_t align, bool zero) {
  if (size > PTRDIFF_MAX - 2 * BRISK_SEGMENT_SIZE || align > PTRDIFF_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  /* The tries below that fail (a cached mapping's resize, the rounded size,
   * the first try before a reclaim) set errno: a block handed out leaves it
   * as the caller had it. */
  int saved_errno = errno;
  /* A block of 0 bytes (aligned_alloc(2^20, 0), say) still takes a byte of
   * the mapping, so that its address lies inside it: at the mapping's end
   * it could be another mapping's first byte. */
  size_t room = size == 0 ? 1 : size;
  if (align < BRISK_SEGMENT_SIZE) {
    size_t offset = brisk_align_up(HUGE_BLOCK_OFFSET, align < 16 ? 16 : align);
    size_t needed = brisk_align_up(offset + room + HUGE_CANARY, _brisk_os_page_size()) + HUGE_GUARD;
    brisk_segment_t *segment = NULL;
    if (!heap->is_empty_heap) {
      _brisk_heap_lock_memory(heap);
      segment = cache_take(heap, needed);
      _brisk_heap_unlock_memory(heap);
    }
    bool fresh = segment == NULL;
    if (fresh) {
      /* The secure build maps no slack: its guard page follows the page
       * the block ends in. */
      size_t mapped = BRISK_SECURE ? needed : round_mapping_size(needed);
      segment = huge_reserve(mapped, 0);
      if (segment == NULL && mapped != needed) segment = huge_reserve(needed, 0);
      /* Out of memory: what brisk holds unused may be in the way. */
      if (segment == NULL && _brisk_heap_reclaim(heap, needed))
        segment = huge_reserve(needed, 0);
      if (segment == NULL) {
        errno = ENOMEM;
        return NULL;
      }
    }
    huge_counted(segment, 1);
    huge_init(segment, offset);
    uint8_t *block = _brisk_huge_block(segment);
    if (zero && !fresh) memset(block, 0, size);
    huge_stamp(segment, size);
    errno = saved_errno;
    return block;
  }
  /* Aligned to a segment or more: header one segment below the block. */
  size_t mapped =
      brisk_align_up(BRISK_SEGMENT_SIZE + room + HUGE_CANARY, _brisk_os_page_size()) + HUGE_GUARD;
  brisk_segment_t *segment = huge_reserve(mapped, align);
  if (segment == NULL && _brisk_heap_reclaim(heap, mapped)) segment = huge_reserve(mapped, align);
  if (segment == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  huge_counted(segment, 1);
  huge_init(segment, BRISK_SEGMENT_SIZE);
  huge_stamp(segment, size);
  errno = saved_errno;
  return _brisk_huge_block(segment);
}

void _brisk_huge_free(brisk_heap_t *heap, brisk_segment_t *segment) {
  /* A cached mapping is marked unused: _brisk_checked_segment then catches a
   * second free instead of caching (and later handing out) it twice. */
  segment->pages[0].used = 0;
  huge_counted(segment, -1);
  bool cacheable = !heap->is_empty_heap && !segment->huge_unguarded &&
                   _brisk_huge_block(segment) - (uint8_t *)segment < (ptrdiff_t)BRISK_SEGMENT_SIZE;
  if (!cacheable || segment->mapped_size > HUGE_CACHE_MAX_BYTES / 2 ||
      BRISK_HUGE_CACHE_MAX_AGE_MS == 0) {
    huge_unmap_freed(segment);
    return;
  }
  _brisk_heap_lock_memory(heap);
  /* Make room: drop the oldest entries until this one fits. */
  while (heap->huge_cache_count == BRISK_HUGE_CACHE_ENTRIES ||
         (heap->huge_cache_count != 0 &&
          heap->huge_cache_bytes + segment->mapped_size > HUGE_CACHE_MAX_BYTES)) {
    cache_drop_oldest(heap);
  }
  uint64_t now_ms = _brisk_os_now_ms();
  /* Entries idle past their age go now too: a thread that frees its huge
   * blocks and then stays on the fast paths would otherwise keep them. */
  cache_trim(heap, now_ms, BRISK_HUGE_CACHE_MAX_AGE_MS);
  brisk_huge_cache_entry_t *entry = &heap->huge_cache[heap->huge_cache_count++];
  entry->segment = segment;
  entry->size = segment->mapped_size;
  entry->freed_at_ms = now_ms;
  heap->huge_cache_bytes += segment->mapped_size;
  brisk_global_stat_add(BRISK_STAT_HUGE_CACHED_BYTES, (int64_t)segment->mapped_size);
  _brisk_heap_idle_rearm(heap, now_ms);
  _brisk_heap_unlock_memory(heap);
}

static void cache_trim(brisk_heap_t *heap, uint64_t now_ms, uint64_t max_age_ms) {
  size_t i = 0;
  while (i < heap->huge_cache_count) {
    brisk_huge_cache_entry_t *entry = &heap->huge_cache[i];
    /* A time later than now_ms was read after now_ms was: another thread's
     * idle-heap pass (heap.c) trims with the time it started at. */
    if (max_age_ms == 0 ||
        (entry->freed_at_ms <= now_ms && now_ms - entry->freed_at_ms >= max_age_ms)) {
      brisk_segment_t *victim = entry->segment;
      cache_remove(heap, i);
      huge_unmap_freed(victim);
    } else {
      i++;
    }
  }
}

void _brisk_huge_cache_trim_to(brisk_heap_t *heap, size_t max_bytes) {
  _brisk_heap_lock_memory(heap);
  while (heap->huge_cache_bytes > max_bytes) cache_drop_oldest(heap);
  _brisk_heap_unlock_memory(heap);
}

void _brisk_huge_cache_trim(brisk_heap_t *heap, uint64_t now_ms, uint64_t max_age_ms) {
  _brisk_heap_lock_memory(heap);
  cache_trim(heap, now_ms, max_age_ms);
  _brisk_heap_unlock_memory(heap);
}

void *_brisk_huge_realloc(brisk_segment_t *segment, void *p, size_t new_size) {
  size_t offset = (size_t)((uint8_t *)p - (uint8_t *)segment);
  size_t available = (size_t)(_brisk_huge_end(segment) - (uint8_t *)p) - HUGE_CANARY;
  if (new_size <= available && new_size >= available / 2) {
    huge_stamp(segment, new_size);
    return p;
  }
  if (new_size > PTRDIFF_MAX - 2 * BRISK_SEGMENT_SIZE || offset >= BRISK_SEGMENT_SIZE) return NULL;
  size_t wanted = brisk_align_up(offset + new_size + HUGE_CANARY, _brisk_os_page_size()) + HUGE_GUARD;
  if (!BRISK_SECURE) wanted = round_mapping_size(wanted);
  size_t old_size = segment->mapped_size;
  /* A resize the system refuses sets errno; realloc then moves the block,
   * and sets ENOMEM itself if that fails too. */
  int saved_errno = errno;
  bool guarded;
  brisk_segment_t *resized = huge_resize(segment, wanted, &guarded);
  errno = saved_errno;
  if (resized == NULL) return NULL;
  /* Resized without its guard (the secure build, at the kernel's limit of
   * mappings): the block, moved or not, is the program's still; it is kept
   * without the guard rather than lost (its mapping's last page is then
   * read-write and unused), and its free unmaps the mapping. A later resize
   * that sets the guard again clears the mark. */
  resized->huge_unguarded = !guarded;
  /* Moved: the old address is remembered as a freed block's, so that a
   * later free or realloc of it is named a double free. */
  if (resized != segment) remember_unmapped(p);
  _brisk_stats_huge_in_use(0, (int64_t)resized->mapped_size - (int64_t)old_size);
  huge_stamp(resized, new_size);
  return (uint8_t *)resized + offset;
}
