/* One byte written just before a 64-byte block: the secure build's header
 * of the block (the requested size, encoded) is there. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 16);
  unsigned char *p = opaque(malloc(64));
  misuse_neighbours(64, 16);
  misuse_written(p - 1);
  p[-1] ^= 1;
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
