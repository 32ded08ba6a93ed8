/* free(p) twice, p a block of 100 KB (a large page's: 64-512 KiB), other
 * blocks of its page live: the release build's block cache still holds p at
 * the second free. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(100000, 4);
  void *p = opaque(malloc(100000));
  misuse_neighbours(100000, 4);
  free(p);
  free(opaque(p));
  misuse_returned("free");
  return misuse_finish1(100000);
}
