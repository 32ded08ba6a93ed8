/* As double_free_after_tag_write, both frees in a thread that does not own
 * p: the secure build's owner names the second when it takes the blocks
 * back (the first of the two cleared p's header there). */
#include "misuse.h"

static void *free_write_free(void *arg) {
  long *p = arg;
  free(p);
  ((volatile long *)opaque(p))[1]--;
  free(misuse_named(p));
  misuse_returned("free (other thread)");
  return NULL;
}

int main(void) {
  misuse_neighbours(64, 32);
  long *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  misuse_run_in_thread(free_write_free, p);
  return misuse_finish1(64);
}
