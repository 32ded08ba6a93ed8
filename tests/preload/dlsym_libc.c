/*
 * dlsym_libc: looks allocation functions up in libc's handle, as Python's
 * ctypes.CDLL("libc.so.6") does, and in RTLD_NEXT and RTLD_DEFAULT, by name
 * (dlsym) and at a version (dlvsym), and uses them on blocks from the
 * program's malloc and libc's strdup. Run with and without brisk preloaded
 * (run_preload.sh): the output must be the same.
 *
 * A lookup in a handle finds that library's own definition, whatever the
 * process interposes, so under the preload libc's handle would give
 * glibc's free, which crashes on a brisk block, unless brisk's dlsym
 * answers for it. RTLD_NEXT is looked up from this program, whose next
 * object is brisk's under the preload: dlsym must still see this program
 * as its caller through brisk's dlsym.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef size_t (*usable_size_fn)(void *);

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    exit(1);
  }
  printf("%s\n", what);
}

int main(void) {
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  check(libc != NULL, "libc's handle");
  malloc_fn libc_malloc = (malloc_fn)dlsym(libc, "malloc");
  free_fn libc_free = (free_fn)dlsym(libc, "free");
  usable_size_fn libc_usable_size = (usable_size_fn)dlsym(libc, "malloc_usable_size");
  /* Checked first: the calls below would crash on the wrong allocator. */
  check(libc_malloc == &malloc, "libc's handle gives the program's malloc");
  check(libc_free == &free, "libc's handle gives the program's free");
  check(libc_usable_size == &malloc_usable_size,
        "libc's handle gives the program's malloc_usable_size");
  check(dlsym(RTLD_NEXT, "malloc") == (void *)&malloc,
        "RTLD_NEXT from the program gives the program's malloc");
  check(dlsym(RTLD_DEFAULT, "free") == (void *)&free, "RTLD_DEFAULT gives the program's free");
  /* x86-64's first glibc version, the only one malloc and free have. */
  free_fn libc_free_at_version = (free_fn)dlvsym(libc, "free", "GLIBC_2.2.5");
  check(libc_free_at_version == &free, "libc's handle at a version gives the program's free");
  check(dlvsym(libc, "malloc", "GLIBC_2.2.5") == (void *)&malloc,
        "libc's handle at a version gives the program's malloc");
  check(dlvsym(RTLD_DEFAULT, "free", "GLIBC_2.2.5") == (void *)&free,
        "RTLD_DEFAULT at a version gives the program's free");
  for (int round = 0; round < 1000; round++) {
    char *copy = strdup("a block libc's strdup allocated");
    if (copy == NULL) check(0, "strdup");
    libc_free(copy);
    char *block = libc_malloc((size_t)round * 24 + 1);
    if (block == NULL || libc_usable_size(block) < (size_t)round * 24 + 1) {
      check(0, "libc's handle's malloc and malloc_usable_size");
    }
    free(block);
    libc_free_at_version(strdup("freed through dlvsym's free"));
  }
  printf("blocks crossed between libc's handle and the program\n");
  check(dlsym(libc, "brisk_no_such_function") == NULL && dlerror() != NULL,
        "a name libc lacks: NULL and an error");
  check(dlvsym(libc, "malloc", "GLIBC_0.0") == NULL && dlerror() != NULL,
        "a version libc lacks: NULL and an error");
  check(dlclose(libc) == 0, "dlclose");
  return 0;
}
