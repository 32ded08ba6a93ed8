/*
 * glibc_names.h — the allocation names override.c defines that glibc's
 * headers do not declare (older names, glibc's internal aliases, C23's
 * sized frees that glibc 2.36 lacks), for override.c and dl.c.
 */
#ifndef BRISK_OVERRIDE_GLIBC_NAMES_H
#define BRISK_OVERRIDE_GLIBC_NAMES_H

#include <malloc.h>
#include <stddef.h>

void cfree(void *p);
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
void *__libc_malloc(size_t size);
void __libc_free(void *p);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
struct mallinfo __libc_mallinfo(void);
int __libc_mallopt(int option, int value);

#endif /* BRISK_OVERRIDE_GLIBC_NAMES_H */
