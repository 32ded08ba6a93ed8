/* One NUL byte written past the end of a 64-byte block (a string one byte
 * too long), the block followed by free blocks. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 16);
  unsigned char *p = opaque(malloc(64));
  p[64] = 0;
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
