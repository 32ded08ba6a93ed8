/* free_sized(p, n) (C23) with n larger than p was allocated with. */
#define _GNU_SOURCE
#include "misuse.h"

#include <dlfcn.h>

int main(void) {
  void (*free_sized_fn)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  if (free_sized_fn == NULL) misuse_fail("free_sized is not defined", NULL);
  misuse_neighbours(64, 32);
  void *p = opaque(malloc(64));
  misuse_neighbours(64, 32);
  free_sized_fn(misuse_named(p), 4096);
  misuse_returned("free_sized");
  return misuse_finish1(64);
}
