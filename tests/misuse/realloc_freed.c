/* realloc() of a block already freed, among live blocks of its size. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  void *q = realloc(misuse_named(p), 1000);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(64);
}
