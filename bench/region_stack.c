/*
 * region_stack — brisk's frame allocator on the two experiments of seed 002.
 *
 *  1. recursive: a function pushes a frame, allocates a few blocks, calls
 *     itself down to a depth, allocates a few more after the call, and
 *     returns (its scope pops everything). The same pattern with
 *     malloc/free (the C library's, this program is not preloaded) is the
 *     baseline. Time per allocation, median of the repetitions.
 *  2. worst_case: depth rounds of 20,000 small allocations in a scope, then
 *     one oversized allocation (80,000 + 4096 * depth bytes) in the outer
 *     frame. Reports the bytes of blocks asked from the system in total (the
 *     seed went from 35 MiB to 7.5 MiB) and the time, on a fresh stack.
 *
 * Every measurement is repeated (5 times, 7 without --quick) and its median
 * reported: the machine is shared, single runs are noisy. Output: a
 * Markdown table under "### stack", then key=value lines, then status=ok.
 */
#include <brisk.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/regions/stack.h"
#include "bench_common.h"

#define MAX_REPS 16
#define BRISK_UNLIKELY_(x) __builtin_expect(!!(x), 0)
#define ALLOCS_BEFORE 4
#define ALLOCS_AFTER 4

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pointer is used: the allocation cannot be optimized away. */
static void escape(const void *p) { __asm__ volatile("" : : "r"(p)); }

/* Request sizes: small and varied, the same sequence for both allocators
 * (a table lookup, so that the harness itself costs little). */
static const size_t request_sizes[16] = {24, 40, 16, 96, 64, 200, 32, 120,
                                         48, 256, 80, 8,  72, 160, 56, 104};

static inline size_t request_size(unsigned depth, unsigned k) {
  return request_sizes[(depth + k) & 15];
}

/* Write the first byte, as a program would. */
static void touch(void *p, size_t size) {
  if (BRISK_UNLIKELY_(p == NULL)) {
    fprintf(stderr, "region_stack: allocation of %zu bytes failed\n", size);
    exit(1);
  }
  *(char *)p = (char)size;
  escape(p);
}

static __attribute__((noinline)) void recurse_stack(brisk_stack_t *s, unsigned depth) {
  BRISK_STACK_SCOPE(s);
  for (unsigned k = 0; k < ALLOCS_BEFORE; k++) {
    size_t size = request_size(depth, k);
    touch(brisk_stack_alloc(s, size, 0), size);
  }
  if (depth > 0) recurse_stack(s, depth - 1);
  for (unsigned k = 0; k < ALLOCS_AFTER; k++) {
    size_t size = request_size(depth, ALLOCS_BEFORE + k);
    touch(brisk_stack_alloc(s, size, 0), size);
  }
}

static __attribute__((noinline)) void recurse_malloc(unsigned depth) {
  void *mine[ALLOCS_BEFORE + ALLOCS_AFTER];
  for (unsigned k = 0; k < ALLOCS_BEFORE; k++) {
    size_t size = request_size(depth, k);
    mine[k] = malloc(size);
    touch(mine[k], size);
  }
  if (depth > 0) recurse_malloc(depth - 1);
  for (unsigned k = 0; k < ALLOCS_AFTER; k++) {
    size_t size = request_size(depth, ALLOCS_BEFORE + k);
    mine[ALLOCS_BEFORE + k] = malloc(size);
    touch(mine[ALLOCS_BEFORE + k], size);
  }
  for (unsigned k = 0; k < ALLOCS_BEFORE + ALLOCS_AFTER; k++) free(mine[k]);
}

/* The harness alone: the same calls and writes, bumping a static buffer. */
static char floor_buffer[1 << 20];
static size_t floor_offset;

static __attribute__((noinline)) void recurse_floor(unsigned depth) {
  size_t saved = floor_offset;
  for (unsigned k = 0; k < ALLOCS_BEFORE; k++) {
    size_t size = request_size(depth, k);
    touch(floor_buffer + floor_offset, size);
    floor_offset += size;
  }
  if (depth > 0) recurse_floor(depth - 1);
  for (unsigned k = 0; k < ALLOCS_AFTER; k++) {
    size_t size = request_size(depth, ALLOCS_BEFORE + k);
    touch(floor_buffer + floor_offset, size);
    floor_offset += size;
  }
  floor_offset = saved;
}

/* Nanoseconds per allocation of `calls` recursions to `depth`. */
enum which { WITH_STACK, WITH_MALLOC, HARNESS_ONLY };

static double time_recursive(enum which which, brisk_stack_t *s, unsigned depth, long calls) {
  double start = now_s();
  for (long i = 0; i < calls; i++) {
    if (which == WITH_STACK)
      recurse_stack(s, depth);
    else if (which == WITH_MALLOC)
      recurse_malloc(depth);
    else
      recurse_floor(depth);
  }
  double elapsed = now_s() - start;
  double allocs = (double)calls * (depth + 1) * (ALLOCS_BEFORE + ALLOCS_AFTER);
  return elapsed * 1e9 / allocs;
}

static void worst_case(brisk_stack_t *s, int depth) {
  BRISK_STACK_SCOPE(s);
  for (int i = 0; i < depth; i++) {
    {
      BRISK_STACK_SCOPE(s);
      for (int k = 0; k < 20000; k++) touch(brisk_stack_alloc(s, 100, 1), 100);
    }
    size_t big = 80000 + 4096 * (size_t)depth;
    touch(brisk_stack_alloc(s, big, 1), big);
  }
}

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  int reps = quick ? 5 : 7;
  unsigned depth = 64;
  long calls = quick ? 20000 : 100000;
  int wc_depth = 20;

  double stack_ns[MAX_REPS], malloc_ns[MAX_REPS], floor_ns[MAX_REPS], wc_ms[MAX_REPS];
  size_t wc_bytes = 0, wc_maps = 0, wc_peak_held = 0;

  brisk_stack_t *s = brisk_stack_create(0);
  if (s == NULL) {
    fprintf(stderr, "region_stack: brisk_stack_create failed\n");
    return 1;
  }
  time_recursive(WITH_STACK, s, depth, calls / 10); /* warm up */
  time_recursive(WITH_MALLOC, s, depth, calls / 10);
  for (int r = 0; r < reps; r++) {
    /* Alternate the order so that drift in machine load hits both. */
    if (r % 2 == 0) {
      stack_ns[r] = time_recursive(WITH_STACK, s, depth, calls);
      malloc_ns[r] = time_recursive(WITH_MALLOC, s, depth, calls);
    } else {
      malloc_ns[r] = time_recursive(WITH_MALLOC, s, depth, calls);
      stack_ns[r] = time_recursive(WITH_STACK, s, depth, calls);
    }
    floor_ns[r] = time_recursive(HARNESS_ONLY, s, depth, calls);
  }
  brisk_stack_destroy(s);

  for (int r = 0; r < reps; r++) {
    brisk_stack_t *w = brisk_stack_create(0);
    if (w == NULL) return 1;
    double start = now_s();
    worst_case(w, wc_depth);
    wc_ms[r] = (now_s() - start) * 1e3;
    brisk_region_stats_t st;
    brisk_stack_stats(w, &st);
    size_t total = _brisk_stack_mapped_total(w);
    if (r > 0 && (total != wc_bytes || st.system_requests != wc_maps)) {
      fprintf(stderr, "region_stack: worst_case is not deterministic\n");
      return 1;
    }
    wc_bytes = total;
    wc_maps = st.system_requests;
    wc_peak_held = st.bytes_held;
    brisk_stack_destroy(w);
  }

  double stack_med = bench_median(stack_ns, reps);
  double malloc_med = bench_median(malloc_ns, reps);
  double ratio = malloc_med / stack_med;
  double floor_med = bench_median(floor_ns, reps);
  double wc_med = bench_median(wc_ms, reps);
  double wc_mib = (double)wc_bytes / (1024.0 * 1024.0);

  printf("### stack\n\n");
  printf("Frame allocator (seed 002), medians of %d runs; the machine is shared, "
         "so expect noise.\n\n",
         reps);
  printf("| scenario | brisk_stack | malloc/free | ratio | target |\n");
  printf("| --- | ---: | ---: | ---: | --- |\n");
  printf("| recursive, depth %u, %d+%d allocs per call (ns/alloc) | %.2f | %.2f | %.1fx | >= 5x |\n",
         depth, ALLOCS_BEFORE, ALLOCS_AFTER, stack_med, malloc_med, ratio);
  printf("| recursive, harness alone: calls and writes, no allocator (ns/alloc) | %.2f | %.2f | - | - |\n",
         floor_med, floor_med);
  printf("| worst_case(%d): bytes mapped in total | %.2f MiB (%zu system calls) | - | - | <= 7.5 MiB |\n",
         wc_depth, wc_mib, wc_maps);
  printf("| worst_case(%d): time (ms) | %.2f | - | - | - |\n\n", wc_depth, wc_med);

  printf("stack_recursive_ns_per_alloc=%.2f\n", stack_med);
  printf("malloc_recursive_ns_per_alloc=%.2f\n", malloc_med);
  printf("harness_recursive_ns_per_alloc=%.2f\n", floor_med);
  printf("stack_vs_malloc_recursive=%.2f\n", ratio);
  printf("worst_case_system_bytes=%zu\n", wc_bytes);
  printf("worst_case_system_mib=%.2f\n", wc_mib);
  printf("worst_case_system_requests=%zu\n", wc_maps);
  printf("worst_case_bytes_held_at_end=%zu\n", wc_peak_held);
  printf("worst_case_ms=%.2f\n", wc_med);
  int ok = wc_bytes <= (size_t)(7.5 * 1024 * 1024);
  if (!ok) fprintf(stderr, "region_stack: worst_case mapped %.2f MiB (> 7.5 MiB)\n", wc_mib);
  printf("status=%s\n", ok ? "ok" : "fail");
  return ok ? 0 : 1;
}
