/* free(p + 16) of a live 48-byte block, from a thread that did not allocate it. */
#include "misuse.h"

#include <pthread.h>

static void *free_it(void *p) {
  free(opaque(p));
  misuse_returned("free (other thread)");
  return NULL;
}

int main(void) {
  misuse_neighbours(48, 16);
  unsigned char *p = misuse_malloc(48);
  misuse_neighbours(48, 16);
  misuse_written(p);
  pthread_t thread;
  if (pthread_create(&thread, NULL, free_it, p + 16) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
  return misuse_finish1(48);
}
