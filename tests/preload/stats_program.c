/*
 * stats_program: a small workload for the statistics-file test. Two threads
 * allocate and free for a while (both alive at once), then the process
 * forks; the child allocates a little and exits, the parent waits for it
 * and exits. Prints "threads=2 child=<pid>". Not linked to brisk.
 *
 * stats_program close-descriptors DIR: as a daemon does at start, closes
 * every descriptor but 0, 1 and 2 (brisk's statistics file among them) and
 * opens DIR/first.txt and DIR/second.txt, which get their numbers back; the
 * same work then, with a line written to each file by the parent before
 * and by the child after the fork. Exits 1 where a write fails (a
 * descriptor closed under it).
 *
 * stats_program close-stderr DIR: the same, but stderr is closed too, and
 * DIR/own.txt, opened first, gets descriptor 2 (a daemon that closes every
 * descriptor and then opens its own files); it gets the same two lines.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
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

/* Opens DIR/NAME for writing, truncated. */
static int open_in(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

static int write_text(int fd, const char *text) {
  return write(fd, text, strlen(text)) == (ssize_t)strlen(text) ? 0 : -1;
}

int main(int argc, char **argv) {
  int files[2] = {-1, -1};
  int own = -1;
  bool close_stderr = argc == 3 && strcmp(argv[1], "close-stderr") == 0;
  if (argc == 3 && (close_stderr || strcmp(argv[1], "close-descriptors") == 0)) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (close_stderr) {
      close(STDERR_FILENO);
      own = open_in(argv[2], "own.txt");
      if (own != STDERR_FILENO || write_text(own, "own: parent\n") != 0) return 1;
    }
    files[0] = open_in(argv[2], "first.txt");
    files[1] = open_in(argv[2], "second.txt");
    if (files[0] < 0 || files[1] < 0 || write_text(files[0], "first: parent\n") != 0 ||
        write_text(files[1], "second: parent\n") != 0) {
      return 1;
    }
  }
  double seconds = 0.3;
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) pthread_create(&threads[i], NULL, worker, &seconds);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    if (files[0] >= 0 && (write_text(files[0], "first: child\n") != 0 ||
                          write_text(files[1], "second: child\n") != 0)) {
      _exit(1);
    }
    if (own >= 0 && write_text(own, "own: child\n") != 0) _exit(1);
    churn((size_t)2 << 20, 0.1);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("threads=2 child=%d\n", (int)child);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
