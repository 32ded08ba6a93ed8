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
#include <brisk/malloc.h>
#include <brisk/stats.h>
#include "os/os.h"
#include "override/glibc_names.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
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
 * none, and a non-power of two is rounded up to the next power of two.
 * Only one above 2^63 has none to round to (EINVAL); one rounded up to 2^63
 * fails later, with ENOMEM, as every block aligned to 2^63 does. */
BRISK_EXPORT void *memalign(size_t alignment, size_t size) {
  if (alignment <= sizeof(void *)) return brisk_malloc_inline(size);
  if (!brisk_is_power_of_two(alignment)) {
    if (alignment > SIZE_MAX / 2 + 1) {
      errno = EINVAL;
      return NULL;
    }
    alignment = (size_t)1 << (brisk_bit_scan_reverse(alignment) + 1);
  }
  return _brisk_malloc_aligned(size, alignment, false);
}

/* The error is the return value; on ENOMEM errno says ENOMEM too, as
 * glibc's does (a caller's perror() then names the error), and an EINVAL
 * leaves errno alone, as glibc's does. */
BRISK_EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
  if (!brisk_is_power_of_two(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  void *p = _brisk_malloc_aligned(size, alignment, false);
  if (p == NULL) return ENOMEM;
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
BRISK_EXPORT void cfree(void *p) { brisk_free_inline(p); }

/* ---- glibc's aliases: code that calls __libc_malloc and hands the block
 * to free() (or the reverse) must meet one allocator. ---- */

BRISK_EXPORT void *__libc_malloc(size_t size) { return brisk_malloc_inline(size); }
BRISK_EXPORT void __libc_free(void *p) { brisk_free_inline(p); }
BRISK_EXPORT void *__libc_calloc(size_t count, size_t size) { return brisk_calloc(count, size); }
BRISK_EXPORT void *__libc_realloc(void *p, size_t size) { return brisk_realloc(p, size); }
BRISK_EXPORT void *__libc_memalign(size_t alignment, size_t size) { return memalign(alignment, size); }
BRISK_EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
BRISK_EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }

/* ---- C23: free with the size (and alignment) the block was asked with.
 * brisk does not need either; both are checked against the block in every
 * build, since a wrong one is a caller's bug worth naming, and the lookup
 * costs little next to free itself. ---- */

/* The block's size is looked up with the checks malloc_usable_size makes
 * (a pointer brisk never handed out, inside a block, or, in the secure
 * build, freed already), each named for caller, the call the program made. */
static void check_freed_size(const char *caller, void *p, size_t size) {
  if (p == NULL) return;
  if (_brisk_block_usable_size(_brisk_checked_segment(p, caller), p, caller) < size) {
    _brisk_os_fatal_pointer(caller, p, "size larger than the block");
  }
}

BRISK_EXPORT void free_sized(void *p, size_t size) {
  check_freed_size("free_sized", p, size);
  brisk_free_inline(p);
}

BRISK_EXPORT void free_aligned_sized(void *p, size_t alignment, size_t size) {
  if (p != NULL && ((uintptr_t)p & (alignment - 1)) != 0) {
    _brisk_os_fatal_pointer("free_aligned_sized", p, "not aligned as stated");
  }
  check_freed_size("free_aligned_sized", p, size);
  brisk_free_inline(p);
}

/* ---- glibc's introspection, answered from brisk's statistics ---- */

/* A snapshot in the one static struct both introspection calls share (it
 * is large, and they are not hot); stats_done releases it. */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

/* A forked child's lock starts free: a thread of the parent may have held
 * it across fork() (waiting inside brisk_stats_get for the heaps' lock,
 * which fork's handlers hold), and would never release it in the child.
 * The struct it guards is written whole by the child's next snapshot. */
static void stats_lock_reset_in_child(void) { pthread_mutex_init(&stats_lock, NULL); }

static void __attribute__((constructor)) stats_lock_register_fork_handler(void) {
  pthread_atfork(NULL, NULL, stats_lock_reset_in_child);
}

static const brisk_stats_t *stats_now(void) {
  static brisk_stats_t stats;
  pthread_mutex_lock(&stats_lock);
  stats.size = sizeof stats;
  brisk_stats_get(&stats);
  return &stats;
}

static void stats_done(void) { pthread_mutex_unlock(&stats_lock); }

/* The fields mean what glibc's do: hblks and hblkhd are the blocks in their
 * own mappings (brisk's huge blocks) and their bytes; arena, uordblks and
 * fordblks describe the rest of the heap (held, in live blocks, free), so
 * that uordblks + hblkhd is everything in use and arena = uordblks +
 * fordblks. bytes_held and bytes_in_use each count the huge mappings in
 * full. The blocks in use are counted from the heaps' pages and the bytes
 * held from global gauges, read one after the other while other threads
 * run, so each difference is kept from going below 0. */
static size_t minus(size_t a, size_t b) { return a > b ? a - b : 0; }

BRISK_EXPORT struct mallinfo2 mallinfo2(void) {
  const brisk_general_stats_t *g = &stats_now()->general;
  struct mallinfo2 info = {0};
  info.hblks = g->huge_blocks;
  info.hblkhd = g->huge_bytes;
  info.arena = minus(g->bytes_held, g->huge_bytes);   /* held, huge mappings apart */
  info.uordblks = minus(g->bytes_in_use, g->huge_bytes);
  info.fordblks = minus(info.arena, info.uordblks);
  info.usmblks = g->bytes_in_use_peak;   /* glibc leaves it 0; the peak is what it meant */
  stats_done();
  return info;
}

/* The old int fields, clamped rather than wrapped. */
static int clamp_int(size_t value) { return value > INT_MAX ? INT_MAX : (int)value; }

static struct mallinfo mallinfo_clamped(void) {
  struct mallinfo2 wide = mallinfo2();
  struct mallinfo info = {0};
  info.arena = clamp_int(wide.arena);
  info.hblks = clamp_int(wide.hblks);
  info.hblkhd = clamp_int(wide.hblkhd);
  info.uordblks = clamp_int(wide.uordblks);
  info.fordblks = clamp_int(wide.fordblks);
  info.usmblks = clamp_int(wide.usmblks);
  return info;
}

BRISK_EXPORT struct mallinfo mallinfo(void) { return mallinfo_clamped(); }

BRISK_EXPORT void malloc_stats(void) { brisk_stats_print(stderr); }

/* glibc's outer form: <malloc version="1"> with sizes, totals and system
 * memory; brisk has one heap section for the whole process. Options other
 * than 0 are an error, returned as glibc returns it: the value EINVAL,
 * errno untouched (its manual page says -1 and errno; a caller that tests
 * for non-zero works with both). */
BRISK_EXPORT int malloc_info(int options, FILE *out) {
  if (options != 0 || out == NULL) return EINVAL;
  const brisk_stats_t *stats = stats_now();
  const brisk_general_stats_t *g = &stats->general;
  fprintf(out, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  for (size_t c = 1; c < BRISK_STATS_CLASSES; c++) {
    const brisk_class_stats_t *cls = &stats->classes[c];
    if (cls->blocks_in_use == 0) continue;
    size_t from = stats->classes[c - 1].block_size + 1; /* classes[0]'s is 0 */
    fprintf(out, "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%zu\"/>\n", from,
            cls->block_size, cls->blocks_in_use * cls->block_size, cls->blocks_in_use);
  }
  fprintf(out, "</sizes>\n");
  fprintf(out, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n", g->huge_blocks, g->huge_bytes);
  fprintf(out, "<system type=\"current\" size=\"%zu\"/>\n", g->bytes_held);
  fprintf(out, "<system type=\"max\" size=\"%zu\"/>\n", g->bytes_in_use_peak);
  fprintf(out, "<aspace type=\"total\" size=\"%zu\"/>\n", g->bytes_reserved);
  fprintf(out, "<aspace type=\"mprotect\" size=\"%zu\"/>\n", g->bytes_reserved);
  fprintf(out, "</heap>\n");
  fprintf(out, "<total type=\"fast\" count=\"0\" size=\"0\"/>\n");
  fprintf(out, "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n", g->pages_committed,
          g->bytes_held > g->bytes_in_use ? g->bytes_held - g->bytes_in_use : 0);
  fprintf(out, "<system type=\"current\" size=\"%zu\"/>\n", g->bytes_held);
  fprintf(out, "<system type=\"max\" size=\"%zu\"/>\n", g->bytes_in_use_peak);
  fprintf(out, "<aspace type=\"total\" size=\"%zu\"/>\n", g->bytes_reserved);
  fprintf(out, "<aspace type=\"mprotect\" size=\"%zu\"/>\n", g->bytes_reserved);
  fprintf(out, "</malloc>\n");
  stats_done();
  return 0;
}

/* pad is glibc's slack to keep at the top of its heap; brisk has no top:
 * every heap's free pages go back, idle threads' included. */
BRISK_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  return brisk_collect(true) ? 1 : 0;
}

/* Options with a meaning in brisk are applied; the rest are accepted and
 * ignored, as glibc does for options it has dropped (README, Options). The
 * return value is glibc's: 1, except 0 for M_MXFAST beyond glibc's largest
 * fast-bin size (80 * sizeof(size_t) / 4 bytes; a negative value counts as
 * beyond). M_TRIM_THRESHOLD bounds the free pages a heap keeps backed; glibc
 * stores the int in a size_t, so -1 (any negative value) is a bound no heap
 * reaches: "never trim", the purge delay alone gives free pages back. */
BRISK_EXPORT int mallopt(int option, int value) {
  if (option == M_MXFAST && (value < 0 || (size_t)value > 80 * sizeof(size_t) / 4)) return 0;
  if (option == M_TRIM_THRESHOLD) _brisk_set_purge_max_bytes((size_t)value);
  return 1;
}

/* glibc exports these two under its own names as well. */
BRISK_EXPORT struct mallinfo __libc_mallinfo(void) { return mallinfo_clamped(); }
BRISK_EXPORT int __libc_mallopt(int option, int value) { return mallopt(option, value); }
