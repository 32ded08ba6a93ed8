// abi_probe: every allocation entry point on edge inputs, one line per
// observation, for a differential check (tests/abi/check_abi.py): the same
// source runs on glibc's malloc (no preload), under LD_PRELOAD of
// libbrisk.so and libbrisk-secure.so, and linked against libbrisk.a and
// libbrisk-secure.a, and every line must read as glibc 2.36's recorded
// line does, or as the checker's table of documented differences says.
//
// A line is "name: observation". Observations never hold addresses or
// sizes that differ between allocators: a result is "NULL" or "ok", errno
// is "errno=unchanged" or the error's name (every call starts with a
// sentinel in errno), alignment is a class (align>=16, align=8 ...), and a
// block is checked writable up to its usable size and, where it moved, for
// its contents.
//
// The first line names the allocator answering (glibc, brisk release or
// brisk secure); the checker requires the one it asked for.
//
// Built at -O1 with -fno-builtin, so that the compiler treats malloc and
// its kin as unknown calls it can neither fold nor remove; sizes pass
// through volatiles, and the results of operator new through escape().
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <new>
#include <string>
#include <vector>

// glibc's own names for its allocator, declared in no public header.
extern "C" {
void *__libc_malloc(size_t size);
void __libc_free(void *p);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
int __libc_mallopt(int option, int value);
}

namespace {

const int kSentinel = 12345; /* in errno before every call; no error has this number */

volatile size_t v_size_max = SIZE_MAX;
volatile size_t v_ptrdiff_max = PTRDIFF_MAX;
volatile size_t v_half = SIZE_MAX / 2 + 1;        /* PTRDIFF_MAX + 1 = 2^63 */
volatile size_t v_beyond_space = size_t{1} << 47; /* the whole user address space */
volatile size_t v_zero = 0;

size_t vs(size_t n) {
  volatile size_t v = n;
  return v;
}

void escape(void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

void line(const char *name, const std::string &what) { printf("%s: %s\n", name, what.c_str()); }

std::string errno_name(int e) {
  switch (e) {
    case kSentinel:
      return "errno=unchanged";
    case 0:
      return "errno=0";
    case ENOMEM:
      return "errno=ENOMEM";
    case EINVAL:
      return "errno=EINVAL";
    default:
      return "errno=" + std::to_string(e);
  }
}

std::string ret_name(int r) {
  switch (r) {
    case 0:
      return "0";
    case ENOMEM:
      return "ENOMEM";
    case EINVAL:
      return "EINVAL";
    default:
      return std::to_string(r);
  }
}

// The largest power of two up to 16 that p is aligned to (16 is what
// x86-64's max_align_t asks; more is noise), and its name.
size_t align_of(const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : 1;
}

std::string align_name(size_t alignment) {
  return alignment == 16 ? "align>=16" : alignment == 8 ? "align=8" : "align<8";
}

std::string align_class(const void *p) { return align_name(align_of(p)); }

// Calls check(i) for the bytes of a usable size the probe writes: all of a
// small block; of a big one (glibc's block aligned to 1 GiB is about that
// big), its first and last 64 KiB and 63 bytes spread between. Stops at the
// first false.
template <typename F>
bool for_probed_bytes(size_t usable, F check) {
  const size_t edge = 65536;
  if (usable <= 4 * edge) {
    for (size_t i = 0; i < usable; i++) {
      if (!check(i)) return false;
    }
    return true;
  }
  for (size_t i = 0; i < edge; i++) {
    if (!check(i) || !check(usable - 1 - i)) return false;
  }
  for (size_t k = 1; k < 64; k++) {
    if (!check(k * (usable / 64))) return false;
  }
  return true;
}

// usable >= size, and the probed bytes up to usable written and read back.
bool usable_and_writable(void *p, size_t size) {
  size_t usable = malloc_usable_size(p);
  if (usable < size) return false;
  unsigned char *bytes = static_cast<unsigned char *>(p);
  for_probed_bytes(usable, [bytes](size_t i) {
    bytes[i] = (unsigned char)(i * 7 + 1);
    return true;
  });
  return for_probed_bytes(usable,
                          [bytes](size_t i) { return bytes[i] == (unsigned char)(i * 7 + 1); });
}

// The alignment class of a block of `size` bytes. A request of 8 bytes or
// less needs no more than 8-byte alignment (no type that fits in it needs
// more); where it got more is chance, so it reads "align>=8" (the sweeps
// below compare the classes such blocks really get).
std::string align_for(const void *p, size_t size) {
  size_t alignment = align_of(p);
  return size <= 8 && alignment >= 8 ? "align>=8" : align_name(alignment);
}

// "NULL errno=..." or "ok <align> usable errno=...": a successful result is
// checked for its alignment class and whole usable size.
std::string describe(void *p, size_t size, int saved_errno) {
  if (p == nullptr) return "NULL " + errno_name(saved_errno);
  std::string s = "ok " + align_for(p, size);
  s += usable_and_writable(p, size) ? " usable" : " NOT-USABLE";
  return s + " " + errno_name(saved_errno);
}

// The same, with the requested alignment checked.
std::string describe_aligned(void *p, size_t size, size_t alignment, int saved_errno) {
  if (p == nullptr) return "NULL " + errno_name(saved_errno);
  bool aligned = alignment == 0 || reinterpret_cast<uintptr_t>(p) % alignment == 0;
  return describe(p, size, saved_errno) + (aligned ? " aligned" : " MISALIGNED");
}

void fill(void *p, size_t n, unsigned seed) {
  unsigned char *b = static_cast<unsigned char *>(p);
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 31 + seed);
}

bool intact(const void *p, size_t n, unsigned seed) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; i++) {
    if (b[i] != (unsigned char)(i * 31 + seed)) return false;
  }
  return true;
}

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

/* ---- malloc and free ---- */

void probe_malloc() {
  errno = kSentinel;
  void *a = malloc(v_zero);
  void *b = malloc(v_zero);
  int e = errno;
  line("malloc(0)",
       std::string(a != nullptr && b != nullptr && a != b ? "ok distinct " : "NOT-DISTINCT ") +
           errno_name(e));
  free(a);
  free(b);

  const size_t sizes[] = {
      1, 8, 9, 16, 24, 100, 4096, 100000, 600000, size_t{1} << 20, size_t{16} << 20};
  for (size_t size : sizes) {
    errno = kSentinel;
    void *p = malloc(vs(size));
    e = errno;
    std::string name = "malloc(" + std::to_string(size) + ")";
    line(name.c_str(), describe(p, size, e));
    errno = kSentinel;
    free(p);
    line(("free(" + name + ")").c_str(), errno_name(errno));
  }

  struct {
    const char *name;
    size_t size;
  } failing[] = {
      {"malloc(SIZE_MAX)", v_size_max},
      {"malloc(SIZE_MAX-4095)", v_size_max - 4095},
      {"malloc(PTRDIFF_MAX+1)", v_half},
      {"malloc(PTRDIFF_MAX)", v_ptrdiff_max},
      {"malloc(PTRDIFF_MAX-4095)", v_ptrdiff_max - 4095},
      {"malloc(2^47)", v_beyond_space},
  };
  for (auto &f : failing) {
    errno = kSentinel;
    void *p = malloc(f.size);
    e = errno;
    line(f.name, describe(p, 0, e));
    free(p);
  }

  errno = kSentinel;
  free(nullptr);
  line("free(NULL)", errno_name(errno));
  errno = kSentinel;
  size_t usable = malloc_usable_size(nullptr);
  line("malloc_usable_size(NULL)", std::to_string(usable) + " " + errno_name(errno));
}

/* The alignment class of every block of a sweep of sizes, all live at once
 * (a fresh page per size would hide a class whose blocks are 8 mod 16):
 * the worst class seen among requests of 1-8 bytes and of 9 bytes or more. */
template <typename Alloc>
void probe_sweep(const char *name, Alloc alloc) {
  std::vector<void *> blocks;
  blocks.reserve(8000);
  size_t small = 16, large = 16;
  bool usable = true;
  for (int round = 0; round < 3; round++) {
    for (size_t size = 1; size <= 70000; size += size < 1024 ? 1 : size < 8192 ? 24 : 376) {
      void *p = alloc(size);
      if (p == nullptr) {
        usable = false;
        continue;
      }
      static_cast<unsigned char *>(p)[size - 1] = 1;
      size_t alignment = align_of(p);
      if (size <= 8 && alignment < small) small = alignment;
      if (size > 8 && alignment < large) large = alignment;
      blocks.push_back(p);
    }
  }
  for (void *p : blocks) free(p);
  line((std::string(name) + " sizes 1-8").c_str(), align_name(small));
  line((std::string(name) + " sizes 9-70000").c_str(),
       align_name(large) + (usable ? "" : " SOME-NULL"));
}

void probe_sweeps() {
  probe_sweep("malloc", [](size_t n) { return malloc(n); });
  probe_sweep("calloc", [](size_t n) { return calloc(1, n); });
  probe_sweep("realloc(NULL)", [](size_t n) { return realloc(nullptr, n); });
  probe_sweep("realloc-grown", [](size_t n) {
    void *p = malloc(n / 2 + 1);
    return realloc(p, n);
  });
  probe_sweep("realloc-shrunk", [](size_t n) {
    void *p = malloc(2 * n + 100);
    return realloc(p, n);
  });
  probe_sweep("memalign(8)", [](size_t n) { return memalign(8, n); });
  probe_sweep("aligned_alloc(8)", [](size_t n) { return aligned_alloc(8, n); });
  probe_sweep("posix_memalign(8)", [](size_t n) {
    void *p = nullptr;
    return posix_memalign(&p, 8, n) == 0 ? p : nullptr;
  });
  probe_sweep("operator new", [](size_t n) { return ::operator new(n); });
}

/* ---- calloc ---- */

void probe_calloc() {
  struct {
    const char *name;
    size_t count, size;
  } cases[] = {
      {"calloc(0,0)", 0, 0},
      {"calloc(0,SIZE_MAX)", 0, v_size_max},
      {"calloc(SIZE_MAX,0)", v_size_max, 0},
      {"calloc(1,1)", 1, 1},
      {"calloc(1000,1000)", 1000, 1000},
      {"calloc(SIZE_MAX,2)", v_size_max, 2},
      {"calloc(2^32,2^32)", size_t{1} << 32, size_t{1} << 32},
      {"calloc(2^62,2)", size_t{1} << 62, 2}, /* PTRDIFF_MAX+1, no overflow */
      {"calloc(1,PTRDIFF_MAX)", 1, v_ptrdiff_max},
      {"calloc(PTRDIFF_MAX,1)", v_ptrdiff_max, 1},
      {"calloc(2^47,1)", v_beyond_space, 1},
  };
  for (auto &c : cases) {
    errno = kSentinel;
    void *p = calloc(vs(c.count), vs(c.size));
    int e = errno;
    line(c.name, describe(p, c.count * c.size, e));
    free(p);
  }
  // Reused memory comes back zeroed, small, large and huge.
  for (size_t size : {size_t{24}, size_t{3000}, size_t{300000}, size_t{5} << 20}) {
    bool zero = true;
    for (int round = 0; round < 4; round++) {
      void *dirty = malloc(size);
      memset(dirty, 0xab, malloc_usable_size(dirty));
      free(dirty);
      unsigned char *clean = static_cast<unsigned char *>(calloc(size, 1));
      for (size_t i = 0; i < size; i++) zero = zero && clean[i] == 0;
      free(clean);
    }
    line(("calloc(" + std::to_string(size) + ",1) after a dirty free").c_str(),
         zero ? "zeroed" : "NOT-ZEROED");
  }
}

/* ---- realloc and reallocarray ---- */

void probe_realloc() {
  errno = kSentinel;
  void *p = realloc(nullptr, v_zero);
  int e = errno;
  line("realloc(NULL,0)", describe(p, 0, e));
  free(p);
  errno = kSentinel;
  p = realloc(nullptr, vs(100));
  e = errno;
  line("realloc(NULL,100)", describe(p, 100, e));
  errno = kSentinel;
  void *q = realloc(p, v_zero);
  e = errno;
  line("realloc(p,0)", std::string(q == nullptr ? "NULL " : "ok ") + errno_name(e));
  free(q);

  // A block moved through every kind: size classes up and down, in and out
  // of the huge blocks; what fits in both sizes must survive every step.
  const size_t chain[] = {
      1,   24, 100, 4000,   70000, 600000, size_t{8} << 20, size_t{40} << 20, size_t{3} << 20,
      500, 10, 1,   300000, 16};
  void *block = nullptr;
  size_t held = 0;
  unsigned seed = 1;
  for (size_t size : chain) {
    errno = kSentinel;
    void *next = realloc(block, vs(size));
    e = errno;
    std::string name = "realloc(" + std::to_string(held) + "->" + std::to_string(size) + ")";
    if (next == nullptr) {
      line(name.c_str(), "NULL " + errno_name(e));
      break;
    }
    size_t kept = held < size ? held : size;
    bool contents = intact(next, kept, seed); /* before the usable check writes the block */
    std::string what = "ok " + align_for(next, size) + (contents ? " contents" : " LOST-CONTENTS") +
                       (usable_and_writable(next, size) ? " usable " : " NOT-USABLE ") +
                       errno_name(e);
    line(name.c_str(), what);
    block = next;
    held = size;
    seed++;
    fill(block, held, seed);
  }

  // A failed realloc leaves the block as it was, small or huge.
  for (size_t start : {size_t{300}, size_t{8} << 20}) {
    void *b = malloc(start);
    fill(b, start, 77);
    struct {
      const char *name;
      size_t size;
    } failing[] = {{"SIZE_MAX", v_size_max},
                   {"PTRDIFF_MAX+1", v_half},
                   {"PTRDIFF_MAX", v_ptrdiff_max},
                   {"2^47", v_beyond_space}};
    for (auto &f : failing) {
      errno = kSentinel;
      void *r = realloc(b, f.size);
      e = errno;
      std::string name = "realloc(" + std::to_string(start) + "->" + f.name + ")";
      if (r != nullptr) {
        line(name.c_str(), "ok");
        b = r;
        continue;
      }
      line(name.c_str(),
           "NULL " + errno_name(e) + (intact(b, start, 77) ? " block-intact" : " BLOCK-CHANGED"));
    }
    free(b);
  }

  // Blocks of the aligned functions move and shrink like any other.
  void *a = memalign(4096, 100);
  fill(a, 100, 9);
  errno = kSentinel;
  a = realloc(a, vs(5000));
  e = errno;
  line("realloc(memalign(4096,100)->5000)",
       a == nullptr ? "NULL"
                    : std::string("ok ") + align_class(a) +
                          (intact(a, 100, 9) ? " contents " : " LOST-CONTENTS ") + errno_name(e));
  free(a);
  a = aligned_alloc(65536, size_t{1} << 20);
  fill(a, 1000, 10);
  errno = kSentinel;
  a = realloc(a, vs(1000));
  e = errno;
  line("realloc(aligned_alloc(65536,1MiB)->1000)",
       a == nullptr ? "NULL"
                    : std::string("ok ") + align_class(a) +
                          (intact(a, 1000, 10) ? " contents " : " LOST-CONTENTS ") + errno_name(e));
  free(a);
}

void probe_reallocarray() {
  errno = kSentinel;
  void *p = reallocarray(nullptr, v_zero, v_zero);
  int e = errno;
  line("reallocarray(NULL,0,0)", describe(p, 0, e));
  free(p);
  errno = kSentinel;
  p = reallocarray(nullptr, v_size_max, 2);
  e = errno;
  line("reallocarray(NULL,SIZE_MAX,2)", describe(p, 0, e));
  errno = kSentinel;
  p = reallocarray(nullptr, size_t{1} << 62, vs(2));
  e = errno;
  line("reallocarray(NULL,2^62,2)", describe(p, 0, e));
  free(p);
  p = reallocarray(nullptr, 10, vs(10));
  fill(p, 100, 3);
  errno = kSentinel;
  void *q = reallocarray(p, vs(size_t{1} << 32), vs(size_t{1} << 32));
  e = errno;
  line("reallocarray(p,2^32,2^32)", std::string(q == nullptr ? "NULL " : "ok ") + errno_name(e) +
                                        (intact(p, 100, 3) ? " block-intact" : " BLOCK-CHANGED"));
  errno = kSentinel;
  q = reallocarray(p, 1000, vs(10));
  e = errno;
  line("reallocarray(p,1000,10)",
       q == nullptr ? "NULL"
                    : std::string("ok ") + (intact(q, 100, 3) ? "contents " : "LOST-CONTENTS ") +
                          errno_name(e));
  errno = kSentinel;
  void *r = reallocarray(q, v_zero, 10);
  e = errno;
  line("reallocarray(p,0,10)", std::string(r == nullptr ? "NULL " : "ok ") + errno_name(e));
  free(r);
}

/* ---- the aligned functions ---- */

void probe_posix_memalign() {
  void *const untouched = reinterpret_cast<void *>(uintptr_t{0x5eed0});
  struct {
    const char *name;
    size_t alignment, size;
  } cases[] = {
      {"posix_memalign(0,64)", 0, 64},
      {"posix_memalign(1,64)", 1, 64},
      {"posix_memalign(2,64)", 2, 64},
      {"posix_memalign(4,64)", 4, 64},
      {"posix_memalign(3,64)", 3, 64},
      {"posix_memalign(12,64)", 12, 64},
      {"posix_memalign(24,64)", 24, 64},
      {"posix_memalign(48,64)", 48, 64},
      {"posix_memalign(4097,64)", 4097, 64},
      {"posix_memalign(2^63+8,1)", v_half + 8, 1},
      {"posix_memalign(SIZE_MAX,1)", v_size_max, 1},
      {"posix_memalign(8,0)", 8, 0},
      {"posix_memalign(8,1)", 8, 1},
      {"posix_memalign(16,1)", 16, 1},
      {"posix_memalign(32,100)", 32, 100},
      {"posix_memalign(4096,0)", 4096, 0},
      {"posix_memalign(4096,5000)", 4096, 5000},
      {"posix_memalign(2MiB,100)", size_t{1} << 21, 100},
      {"posix_memalign(1GiB,1)", size_t{1} << 30, 1},
      {"posix_memalign(2^63,1)", v_half, 1},
      {"posix_memalign(64,SIZE_MAX)", 64, v_size_max},
      {"posix_memalign(64,PTRDIFF_MAX+1)", 64, v_half},
      {"posix_memalign(64,PTRDIFF_MAX)", 64, v_ptrdiff_max},
      {"posix_memalign(64,2^47)", 64, v_beyond_space},
      {"posix_memalign(1GiB,SIZE_MAX-1GiB)", size_t{1} << 30, v_size_max - (size_t{1} << 30)},
  };
  for (auto &c : cases) {
    void *p = untouched;
    errno = kSentinel;
    int r = posix_memalign(&p, vs(c.alignment), vs(c.size));
    int e = errno;
    std::string what = "returns " + ret_name(r);
    if (r == 0) {
      what += " " + describe_aligned(p, c.size, c.alignment, e);
      free(p);
    } else {
      what += p == untouched ? " memptr-untouched " : " MEMPTR-CHANGED ";
      what += errno_name(e);
    }
    line(c.name, what);
  }
}

void probe_aligned_alloc_and_memalign() {
  struct {
    const char *name;
    size_t alignment, size;
  } cases[] = {
      {"(0,64)", 0, 64},
      {"(1,64)", 1, 64},
      {"(2,64)", 2, 64},
      {"(3,64)", 3, 64},
      {"(12,64)", 12, 64},
      {"(24,64)", 24, 64},
      {"(48,64)", 48, 64},
      {"(100,64)", 100, 64},
      {"(4097,64)", 4097, 64},
      {"(16,1)", 16, 1},
      {"(64,0)", 64, 0},
      {"(64,100)", 64, 100},
      {"(4096,1)", 4096, 1},
      {"(65536,70000)", 65536, 70000},
      {"(2MiB,100)", size_t{1} << 21, 100},
      {"(1GiB,1)", size_t{1} << 30, 1},
      {"(2^62+1,1)", (size_t{1} << 62) + 1, 1},
      {"(2^63,1)", v_half, 1},
      {"(2^63+1,1)", v_half + 1, 1},
      {"(SIZE_MAX,1)", v_size_max, 1},
      {"(64,SIZE_MAX)", 64, v_size_max},
      {"(64,PTRDIFF_MAX+1)", 64, v_half},
      {"(64,PTRDIFF_MAX)", 64, v_ptrdiff_max},
      {"(64,2^47)", 64, v_beyond_space},
  };
  for (int which = 0; which < 2; which++) {
    for (auto &c : cases) {
      errno = kSentinel;
      void *p = which == 0 ? aligned_alloc(vs(c.alignment), vs(c.size))
                           : memalign(vs(c.alignment), vs(c.size));
      int e = errno;
      // A non-power of two that succeeds must be aligned to the next power
      // of two (glibc rounds it up).
      size_t want = 1;
      while (want < c.alignment && want != 0) want <<= 1;
      std::string name = std::string(which == 0 ? "aligned_alloc" : "memalign") + c.name;
      line(name.c_str(), describe_aligned(p, c.size, want, e));
      free(p);
    }
  }
}

void probe_valloc_and_pvalloc() {
  const size_t page = page_size();
  const size_t sizes[] = {0, 1, 100, page, page + 1, (size_t{1} << 20) + 3};
  for (size_t size : sizes) {
    errno = kSentinel;
    void *p = valloc(vs(size));
    int e = errno;
    line(("valloc(" + std::to_string(size) + ")").c_str(), describe_aligned(p, size, page, e));
    free(p);
    errno = kSentinel;
    p = pvalloc(vs(size));
    e = errno;
    std::string what = describe_aligned(p, size, page, e);
    // pvalloc rounds the size up to whole pages: every one usable.
    size_t rounded = (size + page - 1) / page * page;
    if (p != nullptr)
      what += malloc_usable_size(p) >= rounded ? " whole-pages" : " NOT-WHOLE-PAGES";
    line(("pvalloc(" + std::to_string(size) + ")").c_str(), what);
    free(p);
  }
  struct {
    const char *name;
    size_t size;
  } failing[] = {{"(SIZE_MAX)", v_size_max},
                 {"(SIZE_MAX-4094)", v_size_max - 4094},
                 {"(PTRDIFF_MAX+1)", v_half},
                 {"(PTRDIFF_MAX)", v_ptrdiff_max},
                 {"(2^47)", v_beyond_space}};
  for (auto &f : failing) {
    errno = kSentinel;
    void *p = valloc(f.size);
    int e = errno;
    line((std::string("valloc") + f.name).c_str(), describe(p, 0, e));
    free(p);
    errno = kSentinel;
    p = pvalloc(f.size);
    e = errno;
    line((std::string("pvalloc") + f.name).c_str(), describe(p, 0, e));
    free(p);
  }
}

/* ---- glibc's __libc_* names: the same allocator as the plain names ---- */

void probe_libc_aliases() {
  errno = kSentinel;
  void *p = __libc_malloc(vs(100));
  int e = errno;
  line("__libc_malloc(100)", describe(p, 100, e));
  free(p); /* a block from one name, freed through the other */
  p = malloc(vs(100));
  errno = kSentinel;
  __libc_free(p);
  line("__libc_free(malloc(100))", errno_name(errno));
  errno = kSentinel;
  __libc_free(nullptr);
  line("__libc_free(NULL)", errno_name(errno));
  errno = kSentinel;
  p = __libc_malloc(v_size_max);
  line("__libc_malloc(SIZE_MAX)", describe(p, 0, errno));
  errno = kSentinel;
  p = __libc_calloc(v_size_max, 2);
  line("__libc_calloc(SIZE_MAX,2)", describe(p, 0, errno));
  errno = kSentinel;
  p = __libc_calloc(vs(10), 10);
  e = errno;
  line("__libc_calloc(10,10)", describe(p, 100, e));
  errno = kSentinel;
  void *q = __libc_realloc(p, v_zero);
  line("__libc_realloc(p,0)", std::string(q == nullptr ? "NULL " : "ok ") + errno_name(errno));
  free(q);
  errno = kSentinel;
  p = __libc_memalign(vs(24), 64);
  e = errno;
  line("__libc_memalign(24,64)", describe_aligned(p, 64, 32, e));
  free(p);
  errno = kSentinel;
  p = __libc_memalign((size_t{1} << 62) + 1, 1);
  line("__libc_memalign(2^62+1,1)", describe(p, 0, errno));
  errno = kSentinel;
  p = __libc_valloc(vs(1));
  e = errno;
  line("__libc_valloc(1)", describe_aligned(p, 1, page_size(), e));
  free(p);
  errno = kSentinel;
  p = __libc_pvalloc(vs(1));
  e = errno;
  line("__libc_pvalloc(1)", describe_aligned(p, page_size(), page_size(), e));
  free(p);
  errno = kSentinel;
  int r = __libc_mallopt(M_MXFAST, 1000);
  line("__libc_mallopt(M_MXFAST,1000)", "returns " + std::to_string(r) + " " + errno_name(errno));
}

/* ---- introspection ---- */

void probe_mallinfo() {
  void *warm = malloc(100); /* a first malloc's setup out of the way */
  escape(warm);
  struct mallinfo2 before = mallinfo2();
  void *p = malloc(vs(200000));
  memset(p, 1, 200000);
  struct mallinfo2 during = mallinfo2();
  line("mallinfo2 after malloc(200000)",
       std::string(during.uordblks >= before.uordblks + 200000 ? "uordblks-grew "
                                                               : "UORDBLKS-SAME ") +
           (during.arena == during.uordblks + during.fordblks ? "arena=uordblks+fordblks"
                                                              : "ARENA!=UORDBLKS+FORDBLKS"));
  free(p);
  struct mallinfo2 after = mallinfo2();
  line("mallinfo2 after free(200000)",
       after.uordblks + 200000 <= during.uordblks ? "uordblks-fell" : "UORDBLKS-SAME");

  // A block in its own mapping: glibc counts it in hblks and hblkhd only;
  // uordblks, arena and fordblks describe the heap apart from those.
  before = mallinfo2();
  const size_t huge = size_t{32} << 20;
  void *h = malloc(vs(huge));
  memset(h, 1, 4096);
  during = mallinfo2();
  bool counted = during.hblks == before.hblks + 1 && during.hblkhd >= before.hblkhd + huge;
  bool apart = during.uordblks < before.uordblks + huge / 2;
  line("mallinfo2 after malloc(32MiB)",
       std::string(counted ? "hblks+1 hblkhd-grew" : "HBLKS-HBLKHD-WRONG") +
           (apart ? " uordblks-apart" : " UORDBLKS-COUNTS-IT") +
           (during.arena == during.uordblks + during.fordblks ? " arena=uordblks+fordblks"
                                                              : " ARENA!=UORDBLKS+FORDBLKS"));
  free(h);
  after = mallinfo2();
  line("mallinfo2 after free(32MiB)", after.hblks == before.hblks && after.hblkhd == before.hblkhd
                                          ? "hblks-hblkhd-back"
                                          : "HBLKS-HBLKHD-NOT-BACK");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  struct mallinfo2 wide = mallinfo2();
  line("mallinfo",
       (size_t)old.hblks == wide.hblks && old.uordblks > 0 ? "matches-mallinfo2" : "DIFFERS");
  free(warm);
}

void probe_malloc_info_and_stats() {
  FILE *f = tmpfile();
  errno = kSentinel;
  int r = malloc_info(0, f);
  int e = errno;
  char text[1 << 16];
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  bool form =
      strncmp(text, "<malloc version=\"1\">", 20) == 0 && strstr(text, "</malloc>\n") != nullptr;
  line("malloc_info(0)",
       "returns " + std::to_string(r) + (form ? " xml " : " NOT-XML ") + errno_name(e));
  errno = kSentinel;
  r = malloc_info(1, f);
  e = errno;
  line("malloc_info(1)", "returns " + ret_name(r) + " " + errno_name(e));
  fclose(f);

  // malloc_stats writes to stderr only.
  FILE *captured = tmpfile();
  fflush(stdout);
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(captured), 2);
  malloc_stats();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  fseek(captured, 0, SEEK_END);
  line("malloc_stats", ftell(captured) > 0 ? "wrote-to-stderr" : "NOTHING-ON-STDERR");
  fclose(captured);
}

void probe_trim() {
  std::vector<void *> blocks;
  for (int i = 0; i < 2000; i++) blocks.push_back(malloc(3000));
  for (void *p : blocks) free(p);
  errno = kSentinel;
  int r = malloc_trim(0);
  line("malloc_trim(0)",
       std::string(r == 0 || r == 1 ? "returns 0-or-1 " : "returns OTHER ") + errno_name(errno));
}

// Last: glibc's mallopt changes how it allocates from here on.
void probe_mallopt() {
  struct {
    const char *name;
    int option, value;
  } cases[] = {
      {"mallopt(M_MXFAST,64)", M_MXFAST, 64},
      {"mallopt(M_MXFAST,1000)", M_MXFAST, 1000},
      {"mallopt(M_MXFAST,-1)", M_MXFAST, -1},
      {"mallopt(M_TRIM_THRESHOLD,1MiB)", M_TRIM_THRESHOLD, 1 << 20},
      {"mallopt(M_TRIM_THRESHOLD,-1)", M_TRIM_THRESHOLD, -1},
      {"mallopt(M_TOP_PAD,65536)", M_TOP_PAD, 65536},
      {"mallopt(M_MMAP_THRESHOLD,1MiB)", M_MMAP_THRESHOLD, 1 << 20},
      {"mallopt(M_MMAP_THRESHOLD,32MiB)", M_MMAP_THRESHOLD, 32 << 20},
      {"mallopt(M_MMAP_THRESHOLD,64MiB)", M_MMAP_THRESHOLD, 64 << 20},
      {"mallopt(M_MMAP_THRESHOLD,-1)", M_MMAP_THRESHOLD, -1},
      {"mallopt(M_MMAP_MAX,65536)", M_MMAP_MAX, 65536},
      {"mallopt(M_CHECK_ACTION,3)", M_CHECK_ACTION, 3},
      {"mallopt(M_PERTURB,0)", M_PERTURB, 0},
      {"mallopt(M_ARENA_TEST,8)", M_ARENA_TEST, 8},
      {"mallopt(M_ARENA_MAX,0)", M_ARENA_MAX, 0},
      {"mallopt(M_ARENA_MAX,4)", M_ARENA_MAX, 4},
      {"mallopt(12345,1)", 12345, 1},
      {"mallopt(-100,1)", -100, 1},
  };
  for (auto &c : cases) {
    errno = kSentinel;
    int r = mallopt(c.option, c.value);
    line(c.name, "returns " + std::to_string(r) + " " + errno_name(errno));
  }
  void *p = malloc(1000);
  line("malloc after mallopt", p != nullptr && usable_and_writable(p, 1000) ? "ok" : "BROKEN");
  free(p);
}

/* ---- a thread's first call ---- */

struct FirstCall {
  const char *name;
  std::string (*run)();
};

std::string first_posix_memalign() {
  void *p = nullptr;
  errno = kSentinel;
  int r = posix_memalign(&p, 64, 100);
  int e = errno;
  std::string s = "returns " + ret_name(r) + " " + describe_aligned(p, 100, 64, e);
  free(p);
  return s;
}
std::string first_calloc() {
  errno = kSentinel;
  void *p = calloc(10, 10);
  int e = errno;
  std::string s = describe(p, 100, e);
  free(p);
  return s;
}
std::string first_free_null() {
  errno = kSentinel;
  free(nullptr);
  int e = errno;
  void *p = malloc(50);
  std::string s = errno_name(e) + " then malloc " + describe(p, 50, kSentinel);
  free(p);
  return s;
}
std::string first_realloc() {
  errno = kSentinel;
  void *p = realloc(nullptr, 5000);
  int e = errno;
  std::string s = describe(p, 5000, e);
  free(p);
  return s;
}
std::string first_huge() {
  errno = kSentinel;
  void *p = malloc(size_t{4} << 20);
  int e = errno;
  std::string s = describe(p, size_t{4} << 20, e);
  errno = kSentinel;
  free(p);
  return s + " free " + errno_name(errno);
}
std::string first_new() {
  errno = kSentinel;
  void *p = ::operator new (200, std::align_val_t{128});
  int e = errno;
  std::string s = describe_aligned(p, 200, 128, e);
  ::operator delete (p, std::align_val_t{128});
  return s;
}

void *run_first_call(void *arg) {
  const FirstCall *call = static_cast<const FirstCall *>(arg);
  std::string *result = new std::string(call->run());
  return result;
}

void probe_first_calls() {
  static const FirstCall calls[] = {
      {"thread's first call posix_memalign(64,100)", first_posix_memalign},
      {"thread's first call calloc(10,10)", first_calloc},
      {"thread's first call free(NULL)", first_free_null},
      {"thread's first call realloc(NULL,5000)", first_realloc},
      {"thread's first call malloc(4MiB)", first_huge},
      {"thread's first call new(200,align 128)", first_new},
  };
  for (const FirstCall &call : calls) {
    pthread_t thread;
    pthread_create(&thread, nullptr, run_first_call, const_cast<FirstCall *>(&call));
    void *result = nullptr;
    pthread_join(thread, &result);
    std::string *s = static_cast<std::string *>(result);
    line(call.name, *s);
    delete s;
  }
}

/* ---- C++ ---- */

int g_handler_calls;
void counting_handler() {
  if (++g_handler_calls == 3) std::set_new_handler(nullptr);
}
struct HandlerError {};
void throwing_handler() {
  g_handler_calls++;
  throw HandlerError();
}
void bad_alloc_handler() {
  g_handler_calls++;
  throw std::bad_alloc();
}

template <typename F>
std::string outcome(F allocate) {
  try {
    void *p = allocate();
    escape(p);
    return p == nullptr ? "nullptr" : "ok";
  } catch (const std::bad_alloc &) {
    return "throws bad_alloc";
  } catch (const HandlerError &) {
    return "throws the handler's exception";
  } catch (...) {
    return "throws something else";
  }
}

void probe_new_delete() {
  void *a = ::operator new(v_zero);
  void *b = ::operator new(v_zero);
  line("new(0)", a != nullptr && b != nullptr && a != b ? "ok distinct" : "NOT-DISTINCT");
  ::operator delete(a);
  ::operator delete(b);
  a = ::operator new[](v_zero);
  line("new[](0)", a != nullptr ? "ok" : "nullptr");
  ::operator delete[](a);

  const size_t sizes[] = {1, 16, 24, 100, 5000, 600000, size_t{8} << 20};
  for (size_t size : sizes) {
    void *p = ::operator new(vs(size));
    line(("new(" + std::to_string(size) + ")").c_str(), describe(p, size, kSentinel));
    ::operator delete(p, size); /* sized */
    p = ::operator new[](vs(size), std::nothrow);
    line(("new[](" + std::to_string(size) + ",nothrow)").c_str(), describe(p, size, kSentinel));
    ::operator delete[](p, size);
  }
  const size_t alignments[] = {32, 64, 256, 4096, size_t{1} << 16, size_t{1} << 21};
  for (size_t alignment : alignments) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{70000}}) {
      std::align_val_t al{alignment};
      void *p = ::operator new(vs(size), al);
      std::string name =
          "new(" + std::to_string(size) + ",align " + std::to_string(alignment) + ")";
      line(name.c_str(), describe_aligned(p, size, alignment, kSentinel));
      ::operator delete(p, size, al);
      p = ::operator new[](vs(size), al, std::nothrow);
      name = "new[](" + std::to_string(size) + ",align " + std::to_string(alignment) + ",nothrow)";
      line(name.c_str(), describe_aligned(p, size, alignment, kSentinel));
      ::operator delete[](p, al, std::nothrow);
    }
  }

  // Sizes that cannot be served, every form.
  struct {
    const char *name;
    size_t size;
  } failing[] = {{"SIZE_MAX", v_size_max}, {"PTRDIFF_MAX+1", v_half}, {"2^47", v_beyond_space}};
  std::align_val_t a64{64};
  for (auto &f : failing) {
    size_t n = f.size;
    std::string s = f.name;
    line(("new(" + s + ")").c_str(), outcome([n] { return ::operator new(n); }));
    line(("new[](" + s + ")").c_str(), outcome([n] { return ::operator new[](n); }));
    line(("new(" + s + ",nothrow)").c_str(),
         outcome([n] { return ::operator new(n, std::nothrow); }));
    line(("new[](" + s + ",nothrow)").c_str(),
         outcome([n] { return ::operator new[](n, std::nothrow); }));
    line(("new(" + s + ",align 64)").c_str(), outcome([n, a64] { return ::operator new(n, a64); }));
    line(("new[](" + s + ",align 64)").c_str(),
         outcome([n, a64] { return ::operator new[](n, a64); }));
    line(("new(" + s + ",align 64,nothrow)").c_str(),
         outcome([n, a64] { return ::operator new(n, a64, std::nothrow); }));
    line(("new[](" + s + ",align 64,nothrow)").c_str(),
         outcome([n, a64] { return ::operator new[](n, a64, std::nothrow); }));
  }

  // The new-handler: called again after each failure until it gives up
  // (here it uninstalls itself on its third call), and its exception is
  // what the throwing forms throw; the nothrow forms return nullptr.
  struct {
    const char *name;
    bool aligned, nothrow;
  } forms[] = {{"new", false, false},
               {"new nothrow", false, true},
               {"new align 64", true, false},
               {"new align 64 nothrow", true, true}};
  for (auto &form : forms) {
    size_t n = v_size_max;
    bool aligned = form.aligned, nothrow = form.nothrow;
    auto allocate = [n, aligned, nothrow, a64]() -> void * {
      if (aligned) return nothrow ? ::operator new(n, a64, std::nothrow) : ::operator new(n, a64);
      return nothrow ? ::operator new(n, std::nothrow) : ::operator new(n);
    };
    g_handler_calls = 0;
    std::set_new_handler(counting_handler);
    std::string r = outcome(allocate);
    line((std::string(form.name) + "(SIZE_MAX) with a handler that gives up on its 3rd call")
             .c_str(),
         r + ", handler called " + std::to_string(g_handler_calls) + "x");
    g_handler_calls = 0;
    std::set_new_handler(throwing_handler);
    r = outcome(allocate);
    line((std::string(form.name) + "(SIZE_MAX) with a handler that throws its own").c_str(),
         r + ", handler called " + std::to_string(g_handler_calls) + "x");
    g_handler_calls = 0;
    std::set_new_handler(bad_alloc_handler);
    r = outcome(allocate);
    line((std::string(form.name) + "(SIZE_MAX) with a handler that throws bad_alloc").c_str(),
         r + ", handler called " + std::to_string(g_handler_calls) + "x");
    std::set_new_handler(nullptr);
  }

  // An alignment that is not a power of two: libstdc++ throws bad_alloc
  // (the nothrow form returns nullptr) rather than hand out a block.
  std::align_val_t a24{24};
  line("new(100,align 24)", outcome([a24] { return ::operator new(100, a24); }));
  line("new(100,align 24,nothrow)",
       outcome([a24] { return ::operator new(100, a24, std::nothrow); }));
  std::align_val_t a0{0};
  line("new(100,align 0)", outcome([a0] { return ::operator new(100, a0); }));
  line("new(100,align 0,nothrow)", outcome([a0] { return ::operator new(100, a0, std::nothrow); }));

  // An alignment of 16 for a size of 8 bytes or less, many blocks live at
  // once (one block could be 16-aligned by chance).
  for (size_t size : {size_t{0}, size_t{1}, size_t{8}}) {
    std::align_val_t a16{16};
    std::vector<void *> blocks;
    bool aligned = true;
    for (int i = 0; i < 64; i++) {
      void *p = ::operator new(vs(size), a16);
      aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
      blocks.push_back(p);
    }
    for (void *p : blocks) ::operator delete(p, a16);
    line(("new(" + std::to_string(size) + ",align 16) x64").c_str(),
         aligned ? "all aligned" : "SOME-MISALIGNED");
  }

  // delete of nullptr, every form.
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete (nullptr, size_t{16});
  ::operator delete[](nullptr, size_t{16});
  ::operator delete(nullptr, std::nothrow);
  ::operator delete[](nullptr, std::nothrow);
  ::operator delete(nullptr, a64);
  ::operator delete[](nullptr, a64);
  ::operator delete (nullptr, size_t{16}, a64);
  ::operator delete[](nullptr, size_t{16}, a64);
  ::operator delete(nullptr, a64, std::nothrow);
  ::operator delete[](nullptr, a64, std::nothrow);
  line("delete(nullptr), every form", "returns");
}

}  // namespace

// Defined when brisk is linked in or preloaded (a weak reference binds to
// the preloaded library's definition), null on glibc's malloc alone.
extern "C" void *brisk_malloc(size_t size) __attribute__((weak));

int main() {
  // Who answers: brisk exports brisk_malloc; glibc does not. The secure
  // build's malloc_usable_size is the requested size (100 is no class's).
  bool brisk = &brisk_malloc != nullptr || dlsym(RTLD_DEFAULT, "brisk_malloc") != nullptr;
  void *p = malloc(vs(100));
  bool secure = brisk && malloc_usable_size(p) == 100;
  free(p);
  line("allocator", !brisk ? "glibc" : secure ? "brisk secure" : "brisk release");
  setvbuf(stdout, nullptr, _IOLBF, 0);
  probe_malloc();
  probe_sweeps();
  probe_calloc();
  probe_realloc();
  probe_reallocarray();
  probe_posix_memalign();
  probe_aligned_alloc_and_memalign();
  probe_valloc_and_pvalloc();
  probe_libc_aliases();
  probe_first_calls();
  probe_new_delete();
  probe_mallinfo();
  probe_malloc_info_and_stats();
  probe_trim();
  probe_mallopt();
  return 0;
}
