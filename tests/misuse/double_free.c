/* free(p) twice in a row, p one of many live blocks of its size. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
