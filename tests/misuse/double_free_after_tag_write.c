/* free(p), then a write into p's second word (a count decremented on a
 * freed object), then free(p) again: the secure build's free tag is gone,
 * and the second free must be named by what the first left in p's header. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  long *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  ((volatile long *)opaque(p))[1]--;
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
