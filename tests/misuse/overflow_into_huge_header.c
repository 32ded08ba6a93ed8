/* A linear overflow out of the mapping just below a block of 4 MiB (its
 * own mapping, 32 MiB-aligned, its header at the start) into that header:
 * misuse.h's misuse_overflow_from_below. */
#define _GNU_SOURCE
#include "misuse.h"

int main(void) {
  unsigned char *p = opaque(malloc(4 << 20));
  if (p == NULL) misuse_fail("malloc", NULL);
  misuse_overflow_from_below((unsigned char *)((uintptr_t)p & ~(MISUSE_SEGMENT_SIZE - 1)));
  misuse_returned("the write");
  free(p);
  return 0;
}
