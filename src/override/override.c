/*
 * override.c — the libc allocation names, exported from libbrisk so that
 * linking (-lbrisk) or preloading (LD_PRELOAD) replaces the system malloc.
 * The only file besides new_delete.cc that knows these names.
 *
 * Each function is the glibc/POSIX contract over brisk's general allocator:
 * failures return NULL with errno ENOMEM (EINVAL for a bad alignment), and
 * posix_memalign reports its error as the return value.
 */
#define _GNU_SOURCE
#include "general/alloc.h"
#include "brisk.h"
#include "os/os.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>

#define BRISK_EXPORT __attribute__((visibility("default")))

BRISK_EXPORT void *malloc(size_t size) { return brisk_malloc_inline(size); }

BRISK_EXPORT void free(void *p) { brisk_free_inline(p); }

BRISK_EXPORT void *calloc(size_t count, size_t size) { return brisk_calloc(count, size); }

BRISK_EXPORT void *realloc(void *p, size_t size) { return brisk_realloc(p, size); }

BRISK_EXPORT void *reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (brisk_mul_overflows(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return brisk_realloc(p, total);
}

BRISK_EXPORT size_t malloc_usable_size(void *p) { return brisk_usable_size(p); }

BRISK_EXPORT void *aligned_alloc(size_t alignment, size_t size) {
  return brisk_aligned_alloc(alignment, size);
}

/* glibc's memalign takes any alignment: 0 or less than a pointer means
 * none, and a non-power of two is rounded up to the next power of two. */
BRISK_EXPORT void *memalign(size_t alignment, size_t size) {
  if (alignment <= sizeof(void *)) return brisk_malloc_inline(size);
  if (!brisk_is_power_of_two(alignment)) {
    if (alignment > PTRDIFF_MAX / 2 + 1) {
      errno = EINVAL;
      return NULL;
    }
    alignment = (size_t)1 << (brisk_bit_scan_reverse(alignment) + 1);
  }
  return _brisk_malloc_aligned(size, alignment, false);
}

BRISK_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
  if (!brisk_is_power_of_two(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  int saved_errno = errno;
  void *p = _brisk_malloc_aligned(size, alignment, false);
  if (p == NULL) {
    errno = saved_errno; /* POSIX reports through the return value only */
    return ENOMEM;
  }
  *out = p;
  return 0;
}

BRISK_EXPORT void *valloc(size_t size) {
  return _brisk_malloc_aligned(size, _brisk_os_page_size(), false);
}

BRISK_EXPORT void *pvalloc(size_t size) {
  size_t page = _brisk_os_page_size();
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = size == 0 ? page : brisk_align_up(size, page);
  return _brisk_malloc_aligned(rounded, page, false);
}

/* Obsolete SunOS name some old programs still call. */
BRISK_EXPORT void cfree(void *p);
BRISK_EXPORT void cfree(void *p) { brisk_free_inline(p); }
