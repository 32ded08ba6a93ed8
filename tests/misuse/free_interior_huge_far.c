/* free(p + 40 MiB) of a live block of 64 MiB: a pointer past the first
 * 32 MiB of the block's mapping, where brisk's map of segments marks
 * nothing (it marks a mapping's first 32 MiB). */
#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc((size_t)64 << 20);
  misuse_written(p);
  free(misuse_named(p + ((size_t)40 << 20)));
  misuse_returned("free");
  return misuse_finish1((size_t)64 << 20);
}
