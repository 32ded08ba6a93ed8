/* free(p), a malloc of p's size, then free(p) again: the classic double free
 * that an attacker turns into two owners of one block. p is one of a few
 * live blocks on a page that still has free blocks carved. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 8);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 8);
  free(p);
  misuse_malloc(64);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
