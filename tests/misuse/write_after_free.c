/* A freed 64-byte block written whole. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  unsigned char *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  memset(misuse_named(p), 'A', 64);
  misuse_returned("write after free");
  return misuse_finish1(64);
}
