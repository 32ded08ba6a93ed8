/*
 * validate.c — the general allocator's heap validator: every structure of a
 * heap checked against the others, one "brisk: heap check: ..." line and
 * abort at the first disagreement.
 *
 *   _brisk_heap_validate(heap)      by the heap's owner (or the holder of an
 *                                   abandoned heap's drain_lock)
 *     each class queue: links both ways, each page in use, of this class
 *       and heap, not marked full; its head pinned while a thread owns the
 *       heap; the direct table's words of the class point at the head
 *     the full list: links, flags, the full flag in `used`
 *     the kept set of empty pages against the pages marked kept
 *     each page on a list: its free and local_free lists inside the page,
 *       on block starts, no block twice, and with the live blocks no more
 *       than the page has carved (blocks freed by other threads and not
 *       yet returned count as live)
 *     each segment of the heap: owned by it; its free-page bitmap against
 *       its pages' in_use flags and used_pages; every page in use is on
 *       exactly one of the heap's lists; a free page holds memory if and
 *       only if it is on a purge list; the purge lists' pages free, of
 *       their list's kind, oldest first, their bytes summing to each
 *       list's total, and the pages marked as on a list to all of them
 *   _brisk_heaps_validate_idle()    (heap.c) every heap no thread owns,
 *                                   for tests at quiet points
 *
 * Debug builds (BRISK_DEBUG, on in the sanitizer builds) validate the heap
 * in every 16th housekeeping; stress tests call both at quiet points. One
 * thread validates at a time: a call that finds another at it returns.
 */
#include "general/internal.h"
#include "general/size_class.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static BRISK_COLD BRISK_NORETURN void check_failed(const brisk_page_t *page, const char *what) {
  char message[256];
  if (page != NULL) {
    snprintf(message, sizeof message, "brisk: heap check: %s (page %p, size class %u)\n", what,
             (const void *)page, (unsigned)page->class_index);
  } else {
    snprintf(message, sizeof message, "brisk: heap check: %s\n", what);
  }
  _brisk_os_write_error(message);
  abort();
}

#define CHECK(condition, page, what) \
  do {                               \
    if (BRISK_UNLIKELY(!(condition))) check_failed((page), (what)); \
  } while (0)

/* One bit per block of a page: a page holds at most 65535 blocks. */
typedef struct block_marks_s {
  uint64_t bits[65536 / 64];
} block_marks_t;

/* Walk one of a page's block lists; returns its length. */
static size_t check_block_list(const brisk_page_t *page, const brisk_block_t *block,
                               block_marks_t *marks) {
  uintptr_t start = (uintptr_t)brisk_page_start(page);
  uintptr_t end = start + (uintptr_t)page->capacity * brisk_page_block_size(page);
  size_t length = 0;
  for (; block != NULL; block = brisk_link_decode(block, block->next)) {
    uintptr_t address = (uintptr_t)block;
    CHECK(address >= start && address < end, page, "a free list leaves its page's carved blocks");
    CHECK(brisk_page_is_block_start(page, address), page, "a free list holds a pointer inside a block");
    size_t index = brisk_page_block_index(page, address);
    uint64_t bit = (uint64_t)1 << (index % 64);
    CHECK((marks->bits[index / 64] & bit) == 0, page, "a block is free twice (double free?)");
    marks->bits[index / 64] |= bit;
    CHECK(++length <= page->capacity, page, "a free list is longer than the page");
  }
  return length;
}

static void check_page(const brisk_heap_t *heap, const brisk_page_t *page, size_t class_index,
                       bool full, block_marks_t *marks) {
  CHECK(page->in_use, page, "a page on a list is not in use");
  CHECK(page->class_index == class_index, page, "a page is on another class's queue");
  const brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
  uint8_t info = brisk_load_relaxed(&segment->page_info[page - segment->pages]);
  CHECK((info & BRISK_PAGE_INFO_CLASS) == class_index, page,
        "a page's info in its segment names another class");
  CHECK(segment->heap == heap, page, "a page's segment belongs to another heap");
  CHECK(!page->in_purge_list, page, "a page in use is on the purge list");
  CHECK(page->capacity <= page->reserved, page, "a page carved more blocks than it holds");
  CHECK(page->in_full_list == full, page, "a page's full flag disagrees with its list");
  CHECK(((page->used & BRISK_PAGE_FULL_FLAG) != 0) == full, page,
        "the full flag in used disagrees with the page's list");
  memset(marks, 0, sizeof *marks);
  size_t free_blocks = check_block_list(page, page->free, marks);
  free_blocks += check_block_list(page, page->local_free, marks);
  size_t used = page->used & ~BRISK_PAGE_FULL_FLAG;
  size_t pins = heap->pinned[class_index] == page;
  CHECK(used >= pins, page, "a pinned page has lost its pin's count");
  CHECK(used - pins + free_blocks <= page->capacity, page,
        "live and free blocks add up to more than the page carved (double free?)");
}

static void check_queue_links(const brisk_page_queue_t *queue, const char *what) {
  const brisk_page_t *previous = NULL;
  for (const brisk_page_t *page = queue->head; page != NULL; page = page->next) {
    CHECK(page->prev == previous, page, what);
    previous = page;
  }
  CHECK(queue->tail == previous, previous, what);
}

static size_t check_segment(const brisk_heap_t *heap, const brisk_segment_t *segment,
                            size_t *purge_bytes, size_t *purge_pages) {
  CHECK(segment->heap == heap, NULL, "a segment on a heap's list belongs to another heap");
  CHECK((segment->free_pages[0] & 1) == 0, NULL, "a segment's header page is marked free");
  size_t in_use = 0;
  for (size_t i = 1; i < segment->page_count; i++) {
    const brisk_page_t *page = &segment->pages[i];
    bool marked_free = (segment->free_pages[i / 64] >> (i % 64)) & 1;
    CHECK(marked_free == !page->in_use, page, "a segment's free-page bitmap disagrees with a page");
    if (page->in_use) {
      in_use++;
    } else {
      CHECK(brisk_load_relaxed(&segment->page_info[i]) == 0, page, "a free page has a class");
      /* Purging learns from this: a free page taken with no memory was
       * faulted in again (segment.c). */
      CHECK(page->in_purge_list == page->is_committed, page,
            "a free page is on the purge list without memory, or holds memory off it");
      /* The secure build's free() reads a block on a page that passes the
       * block-start test without asking whether it serves a class. */
      uintptr_t base = (uintptr_t)segment + (i << segment->page_shift);
      CHECK(!BRISK_SECURE || (!brisk_page_is_block_start(page, base) &&
                              !brisk_page_is_block_start(page, base + BRISK_SECURE_PAGE_LEAD)),
            page, "a free page's descriptor passes free()'s block-start test");
      if (page->in_purge_list) {
        (*purge_pages)++;
        *purge_bytes += brisk_page_size(segment);
      }
    }
  }
  CHECK(in_use == segment->used_pages, NULL, "a segment's count of pages in use is wrong");
  return in_use;
}

void _brisk_heap_validate(brisk_heap_t *heap) {
  if (heap->is_empty_heap) return;
  /* 8 KiB: neither on the stack nor in thread-local storage (that would
   * grow every thread's, and keep the library from being dlopen'ed). One
   * thread validates at a time; another that comes meanwhile skips its
   * check rather than wait (a forked child may inherit the lock held). */
  static block_marks_t marks;
  static pthread_mutex_t marks_lock = PTHREAD_MUTEX_INITIALIZER;
  if (pthread_mutex_trylock(&marks_lock) != 0) return;
  bool owned = !brisk_load_relaxed(&heap->abandoned);
  size_t pages_on_lists = 0, kept_pages = 0;
  for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) {
    const brisk_page_queue_t *queue = &heap->queues[c];
    check_queue_links(queue, "a class queue's links disagree");
    for (const brisk_page_t *page = queue->head; page != NULL; page = page->next) {
      check_page(heap, page, c, false, &marks);
      pages_on_lists++;
      kept_pages += page->kept_empty;
    }
    const brisk_page_t *pinned = heap->pinned[c];
    CHECK(pinned == NULL || pinned == queue->head, pinned, "a pinned page is not its queue's head");
    CHECK(!owned || pinned == queue->head, queue->head, "a queue's head is not pinned");
    size_t size = brisk_class_to_size(c);
    if (size <= BRISK_DIRECT_MAX) {
      const brisk_page_t *expected = queue->head != NULL ? queue->head : &_brisk_page_empty;
      CHECK(heap->direct[size / 8] == expected, queue->head,
            "malloc's direct table does not point at its class's head page");
    }
  }
  check_queue_links(&heap->full_pages, "the full list's links disagree");
  for (const brisk_page_t *page = heap->full_pages.head; page != NULL; page = page->next) {
    check_page(heap, page, page->class_index, true, &marks);
    pages_on_lists++;
    kept_pages += page->kept_empty;
  }
  /* A page in the kept set may be in use again until housekeeping drops it. */
  CHECK(kept_pages == heap->kept_empty_count, NULL,
        "the pages marked kept empty disagree with the heap's kept set");
  CHECK(owned || heap->kept_empty_count == 0, NULL, "a heap no thread owns keeps empty pages");
  for (uint32_t i = 0; i < heap->kept_empty_count; i++) {
    CHECK(heap->kept_empty[i]->kept_empty && heap->kept_empty[i]->in_use, heap->kept_empty[i],
          "a page in the kept set is not marked kept, or serves no class");
  }

  /* Segments, the purge list and the page maps change under the memory
   * lock (another thread's brisk_collect(true) purges). */
  _brisk_heap_lock_memory(heap);
  size_t pages_in_use = 0, purge_bytes = 0, purge_pages = 0;
  for (const brisk_segment_t *segment = heap->segments; segment != NULL;
       segment = segment->heap_next) {
    CHECK(segment->heap_next == NULL || segment->heap_next->heap_prev == segment, NULL,
          "a heap's segment list links disagree");
    pages_in_use += check_segment(heap, segment, &purge_bytes, &purge_pages);
  }
  size_t purge_list_pages = 0, lists_bytes = 0;
  for (int kind = 0; kind < BRISK_KIND_COUNT_PAGED; kind++) {
    const brisk_purge_list_t *list = &heap->purge_lists[kind];
    check_queue_links(&list->pages, "a purge list's links disagree");
    uint64_t freed_before = 0;
    size_t list_bytes = 0;
    for (const brisk_page_t *page = list->pages.head; page != NULL; page = page->next) {
      CHECK(page->in_purge_list && !page->in_use, page, "a page on the purge list is in use");
      CHECK(brisk_segment_of((uintptr_t)page)->heap == heap, page,
            "a page on the purge list belongs to another heap");
      CHECK(brisk_segment_of((uintptr_t)page)->kind == kind, page,
            "a page is on the purge list of another kind");
      CHECK(page->freed_at_ms >= freed_before, page, "a purge list is not oldest first");
      freed_before = page->freed_at_ms;
      list_bytes += brisk_page_size(brisk_segment_of((uintptr_t)page));
      purge_list_pages++;
    }
    CHECK(list_bytes == list->bytes, NULL, "a purge list's byte total is wrong");
    lists_bytes += list->bytes;
  }
  CHECK(purge_list_pages == purge_pages, NULL, "the purge list misses a page marked as on it");
  CHECK(purge_bytes == lists_bytes, NULL,
        "the pages marked as on a purge list do not add up to the lists' byte totals");
  _brisk_heap_unlock_memory(heap);
  CHECK(pages_on_lists == pages_in_use, NULL,
        "a page in use is on none of its heap's lists, or on two");
  pthread_mutex_unlock(&marks_lock);
}
