/* malloc_usable_size of the address 8 bytes into a 64 KiB page of aligned
 * blocks (memalign(256, 100)). In the secure build that address is in the
 * page's lead, before its first block, where finding "the block that holds
 * it" from a 32-bit offset that wrapped below the page's start would point
 * gigabytes away; in the release build it is inside the page's first
 * block, a plain 256-byte one. */
#include <malloc.h>
#include <stdint.h>

#include "misuse.h"

int main(void) {
  misuse_neighbours(100, 8);
  uintptr_t any = 0;
  for (int i = 0; i < 8; i++) any = (uintptr_t)opaque(memalign(256, 100)); /* kept */
  size_t usable = malloc_usable_size(misuse_named((void *)((any & ~(uintptr_t)0xffff) + 8)));
  misuse_returned("malloc_usable_size");
  (void)usable;
  return misuse_finish1(100);
}
