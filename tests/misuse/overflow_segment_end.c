/* A linear overflow that runs off the end of the last page of a segment
 * (brisk's 32 MiB-aligned mappings of size-class pages): 1000-byte blocks
 * are taken until one lies in the segment's last 64 KiB page, then the
 * bytes from its requested end are written up to and including the first
 * byte past the segment. A page of the program's own is mapped there first
 * (misuse_map_own_page), as any mapping may lie next to a segment (the
 * next segment's header, a huge block's): without a guard page the write
 * lands there and returns. */
#define _GNU_SOURCE
#include "misuse.h"

#include <malloc.h>

#define LAST_PAGE ((uintptr_t)64 << 10)

int main(void) {
  unsigned char *p = NULL;
  for (int i = 0; i < 3 * (int)(MISUSE_SEGMENT_SIZE / 1000); i++) {
    p = opaque(malloc(1000));
    if (p == NULL) misuse_fail("malloc", NULL);
    if (((uintptr_t)p & (MISUSE_SEGMENT_SIZE - 1)) >= MISUSE_SEGMENT_SIZE - LAST_PAGE) break;
    p = NULL;
  }
  if (p == NULL) misuse_fail("no block in a segment's last page", NULL);
  unsigned char *segment_end = (unsigned char *)(((uintptr_t)p | (MISUSE_SEGMENT_SIZE - 1)) + 1);
  misuse_map_own_page(segment_end);
  unsigned char *end = p + malloc_usable_size(p);
  memset(end, 0x5a, (size_t)(segment_end + 1 - end));
  misuse_returned("the write");
  return 0;
}
