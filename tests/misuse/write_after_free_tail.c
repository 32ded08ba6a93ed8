/* A freed 64-byte block written past its first 8 bytes. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  unsigned char *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  memset((unsigned char *)misuse_named(p) + 8, 'A', 56);
  misuse_returned("write after free");
  return misuse_finish1(64);
}
