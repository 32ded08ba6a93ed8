/* realloc() of a block already freed to a size of another class, p the only
 * live block of its size class: caught before a new block is taken and the
 * freed one copied, and named for realloc, the call the program made (it
 * was named for the free inside realloc). */
#include "misuse.h"

int main(void) {
  void *p = opaque(malloc(100));
  free(p);
  void *q = realloc(misuse_named(p), 200);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(100);
}
