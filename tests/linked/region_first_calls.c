/*
 * region_first_calls: the bounded allocators' promises about the calls
 * after create, checked on the first calls of a process and of its threads.
 *
 * 1. No system call: a hybrid (the default config with
 *    BRISK_REGION_PREFAULT) and a pool with per-thread caches are created,
 *    then this thread enters seccomp's strict mode (read, write, exit and
 *    sigreturn only; any other system call kills the process with SIGKILL)
 *    and makes the process's first allocations and frees from both.
 *    Strict mode filters the calling thread only (and a refused call ends
 *    that thread alone), so that part runs in a thread of its own and
 *    reports back through a pipe.
 * 2. No page fault: threads that each hold a thread slot at once make
 *    their first allocation and free from a hybrid created with
 *    BRISK_REGION_PREFAULT; none of them may take a page fault in them
 *    (getrusage's minor faults of the thread).
 *
 * A fresh process, since the slots' one-time set-up is process-wide.
 * Prints "ok" and exits 0, or says what failed and exits 1.
 */
#define _GNU_SOURCE
#include <brisk.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define THREADS 8

static brisk_hybrid_t *hybrid;
static brisk_pool_t *pool;
static int report[2];

static void *strict_first_calls(void *arg) {
  (void)arg;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) {
    perror("region_first_calls: prctl(PR_SET_SECCOMP)");
    return (void *)1;
  }
  char ok = 1;
  for (size_t size = 8; size <= 65536; size *= 2) {
    void *p = brisk_hybrid_alloc(hybrid, size, 0);
    if (p == NULL) ok = 0;
    memset(p, 1, size);
    brisk_hybrid_free(hybrid, p);
  }
  void *object = brisk_pool_alloc(pool);
  if (object == NULL) ok = 0;
  brisk_pool_free(pool, object);
  /* write and exit are what strict mode allows: the answer, then this
   * thread's end (not pthread's, which may call other things). */
  if (write(report[1], &ok, 1) != 1) ok = 0;
  syscall(SYS_exit, 0);
  return NULL;
}

static pthread_barrier_t all_have_slots;
static long faults[THREADS];

static void *first_call_faults(void *arg) {
  size_t i = (size_t)arg;
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  void *p = brisk_hybrid_alloc(hybrid, 64 + i, 0);
  brisk_hybrid_free(hybrid, p);
  getrusage(RUSAGE_THREAD, &after);
  faults[i] = after.ru_minflt - before.ru_minflt;
  /* Every thread keeps its slot until all have measured. */
  pthread_barrier_wait(&all_have_slots);
  return NULL;
}

int main(void) {
  brisk_hybrid_config_t config;
  brisk_hybrid_default_config(&config);
  config.region_sizes[0] = 4 << 20;
  config.flags |= BRISK_REGION_PREFAULT;
  hybrid = brisk_hybrid_create(&config);
  pool = brisk_pool_create_ex(48, 16, 1024, BRISK_REGION_THREAD_CACHE | BRISK_REGION_PREFAULT);
  if (hybrid == NULL || pool == NULL || pipe(report) != 0) {
    perror("region_first_calls: create");
    return 1;
  }
  pthread_t thread;
  if (pthread_create(&thread, NULL, strict_first_calls, NULL) != 0) return 1;
  /* A system call strict mode refuses ends the thread (SIGKILL) before it
   * writes its answer: join, then read what it wrote, if anything. */
  pthread_join(thread, NULL);
  close(report[1]);
  char ok = 0;
  if (read(report[0], &ok, 1) != 1 || !ok) {
    fprintf(stderr, "region_first_calls: the first allocations made a system call (or failed)\n");
    return 1;
  }

  int failed = 0;
  pthread_barrier_init(&all_have_slots, NULL, THREADS);
  pthread_t threads[THREADS];
  for (size_t i = 0; i < THREADS; i++)
    pthread_create(&threads[i], NULL, first_call_faults, (void *)i);
  for (size_t i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  for (size_t i = 0; i < THREADS; i++) {
    if (faults[i] != 0) {
      fprintf(stderr, "region_first_calls: thread %zu took %ld page faults in its first calls\n",
              i, faults[i]);
      failed = 1;
    }
  }
  brisk_pool_destroy(pool);
  brisk_hybrid_destroy(hybrid);
  if (!failed) printf("ok\n");
  return failed;
}
