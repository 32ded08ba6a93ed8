/*
 * os_linux.c — the OS contract (os.h) on Linux: mmap, munmap, mremap,
 * madvise, clock_gettime and write(2).
 */
#define _GNU_SOURCE
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The page size once read; 0 before. Relaxed: threads that race to read
 * it first all store the same value, and nothing else is published. */
static _Atomic size_t page_size;

/* The auxiliary vector's AT_PAGESZ, which the kernel wrote at exec: no
 * system call, no allocation, safe before libc is fully up. */
static BRISK_COLD size_t read_page_size(void) {
  size_t page = (size_t)getauxval(AT_PAGESZ);
  if (page == 0) page = (size_t)sysconf(_SC_PAGESIZE);
  if (!brisk_is_power_of_two(page) || page < BRISK_OS_MIN_PAGE_SIZE ||
      page > BRISK_OS_MAX_PAGE_SIZE) {
    _brisk_os_write_error("brisk: the OS page size is not one brisk supports (4 KiB to 64 KiB)\n");
    _brisk_os_abort();
  }
  atomic_store_explicit(&page_size, page, memory_order_relaxed);
  return page;
}

size_t _brisk_os_page_size(void) {
  size_t page = atomic_load_explicit(&page_size, memory_order_relaxed);
  return BRISK_LIKELY(page != 0) ? page : read_page_size();
}

/* Adds n to a caller's count of system calls (os.h: `calls`), if it keeps one. */
static inline void add_calls(size_t *calls, size_t n) {
  if (calls != NULL) *calls += n;
}

/* ---- counting every system call that maps or advises memory ----
 * Relaxed atomics: the counts are statistics read on demand, and every one
 * of these calls costs a system call, next to which an atomic add is free. */
static _Atomic(uint64_t) call_counts[BRISK_OS_CALL_KINDS];
static _Atomic(uint64_t) call_bytes[BRISK_OS_CALL_KINDS];
static _Atomic(uint64_t) failed_calls;
static _Atomic(int64_t) bytes_mapped;
/* Unmaps and decommits this thread made (_brisk_os_thread_releases). */
static BRISK_TLS uint64_t thread_releases;

static void count_call(brisk_os_call_kind_t kind, size_t size, bool ok) {
  if (!ok) {
    atomic_fetch_add_explicit(&failed_calls, 1, memory_order_relaxed);
    return;
  }
  atomic_fetch_add_explicit(&call_counts[kind], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&call_bytes[kind], size, memory_order_relaxed);
  if (kind == BRISK_OS_UNMAP || kind == BRISK_OS_DECOMMIT) thread_releases++;
}

bool _brisk_os_file_id(int fd, brisk_os_file_id_t *id) {
  struct stat status;
  if (fd < 0 || fstat(fd, &status) != 0) {
    id->device = id->inode = 0;
    return false;
  }
  id->device = (uint64_t)status.st_dev;
  id->inode = (uint64_t)status.st_ino;
  return true;
}

bool _brisk_os_file_is(int fd, const brisk_os_file_id_t *id) {
  brisk_os_file_id_t now;
  return _brisk_os_file_id(fd, &now) && now.device == id->device && now.inode == id->inode;
}

int _brisk_os_open_process_status(void) {
  return open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
}

bool _brisk_os_only_thread_left(int status_fd) {
  char text[1024];
  if (status_fd < 0) return false;
  ssize_t length = pread(status_fd, text, sizeof text - 1, 0);
  if (length <= 0) return false;
  text[length] = '\0';
  /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
   * the fields are counted from the last ')'. The state is the leader's;
   * num_threads is the 18th field after it and counts a zombie leader. */
  const char *field = strrchr(text, ')');
  if (field == NULL || field[1] != ' ') return false;
  field += 2;
  char leader_state = *field;
  for (int i = 0; i < 17; i++) {
    field = strchr(field, ' ');
    if (field == NULL) return false;
    field++;
  }
  long threads = strtol(field, NULL, 10);
  bool leader_gone = leader_state == 'Z' || leader_state == 'X';
  return threads == 1 || (leader_gone && threads == 2);
}

uint64_t _brisk_os_thread_releases(void) {
  return thread_releases;
}

static void count_mapped(int64_t change) {
  atomic_fetch_add_explicit(&bytes_mapped, change, memory_order_relaxed);
}

void _brisk_os_counts(brisk_os_counts_t *out) {
  for (int kind = 0; kind < BRISK_OS_CALL_KINDS; kind++) {
    out->calls[kind] = atomic_load_explicit(&call_counts[kind], memory_order_relaxed);
    out->bytes[kind] = atomic_load_explicit(&call_bytes[kind], memory_order_relaxed);
  }
  out->failed_calls = atomic_load_explicit(&failed_calls, memory_order_relaxed);
  int64_t mapped = atomic_load_explicit(&bytes_mapped, memory_order_relaxed);
  out->bytes_mapped = mapped > 0 ? (size_t)mapped : 0;
}

/* ---- fault injection (os.h) ----
 * A kind is armed by its bit in faults_armed; its remaining skips and
 * refusals are counted down with CAS loops, so that threads racing through
 * an armed kind refuse exactly `count` calls between them. The acquire load
 * pairs with the release that sets the bit: a caller that sees the bit sees
 * the counts stored before it. */
static _Atomic(unsigned) faults_armed;
static _Atomic(uint64_t) fault_skip[BRISK_OS_CALL_KINDS];
static _Atomic(uint64_t) fault_left[BRISK_OS_CALL_KINDS];
static _Atomic(uint64_t) faults_injected;

void _brisk_os_inject_failures(brisk_os_call_kind_t kind, uint64_t skip, uint64_t count) {
  unsigned bit = 1u << kind;
  atomic_fetch_and_explicit(&faults_armed, ~bit, memory_order_relaxed);
  if (count == 0) return;
  atomic_store_explicit(&fault_skip[kind], skip, memory_order_relaxed);
  atomic_store_explicit(&fault_left[kind], count, memory_order_relaxed);
  atomic_fetch_or_explicit(&faults_armed, bit, memory_order_release);
}

uint64_t _brisk_os_injected_failures(void) {
  return atomic_load_explicit(&faults_injected, memory_order_relaxed);
}

/* True when this call of `kind` is to be refused (errno is then ENOMEM). */
static bool injected_failure(brisk_os_call_kind_t kind) {
  if (BRISK_LIKELY((atomic_load_explicit(&faults_armed, memory_order_acquire) & (1u << kind)) == 0))
    return false;
  uint64_t skip = atomic_load_explicit(&fault_skip[kind], memory_order_relaxed);
  while (skip != 0) {
    if (atomic_compare_exchange_weak_explicit(&fault_skip[kind], &skip, skip - 1,
                                              memory_order_relaxed, memory_order_relaxed))
      return false;
  }
  uint64_t left = atomic_load_explicit(&fault_left[kind], memory_order_relaxed);
  for (;;) {
    if (left == 0) return false;
    if (left == BRISK_OS_FAIL_ALWAYS) break;
    if (atomic_compare_exchange_weak_explicit(&fault_left[kind], &left, left - 1,
                                              memory_order_relaxed, memory_order_relaxed))
      break;
  }
  atomic_fetch_add_explicit(&faults_injected, 1, memory_order_relaxed);
  errno = ENOMEM;
  return true;
}

static void *counted_mmap(void *hint, size_t size, int protection, int flags) {
  void *p = injected_failure(BRISK_OS_MAP) ? MAP_FAILED
                                           : mmap(hint, size, protection, flags, -1, 0);
  count_call(BRISK_OS_MAP, size, p != MAP_FAILED);
  if (p != MAP_FAILED) count_mapped((int64_t)size);
  return p;
}

static void counted_munmap(void *p, size_t size) {
  bool ok = !injected_failure(BRISK_OS_UNMAP) && munmap(p, size) == 0;
  count_call(BRISK_OS_UNMAP, size, ok);
  if (ok) count_mapped(-(int64_t)size);
}

static bool counted_madvise(brisk_os_call_kind_t kind, void *p, size_t size, int advice) {
  bool ok = !injected_failure(kind) && madvise(p, size, advice) == 0;
  count_call(kind, size, ok);
  return ok;
}

static bool counted_mprotect(brisk_os_call_kind_t kind, void *p, size_t size, int protection) {
  bool ok = !injected_failure(kind) && mprotect(p, size, protection) == 0;
  count_call(kind, size, ok);
  return ok;
}

/* How a reservation is mapped: read-write and charged against the commit
 * limit at once (a block's own mapping: no MAP_NORESERVE, so the kernel's
 * overcommit heuristic refuses sizes that can never be backed, 64 TiB,
 * which is how malloc must fail), or for _brisk_os_reserve_pages. */
typedef struct mapping_kind_s {
  int protection;
  int flags;
} mapping_kind_t;

static const mapping_kind_t charged_mapping = {PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS};

static void *map_anonymous(size_t size, mapping_kind_t kind, size_t *calls) {
  void *p = counted_mmap(NULL, size, kind.protection, kind.flags);
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

static void *reserve_at_hint(size_t size, size_t align, size_t align_offset, mapping_kind_t kind,
                             size_t *calls) {
  if (atomic_load_explicit(&hint_misses, memory_order_relaxed) >= HINT_MISSES_MAX) return NULL;
  uintptr_t start = atomic_load_explicit(&next_hint, memory_order_relaxed);
  if (start == 0) {
    uintptr_t offset = (((uintptr_t)&next_hint >> 12) & 0xFFF) << 30; /* up to 4 TiB */
    uintptr_t expected = 0;
    atomic_compare_exchange_strong_explicit(&next_hint, &expected, HINT_AREA_START + offset,
                                            memory_order_relaxed, memory_order_relaxed);
  }
  /* Claim size + align of the area, so that the mapping fits in it with
   * hint + align_offset aligned (align_offset is at most a page). */
  uintptr_t claimed = atomic_fetch_add_explicit(&next_hint, size + align, memory_order_relaxed);
  uintptr_t hint = ((claimed + align_offset + align - 1) & ~(uintptr_t)(align - 1)) - align_offset;
  if (hint + size > HINT_AREA_END || hint + size < hint) return NULL;
  void *p = counted_mmap((void *)hint, size, kind.protection, kind.flags);
  add_calls(calls, 1);
  if (p == (void *)hint) return p;
  /* Only a mapping placed elsewhere is a miss; a refusal (no memory for
   * that size) says nothing about the hints. */
  if (p != MAP_FAILED) {
    counted_munmap(p, size);
    add_calls(calls, 1);
    atomic_fetch_add_explicit(&hint_misses, 1, memory_order_relaxed);
  }
  return NULL;
}

static void *reserve_mapping(size_t size, size_t align, size_t align_offset, mapping_kind_t kind,
                             size_t *calls) {
  size_t page = _brisk_os_page_size();
  if (align < page) align = page;
  if (size == 0 || size > PTRDIFF_MAX - align) {
    errno = ENOMEM;
    return NULL;
  }
  /* Hints for the sizes the allocator maps every day: a huge request that
   * fails must not use up the hint area. */
  if (align_offset <= page && align > page && size <= ((size_t)1 << 30)) {
    int saved_errno = errno;
    void *p = reserve_at_hint(size, align, align_offset, kind, calls);
    if (p != NULL) return p;
    /* A hint the system refused: errno is the way below's to set. */
    errno = saved_errno;
  }
  /* mmap's own alignment is enough: one call. */
  if (align == page && align_offset % page == 0) return map_anonymous(size, kind, calls);
  /* Over-reserve by `align`, then trim both ends: the kernel gives no
   * aligned mmap, and this costs two munmaps only on the slow path. */
  size_t padded = size + align;
  uint8_t *raw = map_anonymous(padded, kind, calls);
  if (raw == NULL) return NULL;
  uintptr_t target = ((uintptr_t)raw + align_offset + align - 1) & ~(uintptr_t)(align - 1);
  uint8_t *base = (uint8_t *)(target - align_offset);
  if (base < raw) base += align;
  size_t head = (size_t)(base - raw);
  size_t tail = padded - head - size;
  add_calls(calls, (head != 0) + (tail != 0));
  if (head != 0) counted_munmap(raw, head);
  if (tail != 0) counted_munmap(base + size, tail);
  return base;
}

void *_brisk_os_reserve(size_t size, size_t align, size_t align_offset, size_t *calls) {
  return reserve_mapping(size, align, align_offset, charged_mapping, calls);
}

static void *reserve_guarded(size_t size, size_t align, size_t align_offset, size_t lead,
                             size_t tail, mapping_kind_t kind, size_t *calls) {
  if (lead == 0 && tail == 0) return reserve_mapping(size, align, align_offset, kind, calls);
  if (size > PTRDIFF_MAX - lead - tail) {
    errno = ENOMEM;
    return NULL;
  }
  /* base + lead + align_offset aligned; lead may be a whole `align`. */
  size_t offset = (align_offset + lead) & (align - 1);
  uint8_t *base = reserve_mapping(lead + size + tail, align, offset, kind, calls);
  if (base == NULL) return NULL;
  if (!_brisk_os_guard(base, lead, calls) || !_brisk_os_guard(base + lead + size, tail, calls)) {
    _brisk_os_release(base, lead + size + tail, calls);
    errno = ENOMEM;
    return NULL;
  }
  return base + lead;
}

void *_brisk_os_reserve_guarded(size_t size, size_t align, size_t align_offset, size_t lead,
                                size_t tail, size_t *calls) {
  return reserve_guarded(size, align, align_offset, lead, tail, charged_mapping, calls);
}

/* vm.overcommit_memory, read once: 2 is the kernel's strict accounting
 * ("never overcommit"), under which MAP_NORESERVE is ignored and every
 * read-write private mapping counts against the commit limit when it is
 * made. -1 until read; a test may set it first (_brisk_os_assume_strict_commit). */
static _Atomic(int) overcommit_mode = -1;

static int read_overcommit_mode(void) {
  int mode = atomic_load_explicit(&overcommit_mode, memory_order_relaxed);
  if (mode >= 0) return mode;
  int saved_errno = errno;
  char text[16] = {0};
  int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, text, sizeof text - 1) <= 0) text[0] = '\0';
    close(fd);
  }
  errno = saved_errno;
  /* Unreadable (no /proc): the kernel's default, the heuristic. */
  mode = text[0] >= '0' && text[0] <= '2' ? text[0] - '0' : 0;
  int unread = -1;
  atomic_compare_exchange_strong_explicit(&overcommit_mode, &unread, mode, memory_order_relaxed,
                                          memory_order_relaxed);
  return atomic_load_explicit(&overcommit_mode, memory_order_relaxed);
}

void _brisk_os_start(void) {
  read_overcommit_mode();
}

void _brisk_os_assume_strict_commit(bool strict) {
  atomic_store_explicit(&overcommit_mode, strict ? 2 : -1, memory_order_relaxed);
  read_overcommit_mode();
}

void *_brisk_os_reserve_pages(size_t size, size_t align, size_t lead, size_t tail,
                              bool *needs_commit, size_t *calls) {
  /* Strict accounting: inaccessible, so nothing is charged until
   * _brisk_os_commit makes a part read-write. Otherwise read-write now and
   * charged never (the kernel charges nothing it has not backed then). */
  static const mapping_kind_t strict = {PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE};
  static const mapping_kind_t uncharged = {PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE};
  *needs_commit = read_overcommit_mode() == 2;
  return reserve_guarded(size, align, 0, lead, tail, *needs_commit ? strict : uncharged, calls);
}

void _brisk_os_release_guarded(void *p, size_t size, size_t lead, size_t tail, size_t *calls) {
  if (p == NULL) return;
  _brisk_os_release((uint8_t *)p - lead, lead + size + tail, calls);
}

void *_brisk_os_reserve_address_space(size_t size, size_t align, size_t *calls) {
  size_t page = _brisk_os_page_size();
  if (align < page) align = page;
  if (size == 0 || size > PTRDIFF_MAX - align) {
    errno = ENOMEM;
    return NULL;
  }
  /* mmap's own alignment is enough when the page is all that is asked. */
  size_t padded = align == page ? size : size + align;
  uint8_t *raw = counted_mmap(NULL, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
  add_calls(calls, 1);
  if (raw == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  uint8_t *base = (uint8_t *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  size_t head = (size_t)(base - raw);
  size_t tail = padded - head - size;
  add_calls(calls, (head != 0) + (tail != 0));
  if (head != 0) counted_munmap(raw, head);
  if (tail != 0) counted_munmap(base + size, tail);
  return base;
}

bool _brisk_os_commit(void *p, size_t size, size_t *calls) {
  if (size == 0) return true;
  add_calls(calls, 1);
  return counted_mprotect(BRISK_OS_COMMIT, p, size, PROT_READ | PROT_WRITE);
}

bool _brisk_os_guard(void *p, size_t size, size_t *calls) {
  if (size == 0) return true;
  add_calls(calls, 1);
  return counted_mprotect(BRISK_OS_OTHER, p, size, PROT_NONE);
}

void _brisk_os_uncommit(void *p, size_t size, size_t *calls) {
  if (size == 0) return;
  int saved_errno = errno;
  add_calls(calls, 2);
  counted_madvise(BRISK_OS_DECOMMIT, p, size, MADV_DONTNEED);
  counted_mprotect(BRISK_OS_DECOMMIT, p, size, PROT_NONE);
  errno = saved_errno;
}

bool _brisk_os_prefault(void *p, size_t size, size_t *calls) {
  if (size == 0) return true;
#ifdef MADV_POPULATE_WRITE
  add_calls(calls, 1);
  if (counted_madvise(BRISK_OS_OTHER, p, size, MADV_POPULATE_WRITE)) return true;
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
  bool ok = !injected_failure(BRISK_OS_OTHER) && mlock(p, size) == 0;
  count_call(BRISK_OS_OTHER, size, ok);
  return ok;
}

void _brisk_os_release(void *p, size_t size, size_t *calls) {
  if (p == NULL || size == 0) return;
  int saved_errno = errno;
  add_calls(calls, 1);
  counted_munmap(p, size);
  errno = saved_errno;
}

bool _brisk_os_decommit(void *p, size_t size, size_t *calls) {
  /* MADV_DONTNEED (not MADV_FREE) so RSS falls at once and the range reads
   * back as zero. */
  if (size == 0) return true;
  int saved_errno = errno;
  add_calls(calls, 1);
  bool ok = counted_madvise(BRISK_OS_DECOMMIT, p, size, MADV_DONTNEED);
  errno = saved_errno;
  return ok;
}

bool _brisk_os_resize(void *p, size_t old_size, size_t new_size, size_t *calls) {
  add_calls(calls, 1);
  bool ok = !injected_failure(BRISK_OS_REMAP) && mremap(p, old_size, new_size, 0) != MAP_FAILED;
  count_call(BRISK_OS_REMAP, new_size, ok);
  if (ok) count_mapped((int64_t)new_size - (int64_t)old_size);
  return ok;
}

bool _brisk_os_move(void *p, size_t old_size, void *new_base, size_t new_size, size_t *calls) {
  add_calls(calls, 1);
  bool ok = !injected_failure(BRISK_OS_REMAP) &&
            mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, new_base) != MAP_FAILED;
  count_call(BRISK_OS_REMAP, new_size, ok);
  /* new_base's reservation was counted when it was made; p's range is gone. */
  if (ok) count_mapped(-(int64_t)old_size);
  return ok;
}

/* ---- the clock, and the one tests hold (os.h) ----
 * test_clock is 0 until a test first holds the clock; then, while held,
 * CLOCK_HELD and the time the clock reads; once let go, how far ahead of
 * the real clock it reads. Relaxed: each reading is one value, and a test
 * moves the clock while the threads that read it wait for it. */
#define CLOCK_HELD ((uint64_t)1 << 63)
static _Atomic(uint64_t) test_clock;

static uint64_t real_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t _brisk_os_now_ms(void) {
  uint64_t test = atomic_load_explicit(&test_clock, memory_order_relaxed);
  if (BRISK_LIKELY(test == 0)) return real_now_ms();
  if (test & CLOCK_HELD) return test & ~CLOCK_HELD;
  return real_now_ms() + test;
}

uint64_t _brisk_os_clock_hold(uint64_t advance_ms) {
  uint64_t now = _brisk_os_now_ms() + advance_ms;
  atomic_store_explicit(&test_clock, now | CLOCK_HELD, memory_order_relaxed);
  return now;
}

void _brisk_os_clock_release(void) {
  uint64_t test = atomic_load_explicit(&test_clock, memory_order_relaxed);
  if (!(test & CLOCK_HELD)) return;
  uint64_t held = test & ~CLOCK_HELD, real = real_now_ms();
  atomic_store_explicit(&test_clock, held > real ? held - real : 0, memory_order_relaxed);
}

void _brisk_os_random(void *buffer, size_t size) {
  uint8_t *out = buffer;
  size_t done = 0;
  while (done < size) {
    ssize_t n = getrandom(out + done, size - done, GRND_NONBLOCK);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    done += (size_t)n;
  }
  if (done == size) return;
  /* No getrandom (an old kernel, a seccomp filter): the kernel's AT_RANDOM
   * bytes, the clock and this library's own address, through a mixer. */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t *at_random = (const uint64_t *)getauxval(AT_RANDOM);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid() ^
               (uint64_t)(uintptr_t)&_brisk_os_random ^ (uint64_t)(uintptr_t)&ts;
  if (at_random != NULL) x ^= at_random[0] ^ (at_random[1] << 1);
  for (; done < size; done++) {
    x += 0x9E3779B97F4A7C15ull; /* splitmix64 */
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out[done] = (uint8_t)(z ^ (z >> 31));
  }
}

bool _brisk_os_try_read(void *dst, const void *src, size_t n) {
  /* The kernel copies from our own address space as it would another
   * process's, and says EFAULT where a page is missing or no-access. */
  struct iovec local = {dst, n};
  struct iovec remote = {(void *)(uintptr_t)src, n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n;
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

/* Descriptor 2's file at load. The state is published after the id with
 * release order: a thread that reads STDERR_OPEN reads the id written. */
enum { STDERR_UNKNOWN, STDERR_OPEN, STDERR_CLOSED };
static brisk_os_file_id_t stderr_file;
static _Atomic(int) stderr_state = STDERR_UNKNOWN;

void _brisk_os_stderr_remember(void) {
  if (atomic_load_explicit(&stderr_state, memory_order_acquire) != STDERR_UNKNOWN) return;
  bool open = _brisk_os_file_id(STDERR_FILENO, &stderr_file);
  atomic_store_explicit(&stderr_state, open ? STDERR_OPEN : STDERR_CLOSED, memory_order_release);
}

bool _brisk_os_stderr_is_ours(void) {
  switch (atomic_load_explicit(&stderr_state, memory_order_acquire)) {
    case STDERR_UNKNOWN: return true;
    case STDERR_OPEN: return _brisk_os_file_is(STDERR_FILENO, &stderr_file);
    default: return false;
  }
}

void _brisk_os_write_warning(const char *message) {
  if (_brisk_os_stderr_is_ours()) _brisk_os_write_error(message);
}

void _brisk_os_abort(void) { abort(); }

void _brisk_assert_failed(const char *condition, const char *file, int line) {
  char message[512];
  snprintf(message, sizeof message, "brisk: internal check failed: %s (%s:%d)\n", condition, file,
           line);
  _brisk_os_write_error(message);
  abort();
}

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

/* Reads a small /sys file into buf (NUL-terminated); false if it cannot. */
static bool read_small_file(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

/* 0 before the first read; then the size, or 1 for "none" (so 0 stays
 * "not read"). Relaxed: every racing reader stores the same value. */
static _Atomic size_t huge_page_size;

static BRISK_COLD size_t read_huge_page_size(void) {
  size_t size = 1;
  char text[128];
  /* "always [madvise] never": the bracketed word is the setting. */
  if (read_small_file("/sys/kernel/mm/transparent_hugepage/enabled", text, sizeof text) &&
      strstr(text, "[never]") == NULL) {
    size = (size_t)2 << 20;
    if (read_small_file("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", text,
                        sizeof text)) {
      unsigned long long value = strtoull(text, NULL, 10);
      if (value != 0 && (value & (value - 1)) == 0) size = (size_t)value;
    }
  }
  atomic_store_explicit(&huge_page_size, size, memory_order_relaxed);
  return size;
}

size_t _brisk_os_huge_page_size(void) {
  size_t size = atomic_load_explicit(&huge_page_size, memory_order_relaxed);
  if (BRISK_UNLIKELY(size == 0)) size = read_huge_page_size();
  return size == 1 ? 0 : size;
}

size_t _brisk_os_resident(void *p, size_t size, size_t *calls) {
  /* One byte per page (bit 0: resident), 4096 pages per call: 16 MiB of
   * 4 KiB pages; counted 8 bytes at a time. */
  uint64_t vec[512];
  size_t page = _brisk_os_page_size(), resident = 0;
  uint8_t *at = p;
  for (size_t left = size; left != 0;) {
    size_t pages = (left + page - 1) / page;
    if (pages > sizeof vec) pages = sizeof vec;
    size_t bytes = pages * page < left ? pages * page : left;
    add_calls(calls, 1);
    memset(vec, 0, (pages + 7) / 8 * 8);
    bool ok = mincore(at, bytes, (unsigned char *)vec) == 0;
    count_call(BRISK_OS_OTHER, bytes, ok);
    /* A range the kernel will not describe counts as resident: the bound
     * it feeds stays an upper bound. */
    if (!ok) {
      resident += pages * page;
    } else {
      for (size_t i = 0; i < (pages + 7) / 8; i++)
        resident += (size_t)__builtin_popcountll(vec[i] & 0x0101010101010101ull) * page;
    }
    at += bytes;
    left -= bytes;
  }
  return resident < size ? resident : size;
}

void _brisk_os_advise_huge_pages(void *p, size_t size, size_t *calls) {
  if (size == 0) return;
#ifdef MADV_HUGEPAGE
  int saved_errno = errno;
  counted_madvise(BRISK_OS_OTHER, p, size, MADV_HUGEPAGE);
  add_calls(calls, 1);
  errno = saved_errno;
#else
  (void)p;
  (void)calls;
#endif
}
