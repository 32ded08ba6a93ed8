/* free(p + 16) of a live 48-byte block, from a thread that did not allocate it. */
#include "misuse.h"

int main(void) {
  misuse_neighbours(48, 16);
  unsigned char *p = misuse_malloc(48);
  misuse_neighbours(48, 16);
  misuse_written(p);
  misuse_free_in_other_thread(p + 16);
  return misuse_finish1(48);
}
