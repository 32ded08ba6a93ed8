/* One NUL byte written past the end of a 64-byte block, which another
 * thread then frees. The secure build checks the canary when the block
 * comes back to the thread that allocated it (its next slow malloc drains
 * the remote frees), before the block can be handed out again. */
#include "misuse.h"

#include <pthread.h>

static void *free_it(void *p) {
  free(opaque(p));
  misuse_returned("free (other thread)");
  return NULL;
}

int main(void) {
  misuse_neighbours(64, 16);
  unsigned char *p = opaque(malloc(64));
  p[64] = 0;
  pthread_t thread;
  if (pthread_create(&thread, NULL, free_it, p) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
  return misuse_finish1(64);
}
