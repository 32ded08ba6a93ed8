/* One NUL byte written past the end of a 12-byte block, which another
 * thread then frees. In the secure build the canary of so small a block
 * shares a word with the free tag that free sets: the freeing thread checks
 * it before. In the release build the byte is in the block's own slack. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(12, 16);
  unsigned char *p = opaque(malloc(12));
  p[12] = 0;
  misuse_free_in_other_thread(p);
  return misuse_finish1(12);
}
