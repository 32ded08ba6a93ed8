/* realloc grows a huge block where its mapping cannot grow in place (a page
 * of the program's own mapped a little past the block's end), so the block
 * moves; then the old pointer is freed: a double free of a block whose
 * mapping went away. */
#define _GNU_SOURCE
#include "misuse.h"

int main(void) {
  size_t size = 2 << 20, page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char *p = opaque(malloc(size));
  /* The first free page past the block's mapping. */
  uintptr_t at = ((uintptr_t)p + size + page - 1) & ~(uintptr_t)(page - 1);
  void *mine = MAP_FAILED;
  for (int i = 0; i < 1024 && mine == MAP_FAILED; i++, at += page) {
    mine = mmap((void *)at, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                -1, 0);
    if (mine != MAP_FAILED && mine != (void *)at) { /* a kernel without NOREPLACE */
      munmap(mine, page);
      mine = MAP_FAILED;
    }
  }
  unsigned char *q = opaque(realloc(p, 16 * size));
  if (q == NULL) misuse_fail("realloc returned NULL", NULL);
  if (q == p) misuse_fail("the block did not move", p);
  free(misuse_named(p));
  misuse_returned("free");
  return 0;
}
