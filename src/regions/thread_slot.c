/*
 * thread_slot.c — hand out and take back per-thread slot numbers (see
 * thread_slot.h for what a slot means and the memory order).
 *
 *   brisk_thread_slot ──(first call in a thread)── _brisk_thread_slot_acquire
 *       ctz over the free bits of slot_bitmap, CAS the bit set (acquire);
 *       a pthread key whose destructor gives the slot back (release).
 *   slot_release (the key's destructor, at thread exit): the bit cleared
 *       (release), and the thread marked as having no slot for good, so
 *       that a call from a later key destructor (which may run in glibc's
 *       last round, after which no destructor runs again) works on the
 *       shared structures instead of taking a slot nobody would give back.
 */
#include "regions/thread_slot.h"

#include "os/os.h"

#include <pthread.h>

#define SLOT_WORDS (BRISK_THREAD_SLOTS / 64)

BRISK_TLS uint32_t _brisk_thread_slot_plus1;
BRISK_API BRISK_TLS uint32_t brisk_thread_slot_line_;

/* Bit set: the slot is held by a live thread. */
static _Atomic uint64_t slot_bitmap[SLOT_WORDS];
static pthread_key_t slot_key;
static pthread_once_t slot_key_once = PTHREAD_ONCE_INIT;

static void slot_release(void *value) {
  uint32_t slot = (uint32_t)(uintptr_t)value - 1;
  /* No slot from now on (not "none yet", which would take one again):
   * brisk_thread_slot answers BRISK_NO_THREAD_SLOT without a call, and the
   * inline paths, reading line 0, go out of line to the shared structures. */
  _brisk_thread_slot_plus1 = BRISK_NO_THREAD_SLOT + 1;
  brisk_thread_slot_line_ = 0;
  /* Release: this thread's writes to its per-slot entries happen before the
   * next holder's acquire CAS on the same bit. */
  atomic_fetch_and_explicit(&slot_bitmap[slot / 64], ~((uint64_t)1 << (slot % 64)),
                            memory_order_release);
}

static void slot_key_create(void) {
  if (pthread_key_create(&slot_key, slot_release) != 0) {
    _brisk_os_write_error("brisk: pthread_key_create failed for thread slots\n");
    _brisk_os_abort();
  }
}

static uint32_t take_free_slot(void) {
  for (uint32_t w = 0; w < SLOT_WORDS; w++) {
    uint64_t bits = atomic_load_explicit(&slot_bitmap[w], memory_order_relaxed);
    while (~bits != 0) {
      uint32_t bit = (uint32_t)__builtin_ctzll(~bits);
      if (atomic_compare_exchange_weak_explicit(&slot_bitmap[w], &bits,
                                                bits | ((uint64_t)1 << bit),
                                                memory_order_acquire, memory_order_relaxed))
        return w * 64 + bit;
    }
  }
  return BRISK_NO_THREAD_SLOT;
}

uint32_t _brisk_thread_slot_acquire(void) {
  pthread_once(&slot_key_once, slot_key_create);
  uint32_t slot = take_free_slot();
  if (slot != BRISK_NO_THREAD_SLOT &&
      pthread_setspecific(slot_key, (void *)(uintptr_t)(slot + 1)) != 0) {
    /* Without the destructor the slot would leak at thread exit: give it
     * back and run this thread uncached. */
    slot_release((void *)(uintptr_t)(slot + 1));
    slot = BRISK_NO_THREAD_SLOT;
  }
  _brisk_thread_slot_plus1 = slot + 1;
  brisk_thread_slot_line_ = slot != BRISK_NO_THREAD_SLOT ? (slot + 1) * BRISK_CACHE_LINE : 0;
  return slot;
}

uint32_t _brisk_thread_slots_held(void) {
  uint32_t held = 0;
  for (uint32_t w = 0; w < SLOT_WORDS; w++)
    held += (uint32_t)__builtin_popcountll(
        atomic_load_explicit(&slot_bitmap[w], memory_order_relaxed));
  return held;
}
