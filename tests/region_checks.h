// The region allocators' validators for the C++ tests, through a C shim
// (region_checks.c), as internal_checks.h reaches the general allocator's:
// regions/pool.h and regions/fifo.h are C only (base.h's atomics). Also the
// corruptions that the death tests make behind the API's back, to show
// that each validator names what is wrong.
#ifndef BRISK_TEST_REGION_CHECKS_H
#define BRISK_TEST_REGION_CHECKS_H

#include <brisk.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// The pool's validator (src/regions/pool_validate.c) at a quiet point: its
// shards and magazines, and the `count` local caches named (count 0: none).
// Prints "brisk: brisk_pool_validate(0x...): ..." and aborts at the first
// broken invariant.
void brisk_test_pool_validate(const brisk_pool_t *pool);
void brisk_test_pool_validate_locals(const brisk_pool_t *pool,
                                     const brisk_pool_local_t *const *locals, size_t count);

// A pool's batches for a cache in front of it (the hybrid's lists):
// _brisk_pool_take_batch and _brisk_pool_give_batch (src/regions/pool.h),
// whose messages name brisk_pool_free.
size_t brisk_test_pool_take_batch(brisk_pool_t *pool, size_t want, void **out);
void brisk_test_pool_give_batch(brisk_pool_t *pool, void *const *objects, size_t n);

// The fifo's validator (src/regions/fifo.c), by the fifo's thread:
// "brisk: brisk_fifo_validate(0x...): ..." and abort.
void brisk_test_fifo_validate(const brisk_fifo_t *fifo);

// The library's exported brisk_fifo_alloc and brisk_fifo_free, which
// <brisk/fifo.h> hides behind its inline functions of the same names
// (fifo_exported.c declares them as another language's bindings would).
extern void *(*const brisk_test_fifo_alloc_exported)(brisk_fifo_t *fifo, size_t size);
extern void (*const brisk_test_fifo_free_exported)(brisk_fifo_t *fifo, void *p);

// The library's exported brisk_hybrid_alloc and brisk_hybrid_free, behind
// <brisk/hybrid.h>'s inline functions of the same names (hybrid_exported.c,
// as fifo_exported.c).
extern void *(*const brisk_test_hybrid_alloc_exported)(brisk_hybrid_t *hybrid, size_t size,
                                                       size_t align);
extern void (*const brisk_test_hybrid_free_exported)(brisk_hybrid_t *hybrid, void *p);

// The hybrid's validator (src/regions/hybrid.c) at a quiet point: every
// thread slot's lists, then its buckets' pools and its regions' buddies.
// Prints "brisk: brisk_hybrid_validate(0x...): ..." and aborts at the first
// broken invariant.
void brisk_test_hybrid_validate(const brisk_hybrid_t *hybrid);

// How many thread slots (src/regions/thread_slot.h: the numbers of the
// per-thread caches of pools, buddies and hybrids) live threads hold now;
// exact at a quiet point.
unsigned brisk_test_thread_slots_held(void);
// Give back the slots of threads that died holding one (their key
// destructor never ran: thread_slot.c), as a thread that finds every slot
// held does; returns how many.
unsigned brisk_test_thread_slots_reclaim(void);

// Corruptions. Push p onto the pool's free objects as brisk_pool_free's own
// push does (the caller's magazine with the per-thread cache, its home
// shard without), skipping free's checks and counts: a double free that
// not even a debug build's live bits see.
void brisk_test_pool_push_behind_api(brisk_pool_t *pool, void *p);
// Clear every nonempty bit of the pool's shards (a lost bitmap update).
void brisk_test_pool_clear_nonempty(brisk_pool_t *pool);
// Add delta to the room of the calling thread's list of the class that an
// align-0 request of `size` bytes takes (a lost or doubled update of the
// word that holds it). False when the thread has no such list (no class
// for the size, the caches off, its entry not in use yet).
bool brisk_test_hybrid_add_room(brisk_hybrid_t *hybrid, size_t size, long delta);
// The code the hybrid's inline free reads for p's granule (the class of
// the block that starts there, freed inline; 0: out of line; -1 when p lies
// past the blocks), and the same set behind the API's back.
int brisk_test_hybrid_code(brisk_hybrid_t *hybrid, const void *p);
void brisk_test_hybrid_set_code(brisk_hybrid_t *hybrid, const void *p, unsigned char code);
// Copy n bytes to p without AddressSanitizer's checks: a stray write into
// memory a region allocator keeps poisoned (a fifo's block header or free
// space), as an overflow in unchecked code would make.
void brisk_test_poke(void *p, const void *bytes, size_t n);

#ifdef __cplusplus
}
#endif

#endif  // BRISK_TEST_REGION_CHECKS_H
