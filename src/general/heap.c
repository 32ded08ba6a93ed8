/*
 * heap.c — thread heaps: creation and adoption, the remote-free queue,
 * thread exit, and fork.
 *
 * A heap serves one thread at a time and is never freed. When its thread
 * exits, the heap goes on the abandoned list as it is, with its live blocks
 * and its warm memory; the next thread that needs a heap adopts it whole. A
 * heap left unadopted for a while is tidied (empty pages retired, memory
 * purged, empty segments released) by another thread. So 10,000 short threads
 * reuse one heap instead of leaking 10,000, and a segment's owner heap never
 * changes.
 *
 * Remote frees: blocks freed by a thread that does not own their page are
 * recorded in batches in that thread's outbox (free.c), and a batch (or,
 * with none to be had, a lone block) is posted to the owner heap's queue as
 * one node: an intrusive multi-producer single-consumer queue after Vyukov,
 * where a producer does one atomic exchange on the tail and then links the
 * previous tail to its node. There is no CAS retry loop however many threads
 * free at once. The owner drains the queue in its slow path and gives each
 * batch back to the heap it came from. A node whose producer has exchanged
 * but not yet linked is left for the next drain; nobody waits for it.
 *
 * Abandoned heaps: nobody drains their queue, so a producer that sees the
 * `abandoned` flag after pushing tries to take the heap's drain_lock (never
 * waits for it) and drains on the heap's behalf, or leaves a request that
 * the lock's holder honours (drain_abandoned). The exiting thread sets the
 * flag while holding drain_lock, an adopter takes drain_lock before clearing
 * it, so only one thread at a time works on a heap's pages.
 *
 * Locks: heaps_lock guards the abandoned and all-heaps lists; it is taken
 * when a thread gets its first heap and when it exits, and by the tidy pass
 * over stale abandoned heaps and the pass over idle live ones (each at most
 * once per BRISK_PURGE_DELAY_MS in the whole process, from a slow path; the
 * latter only tries it), never by malloc's or free's fast paths.
 * Order: heaps_lock, then drain_locks, which are only ever tried under it;
 * a thread that holds a drain_lock only tries heaps_lock (fork_prepare
 * waits for every drain_lock under it).
 * pthread_atfork holds it, every drain_lock and every memory_lock across
 * fork(), with handlers registered when the library is loaded
 * (_brisk_heaps_register_fork_handlers).
 */
#define _GNU_SOURCE
#include "general/internal.h"
#include "os/os.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>


brisk_page_t _brisk_page_empty;
brisk_heap_t _brisk_heap_empty = {
    .direct = {[0 ... BRISK_DIRECT_COUNT - 1] = &_brisk_page_empty},
    .small_allocations_left = {[0 ... BRISK_DIRECT_COUNT - 1] = BRISK_ALLOCATIONS_PER_FOLD},
    .is_empty_heap = true,
};
BRISK_TLS brisk_heap_t *_brisk_tls_heap = &_brisk_heap_empty;

static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static brisk_heap_t *abandoned_heaps;
static brisk_heap_t *all_heaps;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

/* The thread inside fork() from the end of fork_prepare to the start of
 * fork_parent or fork_child, which holds heaps_lock and every heap's
 * drain_lock and memory_lock then; 0 otherwise. pthread_atfork runs the
 * prepare handler of a library that registered before brisk (its
 * constructor ran first) after ours, and its parent and child handlers
 * before ours: one that allocates must not wait for the locks its own
 * thread holds. For that thread they count as taken (no other thread can
 * be in what they guard), so its calls take and release none of them.
 * Relaxed: a thread only ever finds its own id here if it wrote it. */
static _Atomic(uintptr_t) forking_thread;

static bool in_fork_handlers(void) {
  return brisk_load_relaxed(&forking_thread) == brisk_thread_id();
}

static void heaps_lock_take(void) {
  if (!in_fork_handlers()) pthread_mutex_lock(&heaps_lock);
}

static bool heaps_lock_try(void) {
  return in_fork_handlers() || pthread_mutex_trylock(&heaps_lock) == 0;
}

static void heaps_lock_give(void) {
  if (!in_fork_handlers()) pthread_mutex_unlock(&heaps_lock);
}
static pthread_key_t heap_key;

/* ---- the remote queue ---- */

static brisk_remote_node_t *link_node(uintptr_t link) {
  return (brisk_remote_node_t *)(link & ~BRISK_REMOTE_BATCH_TAG);
}

/* The secure build stores a queue link xored with a secret of the node that
 * holds it: a block posted alone holds its link in its first word, which a
 * write after free or an overflow from the block before can reach, and a
 * link the program wrote must not send the drain into memory of its
 * choosing. "Not linked yet" is a link of 0, stored encoded like any
 * other, so that a plain 0 written over the word is caught as well: bit 63
 * of the key is set, so no stored word is 0. The release build stores the
 * link as it is. */
static uintptr_t remote_link_key(const brisk_remote_node_t *node) {
  return BRISK_SECURE ? brisk_block_secret(node) | ((uintptr_t)1 << 63) : 0;
}

/* Make node the end of a queue: "not linked yet". relaxed: the node is
 * published by the exchange that appends it (remote_push), or is the stub of
 * a heap nobody else can see yet. */
static void remote_mark_unlinked(brisk_remote_node_t *node) {
  atomic_store_explicit(&node->next, remote_link_key(node), memory_order_relaxed);
}

/* Secure build: whether link, read from a node of heap's queue, can be
 * followed: the heap's stub, a block of a size-class page, or a batch
 * posted to this heap (in a heap's or a batch chunk's mapping, which the
 * kernel places below 2^47 when no hint asks otherwise). */
static bool remote_link_is_valid(const brisk_heap_t *heap, uintptr_t link) {
  brisk_remote_node_t *node = link_node(link);
  if (link & BRISK_REMOTE_BATCH_TAG) {
    return ((uintptr_t)node >> 47) == 0 && ((uintptr_t)node & 7) == 0 &&
           ((const brisk_remote_batch_t *)node)->owner == heap;
  }
  if (node == &heap->remote_stub) return true;
  if (!brisk_segment_map_contains((uintptr_t)node)) return false;
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)node);
  return segment->kind != BRISK_KIND_HUGE &&
         brisk_load_relaxed(&segment->page_info[brisk_page_index(segment, (uintptr_t)node)]) != 0;
}

static BRISK_NORETURN BRISK_COLD void remote_link_fatal(const brisk_remote_node_t *node) {
  uintptr_t address = (uintptr_t)node;
  if (brisk_segment_map_contains(address)) {
    brisk_segment_t *segment = brisk_segment_of(address);
    _brisk_fatal_block("free", node, brisk_page_of(segment, address),
                       "heap corruption: a free block was written (write after free, or an "
                       "overflow from the block before), its remote-free link");
  }
  _brisk_os_fatal_pointer("free", node, "heap corruption: a remote-free queue link was overwritten");
}

/* The link node holds, decoded and, in the secure build, checked; 0 when
 * not linked yet. order: acquire where the consumer follows the link (pairs
 * with remote_push's release), relaxed in fork's child (one thread left). */
static uintptr_t remote_next(const brisk_heap_t *heap, brisk_remote_node_t *node,
                             memory_order order) {
  uintptr_t stored = atomic_load_explicit(&node->next, order);
  if (!BRISK_SECURE) return stored;
  uintptr_t link = stored ^ remote_link_key(node);
  if (link == 0) return 0;
  if (BRISK_UNLIKELY(!remote_link_is_valid(heap, link))) remote_link_fatal(node);
  return link;
}

/* Append node (marked unlinked already) to the queue; tag says what it is. */
static void remote_push(brisk_heap_t *heap, brisk_remote_node_t *node, uintptr_t tag) {
  /* The exchange orders us after the previous producer's exchange (acq_rel
   * would do for that; on x86 an exchange is a full barrier anyway). It
   * orders nothing after it: the link stored below is what the
   * abandoned-heap handshake needs ordered, by the fence in
   * _brisk_heap_post_remote. */
  brisk_remote_node_t *previous =
      atomic_exchange_explicit(&heap->remote_tail, node, memory_order_seq_cst);
  /* release: the consumer that follows this link sees the node's contents
   * (a batch's array, a block's zeroed link). */
  atomic_store_explicit(&previous->next, ((uintptr_t)node | tag) ^ remote_link_key(previous),
                        memory_order_release);
}

/* Consumer side: the link to the next node, its tag telling a batch from a
 * block; 0 when the queue is empty or the next node's producer has not
 * linked it yet. */
static uintptr_t remote_pop(brisk_heap_t *heap) {
  brisk_remote_node_t *stub = &heap->remote_stub;
  uintptr_t head_link = heap->remote_head;
  brisk_remote_node_t *head = link_node(head_link);
  uintptr_t next = remote_next(heap, head, memory_order_acquire);
  if (head == stub) {
    if (next == 0) return 0;
    heap->remote_head = head_link = next;
    head = link_node(next);
    next = remote_next(heap, head, memory_order_acquire);
  }
  if (next != 0) {
    heap->remote_head = next;
    return head_link;
  }
  if (atomic_load_explicit(&heap->remote_tail, memory_order_acquire) != head) return 0;
  /* head is the last node: put the stub behind it so head can be taken. */
  remote_mark_unlinked(stub);
  remote_push(heap, stub, 0);
  next = remote_next(heap, head, memory_order_acquire);
  if (next != 0) {
    heap->remote_head = next;
    return head_link;
  }
  return 0;
}

/* A block another thread freed twice: both frees found it live (it counts
 * as used until its owner drains it), and the first one, taken back before
 * this one, emptied its page. */
static BRISK_NORETURN BRISK_COLD void remote_double_free(uintptr_t address) {
  brisk_fatal_pointer("free", (void *)address,
                      "block is already free (double free?), freed again by another thread");
}

/* The page of a block another thread freed to heap, once its segment is
 * found still mapped and heap's (page_shift: its segment map entry, then
 * the header line every free reads); the callers check the page. Otherwise
 * the block was freed twice, and the first free, taken back before,
 * emptied its page, whose segment went back to the system (and perhaps to
 * another heap). */
BRISK_INLINE brisk_page_t *remote_block_page(const brisk_heap_t *heap, uintptr_t address,
                                             size_t page_shift) {
  brisk_segment_t *segment = brisk_segment_of(address);
  if (BRISK_UNLIKELY(page_shift == 0 || segment->heap != heap)) remote_double_free(address);
  return &segment->pages[(address & BRISK_SEGMENT_MASK) >> page_shift];
}

static void free_remote_block(brisk_heap_t *heap, brisk_page_t *page, void *block) {
  brisk_stat_add(&heap->stats.remote_frees[page->class_index], 1);
  brisk_secure_check_end(page, block);
  _brisk_page_free_block(heap, page, (brisk_block_t *)block);
}

/* Return a batch's blocks to their pages, then keep the batch or give it
 * back to its home. The release build reads none of the blocks' memory
 * here: each gets one store (its free-list link), and those stores do not
 * wait on each other as a walk along the blocks' own links would. (The
 * secure build reads each block's first word, and the header and canary of
 * one above 32 bytes: brisk_secure_check_link, brisk_secure_check_end.)
 * Each block's page must still serve the class its free found
 * (batch->classes, types.h): one that serves none (class 0: it went back
 * to its segment) or another class since is the page of a block freed
 * twice, whose first free emptied it. */
static size_t drain_batch(brisk_heap_t *heap, brisk_remote_batch_t *batch) {
  size_t count = batch->count;
  enum { PREFETCH_AHEAD = 4 };
  for (size_t i = 0; i < count; i++) {
    if (i + PREFETCH_AHEAD < count) __builtin_prefetch(batch->blocks[i + PREFETCH_AHEAD], 1);
    uintptr_t address = (uintptr_t)batch->blocks[i];
    /* Its free found it in the map: its slot is in the map's range. */
    size_t page_shift = brisk_load_relaxed(&_brisk_segment_map[address >> BRISK_SEGMENT_SHIFT]);
    brisk_page_t *page = remote_block_page(heap, address, page_shift);
    if (BRISK_UNLIKELY(page->class_index != batch->classes[i])) remote_double_free(address);
    brisk_secure_check_link(page, (const uint8_t *)address);
    free_remote_block(heap, page, (void *)address);
  }
  /* Threads that free each other's blocks (a pool of workers passing
   * work) post about as many batches as they drain: each keeps the batches
   * it empties, and no line of the home heap moves between cores. A heap
   * keeps one batch for each it posted (keep_credit, at most
   * BRISK_KEPT_BATCHES ahead), so one that drains more than it posts (a
   * producer whose consumers free its blocks) sends the rest home: kept
   * without end, they would leave a consumer of many producers with none
   * to fill. A kept batch keeps its home, so whoever cannot keep it in turn
   * (a pipeline's last stage) sends it back where it came from. An
   * abandoned heap, drained on its behalf, keeps none: its thread's credit
   * went with it (thread_exit), and nobody posts from it until a thread
   * adopts it. Heaps are never freed, so a batch may wait in any heap's
   * list. */
  if (heap->keep_credit > 0) {
    heap->keep_credit--;
    batch->next_free = heap->free_batches;
    heap->free_batches = batch;
    return count;
  }
  brisk_heap_t *home = batch->home;
  brisk_remote_batch_t *top = atomic_load_explicit(&home->returned_batches, memory_order_relaxed);
  do {
    batch->next_free = top;
    /* release: our reads of blocks[] (and this link) come before the home
     * heap takes the batch and fills it again (batch_take's acquire). */
  } while (!atomic_compare_exchange_weak_explicit(&home->returned_batches, &top, batch,
                                                  memory_order_release, memory_order_relaxed));
  return count;
}

size_t _brisk_heap_drain_remote(brisk_heap_t *heap) {
  uintptr_t link;
  size_t drained = 0;
  while ((link = remote_pop(heap)) != 0) {
    if (link & BRISK_REMOTE_BATCH_TAG) {
      drained += drain_batch(heap, (brisk_remote_batch_t *)link_node(link));
    } else {
      /* A block posted alone: no class to check, only that its page
       * serves one. */
      uintptr_t address = (uintptr_t)link_node(link);
      brisk_page_t *page = remote_block_page(heap, address, brisk_segment_map_shift(address));
      if (BRISK_UNLIKELY(!page->in_use)) remote_double_free(address);
      free_remote_block(heap, page, (void *)address);
      drained++;
    }
  }
  return drained;
}

void _brisk_heap_lock_memory(brisk_heap_t *heap) {
  if (in_fork_handlers()) return;
  /* acquire/release: whoever takes the lock next sees the lists as the
   * holder left them. Held for short work (a page, a purge, a cache entry),
   * so a waiter yields rather than sleeps. */
  while (atomic_exchange_explicit(&heap->memory_lock, true, memory_order_acquire)) {
    while (atomic_load_explicit(&heap->memory_lock, memory_order_relaxed)) sched_yield();
  }
}

bool _brisk_heap_try_lock_memory(brisk_heap_t *heap, uint64_t patience_ms) {
  if (in_fork_handlers()) return true;
  uint64_t deadline = 0;
  while (atomic_exchange_explicit(&heap->memory_lock, true, memory_order_acquire)) {
    uint64_t now = _brisk_os_now_ms();
    if (deadline == 0) deadline = now + patience_ms;
    if (now >= deadline) return false;
    sched_yield();
  }
  return true;
}

void _brisk_heap_unlock_memory(brisk_heap_t *heap) {
  if (in_fork_handlers()) return;
  atomic_store_explicit(&heap->memory_lock, false, memory_order_release);
}

static bool drain_lock_try(brisk_heap_t *heap) {
  if (in_fork_handlers()) return true;
  bool expected = false;
  /* Acquire would do for the heap's contents (everything the previous
   * holder did is visible); seq_cst for drain_abandoned's handshake. */
  return atomic_compare_exchange_strong_explicit(&heap->drain_lock, &expected, true,
                                                 memory_order_seq_cst, memory_order_seq_cst);
}

static void drain_lock_release(brisk_heap_t *heap) {
  if (in_fork_handlers()) return;
  atomic_store_explicit(&heap->drain_lock, false, memory_order_seq_cst);
}

/*
 * Return the queued blocks of an abandoned heap to their pages, on behalf of
 * whoever pushed them. Only the drain_lock holder may drain, and nobody
 * waits for the lock, so a pusher that finds it taken leaves its block to
 * the holder through `drain_requested`:
 *
 *   pusher (after linking its block):  fence; requested = true; try-lock
 *   holder:  requested = false; fence; drain; unlock; requested? go again
 *
 * All seq_cst. If the pusher's `requested = true` comes before the holder's
 * `requested = false`, the fences order the pusher's link before the
 * holder's drain, which therefore sees the block. Otherwise the pusher's
 * failed try-lock came before the unlock, so the holder sees the request
 * after unlocking and drains again. A block whose producer has exchanged
 * but not yet linked needs no waiting: that producer comes here itself.
 */
static void drain_abandoned(brisk_heap_t *heap) {
  atomic_thread_fence(memory_order_seq_cst);
  atomic_store_explicit(&heap->drain_requested, true, memory_order_seq_cst);
  while (atomic_load_explicit(&heap->drain_requested, memory_order_seq_cst) &&
         drain_lock_try(heap)) {
    atomic_store_explicit(&heap->drain_requested, false, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&heap->abandoned, memory_order_seq_cst)) {
      _brisk_heap_drain_remote(heap);
      _brisk_heap_unpin_empty_large(heap);
      if ((++heap->generic_calls & 63) == 0) {
        _brisk_heap_purge(heap, _brisk_os_now_ms(), BRISK_PURGE_DELAY_MS);
      }
    }
    drain_lock_release(heap);
  }
}

/* Make an abandoned heap hold as little as possible: return remote frees to
 * their pages, retire empty pages, give back the huge cache and surplus
 * segments, and decommit its free pages: at once (purge_now) for a heap
 * nobody adopted in time, which no owner will come back to purge; on the
 * usual delay for one a thread is about to adopt, whose housekeeping will.
 * Called with the drain_lock held and `abandoned` set, so head pages are
 * unpinned and segments that empty are released at once. */
static void heap_tidy(brisk_heap_t *heap, bool purge_now) {
  _brisk_heap_drain_remote(heap);
  _brisk_heap_unpin_all(heap);
  _brisk_heap_collect_all(heap);
  _brisk_huge_cache_trim(heap, 0, 0);
  _brisk_heap_release_empty_segments(heap, true);
  if (purge_now) {
    _brisk_heap_purge(heap, 0, 0);
  } else {
    _brisk_heap_purge(heap, _brisk_os_now_ms(), BRISK_PURGE_DELAY_MS);
  }
  _brisk_heap_fold_stats(heap);
  atomic_store_explicit(&heap->tidied, true, memory_order_relaxed);
}

/*
 * An exiting thread leaves its heap as it is (pinned heads, empty pages,
 * spare segments, huge cache), so that the thread that adopts it next, in a
 * program that runs short threads one after another, starts warm instead of
 * faulting in again what the last one gave back. A heap that nobody adopts
 * within ABANDONED_TIDY_DELAY_MS is tidied by another thread's slow paths
 * (malloc's housekeeping, free's batch posts and page retires, thread exit;
 * tidy_stale_abandoned), so its memory still goes back promptly. Until then
 * a warm heap is treated as a live one: pages that other threads' frees
 * empty wait out the purge delay (and what the heap learnt to keep), and
 * its cached huge mappings stay, so a program that runs rounds of threads
 * gets them back instead of unmapping and faulting in again (heap_is_cold
 * in segment.c). At most WARM_ABANDONED_MAX heaps wait warm; an exiting
 * thread beyond them tidies its own heap at once. A warm heap keeps from
 * its thread WARM_FREE_BYTES of free pages still backed, a pinned head per
 * small and medium class (64 KiB and 512 KiB pages, about 16 MiB in all)
 * and WARM_HUGE_BYTES of cached huge mappings; the rest goes back at exit.
 * Pages that other threads' frees empty later wait as in a live heap (the
 * purge delay, the limit on free bytes kept backed), except large ones: a
 * 4 MiB page each, a dozen classes of them would outweigh all the rest, so
 * they go back as they empty, pinned heads included
 * (_brisk_heap_unpin_empty_large, _brisk_segment_page_free). Threads that
 * exit while the rest of the program sits idle strand at most that much
 * free memory, never more than they held.
 * `untidied_abandoned` lets every other call of that function return after
 * one load; `next_tidy_pass_ms` lets one thread at a time make the pass.
 */
#define ABANDONED_TIDY_DELAY_MS (2 * BRISK_PURGE_DELAY_MS)
#define WARM_ABANDONED_MAX 16
#define WARM_FREE_BYTES    ((size_t)4 << 20)
#define WARM_HUGE_BYTES    ((size_t)16 << 20)
static _Atomic(size_t) untidied_abandoned;
static _Atomic(uint64_t) next_tidy_pass_ms;

/* Returns how many heaps it tidied (at most MAX_PER_PASS). `wait`: the
 * caller holds no drain_lock, so it may wait for heaps_lock; other callers
 * (a page retired while a heap is drained or tidied under its drain_lock)
 * only try it: fork_prepare holds heaps_lock while it waits for every
 * drain_lock, and waiting for heaps_lock there would deadlock with it. */
enum { MAX_PER_PASS = 8 };
static size_t tidy_stale_abandoned(uint64_t now, bool wait) {
  if (atomic_load_explicit(&untidied_abandoned, memory_order_relaxed) == 0) return 0;
  uint64_t due = atomic_load_explicit(&next_tidy_pass_ms, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong_explicit(&next_tidy_pass_ms, &due,
                                                            now + BRISK_PURGE_DELAY_MS,
                                                            memory_order_relaxed,
                                                            memory_order_relaxed)) {
    return 0;
  }
  /* Take the drain_locks of the stale heaps under heaps_lock, tidy them
   * after it is released: the syscalls of a tidy never hold up thread
   * creation and exit. An adopter that pops one meanwhile waits for its
   * drain_lock, as it does for a freeing thread's drain. */
  brisk_heap_t *stale[MAX_PER_PASS];
  size_t count = 0;
  if (wait) {
    heaps_lock_take();
  } else if (!heaps_lock_try()) {
    /* The pass is still due: the next call makes it. */
    atomic_store_explicit(&next_tidy_pass_ms, due, memory_order_relaxed);
    return 0;
  }
  for (brisk_heap_t *heap = abandoned_heaps; heap != NULL && count < MAX_PER_PASS;
       heap = heap->next_abandoned) {
    /* abandoned_at_ms may be later than `now`, read before that exit. A
     * heap already tidied is passed over without its drain_lock: a free
     * that finds the lock taken leaves its block to the holder
     * (drain_abandoned), which here would have nothing else to do. */
    if (heap->abandoned_at_ms > now || now - heap->abandoned_at_ms < ABANDONED_TIDY_DELAY_MS ||
        atomic_load_explicit(&heap->tidied, memory_order_relaxed) || !drain_lock_try(heap)) {
      continue;
    }
    if (atomic_load_explicit(&heap->tidied, memory_order_relaxed)) {
      /* Tidied by a concurrent pass (brisk_collect's) since the test above:
       * honour the frees that found its lock taken meanwhile. */
      drain_lock_release(heap);
      drain_abandoned(heap);
      continue;
    }
    stale[count++] = heap;
  }
  heaps_lock_give();
  for (size_t i = 0; i < count; i++) {
    heap_tidy(stale[i], true);
    atomic_fetch_sub_explicit(&untidied_abandoned, 1, memory_order_relaxed);
    drain_lock_release(stale[i]);
    drain_abandoned(stale[i]); /* frees that failed to take the lock meanwhile */
  }
  return count;
}

void _brisk_heap_post_remote(brisk_heap_t *owner, brisk_remote_node_t *node, uintptr_t tag) {
  remote_mark_unlinked(node);
  remote_push(owner, node, tag);
  /* A store-then-load handshake with thread_exit, which stores `abandoned`,
   * then drains: either we see the flag, or its drain sees our link. Each
   * side needs a seq_cst fence between its store and its load: without
   * this one, our link (a release store) may still wait in this core's
   * store buffer while the load below reads the flag as it was, and the
   * exiting thread's drain then finds the queue empty too (seen on x86):
   * the blocks stayed queued, their pages counted in use, until some later
   * free or adoption drained that heap. One fence per posted batch. */
  atomic_thread_fence(memory_order_seq_cst);
  if (BRISK_UNLIKELY(atomic_load_explicit(&owner->abandoned, memory_order_relaxed))) {
    drain_abandoned(owner);
  }
}

/*
 * Live heaps whose thread has not run its housekeeping for
 * BRISK_PURGE_DELAY_MAX_MS (it sleeps, waits, or stays on fast paths that
 * never come here) get from another thread's housekeeping what their own
 * would do: free pages past the purge delay and cached huge mappings past
 * their age go back to the system, under the heap's memory_lock, as
 * brisk_collect(true) does for every heap. So a thread that frees a lot
 * and then sleeps keeps its free memory for at most that long while any
 * other thread runs. Its kept empty pages and pinned heads (about 16 MiB
 * at most) are its thread's alone and wait for it. One pass per purge
 * delay in the whole process, or per huge mappings' age where that is
 * shorter (a purge delay of an hour must not keep an idle thread's huge
 * mappings for an hour when their age is a second), at most IDLE_PER_PASS
 * heaps. A heap left with no free page backed and no cached huge mapping
 * is marked done (housekept_at_ms 0, under its memory_lock) and passed
 * over until its thread runs its housekeeping again, or frees a page or a
 * huge block into it (_brisk_heap_idle_rearm, under the same lock: what it
 * freed goes back BRISK_PURGE_DELAY_MAX_MS later). A heap still holding
 * some (freed after its last housekeeping, not due yet) is looked at again
 * by later passes until they are gone.
 *
 * The same passes give back the cached huge mappings past their age of the
 * heaps that exited threads left warm (at most WARM_ABANDONED_MAX, not yet
 * tidied): their tidy gives everything back, but only ABANDONED_TIDY_DELAY_MS
 * after the exit, twice the purge delay, which a long purge delay makes
 * hours; their huge mappings go after their own age, as in any heap.
 */
enum { IDLE_PER_PASS = 16 };
static _Atomic(uint64_t) next_idle_pass_ms;

/* Free pages still backed or cached huge mappings; under its memory_lock. */
static bool holds_free_memory(const brisk_heap_t *heap) {
  for (int kind = 0; kind < BRISK_KIND_COUNT_PAGED; kind++) {
    if (heap->purge_lists[kind].pages.head != NULL) return true;
  }
  return heap->huge_cache_count != 0;
}

/* Whether a heap whose thread last ran its housekeeping at seen_ms is idle
 * at now_ms. 0: a pass left it nothing since (below). A time later than
 * now_ms was read after now_ms was. */
static bool idle_since(uint64_t seen_ms, uint64_t now_ms) {
  return seen_ms != 0 && seen_ms <= now_ms &&
         now_ms - seen_ms >= _brisk_options.purge_delay_max_ms;
}

/* The time between two idle-heap passes: the purge delay, or the huge
 * mappings' age where that is shorter, at least 1 ms (an age of 0 keeps a
 * freed mapping until its heap's next housekeeping or pass). */
static uint64_t idle_pass_interval_ms(void) {
  uint64_t interval = BRISK_PURGE_DELAY_MS, huge_age = BRISK_HUGE_CACHE_MAX_AGE_MS;
  if (huge_age == 0) huge_age = 1;
  return huge_age < interval ? huge_age : interval;
}

static void purge_idle_heaps(const brisk_heap_t *self, uint64_t now) {
  uint64_t due = atomic_load_explicit(&next_idle_pass_ms, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong_explicit(&next_idle_pass_ms, &due,
                                                            now + idle_pass_interval_ms(),
                                                            memory_order_relaxed,
                                                            memory_order_relaxed)) {
    return;
  }
  /* The heaps are picked under heaps_lock (tried only: a later pass will
   * do) and purged after it is released, so thread creation and exit never
   * wait for the system calls. Heaps are never freed. */
  brisk_heap_t *idle[IDLE_PER_PASS];
  brisk_heap_t *warm[WARM_ABANDONED_MAX];
  size_t count = 0, warm_count = 0;
  if (!heaps_lock_try()) return;
  for (brisk_heap_t *heap = all_heaps; heap != NULL && count < IDLE_PER_PASS;
       heap = heap->next_all) {
    if (heap == self || heap->is_empty_heap || brisk_load_relaxed(&heap->abandoned)) continue;
    if (idle_since(brisk_load_relaxed(&heap->housekept_at_ms), now)) idle[count++] = heap;
  }
  for (brisk_heap_t *heap = abandoned_heaps; heap != NULL && warm_count < WARM_ABANDONED_MAX;
       heap = heap->next_abandoned) {
    if (!atomic_load_explicit(&heap->tidied, memory_order_relaxed)) warm[warm_count++] = heap;
  }
  heaps_lock_give();
  /* Under its memory_lock, as its adopter's own housekeeping would, should
   * one have taken it meanwhile. */
  for (size_t i = 0; i < warm_count; i++) {
    _brisk_huge_cache_trim(warm[i], now, BRISK_HUGE_CACHE_MAX_AGE_MS);
  }
  for (size_t i = 0; i < count; i++) {
    brisk_heap_t *heap = idle[i];
    _brisk_heap_purge(heap, now, BRISK_PURGE_DELAY_MS);
    _brisk_huge_cache_trim(heap, now, BRISK_HUGE_CACHE_MAX_AGE_MS);
    /* Under the memory lock: a page or huge block its thread frees after
     * this sees the mark and takes it off (_brisk_heap_idle_rearm). A CAS:
     * its thread may have come back meanwhile, and its time stays. */
    _brisk_heap_lock_memory(heap);
    uint64_t seen = brisk_load_relaxed(&heap->housekept_at_ms);
    if (!holds_free_memory(heap) && idle_since(seen, now)) {
      atomic_compare_exchange_strong_explicit(&heap->housekept_at_ms, &seen, 0,
                                              memory_order_relaxed, memory_order_relaxed);
    }
    _brisk_heap_unlock_memory(heap);
  }
}

void _brisk_heap_idle_rearm(brisk_heap_t *heap, uint64_t now_ms) {
  if (brisk_load_relaxed(&heap->housekept_at_ms) == 0) {
    brisk_store_relaxed(&heap->housekept_at_ms, now_ms);
  }
}

void _brisk_heap_housekeeping(brisk_heap_t *heap) {
  _brisk_heap_flush_outbox(heap);
  _brisk_heap_retire_empty_heads(heap);
  _brisk_heap_retire_kept_empty(heap, false);
  uint64_t now = _brisk_os_now_ms();
  brisk_store_relaxed(&heap->housekept_at_ms, now);
  tidy_stale_abandoned(now, true);
  /* Both lists may be emptied by brisk_collect(true) or an idle-heap pass
   * from another thread: looked at under the memory lock only. */
  _brisk_heap_purge(heap, now, BRISK_PURGE_DELAY_MS);
  _brisk_huge_cache_trim(heap, now, BRISK_HUGE_CACHE_MAX_AGE_MS);
  purge_idle_heaps(heap, now);
  _brisk_os_cache_expire(now); /* the region allocators' kept mappings */
  /* Debug builds check the whole heap now and then (every 1024 slow
   * mallocs): often enough to catch a broken invariant near its cause. */
  if (BRISK_DEBUG && (heap->generic_calls & 1023) == 0) _brisk_heap_validate(heap);
}

void _brisk_heap_collect(brisk_heap_t *heap) {
  _brisk_heap_flush_outbox(heap);
  _brisk_heap_drain_remote(heap);
  _brisk_heap_retire_empty_heads(heap);
  _brisk_heap_retire_empty_heads(heap); /* idle only when seen twice (page.c) */
  _brisk_heap_collect_all(heap);
  _brisk_huge_cache_trim(heap, 0, 0);
  _brisk_heap_purge(heap, 0, 0);
  _brisk_heap_release_empty_segments(heap, true);
}

void _brisk_heaps_trim_others(brisk_heap_t *self) {
  /* heaps_lock keeps fork() out while a memory_lock is held here; heaps are
   * never freed, so the list may be walked from its head. */
  heaps_lock_take();
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    if (heap == self) continue;
    _brisk_heap_purge(heap, 0, 0);
    _brisk_huge_cache_trim(heap, 0, 0);
  }
  heaps_lock_give();
}

void _brisk_heaps_for_each(void (*fn)(brisk_heap_t *heap, void *context), void *context) {
  /* Only the head is read under heaps_lock: heaps are never freed, and a
   * heap's next_all is written once, before heap_create publishes it under
   * the lock, so the list behind a head read there stays as it was. fn
   * (a statistics snapshot, which waits for each heap's memory lock in
   * turn) then holds up no thread's creation or exit. */
  heaps_lock_take();
  brisk_heap_t *first = all_heaps;
  heaps_lock_give();
  for (brisk_heap_t *heap = first; heap != NULL; heap = heap->next_all) fn(heap, context);
}

void _brisk_heaps_validate_idle(void) {
  heaps_lock_take();
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    if (heap->is_empty_heap || !brisk_load_relaxed(&heap->abandoned)) continue;
    if (!drain_lock_try(heap)) continue; /* being tidied by another thread */
    if (brisk_load_relaxed(&heap->abandoned)) _brisk_heap_validate(heap);
    drain_lock_release(heap);
    drain_abandoned(heap); /* frees that failed to take the lock meanwhile */
  }
  heaps_lock_give();
}

void _brisk_heaps_tidy_all(void) {
  /* Every unadopted heap counts as stale now; passes of MAX_PER_PASS. */
  uint64_t later = _brisk_os_now_ms() + ABANDONED_TIDY_DELAY_MS;
  do {
    atomic_store_explicit(&next_tidy_pass_ms, 0, memory_order_relaxed);
  } while (tidy_stale_abandoned(later, true) == MAX_PER_PASS);
}

bool _brisk_heap_reclaim(brisk_heap_t *heap, size_t needed) {
  brisk_os_counts_t counts;
  _brisk_os_counts(&counts);
  if (needed > counts.bytes_mapped) return false;
  uint64_t releases_before = _brisk_os_thread_releases();
  if (!heap->is_empty_heap) {
    _brisk_heap_collect(heap);
    _brisk_heap_release_empty_segments(heap, false);
  }
  _brisk_heaps_tidy_all();
  /* An abandoned heap keeps a spare segment per kind for its adopter, and a
   * tidied one may have emptied more since (other threads' frees). Those
   * whose drain_lock is free now give them all back; the syscalls under
   * heaps_lock hold up thread creation and exit, acceptable only here. */
  heaps_lock_take();
  for (brisk_heap_t *other = abandoned_heaps; other != NULL; other = other->next_abandoned) {
    if (!drain_lock_try(other)) continue;
    _brisk_heap_release_empty_segments(other, false);
    drain_lock_release(other);
    drain_abandoned(other); /* frees that failed to take the lock meanwhile */
  }
  heaps_lock_give();
  _brisk_heaps_trim_others(heap);
  /* All of the above runs on this thread (as in brisk_collect). */
  return _brisk_os_thread_releases() != releases_before;
}

/* ---- heap life cycle ---- */

static void heap_init_fields(brisk_heap_t *heap) {
  for (size_t i = 0; i < BRISK_DIRECT_COUNT; i++) {
    heap->direct[i] = &_brisk_page_empty;
    heap->small_allocations_left[i] = BRISK_ALLOCATIONS_PER_FOLD;
  }
  heap->remote_head = (uintptr_t)&heap->remote_stub;
  remote_mark_unlinked(&heap->remote_stub);
  atomic_store_explicit(&heap->remote_tail, &heap->remote_stub, memory_order_relaxed);
}

/* A heap's own mapping (heaps live for the whole process: a thread's exit
 * hands its heap on). The secure build puts a no-access OS page on either
 * side, so that an overflow out of a neighbouring mapping never reaches the
 * direct table or the queues. */
static brisk_heap_t *heap_map(void) {
  size_t page = _brisk_os_page_size(), guard = brisk_secure_guard_size();
  return _brisk_os_reserve_guarded(brisk_align_up(sizeof(brisk_heap_t), page), page, 0, guard,
                                   guard, NULL);
}

static brisk_heap_t *heap_create(void) {
  brisk_heap_t *heap = heap_map();
  if (heap == NULL) return NULL;
  heap_init_fields(heap); /* fresh memory is zero: the rest starts empty */
  heaps_lock_take();
  heap->next_all = all_heaps;
  all_heaps = heap;
  heaps_lock_give();
  brisk_global_stat_add(BRISK_STAT_HEAPS_CREATED, 1);
  return heap;
}

BRISK_TLS bool _brisk_thread_exited;

static void thread_exit(void *value) {
  brisk_heap_t *heap = value;
  if (heap == NULL || heap->is_empty_heap) return;
  _brisk_thread_exited = true;
  /* Blocks this thread freed for other heaps go to them now: nobody else
   * would post them before an adopter's housekeeping. */
  _brisk_heap_flush_outbox(heap);
  /* Before the thread is gone, so that a later thread with the same
   * thread pointer (glibc reuses thread stacks) never finds it on them. */
  _brisk_segments_set_owner_thread(heap, 0);
  if (_brisk_tls_heap == heap) _brisk_tls_heap = &_brisk_heap_empty;
  while (!drain_lock_try(heap)) sched_yield();
  /* `tidied` goes false before `abandoned` goes true: the heap must not look
   * cold (abandoned and tidied, so purged at once) to the drain below. */
  bool warm = atomic_load_explicit(&untidied_abandoned, memory_order_relaxed) < WARM_ABANDONED_MAX;
  atomic_store_explicit(&heap->tidied, false, memory_order_relaxed);
  atomic_store_explicit(&heap->abandoned, true, memory_order_seq_cst);
  /* The other half of _brisk_heap_post_remote's handshake: the drain below
   * reads the queue's links after the flag is stored. */
  atomic_thread_fence(memory_order_seq_cst);
  /* The batches it may keep were for this thread's posts (drain_batch):
   * kept while abandoned, or by an adopter that has posted nothing yet,
   * they would wait unused. */
  heap->keep_credit = 0;
  _brisk_heap_drain_remote(heap);
  /* Pages kept empty wait for housekeeping, which nobody runs for a heap no
   * thread owns: those still empty go to the purge list (bounded below), and
   * a page in use again would otherwise stay kept when it empties later,
   * even in a heap already tidied. */
  _brisk_heap_retire_kept_empty(heap, true);
  _brisk_heap_fold_stats(heap);
  brisk_global_stat_add(BRISK_STAT_HEAPS_ABANDONED, 1);
  uint64_t now = _brisk_os_now_ms();
  heap->abandoned_at_ms = now;
  if (warm) {
    _brisk_heap_unpin_empty_large(heap);
    _brisk_heap_purge_down_to(heap, WARM_FREE_BYTES);
    _brisk_huge_cache_trim_to(heap, WARM_HUGE_BYTES);
  } else {
    heap_tidy(heap, true);
  }
  drain_lock_release(heap);
  drain_abandoned(heap); /* frees that failed to take the lock while we held it */
  heaps_lock_take();
  heap->next_abandoned = abandoned_heaps;
  abandoned_heaps = heap;
  if (warm) atomic_fetch_add_explicit(&untidied_abandoned, 1, memory_order_relaxed);
  heaps_lock_give();
  tidy_stale_abandoned(now, true);
}

void _brisk_heap_hand_back(brisk_heap_t *heap) {
  /* The key no longer names the heap: a later round of destructors must not
   * abandon it a second time. */
  pthread_setspecific(heap_key, NULL);
  thread_exit(heap);
}

void _brisk_heap_free_only_chores(brisk_heap_t *heap) {
  _brisk_heap_drain_remote(heap);
  uint64_t now = _brisk_os_now_ms();
  brisk_store_relaxed(&heap->housekept_at_ms, now);
  _brisk_heap_purge(heap, now, BRISK_PURGE_DELAY_MS);
}

void _brisk_heaps_tidy_stale(uint64_t now_ms) {
  if (atomic_load_explicit(&untidied_abandoned, memory_order_relaxed) == 0) return;
  tidy_stale_abandoned(now_ms != 0 ? now_ms : _brisk_os_now_ms(), false);
}

/* fork: hold heaps_lock and every drain_lock across fork(), so the child
 * never inherits a list or an abandoned heap halfway through a change. Only
 * short, non-allocating work is done under a drain_lock, so the wait is
 * brief; no thread holds a drain_lock while it waits for heaps_lock. */
static void fork_prepare(void) {
  pthread_mutex_lock(&heaps_lock);
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    while (!drain_lock_try(heap)) sched_yield();
  }
  /* Then every memory_lock, so that no purge list, huge cache or segment
   * list is halfway through a change in the child. Their holders wait for
   * nothing while they hold one (a thread holds one heap's at a time,
   * brisk_collect's pass over other heaps holds heaps_lock, which we have,
   * and the idle-heap pass takes them one at a time after releasing it), so
   * these waits end. */
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    _brisk_heap_lock_memory(heap);
  }
  brisk_store_relaxed(&forking_thread, brisk_thread_id());
}

/* Frees into an abandoned heap that found its drain_lock taken while fork
 * held them all: drained now, by the thread that held the locks
 * (drain_abandoned's protocol). Called with heaps_lock held, every
 * drain_lock and memory_lock free again. */
static void drain_abandoned_after_fork(void) {
  for (brisk_heap_t *heap = abandoned_heaps; heap != NULL; heap = heap->next_abandoned) {
    drain_abandoned(heap);
  }
}

static void fork_parent(void) {
  brisk_store_relaxed(&forking_thread, 0);
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    _brisk_heap_unlock_memory(heap);
    drain_lock_release(heap);
  }
  drain_abandoned_after_fork();
  pthread_mutex_unlock(&heaps_lock);
}

/* Only the forking thread lives on in the child. The heaps of the others
 * keep their blocks (the child may still free them: they go to those heaps'
 * queues), but nobody will run them again. */
static void fork_child(void) {
  brisk_store_relaxed(&forking_thread, 0);
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    drain_lock_release(heap);
    _brisk_heap_unlock_memory(heap); /* taken in fork_prepare */
    /* ... or have been in the middle of a fold: its heap's sequence count
     * would stay odd, and every snapshot would retry on it. The counts may
     * be one fold off, as a snapshot taken then would have been. */
    uint32_t sequence = atomic_load_explicit(&heap->stats.fold_sequence, memory_order_relaxed);
    if (sequence & 1) atomic_store_explicit(&heap->stats.fold_sequence, sequence + 1, memory_order_relaxed);
  }
  /* The forking thread, the child's only one, took it in fork_prepare. */
  pthread_mutex_unlock(&heaps_lock);
  /* The other threads' heaps lose their owners: the child's new threads
   * may get their thread pointers (glibc reuses their stacks). Every one,
   * whatever its owner_thread says: a thread that was clearing its own at
   * exit may have stopped halfway through its segments. */
  for (brisk_heap_t *other = all_heaps; other != NULL; other = other->next_all) {
    if (other != _brisk_tls_heap) _brisk_segments_set_owner_thread(other, 0);
  }
  /* A thread of the parent may have been between its exchange and its link
   * on a heap's queue: that producer is gone, and the child's posts would
   * link behind a node no drain reaches. So the queues of our heap and of
   * every abandoned one (the child's frees drain it, its threads may adopt
   * it) end at the last node their head reaches (the unlinked blocks are
   * lost to the child, not corrupted). The other threads' heaps are
   * drained by nobody in the child. */
  for (brisk_heap_t *heap = all_heaps; heap != NULL; heap = heap->next_all) {
    if (heap != _brisk_tls_heap && !brisk_load_relaxed(&heap->abandoned)) continue;
    brisk_remote_node_t *last = link_node(heap->remote_head);
    uintptr_t next;
    while ((next = remote_next(heap, last, memory_order_relaxed)) != 0) {
      last = link_node(next);
    }
    atomic_store_explicit(&heap->remote_tail, last, memory_order_relaxed);
  }
}

static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

static void register_fork_handlers(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* pthread_atfork runs prepare handlers in the reverse order of their
 * registration, parent and child handlers in order. Ours should come last
 * and first: once fork_prepare holds the locks, any other thread's malloc
 * that needs one waits, and another prepare handler may wait for that
 * thread (a lock of the program's, held around a malloc). (The forking
 * thread's own calls do not wait: in_fork_handlers.) So they are
 * registered when the library is loaded (stats.c's constructor), before
 * the program's and most libraries', or by the process's first heap if
 * that comes sooner. */
void _brisk_heaps_register_fork_handlers(void) {
  pthread_once(&fork_handlers_once, register_fork_handlers);
}

static void process_init(void) {
  pthread_key_create(&heap_key, thread_exit);
  _brisk_heaps_register_fork_handlers();
}

brisk_heap_t *_brisk_heap_init_thread(bool cold) {
  heaps_lock_take();
  if (BRISK_SECURE) _brisk_secure_init();
  brisk_heap_t **link = &abandoned_heaps;
  while (cold && *link != NULL && !atomic_load_explicit(&(*link)->tidied, memory_order_relaxed)) {
    link = &(*link)->next_abandoned;
  }
  if (*link == NULL) link = &abandoned_heaps; /* none tidied: a warm one, tidied below */
  brisk_heap_t *heap = *link;
  if (heap != NULL) *link = heap->next_abandoned;
  heaps_lock_give();

  if (heap != NULL) {
    /* A freeing thread may be tidying it right now; that work is short. */
    while (!drain_lock_try(heap)) sched_yield();
    if (cold && !atomic_load_explicit(&heap->tidied, memory_order_relaxed)) {
      /* Only warm heaps are left: tidy it (still `abandoned`, so it unpins
       * and releases as for any), purging on the usual delay: larson-like
       * programs, whose new threads start by freeing their predecessor's
       * blocks, would otherwise refault what it held. */
      heap_tidy(heap, false);
      atomic_fetch_sub_explicit(&untidied_abandoned, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&heap->abandoned, false, memory_order_relaxed);
    heap->next_abandoned = NULL;
    brisk_global_stat_add(BRISK_STAT_HEAPS_ADOPTED, 1);
    if (!atomic_load_explicit(&heap->tidied, memory_order_relaxed)) {
      atomic_fetch_sub_explicit(&untidied_abandoned, 1, memory_order_relaxed);
    }
    /* Owned again: nothing for a tidy pass to do. */
    atomic_store_explicit(&heap->tidied, true, memory_order_relaxed);
    drain_lock_release(heap);
    _brisk_heap_drain_remote(heap);
    _brisk_heap_pin_all(heap);
  } else {
    /* A first try the system refuses sets errno: a retry that succeeds
     * leaves it as the caller had it. */
    int saved_errno = errno;
    heap = heap_create();
    if (heap == NULL && _brisk_heap_reclaim(&_brisk_heap_empty, sizeof(brisk_heap_t)))
      heap = heap_create();
    if (heap == NULL) return NULL;
    errno = saved_errno;
  }
  /* Install the heap before anything that may allocate (pthread_atfork and
   * pthread_setspecific can), so those nested mallocs find it. */
  _brisk_segments_set_owner_thread(heap, brisk_thread_id());
  brisk_store_relaxed(&heap->housekept_at_ms, _brisk_os_now_ms());
  _brisk_tls_heap = heap;
  pthread_once(&process_once, process_init);
  pthread_setspecific(heap_key, heap);
  return heap;
}
