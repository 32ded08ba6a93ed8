/* free(p) in another thread, then again in the thread that allocated it, p a
 * block of 4 MiB (its own mapping). The other thread's first call is that
 * free, so it has no cache to keep the mapping in: the mapping goes back to
 * the system at once, and the second free finds no segment there. */
#include "misuse.h"

int main(void) {
  void *p = opaque(malloc(4 << 20));
  misuse_good_free_in_other_thread(p);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(4 << 20);
}
