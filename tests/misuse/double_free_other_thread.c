/* free(p) in the thread that allocated it, then again in another thread. */
#include "misuse.h"

#include <pthread.h>

static void *free_it(void *p) {
  free(opaque(p));
  misuse_returned("free (other thread)");
  return NULL;
}

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  pthread_t thread;
  if (pthread_create(&thread, NULL, free_it, p) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
  return misuse_finish1(64);
}
