/* One byte written past the requested size, inside the block's size class
 * (malloc(100) is served from 112-byte blocks). */
#include "misuse.h"

int main(void) {
  misuse_neighbours(100, 16);
  unsigned char *p = opaque(malloc(100));
  misuse_neighbours(100, 16);
  p[100] = 0;
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(100);
}
