/*
 * last_thread: a process whose threads all end without exit() must end,
 * whatever brisk runs beside them. Run with brisk preloaded and
 * BRISK_STATS_FILE set (an interval writer thread of brisk's is alive):
 *   1. a thread forks; in the child, that thread (the child's only one of
 *      the program's) returns from its start routine, which ends a process
 *      with status 0 once no other thread runs. The parent waits for the
 *      child with a deadline of 30 s and reports a child that is still
 *      there (kills it, exit 1).
 *   2. main then calls pthread_exit while a worker allocates for a while:
 *      the process must end with status 0 when the worker returns. The test
 *      around it (last_thread.py) gives it a deadline.
 * Prints "child=<pid> exited 0" after step 1. Not linked to brisk.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void churn(int rounds) {
  for (int r = 0; r < rounds; r++) {
    void *blocks[256];
    for (int i = 0; i < 256; i++) {
      blocks[i] = malloc(16 + (size_t)(i * 37 % 3000));
      memset(blocks[i], r, 16);
    }
    for (int i = 0; i < 256; i++) free(blocks[i]);
  }
}

static void *forking_thread(void *result) {
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    churn(100);
    return NULL; /* the child's last program thread ends here */
  }
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (waited_ms >= 30000) {
      fprintf(stderr, "last_thread: child %d still running 30 s after its last thread ended\n",
              (int)child);
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      *(int *)result = 1;
      return NULL;
    }
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "last_thread: child %d ended with status %#x\n", (int)child, status);
    *(int *)result = 1;
    return NULL;
  }
  printf("child=%d exited 0\n", (int)child);
  *(int *)result = 0;
  return NULL;
}

static void *worker(void *unused) {
  (void)unused;
  churn(2000);
  return NULL;
}

int main(void) {
  int result = 1;
  pthread_t thread;
  pthread_create(&thread, NULL, forking_thread, &result);
  pthread_join(thread, NULL);
  if (result != 0) return 1;
  fflush(stdout);
  pthread_create(&thread, NULL, worker, NULL);
  pthread_exit(NULL);
}
