/* A freed 64-byte block's first 16 bytes written, then calloc of its size
 * until the block comes back. calloc takes its own path (it zeroes the
 * block, and may skip fresh memory, which is zero already): the block it
 * takes from a free list must be checked all the same. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  unsigned char *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  memset(misuse_named(p), 'A', 16);
  misuse_returned("write after free");
  for (int i = 0; i < 100; i++) opaque(calloc(1, 64));
  return misuse_finish1(64);
}
