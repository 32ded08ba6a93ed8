/* free(p) twice in a row, p the only live block of its size class. */
#include "misuse.h"

int main(void) {
  void *p = opaque(malloc(200));
  free(p);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(200);
}
