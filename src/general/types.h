/*
 * types.h — the data structures of brisk's general allocator.
 *
 * Memory comes from the OS in segments of BRISK_SEGMENT_SIZE bytes aligned to
 * their size, so the segment of any block is `p & ~BRISK_SEGMENT_MASK`. A
 * segment has one kind, and all its pages have that kind's size:
 *
 *   kind     page size   blocks served           pages per segment
 *   small    64 KiB      8 B .. 8 KiB            512
 *   medium   512 KiB     8 KiB+ .. 64 KiB        64
 *   large    4 MiB       64 KiB+ .. 512 KiB      8
 *   huge     whole map   one block > 512 KiB     1 (page 0; page_shift 63)
 *
 * The segment header (this struct plus the page descriptors) lives in page
 * 0, which serves no blocks: the rest of it is address space only, never
 * touched. A page serves one size class; the page of p is
 * `(p - segment) >> page_shift`.
 *
 * Ownership: every small/medium/large segment belongs to one heap, for life.
 * A heap belongs to one thread at a time; when the thread exits the heap is
 * abandoned whole and a later thread adopts it (heap.c), so a segment's
 * `heap` never changes and other threads may read it without ordering.
 *
 * Who touches what (see also heap.c's overview):
 *   page.free, local_free, used, capacity, queue links — the owning thread only
 *       (or, while the heap is abandoned, whoever holds heap->drain_lock).
 *   segment.heap — set when the segment is made; segment.owner_thread —
 *       the thread that owns the heap now, read by every free() to tell
 *       the calling thread's blocks from other heaps'.
 *   segment.page_info — each page's class (and whether it holds interior
 *       aligned blocks), written by the owner only when a page starts or
 *       stops serving a class, read by any thread's free (relaxed). Other
 *       threads' frees read this and never a page descriptor, which the
 *       owner writes on every malloc and free: a remote free that read the
 *       descriptor's line would take it from the owner's cache, and the
 *       owner's next malloc would have to take it back.
 *   heap.remote — a multi-producer single-consumer queue: any thread pushes
 *       a batch of blocks (or one block) with one atomic exchange, the owner
 *       drains.
 *   heap.outbox — batches of blocks this heap's thread freed for other heaps,
 *       one open batch per owner, posted to the owner's remote queue when
 *       full (owner thread only; free.c). heap.returned_batches: batches
 *       given back by the heaps that emptied them (any thread pushes).
 */
#ifndef BRISK_GENERAL_TYPES_H
#define BRISK_GENERAL_TYPES_H

#include "base/base.h"
#include "general/options.h"

#define BRISK_SEGMENT_SHIFT 25 /* 32 MiB */
#define BRISK_SEGMENT_SIZE  ((size_t)1 << BRISK_SEGMENT_SHIFT)
#define BRISK_SEGMENT_MASK  (BRISK_SEGMENT_SIZE - 1)

/* User space on x86-64 with 4-level paging ends at 2^47; the segment map has
 * one byte per possible segment there (4 MiB of BSS, touched sparsely): 0 where
 * brisk has no segment, else the segment's page shift, so free() learns from
 * one load both that a pointer is brisk's and where its page descriptor is. */
#define BRISK_ADDRESS_BITS     47
#define BRISK_SEGMENT_MAP_SIZE ((size_t)1 << (BRISK_ADDRESS_BITS - BRISK_SEGMENT_SHIFT))

#define BRISK_SMALL_PAGE_SHIFT  16 /* 64 KiB */
#define BRISK_MEDIUM_PAGE_SHIFT 19 /* 512 KiB */
#define BRISK_LARGE_PAGE_SHIFT  22 /* 4 MiB */
#define BRISK_HUGE_PAGE_SHIFT   63 /* every offset inside the first segment maps to page 0 */

#define BRISK_SMALL_MAX  ((size_t)8 * 1024)
#define BRISK_MEDIUM_MAX ((size_t)64 * 1024)
#define BRISK_LARGE_MAX  ((size_t)512 * 1024)

/* Size classes: 8 B, 16-byte steps up to 128 B, then 8 classes per
 * doubling up to 64 KiB (a block at most 12.5% larger than asked for) and 4
 * above (25%); every block of 16 B or more is 16-aligned. Class 0 is unused
 * (it marks huge blocks). See size_class.h. */
#define BRISK_CLASS_COUNT      94 /* classes 1..93; 93 is 512 KiB */
#define BRISK_CLASS_SMALL_LAST 57  /* 8 KiB */
#define BRISK_CLASS_MEDIUM_LAST 81 /* 64 KiB */

/* malloc's fast path looks its page up directly by size in 8-byte words for
 * sizes up to this. */
#define BRISK_DIRECT_MAX   ((size_t)1024)
#define BRISK_DIRECT_COUNT (BRISK_DIRECT_MAX / 8 + 1)

/* A page whose used count has this bit set is full: it is off its class
 * queue, and the first free to it must put it back. Keeping the flag in
 * `used` lets free()'s fast path test "empty or full" with one compare. */
#define BRISK_PAGE_FULL_FLAG 0x80000000u

/* How long free pages and cached huge mappings wait before they go back to
 * the system: runtime options (options.h). */
#define BRISK_PURGE_DELAY_MS (_brisk_options.purge_delay_ms)
#define BRISK_HUGE_CACHE_MAX_AGE_MS (_brisk_options.huge_cache_ms)

/* segment.page_info[i]: page i's size class, or 0 while it serves none
 * (page 0, the header, always), with this bit when the page holds blocks
 * handed out at an interior, aligned address, so free() must find the
 * block start first. */
#define BRISK_PAGE_INFO_ALIGNED 0x80u
#define BRISK_PAGE_INFO_CLASS   0x7Fu
#define BRISK_SEGMENT_MAX_PAGES 512
_Static_assert(BRISK_CLASS_COUNT <= BRISK_PAGE_INFO_CLASS + 1, "a class index fits in page_info");

typedef enum brisk_segment_kind_e {
  BRISK_KIND_SMALL = 0,
  BRISK_KIND_MEDIUM = 1,
  BRISK_KIND_LARGE = 2,
  BRISK_KIND_COUNT_PAGED = 3,
  BRISK_KIND_HUGE = 3,
} brisk_segment_kind_t;

typedef struct brisk_block_s {
  struct brisk_block_s *next;
} brisk_block_t;

struct brisk_heap_s;

typedef struct brisk_page_s {
  /* The list malloc pops (owner only). While the page is free and waiting to
   * be purged, the same word holds the time it was freed. */
  union {
    brisk_block_t *free;
    uint64_t freed_at_ms;
  };
  /* The secure build: the one block freed last, held back
   * (brisk_secure_hold); malloc takes it when `free` runs dry (owner
   * only). Empty in the release build. */
  brisk_block_t *local_free;
  uint32_t used;                 /* blocks handed out, with BRISK_PAGE_FULL_FLAG */
  /* The low 32 bits of the first block's address (brisk_page_start gives
   * the whole address): free()'s fast path takes a block's offset in the
   * page from it in 32 bits. The block size is block_size below
   * (brisk_page_block_size). */
  uint32_t start_low;
  uint16_t capacity;             /* blocks carved into lists so far */
  uint16_t reserved;             /* blocks the page can hold */
  uint8_t class_index;           /* 0 while it serves none, as its page info */
  uint8_t in_use : 1;            /* serving a size class */
  uint8_t in_purge_list : 1;     /* free but still backed by memory */
  uint8_t is_committed : 1;      /* its memory has been touched since the last decommit */
  uint8_t in_full_list : 1;      /* on heap->full_pages (BRISK_PAGE_FULL_FLAG set) */
  uint8_t kept_empty : 1;        /* in heap->kept_empty: emptied, kept in its queue */
  uint8_t kept_seen : 1;         /* ... and found empty by housekeeping since */
  /* Statistics (owner only): the live blocks when the page last told its
   * heap (_brisk_page_fold_stats). In the padding: the descriptor stays 64 B. */
  uint16_t live_at_fold;
  /* A little over ceil(2^64 / block size) (brisk_page_block_magic):
   * offset / block size is one multiplication, and "is offset a block's
   * start" one more test (brisk_page_is_block_start), false in the page's
   * tail past its last whole block. 0 for a huge segment's page. In the
   * secure build a page serving no class has values here and in start_low
   * that fail the test for every address on it (brisk_page_set_no_blocks),
   * so free() needs no test of in_use. */
  uint64_t block_magic;
  struct brisk_page_s *next;     /* class queue, full list, or purge list */
  struct brisk_page_s *prev;
  /* find_page carves more of the page when fewer free blocks than this
   * came back (half an extension; set with the class). */
  uint16_t extend_threshold;
  /* brisk_class_to_size(class_index), set with the class: one load where
   * the secure build's malloc and free need it (0 for a huge segment). */
  uint32_t block_size;
} brisk_page_t;

_Static_assert(sizeof(brisk_page_t) == 64, "free() finds a page descriptor with one shift");

typedef struct brisk_segment_s {
  /* Set when the segment is made and read by every thread's free(): on a
   * line of their own, which no later write takes out of readers' caches. */
  uint8_t kind;
  uint8_t page_shift;
  uint16_t page_count;
  /* The secure build's huge mapping resized without its guard page (the
   * kernel refused it, huge.c): never cached for a later block. */
  bool huge_unguarded;
  struct brisk_heap_s *heap;     /* owner, for life; NULL for huge segments */
  /* The thread that owns `heap` now (brisk_thread_id), 0 while nobody
   * does: free()'s fast path compares it with its own thread's, which is
   * one instruction to read where the thread's heap is two. Written when
   * the heap changes hands (_brisk_segments_set_owner_thread), under the
   * heap's memory_lock; read by any thread (relaxed: a thread only ever
   * finds its own id here if it wrote it, see heap.c). */
  _Atomic(uintptr_t) owner_thread;
  /* The secure build's huge blocks: the size asked for, whose end the
   * canary follows (huge.c). */
  size_t huge_requested;
  size_t mapped_size;            /* bytes reserved from the OS for this segment */
  /* The owner's (or its memory_lock holder's), changed as pages are taken
   * and given back. */
  BRISK_ALIGNED(BRISK_CACHE_LINE) uint16_t used_pages;
  bool in_available_list;
  /* Bytes from the segment's start that are read-write: all of them (and
   * more: UINT32_MAX) unless the system charges mappings as they are made
   * (segment.c: commit_through). */
  uint32_t committed_end;
  struct brisk_segment_s *next;  /* heap's list of segments with a free page */
  struct brisk_segment_s *prev;
  /* Every segment of the heap (under its memory_lock): a statistics
   * snapshot counts the live blocks of their pages. */
  struct brisk_segment_s *heap_next;
  struct brisk_segment_s *heap_prev;
  uint64_t free_pages[BRISK_SEGMENT_MAX_PAGES / 64]; /* bit i set: page i is free */
  _Atomic(uint8_t) page_info[BRISK_SEGMENT_MAX_PAGES]; /* see BRISK_PAGE_INFO_ALIGNED */
  /* page_count descriptors. Their offset is not a multiple of 64: at one,
   * GCC spends one more instruction in free() on a descriptor's address. */
  brisk_page_t pages[];
} brisk_segment_t;

typedef struct brisk_page_queue_s {
  brisk_page_t *head;
  brisk_page_t *tail;
} brisk_page_queue_t;

/* A node of a heap's remote-free queue: a free block pushed alone (its first
 * word as the link), or a batch (below). The link to a batch carries
 * BRISK_REMOTE_BATCH_TAG in its low bit; blocks are 8-aligned, so a link to
 * a block never has it. */
typedef struct brisk_remote_node_s {
  _Atomic(uintptr_t) next;
} brisk_remote_node_t;

#define BRISK_REMOTE_BATCH_TAG ((uintptr_t)1)

/* Remote frees are batched: a thread records the blocks it frees for another
 * heap in a batch of that owner (its outbox holds one open batch per slot,
 * slots direct-mapped by owner heap) and posts the batch to the owner's
 * queue, one atomic exchange, when it holds BRISK_OUTBOX_BATCH blocks. Every
 * open batch goes when the outbox holds BRISK_OUTBOX_MAX_BYTES, in the
 * thread's housekeeping, when it frees a page's last block, at exit, and on
 * brisk_collect, so a thread that stops allocating strands at most that many
 * bytes until its next such call. The owner returns the blocks to their pages
 * from the array (no walk through the blocks themselves, whose lines are in
 * another core's cache) and keeps the batch or gives it back to its home. */
#define BRISK_OUTBOX_SLOTS     16
#define BRISK_OUTBOX_BATCH     64
#define BRISK_OUTBOX_MAX_BYTES ((size_t)256 * 1024)
/* Batches a heap starts with (inside the heap); more come in chunks of
 * BRISK_BATCH_CHUNK_SIZE bytes from the OS, at most BRISK_BATCH_CHUNKS per
 * heap, kept for the heap's life. A thread whose batches are all posted to
 * owners that have not run yet (more threads than cores) needs many. With
 * none to be had, a remote free is posted alone, as a one-block node. */
#define BRISK_HEAP_BATCHES     48
/* A heap that empties a batch keeps it for its own outbox, one for each
 * batch it posted, at most this many ahead (heap.c: drain_batch), and gives
 * the rest back to their homes. */
#define BRISK_KEPT_BATCHES     8
/* Empty pages a heap keeps in its class queues at most, and their bytes. */
#define BRISK_KEPT_EMPTY_PAGES 8
#define BRISK_KEPT_EMPTY_BYTES ((size_t)512 * 1024)
#define BRISK_BATCH_CHUNK_SIZE ((size_t)64 * 1024)
#define BRISK_BATCH_CHUNKS     16

typedef struct brisk_remote_batch_s {
  brisk_remote_node_t node;                 /* queue link while posted */
  struct brisk_heap_s *owner;               /* the heap the blocks go back to */
  struct brisk_heap_s *home;                /* the heap whose pool it belongs to */
  struct brisk_remote_batch_s *next_free;   /* a heap's free or returned stack */
  uint32_t count;
  uint32_t bytes;
  void *blocks[BRISK_OUTBOX_BATCH];
  /* Each block's size class as free() found it. A block freed twice by
   * threads that do not own it passes free()'s checks both times (its page
   * counts it live until its owner drains it), so the owner checks each
   * block it takes back against its page (heap.c: drain_batch): the first
   * free may have emptied the page, which then went back to its segment,
   * and on to another class, or the segment back to the system. */
  uint8_t classes[BRISK_OUTBOX_BATCH];
} brisk_remote_batch_t;

/* A heap's free pages of one kind that still hold memory, and how many of
 * them it keeps past the base purge delay (segment.c). The heap's owner,
 * or whoever holds its memory_lock. */
typedef struct brisk_purge_list_s {
  brisk_page_queue_t pages;     /* oldest first */
  size_t bytes;                 /* their size */
  size_t keep_bytes;            /* kept past BRISK_PURGE_DELAY_MS (the newest) */
  uint64_t keep_set_ms;         /* when it was set: it halves every BRISK_PURGE_DELAY_MAX_MS since */
  uint64_t last_purge_ms;       /* the last purge by delay */
  size_t purged_bytes;          /* purged by delay until then, not faulted in again since */
} brisk_purge_list_t;

/* A cached huge mapping, kept committed so that reusing it costs no faults. */
typedef struct brisk_huge_cache_entry_s {
  brisk_segment_t *segment;
  size_t size;
  uint64_t freed_at_ms;
} brisk_huge_cache_entry_t;

#define BRISK_HUGE_CACHE_ENTRIES 8

/* Per-heap statistics, merged by brisk_stats_get over every heap. Written
 * only by whoever works on the heap (its thread, or the drain_lock holder
 * of an abandoned heap), with relaxed loads and stores (no read-modify-
 * write), and read by any thread: atomics only so that those reads are not
 * data races. Allocations per class are these plus the counts not yet
 * folded in (the heap's *_unfolded fields); a snapshot reads both, and the
 * pages' `used` for the blocks live now (stats.c); frees are the
 * difference. */
typedef struct brisk_heap_stats_s {
  _Atomic(uint64_t) allocations[BRISK_CLASS_COUNT];
  _Atomic(uint64_t) remote_frees[BRISK_CLASS_COUNT];
  _Atomic(uint64_t) bytes_requested;
  _Atomic(uint64_t) slow_mallocs;
  _Atomic(uint64_t) slow_frees;
  /* Odd while the owner moves the *_unfolded counts into the fields above,
   * so that a snapshot reading both counts each allocation once. */
  _Atomic(uint32_t) fold_sequence;
} brisk_heap_stats_t;

/* Add to a counter only one thread writes at a time. */
#define brisk_stat_add(counter, n) \
  atomic_store_explicit((counter), atomic_load_explicit((counter), memory_order_relaxed) + (n), \
                        memory_order_relaxed)

/* Blocks of one direct-table entry (or one class past it) between two
 * heartbeats: a heartbeat costs about 2,200 instructions (0.13 per malloc
 * at this count), and a thread that spreads its mallocs over n entries
 * drains other threads' frees at least every n times this. */
#define BRISK_ALLOCATIONS_PER_FOLD ((uint32_t)16384)

typedef struct brisk_heap_s {
  /* Hot: malloc's fast path. `direct` is its page by size in 8-byte words.
   * The counts are its statistics (owner only, folded into `stats`): for
   * each entry of `direct`, how many more blocks it hands out before its
   * count is folded (it counts down from BRISK_ALLOCATIONS_PER_FOLD, so the
   * blocks handed out since the last fold are that minus this; a snapshot
   * reading 0 counts them all), and the requested bytes. Reaching 0 sends
   * that malloc to _brisk_malloc_heartbeat, which folds the counts and does
   * the slow path's chores: the owner's frees refill the page lists malloc
   * pops, so a thread busy on its own blocks may not take the slow path
   * otherwise. The count and its test are one decrement of memory and one
   * branch. The counts come first and are 32-bit: at another offset, or
   * 16-bit, the compiler spends an instruction on the address. */
  uint32_t small_allocations_left[BRISK_DIRECT_COUNT];
  brisk_page_t *direct[BRISK_DIRECT_COUNT];
  uint64_t bytes_requested_unfolded;
  brisk_page_queue_t queues[BRISK_CLASS_COUNT];
  /* The head page of each class queue holds one phantom count in `used`,
   * so freeing its last block never takes free()'s slow path. */
  brisk_page_t *pinned[BRISK_CLASS_COUNT];
  /* Housekeeping's record of empty heads (see _brisk_heap_retire_empty_heads). */
  uintptr_t idle_head_snapshot[BRISK_CLASS_COUNT];
  /* Pages that emptied and wait in their class queues, carved, rather than
   * going back to their segments at once (page.c: keep_empty_page). */
  brisk_page_t *kept_empty[BRISK_KEPT_EMPTY_PAGES];
  uint32_t kept_empty_count;
  brisk_page_queue_t full_pages;
  brisk_purge_list_t purge_lists[BRISK_KIND_COUNT_PAGED]; /* free pages still backed */
  brisk_segment_t *available[BRISK_KIND_COUNT_PAGED]; /* segments with a free page */
  brisk_segment_t *segments;       /* all of them (heap_next), under memory_lock */
  uint32_t empty_segments[BRISK_KIND_COUNT_PAGED];
  uint32_t generic_calls;
  brisk_huge_cache_entry_t huge_cache[BRISK_HUGE_CACHE_ENTRIES]; /* [0, count) filled */
  size_t huge_cache_count;
  size_t huge_cache_bytes;
  /* Statistics kept by the owner's slow paths with plain adds, folded into
   * `stats` with the rest; live bytes not yet published to the process. */
  uint64_t class_allocations_unfolded[BRISK_CLASS_COUNT];
  uint64_t slow_mallocs_unfolded;
  uint64_t slow_frees_unfolded;
  int64_t in_use_unpublished;
  brisk_heap_stats_t stats;
  struct brisk_heap_s *next_abandoned;
  uint64_t abandoned_at_ms;        /* when its thread exited (heaps_lock) */
  /* Abandoned and given back since (written under drain_lock; read under
   * heaps_lock by a thread looking for a cold heap, hence atomic). */
  _Atomic(bool) tidied;
  struct brisk_heap_s *next_all;
  bool is_empty_heap;              /* the static stand-in of threads with no heap yet */
  /* The owning thread's brisk_thread_id, 0 while abandoned: what its
   * segments' owner_thread say (set with them, under memory_lock). */
  uintptr_t owner_thread;

  /* Consumer side of the remote queue (owner only): the link to the node at
   * its head, batch tag included. */
  uintptr_t remote_head;
  brisk_remote_node_t remote_stub;

  /* Blocks freed for other heaps, not yet posted (owner only): the open
   * batch of each slot, the bytes they hold, the free batches, and how many
   * of `batches` have ever been used (the rest are untouched memory). */
  brisk_remote_batch_t *outbox[BRISK_OUTBOX_SLOTS];
  size_t outbox_bytes;
  brisk_remote_batch_t *free_batches;
  uint32_t keep_credit;            /* batches drain_batch may keep: one per post */
  uint32_t batches_carved;         /* of `batches` */
  uint32_t batch_chunks;           /* taken from the OS */
  brisk_remote_batch_t *chunk_next; /* the current chunk's batches not yet used */
  brisk_remote_batch_t *chunk_end;

  /* Shared: on their own cache lines, away from the owner's fields. */
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic(brisk_remote_node_t *) remote_tail;
  /* Batches the owners of their blocks have emptied, pushed by them (CAS)
   * and taken all at once by this heap (exchange). */
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic(brisk_remote_batch_t *) returned_batches;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic(bool) abandoned;
  _Atomic(bool) drain_lock;        /* held by whoever works on an abandoned heap */
  /* Held around every change of the purge list, the segments' page maps and
   * the huge cache, by whoever works on the heap, and by brisk_collect(true)
   * from another thread to decommit a live heap's free pages. */
  _Atomic(bool) memory_lock;
  _Atomic(bool) drain_requested;   /* a block was queued while drain_lock was held */
  /* When its thread last ran its housekeeping (written by the owner,
   * relaxed): another thread's housekeeping purges the free pages of a live
   * heap whose thread has not for a while (heap.c: purge_idle_heaps). 0
   * once such a pass left it nothing to purge (a CAS under memory_lock);
   * a page or huge block freed into it then sets it to that time, under
   * the same lock (_brisk_heap_idle_rearm). */
  _Atomic(uint64_t) housekept_at_ms;

  BRISK_ALIGNED(BRISK_CACHE_LINE) brisk_remote_batch_t batches[BRISK_HEAP_BATCHES];
} brisk_heap_t;

#endif /* BRISK_GENERAL_TYPES_H */
