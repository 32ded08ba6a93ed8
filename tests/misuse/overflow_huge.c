/* One byte written at the first page boundary at or after the end of what
 * malloc_usable_size says of a block of 4 MiB (its own mapping): the first
 * byte after the mapping's usable end (in the secure build the usable size
 * is the requested size, followed by the canary in the block's last page).
 * A page of the program's own is mapped there first (misuse_map_own_page),
 * so that without a guard page the write lands in memory and returns. */
#define _GNU_SOURCE
#include "misuse.h"

#include <malloc.h>

int main(void) {
  unsigned char *p = opaque(malloc(4 << 20));
  if (p == NULL) misuse_fail("malloc", NULL);
  unsigned char *end = (unsigned char *)(((uintptr_t)p + malloc_usable_size(p) + 4095) & ~(uintptr_t)4095);
  misuse_map_own_page(end);
  *(volatile unsigned char *)end = 0;
  misuse_returned("the write");
  return 0;
}
