/* realloc() of a block already freed, to a size its block still holds, p the
 * only live block of its size class: kept in place, the block would be
 * handed out again by the next malloc of its size while the program uses it
 * as realloc's result. The page's count of live blocks shows it. */
#include "misuse.h"

int main(void) {
  void *p = opaque(malloc(100));
  free(p);
  void *q = realloc(misuse_named(p), 100);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(100);
}
