/* free() of a global array. */
#include "misuse.h"

static char global[64];

int main(void) {
  free(misuse_named(global));
  misuse_returned("free");
  return misuse_finish1(64);
}
