/* free() of an address 64 bytes into the 32 MiB segment that holds a live
 * block: the segment's header, brisk's own metadata, which no block ever
 * lies in. The thread that owns the segment frees it (the release build's
 * fast path takes the header page's descriptor for a page's). */
#include "misuse.h"

int main(void) {
  misuse_neighbours(100, 16);
  unsigned char *p = misuse_malloc(100);
  uintptr_t segment = (uintptr_t)p & ~MISUSE_SEGMENT_MASK;
  free(misuse_named((void *)(segment + 64)));
  misuse_returned("free");
  return misuse_finish1(100);
}
