/*
 * dlopen_deepbind: opens deepbind_plugin by its bare name with
 * RTLD_DEEPBIND, as php opens its extensions, and passes blocks between it
 * and the program both ways. Run with and without brisk preloaded
 * (run_preload.sh): the output must be the same.
 *
 * With brisk preloaded, the program's malloc, and libc's own strdup, are
 * brisk's; the plugin's would be libc's, since RTLD_DEEPBIND has it look in
 * its own dependencies first, unless brisk's dlopen drops the flag. The
 * plugin lies in a directory that only this program's DT_RUNPATH names
 * (linked with --enable-new-dtags: the executable's DT_RPATH would be
 * searched whoever called dlopen), so it is found only if dlopen still sees
 * this program as its caller through brisk's dlopen.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*malloc_fn)(size_t);

int main(void) {
  void *library = dlopen("libdeepbind_plugin.so", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (library == NULL) {
    fprintf(stderr, "FAIL: dlopen through the caller's RUNPATH: %s\n", dlerror());
    return 1;
  }
  malloc_fn (*plugin_malloc)(void) = (malloc_fn(*)(void))dlsym(library, "deepbind_plugin_malloc");
  char *(*plugin_copy)(const char *) = (char *(*)(const char *))dlsym(library, "deepbind_plugin_copy");
  void (*plugin_free)(void *) = (void (*)(void *))dlsym(library, "deepbind_plugin_free");
  size_t (*plugin_strdup_length)(const char *) =
      (size_t(*)(const char *))dlsym(library, "deepbind_plugin_strdup_length");
  if (!plugin_malloc || !plugin_copy || !plugin_free || !plugin_strdup_length) {
    fprintf(stderr, "FAIL: a deepbind_plugin_* name is missing\n");
    return 1;
  }
  printf("opened with RTLD_DEEPBIND through the program's RUNPATH\n");
  /* Checked first: the blocks below would crash on the wrong allocator. */
  if (plugin_malloc() != &malloc) {
    fprintf(stderr, "FAIL: the plugin's malloc is not the program's\n");
    return 1;
  }
  printf("the plugin's malloc is the program's\n");
  for (int round = 0; round < 1000; round++) {
    char *copy = plugin_copy("a block the plugin allocated");
    if (copy == NULL || strcmp(copy, "a block the plugin allocated") != 0) {
      fprintf(stderr, "FAIL: the plugin's copy\n");
      return 1;
    }
    free(copy);
    plugin_free(malloc((size_t)round * 40 + 1));
    if (plugin_strdup_length("libc allocates, the plugin frees") != 32) {
      fprintf(stderr, "FAIL: libc's strdup freed by the plugin\n");
      return 1;
    }
  }
  printf("blocks crossed both ways\n");
  if (dlclose(library) != 0) {
    fprintf(stderr, "FAIL: dlclose: %s\n", dlerror());
    return 1;
  }
  printf("closed\n");
  return 0;
}
