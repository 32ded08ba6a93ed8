/*
 * brisk/pool.h — the fixed-size pool, for real-time and networking code:
 * lock-free, bounded, and free of system calls after creation when asked
 * (seeds 000 and 003); and local caches of its objects. Its flags are
 * brisk/region.h's BRISK_REGION_*.
 *
 * Objects of one size carved from one contiguous reservation; free objects
 * hold the link of a lock-free list (ABA-tagged head) split over several
 * shards, found through one atomic bitmap of non-empty shards and ctz.
 * Any thread may allocate and free. With BRISK_REGION_THREAD_CACHE, up to a
 * few dozen objects per thread wait in a per-thread cache, so a bounded
 * pool may report exhaustion while other threads cache free objects.
 *
 * A NULL pool (a create that failed, unchecked): every function of the
 * library takes it. brisk_pool_destroy does nothing (as free(NULL));
 * brisk_pool_alloc returns NULL with errno EINVAL; brisk_pool_free of NULL
 * does nothing, of any other pointer aborts with a message;
 * brisk_pool_stats reports zeros (errno EINVAL); a local cache
 * initialised with it hands out nothing (NULL/EINVAL) and takes only
 * NULL. The inline functions below test no handle, but a local cache of
 * no pool sends every call out of line.
 *
 * A destroyed pool: brisk_pool_destroy of it again, or of another kind's
 * handle, aborts with a message (brisk/region.h: destroyed handles). So
 * does every other call with it while the mapping cache keeps its
 * reservation (a second, by default): brisk_pool_alloc, brisk_pool_free
 * of any pointer but NULL, stats, brisk_pool_local_init, and a local
 * cache's calls past its inline paths (a refill, a free it cannot take
 * inline, a flush of what it holds): "brisk: brisk_pool_alloc(<pool>):
 * not a live pool (destroyed already?)", at no cost to a live pool's
 * alloc and free. Not caught: a local cache's inline alloc and free,
 * which touch the local cache only, go on with the objects it holds
 * (memory the next pool of the size takes back). A pool of a debug build
 * (BRISK_DEBUG) or mlock'ed with BRISK_REGION_LOCK goes back to the
 * system at destroy, and any other once the cache lets it go: calls with
 * it may then crash (SIGSEGV); once a new pool of the same size took the
 * reservation, they are calls on that pool.
 */
#ifndef BRISK_POOL_H
#define BRISK_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "region.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct brisk_pool_s brisk_pool_t;

/*
 * obj_size bytes (> 0) aligned to align (power of two up to 4096, 0 means
 * 16). capacity 0: grows slab by slab; otherwise a hard bound on live
 * objects (at most 2^32 - 1), all committed at create (so alloc and free
 * never call the OS; add BRISK_REGION_PREFAULT to take no page fault
 * either). NULL/EINVAL for a bad size, alignment, capacity or flag,
 * NULL/ENOMEM when memory can't be reserved.
 */
BRISK_API brisk_pool_t *brisk_pool_create(size_t obj_size, size_t align, size_t capacity);
BRISK_API brisk_pool_t *brisk_pool_create_ex(size_t obj_size, size_t align, size_t capacity,
                                             unsigned flags);
/* An object, uninitialised. NULL/ENOMEM when the capacity is reached. */
BRISK_API void *brisk_pool_alloc(brisk_pool_t *pool);
/* NULL does nothing. A pointer outside the pool, not at an object's start,
 * or at an object never handed out aborts with a message; so does a double
 * free, from any thread, while the object waits free (on the pool's lists,
 * in a thread's or a local cache), if the object is 16 bytes or more
 * (obj_size > 8, or align 16 or more): a free object carries a key in its
 * second 8 bytes, which the pool clears when it hands the object out.
 * Objects of 8 bytes or less with align 8 or less have no room for it:
 * their double free is caught in debug builds (BRISK_DEBUG) only. Two
 * frees of one object racing each other (neither made after the other)
 * can both pass. */
BRISK_API void brisk_pool_free(brisk_pool_t *pool, void *p);
BRISK_API void brisk_pool_destroy(brisk_pool_t *pool);
/*
 * allocations: successful brisk_pool_alloc calls, counted per thread;
 * bytes_requested: allocations x obj_size (what each call asks for).
 * bytes_in_use: objects in use x their stride (obj_size rounded up to the
 * alignment). bytes_held: header and committed objects. Any thread, any
 * time: per-thread counts summed without stopping their threads.
 */
BRISK_API void brisk_pool_stats(const brisk_pool_t *pool, brisk_region_stats_t *out);

/*
 * A local cache: one thread's private stack of a pool's free objects, used
 * inline (no call, no atomic, no TLS lookup): what a packet loop or a game
 * frame holds on to. Objects come from the pool in batches through
 * brisk_pool_alloc and go back through brisk_pool_free, so every check and
 * count of the pool applies at the boundary; objects sitting in a local
 * cache count as in use in the pool's statistics.
 *
 *   brisk_pool_local_t local;
 *   brisk_pool_local_init(&local, pool, 0);     (0: up to 32 objects)
 *   p = brisk_pool_local_alloc(&local);  ...  brisk_pool_local_free(&local, p);
 *   brisk_pool_local_flush(&local);             (before the thread or the cache goes)
 *
 * One thread per local cache. Its inline free checks that p lies in
 * objects the pool has handed out and that p does not carry the pool's
 * key (brisk_pool_free above): a double free of an object of 16 bytes or
 * more aborts, whether the object waits in this local cache or in the
 * pool; an interior pointer given to it is not caught (as brisk_free's
 * fast path). Objects not flushed are lost to the pool until it is
 * destroyed. Debug, ASan and Valgrind builds send every call through the
 * pool itself.
 */
typedef struct brisk_pool_local_s {
  void *head;        /* free objects, each holding the next in its first 8 bytes */
  unsigned count;    /* objects in the list */
  unsigned max;      /* a free with this many hands half back; 0: always out of line */
  uintptr_t lo;      /* the pool's first object... */
  uintptr_t span;    /* ...and the bytes from there that the pool had handed out */
  uintptr_t key;     /* the pool's key, which a free object holds... */
  size_t key_at;     /* ...at this offset: 8 (0 for 8-byte objects: not kept) */
  brisk_pool_t *pool;
} brisk_pool_local_t;

/* max: objects to keep at most (0: 32; at least 2). */
BRISK_API void brisk_pool_local_init(brisk_pool_local_t *local, brisk_pool_t *pool, unsigned max);
/* Every cached object back to the pool. */
BRISK_API void brisk_pool_local_flush(brisk_pool_local_t *local);
BRISK_API void *brisk_pool_local_alloc_slow_(brisk_pool_local_t *local);
BRISK_API void brisk_pool_local_free_slow_(brisk_pool_local_t *local, void *p);

/* A word of an object, accessed as any type may be, so that the compiler
 * keeps these accesses in order with the program's own. */
typedef uintptr_t brisk_pool_word_t_ __attribute__((may_alias));

/* An object of the pool; NULL/ENOMEM as brisk_pool_alloc. Inline: the
 * link read, the key cleared. */
static inline void *brisk_pool_local_alloc(brisk_pool_local_t *local) {
  void *p = local->head;
  if (__builtin_expect(p != NULL, 1)) {
    local->head = (void *)*(brisk_pool_word_t_ *)p;
    *(brisk_pool_word_t_ *)(void *)((char *)p + local->key_at) = 0;
    local->count -= 1;
    return p;
  }
  return brisk_pool_local_alloc_slow_(local);
}

/* NULL does nothing. Inline while p is in range, does not carry the key
 * and the cache has room. */
static inline void brisk_pool_local_free(brisk_pool_local_t *local, void *p) {
  if (__builtin_expect((uintptr_t)p - local->lo < local->span && local->count < local->max, 1)) {
    brisk_pool_word_t_ *key = (brisk_pool_word_t_ *)(void *)((char *)p + local->key_at);
    if (__builtin_expect(*key != local->key, 1)) {
      *key = local->key;
      *(brisk_pool_word_t_ *)p = (uintptr_t)local->head;
      local->head = p;
      local->count += 1;
      return;
    }
  }
  brisk_pool_local_free_slow_(local, p);
}

#ifdef __cplusplus
}
#endif

#endif /* BRISK_POOL_H */
