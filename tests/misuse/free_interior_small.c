/* free(p + 32) of a live 256-byte block among others of its size. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(256, 16);
  unsigned char *p = misuse_malloc(256);
  misuse_neighbours(256, 16);
  misuse_written(p); /* a build that takes p + 32 may write its free list there */
  free(misuse_named(p + 32));
  misuse_returned("free");
  return misuse_finish1(256);
}
