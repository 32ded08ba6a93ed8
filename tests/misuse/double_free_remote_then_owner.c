/* free(p) in another thread, then again in the thread that allocated it,
 * which owns p's page: the reverse of double_free_other_thread. The first
 * free leaves p in the freeing thread's outbox (posted when that thread
 * exits), still counted live on its page; the owner's free then takes its
 * own fast path. The secure build's first free set p's free tag, which the
 * owner's free finds. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  misuse_good_free_in_other_thread(p);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
