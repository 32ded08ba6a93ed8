/* The first word of one freed 64-byte block copied over another's (a
 * well-formed free-list link, of another block): the secure build encodes
 * each link with its own block's secret, so the copy decodes to nothing of
 * the page's. The release build loses the block it skips, no more. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  unsigned char *a = opaque(malloc(64));
  unsigned char *b = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(a);
  free(b);
  memcpy(misuse_named(b), opaque(a), 8);
  misuse_returned("write after free");
  return misuse_finish1(64);
}
