/* free() of the first byte past the last whole block of a 64 KiB page of
 * 100-byte requests: an address no block starts at, though it is a whole
 * number of blocks from the page's first one. A block there would run past
 * the page's end into the next page's first block, so it must not be taken
 * for a block's start (the page's own blocks are all live meanwhile). The
 * program finds the page's blocks (in any order: the secure build hands a
 * fresh page's blocks out shuffled), their size from the closest two, and
 * frees the address one block past the last. */
#include "misuse.h"

#define PAGE_MASK (((uintptr_t)64 << 10) - 1)
#define COUNT 1200

static uintptr_t blocks[COUNT];

int main(void) {
  for (size_t i = 0; i < COUNT; i++) blocks[i] = (uintptr_t)opaque(malloc(100)); /* kept */
  /* A page the middle block's, filled whole: blocks before and after it lie
   * on other pages. */
  uintptr_t page = blocks[COUNT / 2] & ~PAGE_MASK;
  uintptr_t last = 0, size = PAGE_MASK;
  for (size_t i = 0; i < COUNT; i++) {
    if ((blocks[i] & ~PAGE_MASK) != page) continue;
    if (blocks[i] > last) last = blocks[i];
    for (size_t j = 0; j < COUNT; j++) {
      if (blocks[j] > blocks[i] && blocks[j] - blocks[i] < size) size = blocks[j] - blocks[i];
    }
  }
  uintptr_t tail = last + size;
  if (tail + size <= page + PAGE_MASK + 1) misuse_fail("setup: a block fits past the last", (void *)tail);
  if (tail > page + PAGE_MASK) misuse_fail("setup: the page has no tail", (void *)tail);
  free(misuse_named((void *)tail));
  misuse_returned("free");
  return misuse_finish1(100);
}
