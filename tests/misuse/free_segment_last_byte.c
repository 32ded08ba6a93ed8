/* free() of the last byte of the 32 MiB segment that holds a small block:
 * no block starts there, and a block there would run past the segment.
 * The release build's free pushes the pointer onto its page's list (an
 * 8-byte write at it) before it tests whether a block starts there, so the
 * write reached past the segment, into whatever the kernel had mapped
 * there or nothing (SIGSEGV without a message). */
#include "misuse.h"

int main(void) {
  misuse_neighbours(100, 16);
  uintptr_t block = (uintptr_t)opaque(malloc(100));
  uintptr_t last_byte = (block & ~(MISUSE_SEGMENT_SIZE - 1)) + MISUSE_SEGMENT_SIZE - 1;
  free(misuse_named((void *)last_byte));
  misuse_returned("free");
  return misuse_finish1(100);
}
