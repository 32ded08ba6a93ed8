/*
 * os_linux.c — the OS contract (os.h) on Linux: mmap, munmap, mremap,
 * madvise, clock_gettime and write(2).
 */
#define _GNU_SOURCE
#include "os/os.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

size_t _brisk_os_page_size(void) { return 4096; }

/* Adds n to a caller's count of system calls (os.h: `calls`), if it keeps one. */
static inline void add_calls(size_t *calls, size_t n) {
  if (calls != NULL) *calls += n;
}

static void *map_anonymous(size_t size, size_t *calls) {
  /* No MAP_NORESERVE: the kernel's overcommit heuristic then refuses sizes
   * that can never be backed (64 TiB), which is how malloc must fail. */
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  add_calls(calls, 1);
  if (p == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  return p;
}

/*
 * Aligned reservations are first tried at a hint: addresses handed out in
 * turn from an area above 2 TiB (where nothing else maps on its own; the
 * start is offset by this library's own randomised load address), each
 * aligned as asked. mmap without MAP_FIXED takes the hint when the range is
 * free, so a reservation costs one system call instead of three (an
 * over-sized map and two trims). Anything else the kernel returns is given
 * back and the over-sized way is used; after HINT_MISSES_MAX misses the
 * hints are not tried again.
 */
#define HINT_AREA_START ((uintptr_t)2 << 40)
#define HINT_AREA_END   ((uintptr_t)32 << 40)
#define HINT_MISSES_MAX 16
static _Atomic(uintptr_t) next_hint;
static _Atomic(unsigned) hint_misses;

static void *reserve_at_hint(size_t size, size_t align, size_t *calls) {
  if (atomic_load_explicit(&hint_misses, memory_order_relaxed) >= HINT_MISSES_MAX) return NULL;
  uintptr_t start = atomic_load_explicit(&next_hint, memory_order_relaxed);
  if (start == 0) {
    uintptr_t offset = (((uintptr_t)&next_hint >> 12) & 0xFFF) << 30; /* up to 4 TiB */
    uintptr_t expected = 0;
    atomic_compare_exchange_strong_explicit(&next_hint, &expected, HINT_AREA_START + offset,
                                            memory_order_relaxed, memory_order_relaxed);
  }
  /* Claim size + align of the area, so that the aligned start fits in it. */
  uintptr_t claimed = atomic_fetch_add_explicit(&next_hint, size + align, memory_order_relaxed);
  uintptr_t hint = (claimed + align - 1) & ~(uintptr_t)(align - 1);
  if (hint + size > HINT_AREA_END || hint + size < hint) return NULL;
  void *p = mmap((void *)hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  add_calls(calls, 1);
  if (p == (void *)hint) return p;
  /* Only a mapping placed elsewhere is a miss; a refusal (no memory for
   * that size) says nothing about the hints. */
  if (p != MAP_FAILED) {
    munmap(p, size);
    add_calls(calls, 1);
    atomic_fetch_add_explicit(&hint_misses, 1, memory_order_relaxed);
  }
  return NULL;
}

void *_brisk_os_reserve(size_t size, size_t align, size_t align_offset, size_t *calls) {
  size_t page = _brisk_os_page_size();
  if (align < page) align = page;
  if (size == 0 || size > PTRDIFF_MAX - align) {
    errno = ENOMEM;
    return NULL;
  }
  /* Hints for the sizes the allocator maps every day: a huge request that
   * fails must not use up the hint area. */
  if (align_offset == 0 && align > page && size <= ((size_t)1 << 30)) {
    void *p = reserve_at_hint(size, align, calls);
    if (p != NULL) return p;
  }
  /* Over-reserve by `align`, then trim both ends: the kernel gives no
   * aligned mmap, and this costs two munmaps only on the slow path. */
  size_t padded = size + align;
  uint8_t *raw = map_anonymous(padded, calls);
  if (raw == NULL) return NULL;
  uintptr_t target = ((uintptr_t)raw + align_offset + align - 1) & ~(uintptr_t)(align - 1);
  uint8_t *base = (uint8_t *)(target - align_offset);
  if (base < raw) base += align;
  size_t head = (size_t)(base - raw);
  size_t tail = padded - head - size;
  add_calls(calls, (head != 0) + (tail != 0));
  if (head != 0) munmap(raw, head);
  if (tail != 0) munmap(base + size, tail);
  return base;
}

void *_brisk_os_reserve_address_space(size_t size, size_t align, size_t *calls) {
  size_t page = _brisk_os_page_size();
  if (align < page) align = page;
  if (size == 0 || size > PTRDIFF_MAX - align) {
    errno = ENOMEM;
    return NULL;
  }
  size_t padded = size + align;
  uint8_t *raw = mmap(NULL, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  add_calls(calls, 1);
  if (raw == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  uint8_t *base = (uint8_t *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  size_t head = (size_t)(base - raw);
  size_t tail = padded - head - size;
  add_calls(calls, (head != 0) + (tail != 0));
  if (head != 0) munmap(raw, head);
  if (tail != 0) munmap(base + size, tail);
  return base;
}

bool _brisk_os_commit(void *p, size_t size, size_t *calls) {
  if (size == 0) return true;
  add_calls(calls, 1);
  return mprotect(p, size, PROT_READ | PROT_WRITE) == 0;
}

void _brisk_os_uncommit(void *p, size_t size, size_t *calls) {
  if (size == 0) return;
  add_calls(calls, 2);
  madvise(p, size, MADV_DONTNEED);
  mprotect(p, size, PROT_NONE);
}

bool _brisk_os_prefault(void *p, size_t size, size_t *calls) {
  if (size == 0) return true;
#ifdef MADV_POPULATE_WRITE
  add_calls(calls, 1);
  if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return true;
#endif
  /* Older kernels (EINVAL): one write per page. The range is committed and
   * either fresh (zero) or the caller's own, so writing a byte back as it
   * reads is harmless. */
  size_t page = _brisk_os_page_size();
  volatile uint8_t *bytes = (volatile uint8_t *)p;
  for (size_t i = 0; i < size; i += page) bytes[i] = bytes[i];
  return true;
}

bool _brisk_os_lock(void *p, size_t size, size_t *calls) {
  if (size == 0) return true;
  add_calls(calls, 1);
  return mlock(p, size) == 0;
}

void _brisk_os_release(void *p, size_t size, size_t *calls) {
  if (p == NULL || size == 0) return;
  add_calls(calls, 1);
  munmap(p, size);
}

void _brisk_os_decommit(void *p, size_t size, size_t *calls) {
  /* MADV_DONTNEED (not MADV_FREE) so RSS falls at once and the range reads
   * back as zero, which calloc relies on for fresh pages. */
  if (size == 0) return;
  add_calls(calls, 1);
  madvise(p, size, MADV_DONTNEED);
}

bool _brisk_os_resize(void *p, size_t old_size, size_t new_size, size_t *calls) {
  add_calls(calls, 1);
  return mremap(p, old_size, new_size, 0) != MAP_FAILED;
}

bool _brisk_os_move(void *p, size_t old_size, void *new_base, size_t new_size, size_t *calls) {
  add_calls(calls, 1);
  return mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, new_base) != MAP_FAILED;
}

uint64_t _brisk_os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void _brisk_os_write_error(const char *message) {
  size_t len = strlen(message);
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, message, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    message += n;
    len -= (size_t)n;
  }
}

void _brisk_os_abort(void) { abort(); }

void _brisk_os_fatal_pointer(const char *caller, const void *p, const char *why) {
  static const char digits[] = "0123456789abcdef";
  char address[2 + 16 + 1], reversed[16];
  uintptr_t value = (uintptr_t)p;
  int n = 0;
  do {
    reversed[n++] = digits[value & 15];
    value >>= 4;
  } while (value != 0);
  char *out = address;
  *out++ = '0';
  *out++ = 'x';
  while (n > 0) *out++ = reversed[--n];
  *out = '\0';
  _brisk_os_write_error("brisk: ");
  _brisk_os_write_error(caller);
  _brisk_os_write_error("(");
  _brisk_os_write_error(address);
  _brisk_os_write_error("): ");
  _brisk_os_write_error(why);
  _brisk_os_write_error("\n");
  abort();
}
