/*
 * hybrid_inline: <brisk/hybrid.h>'s inline alloc and free in a program
 * linked against libbrisk.so (hybrid_inline_shared) or libbrisk.a
 * (hybrid_inline_static). The inline paths read the library's exported
 * initial-exec thread-local brisk_thread_slot_line_: each thread checks
 * that the word it reads is the one the library set when it gave the
 * thread a slot (nonzero after its first allocation; a copy of its own
 * would stay 0 and send every call out of line), that a freed block is the
 * next one of its size (the thread's list), and the totals are exact at
 * the end. Prints "ok" and exits 0, or says what failed and exits 1.
 */
#include <brisk/hybrid.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define THREADS 4
#define BLOCKS 300
#define ROUNDS 20

static brisk_hybrid_t *hybrid;

static void *worker(void *arg) {
  unsigned seed = (unsigned)(size_t)arg * 2654435761u + 1;
  void *blocks[BLOCKS];
  void *p = brisk_hybrid_alloc(hybrid, 100, 0);
  if (p == NULL || brisk_thread_slot_line_ == 0) {
    fprintf(stderr, "hybrid_inline: slot line %u after the first allocation\n",
            (unsigned)brisk_thread_slot_line_);
    return (void *)1;
  }
  brisk_hybrid_free(hybrid, p);
  if (brisk_hybrid_alloc(hybrid, 100, 0) != p) {
    fputs("hybrid_inline: a freed block is not the next one of its size\n", stderr);
    return (void *)1;
  }
  brisk_hybrid_free(hybrid, p);
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < BLOCKS; i++) {
      seed = seed * 1103515245u + 12345u;
      size_t size = 16 + (seed >> 8) % 2000;
      blocks[i] = brisk_hybrid_alloc(hybrid, size, 0);
      if (blocks[i] == NULL) {
        fprintf(stderr, "hybrid_inline: brisk_hybrid_alloc(%zu) returned NULL\n", size);
        return (void *)1;
      }
      memset(blocks[i], i, size);
    }
    for (int i = 0; i < BLOCKS; i++) brisk_hybrid_free(hybrid, blocks[i]);
  }
  return NULL;
}

int main(void) {
  hybrid = brisk_hybrid_create(NULL);
  if (hybrid == NULL) {
    perror("hybrid_inline: brisk_hybrid_create");
    return 1;
  }
  pthread_t threads[THREADS];
  for (size_t t = 0; t < THREADS; t++)
    if (pthread_create(&threads[t], NULL, worker, (void *)t) != 0) return 1;
  int failed = 0;
  for (size_t t = 0; t < THREADS; t++) {
    void *result;
    pthread_join(threads[t], &result);
    failed |= result != NULL;
  }
  brisk_region_stats_t totals;
  brisk_hybrid_totals(hybrid, &totals);
  size_t expected = (size_t)THREADS * (2 + BLOCKS * ROUNDS);
  if (!failed && (totals.allocations != expected || totals.bytes_in_use != 0)) {
    fprintf(stderr, "hybrid_inline: %zu allocations (expected %zu), %zu bytes in use\n",
            totals.allocations, expected, totals.bytes_in_use);
    failed = 1;
  }
  brisk_hybrid_destroy(hybrid);
  if (!failed) puts("ok");
  return failed;
}
