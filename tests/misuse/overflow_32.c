/* 32 bytes written past the end of a 64-byte block, the block followed by
 * free blocks. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 16);
  unsigned char *p = opaque(malloc(64));
  memset(p + 64, 'A', 32);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
