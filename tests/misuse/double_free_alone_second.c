/* free(q), free(p), free(p): p and q the only live blocks of their size
 * class, q handed out first, so that p is not the start of its page. The
 * page's count of live blocks shows the second free of p, which the line
 * names (it named the page's start). */
#include "misuse.h"

int main(void) {
  void *q = opaque(malloc(200));
  void *p = opaque(malloc(200));
  free(q);
  free(p);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(200);
}
