/* free(p + 4096) of a live block of 200 KiB. */
#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc(200 << 10);
  misuse_neighbours(200 << 10, 4);
  misuse_written(p);
  free(misuse_named(p + 4096));
  misuse_returned("free");
  return misuse_finish1(200 << 10);
}
