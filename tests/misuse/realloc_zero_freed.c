/* realloc(p, 0) of a block already freed, among live blocks of its size:
 * a double free through realloc. The secure build names realloc, the call
 * the program made, from the block's free tag. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  void *q = realloc(misuse_named(p), 0);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(64);
}
