/*
 * segment.c — segments and the pages inside them.
 *
 *   _brisk_segment_page_alloc(heap, kind, block_size)   a free page of that kind
 *     a free page still backed, one that last served blocks of that size
 *     if one of the newest does, else the newest; else
 *     heap->available[kind] has a segment with a free page? take its first
 *     free page (bitmap + ctz); else reserve a new segment from the OS.
 *   _brisk_segment_page_free(heap, page)       a retired page goes back
 *     its memory stays backed and joins the heap's purge list of its kind
 *     (oldest first);
 *     _brisk_heap_purge decommits pages that stayed free past the purge
 *     delay, but those the heap keeps for reuse (below), or at once when the
 *     lists hold too many bytes. A segment with no page in use is released
 *     to the OS unless it is the heap's one spare of its kind.
 *
 *   _brisk_heap_count_live_blocks(heap, live)  a statistics snapshot's count
 *     of the blocks live on every page of the heap's segments.
 *
 * Everything here runs on the heap's owner thread (or the holder of an
 * abandoned heap's drain_lock), under the heap's memory_lock, which other
 * threads take too: brisk_collect(true) to purge, a snapshot to count. The
 * segment map is the one global written: byte stores (the page shift, or 0)
 * when a segment is reserved, moved or released, read by free().
 */
#include "general/internal.h"
#include "general/size_class.h"
#include "os/os.h"

#include <string.h>

_Atomic(uint8_t) _brisk_segment_map[BRISK_SEGMENT_MAP_SIZE];

/* Free pages beyond this many bytes per heap are decommitted at once (32 MiB;
 * mallopt(M_TRIM_THRESHOLD) sets it; relaxed: any recent value will do). */
static _Atomic(size_t) purge_list_max_bytes = (size_t)32 << 20;
#define PURGE_LIST_MAX_BYTES atomic_load_explicit(&purge_list_max_bytes, memory_order_relaxed)

void _brisk_set_purge_max_bytes(size_t bytes) {
  atomic_store_explicit(&purge_list_max_bytes, bytes, memory_order_relaxed);
}

static const uint8_t page_shift_of_kind[BRISK_KIND_COUNT_PAGED] = {
    BRISK_SMALL_PAGE_SHIFT, BRISK_MEDIUM_PAGE_SHIFT, BRISK_LARGE_PAGE_SHIFT};

static size_t segment_page_count(brisk_segment_kind_t kind) {
  return BRISK_SEGMENT_SIZE >> page_shift_of_kind[kind];
}

_Static_assert(offsetof(brisk_segment_t, pages) + (BRISK_SEGMENT_SIZE >> BRISK_SMALL_PAGE_SHIFT) *
                                             sizeof(brisk_page_t) <=
                   ((size_t)1 << BRISK_SMALL_PAGE_SHIFT),
               "a segment's header must fit in its page 0");
/* Pages are decommitted whole: each must be whole OS pages, whatever the
 * OS page size (os.h). */
_Static_assert(((size_t)1 << BRISK_SMALL_PAGE_SHIFT) % BRISK_OS_MAX_PAGE_SIZE == 0,
               "a page is a whole number of OS pages");

static size_t page_index(const brisk_segment_t *segment, const brisk_page_t *page) {
  return (size_t)(page - segment->pages);
}


/* The bytes of a page (never page 0, the header's). */
static uint8_t *page_area(const brisk_segment_t *segment, const brisk_page_t *page, size_t *size) {
  *size = brisk_page_size(segment);
  return (uint8_t *)segment + page_index(segment, page) * *size;
}

static _Atomic(uint8_t) *map_slot(const brisk_segment_t *segment) {
  return &_brisk_segment_map[(uintptr_t)segment >> BRISK_SEGMENT_SHIFT];
}

/* The secure build puts a no-access OS page just below every segment, so
 * that no overflow out of the mapping below reaches its header, and one
 * just past the last page of a segment of size-class pages, so that none
 * runs out of its last block into the next mapping, however the kernel
 * placed the mappings (the hint area leaves gaps between them, the fallback
 * does not). A huge segment's tail guard is its own last page (huge.c),
 * moved as the segment is resized. */
static size_t segment_tail_guard(size_t page_shift) {
  return page_shift == BRISK_HUGE_PAGE_SHIFT ? 0 : brisk_secure_guard_size();
}

/* The release build maps one read-write OS page past the last page of a
 * segment of size-class pages, which nothing uses. free()'s fast path
 * pushes a pointer onto its page's list before it tests whether the pointer
 * starts a block (alloc.h: the test after the push costs no register), and
 * the push writes 8 bytes at the pointer: a bad pointer into a segment's
 * last 7 bytes would write past the segment, into whatever the kernel
 * placed there or nothing (SIGSEGV, no message). The page takes that write
 * until the checked path takes the pointer back off the list and names it.
 * Part of the segment's mapping, it costs no mapping of its own and, never
 * touched otherwise, no memory. (The secure build tests before it writes;
 * its guard page lies there.) */
static size_t segment_tail_slack(size_t page_shift) {
  return BRISK_SECURE || page_shift == BRISK_HUGE_PAGE_SHIFT ? 0 : _brisk_os_page_size();
}

/* A segment of size-class pages is reserved with _brisk_os_reserve_pages:
 * where the system charges read-write mappings against its commit limit as
 * they are made (strict overcommit), only its header is committed here and
 * its pages as they are first taken (commit_through). */
static brisk_segment_t *reserve_page_segment(size_t reserved, size_t page_shift, size_t lead,
                                             size_t tail) {
  bool needs_commit;
  brisk_segment_t *segment =
      _brisk_os_reserve_pages(reserved, BRISK_SEGMENT_SIZE, lead, tail, &needs_commit, NULL);
  if (segment == NULL || !needs_commit) {
    if (segment != NULL) segment->committed_end = UINT32_MAX;
    return segment;
  }
  size_t header = brisk_align_up(offsetof(brisk_segment_t, pages) +
                                     (BRISK_SEGMENT_SIZE >> page_shift) * sizeof(brisk_page_t),
                                 _brisk_os_page_size());
  if (!_brisk_os_commit(segment, header, NULL)) {
    /* The release leaves the commit's ENOMEM in errno (os.h). */
    _brisk_os_release_guarded(segment, reserved, lead, tail, NULL);
    return NULL;
  }
  /* Page 0 is the header's and is never handed out: the rest of it stays
   * inaccessible. */
  segment->committed_end = (uint32_t)1 << page_shift;
  return segment;
}

brisk_segment_t *_brisk_segment_reserve(size_t mapped_size, size_t block_align, size_t page_shift) {
  size_t lead = brisk_secure_guard_size(), tail = segment_tail_guard(page_shift);
  size_t reserved = mapped_size + segment_tail_slack(page_shift);
  brisk_segment_t *segment;
  if (page_shift != BRISK_HUGE_PAGE_SHIFT) {
    segment = reserve_page_segment(reserved, page_shift, lead, tail);
  } else {
    segment = block_align == 0
                  ? _brisk_os_reserve_guarded(reserved, BRISK_SEGMENT_SIZE, 0, lead, tail, NULL)
                  : _brisk_os_reserve_guarded(reserved, block_align, BRISK_SEGMENT_SIZE, lead, tail,
                                              NULL);
    if (segment != NULL) segment->committed_end = UINT32_MAX;
  }
  if (segment == NULL) return NULL;
  segment->mapped_size = mapped_size;
  segment->page_shift = (uint8_t)page_shift;
  /* Relaxed: a thread that reads this slot for a block of the segment got
   * the block through some synchronisation that came after this store. */
  brisk_store_relaxed(map_slot(segment), (uint8_t)page_shift);
  return segment;
}

void _brisk_segment_unmap(brisk_segment_t *segment) {
  brisk_store_relaxed(map_slot(segment), 0);
  _brisk_os_release_guarded(segment, segment->mapped_size + segment_tail_slack(segment->page_shift),
                            brisk_secure_guard_size(), segment_tail_guard(segment->page_shift), NULL);
}

brisk_segment_t *_brisk_segment_resize(brisk_segment_t *segment, size_t new_size) {
  size_t old_size = segment->mapped_size;
  if (new_size <= old_size) {
    _brisk_os_release((uint8_t *)segment + new_size, old_size - new_size, NULL);
    segment->mapped_size = new_size;
    return segment;
  }
  if (_brisk_os_resize(segment, old_size, new_size, NULL)) {
    segment->mapped_size = new_size;
    return segment;
  }
  size_t lead = brisk_secure_guard_size();
  brisk_segment_t *moved = _brisk_os_reserve_guarded(new_size, BRISK_SEGMENT_SIZE, 0, lead, 0, NULL);
  if (moved == NULL) return NULL;
  /* Clear the old slot before the move frees the old range: once it is
   * free, another thread may map a segment there and set the same slot. */
  uint8_t page_shift = segment->page_shift;
  brisk_store_relaxed(map_slot(segment), 0);
  if (!_brisk_os_move(segment, old_size, moved, new_size, NULL)) {
    brisk_store_relaxed(map_slot(segment), page_shift);
    _brisk_os_release_guarded(moved, new_size, lead, 0, NULL);
    return NULL;
  }
  /* The pages left; the old guard below them stays behind. */
  _brisk_os_release((uint8_t *)segment - lead, lead, NULL);
  brisk_store_relaxed(map_slot(moved), page_shift);
  moved->mapped_size = new_size;
  /* The header travelled with the pages; the block's address (its low bits
   * in the descriptor) did not. */
  uint32_t block_offset = moved->pages[0].start_low - (uint32_t)(uintptr_t)segment;
  brisk_page_set_start(&moved->pages[0], (uint8_t *)moved + block_offset);
  return moved;
}

static void available_push(brisk_heap_t *heap, brisk_segment_t *segment) {
  brisk_segment_t **head = &heap->available[segment->kind];
  segment->prev = NULL;
  segment->next = *head;
  if (*head != NULL) (*head)->prev = segment;
  *head = segment;
  segment->in_available_list = true;
}

static void available_remove(brisk_heap_t *heap, brisk_segment_t *segment) {
  if (segment->prev != NULL) segment->prev->next = segment->next;
  else heap->available[segment->kind] = segment->next;
  if (segment->next != NULL) segment->next->prev = segment->prev;
  segment->next = segment->prev = NULL;
  segment->in_available_list = false;
}

/* The bytes of free pages still backed, of every kind. */
static size_t backed_free_bytes(const brisk_heap_t *heap) {
  size_t bytes = 0;
  for (int kind = 0; kind < BRISK_KIND_COUNT_PAGED; kind++) bytes += heap->purge_lists[kind].bytes;
  return bytes;
}

static void purge_list_remove(brisk_heap_t *heap, brisk_page_t *page) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
  size_t size = brisk_page_size(segment);
  brisk_purge_list_t *list = &heap->purge_lists[segment->kind];
  brisk_page_queue_remove(&list->pages, page);
  page->in_purge_list = 0;
  list->bytes -= size;
  brisk_global_stat_add(BRISK_STAT_FREE_PAGES_COMMITTED, -1);
  brisk_global_stat_add(BRISK_STAT_FREE_PAGE_BYTES_COMMITTED, -(int64_t)size);
}

static void purge_list_append(brisk_heap_t *heap, brisk_page_t *page, uint64_t now_ms) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
  brisk_purge_list_t *list = &heap->purge_lists[segment->kind];
  page->freed_at_ms = now_ms;
  brisk_page_queue_push_back(&list->pages, page);
  page->in_purge_list = 1;
  size_t size = brisk_page_size(segment);
  list->bytes += size;
  brisk_global_stat_add(BRISK_STAT_FREE_PAGES_COMMITTED, 1);
  brisk_global_stat_add(BRISK_STAT_FREE_PAGE_BYTES_COMMITTED, (int64_t)size);
}

static brisk_segment_t *segment_new(brisk_heap_t *heap, brisk_segment_kind_t kind) {
  brisk_segment_t *segment = _brisk_segment_reserve(BRISK_SEGMENT_SIZE, 0, page_shift_of_kind[kind]);
  if (segment == NULL) return NULL;
  size_t page_count = segment_page_count(kind);
  segment->kind = (uint8_t)kind;
  segment->page_count = (uint16_t)page_count;
  segment->used_pages = 0;
  segment->heap = heap;
  brisk_store_relaxed(&segment->owner_thread, heap->owner_thread);
  if (_brisk_options.huge_pages) _brisk_os_advise_huge_pages(segment, BRISK_SEGMENT_SIZE, NULL);
  /* The secure build keeps the metadata apart from the data: the rest of
   * page 0 after the page descriptors is a guard, so a linear overflow out
   * of the header or an underflow out of page 1 faults. */
  if (BRISK_SECURE) {
    size_t os_page = _brisk_os_page_size();
    size_t header = brisk_align_up(offsetof(brisk_segment_t, pages) + page_count * sizeof(brisk_page_t),
                                   os_page);
    size_t page0 = brisk_page_size(segment);
    if (header < page0 && !_brisk_os_guard((uint8_t *)segment + header, page0 - header, NULL)) {
      _brisk_segment_unmap(segment);
      return NULL;
    }
  }
  /* Fresh memory is zero, so page descriptors start free and uncommitted.
   * Page 0 holds the header and is never handed out: its owner stays 0, so
   * a free() of an address in the header takes the slow path and aborts. */
  for (size_t i = 0; i < page_count; i += 64) {
    size_t bits = page_count - i < 64 ? page_count - i : 64;
    segment->free_pages[i / 64] = bits == 64 ? ~(uint64_t)0 : (((uint64_t)1 << bits) - 1);
  }
  segment->free_pages[0] &= ~(uint64_t)1;
  /* No page serves a class yet: the secure build's free() must find out
   * from the descriptor alone (brisk_page_set_no_blocks). */
  if (BRISK_SECURE) {
    for (size_t i = 0; i < page_count; i++) {
      brisk_page_set_no_blocks(&segment->pages[i], (uintptr_t)segment + (i << segment->page_shift));
    }
  }
  heap->empty_segments[kind]++;
  brisk_global_stat_add(BRISK_STAT_SEGMENTS, 1);
  brisk_global_stat_add(BRISK_STAT_SEGMENT_BYTES, (int64_t)segment->mapped_size);
  available_push(heap, segment);
  segment->heap_next = heap->segments;
  if (heap->segments != NULL) heap->segments->heap_prev = segment;
  heap->segments = segment;
  return segment;
}

static void segment_release(brisk_heap_t *heap, brisk_segment_t *segment) {
  BRISK_ASSERT(segment->used_pages == 0 && segment->heap == heap);
  for (size_t i = 0; i < segment->page_count; i++) {
    if (segment->pages[i].in_purge_list) purge_list_remove(heap, &segment->pages[i]);
  }
  if (segment->in_available_list) available_remove(heap, segment);
  if (segment->heap_prev != NULL) segment->heap_prev->heap_next = segment->heap_next;
  else heap->segments = segment->heap_next;
  if (segment->heap_next != NULL) segment->heap_next->heap_prev = segment->heap_prev;
  heap->empty_segments[segment->kind]--;
  brisk_global_stat_add(BRISK_STAT_SEGMENTS, -1);
  brisk_global_stat_add(BRISK_STAT_SEGMENT_BYTES, -(int64_t)segment->mapped_size);
  _brisk_segment_unmap(segment);
}

/* Decommit every free page of a segment that still holds memory, one
 * system call per run of adjacent pages. Only the descriptors of free pages
 * (the bitmap's, under the memory lock like the bitmap) are read: a page in
 * use is its owner's, who writes its flags without the lock, and this may
 * run on another thread (brisk_collect(true)). */
static void segment_purge_all(brisk_heap_t *heap, brisk_segment_t *segment) {
  uint8_t *run_start = NULL;
  size_t run_size = 0;
  for (size_t i = 0; i <= segment->page_count; i++) {
    bool free_page = i < segment->page_count && (segment->free_pages[i / 64] >> (i % 64)) & 1;
    brisk_page_t *page = free_page ? &segment->pages[i] : NULL;
    if (page != NULL && page->in_purge_list) {
      size_t size;
      uint8_t *start = page_area(segment, page, &size);
      if (run_start == NULL) run_start = start;
      run_size += size;
      purge_list_remove(heap, page);
      page->is_committed = 0;
      brisk_global_stat_add(BRISK_STAT_BYTES_PURGED, (int64_t)size);
    } else if (run_start != NULL) {
      _brisk_os_decommit(run_start, run_size, NULL);
      run_start = NULL;
      run_size = 0;
    }
  }
}

/*
 * Purging. BRISK_PURGE_DELAY_MS is the base delay: a free page stays backed
 * that long before it is decommitted. A program whose memory use rises and
 * falls every few hundred milliseconds (a database running one statement
 * after another) would fault its pages in again after each purge, so each
 * heap learns, for each kind of page, how many bytes of free pages it wants
 * back later than the base delay (keep_bytes), and keeps that many of its
 * newest free pages of the kind past the base delay, for at most
 * BRISK_PURGE_DELAY_MAX_MS. What it learns from:
 *
 *   - a page faulted in (a fresh one, or one purged before) less than
 *     BRISK_PURGE_DELAY_MAX_MS after the heap purged pages of its kind by
 *     delay adds its size to keep_bytes, as long as the bytes purged then
 *     (and before, within that time) outnumber those faulted in since:
 *     memory the heap gave back and then needed again;
 *   - a page taken back from the list after waiting longer than the base
 *     delay (kept for it) confirms keep_bytes as it is.
 *
 * Without either, keep_bytes halves every BRISK_PURGE_DELAY_MAX_MS. Pages
 * beyond keep_bytes go at the base delay, oldest first (the newest count
 * toward keep_bytes whatever their age, so pages that a peak did not take
 * back go when the next trough frees newer ones), and every page goes after
 * the maximum: memory that sits unused goes back within
 * BRISK_PURGE_DELAY_MAX_MS. A program that takes back less than it freed
 * keeps only what it takes back. A base of 0 (purge at once) keeps nothing
 * past it, nor does a cold abandoned heap (nobody will want its pages soon).
 * Purges past the byte limit, by brisk_collect and on trims are not purges
 * by delay: nothing is learnt from what they give back.
 */
#define PURGE_DELAY_MAX_MS (_brisk_options.purge_delay_max_ms)

/* An abandoned heap already tidied: nobody is likely to adopt it soon, so
 * what empties in it goes back at once. A warm abandoned heap (not yet
 * tidied, heap.c) purges on the delays of a live one. */
static bool heap_is_cold(brisk_heap_t *heap) {
  return brisk_load_relaxed(&heap->abandoned) && atomic_load_explicit(&heap->tidied, memory_order_relaxed);
}

/* The bytes of the list's newest free pages kept past the base delay now. */
static size_t purge_keep_bytes(const brisk_purge_list_t *list, uint64_t now_ms) {
  uint64_t max = PURGE_DELAY_MAX_MS;
  if (max == 0 || now_ms <= list->keep_set_ms) return list->keep_bytes;
  uint64_t halvings = (now_ms - list->keep_set_ms) / max;
  return halvings < 64 ? list->keep_bytes >> halvings : 0;
}

/* Set keep_bytes as of now (its halving starts over), at most the limit on
 * free bytes kept backed. */
static void purge_keep_set(brisk_purge_list_t *list, uint64_t now_ms, size_t bytes) {
  size_t limit = PURGE_LIST_MAX_BYTES;
  list->keep_bytes = bytes < limit ? bytes : limit;
  list->keep_set_ms = now_ms;
}

/* page_alloc hands out page, of the list's kind, of size bytes: what that
 * teaches the list's keep_bytes. */
static void purge_keep_learn(brisk_purge_list_t *list, const brisk_page_t *page, size_t size) {
  uint64_t base = BRISK_PURGE_DELAY_MS;
  if (base == 0) return;
  if (!page->is_committed) {
    if (list->purged_bytes < size) return;
    uint64_t now = _brisk_os_now_ms();
    if (now < list->last_purge_ms || now - list->last_purge_ms >= PURGE_DELAY_MAX_MS) {
      list->purged_bytes = 0; /* purged too long ago to have been kept for */
      return;
    }
    list->purged_bytes -= size;
    purge_keep_set(list, now, purge_keep_bytes(list, now) + size);
    brisk_global_stat_add(BRISK_STAT_BYTES_REFAULTED, (int64_t)size);
  } else if (page->in_purge_list) {
    uint64_t now = _brisk_os_now_ms();
    if (now >= page->freed_at_ms && now - page->freed_at_ms > base) {
      purge_keep_set(list, now, purge_keep_bytes(list, now));
      brisk_global_stat_add(BRISK_STAT_BYTES_REUSED_LATE, (int64_t)size);
    }
  }
}

/* A recently freed page of this kind that still holds its memory, for a
 * class of block_size; NULL if none. Taking it costs no page faults, and it
 * stops that memory from being held for the purge delay while fresh pages
 * are faulted in beside it (threads that hand blocks to each other empty
 * and refill pages all the time). Among the BACKED_PAGES_SEARCHED newest,
 * one that last served blocks of that size (block_size stays set after a
 * page is retired), else the newest: a page taken for another size has its
 * new blocks' links and the program's writes land on other parts of it
 * than before, so over a few such turns all of it is touched, where a page
 * back in its old class touches what it did before. */
enum { BACKED_PAGES_SEARCHED = 8 };

static brisk_page_t *backed_free_page(brisk_heap_t *heap, brisk_segment_kind_t kind,
                                      size_t block_size) {
  brisk_page_t *newest = heap->purge_lists[kind].pages.tail;
  brisk_page_t *page = newest;
  for (int i = 0; i < BACKED_PAGES_SEARCHED && page != NULL; i++, page = page->prev) {
    if (page->block_size == block_size) return page;
  }
  return newest;
}

/* Under strict overcommit (reserve_page_segment) the pages of a segment
 * become read-write as they are first taken, COMMIT_STEP (or a page, if
 * larger) at a time to spare system calls. A segment hands out its lowest
 * free page first, so the committed part grows from the start and stays
 * one mapping; the last page brings the release build's tail slack with
 * it. false (errno ENOMEM) when the system refuses: the commit limit. */
#define COMMIT_STEP ((size_t)1 << 20)

static bool commit_through(brisk_segment_t *segment, size_t index) {
  size_t page_size = brisk_page_size(segment);
  size_t end = (index + 1) * page_size;
  if (end <= segment->committed_end) return true;
  size_t target = brisk_align_up(end, page_size > COMMIT_STEP ? page_size : COMMIT_STEP);
  if (target >= BRISK_SEGMENT_SIZE) {
    target = BRISK_SEGMENT_SIZE + segment_tail_slack(segment->page_shift);
  }
  if (!_brisk_os_commit((uint8_t *)segment + segment->committed_end, target - segment->committed_end,
                        NULL)) {
    return false;
  }
  segment->committed_end = (uint32_t)target;
  return true;
}

static brisk_page_t *page_alloc(brisk_heap_t *heap, brisk_segment_kind_t kind, size_t block_size) {
  brisk_page_t *backed = backed_free_page(heap, kind, block_size);
  brisk_segment_t *segment;
  size_t index;
  if (backed != NULL) {
    segment = brisk_segment_of((uintptr_t)backed);
    index = page_index(segment, backed);
    segment->free_pages[index / 64] &= ~((uint64_t)1 << (index % 64));
  } else {
    segment = heap->available[kind];
    if (segment == NULL) {
      segment = segment_new(heap, kind);
      if (segment == NULL) return NULL;
    }
    size_t word = 0;
    while (segment->free_pages[word] == 0) word++;
    index = word * 64 + brisk_count_trailing_zeros(segment->free_pages[word]);
    if (!commit_through(segment, index)) return NULL;
    segment->free_pages[word] &= segment->free_pages[word] - 1;
  }
  if (segment->used_pages++ == 0) heap->empty_segments[kind]--;
  if (segment->used_pages == segment->page_count - 1) available_remove(heap, segment);

  brisk_page_t *page = &segment->pages[index];
  BRISK_ASSERT(index != 0 && !page->in_use && brisk_load_relaxed(&segment->page_info[index]) == 0);
  purge_keep_learn(&heap->purge_lists[kind], page, brisk_page_size(segment));
  if (page->in_purge_list) purge_list_remove(heap, page);
  page->in_use = 1;
  brisk_global_stat_add(BRISK_STAT_PAGES_IN_USE, 1);
  brisk_global_stat_add(BRISK_STAT_PAGE_BYTES_IN_USE, (int64_t)brisk_page_size(segment));
  return page;
}

void _brisk_segments_set_owner_thread(brisk_heap_t *heap, uintptr_t thread) {
  _brisk_heap_lock_memory(heap);
  heap->owner_thread = thread;
  for (brisk_segment_t *segment = heap->segments; segment != NULL; segment = segment->heap_next) {
    brisk_store_relaxed(&segment->owner_thread, thread);
  }
  _brisk_heap_unlock_memory(heap);
}

brisk_page_t *_brisk_segment_page_alloc(brisk_heap_t *heap, brisk_segment_kind_t kind,
                                        size_t block_size) {
  _brisk_heap_lock_memory(heap);
  brisk_page_t *page = page_alloc(heap, kind, block_size);
  _brisk_heap_unlock_memory(heap);
  return page;
}

static void purge_page(brisk_heap_t *heap, brisk_page_t *page) {
  size_t size;
  uint8_t *start = page_area(brisk_segment_of((uintptr_t)page), page, &size);
  purge_list_remove(heap, page);
  _brisk_os_decommit(start, size, NULL);
  page->is_committed = 0;
  brisk_global_stat_add(BRISK_STAT_BYTES_PURGED, (int64_t)size);
}

static void purge_due(brisk_heap_t *heap, uint64_t now_ms, uint64_t delay_ms);
static void purge_down_to(brisk_heap_t *heap, size_t max_bytes);

void _brisk_segment_page_free(brisk_heap_t *heap, brisk_page_t *page) {
  _brisk_heap_lock_memory(heap);
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
  size_t index = page_index(segment, page);
  BRISK_ASSERT(page->in_use && segment->heap == heap && segment->used_pages > 0);
  BRISK_ASSERT((segment->free_pages[index / 64] & ((uint64_t)1 << (index % 64))) == 0);
  uint64_t now_ms = _brisk_os_now_ms();
  brisk_store_relaxed(&segment->page_info[index], 0);
  page->in_use = 0;
  /* Class 0 as in its info: a block of the class freed twice by other
   * threads fails the drain's check of its class (heap.c: drain_batch). */
  page->class_index = 0;
  if (BRISK_SECURE) {
    brisk_page_set_no_blocks(page, (uintptr_t)segment + (index << segment->page_shift));
  }
  brisk_global_stat_add(BRISK_STAT_PAGES_IN_USE, -1);
  brisk_global_stat_add(BRISK_STAT_PAGE_BYTES_IN_USE, -(int64_t)brisk_page_size(segment));
  page->free = NULL;
  page->local_free = NULL;
  segment->free_pages[index / 64] |= (uint64_t)1 << (index % 64);
  if (!segment->in_available_list) available_push(heap, segment);
  if (page->is_committed) {
    purge_list_append(heap, page, now_ms);
    _brisk_heap_idle_rearm(heap, now_ms);
    /* A warm abandoned heap keeps no large page that empties (heap.c). */
    if (brisk_load_relaxed(&heap->abandoned) && segment->kind == BRISK_KIND_LARGE) purge_page(heap, page);
  }

  if (--segment->used_pages == 0) {
    heap->empty_segments[segment->kind]++;
    /* Keep one empty segment per kind so that a heap cycling through a
     * page's worth of memory (or a heap adopted by thread after thread)
     * does not map and unmap a segment each time. A cold abandoned heap's
     * spare gives its memory back at once: nobody may come to purge it. */
    if (heap->empty_segments[segment->kind] > 1) {
      segment_release(heap, segment);
    } else if (heap_is_cold(heap)) {
      segment_purge_all(heap, segment);
    }
  }
  /* Purge here too, not only in malloc's slow path: a thread that only
   * frees (or sits on fast paths) must still give memory back. Past the
   * byte limit the oldest pages go at once, down to half the limit, so a
   * workload cycling just over the limit does not refault everything. */
  purge_due(heap, now_ms, BRISK_PURGE_DELAY_MS);
  if (backed_free_bytes(heap) > PURGE_LIST_MAX_BYTES) purge_down_to(heap, PURGE_LIST_MAX_BYTES / 2);
  _brisk_heap_unlock_memory(heap);
  _brisk_heaps_tidy_stale(now_ms);
}

/* The oldest free page still backed, of any kind; NULL if none. */
static brisk_page_t *oldest_backed_page(brisk_heap_t *heap) {
  brisk_page_t *oldest = NULL;
  for (int kind = 0; kind < BRISK_KIND_COUNT_PAGED; kind++) {
    brisk_page_t *page = heap->purge_lists[kind].pages.head;
    if (page != NULL && (oldest == NULL || page->freed_at_ms < oldest->freed_at_ms)) oldest = page;
  }
  return oldest;
}

static void purge_down_to(brisk_heap_t *heap, size_t max_bytes) {
  while (backed_free_bytes(heap) > max_bytes) purge_page(heap, oldest_backed_page(heap));
}

void _brisk_heap_purge_down_to(brisk_heap_t *heap, size_t max_bytes) {
  _brisk_heap_lock_memory(heap);
  purge_down_to(heap, max_bytes);
  _brisk_heap_unlock_memory(heap);
}

static void purge_due(brisk_heap_t *heap, uint64_t now_ms, uint64_t base_ms) {
  bool keeps = base_ms != 0 && !heap_is_cold(heap);
  uint64_t max_ms = PURGE_DELAY_MAX_MS;
  for (int kind = 0; kind < BRISK_KIND_COUNT_PAGED; kind++) {
    brisk_purge_list_t *list = &heap->purge_lists[kind];
    brisk_page_t *page;
    if (base_ms == 0) {
      while ((page = list->pages.head) != NULL) {
        segment_purge_all(heap, brisk_segment_of((uintptr_t)page)); /* whole runs at once */
      }
      continue;
    }
    size_t keep_bytes = SIZE_MAX; /* worked out once a page is due */
    while ((page = list->pages.head) != NULL) {
      /* Oldest first. A time later than now_ms was read after now_ms was. */
      if (page->freed_at_ms > now_ms || now_ms - page->freed_at_ms < base_ms) break;
      if (now_ms - page->freed_at_ms < max_ms) {
        if (keep_bytes == SIZE_MAX) keep_bytes = keeps ? purge_keep_bytes(list, now_ms) : 0;
        if (list->bytes <= keep_bytes) break;
        if (keeps) {
          /* Learnt from if it is faulted in again within the maximum. */
          if (now_ms - list->last_purge_ms >= max_ms) list->purged_bytes = 0;
          list->purged_bytes += brisk_page_size(brisk_segment_of((uintptr_t)page));
          list->last_purge_ms = now_ms;
        }
      }
      purge_page(heap, page);
    }
  }
}

void _brisk_heap_purge(brisk_heap_t *heap, uint64_t now_ms, uint64_t base_ms) {
  _brisk_heap_lock_memory(heap);
  purge_due(heap, now_ms, base_ms);
  _brisk_heap_unlock_memory(heap);
}

void _brisk_heap_release_empty_segments(brisk_heap_t *heap, bool keep_spare) {
  _brisk_heap_lock_memory(heap);
  for (int kind = 0; kind < BRISK_KIND_COUNT_PAGED; kind++) {
    brisk_segment_t *segment = heap->available[kind];
    bool kept_spare = !keep_spare;
    while (segment != NULL) {
      brisk_segment_t *next = segment->next;
      if (segment->used_pages == 0) {
        if (kept_spare) {
          segment_release(heap, segment);
        } else if (heap_is_cold(heap)) {
          segment_purge_all(heap, segment); /* nobody may adopt it soon */
        }
        kept_spare = true;
      }
      segment = next;
    }
  }
  _brisk_heap_unlock_memory(heap);
}

/* The blocks a page in use holds now. Its owner changes `used` on every
 * malloc and free with plain stores; a snapshot of another thread reads it
 * anyway (an aligned 32-bit load: a count at most a few operations old), so
 * ThreadSanitizer is kept from instrumenting this one read, as it is for
 * `pinned`, which the owner changes when a class queue's head does. The
 * owner's own fold (stats.c) reads the same way. */
BRISK_NOINLINE BRISK_NO_TSAN uint32_t _brisk_page_live_blocks(const brisk_heap_t *heap,
                                                             const brisk_page_t *page) {
  uint32_t used = *(const volatile uint32_t *)&page->used & ~BRISK_PAGE_FULL_FLAG;
  /* The head page of a class queue holds one phantom count (page.c). */
  const brisk_page_t *pinned = *(const brisk_page_t *const volatile *)&heap->pinned[page->class_index];
  if (pinned == page && used != 0) used--;
  return used;
}

/* How long a snapshot waits for a heap's memory lock: it is held for a page
 * change or a purge, far less than this, unless its holder was stopped
 * there (then a report at exit must not hang on it). */
#define SNAPSHOT_LOCK_PATIENCE_MS 100

bool _brisk_heap_count_live_blocks(brisk_heap_t *heap, uint64_t live[BRISK_CLASS_COUNT]) {
  if (!_brisk_heap_try_lock_memory(heap, SNAPSHOT_LOCK_PATIENCE_MS)) return false;
  for (brisk_segment_t *segment = heap->segments; segment != NULL; segment = segment->heap_next) {
    for (size_t i = 1; i < segment->page_count; i++) {
      if (segment->free_pages[i / 64] & ((uint64_t)1 << (i % 64))) continue;
      const brisk_page_t *page = &segment->pages[i];
      /* acquire: pairs with page_init's release store of the page's info,
       * so the page's class is the one it serves now; the memory lock
       * keeps the page from being freed and set up again while we look. A
       * page just taken from the segment and not set up yet has none. */
      if (atomic_load_explicit(&segment->page_info[i], memory_order_acquire) == 0) continue;
      live[page->class_index] += _brisk_page_live_blocks(heap, page);
    }
  }
  _brisk_heap_unlock_memory(heap);
  return true;
}
