/*
 * thread_slot.h — a small integer per live thread, for per-thread caches
 * that live inside a shared object (pool, buddy, hybrid).
 *
 * A thread's slot is an index in [0, BRISK_THREAD_SLOTS). The thread that
 * holds slot i is the only one that touches entry i of any per-slot array,
 * so those entries need no atomics. When a thread exits its slot goes back
 * to a free bitmap and the next thread to take it inherits every entry i as
 * it was left (the cached objects are still valid objects of their owner;
 * only the thread that uses them changes), so nothing is flushed at thread
 * exit and no object's cache outlives it.
 *
 * Slots are found the way seed 000 finds a free stack: one atomic bitmap
 * word, count-trailing-zeros, one CAS. More than BRISK_THREAD_SLOTS live
 * threads is fine: the extra ones get BRISK_NO_THREAD_SLOT and work on the
 * shared structures directly. A thread that dies without its key
 * destructor having run (a first region call in glibc's last destructor
 * round) keeps its slot until a thread finds every slot held, which then
 * takes it back (thread_slot.c, exit_token.h).
 *
 * An exited thread's entries keep what they cached until the next holder
 * comes; an allocation that finds its allocator exhausted takes it back
 * first (_brisk_thread_slots_take_back), holding each free slot for the
 * time it empties that slot's entries, so that "one thread meets the
 * bound" holds however many threads came and went before it.
 *
 * Memory order: releasing a slot clears its bit with release, taking one
 * sets it with an acquire CAS, so everything the old holder wrote to entry i
 * happens before the new holder reads it. A take-back holds a slot the
 * same way (an acquire fetch_or, a release fetch_and).
 */
#ifndef BRISK_REGIONS_THREAD_SLOT_H
#define BRISK_REGIONS_THREAD_SLOT_H

#include "base/base.h"

#include <brisk/internal.h>

#define BRISK_THREAD_SLOTS 128u
#define BRISK_NO_THREAD_SLOT BRISK_THREAD_SLOTS

/* slot + 1 while the thread holds one; 0 before its first call;
 * BRISK_NO_THREAD_SLOT + 1 when every slot was taken at that call, and
 * once its slot was given back at thread exit. */
extern BRISK_HIDDEN BRISK_TLS uint32_t _brisk_thread_slot_plus1;

/* brisk_thread_slot_line_ (declared in brisk/internal.h, exported: the
 * hybrid's inline paths in brisk/hybrid.h read it in the program): (slot +
 * 1) * BRISK_CACHE_LINE while the thread holds a slot, else 0 (no slot
 * yet, or none to be had): for arrays of one-cache-line entries, the
 * entry's byte offset from the element before the array, and a zero test
 * that covers both "no slot" cases, in one TLS load (pool.c's fast paths). */

BRISK_HIDDEN uint32_t _brisk_thread_slot_acquire(void);

/* The slots' one-time set-up (their key and exit tokens), which a thread's
 * first slot would otherwise do: the creates of the allocators with
 * per-thread entries call it, so that none of their allocations makes a
 * system call (glibc's pthread_once wakes waiters with a futex call the
 * first time). */
BRISK_HIDDEN void _brisk_thread_slots_init(void);

/* How many slots are held now (relaxed: exact at a quiet point; for the
 * tests): by live threads, and by threads that died holding one without
 * their key destructor (thread_slot.c), until they are reclaimed. */
BRISK_HIDDEN uint32_t _brisk_thread_slots_held(void);

/* Give back every slot whose thread died holding it (thread_slot.c: what a
 * thread that finds every slot held does); returns how many. */
BRISK_HIDDEN uint32_t _brisk_thread_slots_reclaim(void);

/* For an allocation that found its allocator exhausted: every slot that no
 * live thread holds (those of threads that died holding one taken back
 * first) is held by the caller while take_back(context, slot) empties that
 * slot's entries (the caches a thread left at exit, which only the slot's
 * next holder would otherwise use), then given back. Returns the sum of
 * what take_back returned (the objects it gave back). */
BRISK_HIDDEN size_t _brisk_thread_slots_take_back(size_t (*take_back)(void *context, uint32_t slot),
                                                 void *context);

/* The calling thread's slot, or BRISK_NO_THREAD_SLOT. */
BRISK_INLINE uint32_t brisk_thread_slot(void) {
  uint32_t plus1 = _brisk_thread_slot_plus1;
  if (BRISK_LIKELY(plus1 != 0)) return plus1 - 1;
  return _brisk_thread_slot_acquire();
}

#endif /* BRISK_REGIONS_THREAD_SLOT_H */
