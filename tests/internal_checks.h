// Checks of brisk's internal arithmetic for the C++ tests, through a C shim
// (internal_checks.c): general/internal.h is C only (base.h's atomics).
#ifndef BRISK_TEST_INTERNAL_CHECKS_H
#define BRISK_TEST_INTERNAL_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// For every size class and every byte offset of a page of its kind, at page
// starts on both sides of a 2^32 boundary: how many times free()'s block
// test (brisk_page_is_block_start) or the block index
// (brisk_page_block_index) disagree with offset % block size and offset /
// block size. *checked counts the offsets tried.
uint64_t brisk_test_block_start_errors(uint64_t *checked);

// The size class table (size_class.h): class sizes rise and are multiples
// of 16 above 8 B, and _brisk_class_info agrees with them; the small, medium and last classes end at
// BRISK_SMALL_MAX, BRISK_MEDIUM_MAX and BRISK_LARGE_MAX; every size up to
// BRISK_LARGE_MAX maps to the smallest class that holds it. Returns the
// failed checks; *checked counts the sizes tried.
uint64_t brisk_test_size_class_errors(uint64_t *checked);

// The general allocator's heap validator (src/general/validate.c): the
// calling thread's heap, and every heap no thread owns. Either prints
// "brisk: heap check: ..." and aborts at the first broken invariant.
void brisk_test_validate_own_heap(void);
void brisk_test_validate_idle_heaps(void);

// The thread free() takes for the owner of p's segment (its owner_thread,
// 0 while its heap has none), and the calling thread's identity as free()
// compares it.
uintptr_t brisk_test_owner_thread(const void *p);
uintptr_t brisk_test_thread_id(void);

// The mappings the secure build puts between no-access pages: the calling
// thread's heap (its first byte and size) and the segment that holds p, a
// block of a size class or a huge block (its header's first byte and
// mapped size).
void brisk_test_heap_mapping(uintptr_t *start, size_t *size);
void brisk_test_segment_mapping(const void *p, uintptr_t *start, size_t *size);

// Whether the page of p's size-class block serves a class (a page retired
// to its segment does not). At a quiet point.
int brisk_test_page_in_use(const void *p);

// Sets the purge delay (BRISK_PURGE_DELAY_MS, which also paces the tidy of
// abandoned heaps) for the rest of the process; returns the one before.
uint64_t brisk_test_set_purge_delay_ms(uint64_t delay_ms);

// Sets BRISK_PURGE_DELAY_MAX_MS, the longest a free page a heap keeps for
// reuse stays backed (no page waits longer than the base delay when it is
// at most that), for the rest of the process; returns the one before.
uint64_t brisk_test_set_purge_delay_max_ms(uint64_t max_ms);

// brisk's clock, held by a test (os.h: _brisk_os_clock_hold): the first
// call holds it at its time now plus advance_ms, and each later one moves
// it on by advance_ms; it reads that time (returned) until released, and
// then runs on from it, never backwards. A test of what happens after a
// delay holds the clock instead of sleeping: it runs the same however slow
// the machine is.
uint64_t brisk_test_clock_hold(uint64_t advance_ms);
void brisk_test_clock_release(void);

// How many batches the calling thread's heap can still fill with other
// heaps' blocks before it must post each block alone: its free ones, those
// given back to it, and those it may still carve (types.h:
// BRISK_HEAP_BATCHES, BRISK_BATCH_CHUNKS). At a quiet point.
size_t brisk_test_own_batches_left(void);

// Whether the heap that owns p's size-class block is abandoned (its thread
// has exited and no other has adopted it yet).
int brisk_test_heap_abandoned(const void *p);

// Whether the remote-free queue of the heap that owns p's size-class block
// is empty: every block posted to it taken back. At a quiet point (no
// thread draining or posting to it).
int brisk_test_heap_queue_empty(const void *p);

// What a thread caught by fork() inside free() may leave in the child: p,
// a block of another heap's, appended to that heap's remote queue by the
// exchange of the queue's tail, and never linked to the node before it
// (the thread is not in the child). p is lost to its heap.
void brisk_test_push_unlinked(void *p);

#ifdef __cplusplus
}
#endif

#endif  // BRISK_TEST_INTERNAL_CHECKS_H
