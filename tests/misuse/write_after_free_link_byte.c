/* One byte of a freed 64-byte block's first word changed (its free-list
 * link in both builds): the secure build's link decodes far from its
 * segment. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  unsigned char *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  ((unsigned char *)misuse_named(p))[1] ^= 0x10;
  misuse_returned("write after free");
  return misuse_finish1(64);
}
