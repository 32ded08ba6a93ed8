/*
 * dl.c — dlopen and dlsym over libc's, so that every library of the process
 * and every function pointer it looks up reach brisk's malloc.
 *
 * dlopen drops RTLD_DEEPBIND. A library opened with that flag looks its
 * symbols up in its own dependencies before the program's: its malloc and
 * free bind to libc's, while the program, the other libraries and libc
 * itself (strdup, fopen, getline) call brisk's. A block then crosses from
 * one allocator to the other, and glibc's free of a brisk block crashes or
 * corrupts glibc's heap (php opens every extension with the flag: it died
 * at start). Without the flag such a library binds as it does under C
 * libraries that have no RTLD_DEEPBIND (musl).
 *
 * dlsym on a handle answers brisk's function where it would answer libc's
 * own allocation function: a lookup in a library's handle finds that
 * library's definition, whatever the process interposes, so Python's
 * ctypes.CDLL("libc.so.6").free was glibc's free, and freeing what libc's
 * strdup returned with it crashed. Only the names override.c exports are
 * looked at, and only a definition that is the one brisk's replaces (the
 * next after brisk's in the search order) is replaced: a handle of another
 * allocator's library still gives that allocator's functions.
 *
 * glibc's dlopen reads its return address to find the object that called
 * it, whose RUNPATH it searches and whose namespace it loads into, and its
 * dlsym does so for RTLD_DEFAULT and RTLD_NEXT (the scope searched, the
 * object after the caller's). Those calls must be tail calls (a jump leaves
 * the caller's return address in place): this file is built with -O2 in
 * every build type (CMakeLists.txt), ctest preload_dlopen_deepbind finds a
 * library through its program's RUNPATH and preload_dlsym_libc looks up
 * RTLD_NEXT under the preload. A lookup in a handle does not use the
 * caller (glibc reads it only for an auditor, LD_AUDIT), so there dlsym can
 * call libc's and look at the answer.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "override/glibc_names.h"

#define BRISK_EXPORT __attribute__((visibility("default")))

typedef void *(*dlopen_fn)(const char *file, int mode);
typedef void *(*dlsym_fn)(void *handle, const char *name);

/* libc's functions, found on the first call (a library's constructor may
 * call dlopen before brisk's would run). Racing threads store the same
 * value. */
static _Atomic(dlopen_fn) libc_dlopen;
static _Atomic(dlsym_fn) libc_dlsym;

BRISK_EXPORT void *dlopen(const char *file, int mode) {
  dlopen_fn next = atomic_load_explicit(&libc_dlopen, memory_order_relaxed);
  if (next == NULL) {
    next = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    if (next == NULL) return NULL; /* dlerror() says why */
    atomic_store_explicit(&libc_dlopen, next, memory_order_relaxed);
  }
  return next(file, mode & ~RTLD_DEEPBIND);
}

#define OWN(name) {#name, (void (*)(void))name}
static const struct {
  const char *name;
  void (*own)(void);
} own_functions[] = {
    OWN(malloc),         OWN(free),           OWN(calloc),          OWN(realloc),
    OWN(reallocarray),   OWN(malloc_usable_size), OWN(aligned_alloc), OWN(memalign),
    OWN(posix_memalign), OWN(valloc),         OWN(pvalloc),         OWN(cfree),
    OWN(free_sized),     OWN(free_aligned_sized), OWN(mallinfo2),   OWN(malloc_stats),
    OWN(malloc_info),    OWN(malloc_trim),    OWN(mallopt),         OWN(__libc_malloc),
    OWN(__libc_free),    OWN(__libc_calloc),  OWN(__libc_realloc),  OWN(__libc_memalign),
    OWN(__libc_valloc),  OWN(__libc_pvalloc), OWN(__libc_mallinfo), OWN(__libc_mallopt),
    /* The same function as mallinfo, which the header marks deprecated. */
    {"mallinfo", (void (*)(void))__libc_mallinfo},
};
#undef OWN

/* brisk's definition of name, or NULL where brisk defines none. */
static void *own_function(const char *name) {
  for (size_t i = 0; i < sizeof own_functions / sizeof own_functions[0]; i++) {
    if (strcmp(name, own_functions[i].name) == 0) return (void *)own_functions[i].own;
  }
  return NULL;
}

BRISK_EXPORT void *dlsym(void *handle, const char *name) {
  dlsym_fn next = atomic_load_explicit(&libc_dlsym, memory_order_relaxed);
  if (next == NULL) {
    /* Not through dlsym, which is this function. dlsym moved into libc
     * at glibc 2.34 (a new version); before, libdl's has the first one. */
    next = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (next == NULL) next = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (next == NULL) return NULL; /* dlerror() says why */
    atomic_store_explicit(&libc_dlsym, next, memory_order_relaxed);
  }
  void *own = handle == RTLD_DEFAULT || handle == RTLD_NEXT ? NULL : own_function(name);
  if (own == NULL) return next(handle, name);
  /* The definition brisk's replaces: the next after brisk's (libc's). Looked
   * up first, so that dlerror() tells of the caller's lookup alone. */
  void *replaced = next(RTLD_NEXT, name);
  void *found = next(handle, name);
  return found != NULL && found == replaced ? own : found;
}
