/*
 * stack.h — internals of the frame allocator (stack.c) that the tests and
 * the benchmark may read; the API itself is in <brisk/stack.h>.
 */
#ifndef BRISK_REGIONS_STACK_H
#define BRISK_REGIONS_STACK_H

#include <stddef.h>

#include <brisk/stack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of all the blocks this stack has mapped since it was created
 * (released ones included): the seed's "cumulated size of block
 * allocations", which brisk_region_stats_t does not carry. Spelled without
 * BRISK_HIDDEN so that C++ tests can include this header (base.h needs
 * <stdatomic.h>). */
__attribute__((visibility("hidden"))) size_t _brisk_stack_mapped_total(const brisk_stack_t *stack);

/* Destroy every thread's default stack (brisk_stack_tls) whose thread died
 * without its key destructor having destroyed it, as brisk_stack_tls's
 * slow path does when their list has doubled (stack.c); returns how many. */
__attribute__((visibility("hidden"))) size_t _brisk_stack_tls_sweep(void);

#ifdef __cplusplus
}
#endif

#endif /* BRISK_REGIONS_STACK_H */
