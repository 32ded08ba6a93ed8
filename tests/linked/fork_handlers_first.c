/* fork() with a library's allocating fork handlers registered before
 * brisk's (fork_handlers_lib.c), while two threads allocate and free:
 * each fork returns in the parent and in the child, whose allocations work.
 * brisk's locks, held by its prepare handler, are the forking thread's
 * own in the handlers around it (heap.c: in_fork_handlers); the process
 * hung on them. alarm() turns a hang into a failure. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_bool stop;

static void *allocate_until_stopped(void *arg) {
  unsigned seed = (unsigned)(size_t)arg;
  void *held[64] = {0};
  while (!atomic_load(&stop)) {
    seed = seed * 1103515245u + 12345u;
    size_t i = (seed >> 8) % 64;
    free(held[i]);
    held[i] = malloc(16 + (seed >> 12) % 200000);
    if (held[i] == NULL) abort();
  }
  for (size_t i = 0; i < 64; i++) free(held[i]);
  return NULL;
}

int main(void) {
  alarm(60);
  pthread_t threads[2];
  for (size_t i = 0; i < 2; i++) pthread_create(&threads[i], NULL, allocate_until_stopped, (void *)(i + 1));
  for (int round = 0; round < 20; round++) {
    char *p = malloc(1000);
    strcpy(p, "parent block");
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      char *q = malloc((size_t)2 << 20);
      int ok = q != NULL && strcmp(p, "parent block") == 0;
      free(q);
      free(p);
      _exit(ok ? 0 : 1);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("round %d: the child failed (status %d)\n", round, status);
      return 1;
    }
    free(p);
  }
  atomic_store(&stop, true);
  for (size_t i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  printf("20 forks with allocating handlers registered before brisk's\n");
  return 0;
}
