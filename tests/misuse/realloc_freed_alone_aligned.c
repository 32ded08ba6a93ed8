/* realloc() of an aligned block already freed, to the size it was asked
 * for, p the only live block of its page: realloc's path for pages of
 * aligned blocks checks the page's count as the plain path does. */
#include "misuse.h"

int main(void) {
  void *p = opaque(aligned_alloc(4096, 20000));
  free(p);
  void *q = realloc(misuse_named(p), 20000);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(20000);
}
