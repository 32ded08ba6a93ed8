/* One byte of a freed 48-byte block's first word changed while the secure
 * build holds the block back, then another free on its page lets it go
 * onto malloc's list: the link written then must keep the write, not
 * cover it (the first field of an object just freed, such as a count or a
 * vtable pointer, is the likeliest to be written after free). */
#include "misuse.h"

int main(void) {
  misuse_neighbours(48, 32);
  unsigned char *p = opaque(malloc(48));
  unsigned char *q = opaque(malloc(48));
  misuse_neighbours(48, 32);
  free(p);
  ((unsigned char *)misuse_named(p))[0] ^= 0x10;
  free(q);
  misuse_returned("write after free");
  return misuse_finish1(48);
}
