/*
 * pool_internal.h — the fixed-size pool's layout, and what its files
 * share: pool.c (the shared pool: shards, carving, creation, statistics),
 * pool_cache.c (its caches: the per-thread magazines of
 * BRISK_REGION_THREAD_CACHE and the caller-owned brisk_pool_local_t) and
 * pool_validate.c (the validator). Nothing else in brisk includes it (the
 * hybrid reads pools through regions/pool.h); the tests' C shim
 * (tests/region_checks.c) does, to corrupt a pool on purpose.
 *
 * Layout of a reservation (one _brisk_os_reserve_address_space call; a
 * bounded pool reserves capacity objects, capacity 0 up to 64 GiB or 2^32 - 1
 * objects, whichever is fewer, and a quarter as much again and again down to
 * 64 MiB where the OS, or Valgrind, refuses that much):
 *
 *   [ header: brisk_pool_t ][ live bitmap (BRISK_DEBUG only) ][ objects ... ]
 *   base                     bits                               objects
 *
 * A pool made by _brisk_pool_create_in (a hybrid's bucket) has the same
 * parts in memory its creator gives, the objects apart from the header.
 *
 * Object i (0-based) lies at objects + i * stride, stride = obj_size rounded
 * up to max(align, 8); objects start page-aligned, so every object is
 * aligned to align (at most 4096). A free object's first 4 bytes hold its
 * link: the index + 1 of the next free object, 0 at the end. A list head is
 * one 64-bit word, (32-bit ABA tag << 32) | (index + 1), changed only by a
 * 64-bit CAS that adds one to the tag: a CAS that succeeds proves that no
 * other CAS changed the list since the head was read (a tag repeats only
 * after 2^32 changes during one thread's pop, which is not guarded against).
 * Indexes fit 32 bits: at most 2^32 - 1 objects. A magazine links its
 * objects by pointer instead, through the same first 8 bytes.
 *
 * Keys. A free object of a stride of 16 bytes or more carries the pool's
 * key, an odd word drawn at creation that no other pool or hybrid of the
 * process has had (_brisk_pool_new_key: memory the mapping cache hands on
 * holds the keys of a destroyed one's free objects), in its second 8
 * bytes (key_at = 8):
 * every way back in (brisk_pool_free, _brisk_pool_give_batch, a local
 * cache's free) tests that word and then writes the key there, every way
 * out (brisk_pool_hand_out, a local cache's alloc) clears it, and objects
 * carved straight into a magazine get it. So the key marks exactly the
 * objects that wait on a shard, in a magazine or in a local cache, and a
 * free that finds it is a double free (or the free of an object that was
 * never handed out but waits in a cache): message, abort. A live object
 * holds it only if the program wrote those 8 bytes equal to the key (a
 * 2^-63 chance for data it did not copy from a free object). Two frees of
 * one object that race (neither ordered before the other) may both find
 * no key; a free ordered after the first, on any thread, finds it. With
 * a stride of 8 there is no second word: key_at is 0, the word tested and
 * written is the link's, which the link overwrites at once, so such a
 * double free is not caught (debug builds' live bits catch it). A
 * hybrid's bucket takes its hybrid's key (_brisk_pool_create_in), which
 * the hybrid's thread caches write into the same word, so each sees the
 * other's free objects. The key word of an object the pool holds is read
 * only by a double free: it is written before the object is poisoned and
 * cleared after it is unpoisoned (Tools, below).
 *
 * Who touches which field, and with what memory order:
 *   shards[s].head   every thread, alone on its cache line. Loads acquire
 *                    (the links and bytes a pusher wrote before its CAS are
 *                    visible to the thread that pops the object); pushes CAS
 *                    seq_cst (release for the link, and the store side of
 *                    the bitmap protocol below); pops CAS acquire.
 *   object links     written (relaxed atomic store) by the thread that owns
 *                    the free object, before the release CAS that publishes
 *                    it. Read by poppers after an acquire load of the head:
 *                    that read (racy_link) races by design with a thread that
 *                    popped the same object meanwhile and writes its data
 *                    there; the value is then stale, and the CAS fails
 *                    because the tag moved. The read itself is safe: the
 *                    memory stays mapped and committed while the pool lives
 *                    and the link bytes are never poisoned. A batch pop
 *                    follows links before its CAS, so it bounds-checks each
 *                    one against the committed objects before following it.
 *   nonempty         bit s set: shard s may be non-empty. A push loads it
 *                    (seq_cst) after its CAS and sets the bit (fetch_or,
 *                    seq_cst) only if clear; a thread that finds shard s
 *                    empty clears the bit (fetch_and, seq_cst), then loads
 *                    the head again (seq_cst) and re-sets the bit if the
 *                    shard filled meanwhile. In the single total order of
 *                    seq_cst operations either the pusher's load follows the
 *                    clear (it sets the bit) or the re-load follows the push
 *                    (the clearer re-sets it): a non-empty shard never stays
 *                    invisible. Before carving or failing, alloc also looks
 *                    at every head once, so the bitmap is only a hint.
 *   carved           objects carved so far, never above max_objects and
 *                    never covering an object not yet committed: advanced
 *                    by a CAS (relaxed; carving is a slow path) after the
 *                    claim's commit. It partitions indexes (the objects'
 *                    memory is ordered by `committed`) and bounds free's
 *                    check: an index at or above it was never handed out.
 *                    Read relaxed by every free: a free of an object
 *                    carved for another thread comes after that carve (the
 *                    program passed the object on), so it sees it.
 *   committed        bytes of objects accessible: acquire loads by carving
 *                    threads, advanced after the committing thread's own
 *                    mprotect by a CAS-max (acq_rel), as in arena.c. Several
 *                    threads may commit overlapping ranges; nobody waits.
 *   system_requests  OS calls made for the pool: set at creation, then a
 *                    relaxed fetch_add per commit (a statistic).
 *   slots[i]         per-thread entry i (thread_slot.h): only the thread
 *                    holding slot i touches it, so the magazine fields are
 *                    plain and the counters are relaxed load + store (atomic
 *                    only so that stats may read them). slots[NO_SLOT] is
 *                    shared by the threads without a slot: fetch_add on its
 *                    counters, and its magazine is never used.
 *   live bits        BRISK_DEBUG only: bit i set while object i is handed
 *                    out; fetch_or on alloc, fetch_and on free (relaxed:
 *                    the bit orders nothing, the RMW alone catches a double
 *                    free even between threads).
 *   everything else  written at creation, read-only until destroy.
 *
 * Destroyed. destroy leaves the header (which the mapping cache keeps as
 * it is, a second by default) with no object (max_objects 0), none carved
 * (carved 0), every shard empty and the shards' mode: every call with it
 * meets that before it touches an object. An allocation finds its shard
 * empty (a THREAD_CACHE pool's magazine is never looked at: the mode
 * changed) and every other, and carves nothing: _brisk_pool_fail, cold,
 * aborts for a destroyed pool. A free finds every index at or past
 * carved: _brisk_pool_bad_free, cold, aborts so. The local caches' slow
 * paths and the calls that are not allocations test max_objects first.
 * None of it costs a live pool's alloc and free an instruction. The
 * stores are relaxed or plain, and so are the loads: a correct program's
 * calls with a pool all happen before its destroy (destroy must not run
 * concurrently with them), so they read the live values; a call after
 * the destroy, in its thread or in one the program ordered after it,
 * reads what destroy left. Only a call racing with destroy, a bug of the
 * program, reads them in a race.
 *
 * Tools: a free object is ASan-poisoned except its first 8 bytes (the link
 * that concurrent pops may read; ASan granules are 8 bytes), and unpoisoned
 * in full (stride bytes) when handed out. Its key word is written before
 * and cleared after, so only a double free reads it while poisoned: debug
 * builds (ASan's) abort on the live bit before that read, and under
 * Valgrind memcheck reports the read before the pool aborts. Objects committed for the first
 * time are not poisoned. Under Valgrind the pool is a mempool (annotate.h),
 * so destroy frees every object at once; a freed object's link is marked
 * defined so the pool may read and write it.
 */
#ifndef BRISK_REGIONS_POOL_INTERNAL_H
#define BRISK_REGIONS_POOL_INTERNAL_H

#include "base/annotate.h"
#include "base/base.h"
#include "os/os.h"
#include "regions/pool.h"
#include "regions/registry.h"
#include "regions/thread_slot.h"

#define BRISK_POOL_SHARDS 8u
/* The bytes of a free object that the pool goes on using: its link, a
 * shard's 4-byte index or a magazine's 8-byte pointer, in the same bytes
 * (the tools must let the pool write either; the stride is at least 8). */
#define BRISK_POOL_LINK_BYTES sizeof(uint8_t *)

enum brisk_pool_mode_e { BRISK_POOL_SHARDED = 0, BRISK_POOL_CACHED = 1 };

typedef struct brisk_pool_shard_s {
  _Atomic uint64_t head; /* (tag << 32) | (index + 1) */
} BRISK_ALIGNED(BRISK_CACHE_LINE) brisk_pool_shard_t;

typedef struct brisk_pool_slot_s {
  _Atomic size_t allocs;    /* objects handed out by this slot's thread */
  _Atomic size_t frees;     /* objects it gave back */
  _Atomic size_t failures;
  uint8_t *mag_head;        /* the magazine's newest object, NULL when empty */
  uint32_t mag_count;       /* objects in the magazine (the slot's thread only) */
} BRISK_ALIGNED(BRISK_CACHE_LINE) brisk_pool_slot_t;

struct brisk_pool_s {
  /* Read by every call, written at creation only: one cache line. */
  uintptr_t bias;       /* objects - stride: object index+1 i is at bias + i * stride */
  uint8_t *objects;
  size_t stride;
  uint64_t inverse;     /* of stride's odd factor, mod 2^64 (brisk_pool_index_of) */
  uint32_t shift;       /* log2 of stride's power-of-two factor */
  uint32_t mode;        /* enum brisk_pool_mode_e */
  size_t max_objects;   /* capacity, or the unbounded reservation's */
  uint32_t mag_max;     /* THREAD_CACHE: magazine size, refill batch mag_max / 2 */
  uint32_t key_at;      /* the key word's offset in an object: 8, or 0 (see Keys) */
  uintptr_t key;        /* what a free object's key word holds (odd, never 0) */
  /* Read by the slow paths (`committed` written rarely). */
  uint32_t flags;
  _Atomic size_t committed; /* bytes of objects accessible */
  _Atomic uint64_t *live;   /* BRISK_DEBUG: one bit per object */
  /* Cold: creation, the commit path, stats, destroy. */
  uint8_t *base;
  size_t reservation_size;
  size_t header_size;   /* header pages, committed at creation */
  size_t bitmap_size;   /* bytes reserved for the live bits (0 without BRISK_DEBUG) */
  size_t obj_size;
  size_t page;
  bool external;        /* _brisk_pool_create_in: the memory is its creator's */
  brisk_region_entry_t entry; /* registry.h; unused when not registered */
  /* Contended words, one line each. */
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t carved;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic uint64_t nonempty;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t system_requests;
  brisk_pool_shard_t shards[BRISK_POOL_SHARDS];
  brisk_pool_slot_t slots[BRISK_THREAD_SLOTS + 1];
};

_Static_assert(BRISK_POOL_SHARDS <= 64 && (BRISK_POOL_SHARDS & (BRISK_POOL_SHARDS - 1)) == 0,
               "shards: a power of two, one bitmap word");

/* ---- Objects and links ---- */

BRISK_INLINE uint8_t *brisk_pool_object_at(const brisk_pool_t *pool, uint32_t index1) {
  return (uint8_t *)(pool->bias + (uintptr_t)index1 * pool->stride);
}

/* A link of an object this thread owns (free, in its hands or magazine). */
BRISK_INLINE uint32_t brisk_pool_link_load(const uint8_t *object) {
  return atomic_load_explicit((_Atomic uint32_t *)object, memory_order_relaxed);
}

BRISK_INLINE void brisk_pool_link_store(uint8_t *object, uint32_t next1) {
  atomic_store_explicit((_Atomic uint32_t *)object, next1, memory_order_relaxed);
}

/* A magazine's link: the next object itself (8 bytes at the object's start,
 * the same bytes as the shard link), so popping a magazine needs no
 * index-to-address multiply. Only the slot's thread touches these. */
BRISK_INLINE uint8_t *brisk_pool_mag_link_load(const uint8_t *object) {
  return atomic_load_explicit((_Atomic(uint8_t *) *)object, memory_order_relaxed);
}

BRISK_INLINE void brisk_pool_mag_link_store(uint8_t *object, uint8_t *next) {
  atomic_store_explicit((_Atomic(uint8_t *) *)object, next, memory_order_relaxed);
}

/*
 * The index of the object at p, or a value >= max_objects if p is no object
 * start of this pool. stride = odd << shift: rotating the offset right by
 * shift moves any low bits to the top, and multiplying by the odd factor's
 * inverse divides exactly the multiples of it and sends everything else
 * above max_objects (for x < 2^64 not a multiple of odd, x * inverse mod 2^64
 * exceeds (2^64 - 1) / odd >= max_objects). Offsets below the objects wrap
 * to huge values, above max_objects too. One rotate, one multiply.
 */
BRISK_INLINE size_t brisk_pool_index_of(const brisk_pool_t *pool, const void *p) {
  uint64_t offset = (uint64_t)((uintptr_t)p - (uintptr_t)pool->objects);
  uint32_t s = pool->shift;
  uint64_t rotated = (offset >> s) | (offset << ((64 - s) & 63));
  return (size_t)(rotated * pool->inverse);
}

/* ---- Keys (see Keys above) ---- */

/* The key word of the object at p. */
BRISK_INLINE uintptr_t *brisk_pool_key_word(const brisk_pool_t *pool, uint8_t *p) {
  return (uintptr_t *)(void *)(p + pool->key_at);
}

/* pool.c: the message and abort for an object that carries the key. */
BRISK_HIDDEN BRISK_COLD BRISK_NORETURN void _brisk_pool_double_free(const void *p,
                                                                    const char *caller);

/* The object at p comes back to the pool or a cache of it (`caller` is
 * the call the program made): abort if it carries the key, else it gets
 * it. Before the object is poisoned. */
BRISK_INLINE void brisk_pool_key_in(const brisk_pool_t *pool, uint8_t *p, const char *caller) {
  uintptr_t *word = brisk_pool_key_word(pool, p);
  if (BRISK_UNLIKELY(*word == pool->key)) _brisk_pool_double_free(p, caller);
  *word = pool->key;
}

/* ---- Handing out and counting ---- */

/* The object at p goes to the program, all of its stride usable (counted
 * by the caller): its live bit in debug builds, the tools, then its key
 * word cleared. Returns p. */
BRISK_INLINE void *brisk_pool_hand_out(brisk_pool_t *pool, uint8_t *p) {
#if BRISK_DEBUG
  size_t i = brisk_pool_index_of(pool, p);
  if (i >= pool->max_objects)
    _brisk_os_fatal_pointer("brisk_pool_alloc", p, "free list corrupted (a write after free?)");
  uint64_t bit = (uint64_t)1 << (i % 64);
  uint64_t old = atomic_fetch_or_explicit(&pool->live[i / 64], bit, memory_order_relaxed);
  if (old & bit)
    _brisk_os_fatal_pointer("brisk_pool_alloc", p,
                            "object handed out twice: free list corrupted (a write after free?)");
#endif
  return brisk_annotate_mempool_alloc_clear(pool, p, pool->stride, pool->key_at);
}

/* A counter of slot `slot`'s entry: its own thread adds without an atomic
 * RMW; the shared entry of threads without a slot needs one. */
BRISK_INLINE void brisk_pool_count(_Atomic size_t *counter, uint32_t slot) {
  if (BRISK_LIKELY(slot != BRISK_NO_THREAD_SLOT)) {
    brisk_owner_add(counter, 1);
  } else {
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  }
}

/* ---- The shards ---- */

BRISK_INLINE uint32_t brisk_pool_home_shard(uint32_t slot) {
  return slot & (BRISK_POOL_SHARDS - 1);
}

/* A head that points at first1, its tag moved on. */
BRISK_INLINE uint64_t brisk_pool_next_head(uint64_t head, uint32_t first1) {
  return ((head & ~(uint64_t)UINT32_MAX) + ((uint64_t)1 << 32)) | first1;
}

/* Push the chain first1 .. last (linked, last's link to be set) onto shard
 * s, then mark s non-empty unless marked (see `nonempty` above). */
BRISK_INLINE void brisk_pool_push_chain(brisk_pool_t *pool, uint32_t s, uint32_t first1,
                                        uint8_t *last) {
  _Atomic uint64_t *head = &pool->shards[s].head;
  uint64_t old = atomic_load_explicit(head, memory_order_relaxed);
  do {
    brisk_pool_link_store(last, (uint32_t)old);
  } while (!atomic_compare_exchange_weak_explicit(head, &old, brisk_pool_next_head(old, first1),
                                                  memory_order_seq_cst, memory_order_relaxed));
  uint64_t bit = (uint64_t)1 << s;
  if (!(atomic_load_explicit(&pool->nonempty, memory_order_seq_cst) & bit))
    atomic_fetch_or_explicit(&pool->nonempty, bit, memory_order_seq_cst);
}

/* ---- Across the two files ---- */

/* pool.c: up to `want` objects from the shards in one CAS (home first, then
 * the others by the bitmap, then every head once); how many, with the
 * chain's first and last index + 1 (the last one's link is meaningless). */
BRISK_HIDDEN uint32_t _brisk_pool_take_shared(brisk_pool_t *pool, uint32_t home, uint32_t want,
                                              uint32_t *first1, uint32_t *last1);
/* pool.c: claim up to `want` never-used objects, committed; how many (0:
 * exhausted, or the kernel refused to commit) and the first's index + 1. */
BRISK_HIDDEN uint32_t _brisk_pool_carve(brisk_pool_t *pool, uint32_t want, uint32_t *first1);
/* pool.c: an allocation failed: counted, NULL with errno ENOMEM; for a
 * destroyed pool (see Destroyed), the message and abort. */
BRISK_HIDDEN BRISK_COLD void *_brisk_pool_fail(brisk_pool_t *pool, brisk_pool_slot_t *entry,
                                              uint32_t slot);
/* pool.c: the message and abort for a pointer that is no object handed
 * out, or for any pointer given to a destroyed pool (`caller`: the call
 * the program made). */
BRISK_HIDDEN BRISK_COLD BRISK_NORETURN void _brisk_pool_bad_free(const brisk_pool_t *pool,
                                                                 const void *p,
                                                                 const char *caller);
/* pool.c: the message and abort for a call with a destroyed pool. */
BRISK_HIDDEN BRISK_COLD BRISK_NORETURN void _brisk_pool_not_live(const brisk_pool_t *pool,
                                                                 const char *caller);

/* A destroyed pool (see Destroyed): no live pool has no object. */
BRISK_INLINE bool brisk_pool_destroyed(const brisk_pool_t *pool) {
  return pool->max_objects == 0;
}

/* pool_cache.c: the calling thread's magazine is empty; refill it and hand
 * out one object (or fail). */
BRISK_HIDDEN void *_brisk_pool_cache_refill(brisk_pool_t *pool, brisk_pool_slot_t *entry,
                                            uint32_t slot);
/* pool_cache.c: the magazine is full; half of it to the shards, then p in. */
BRISK_HIDDEN void _brisk_pool_cache_flush(brisk_pool_t *pool, brisk_pool_slot_t *entry,
                                          uint32_t slot, uint8_t *p);

#endif /* BRISK_REGIONS_POOL_INTERNAL_H */
