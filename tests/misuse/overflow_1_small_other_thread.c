/* One NUL byte written past the end of a 12-byte block, which another
 * thread then frees. In the secure build the canary of so small a block
 * shares a word with the free tag that free sets: the freeing thread checks
 * it before. In the release build the byte is in the block's own slack. */
#include "misuse.h"

#include <pthread.h>

static void *free_it(void *p) {
  free(opaque(p));
  misuse_returned("free (other thread)");
  return NULL;
}

int main(void) {
  misuse_neighbours(12, 16);
  unsigned char *p = opaque(malloc(12));
  p[12] = 0;
  pthread_t thread;
  if (pthread_create(&thread, NULL, free_it, p) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
  return misuse_finish1(12);
}
