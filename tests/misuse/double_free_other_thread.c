/* free(p) in the thread that allocated it, then again in another thread. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free(p);
  misuse_free_in_other_thread(p);
  return misuse_finish1(64);
}
