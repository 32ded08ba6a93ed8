/*
 * dlopen_brisk LIBBRISK: the library can be loaded with dlopen (a plugin, a
 * Python ctypes user of the region allocators), not only linked or
 * preloaded. Its initial-exec thread-local storage must then fit glibc's
 * small static-TLS surplus: an 8 KiB thread-local array once made dlopen
 * fail with "cannot allocate memory in static TLS block". Calls a block
 * and an arena through dlsym. Not linked to brisk.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBBRISK\n", argv[0]);
    return 2;
  }
  void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  void *(*brisk_malloc)(size_t) = (void *(*)(size_t))dlsym(library, "brisk_malloc");
  void (*brisk_free)(void *) = (void (*)(void *))dlsym(library, "brisk_free");
  void *(*arena_create)(size_t) = (void *(*)(size_t))dlsym(library, "brisk_arena_create");
  void *(*arena_alloc)(void *, size_t, size_t) =
      (void *(*)(void *, size_t, size_t))dlsym(library, "brisk_arena_alloc");
  void (*arena_destroy)(void *) = (void (*)(void *))dlsym(library, "brisk_arena_destroy");
  if (!brisk_malloc || !brisk_free || !arena_create || !arena_alloc || !arena_destroy) {
    fprintf(stderr, "a brisk_* name is missing: %s\n", dlerror());
    return 1;
  }
  char *block = brisk_malloc(100);
  void *arena = arena_create(1 << 20);
  char *bump = arena == NULL ? NULL : arena_alloc(arena, 64, 0);
  if (block == NULL || bump == NULL) {
    fprintf(stderr, "brisk_malloc or the arena returned NULL\n");
    return 1;
  }
  memset(block, 1, 100);
  memset(bump, 2, 64);
  brisk_free(block);
  arena_destroy(arena);
  printf("ok: %s loaded with dlopen; a block and an arena work\n", argv[1]);
  return 0;
}
