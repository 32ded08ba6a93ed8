/* free(p + 16), p from aligned_alloc(64, 100). The release build serves
 * the request with a plain 128-byte block (128 is a multiple of 64); the
 * secure build hands out an address inside a larger block, on a page of
 * aligned blocks, where an interior pointer is the block's own: only the
 * address the block was handed out at may free it (its header keeps the
 * offset). */
#include <stdlib.h>

#include "misuse.h"

int main(void) {
  misuse_neighbours(100, 16);
  unsigned char *p = opaque(aligned_alloc(64, 100));
  misuse_neighbours(100, 16);
  free(misuse_named(p + 16));
  misuse_returned("free");
  return misuse_finish1(100);
}
