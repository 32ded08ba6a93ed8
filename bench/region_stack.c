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
 * reported: the machine is shared, single runs are noisy.
 *
 * Before them, the stack as a user calls it (region_user.h): recursive
 * frames. A call pushes a frame, makes 8 allocations, calls itself twice
 * (down to USER_DEPTH), makes one more allocation and pops; malloc: the
 * same 9 blocks, freed before the call returns. Every block is written
 * whole. A trial creates a stack, makes USER_CALLS such calls from the top
 * and destroys the stack.
 *
 * Usage: region_stack [--quick] [--reps N] [--user | --seed]
 * Output: Markdown tables under "### stack", then key=value lines, then
 * status=ok.
 */
#define _GNU_SOURCE
#include <brisk.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/regions/stack.h"
#include "bench_common.h"
#include "region_user.h"

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

/* ---- As a user calls it (region_user.h) ---- */

#define USER_DEPTH 10  /* 2^11 - 1 frames per call from the top */
#define USER_BEFORE 8  /* allocations before the two calls */

/* Each allocation site asks for a size of its own, known where it is
 * written (a program allocates its structs and buffers by sizeof): the
 * sizes of the 8 sites before the calls, then the one after. */
#define USER_SITES(X) X(0, 24) X(1, 40) X(2, 16) X(3, 96) X(4, 64) X(5, 200) X(6, 32) X(7, 120)
#define USER_LAST_SIZE 48
#define USER_SITE_BYTES (24 + 40 + 16 + 96 + 64 + 200 + 32 + 120 + USER_LAST_SIZE)

static __attribute__((noinline)) void user_failed(size_t size) {
  fprintf(stderr, "region_stack: allocation of %zu bytes failed\n", size);
  exit(1);
}

static __attribute__((noinline)) void user_frames_stack(brisk_stack_t *s, unsigned depth) {
  BRISK_STACK_SCOPE(s);
#define STACK_SITE(k, size)                                  \
  {                                                          \
    void *p = brisk_stack_alloc(s, size, 0);                 \
    if (BRISK_UNLIKELY_(p == NULL)) user_failed(size);       \
    user_write(p, size, k);                                  \
  }
  USER_SITES(STACK_SITE)
  if (depth > 0) {
    user_frames_stack(s, depth - 1);
    user_frames_stack(s, depth - 1);
  }
  STACK_SITE(USER_BEFORE, USER_LAST_SIZE)
#undef STACK_SITE
}

static __attribute__((noinline)) void user_frames_malloc(unsigned depth) {
  void *mine[USER_BEFORE + 1];
#define MALLOC_SITE(k, size)                                 \
  {                                                          \
    mine[k] = malloc(size);                                  \
    if (BRISK_UNLIKELY_(mine[k] == NULL)) user_failed(size); \
    user_write(mine[k], size, k);                            \
  }
  USER_SITES(MALLOC_SITE)
  if (depth > 0) {
    user_frames_malloc(depth - 1);
    user_frames_malloc(depth - 1);
  }
  MALLOC_SITE(USER_BEFORE, USER_LAST_SIZE)
#undef MALLOC_SITE
  for (unsigned k = 0; k <= USER_BEFORE; k++) free(mine[k]);
}

/* The harness alone: the same calls and writes, bumping a static buffer. */
static __attribute__((noinline)) void user_frames_floor(unsigned depth) {
  size_t saved = floor_offset;
#define FLOOR_SITE(k, size)                                  \
  {                                                          \
    void *p = floor_buffer + floor_offset;                   \
    floor_offset += ((size) + 15) & ~(size_t)15;             \
    user_write(p, size, k);                                  \
  }
  USER_SITES(FLOOR_SITE)
  if (depth > 0) {
    user_frames_floor(depth - 1);
    user_frames_floor(depth - 1);
  }
  FLOOR_SITE(USER_BEFORE, USER_LAST_SIZE)
#undef FLOOR_SITE
  floor_offset = saved;
}

static double user_trial(void *arg, int kind) {
  long calls = *(const long *)arg;
  double start = now_s();
  if (kind == 1) {
    for (long i = 0; i < calls; i++) user_frames_malloc(USER_DEPTH);
    return now_s() - start;
  }
  if (kind == 2) {
    for (long i = 0; i < calls; i++) user_frames_floor(USER_DEPTH);
    return now_s() - start;
  }
  brisk_stack_t *s = brisk_stack_create(0);
  if (s == NULL) return -1;
  for (long i = 0; i < calls; i++) user_frames_stack(s, USER_DEPTH);
  brisk_stack_destroy(s);
  return now_s() - start;
}

/* callgrind units (region_user.h): n calls from the top. */
static int user_units(const char *kind, size_t n) {
  if (strcmp(kind, "floor") == 0) {
    for (size_t i = 0; i < n; i++) user_frames_floor(USER_DEPTH);
  } else if (strcmp(kind, "malloc") == 0) {
    for (size_t i = 0; i < n; i++) user_frames_malloc(USER_DEPTH);
  } else if (strcmp(kind, "stack") == 0) {
    brisk_stack_t *s = brisk_stack_create(0);
    if (s == NULL) return 1;
    for (size_t i = 0; i < n; i++) user_frames_stack(s, USER_DEPTH);
    brisk_stack_destroy(s);
  } else {
    return 2;
  }
  return 0;
}

static int user_patterns(long calls, int reps) {
  double s[3];
  if (!user_measure(user_trial, &calls, 3, reps, s)) {
    fprintf(stderr, "region_stack: a user trial failed\n");
    return 0;
  }
  double allocs = (double)calls * (double)((2u << USER_DEPTH) - 1) * (USER_BEFORE + 1);
  printf("#### stack as a user calls it\n\n");
  printf("Recursive frames: push, %d allocations, two calls one level down (depth %d: %u "
         "frames per call from the top), one more allocation, pop; each allocation site asks "
         "for a size of its own (16-200 B, %d B per frame), as a program allocates by sizeof; "
         "malloc: the same blocks, freed before the call returns. Every block written whole. "
         "A trial: a new stack, %ld calls from the top, the stack destroyed. ns per "
         "allocation; medians of %d interleaved trials.\n\n",
         USER_BEFORE, USER_DEPTH, (2u << USER_DEPTH) - 1, USER_SITE_BYTES, calls, reps);
  user_table_head("stack", "malloc/free");
  user_row("recursive frames", s[0], s[1], allocs);
  printf("\nThe harness alone (the same calls and writes, bumping a static buffer): %.2f ns "
         "per allocation.\n", s[2] * 1e9 / allocs);
  printf("\n");
  char harness[64];
  snprintf(harness, sizeof harness, "harness_ns=%.3f", s[2] * 1e9 / allocs);
  user_report_extra("stack_frames", s[0], s[1], allocs, reps, "allocation", harness);
  printf("\n");
  return 1;
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

static void usage(void) {
  fprintf(stderr, "usage: region_stack [--quick] [--reps N] [--user | --seed]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int quick = 0, user = 1, seed = 1, reps_given = 0, status;
  if (user_callgrind_mode(argc, argv, "region_stack", user_units, &status)) return status;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) quick = 1;
    else if (strcmp(argv[i], "--user") == 0) seed = 0;
    else if (strcmp(argv[i], "--seed") == 0) user = 0;
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps_given = (int)bench_parse_uint("region_stack", "--reps", argv[++i]);
    else usage();
  }
  if ((!user && !seed) || reps_given < 0 || reps_given > MAX_REPS) usage();
  int reps = reps_given ? reps_given : quick ? 5 : 7;
  unsigned depth = 64;
  long calls = quick ? 20000 : 100000;
  int wc_depth = 20;
  bench_check_malloc("region_stack");

  printf("### stack\n\n");
  if (user && !user_patterns(quick ? 4 : 64, reps_given ? reps_given : quick ? 3 : 5)) return 1;
  if (!seed) {
    printf("status=ok\n");
    return 0;
  }

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
    /* A fresh stack with nothing kept from the last one (brisk_collect
     * empties the OS layer's cache of mappings), so that every run makes
     * the same system calls. */
    brisk_collect(true);
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

  printf("#### seed 002\n\n");
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
