/*
 * secure.c — the secure build's checks (BRISK_SECURE; internal.h has the
 * block layout; the fast paths are inline in alloc.h and internal.h): the
 * keys and the class-size table, malloc's slow path with the canary, the
 * checks of a block being resized and the messages of a failed check.
 * Compiled into both builds; the release build never calls it.
 */
#include "general/alloc.h"
#include "os/os.h"

#include <errno.h>
#include <string.h>

uint64_t _brisk_secure_keys[4] __attribute__((aligned(32)));

/* The inverse of an odd number modulo 2^64: Newton's iteration x * (2 - a * x)
 * doubles the bits that are right, and x = a is right in 3 (a * a is 1
 * modulo 8 for every odd a): 3, 6, 12, 24, 48, 96. */
static uint64_t odd_inverse(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; i++) x *= 2 - a * x;
  return x;
}

void _brisk_secure_init(void) {
  /* Called under heaps_lock before the first heap exists, so before any
   * block is encoded; the keys never change after. */
  if (_brisk_secure_keys[0] != 0) return;
  uint64_t keys[3];
  _brisk_os_random(keys, sizeof keys);
  /* Odd: brisk_link_encode_with multiplies by keys[2], which must lose no
   * bit (its inverse undoes it); a block's address (even) xored with an
   * odd keys[0] makes every secret odd (brisk_secure_canary). keys[1]
   * seeds the free-list shuffle (page.c), apart from the secrets, which a
   * program can read in its freed blocks. keys[0] last: it says the keys
   * are set. */
  _brisk_secure_keys[1] = keys[1];
  _brisk_secure_keys[2] = keys[2] | 1;
  _brisk_secure_keys[3] = odd_inverse(_brisk_secure_keys[2]);
  _brisk_secure_keys[0] = keys[0] | 1;
}

/* _brisk_secure_malloc past its pop from the class's head page. */
static BRISK_NOINLINE void *secure_malloc_slow(size_t size, bool zero) {
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  /* A block too big for a size class once padded is huge: its own
   * mapping, whose canary huge.c puts right after size, so it is asked for
   * unpadded. */
  /* Size 0 is served as 1: the secure build has no 16-byte blocks
   * (internal.h). */
  size_t padded = size + BRISK_SECURE_OVERHEAD + (size == 0);
  brisk_heap_t *heap = _brisk_tls_heap;
  if (padded > BRISK_LARGE_MAX) {
    /* The keys the canary is made from come with the first heap. A thread
     * past its exit handler had one (the keys exist): the empty heap stands
     * in, as in _brisk_malloc_aligned. */
    if (BRISK_UNLIKELY(heap->is_empty_heap) && !_brisk_thread_exited) {
      heap = _brisk_heap_init_thread(false);
      if (heap == NULL) {
        errno = ENOMEM;
        return NULL;
      }
    }
    if (size > BRISK_LARGE_MAX) return _brisk_malloc_generic(size, heap, zero);
    void *huge = _brisk_huge_alloc(heap, size, 0, zero);
    if (huge != NULL) brisk_count_requested(0, size); /* malloc_slow's count */
    return huge;
  }
  uint8_t *p = _brisk_malloc_generic(padded, heap, false);
  if (BRISK_LIKELY(p != NULL)) {
    brisk_count_requested(padded, size);
    brisk_secure_stamp(p, brisk_block_secret(p), p, size);
    if (zero) memset(p, 0, size);
  }
  return p;
}

void *_brisk_secure_malloc(size_t size, bool zero) {
  /* brisk_secure_malloc_pop found nothing (no free block on the
   * page, or a size past the direct table), or calloc. A size of a class
   * whose head page has a free block: the pop of _brisk_malloc_generic's
   * first lines, with the checks of malloc's fast path and the stamp,
   * counting size as requested (the empty heap's queues are empty). The
   * rest, and calloc, in secure_malloc_slow. */
  if (BRISK_LIKELY(size - 1 < BRISK_LARGE_MAX - BRISK_SECURE_OVERHEAD && !zero)) {
    brisk_heap_t *heap = _brisk_tls_heap;
    brisk_page_t *page = heap->queues[brisk_size_to_class(size + BRISK_SECURE_OVERHEAD)].head;
    if (BRISK_LIKELY(page != NULL && page->free != NULL)) {
      brisk_block_t *block = page->free;
      brisk_secure_take(heap, page, block, size);
      if (BRISK_UNLIKELY((++heap->class_allocations_unfolded[page->class_index] &
                          (BRISK_ALLOCATIONS_PER_FOLD - 1)) == 0)) {
        return _brisk_malloc_heartbeat(heap, block);
      }
      return block;
    }
  }
  return secure_malloc_slow(size, zero);
}

void _brisk_secure_fatal_pop(const brisk_page_t *page, const brisk_block_t *block) {
  _brisk_fatal_block("malloc", block, page,
                     "heap corruption: a free block was written (write after free, or an "
                     "overflow from the block before)");
}

/* _brisk_secure_requested_size's checks of the header and the canary, and
 * of p against the address the block was handed out at (the header's high
 * half, brisk_secure_stamp); returns the header's low half: the requested
 * end plus BRISK_SECURE_OVERHEAD. */
static uint64_t checked_needed(const char *caller, const brisk_page_t *page, size_t block_size,
                               const uint8_t *block, const uint8_t *p) {
  uint64_t secret = brisk_block_secret(block);
  if (BRISK_UNLIKELY(((const brisk_word_t *)block)[-1] == BRISK_SECURE_FREED_HEADER)) {
    /* The header a free leaves (its tag, tested before, was overwritten). */
    _brisk_fatal_block(caller, p, page,
                       "invalid pointer: block is already free (double free?), and was written "
                       "since (write after free)");
  }
  uint64_t header = brisk_secure_needed(block, brisk_secure_canary(secret));
  uint64_t offset = header >> 32;
  uint64_t needed = (uint32_t)header;
  uint64_t end = needed - BRISK_SECURE_OVERHEAD; /* wraps below 16: out of range */
  if (BRISK_UNLIKELY(needed > block_size || end < offset)) {
    _brisk_fatal_block(caller, p, page,
                       "heap corruption: the block's header was overwritten (an overflow from "
                       "the block before, or an underflow)");
  }
  uint64_t canary;
  __builtin_memcpy(&canary, block + end, sizeof canary);
  if (BRISK_UNLIKELY(canary != brisk_secure_canary(secret))) {
    _brisk_fatal_block(caller, p, page, "heap overflow past the requested size");
  }
  /* An intact block, but p is not where it was handed out: inside an
   * aligned block, or the start of one handed out further in. */
  if (BRISK_UNLIKELY(offset != (uint64_t)(p - block))) _brisk_fatal_not_block_start(caller, p, page);
  return needed;
}

static size_t checked_requested_end(const char *caller, const brisk_page_t *page,
                                    const uint8_t *block, const uint8_t *p) {
  uint64_t needed = checked_needed(caller, page, brisk_page_block_size(page), block, p);
  return (size_t)(needed - BRISK_SECURE_OVERHEAD - (uint64_t)(p - block));
}

size_t _brisk_secure_requested_size(const char *caller, const brisk_page_t *page,
                                    const uint8_t *block, const uint8_t *p) {
  if (BRISK_UNLIKELY(((const brisk_word_t *)block)[1] == brisk_block_secret(block))) {
    _brisk_fatal_block(caller, p, page, "invalid pointer: block is already free (double free?)");
  }
  return checked_requested_end(caller, page, block, p);
}

void _brisk_secure_free_interior(const brisk_page_t *page, size_t block_size, uint8_t *block,
                                 const void *p) {
  uint64_t secret = brisk_block_secret(block);
  if (BRISK_UNLIKELY(((const brisk_word_t *)block)[1] == secret)) {
    _brisk_fatal_block("free", p, page, "invalid pointer: block is already free (double free?)");
  }
  uint64_t needed = checked_needed("free", page, block_size, block, p);
  ((brisk_word_t *)block)[-1] = needed ^ brisk_secure_canary(secret);
}

void _brisk_secure_fatal_end(const brisk_page_t *page, const uint8_t *block) {
  /* The free tag is set (another thread freed the block): header and canary
   * only. */
  checked_requested_end("free", page, block, block);
  _brisk_fatal_block("free", block, page, "heap corruption");
}

void _brisk_secure_fatal_link(const brisk_page_t *page, const uint8_t *block) {
  _brisk_fatal_block("free", block, page,
                     "heap corruption: a free block was written (write after free, or an "
                     "overflow from the block before), before its owner took it back");
}

void _brisk_secure_fatal_free(const char *caller, const brisk_page_t *page, const uint8_t *block) {
  _brisk_secure_requested_size(caller, page, block, block);
  /* brisk_secure_free_block found what the function above names. */
  _brisk_fatal_block(caller, block, page, "heap corruption");
}
