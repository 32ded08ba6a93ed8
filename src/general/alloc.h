/*
 * alloc.h — malloc's and free's fast paths, inline for api.c and override/.
 *
 * Call tree:
 *   brisk_malloc_inline(size)
 *     size <= 1 KiB and the page has a free block: pop it
 *       (brisk_malloc_pop)                                        (fast)
 *     else _brisk_malloc_generic                                  (page.c)
 *   (secure build: brisk_secure_malloc_pop, the same fast path for the
 *    size plus BRISK_SECURE_OVERHEAD, which checks the popped block and
 *    writes its canary and header, else _brisk_secure_malloc, secure.c;
 *    free checks the block first, brisk_secure_free_block, internal.h)
 *   brisk_free_inline(p)
 *     p's segment slot is not brisk's (NULL, a foreign pointer, a
 *       segment-aligned huge block): _brisk_free_generic          (free.c)
 *     segment owned by this thread (segment->owner_thread): push to
 *       page->free, the list malloc pops: the next malloc of the class
 *       on that page gets the block freed last, still in cache    (fast)
 *       (secure build: held back in page->local_free until the page's
 *       next free, brisk_secure_hold)
 *       p not a block's start (one multiplication, internal.h's
 *         brisk_page_is_block_start): _brisk_free_local_not_block_start,
 *         an aligned block's start or "not the start of a block", abort
 *       page became empty or was full, or serves no class:
 *         _brisk_page_free_slow                                   (page.c)
 *     else _brisk_free_not_local(p, segment): remote frees into the
 *       outbox, huge blocks, misuse                               (free.c)
 *
 * No atomics and no locks on either fast path; the shared words read are the
 * segment map and segment->owner_thread (see types.h).
 */
#ifndef BRISK_GENERAL_ALLOC_H
#define BRISK_GENERAL_ALLOC_H

#include "general/internal.h"

/* The release build's malloc fast path: a block from the page of size's
 * entry in the direct table, or NULL when size is past the table or that
 * page has no free block (the caller goes on to _brisk_malloc_generic). */
BRISK_INLINE void *brisk_malloc_pop(brisk_heap_t *heap, size_t size) {
  if (BRISK_LIKELY(size <= BRISK_DIRECT_MAX)) {
    size_t word = (size + 7) >> 3;
    brisk_page_t *page = heap->direct[word];
    brisk_block_t *block = page->free;
    if (BRISK_LIKELY(block != NULL)) {
      page->free = brisk_page_pop(page, block);
      page->used++;
      /* Statistics: plain counts in the heap's own lines; every 16384th
       * block of the entry, the heartbeat (types.h). */
      heap->bytes_requested_unfolded += size;
      if (BRISK_UNLIKELY(--heap->small_allocations_left[word] == 0)) {
        return _brisk_malloc_heartbeat(heap, block);
      }
      return block;
    }
  }
  return NULL;
}

/* malloc without the secure build's canary (brisk_malloc_inline). */
BRISK_INLINE void *brisk_malloc_raw(size_t size) {
  brisk_heap_t *heap = _brisk_tls_heap;
  void *block = brisk_malloc_pop(heap, size);
  if (BRISK_LIKELY(block != NULL)) return block;
  return _brisk_malloc_generic(size, heap, false);
}

/* The secure build's malloc of size bytes from block, the head of page's
 * malloc list: the counts, the pop with its checks, the canary and header. */
BRISK_INLINE void brisk_secure_take(brisk_heap_t *heap, brisk_page_t *page, brisk_block_t *block,
                                    size_t size) {
  /* The counts first (a failed check aborts anyway): fewer values live
   * across the checks, so no register needs saving. */
  page->used++;
  heap->bytes_requested_unfolded += size;
  /* The secret first: the stores below through brisk_word_t may alias the
   * keys, which would make the compiler read them again. */
  uint64_t secret = brisk_block_secret(block);
  page->free = brisk_secure_pop(page, block, secret);
  brisk_secure_stamp((uint8_t *)block, secret, (uint8_t *)block, size);
}

/* The secure build's malloc fast path: brisk_malloc_pop's for the padded
 * size, with the pop's checks (brisk_page_pop) and the stamp sharing one
 * secret word; NULL where the caller goes on to _brisk_secure_malloc. */
BRISK_INLINE void *brisk_secure_malloc_pop(brisk_heap_t *heap, size_t size) {
  /* Size 0 finds the empty page in direct[2]: the secure build has no
   * 16-byte blocks (internal.h), so no page of their class ever takes that
   * entry, and the slow path serves it as 1. */
  if (BRISK_LIKELY(size <= BRISK_DIRECT_MAX - BRISK_SECURE_OVERHEAD)) {
    size_t padded = size + BRISK_SECURE_OVERHEAD;
    size_t word = (padded + 7) >> 3;
    brisk_page_t *page = heap->direct[word];
    brisk_block_t *block = page->free;
    if (BRISK_LIKELY(block != NULL)) {
      brisk_secure_take(heap, page, block, size);
      if (BRISK_UNLIKELY(--heap->small_allocations_left[word] == 0)) {
        return _brisk_malloc_heartbeat(heap, block);
      }
      return block;
    }
  }
  return NULL;
}

/* malloc's fast path in either build: a block, or NULL where malloc goes on
 * to brisk_malloc_after_pop. */
BRISK_INLINE void *brisk_malloc_pop_either(brisk_heap_t *heap, size_t size) {
  if (BRISK_SECURE) return brisk_secure_malloc_pop(heap, size);
  return brisk_malloc_pop(heap, size);
}

/* malloc past its fast path: a block, or NULL with errno ENOMEM. */
BRISK_INLINE void *brisk_malloc_after_pop(brisk_heap_t *heap, size_t size) {
  if (BRISK_SECURE) return _brisk_secure_malloc(size, false);
  return _brisk_malloc_generic(size, heap, false);
}

BRISK_INLINE void *brisk_malloc_inline(size_t size) {
  brisk_heap_t *heap = _brisk_tls_heap;
  void *block = brisk_malloc_pop_either(heap, size);
  if (BRISK_LIKELY(block != NULL)) return block;
  return brisk_malloc_after_pop(heap, size);
}

BRISK_INLINE void brisk_free_inline(void *p) {
  uintptr_t address = (uintptr_t)p;
  size_t page_shift = brisk_segment_map_shift(address);
  if (BRISK_UNLIKELY(page_shift == 0)) {
    _brisk_free_generic(p);
    return;
  }
  brisk_segment_t *segment = brisk_segment_of(address);
  /* The segment's owner, not the page's descriptor: another thread's block
   * must not pull the descriptor's line from its owner's cache (types.h). */
  if (BRISK_LIKELY(brisk_load_relaxed(&segment->owner_thread) == brisk_thread_id())) {
    brisk_page_t *page = &segment->pages[(address & BRISK_SEGMENT_MASK) >> page_shift];
    BRISK_KEEP_IN_REGISTER(page);
    brisk_block_t *block = (brisk_block_t *)p;
    if (BRISK_SECURE) {
      /* An interior pointer (of an aligned block, or a bad one), or any
       * address on a page serving no class, whose descriptor fails the test
       * (brisk_page_set_no_blocks): the checked path names it or finds the
       * block's start. */
      if (!brisk_page_is_block_start(page, address)) {
        _brisk_free_not_local(p, segment);
        return;
      }
      /* Held back until the page's next free (brisk_secure_hold): the
       * block just freed is not the next one handed out. */
      uint64_t secret = brisk_secure_free_block("free", page, page->block_size, p);
      brisk_secure_hold(page, block, secret);
    }
    /* The release build: straight onto malloc's list, last in first out:
     * a block freed by its owner is reused while its lines are still in
     * this core's cache, not after the blocks freed before it. A thread
     * whose mallocs its own frees serve then seldom takes malloc's slow path:
     * malloc's heartbeat (types.h) drains its remote frees and does its
     * housekeeping every 16384 blocks of one direct-table entry, so after
     * at most n * 16384 mallocs for a thread that spreads them over n
     * entries (n <= 129), however many blocks other threads have freed to
     * it meanwhile. (The secure build pushed the block above.) */
    if (!BRISK_SECURE) brisk_page_push(page, &page->free, block);
    /* A pointer inside a block (free(p + 32)) must not stay on the list,
     * where malloc would hand it out over live blocks. Tested after the
     * push, which leaves p's register free for the test; the checked path
     * takes p back off the list and aborts, or frees the block that holds
     * it on a page of aligned blocks. (The secure build tested it before
     * the push.) */
    if (!BRISK_SECURE && BRISK_UNLIKELY(!brisk_page_is_block_start(page, address))) {
      _brisk_free_local_not_block_start(segment, page);
      return;
    }
    /* One test for "now empty" and for the full flag (the sign bit). A
     * page serving no class (a block freed again after its page was given
     * back) has used 0 and goes there too, to be named. */
    if (BRISK_UNLIKELY(brisk_decrement_was_at_most_one(&page->used))) {
      /* NULL in the release build: the block heads page->free, where the
       * slow path finds it, and p's register stays free. */
      _brisk_page_free_slow(segment->heap, page, BRISK_SECURE ? block : NULL);
    }
    return;
  }
  _brisk_free_not_local(p, segment);
}

#endif /* BRISK_GENERAL_ALLOC_H */
