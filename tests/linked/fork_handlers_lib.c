/* A library whose constructor registers fork handlers that allocate, with
 * no malloc before: linked after brisk, its constructor runs before brisk's,
 * so its handlers are registered first; pthread_atfork then runs its
 * prepare handler after brisk's (which holds brisk's locks) and its parent
 * and child handlers before brisk's. Each allocates sizes that take
 * brisk's slow paths (a new page of a large class, a huge block). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *kept;

static void churn(size_t size) {
  char *p = malloc(size);
  if (p == NULL) abort();
  memset(p, 0x5a, size);
  free(p);
}

static void prepare(void) {
  kept = malloc(100000);
  churn(40);
  churn((size_t)3 << 20);
}

static void parent(void) {
  free(kept);
  churn(300000);
}

static void child(void) {
  free(kept);
  churn(300000);
  churn((size_t)5 << 20);
}

__attribute__((constructor)) static void fork_handlers_lib_init(void) {
  static const char line[] = "fork_handlers_lib: constructor\n";
  (void)!write(2, line, sizeof line - 1);
  pthread_atfork(prepare, parent, child);
}
