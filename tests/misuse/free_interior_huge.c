/* free(p + 4096) of a live block of 4 MiB. */
#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc(4 << 20);
  misuse_written(p);
  free(misuse_named(p + 4096));
  misuse_returned("free");
  return misuse_finish1(4 << 20);
}
