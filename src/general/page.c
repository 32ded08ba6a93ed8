/*
 * page.c — size-class pages and the slow paths of malloc.
 *
 *   _brisk_malloc_generic(size, heap)
 *     a size above 1 KiB whose class page has a free block: pop it
 *     else malloc_slow:
 *     first call of a thread: _brisk_heap_init_thread (a thread whose exit
 *       handler has run, in a later key destructor: for this call only,
 *       then _brisk_heap_hand_back)
 *     remote frees waiting: _brisk_heap_drain_remote; every 64 calls:
 *       housekeeping (which also posts this thread's outbox)
 *     size > 512 KiB: _brisk_huge_alloc
 *     find_page(class): walk the class queue from its head; a page with
 *       nothing to give moves to heap->full_pages (flag in used); none left:
 *       a fresh page from _brisk_segment_page_alloc
 *   _brisk_page_free_slow(heap, page, freed) used hit 0, or the page was full
 *     full: back to its class queue; empty: retire it to its segment (and
 *     post the heap's outbox of remote frees). The head page of each queue
 *     is pinned (one phantom count in used), so a loop of malloc/free of one
 *     block never comes here and never retires and re-initialises a page
 *     each time.
 *
 * A page's lists (free: carved blocks, the owner's frees and other
 * threads' frees once drained, last in first out; local_free: in the
 * secure build the one block freed last, held back, internal.h) and its
 * queue links belong to the owning heap's thread; nothing here takes a
 * lock or an atomic except the stores of the segment's page info when a
 * page starts serving a class.
 */
#include "general/alloc.h"
#include "general/size_class.h"
#include "os/os.h"

#include <errno.h>
#include <string.h>

/* Bytes carved into a page's free list at a time: touching a whole 64 KiB
 * page up front would cost RSS for classes that see few allocations. */
#define PAGE_EXTEND_BYTES 4096
#define PAGE_EXTEND_MIN_BLOCKS 4

static void queue_head_changed(brisk_heap_t *heap, size_t class_index);

/*
 * A page that empties (its last block freed; never a queue's pinned head)
 * stays in its class queue, carved, until housekeeping finds it empty at
 * two passes in a row: a loop that fills and empties a few pages (a batch
 * of blocks allocated, then freed) would otherwise give them back to their
 * segment and set them up again every time (the segment's lock, bitmap
 * and purge list, page_init). At most BRISK_KEPT_EMPTY_PAGES pages and
 * BRISK_KEPT_EMPTY_BYTES per heap, only while a thread owns the heap; past
 * that a page that empties is retired at once. kept_seen is cleared when
 * the page empties again, so a page in use between two passes stays.
 */
static bool keep_empty_page(brisk_heap_t *heap, brisk_page_t *page) {
  /* A heap nobody owns has no housekeeping to give a kept page back: a
   * page emptied by the frees drained on its behalf is retired at once
   * (thread exit empties the set: _brisk_heap_retire_kept_empty). */
  if (brisk_load_relaxed(&heap->abandoned)) return false;
  if (page->kept_empty) {
    page->kept_seen = 0;
    return true;
  }
  if (heap->kept_empty_count == BRISK_KEPT_EMPTY_PAGES) return false;
  size_t bytes = brisk_page_size(brisk_segment_of((uintptr_t)page));
  for (uint32_t i = 0; i < heap->kept_empty_count; i++) {
    bytes += brisk_page_size(brisk_segment_of((uintptr_t)heap->kept_empty[i]));
  }
  if (bytes > BRISK_KEPT_EMPTY_BYTES) return false;
  heap->kept_empty[heap->kept_empty_count++] = page;
  page->kept_empty = 1;
  page->kept_seen = 0;
  return true;
}

/* Off the kept set: the last entry moves into the page's place. */
static void unkeep_page(brisk_heap_t *heap, brisk_page_t *page) {
  for (uint32_t i = 0; i < heap->kept_empty_count; i++) {
    if (heap->kept_empty[i] != page) continue;
    heap->kept_empty[i] = heap->kept_empty[--heap->kept_empty_count];
    page->kept_empty = 0;
    return;
  }
  BRISK_ASSERT(!"a kept page is missing from its heap's kept set");
}

static void retire_page(brisk_heap_t *heap, brisk_page_t *page) {
  BRISK_ASSERT(page->used == 0 && !page->in_full_list);
  if (page->kept_empty) unkeep_page(heap, page);
  BRISK_ASSERT(heap->pinned[page->class_index] != page);
  size_t class_index = page->class_index;
  brisk_page_queue_t *queue = &heap->queues[class_index];
  bool was_head = queue->head == page;
  brisk_page_queue_remove(queue, page);
  _brisk_page_fold_stats(heap, page);
  atomic_fetch_sub_explicit(&_brisk_class_pages[class_index], 1, memory_order_relaxed);
  _brisk_segment_page_free(heap, page); /* may unmap the page's segment */
  if (was_head) queue_head_changed(heap, class_index);
}

/* Called after every change of a class queue's head: moves the pin to the
 * new head (only while a thread owns the heap), retires the old head if that
 * leaves it empty, and points malloc's direct table at the new head (or at
 * the static empty page, which sends the next malloc to the slow path). */
static void queue_head_changed(brisk_heap_t *heap, size_t class_index) {
  brisk_page_t *head = heap->queues[class_index].head;
  brisk_page_t *old = heap->pinned[class_index];
  if (old != head) {
    bool owned = !brisk_load_relaxed(&heap->abandoned);
    heap->pinned[class_index] = owned ? head : NULL;
    if (owned && head != NULL) head->used++;
    if (old != NULL && --old->used == 0) retire_page(heap, old);
  }
  size_t size = brisk_class_to_size(class_index);
  if (size > BRISK_DIRECT_MAX) return;
  brisk_page_t *direct = head != NULL ? head : &_brisk_page_empty;
  if (heap->direct[size / 8] == direct) return; /* a class's words change together */
  size_t first_word = class_index == 1 ? 0 : brisk_class_to_size(class_index - 1) / 8 + 1;
  for (size_t word = first_word; word <= size / 8; word++) heap->direct[word] = direct;
}

static void unpin_classes(brisk_heap_t *heap, size_t first_class, bool only_empty) {
  for (size_t class_index = first_class; class_index < BRISK_CLASS_COUNT; class_index++) {
    brisk_page_t *page = heap->pinned[class_index];
    if (page == NULL || (only_empty && page->used != 1)) continue;
    heap->pinned[class_index] = NULL;
    if (--page->used == 0) retire_page(heap, page);
  }
}

void _brisk_heap_unpin_all(brisk_heap_t *heap) {
  unpin_classes(heap, 1, false);
}

void _brisk_heap_unpin_empty_large(brisk_heap_t *heap) {
  unpin_classes(heap, BRISK_CLASS_MEDIUM_LAST + 1, true);
}

void _brisk_heap_retire_empty_heads(brisk_heap_t *heap) {
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    brisk_page_t *page = heap->pinned[class_index];
    uintptr_t snapshot = 0;
    if (page != NULL && page->used == 1) { /* only the pin: empty right now */
      snapshot = (uintptr_t)page->free ^ ((uintptr_t)page->local_free << 1) ^ (uintptr_t)page;
    }
    /* Retire only a head found empty, with untouched free lists, at two
     * passes in a row: one that is merely between a malloc and its free in
     * a busy loop would be re-initialised at once. */
    bool idle = snapshot != 0 && snapshot == heap->idle_head_snapshot[class_index];
    heap->idle_head_snapshot[class_index] = idle ? 0 : snapshot;
    if (!idle) continue;
    heap->pinned[class_index] = NULL;
    page->used = 0;
    retire_page(heap, page); /* pins the next head, if any */
  }
}

void _brisk_heap_retire_kept_empty(brisk_heap_t *heap, bool all) {
  uint32_t i = 0;
  while (i < heap->kept_empty_count) {
    brisk_page_t *page = heap->kept_empty[i];
    /* Either call moves the last entry to i: look at i again. A page still
     * empty is no queue's pinned head (that counts one). */
    if (page->used != 0) {
      unkeep_page(heap, page);
    } else if (all || page->kept_seen) {
      retire_page(heap, page);
    } else {
      page->kept_seen = 1;
      i++;
    }
  }
}

void _brisk_heap_pin_all(brisk_heap_t *heap) {
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    brisk_page_t *head = heap->queues[class_index].head;
    if (head != NULL && heap->pinned[class_index] == NULL) {
      head->used++;
      heap->pinned[class_index] = head;
    }
  }
}

/* Whether the free blocks a page has (capacity - used: on its lists, or in
 * another thread's outbox on their way back) are fewer than half an
 * extension, so that malloc should carve more of the page: otherwise a
 * working set that just fills the carved part (64 live blocks of 64 B) gets
 * one block per visit to the slow path, and every malloc comes back. */
BRISK_INLINE bool page_is_short(const brisk_page_t *page) {
  return (uint32_t)page->capacity - page->used < page->extend_threshold;
}

static size_t page_extend_count(const brisk_page_t *page) {
  size_t count = PAGE_EXTEND_BYTES / brisk_page_block_size(page);
  return count < PAGE_EXTEND_MIN_BLOCKS ? PAGE_EXTEND_MIN_BLOCKS : count;
}

/* A thread's random numbers for the secure build's free-list order
 * (xorshift64*, seeded from the process keys and the thread). */
static BRISK_TLS uint64_t random_state;

static uint64_t random_next(void) {
  uint64_t x = random_state;
  if (x == 0) x = _brisk_secure_keys[1] ^ (uintptr_t)&random_state ^ 0x9E3779B97F4A7C15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  random_state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* The secure build's page_extend: the count new blocks go on the free list
 * in a random order (a shuffle), each with its free tag and encoded link. */
static BRISK_NOINLINE void secure_extend(brisk_page_t *page, uint8_t *first, size_t count,
                                         size_t block_size) {
  uint16_t order[PAGE_EXTEND_BYTES / 8]; /* count <= 4096 / 8: blocks are 8 bytes or more */
  for (size_t i = 0; i < count; i++) order[i] = (uint16_t)i;
  for (size_t i = count - 1; i > 0; i--) {
    /* A uniform index in [0, i]: the random word scaled by i + 1, the high
     * half of the product (Lemire, 2019), one multiplication where a
     * division took tens of cycles for every block carved. */
    size_t j = (size_t)(((unsigned __int128)random_next() * (i + 1)) >> 64);
    uint16_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t i = count; i-- > 0;) {
    brisk_block_t *block = (brisk_block_t *)(first + (size_t)order[i] * block_size);
    ((brisk_word_t *)block)[1] = brisk_free_tag(block);
    brisk_page_push(page, &page->free, block);
  }
}

static void page_extend(brisk_page_t *page) {
  size_t remaining = (size_t)page->reserved - page->capacity;
  size_t count = page_extend_count(page);
  if (count > remaining) count = remaining;
  size_t block_size = brisk_page_block_size(page);
  uint8_t *first = brisk_page_start(page) + (size_t)page->capacity * block_size;
  page->capacity = (uint16_t)(page->capacity + count);
  if (BRISK_SECURE) {
    secure_extend(page, first, count, block_size);
    return;
  }
  uint8_t *block = first;
  for (size_t i = 1; i < count; i++) {
    ((brisk_block_t *)block)->next = (brisk_block_t *)(block + block_size);
    block += block_size;
  }
  ((brisk_block_t *)block)->next = page->free;
  page->free = (brisk_block_t *)first;
}

static void page_init(brisk_page_t *page, size_t class_index) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
  size_t index = (size_t)(page - segment->pages);
  size_t block_size = brisk_class_to_size(class_index);
  size_t usable = brisk_page_size(segment);
  /* The secure build's blocks start after a lead (internal.h). */
  brisk_page_set_start(page, (uint8_t *)segment + index * usable + BRISK_SECURE_PAGE_LEAD);
  page->class_index = (uint8_t)class_index;
  page->block_size = (uint32_t)block_size;
  page->reserved = (uint16_t)((usable - BRISK_SECURE_PAGE_LEAD) / block_size);
  page->block_magic = brisk_page_block_magic(block_size, page->reserved, BRISK_SECURE_PAGE_LEAD);
  page->capacity = 0;
  page->used = 0;
  page->free = NULL;
  page->local_free = NULL;
  page->is_committed = 1;
  page->live_at_fold = 0;
  page->extend_threshold = (uint16_t)(page_extend_count(page) / 2);
  /* release: a statistics snapshot that sees the page's info sees its
   * class and size above (_brisk_heap_count_live_blocks). */
  atomic_store_explicit(&segment->page_info[index], (uint8_t)class_index, memory_order_release);
  atomic_fetch_add_explicit(&_brisk_class_pages[class_index], 1, memory_order_relaxed);
  page_extend(page);
}

/* A page of the class with a free block, at the head of the class queue.
 * Inlined in both its callers: malloc's slow path, and the cold retry. */
BRISK_INLINE brisk_page_t *find_page(brisk_heap_t *heap, size_t class_index) {
  brisk_page_queue_t *queue = &heap->queues[class_index];
  brisk_page_t *original_head = queue->head;
  brisk_page_t *page = original_head;
  while (page != NULL) {
    brisk_page_t *next = page->next;
    /* The secure build's held block (the release build keeps none). */
    if (BRISK_SECURE && page->free == NULL) {
      page->free = page->local_free;
      page->local_free = NULL;
    }
    /* Carve more of the page when what came back is short
     * (page_is_short). */
    if (page->capacity < page->reserved &&
        (page->free == NULL || page_is_short(page))) {
      page_extend(page);
    }
    if (page->free != NULL) break;
    /* Full: its heap learns its live blocks now, so that the process's
     * bytes in use (and peak) follow a growing heap. */
    _brisk_page_fold_stats(heap, page);
    brisk_page_queue_remove(queue, page);
    page->used |= BRISK_PAGE_FULL_FLAG;
    page->in_full_list = 1;
    brisk_page_queue_push_back(&heap->full_pages, page);
    page = next;
  }
  if (page == NULL) {
    page = _brisk_segment_page_alloc(heap, brisk_class_to_kind(class_index),
                                      brisk_class_to_size(class_index));
    if (page != NULL) {
      page_init(page, class_index);
      brisk_page_queue_push_front(queue, page);
    }
  } else if (page != queue->head) {
    brisk_page_queue_remove(queue, page);
    brisk_page_queue_push_front(queue, page);
  }
  if (queue->head != original_head) queue_head_changed(heap, class_index);
  return page;
}

/* Out of memory: what brisk holds unused may be in the way; then once more. */
static BRISK_COLD brisk_page_t *find_page_after_reclaim(brisk_heap_t *heap, size_t class_index) {
  return _brisk_heap_reclaim(heap, BRISK_SEGMENT_SIZE) ? find_page(heap, class_index) : NULL;
}

static bool remote_queue_maybe_nonempty(const brisk_heap_t *heap) {
  return heap->remote_head != (uintptr_t)&heap->remote_stub ||
         brisk_load_relaxed(&heap->remote_tail) != &heap->remote_stub;
}

static BRISK_NOINLINE void *malloc_slow(brisk_heap_t *heap, size_t size, bool zero);

/* Whether malloc may put the head page's local_free (the secure build's
 * held block; the release build keeps none) on its malloc list without the
 * slow path: find_page would take it without carving more, and none of the
 * slow path's chores is due (no remote frees waiting, and neither the
 * statistics fold nor housekeeping has its turn on the next slow call). */
BRISK_INLINE bool local_refill_allowed(const brisk_heap_t *heap, const brisk_page_t *page) {
  return BRISK_SECURE && page->local_free != NULL &&
         !(page->capacity < page->reserved && page_is_short(page)) &&
         ((heap->slow_mallocs_unfolded + 1) & 4095) != 0 &&
         ((heap->generic_calls + 1) & 63) != 0 && !remote_queue_maybe_nonempty(heap);
}

void *_brisk_malloc_generic(size_t size, brisk_heap_t *heap, bool zero) {
  /* The head page of the size's class: a pop, as on the inline fast path
   * (sizes above the direct table's reach), or, when its malloc list ran
   * dry, its local_free (secure build) taken over as the slow path would
   * and a pop, counted as a slow call. (The empty heap's queues are empty,
   * so a new thread falls through.) */
  if (BRISK_LIKELY(size <= BRISK_LARGE_MAX)) {
    brisk_page_t *page = heap->queues[brisk_size_to_class(size)].head;
    if (BRISK_LIKELY(page != NULL)) {
      brisk_block_t *block = page->free;
      if (block == NULL && local_refill_allowed(heap, page)) {
        heap->slow_mallocs_unfolded++;
        heap->generic_calls++;
        block = page->local_free;
        page->local_free = NULL;
      }
      if (BRISK_LIKELY(block != NULL)) {
        page->free = brisk_page_pop(page, block);
        page->used++;
        heap->bytes_requested_unfolded += size;
        if (zero) memset(block, 0, size);
        if (BRISK_UNLIKELY((++heap->class_allocations_unfolded[page->class_index] &
                            (BRISK_ALLOCATIONS_PER_FOLD - 1)) == 0)) {
          return _brisk_malloc_heartbeat(heap, block);
        }
        return block;
      }
    }
  }
  return malloc_slow(heap, size, zero);
}

void *_brisk_malloc_heartbeat(brisk_heap_t *heap, void *block) {
  _brisk_heap_fold_counts(heap);
  if (remote_queue_maybe_nonempty(heap)) _brisk_heap_drain_remote(heap);
  _brisk_heap_housekeeping(heap);
  return block;
}

static void *malloc_slow(brisk_heap_t *heap, size_t size, bool zero) {
  if (BRISK_UNLIKELY(heap->is_empty_heap)) {
    heap = _brisk_heap_init_thread(false);
    if (heap == NULL) {
      errno = ENOMEM;
      return NULL;
    }
    if (BRISK_UNLIKELY(_brisk_thread_exited)) {
      void *p = malloc_slow(heap, size, zero);
      _brisk_heap_hand_back(heap);
      return p;
    }
  }
  if ((++heap->slow_mallocs_unfolded & 4095) == 0) _brisk_heap_fold_counts(heap);
  if (remote_queue_maybe_nonempty(heap)) _brisk_heap_drain_remote(heap);
  if ((++heap->generic_calls & 63) == 0) _brisk_heap_housekeeping(heap);

  heap->bytes_requested_unfolded += size;
  if (size > BRISK_LARGE_MAX) return _brisk_huge_alloc(heap, size, 0, zero);

  size_t class_index = brisk_size_to_class(size);
  brisk_page_t *page = heap->queues[class_index].head;
  if (page == NULL || page->free == NULL) {
    /* A refused mapping sets errno; when a retry succeeds, the caller finds
     * errno as it left it (glibc's malloc leaves it alone on success). */
    int saved_errno = errno;
    page = find_page(heap, class_index);
    if (BRISK_UNLIKELY(page == NULL)) page = find_page_after_reclaim(heap, class_index);
    if (page == NULL) {
      errno = ENOMEM;
      return NULL;
    }
    errno = saved_errno;
  }
  brisk_block_t *block = page->free;
  page->free = brisk_page_pop(page, block);
  page->used++;
  heap->class_allocations_unfolded[class_index]++;
  if (zero) memset(block, 0, size);
  return block;
}

/* The free of `freed` took the page's count of live blocks below what it
 * handed out: that free, or one before it on the page, freed a block twice. */
static BRISK_NORETURN BRISK_COLD void page_count_shows_double_free(const brisk_page_t *page,
                                                                  const void *freed) {
  _brisk_fatal_block("free", freed, page,
                     "invalid pointer: double free in this page (more frees than blocks handed out)");
}

void _brisk_page_free_slow(brisk_heap_t *heap, brisk_page_t *page, const void *freed) {
  if (freed == NULL) freed = page->free;
  if (BRISK_UNLIKELY(!page->in_use)) {
    /* Only free()'s fast path brings a page serving no class here: a block
     * freed again after its page was given back, or a pointer into the
     * segment's header (brisk's metadata, never handed out). (The secure
     * build's checks named it before.) */
    const brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
    _brisk_fatal_no_block_page("free", freed, page == &segment->pages[0],
                               "invalid pointer: not an allocated block (double free?)");
  }
  size_t class_index = page->class_index;
  heap->slow_frees_unfolded++;
  brisk_page_queue_t *queue = &heap->queues[class_index];
  if (page->used & BRISK_PAGE_FULL_FLAG) {
    /* A count that went below zero also shows the flag: more frees than
     * blocks handed out. */
    if (!page->in_full_list) page_count_shows_double_free(page, freed);
    page->used &= ~BRISK_PAGE_FULL_FLAG;
    page->in_full_list = 0;
    brisk_page_queue_remove(&heap->full_pages, page);
    brisk_page_queue_push_back(queue, page);
    if (queue->head == page) queue_head_changed(heap, class_index);
  }
  if (page->used != 0) return;
  /* A pinned head keeps one count of its own: reaching 0 means a double free. */
  if (heap->pinned[class_index] == page) page_count_shows_double_free(page, freed);
  if (!keep_empty_page(heap, page)) retire_page(heap, page);
  /* A thread that only frees comes here now and then: post its batches. */
  _brisk_heap_flush_outbox(heap);
}

void _brisk_page_free_block(brisk_heap_t *heap, brisk_page_t *page, brisk_block_t *block) {
  /* Straight onto malloc's list, as free()'s fast path does, so that the
   * next malloc of the class pops it without a trip through the slow path
   * (a producer's heap gets most of its blocks back this way). In the
   * secure build only blocks other threads freed come here (their freeing
   * thread tagged them; the owner's own are held back, brisk_secure_hold). */
  brisk_page_push(page, &page->free, block);
  if ((int32_t)--page->used <= 0) _brisk_page_free_slow(heap, page, block);
}

void _brisk_heap_collect_all(brisk_heap_t *heap) {
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    brisk_page_t *page = heap->queues[class_index].head;
    while (page != NULL) {
      brisk_page_t *next = page->next;
      if (page->used == 0) retire_page(heap, page);
      page = next;
    }
  }
}
