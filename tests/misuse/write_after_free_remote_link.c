/* A 64-byte block freed by another thread that has a heap of its own, so
 * that the free waits in that thread's batch for the owner (sent at its
 * exit), and then its first 8 bytes written: the word that becomes the
 * block's free-list link when the owner takes it back. The secure build's
 * remote free stores the block's link to nothing there, and the owner's
 * drain checks it before the block goes back on a free list. */
#include "misuse.h"

static MISUSE_NOINLINE void *free_from_a_heap(void *p) {
  free(opaque(malloc(8))); /* a heap of its own: frees for other heaps go in batches */
  free(opaque(p));
  return NULL;
}

int main(void) {
  misuse_neighbours(64, 16);
  unsigned char *p = opaque(malloc(64));
  misuse_run_in_thread(free_from_a_heap, p);
  memset(misuse_named(p), 0x41, 8);
  misuse_returned("write after free (first word of a block another thread freed)");
  return misuse_finish1(64);
}
