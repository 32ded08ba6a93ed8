/* A 64-byte block freed by another thread after that thread's brisk exit
 * handler ran (a thread-key destructor of the program's, run after brisk's),
 * so that it has no batch left and posts the block alone to its owner's
 * queue, linked through its first word; it then writes that word. The
 * secure build stores the link encoded and checks it when the owner drains
 * its queue (its next slow malloc). */
#include "misuse.h"

static void *block;

static MISUSE_NOINLINE void late_free(void) {
  free(opaque(block));
  memset(misuse_named(block), 0x41, 8);
  misuse_returned("write after free (link of a block posted alone)");
}

int main(void) {
  misuse_neighbours(64, 16); /* brisk's thread key is made by the first malloc */
  block = opaque(malloc(64));
  misuse_after_exit_handler(late_free);
  return misuse_finish1(64);
}
