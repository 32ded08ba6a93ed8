/*
 * free.c — free() past its inline fast path (alloc.h): remote frees and their
 * batching, huge and aligned blocks, and the checks that name a bad pointer.
 *
 *   brisk_free_inline(p)                              alloc.h
 *     not a brisk segment: _brisk_free_generic(p)
 *       NULL: nothing; a segment-aligned huge block: _brisk_huge_free;
 *       one of the last huge blocks whose mapping went back to the system
 *       (huge.c remembers 64): "block is already free (double free?)";
 *       anything else: "not allocated by brisk", abort
 *     this thread's page, p not a block start: after the fast path's push,
 *       _brisk_free_local_not_block_start takes it back off, then as below
 *     not this thread's segment: _brisk_free_not_local(p, segment)
 *       huge block:            _brisk_huge_free                (huge.c)
 *       page not in use:       "not an allocated block", abort
 *       interior pointer:      the block's start on a page of aligned
 *                              blocks, else "not the start of a block", abort
 *       owner is this heap:    _brisk_page_free_block          (page.c)
 *                              (secure build: brisk_secure_hold)
 *       another heap's block:  outbox_push, below
 *     Another heap's block is found from the segment's page info alone: the
 *     descriptor's line stays in its owner's cache (types.h).
 *
 * Remote batching. A block freed by a thread that does not own its page is
 * recorded in the freeing heap's outbox: the open batch of its owner heap (a
 * slot of a small direct-mapped table) gets the block's address, with no
 * atomic and no write to the block itself. A batch that holds
 * BRISK_OUTBOX_BATCH blocks is posted to the owner's remote queue with one
 * atomic exchange (_brisk_heap_post_remote, heap.c), and every open batch is
 * when the outbox holds BRISK_OUTBOX_MAX_BYTES; a slot needed by another
 * owner posts its batch first. The owner returns the blocks to their pages
 * in its slow path and keeps the batch or gives it back (heap.c). The freeing
 * heap also posts its open batches in housekeeping, when a local free
 * empties a page, at exit and on brisk_collect (heap.c, page.c). A heap with
 * no batch free and none more to carve (types.h: BRISK_BATCH_CHUNKS) posts
 * the block alone, linked through its first word. A thread that has no heap
 * yet (its first calls are frees: a consumer that never allocates) is given
 * a cold one here (a new heap, or an abandoned one already tidied: it may
 * never run the housekeeping a warm one needs), for its outbox; only when
 * none can be had (no memory), or after the thread's exit handler ran (frees
 * in later destructors), does it post each block alone.
 *
 * A block in an outbox still counts as used on its page, so the owner can
 * neither retire the page nor hand the block out again before it arrives.
 * The same block freed twice (each free finds it live) arrives twice: the
 * batch keeps each block's class with its address, and the owner checks
 * both against the page before it takes a block back (heap.c).
 */
#include "general/alloc.h"
#include "general/size_class.h"

#include <errno.h>

/* The outbox slot of an owner heap. Heaps are page-aligned mappings, so the
 * bits above the page offset are hashed (Fibonacci hashing). */
static brisk_remote_batch_t **outbox_slot(brisk_heap_t *heap, const brisk_heap_t *owner) {
  uint64_t key = (uint64_t)(uintptr_t)owner >> 12;
  size_t index = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 60);
  _Static_assert(BRISK_OUTBOX_SLOTS == 16, "the hash above yields 4 bits");
  return &heap->outbox[index];
}

/* A batch never used before: from the heap itself, else from its current
 * chunk, else from a new chunk; NULL when the heap has all it may have. */
static brisk_remote_batch_t *batch_carve(brisk_heap_t *heap) {
  if (heap->batches_carved < BRISK_HEAP_BATCHES) return &heap->batches[heap->batches_carved++];
  if (heap->chunk_next == heap->chunk_end) {
    if (heap->batch_chunks == BRISK_BATCH_CHUNKS) return NULL;
    /* Batches are metadata: the secure build keeps them between no-access
     * pages, as the heap that holds the first ones. */
    size_t guard = brisk_secure_guard_size();
    /* Called by free, which leaves errno alone, even when the system
     * refuses the chunk (the block is then posted alone). */
    int saved_errno = errno;
    uint8_t *chunk =
        _brisk_os_reserve_guarded(BRISK_BATCH_CHUNK_SIZE, _brisk_os_page_size(), 0, guard, guard, NULL);
    errno = saved_errno;
    if (chunk == NULL) return NULL;
    heap->batch_chunks++;
    heap->chunk_next = (brisk_remote_batch_t *)chunk;
    heap->chunk_end = heap->chunk_next + BRISK_BATCH_CHUNK_SIZE / sizeof(brisk_remote_batch_t);
  }
  return heap->chunk_next++;
}

/* A batch of the heap's own to fill: its free stack, else every batch the
 * owners have given back since, else one never used; NULL when all are out. */
static brisk_remote_batch_t *batch_take(brisk_heap_t *heap) {
  brisk_remote_batch_t *batch = heap->free_batches;
  if (batch == NULL) {
    /* acquire: pairs with the release CAS that gives a batch back
     * (drain_batch, heap.c), so the emptying heap's reads of blocks[] come
     * before we write them again. */
    batch = atomic_exchange_explicit(&heap->returned_batches, NULL, memory_order_acquire);
    if (batch == NULL) {
      batch = batch_carve(heap);
      if (batch == NULL) return NULL;
      batch->home = heap;
      batch->next_free = NULL;
    }
  }
  heap->free_batches = batch->next_free;
  return batch;
}

static void outbox_post(brisk_heap_t *heap, brisk_remote_batch_t **slot) {
  brisk_remote_batch_t *batch = *slot;
  *slot = NULL;
  heap->outbox_bytes -= batch->bytes;
  if (heap->keep_credit < BRISK_KEPT_BATCHES) heap->keep_credit++;
  _brisk_heap_post_remote(batch->owner, &batch->node, BRISK_REMOTE_BATCH_TAG);
  _brisk_heaps_tidy_stale(0);
  /* A thread that only frees never takes malloc's slow path: its own queue
   * and purge list are looked after here, every 64 posts. */
  if ((++heap->generic_calls & 63) == 0) _brisk_heap_free_only_chores(heap);
}

void _brisk_heap_flush_outbox(brisk_heap_t *heap) {
  if (heap->outbox_bytes == 0) return;
  for (size_t i = 0; i < BRISK_OUTBOX_SLOTS; i++) {
    if (heap->outbox[i] != NULL) outbox_post(heap, &heap->outbox[i]);
  }
}

/* Open a batch for owner in its slot (posting the slot's batch of another
 * owner first); NULL when the block must be posted alone. */
static BRISK_NOINLINE brisk_remote_batch_t *outbox_open(brisk_heap_t *heap,
                                                        brisk_remote_batch_t **slot,
                                                        brisk_heap_t *owner) {
  if (*slot != NULL) outbox_post(heap, slot);
  brisk_remote_batch_t *batch = batch_take(heap);
  if (batch == NULL) return NULL;
  batch->owner = owner;
  batch->count = 0;
  batch->bytes = 0;
  *slot = batch;
  return batch;
}

/* Record block in batch, the open batch of its owner in slot; post the
 * batch when full, and every open batch when the outbox holds enough. */
BRISK_INLINE void outbox_add(brisk_heap_t *heap, brisk_remote_batch_t **slot,
                             brisk_remote_batch_t *batch, brisk_block_t *block,
                             size_t class_index, size_t block_size) {
  batch->classes[batch->count] = (uint8_t)class_index;
  batch->blocks[batch->count++] = block;
  batch->bytes += (uint32_t)block_size;
  heap->outbox_bytes += block_size;
  if (batch->count == BRISK_OUTBOX_BATCH) {
    outbox_post(heap, slot);
  } else if (heap->outbox_bytes >= BRISK_OUTBOX_MAX_BYTES) {
    _brisk_heap_flush_outbox(heap);
  }
}

/* outbox_push when the slot holds no open batch of owner's, or the thread
 * has no heap yet. Out of line, so that nothing outbox_push keeps for after
 * a call stays in a register the common case would have to save. */
static BRISK_NOINLINE void outbox_push_slow(brisk_heap_t *heap, brisk_heap_t *owner,
                                            brisk_block_t *block, size_t class_index,
                                            size_t block_size) {
  if (heap->is_empty_heap) {
    /* A thread whose first calls are frees of other threads' blocks (a
     * consumer that never allocates) gets a cold heap here, for its outbox;
     * one that has already exited (a late destructor) does not. */
    heap = _brisk_thread_exited ? NULL : _brisk_heap_init_thread(true);
    if (heap == NULL) {
      _brisk_heap_post_remote(owner, (brisk_remote_node_t *)block, 0);
      return;
    }
  }
  brisk_remote_batch_t **slot = outbox_slot(heap, owner);
  brisk_remote_batch_t *batch = *slot;
  if (batch == NULL || batch->owner != owner) {
    batch = outbox_open(heap, slot, owner);
    if (batch == NULL) {
      _brisk_heap_post_remote(owner, (brisk_remote_node_t *)block, 0);
      return;
    }
  }
  outbox_add(heap, slot, batch, block, class_index, block_size);
}

static void outbox_push(brisk_heap_t *heap, brisk_heap_t *owner, brisk_block_t *block,
                        size_t class_index, size_t block_size) {
  if (BRISK_LIKELY(!heap->is_empty_heap)) {
    brisk_remote_batch_t **slot = outbox_slot(heap, owner);
    brisk_remote_batch_t *batch = *slot;
    if (BRISK_LIKELY(batch != NULL && batch->owner == owner)) {
      outbox_add(heap, slot, batch, block, class_index, block_size);
      return;
    }
  }
  outbox_push_slow(heap, owner, block, class_index, block_size);
}

uint8_t *_brisk_page_block_start(const brisk_page_t *page, const void *p) {
  size_t index = brisk_page_block_index(page, (uintptr_t)p);
  return brisk_page_start(page) + index * brisk_page_block_size(page);
}

/* A bounded string builder for the one-line messages below (no stdio: the
 * heap may be corrupt, and printf may call malloc). */
typedef struct message_s {
  char text[160];
  size_t length;
} message_t;

static void message_add(message_t *m, const char *s) {
  while (*s != '\0' && m->length + 1 < sizeof m->text) m->text[m->length++] = *s++;
  m->text[m->length] = '\0';
}

static void message_add_number(message_t *m, size_t value) {
  char reversed[20];
  size_t n = 0;
  do {
    reversed[n++] = (char)('0' + value % 10);
    value /= 10;
  } while (value != 0);
  char digits[21];
  for (size_t i = 0; i < n; i++) digits[i] = reversed[n - 1 - i];
  digits[n] = '\0';
  message_add(m, digits);
}

void _brisk_fatal_not_block_start(const char *caller, const void *p, const brisk_page_t *page) {
  message_t m = {.length = 0};
  message_add(&m, "invalid pointer: not the start of a block, size class ");
  message_add_number(&m, page->class_index);
  message_add(&m, " (");
  message_add_number(&m, brisk_page_block_size(page));
  message_add(&m, "-byte blocks)");
  _brisk_os_fatal_pointer(caller, p, m.text);
}

void _brisk_fatal_block(const char *caller, const void *p, const brisk_page_t *page,
                        const char *why) {
  message_t m = {.length = 0};
  message_add(&m, why);
  message_add(&m, ", size class ");
  message_add_number(&m, page->class_index);
  message_add(&m, " (");
  message_add_number(&m, brisk_page_block_size(page));
  message_add(&m, "-byte blocks)");
  _brisk_os_fatal_pointer(caller, p, m.text);
}

void _brisk_free_local_not_block_start(brisk_segment_t *segment, brisk_page_t *page) {
  brisk_block_t *block = page->free;
  page->free = brisk_page_pop(page, block);
  _brisk_free_not_local(block, segment);
}

/* _brisk_class_info (size_class.h), made by the compiler: ten classes a
 * line, then the last four. Class 0 gets {0, 0}; its divisor is made 1,
 * not 0, in the arm it does not take (compilers warn on a constant
 * division by zero there too). */
#define CLASS_DIVISOR(c) (BRISK_CLASS_SIZE(c) + (BRISK_CLASS_SIZE(c) == 0))
#define CLASS_INFO(c) \
  {BRISK_CLASS_SIZE(c) == 0 ? 0 : UINT64_MAX / CLASS_DIVISOR(c) + 1, BRISK_CLASS_SIZE(c)}
#define CLASS_INFO_10(c)                                                                  \
  CLASS_INFO(c), CLASS_INFO(c + 1), CLASS_INFO(c + 2), CLASS_INFO(c + 3), CLASS_INFO(c + 4), \
      CLASS_INFO(c + 5), CLASS_INFO(c + 6), CLASS_INFO(c + 7), CLASS_INFO(c + 8), CLASS_INFO(c + 9)
const brisk_class_info_t _brisk_class_info[BRISK_CLASS_COUNT] = {
    CLASS_INFO_10(0),  CLASS_INFO_10(10), CLASS_INFO_10(20), CLASS_INFO_10(30),
    CLASS_INFO_10(40), CLASS_INFO_10(50), CLASS_INFO_10(60), CLASS_INFO_10(70),
    CLASS_INFO_10(80), CLASS_INFO(90),    CLASS_INFO(91),    CLASS_INFO(92),
    CLASS_INFO(93)};
_Static_assert(BRISK_CLASS_COUNT == 94, "_brisk_class_info lists every class");

/* p lies on a page of a segment of a size class that serves none: the
 * segment's header (page 0, brisk's own metadata, never handed out), or a
 * page given back since a block of it was freed (or never used). */
void _brisk_fatal_no_block_page(const char *caller, const void *p, bool header_page,
                                const char *freed) {
  if (header_page) brisk_fatal_pointer(caller, p, "not allocated by brisk");
  if ((uintptr_t)p & 7) brisk_fatal_pointer(caller, p, "not the start of a block");
  _brisk_os_fatal_pointer(caller, p, freed);
}

void _brisk_free_not_local(void *p, brisk_segment_t *segment) {
  brisk_heap_t *heap = _brisk_tls_heap;
  if (!heap->is_empty_heap) heap->slow_frees_unfolded++;
  if (brisk_segment_map_huge((uintptr_t)segment)) {
    if ((uint8_t *)p != _brisk_huge_checked_block("free", p, segment)) {
      brisk_fatal_pointer("free", p, "not the start of a block");
    }
    if (segment->pages[0].used == 0) {
      brisk_fatal_pointer("free", p, "block is already free (double free?)");
    }
    if (BRISK_SECURE) _brisk_huge_requested_size("free", segment);
    _brisk_huge_free(heap, segment);
    return;
  }
  /* The block's start from the segment's page info and the class's size,
   * without the page descriptor (types.h). Info 0: page 0 (the header) or a
   * page serving no class. */
  uintptr_t address = (uintptr_t)p;
  size_t index = brisk_page_index(segment, address);
  uint8_t info = brisk_load_relaxed(&segment->page_info[index]);
  if (info == 0) {
    _brisk_fatal_no_block_page("free", p, index == 0,
                               "invalid pointer: not an allocated block (double free?)");
  }
  size_t class_index = info & BRISK_PAGE_INFO_CLASS;
  const brisk_class_info_t *class_info = &_brisk_class_info[class_index];
  size_t block_size = class_info->size;
  uintptr_t page_start =
      (uintptr_t)segment + (index << segment->page_shift) + BRISK_SECURE_PAGE_LEAD;
  /* The secure build's page lead holds no block. */
  if (BRISK_SECURE_PAGE_LEAD != 0 && address < page_start) {
    _brisk_fatal_not_block_start("free", p, &segment->pages[index]);
  }
  uint32_t offset = (uint32_t)(address - page_start);
  size_t block_index = (size_t)(((unsigned __int128)offset * class_info->magic) >> 64);
  brisk_block_t *block = (brisk_block_t *)(page_start + block_index * block_size);
  /* The page's tail, past its last whole block, holds no block: one there
   * would run into the next page. */
  uintptr_t page_end = (uintptr_t)segment + ((index + 1) << segment->page_shift);
  if (BRISK_UNLIKELY((uintptr_t)block + block_size > page_end)) {
    _brisk_fatal_not_block_start("free", p, &segment->pages[index]);
  }
  /* A pointer inside a block is the block's only on a page of aligned
   * blocks (api.c hands out interior addresses there); the secure build
   * accepts only the address the block was handed out at, from its
   * header. */
  if (block != p) {
    if (!(info & BRISK_PAGE_INFO_ALIGNED)) {
      _brisk_fatal_not_block_start("free", p, &segment->pages[index]);
    }
    if (BRISK_SECURE) _brisk_secure_free_interior(&segment->pages[index], block_size, (uint8_t *)block, p);
  }
  if (segment->heap == heap) {
    if (BRISK_SECURE) {
      /* Held back as on free()'s fast path (brisk_secure_hold). */
      brisk_page_t *page = &segment->pages[index];
      brisk_secure_hold(page, block, brisk_secure_free_block("free", page, block_size, (uint8_t *)block));
      if ((int32_t)--page->used <= 0) _brisk_page_free_slow(heap, page, block);
      return;
    }
    _brisk_page_free_block(heap, &segment->pages[index], block);
    return;
  }
  if (BRISK_SECURE) {
    brisk_secure_free_remote_block(&segment->pages[index], block_size, (uint8_t *)block);
  }
  outbox_push(heap, segment->heap, block, class_index, block_size);
}

/* The huge segment whose mapping holds address past its first 32 MiB, where
 * the map marks nothing (it marks each segment's first slot only): the
 * nearest marked slot below, if its mapping reaches that far. NULL
 * otherwise. Mappings do not overlap, so no other segment can hold it. A
 * walk over the map (4 MiB at most) is cheap for a call about to abort; it
 * starts at the map's end for an address past it (no mapping brisk makes
 * lies there; a walk from the address itself, 0xdeadbeefdeadbee0, took
 * minutes). */
static const brisk_segment_t *huge_segment_reaching(uintptr_t address) {
  uintptr_t first = address >> BRISK_SEGMENT_SHIFT;
  if (first > BRISK_SEGMENT_MAP_SIZE) first = BRISK_SEGMENT_MAP_SIZE;
  for (uintptr_t slot = first; slot-- > 0;) {
    uintptr_t base = slot << BRISK_SEGMENT_SHIFT;
    if (!brisk_segment_map_contains(base)) continue;
    const brisk_segment_t *segment = (const brisk_segment_t *)base;
    if (segment->kind == BRISK_KIND_HUGE && address - base < segment->mapped_size) return segment;
    return NULL;
  }
  return NULL;
}

/* p lies in no segment's first 32 MiB: inside a huge block past them, a
 * huge block freed before whose mapping went back to the system, or a
 * pointer brisk never handed out. */
static BRISK_NORETURN BRISK_COLD void fatal_not_in_a_segment(const char *caller, const void *p) {
  if (huge_segment_reaching((uintptr_t)p) != NULL) {
    brisk_fatal_pointer(caller, p, "not the start of a block");
  }
  if (_brisk_huge_was_unmapped(p)) {
    brisk_fatal_pointer(caller, p,
                        "block is already free (double free?), a huge block whose mapping was "
                        "given back");
  }
  brisk_fatal_pointer(caller, p, "not allocated by brisk");
}

brisk_segment_t *_brisk_checked_segment(const void *p, const char *caller) {
  uintptr_t address = (uintptr_t)p;
  if ((address & BRISK_SEGMENT_MASK) == 0) {
    /* Only a huge block aligned to a segment or more sits at offset 0; its
     * header is one segment below. */
    uintptr_t header = address - BRISK_SEGMENT_SIZE;
    if (address >= BRISK_SEGMENT_SIZE && brisk_segment_map_huge(header)) {
      brisk_segment_t *segment = (brisk_segment_t *)header;
      if (_brisk_huge_checked_block(caller, p, segment) == p) {
        if (segment->pages[0].used == 0) {
          brisk_fatal_pointer(caller, p, "block is already free (double free?)");
        }
        return segment;
      }
    }
    fatal_not_in_a_segment(caller, p);
  }
  if (!brisk_segment_map_contains(address)) fatal_not_in_a_segment(caller, p);
  brisk_segment_t *segment = brisk_segment_of(address);
  if (brisk_segment_map_huge(address)) {
    const uint8_t *block = _brisk_huge_checked_block(caller, p, segment);
    if ((const uint8_t *)p < block) brisk_fatal_pointer(caller, p, "not allocated by brisk");
    /* Inside the block: realloc would resize the block as if it started
     * at p, and the usable size would count from p to the block's end. */
    if ((const uint8_t *)p != block) {
      brisk_fatal_pointer(caller, p, "not the start of a block");
    }
    if (segment->pages[0].used == 0) {
      brisk_fatal_pointer(caller, p, "block is already free (double free?)");
    }
    return segment;
  }
  size_t index = brisk_page_index(segment, address);
  if (index == 0 || brisk_load_relaxed(&segment->page_info[index]) == 0) {
    _brisk_fatal_no_block_page(caller, p, index == 0,
                               "invalid pointer: block is already free (double free?)");
  }
  return segment;
}

size_t _brisk_block_usable_size(const brisk_segment_t *segment, const void *p, const char *caller) {
  if (segment->kind == BRISK_KIND_HUGE) {
    if (BRISK_SECURE) return _brisk_huge_requested_size(caller, segment);
    return (size_t)(_brisk_huge_end(segment) - (const uint8_t *)p);
  }
  const brisk_page_t *page = brisk_page_of(segment, (uintptr_t)p);
  /* The secure build's page lead holds no block: the block "holding" an
   * address there would be found from an offset that wrapped, gigabytes
   * away. */
  if (BRISK_SECURE_PAGE_LEAD != 0 && (const uint8_t *)p < brisk_page_start(page)) {
    _brisk_fatal_not_block_start(caller, p, page);
  }
  const uint8_t *start = _brisk_page_block_start(page, p);
  uint8_t info = brisk_load_relaxed(&segment->page_info[brisk_page_index(segment, (uintptr_t)p)]);
  /* The page's tail, past its last whole block, holds none. */
  if ((start != (const uint8_t *)p && !(info & BRISK_PAGE_INFO_ALIGNED)) ||
      brisk_page_block_index(page, (uintptr_t)start) >= page->reserved) {
    _brisk_fatal_not_block_start(caller, p, page);
  }
  if (BRISK_SECURE) return _brisk_secure_requested_size(caller, page, start, p);
  if (brisk_page_counts_no_live_block(segment, page)) _brisk_fatal_freed_block(caller, p, page);
  return (size_t)(start + brisk_page_block_size(page) - (const uint8_t *)p);
}

void _brisk_fatal_freed_block(const char *caller, const void *p, const brisk_page_t *page) {
  _brisk_fatal_block(caller, p, page, "invalid pointer: block is already free (double free?)");
}

void _brisk_free_generic(void *p) {
  if (p == NULL) return;
  brisk_segment_t *segment = _brisk_checked_segment(p, "free");
  _brisk_free_not_local(p, segment);
}
