/*
 * stats_program: a small workload for the statistics-file test. Two threads
 * allocate and free for a while (both alive at once), then the process
 * forks; the child allocates a little and exits, the parent waits for it
 * and exits. Prints "threads=2 child=<pid>". Not linked to brisk.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Grows a working set to about `bytes`, then frees it, for `seconds`. */
static void churn(size_t bytes, double seconds) {
  enum { SLOTS = 4096 };
  static __thread void *slots[SLOTS];
  double end = now_s() + seconds;
  unsigned x = 12345;
  size_t held = 0;
  while (now_s() < end) {
    for (int i = 0; i < 1000; i++) {
      x = x * 1103515245u + 12345u;
      unsigned slot = (x >> 8) % SLOTS;
      if (slots[slot] != NULL) {
        free(slots[slot]);
        slots[slot] = NULL;
      } else if (held < bytes) {
        size_t size = 16 + (x >> 20) % 4000;
        slots[slot] = malloc(size);
        memset(slots[slot], 1, size);
      }
    }
  }
  for (int i = 0; i < SLOTS; i++) {
    free(slots[i]);
    slots[i] = NULL;
  }
  (void)held;
}

static void *worker(void *arg) {
  churn((size_t)8 << 20, *(double *)arg);
  return NULL;
}

int main(void) {
  double seconds = 0.3;
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, worker, &seconds);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    churn((size_t)2 << 20, 0.1);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("threads=2 child=%d\n", (int)child);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
