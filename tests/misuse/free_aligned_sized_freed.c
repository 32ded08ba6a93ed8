/* free_aligned_sized (C23) of a block aligned_alloc(64, 128) handed out,
 * after free() already freed it, among live blocks of its size. The secure
 * build finds the block's free tag set while it looks its size up, and
 * names free_aligned_sized, the call the program made. */
#define _GNU_SOURCE
#include "misuse.h"

#include <dlfcn.h>

int main(void) {
  void (*free_aligned_sized_fn)(void *, size_t, size_t) =
      (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
  if (free_aligned_sized_fn == NULL) misuse_fail("free_aligned_sized is not defined", NULL);
  misuse_neighbours(128, 32);
  void *p = opaque(aligned_alloc(64, 128));
  misuse_neighbours(128, 32);
  free(p);
  free_aligned_sized_fn(misuse_named(p), 64, 128);
  misuse_returned("free_aligned_sized");
  return misuse_finish1(128);
}
