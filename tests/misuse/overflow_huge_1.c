/* One byte written just past the requested size of a huge block (1 MiB + 5
 * bytes, its own mapping), then the block freed: the byte lands in the
 * mapping's slack, never in another block, unless a canary stands there. */
#include "misuse.h"

int main(void) {
  size_t size = ((size_t)1 << 20) + 5;
  unsigned char *p = opaque(malloc(size));
  if (p == NULL) misuse_fail("malloc", NULL);
  p[size] = 0;
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(4096);
}
