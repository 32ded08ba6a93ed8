/* As write_after_free_remote_alone, but two 64-byte blocks are posted alone,
 * the second linked behind the first, and the write puts exactly 0 in the
 * first one's link word: the value that means "not linked yet", which would
 * leave the second block (and every one posted after it) stranded in the
 * queue. The secure build stores "not linked yet" encoded too, so a plain 0
 * is caught when the owner drains its queue. */
#include "misuse.h"

static void *first;
static void *second;

static MISUSE_NOINLINE void late_free(void) {
  free(opaque(first));
  free(opaque(second));
  memset(misuse_named(first), 0, 8);
  misuse_returned("write of 0 after free (link of a block posted alone)");
}

int main(void) {
  misuse_neighbours(64, 16); /* brisk's thread key is made by the first malloc */
  first = opaque(malloc(64));
  second = opaque(malloc(64));
  misuse_after_exit_handler(late_free);
  return misuse_finish1(64);
}
