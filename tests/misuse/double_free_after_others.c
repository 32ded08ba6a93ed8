/* free(p), free(q), free(p): the second free of p is not the last free. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  void *q = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  free(q);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
