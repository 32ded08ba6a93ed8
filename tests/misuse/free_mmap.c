/* free() of memory the program mapped itself. */
#include "misuse.h"

#include <sys/mman.h>

int main(void) {
  void *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) misuse_fail("mmap", NULL);
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(64);
}
