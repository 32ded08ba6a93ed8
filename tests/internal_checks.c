/* The C side of internal_checks.h. */
#include "internal_checks.h"

#include "general/internal.h"

static size_t class_page_size(size_t class_index) {
  switch (brisk_class_to_kind(class_index)) {
  case BRISK_KIND_SMALL: return (size_t)1 << BRISK_SMALL_PAGE_SHIFT;
  case BRISK_KIND_MEDIUM: return (size_t)1 << BRISK_MEDIUM_PAGE_SHIFT;
  default: return (size_t)1 << BRISK_LARGE_PAGE_SHIFT;
  }
}

uint64_t brisk_test_block_start_errors(uint64_t *checked) {
  uint64_t errors = 0;
  *checked = 0;
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    size_t block_size = brisk_class_to_size(class_index);
    size_t page_size = class_page_size(class_index);
    /* The release build's layout (blocks from the page's first byte) and
     * the secure build's (after a 16-byte lead), for each class the secure
     * build uses (more than 16 bytes). */
    for (size_t lead = 0; lead <= 16; lead += 16) {
      if (lead != 0 && block_size <= 16) continue;
      size_t blocks = (page_size - lead) / block_size;
      brisk_page_t page = {0};
      page.class_index = (uint8_t)class_index;
      page.block_magic = brisk_page_block_magic(block_size, blocks, lead);
      /* A page just below a 2^32 boundary (its blocks' low 32 bits wrap)
       * and one just above it. */
      const uintptr_t starts[] = {((uintptr_t)5 << 32) - page_size + lead,
                                  ((uintptr_t)5 << 32) + lead};
      for (size_t s = 0; s < 2; s++) {
        brisk_page_set_start(&page, (const uint8_t *)starts[s]);
        /* Every byte from the first block to the page's end: the tail past
         * the last whole block holds no block start. */
        for (size_t offset = 0; offset < page_size - lead; offset++) {
          bool start = brisk_page_is_block_start(&page, starts[s] + offset);
          size_t index = brisk_page_block_index(&page, starts[s] + offset);
          errors += start != (offset % block_size == 0 && offset / block_size < blocks);
          errors += index != offset / block_size;
        }
        *checked += page_size - lead;
        /* The lead's bytes (offsets that wrap to 2^32 - 16 .. 2^32 - 1)
         * hold no block start. */
        for (size_t back = 1; back <= lead; back++) {
          errors += brisk_page_is_block_start(&page, starts[s] - back);
          ++*checked;
        }
      }
    }
  }
  return errors;
}

uint64_t brisk_test_size_class_errors(uint64_t *checked) {
  uint64_t errors = 0;
  *checked = 0;
  size_t previous = 0;
  for (size_t class_index = 1; class_index < BRISK_CLASS_COUNT; class_index++) {
    size_t block_size = brisk_class_to_size(class_index);
    /* The constant table free() reads for other threads' blocks. */
    errors += _brisk_class_info[class_index].size != block_size;
    errors += _brisk_class_info[class_index].magic != brisk_block_magic(block_size);
    errors += block_size <= previous;
    errors += block_size > 8 && block_size % 16 != 0;
    previous = block_size;
  }
  errors += brisk_class_to_size(BRISK_CLASS_SMALL_LAST) != BRISK_SMALL_MAX;
  errors += brisk_class_to_size(BRISK_CLASS_MEDIUM_LAST) != BRISK_MEDIUM_MAX;
  errors += previous != BRISK_LARGE_MAX;
  /* Every size maps to the smallest class that holds it. */
  for (size_t size = 1; size <= BRISK_LARGE_MAX; size++) {
    size_t class_index = brisk_size_to_class(size);
    errors += class_index < 1 || class_index >= BRISK_CLASS_COUNT ||
              brisk_class_to_size(class_index) < size ||
              (class_index > 1 && brisk_class_to_size(class_index - 1) >= size);
  }
  *checked = BRISK_LARGE_MAX;
  return errors;
}

void brisk_test_validate_own_heap(void) { _brisk_heap_validate(_brisk_tls_heap); }

void brisk_test_validate_idle_heaps(void) { _brisk_heaps_validate_idle(); }

uintptr_t brisk_test_owner_thread(const void *p) {
  return brisk_load_relaxed(&brisk_segment_of((uintptr_t)p)->owner_thread);
}

uintptr_t brisk_test_thread_id(void) { return brisk_thread_id(); }

void brisk_test_heap_mapping(uintptr_t *start, size_t *size) {
  *start = (uintptr_t)_brisk_tls_heap;
  *size = brisk_align_up(sizeof(brisk_heap_t), _brisk_os_page_size());
}

void brisk_test_segment_mapping(const void *p, uintptr_t *start, size_t *size) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)p);
  *start = (uintptr_t)segment;
  *size = segment->mapped_size;
}

int brisk_test_page_in_use(const void *p) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)p);
  return brisk_page_of(segment, (uintptr_t)p)->in_use;
}

uint64_t brisk_test_set_purge_delay_ms(uint64_t delay_ms) {
  uint64_t old = _brisk_options.purge_delay_ms;
  _brisk_options.purge_delay_ms = delay_ms;
  return old;
}

uint64_t brisk_test_set_purge_delay_max_ms(uint64_t max_ms) {
  uint64_t old = _brisk_options.purge_delay_max_ms;
  _brisk_options.purge_delay_max_ms = max_ms;
  return old;
}

size_t brisk_test_own_batches_left(void) {
  brisk_heap_t *heap = _brisk_tls_heap;
  if (heap->is_empty_heap) return 0;
  size_t left = 0;
  for (brisk_remote_batch_t *b = heap->free_batches; b != NULL; b = b->next_free) left++;
  /* acquire: pairs with the release CAS of whoever gave a batch back. */
  for (brisk_remote_batch_t *b = atomic_load_explicit(&heap->returned_batches, memory_order_acquire);
       b != NULL; b = b->next_free) {
    left++;
  }
  size_t per_chunk = BRISK_BATCH_CHUNK_SIZE / sizeof(brisk_remote_batch_t);
  left += BRISK_HEAP_BATCHES - heap->batches_carved;
  left += (size_t)(heap->chunk_end - heap->chunk_next);
  left += (BRISK_BATCH_CHUNKS - heap->batch_chunks) * per_chunk;
  return left;
}

uint64_t brisk_test_clock_hold(uint64_t advance_ms) { return _brisk_os_clock_hold(advance_ms); }

void brisk_test_clock_release(void) { _brisk_os_clock_release(); }

int brisk_test_heap_abandoned(const void *p) {
  return brisk_load_relaxed(&brisk_segment_of((uintptr_t)p)->heap->abandoned);
}

void brisk_test_push_unlinked(void *p) {
  brisk_heap_t *heap = brisk_segment_of((uintptr_t)p)->heap;
  atomic_exchange_explicit(&heap->remote_tail, (brisk_remote_node_t *)p, memory_order_acq_rel);
}

int brisk_test_heap_queue_empty(const void *p) {
  brisk_heap_t *heap = brisk_segment_of((uintptr_t)p)->heap;
  return heap->remote_head == (uintptr_t)&heap->remote_stub &&
         atomic_load_explicit(&heap->remote_tail, memory_order_acquire) == &heap->remote_stub;
}
