/*
 * free.c — free() past its inline fast path (alloc.h): remote frees and their
 * batching, huge and aligned blocks, and the checks that name a bad pointer.
 *
 *   brisk_free_inline(p)                              alloc.h
 *     not a brisk segment: _brisk_free_generic(p)
 *       NULL: nothing; a segment-aligned huge block: _brisk_huge_free;
 *       anything else: "not allocated by brisk", abort
 *     not this thread's page: _brisk_free_not_local(segment, page, p)
 *       huge block:            _brisk_huge_free                (huge.c)
 *       page not in use:       "not an allocated block", abort
 *       interior pointer:      the block's start on a page of aligned
 *                              blocks, else "not the start of a block", abort
 *       owner is this heap:    _brisk_page_free_block          (page.c)
 *       another heap's block:  outbox_push, below
 *
 * Remote batching. A block freed by a thread that does not own its page goes
 * into the freeing heap's outbox, to the slot of its owner heap (a small
 * direct-mapped table), as the new head of that slot's chain: a store into
 * the block and three into the slot, no atomic. When the slot holds
 * BRISK_OUTBOX_BATCH blocks it is posted to the owner's remote queue with one
 * atomic exchange (_brisk_heap_post_remote, heap.c); when the outbox holds
 * BRISK_OUTBOX_MAX_BYTES, every slot is. A block whose slot belongs to
 * another owner posts that slot first. The owner thread returns the blocks
 * to their pages when it next takes malloc's slow path. The same heap's
 * thread flushes its outbox in malloc's slow path, when a local free empties
 * a page, at exit and on brisk_collect (heap.c), so batches never wait on a
 * thread that has stopped freeing for longer than its next allocator call
 * that leaves the fast paths. A thread that has no heap yet (its first call
 * is a free) posts each block alone: the static empty heap has no outbox
 * of its own to fill.
 *
 * A block in an outbox still counts as used on its page, so the owner can
 * neither retire the page nor hand the block out again before it arrives.
 */
#include "general/alloc.h"
#include "general/size_class.h"

/* The outbox slot of an owner heap. Heaps are page-aligned mappings, so the
 * bits above the page offset are hashed (Fibonacci hashing). */
static brisk_outbox_slot_t *outbox_slot(brisk_heap_t *heap, const brisk_heap_t *owner) {
  uint64_t key = (uint64_t)(uintptr_t)owner >> 12;
  size_t index = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 60);
  _Static_assert(BRISK_OUTBOX_SLOTS == 16, "the hash above yields 4 bits");
  return &heap->outbox[index];
}

static void outbox_post_slot(brisk_heap_t *heap, brisk_outbox_slot_t *slot) {
  heap->outbox_bytes -= slot->bytes;
  heap->counters.remote_chains_posted++;
  brisk_heap_t *owner = slot->owner;
  brisk_remote_node_t *first = slot->first;
  brisk_remote_node_t *last = slot->last;
  slot->owner = NULL;
  slot->first = slot->last = NULL;
  slot->count = slot->bytes = 0;
  _brisk_heap_post_remote(owner, first, last);
}

void _brisk_heap_flush_outbox(brisk_heap_t *heap) {
  if (heap->outbox_bytes == 0) return;
  for (size_t i = 0; i < BRISK_OUTBOX_SLOTS; i++) {
    if (heap->outbox[i].count != 0) outbox_post_slot(heap, &heap->outbox[i]);
  }
}

static void outbox_push(brisk_heap_t *heap, brisk_heap_t *owner, brisk_block_t *block,
                        size_t block_size) {
  brisk_remote_node_t *node = (brisk_remote_node_t *)block;
  heap->counters.remote_frees_sent++;
  if (BRISK_UNLIKELY(heap->is_empty_heap)) {
    atomic_store_explicit(&node->next, NULL, memory_order_relaxed);
    _brisk_heap_post_remote(owner, node, node);
    return;
  }
  brisk_outbox_slot_t *slot = outbox_slot(heap, owner);
  if (slot->owner != owner) {
    if (slot->count != 0) outbox_post_slot(heap, slot);
    slot->owner = owner;
  }
  /* Relaxed: the chain's links are published by the release store that
   * posting makes after them (heap.c). */
  atomic_store_explicit(&node->next, slot->first, memory_order_relaxed);
  if (slot->first == NULL) slot->last = node;
  slot->first = node;
  slot->count++;
  slot->bytes += (uint32_t)block_size;
  heap->outbox_bytes += block_size;
  if (slot->count >= BRISK_OUTBOX_BATCH) {
    outbox_post_slot(heap, slot);
  } else if (heap->outbox_bytes >= BRISK_OUTBOX_MAX_BYTES) {
    _brisk_heap_flush_outbox(heap);
  }
}

/* 2^64 / block size, rounded up, per class: offset / size becomes one
 * multiplication (exact for every offset inside a page). */
static uint64_t class_reciprocal[BRISK_CLASS_COUNT];

static void __attribute__((constructor)) compute_class_reciprocals(void) {
  for (size_t c = 1; c < BRISK_CLASS_COUNT; c++) {
    class_reciprocal[c] = UINT64_MAX / brisk_class_to_size(c) + 1;
  }
}

uint8_t *_brisk_page_block_start(const brisk_page_t *page, const void *p) {
  uint64_t offset = (uint64_t)((const uint8_t *)p - page->start);
  uint64_t reciprocal = class_reciprocal[page->class_index];
  uint64_t index = reciprocal != 0 ? (uint64_t)(((unsigned __int128)offset * reciprocal) >> 64)
                                   : offset / page->block_size;
  return page->start + index * page->block_size;
}

void _brisk_free_not_local(brisk_segment_t *segment, brisk_page_t *page, void *p) {
  brisk_heap_t *heap = _brisk_tls_heap;
  if (segment->kind == BRISK_KIND_HUGE) {
    if ((uint8_t *)p != _brisk_huge_block(segment)) {
      brisk_fatal_pointer("free", p, "not the start of a block");
    }
    if (page->used == 0) brisk_fatal_pointer("free", p, "block is already free (double free?)");
    _brisk_huge_free(heap, segment);
    return;
  }
  /* Owner 0: page 0 (the header) or a page with no blocks handed out. */
  uintptr_t owner = brisk_load_relaxed(&page->owner);
  if (owner == 0) brisk_fatal_pointer("free", p, "not an allocated block (double free?)");
  brisk_block_t *block = (brisk_block_t *)_brisk_page_block_start(page, p);
  if (block != p && !(owner & BRISK_OWNER_ALIGNED)) {
    brisk_fatal_pointer("free", p, "not the start of a block");
  }
  if ((owner & ~(uintptr_t)BRISK_OWNER_ALIGNED) == (uintptr_t)heap) {
    _brisk_page_free_block(heap, page, block);
  } else {
    outbox_push(heap, segment->heap, block, page->block_size);
  }
}

brisk_segment_t *_brisk_checked_segment(const void *p, const char *caller) {
  uintptr_t address = (uintptr_t)p;
  if ((address & BRISK_SEGMENT_MASK) == 0) {
    /* Only a huge block aligned to a segment or more sits at offset 0; its
     * header is one segment below. */
    uintptr_t header = address - BRISK_SEGMENT_SIZE;
    if (address >= BRISK_SEGMENT_SIZE && brisk_segment_map_contains(header)) {
      brisk_segment_t *segment = (brisk_segment_t *)header;
      if (segment->kind == BRISK_KIND_HUGE && _brisk_huge_block(segment) == p) {
        if (segment->pages[0].used == 0) {
          brisk_fatal_pointer(caller, p, "block is already free (double free?)");
        }
        return segment;
      }
    }
    brisk_fatal_pointer(caller, p, "not allocated by brisk");
  }
  if (!brisk_segment_map_contains(address)) brisk_fatal_pointer(caller, p, "not allocated by brisk");
  brisk_segment_t *segment = brisk_segment_of(address);
  if (segment->kind == BRISK_KIND_HUGE) {
    if ((const uint8_t *)p < _brisk_huge_block(segment)) {
      brisk_fatal_pointer(caller, p, "not allocated by brisk");
    }
    if (segment->pages[0].used == 0) {
      brisk_fatal_pointer(caller, p, "block is already free (double free?)");
    }
    return segment;
  }
  brisk_page_t *page = brisk_page_of(segment, address);
  if (page == &segment->pages[0]) brisk_fatal_pointer(caller, p, "not allocated by brisk");
  if (brisk_load_relaxed(&page->owner) == 0) {
    brisk_fatal_pointer(caller, p, "block is already free (double free?)");
  }
  return segment;
}

size_t _brisk_block_usable_size(const brisk_segment_t *segment, const void *p, const char *caller) {
  if (segment->kind == BRISK_KIND_HUGE) {
    return (size_t)((const uint8_t *)segment + segment->mapped_size - (const uint8_t *)p);
  }
  const brisk_page_t *page = brisk_page_of(segment, (uintptr_t)p);
  const uint8_t *start = _brisk_page_block_start(page, p);
  if (start != (const uint8_t *)p && !(brisk_load_relaxed(&page->owner) & BRISK_OWNER_ALIGNED)) {
    brisk_fatal_pointer(caller, p, "not the start of a block");
  }
  return (size_t)(start + page->block_size - (const uint8_t *)p);
}

void _brisk_free_generic(void *p) {
  if (p == NULL) return;
  brisk_segment_t *segment = _brisk_checked_segment(p, "free");
  _brisk_free_not_local(segment, brisk_page_of(segment, (uintptr_t)p), p);
}
