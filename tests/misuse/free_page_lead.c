/* free() of the first address of a 64 KiB page of 64-byte requests. In the
 * secure build that address is the page's lead, 16 bytes before its first
 * block (80-byte blocks there: 2^32 - 16 is a multiple of 80, so the
 * block-start test on a 32-bit offset that wrapped below the page's start
 * must not take it for a block); in the release build it is the page's
 * first block, which the program holds (not a misuse there). */
#include <stdint.h>

#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 8);
  uintptr_t first = 0;
  for (int i = 0; i < 4096 && first == 0; i++) {
    uintptr_t p = (uintptr_t)opaque(malloc(64)); /* kept: never freed */
    if ((p & 0xffff) <= 16) first = p;
  }
  if (first == 0) misuse_fail("no block at the start of a page", NULL);
  free(misuse_named((void *)(first & ~(uintptr_t)0xffff)));
  misuse_returned("free");
  return misuse_finish1(64);
}
