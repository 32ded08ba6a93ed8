/* realloc(p + 16, 0), p a live 64-byte block: realloc with size 0 frees,
 * after the checks every realloc makes of its pointer, named for realloc. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(64, 32);
  unsigned char *p = misuse_malloc(64);
  misuse_neighbours(64, 32);
  void *q = realloc(misuse_named(p + 16), 0);
  misuse_returned("realloc");
  opaque(q);
  return misuse_finish1(64);
}
