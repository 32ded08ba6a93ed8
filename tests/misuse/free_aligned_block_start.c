/* free(p - 16), p from memalign(16, 8): code that takes a 16-byte header
 * before every block for granted. The secure build hands the request out
 * 16 bytes into its block (its canary stays off the block's free tag), so
 * p - 16 is that block's start, which it must not free; in the release
 * build p is a plain 16-byte block and p - 16 the start of the block before
 * it, which the program holds: a free of another live block, which no
 * allocator can tell from a right one. */
#include <malloc.h>

#include "misuse.h"

int main(void) {
  misuse_neighbours(8, 16);
  unsigned char *p = opaque(memalign(16, 8));
  misuse_neighbours(8, 16);
  free(misuse_named(p - 16));
  misuse_returned("free");
  return misuse_finish1(8);
}
