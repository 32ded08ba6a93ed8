/*
 * brisk/hybrid.h — the bounded hybrid pool (seed 003).
 *
 * Fixed-size buckets (lock-free pools) in front of buddy regions, all
 * reserved (and optionally pre-faulted and locked) at creation, so alloc
 * and free make no system call afterwards. Frees find a block's class by
 * its address: a byte per 16 bytes of the blocks (anything else by a
 * read-only table of ranges).
 *
 * A NULL hybrid (a create that failed, unchecked): brisk_hybrid_destroy
 * does nothing (as free(NULL)); brisk_hybrid_stats returns 0 and
 * brisk_hybrid_totals reports zeros (errno EINVAL); the library's exported
 * brisk_hybrid_alloc returns NULL with errno EINVAL, its brisk_hybrid_free
 * does nothing for NULL and aborts with a message for any other pointer.
 * The inline brisk_hybrid_alloc and brisk_hybrid_free below, which a
 * program that includes this header calls, do not test the handle (a
 * test and a branch on every call): with a NULL hybrid they crash (a
 * segmentation fault), whatever the pointer.
 *
 * A destroyed hybrid: brisk_hybrid_destroy of it again, or of another
 * kind's handle, aborts with a message (brisk/region.h: destroyed
 * handles). So does every other call with it while the mapping cache
 * keeps its mapping (a second, by default): brisk_hybrid_alloc, inline or
 * exported, brisk_hybrid_free of any pointer but NULL (a fallback block
 * too), stats and totals ("brisk: brisk_hybrid_alloc(<hybrid>): not a
 * live hybrid pool (destroyed already?)"), at no cost to a live hybrid's
 * paths. One mlock'ed with BRISK_REGION_LOCK goes back to the system at
 * destroy, and any other once the cache lets it go: calls with it may
 * then crash (SIGSEGV); once a new hybrid of the same config took the
 * mapping, they are calls on that one.
 */
#ifndef BRISK_HYBRID_H
#define BRISK_HYBRID_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_hybrid_s brisk_hybrid_t;

#define BRISK_HYBRID_MAX_BUCKETS 8
#define BRISK_HYBRID_MAX_REGIONS 4

typedef struct brisk_hybrid_config_s {
  /* ascending multiples of 8, 8..512 B; 0 ends the list */
  size_t bucket_sizes[BRISK_HYBRID_MAX_BUCKETS];
  size_t bucket_counts[BRISK_HYBRID_MAX_BUCKETS];  /* objects per bucket, each at least 1 */
  size_t region_sizes[BRISK_HYBRID_MAX_REGIONS];   /* buddy regions; 0 ends the list */
  size_t region_min_block;  /* a power of two; 0: smallest above the last bucket */
  size_t region_max_block;  /* a power of two; 0: 1 MiB */
  unsigned flags;            /* BRISK_REGION_PREFAULT / LOCK / THREAD_CACHE */
  int fallback_to_malloc;    /* nonzero: brisk_malloc when every section is full */
} brisk_hybrid_config_t;

/* The default: buckets of 16/32/64 B (65,536 objects each) and one 64 MiB
 * buddy region (blocks of 128 B to 1 MiB), BRISK_REGION_THREAD_CACHE, no
 * fallback: any size up to 1 MiB without further setup.
 *
 * Memory: fixed at creation, one mapping (80.9 MiB in the default: the
 * region's 64 MiB, the buckets' 1 + 2 + 4 MiB, their headers, the
 * region's counters and index, the hybrid's own pages, and the free's
 * code table, a byte per 16 bytes of the mapping: 5.1 MiB, whose pages
 * are touched only where blocks start, or its 4.4 MiB over the blocks at
 * creation with BRISK_REGION_PREFAULT / LOCK, which fault in and lock the
 * hybrid's own pages too) and one more per further
 * region; no system call afterwards. The blocks handed out never
 * exceed the sections: each bucket's count of objects, each region's
 * bytes (its blocks are powers of two), which are its size rounded up to
 * a multiple of its largest block (region_max_block), or for a region
 * smaller than that to a power of two: a region of 1.5 MiB with the
 * default 1 MiB largest block holds 2 MiB (the statistics' bytes_reserved
 * say what each holds).
 *
 * BRISK_REGION_THREAD_CACHE gives each thread a cache of free blocks per
 * bucket and per block size of the first region up to 64 KiB (at most 32
 * KiB and 64 blocks of each size, and at least 2 blocks: 415 KiB per
 * thread in the default, 7 KiB of it in the buckets), from which alloc and
 * free take and give without an atomic or a call. One thread meets the
 * bound exactly (a request the sections cannot serve first gives this
 * thread's cached blocks back); with T threads a request can fail while
 * the other T - 1 threads' caches hold up to that much each. Without the
 * flag the bound is exact for any number of threads. */
BRISK_API void brisk_hybrid_default_config(brisk_hybrid_config_t *out);
/* NULL config: the default. NULL/EINVAL for a bad config, ENOMEM (or
 * mlock's errno) when memory can't be reserved. */
BRISK_API brisk_hybrid_t *brisk_hybrid_create(const brisk_hybrid_config_t *config);
/*
 * A block, not zeroed: from the smallest bucket that holds size, if its
 * objects have the alignment (align 0: what malloc would give, 16 for
 * sizes that are multiples of 16, else 8); then each buddy region; then
 * brisk_malloc if the config allows it. NULL/EINVAL for size 0 or an
 * alignment that is not a power of two; NULL/ENOMEM when every section is
 * full. Lock-free, no system call.
 */
/* brisk_hybrid_alloc(hybrid, size, align) is inline (below); the library
 * exports it too, for callers that cannot inline it. */
/* brisk_hybrid_free(hybrid, p): NULL does nothing; a pointer from no
 * section (and not from brisk_malloc with the fallback on), not a block's
 * start, or freed twice aborts with a message (a double free is caught
 * while the block is still in a thread's cache, the freeing thread's or
 * another's, or back in its section: a region by its index of blocks, a
 * bucket of objects of 16 bytes or more by a key a free object carries in
 * its second 8 bytes, with or without the caches; a bucket of 8-byte
 * objects in debug builds only). Two frees of one block racing each other
 * (neither made after the other) can both pass. Inline (below) and
 * exported, as alloc. */
BRISK_API void brisk_hybrid_destroy(brisk_hybrid_t *hybrid);

typedef struct brisk_hybrid_section_stats_s {
  size_t block_size;     /* bucket object size, or 0 for a buddy region */
  size_t bytes_reserved; /* memory the section owns */
  size_t in_use;         /* bytes in the program's live blocks now (not
                            those waiting in thread caches) */
  size_t high_water;     /* for a region, the most bytes its blocks took at
                            once (exact with one thread; with more, up to
                            64 KiB over per other thread that freed blocks
                            meanwhile, and never over bytes_reserved); for
                            a bucket, the bytes of objects ever taken from
                            its store; both count blocks that waited in
                            thread caches */
  size_t allocations;    /* blocks it served the program */
  size_t failures;       /* requests this section could not serve */
} brisk_hybrid_section_stats_t;

/* Fills up to max entries (buckets first, then regions); returns how many
 * sections the hybrid has. *fallbacks (if not NULL): allocations that went
 * to brisk_malloc. */
BRISK_API size_t brisk_hybrid_stats(const brisk_hybrid_t *hybrid,
                                    brisk_hybrid_section_stats_t *out, size_t max,
                                    size_t *fallbacks);
/*
 * The whole hybrid in the words of every region allocator. allocations and
 * bytes_requested: successful brisk_hybrid_alloc calls and the sizes they
 * asked for (fallbacks included), counted per thread. bytes_in_use and
 * bytes_held: its sections' (a fallback block is the general allocator's);
 * bytes_held is its mapping (the hybrid, its buckets, its first region)
 * and the further regions' reservations. system_requests: the hybrid's
 * and its sections', all made at creation. Any thread, any time.
 */
BRISK_API void brisk_hybrid_totals(const brisk_hybrid_t *hybrid, brisk_region_stats_t *out);

/* The library's out-of-line paths of the inline functions below (not
 * API): alloc past its fast path; free of a pointer the code table does
 * not take (free_other_: the section by address, checked); free of a block
 * whose thread list cannot take it inline (free_slow_: the code the inline
 * path read for it). */
BRISK_API void *brisk_hybrid_alloc_slow_(brisk_hybrid_t *hybrid, size_t size, size_t align);
BRISK_API void brisk_hybrid_free_other_(brisk_hybrid_t *hybrid, void *p);
BRISK_API void brisk_hybrid_free_slow_(brisk_hybrid_t *hybrid, void *p, size_t code);

/* The class whose code (a class's byte offset / 8, from the tables) is
 * `code` in the entry of the thread whose brisk_thread_slot_line_ is
 * `line` (0 without a slot: the entry whose lists are all empty and have no
 * room): line x 16 + code x 8 bytes into the entries, one scaled index. */
static inline brisk_hybrid_class_t *brisk_hybrid_class_at_(brisk_hybrid_hot_t *hot, size_t line,
                                                           size_t code) {
  return (brisk_hybrid_class_t *)(void *)((unsigned char *)hot->entries +
                                          (code + line * (BRISK_HYBRID_ENTRY_BYTES_ / 64 / 8)) * 8);
}

/* Add n to a word of the calling thread's entry, which only that thread
 * writes and statistics read from any thread (relaxed): one add to memory
 * on x86-64; a relaxed load and store where ThreadSanitizer watches. */
#if defined(__SANITIZE_THREAD__)
#define BRISK_HYBRID_TSAN_ 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BRISK_HYBRID_TSAN_ 1
#endif
#endif
#ifndef BRISK_HYBRID_TSAN_
#define BRISK_HYBRID_TSAN_ 0
#endif
static inline void brisk_hybrid_owner_add_(size_t *word, size_t n) {
#if defined(__x86_64__) && !BRISK_HYBRID_TSAN_
  __asm__ __volatile__("addq %1, %0" : "+m"(*word) : "er"(n));
#else
  __atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
#endif
}

/*
 * Alloc's fast path: an align-0 request whose class has a block in the
 * calling thread's list (the class from one table: by size up to 512
 * bytes, by the smallest power of two that holds it above). Pop it, clear
 * its second word (the key a cached block carries), and count: the list's
 * room and the class's allocations in one add, the size asked in another.
 * Everything else goes out of line: a size without a class (size 0
 * included) finds class 0's list empty, a thread without a slot the entry
 * of line 0, whose lists are all empty, and so does every thread of a
 * hybrid without caches (no flag, or a tool that watches blocks: an ASan
 * build, Valgrind), whose tables give every size class 0.
 */
static inline void *brisk_hybrid_alloc_inline_(brisk_hybrid_t *hybrid, size_t size, size_t align) {
  brisk_hybrid_hot_t *hot = (brisk_hybrid_hot_t *)(void *)hybrid;
  if (__builtin_expect(align == 0, 1)) {
    /* A load of its own for each kind of size: a size up to 512 bytes
     * indexes the table as it is, with no copy to join the other. */
    size_t code = size <= BRISK_HYBRID_SMALL_MAX_
                      ? hot->code_of_size[size]
                      : hot->code_of_size[BRISK_HYBRID_SMALL_MAX_ + 2 +
                                          (size_t)(63 - __builtin_clzll(size - 1))];
    brisk_hybrid_class_t *k = brisk_hybrid_class_at_(hot, brisk_thread_slot_line_, code);
    void **block = (void **)k->head;
    if (__builtin_expect(block != NULL, 1)) {
      k->head = block[0];
      block[1] = NULL;
      brisk_hybrid_owner_add_(&k->word, ((size_t)1 << BRISK_HYBRID_ROOM_BITS_) + 1);
      brisk_hybrid_owner_add_(&k->requested, size);
      return block;
    }
  }
  return brisk_hybrid_alloc_slow_(hybrid, size, align);
}

/*
 * Free's fast path, for the first region's blocks and the buckets' objects
 * alike, with no branch on which: p's distance from the first block,
 * rotated right by 4 bits (so that an address that is not a multiple of
 * 16 lands past the table, as one outside the blocks does), is its
 * granule; a granule below the table's size has a code, the class of the
 * block that starts there (set while a block of a cached class starts
 * there, handed out or cached; 0 elsewhere: inside a block, a block no
 * class caches, an object never handed out), and the block goes onto the
 * calling thread's list of that class. Out of line: a pointer past the
 * table (NULL, another section's, an address that is no multiple of 16:
 * brisk_hybrid_free_other_ finds which and says what is wrong), and a
 * block whose list has no room (full; class 0, which sends it to
 * brisk_hybrid_free_other_ too; the entry of line 0; an entry not ready:
 * read before the block, which an annotated hybrid keeps poisoned) or
 * that carries the key (perhaps a double free: brisk_hybrid_free_slow_
 * walks the list).
 */
static inline void brisk_hybrid_free_inline_(brisk_hybrid_t *hybrid, void *p) {
  brisk_hybrid_hot_t *hot = (brisk_hybrid_hot_t *)(void *)hybrid;
  uintptr_t offset = (uintptr_t)p - hot->base;
  uint64_t granule = (offset >> BRISK_HYBRID_GRANULE_SHIFT_) |
                     (offset << (64 - BRISK_HYBRID_GRANULE_SHIFT_));
  if (__builtin_expect(granule >= hot->granules, 0)) {
    brisk_hybrid_free_other_(hybrid, p);
    return;
  }
  /* Relaxed: a live block's code holds still (set before the block was
   * handed out, which this free comes after). */
  const uint8_t *codes = (const uint8_t *)(const void *)hybrid + BRISK_HYBRID_CODES_AT_;
  size_t code = __atomic_load_n(&codes[granule], __ATOMIC_RELAXED);
  brisk_hybrid_class_t *k = brisk_hybrid_class_at_(hot, brisk_thread_slot_line_, code);
  void **block = (void **)p;
  /* The room: a plain read of this thread's own word, which no other
   * thread writes (statistics read it relaxed), so that the test reads
   * memory in one instruction. */
  if (__builtin_expect((k->word & BRISK_HYBRID_ROOM_MASK_) == 0 || block[1] == (void *)hot->key,
                       0)) {
    brisk_hybrid_free_slow_(hybrid, p, code);
    return;
  }
  /* The head's store between the block's two (it may alias them, as far
   * as the compiler knows) keeps GCC from building a vector of the two
   * words: two plain stores. */
  void *next = k->head;
  block[1] = (void *)hot->key;
  k->head = block;
  block[0] = next;
  brisk_hybrid_owner_add_(&k->word, (size_t)-1); /* room - 1: never below 0 here */
}

/* The library defines the exported brisk_hybrid_alloc and
 * brisk_hybrid_free (src/regions/hybrid.c, over the same fast paths); a
 * program inlines them. */
#ifdef BRISK_HYBRID_EXPORTS_
BRISK_API void *brisk_hybrid_alloc(brisk_hybrid_t *hybrid, size_t size, size_t align);
BRISK_API void brisk_hybrid_free(brisk_hybrid_t *hybrid, void *p);
#else
static inline void *brisk_hybrid_alloc(brisk_hybrid_t *hybrid, size_t size, size_t align) {
  return brisk_hybrid_alloc_inline_(hybrid, size, align);
}
static inline void brisk_hybrid_free(brisk_hybrid_t *hybrid, void *p) {
  brisk_hybrid_free_inline_(hybrid, p);
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* BRISK_HYBRID_H */
