/* realloc(p + 40 MiB, 1 MiB) of a live block of 64 MiB: past the first
 * 32 MiB of the block's mapping (free_interior_huge_far's pointer). */
#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc((size_t)64 << 20);
  void *q = realloc(misuse_named(p + ((size_t)40 << 20)), (size_t)1 << 20);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(100);
}
