/*
 * deepbind_plugin: a library that its program opens with RTLD_DEEPBIND, as
 * php opens every extension. Such a library looks symbols up in its own
 * dependencies (libc) before the program's, so without brisk's dlopen its
 * malloc and free would be libc's while the program, and libc's own
 * strdup, use brisk's. It also defines an allocation name of its own
 * (pvalloc), as another allocator's library does, which dlsym on its
 * handle must answer as it is. Built with -fno-builtin: every call below
 * reaches the allocator as written. Not linked to brisk.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

typedef void *(*malloc_fn)(size_t);

/* The malloc this library's own calls bind to. */
malloc_fn deepbind_plugin_malloc(void);
malloc_fn deepbind_plugin_malloc(void) { return &malloc; }

/* A block from the library's malloc, for its caller to free. */
char *deepbind_plugin_copy(const char *text);
char *deepbind_plugin_copy(const char *text) {
  size_t size = strlen(text) + 1;
  char *copy = malloc(size);
  if (copy != NULL) memcpy(copy, text, size);
  return copy;
}

/* The library's free of a block its caller (or libc) allocated. */
void deepbind_plugin_free(void *p);
void deepbind_plugin_free(void *p) { free(p); }

/* libc allocates (strdup), the library frees: what php's extensions do. */
size_t deepbind_plugin_strdup_length(const char *text);
size_t deepbind_plugin_strdup_length(const char *text) {
  char *copy = strdup(text);
  if (copy == NULL) return 0;
  size_t length = strlen(copy);
  free(copy);
  return length;
}

/* Found by dlsym on this library's handle, never called by it. */
#define DEEPBIND_PLUGIN_PVALLOC ((void *)0x5eed)
void *pvalloc(size_t size);
void *pvalloc(size_t size) {
  (void)size;
  return DEEPBIND_PLUGIN_PVALLOC;
}
