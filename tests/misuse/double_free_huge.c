/* free(p) twice, p a block of 4 MiB (its own mapping). */
#include "misuse.h"

int main(void) {
  void *p = opaque(malloc(4 << 20));
  free(p);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(4 << 20);
}
