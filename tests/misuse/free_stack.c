/* free() of an array on the stack. */
#include "misuse.h"

int main(void) {
  char local[64];
  memset(local, 1, sizeof local);
  free(misuse_named(local));
  misuse_returned("free");
  return misuse_finish1(64);
}
