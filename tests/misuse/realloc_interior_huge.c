/* realloc(p + 4096, 3 MiB), p a live 1 MiB block (its own mapping): a
 * pointer inside a huge block, which realloc must not resize as if the
 * block started there (it returned p + 4096, the mapping grown from the
 * block's start). */
#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc((size_t)1 << 20);
  void *q = realloc(misuse_named(p + 4096), (size_t)3 << 20);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(100);
}
