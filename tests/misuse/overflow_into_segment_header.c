/* A linear overflow out of the mapping just below a segment into the
 * segment's header (brisk's 32 MiB-aligned mappings of size-class pages
 * start with it): a page of the program's own is mapped just below the
 * segment of a small block where the address is free (any mapping may lie
 * there), and its last 16 bytes and the header's first 16 are written, the
 * header's with the bytes it holds, so that a build without a guard page
 * there returns with its header as it was. */
#define _GNU_SOURCE
#include "misuse.h"

#include <sys/mman.h>

#define SEGMENT_SIZE ((uintptr_t)32 << 20)

int main(void) {
  unsigned char *p = opaque(malloc(64));
  if (p == NULL) misuse_fail("malloc", NULL);
  unsigned char *header = (unsigned char *)((uintptr_t)p & ~(SEGMENT_SIZE - 1));
  void *mine = mmap(header - 4096, 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (mine != MAP_FAILED && mine != header - 4096) munmap(mine, 4096); /* a kernel without NOREPLACE */
  volatile unsigned char *bytes = opaque(header - 16);
  for (int i = 0; i < 32; i++) bytes[i] = i < 16 ? 0x5a : bytes[i];
  misuse_returned("the write");
  free(p);
  return 0;
}
