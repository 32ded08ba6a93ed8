/* The whole header of a huge block's mapping overwritten by a write running
 * back from the block (1 KiB of 0x41, the block's size and kind
 * included), then the block handed to realloc: both builds named the
 * pointer "not the start of a block" or "not an allocated block", as if
 * the program had passed a bad one, and with other bytes could go on with
 * a size read from the program's data. */
#include "misuse.h"

#include <string.h>

int main(void) {
  unsigned char *p = misuse_malloc((size_t)1 << 20);
  memset(p - 1024, 0x41, 1024);
  void *q = realloc(misuse_named(p), (size_t)2 << 20);
  (void)q;
  misuse_returned("realloc");
  return misuse_finish1(4096);
}
