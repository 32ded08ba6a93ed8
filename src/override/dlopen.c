/*
 * dlopen.c — dlopen without RTLD_DEEPBIND, so that every library of the
 * process calls brisk's malloc.
 *
 * A library opened with RTLD_DEEPBIND looks its symbols up in its own
 * dependencies before the program's: its malloc and free bind to libc's,
 * while the program, the other libraries and libc itself (strdup, fopen,
 * getline) call brisk's. A block then crosses from one allocator to the
 * other, and glibc's free of a brisk block crashes or corrupts glibc's heap
 * (php opens every extension with the flag: it died at start). brisk drops
 * the flag: such a library binds as one opened without it, as it does
 * under C libraries that have no RTLD_DEEPBIND (musl).
 *
 * glibc's dlopen reads its return address to find the object that called
 * it, whose RUNPATH it searches and whose namespace it loads into, so the
 * call below must be a tail call (a jump, which leaves the caller's return
 * address in place): this file is built with -O2 in every build type
 * (CMakeLists.txt), and ctest preload_dlopen_deepbind finds a library
 * through its program's RUNPATH under the preload.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>

#define BRISK_EXPORT __attribute__((visibility("default")))

typedef void *(*dlopen_fn)(const char *file, int mode);

/* libc's dlopen, found on the first call (a library's constructor may call
 * dlopen before brisk's would run). Racing threads store the same value. */
static _Atomic(dlopen_fn) libc_dlopen;

BRISK_EXPORT void *dlopen(const char *file, int mode) {
  dlopen_fn next = atomic_load_explicit(&libc_dlopen, memory_order_relaxed);
  if (next == NULL) {
    next = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    if (next == NULL) return NULL; /* dlerror() says why */
    atomic_store_explicit(&libc_dlopen, next, memory_order_relaxed);
  }
  return next(file, mode & ~RTLD_DEEPBIND);
}
