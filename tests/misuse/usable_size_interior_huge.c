/* malloc_usable_size(p + 4096), p a live 1 MiB block (its own mapping): a
 * pointer inside a huge block has no usable size of its own (the release
 * build counted from it to the mapping's end, the secure build gave the
 * whole block's requested size, 4096 bytes past its end). */
#include <malloc.h>

#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc((size_t)1 << 20);
  size_t usable = malloc_usable_size(misuse_named(p + 4096));
  misuse_returned("malloc_usable_size");
  (void)usable;
  return misuse_finish1(100);
}
