/*
 * thread_slot.c — hand out and take back per-thread slot numbers (see
 * thread_slot.h for what a slot means and the memory order).
 *
 *   brisk_thread_slot ──(first call in a thread)── _brisk_thread_slot_acquire
 *       take_free_slot: ctz over the free bits of slot_bitmap, CAS the bit
 *       set (acquire); none free: _brisk_thread_slots_reclaim, then again;
 *       the slot's exit token held (exit_token.h), and a pthread key whose
 *       destructor gives the slot back (release).
 *   slot_release (the key's destructor, at thread exit): the token dropped,
 *       the bit cleared (release), and the thread marked as having no slot
 *       for good, so that a call from a later key destructor (which may run
 *       in glibc's last round, after which no destructor runs again) works
 *       on the shared structures instead of taking a slot nobody would give
 *       back.
 *   _brisk_thread_slots_reclaim (every slot held): each held slot whose
 *       token says its thread died holding it is given back (release).
 *   _brisk_thread_slots_take_back (an allocator found exhausted): the
 *       reclaim above, then each free slot held (acquire fetch_or) while
 *       the allocator empties its entries, and given back (release).
 *
 * Thread exit. A thread that makes its FIRST region call from another
 * key's destructor in glibc's last round takes a slot whose destructor
 * never runs (the slots' key passed earlier in that round), and nothing
 * tells the thread it is exiting (exit_token.h), so it cannot decline
 * one. Its slot's exit token, which the kernel marks when the thread dies
 * holding it, is how such slots come back: a thread that finds every slot
 * held probes the held slots' tokens and frees those of dead holders.
 * Until every slot is held, a slot leaked that way costs nothing but
 * itself and what its entries of the per-slot arrays cached (which an
 * exhausted allocator takes back, as from any slot between holders), so
 * the probing waits until then, or until an allocator is found
 * exhausted. With more live threads than slots, each new thread's first
 * call pays that probe (a failed trylock per slot) before it goes without
 * one. A thread that finds none while another thread is taking slots back
 * may go without one too. A thread that could not hold its slot's token
 * (_brisk_exit_token_hold) goes without the token: its slot is not taken
 * back if it dies in that last round.
 */
#include "regions/thread_slot.h"

#include "os/os.h"
#include "regions/exit_token.h"

#include <pthread.h>

#define SLOT_WORDS (BRISK_THREAD_SLOTS / 64)

BRISK_TLS uint32_t _brisk_thread_slot_plus1;
BRISK_API BRISK_TLS uint32_t brisk_thread_slot_line_;

/* Bit set: the slot is held, by a live thread or by one that died without
 * its key destructor, until _brisk_thread_slots_reclaim. */
static _Atomic uint64_t slot_bitmap[SLOT_WORDS];
static pthread_key_t slot_key;
static pthread_once_t slot_key_once = PTHREAD_ONCE_INIT;
/* Held by the slot's thread, if it could take it (token_held). */
static brisk_exit_token_t slot_tokens[BRISK_THREAD_SLOTS];
static BRISK_TLS bool token_held;

static void slot_release(void *value) {
  uint32_t slot = (uint32_t)(uintptr_t)value - 1;
  /* Before the bit: the next holder, once its CAS sets it, finds the token
   * free. */
  if (token_held) _brisk_exit_token_drop(&slot_tokens[slot]);
  token_held = false;
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
  for (uint32_t slot = 0; slot < BRISK_THREAD_SLOTS; slot++)
    _brisk_exit_token_init(&slot_tokens[slot]);
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

void _brisk_thread_slots_init(void) { pthread_once(&slot_key_once, slot_key_create); }

uint32_t _brisk_thread_slot_acquire(void) {
  _brisk_thread_slots_init();
  uint32_t slot = take_free_slot();
  /* Again even if this reclaim found no dead holder: another thread's
   * reclaim may have freed them while this one probed. */
  if (slot == BRISK_NO_THREAD_SLOT) {
    _brisk_thread_slots_reclaim();
    slot = take_free_slot();
  }
  if (slot != BRISK_NO_THREAD_SLOT) {
    token_held = _brisk_exit_token_hold(&slot_tokens[slot]);
    if (pthread_setspecific(slot_key, (void *)(uintptr_t)(slot + 1)) != 0) {
      /* Without the destructor the slot would wait for this thread's death
       * to come back: give it back now and run this thread uncached. */
      slot_release((void *)(uintptr_t)(slot + 1));
      slot = BRISK_NO_THREAD_SLOT;
    }
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

uint32_t _brisk_thread_slots_reclaim(void) {
  _brisk_thread_slots_init();
  uint32_t freed = 0;
  for (uint32_t w = 0; w < SLOT_WORDS; w++) {
    uint64_t held = atomic_load_explicit(&slot_bitmap[w], memory_order_relaxed);
    while (held != 0) {
      uint32_t bit = (uint32_t)__builtin_ctzll(held);
      held &= held - 1;
      if (!_brisk_exit_token_holder_died(&slot_tokens[w * 64 + bit])) continue;
      /* The probe read the dead holder's last writes (acquire, see
       * exit_token.h); release hands them on to the next holder's CAS, as
       * slot_release does. */
      atomic_fetch_and_explicit(&slot_bitmap[w], ~((uint64_t)1 << bit), memory_order_release);
      freed++;
    }
  }
  return freed;
}

size_t _brisk_thread_slots_take_back(size_t (*take_back)(void *context, uint32_t slot),
                                     void *context) {
  _brisk_thread_slots_reclaim();
  size_t taken = 0;
  for (uint32_t w = 0; w < SLOT_WORDS; w++) {
    uint64_t free_bits = ~atomic_load_explicit(&slot_bitmap[w], memory_order_relaxed);
    while (free_bits != 0) {
      uint64_t bit = free_bits & (0 - free_bits);
      free_bits &= free_bits - 1;
      /* Held as a new holder holds it: the acquire makes the last holder's
       * writes to the slot's entries visible here (its release in
       * slot_release); a thread that took it meanwhile keeps it. No token:
       * the caller is alive and gives it back below. */
      if (atomic_fetch_or_explicit(&slot_bitmap[w], bit, memory_order_acquire) & bit) continue;
      taken += take_back(context, w * 64 + (uint32_t)__builtin_ctzll(bit));
      /* Release: the emptied entries happen before the next holder's
       * acquire. */
      atomic_fetch_and_explicit(&slot_bitmap[w], ~bit, memory_order_release);
    }
  }
  return taken;
}
