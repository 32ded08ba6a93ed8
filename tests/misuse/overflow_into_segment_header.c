/* A linear overflow out of the mapping just below a segment into the
 * segment's header (brisk's 32 MiB-aligned mappings of size-class pages
 * start with it), from the segment of a 64-byte block: misuse.h's
 * misuse_overflow_from_below. */
#define _GNU_SOURCE
#include "misuse.h"

int main(void) {
  unsigned char *p = opaque(malloc(64));
  if (p == NULL) misuse_fail("malloc", NULL);
  misuse_overflow_from_below((unsigned char *)((uintptr_t)p & ~(MISUSE_SEGMENT_SIZE - 1)));
  misuse_returned("the write");
  free(p);
  return 0;
}
