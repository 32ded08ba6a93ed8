/* One byte written just past the requested size of a huge block (1 MiB + 5
 * bytes), then the block grown by realloc, which resizes a huge block in
 * its own mapping: the secure build must check the canary before the
 * resize writes a new one at the new size. */
#include "misuse.h"

int main(void) {
  size_t size = ((size_t)1 << 20) + 5;
  unsigned char *p = opaque(malloc(size));
  if (p == NULL) misuse_fail("malloc", NULL);
  p[size] = 0;
  p = opaque(realloc(misuse_named(p), 2 * size));
  misuse_returned("realloc");
  if (p == NULL) misuse_fail("realloc", NULL);
  free(p);
  return misuse_finish1(4096);
}
