/* One NUL byte written past the end of a 64-byte block, which another
 * thread then frees. The secure build checks the canary when the block
 * comes back to the thread that allocated it (its next slow malloc drains
 * the remote frees), before the block can be handed out again. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 16);
  unsigned char *p = opaque(malloc(64));
  p[64] = 0;
  misuse_free_in_other_thread(p);
  return misuse_finish1(64);
}
