/* free_sized (C23) of a pointer 16 bytes inside a live 64-byte block, with
 * a size that fits what lies past it: the lookup of the block's size finds
 * the pointer is no block's start, and the message names free_sized, the
 * call the program made. */
#define _GNU_SOURCE
#include "misuse.h"

#include <dlfcn.h>

int main(void) {
  void (*free_sized_fn)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  if (free_sized_fn == NULL) misuse_fail("free_sized is not defined", NULL);
  misuse_neighbours(64, 32);
  unsigned char *p = misuse_malloc(64);
  misuse_neighbours(64, 32);
  free_sized_fn(misuse_named(p + 16), 8);
  misuse_returned("free_sized");
  return misuse_finish1(64);
}
