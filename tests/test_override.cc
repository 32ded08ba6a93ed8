// The libc names (malloc, posix_memalign, pvalloc, ...) when brisk is linked
// in statically: they must be brisk's and behave exactly as glibc/POSIX say.
#include <brisk.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::pattern_intact;

namespace {

// Read through volatiles so the compiler neither warns about nor folds calls
// whose size it could otherwise see is absurd.
volatile size_t g_size_max = SIZE_MAX;
volatile size_t g_half_plus_one = SIZE_MAX / 2 + 1;
volatile size_t g_64_tib = size_t{1} << 46;

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

TEST(BriskOverride, MallocIsBrisk) {
  void *p = malloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(brisk_usable_size(p), 100u);
  EXPECT_EQ(malloc_usable_size(p), brisk_usable_size(p));
  brisk_free(p);
  // glibc's free would abort on a pointer it never handed out.
  void *q = brisk_malloc(10);
  ASSERT_NE(q, nullptr);
  free(q);
  void *r = calloc(4, 25);
  ASSERT_NE(r, nullptr);
  EXPECT_GE(brisk_usable_size(r), 100u);
  free(r);
}

TEST(BriskOverride, MallocZeroIsUniqueAndFreeable) {
  void *a = malloc(0);
  void *b = malloc(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  free(a);
  free(b);
}

// Neighbouring blocks of the smallest sizes freed in turn, by malloc and
// calloc, the first of each pair first: in the secure build a free block's
// link and free tag must stay off the header of the block after it (its
// last 8 bytes), which a free of that block checks.
TEST(BriskOverride, SmallestBlocksFreeBesideLiveNeighbours) {
  for (size_t size : {0, 1, 8, 16}) {
    SCOPED_TRACE(size);
    std::vector<void *> blocks;
    for (int i = 0; i < 64; i++) blocks.push_back(i % 2 ? calloc(1, size) : malloc(size));
    for (void *p : blocks) ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < blocks.size(); i += 2) free(blocks[i]);
    for (size_t i = 1; i < blocks.size(); i += 2) free(blocks[i]);
  }
}

TEST(BriskOverride, UnservableSizesFailWithEnomem) {
  for (size_t size : {g_size_max, g_half_plus_one, g_64_tib}) {
    SCOPED_TRACE(size);
    errno = 0;
    EXPECT_EQ(malloc(size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(calloc(1, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(aligned_alloc(64, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(memalign(64, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(valloc(size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(pvalloc(size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
}

// The largest alignment with the largest sizes: the size plus the alignment
// (and the secure build's padding) is above SIZE_MAX. The secure build once
// wrapped that sum to a few bytes, took a small block and wrote its header
// at the block's start rounded up to 2^63: a segmentation fault.
TEST(BriskOverride, LargestAlignmentWithLargestSizesFailsWithEnomem) {
  const size_t alignment = size_t{1} << 63;
  const size_t max = g_half_plus_one - 1;   // PTRDIFF_MAX
  for (size_t size : {max, max - 7, max - 15, max - 16, max - 64}) {
    SCOPED_TRACE(size);
    errno = 0;
    EXPECT_EQ(aligned_alloc(alignment, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(memalign(alignment, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    void *out = nullptr;
    EXPECT_EQ(posix_memalign(&out, alignment, size), ENOMEM);
    EXPECT_EQ(out, nullptr);
  }
}

TEST(BriskOverride, CallocAndReallocarrayOverflowFailWithEnomem) {
  const size_t half = g_size_max / 2;
  errno = 0;
  EXPECT_EQ(calloc(half, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(reallocarray(nullptr, half, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);

  void *p = reallocarray(nullptr, 10, 10);
  ASSERT_NE(p, nullptr);
  const uint64_t seed = block_seed(p, 100);
  fill_pattern(p, 100, seed);
  errno = 0;
  EXPECT_EQ(reallocarray(p, half, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_TRUE(pattern_intact(p, 100, seed));
  void *q = reallocarray(p, 1000, 10);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(pattern_intact(q, 100, seed));
  EXPECT_GE(malloc_usable_size(q), 10000u);
  free(q);
}

TEST(BriskOverride, FailedReallocLeavesBlockIntact) {
  void *p = malloc(300);
  ASSERT_NE(p, nullptr);
  const uint64_t seed = block_seed(p, 300);
  fill_pattern(p, 300, seed);
  for (size_t size : {g_size_max, g_half_plus_one, g_64_tib}) {
    errno = 0;
    EXPECT_EQ(realloc(p, size), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_TRUE(pattern_intact(p, 300, seed));
  }
  free(p);
}

TEST(BriskOverride, ReallocEdgeCases) {
  void *p = realloc(nullptr, 50);
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, 50);
  EXPECT_EQ(realloc(p, 0), nullptr);
  free(nullptr);
  EXPECT_EQ(malloc_usable_size(nullptr), 0u);
}

TEST(BriskOverride, CallocZeroesReusedBlocks) {
  for (size_t size : {size_t{24}, size_t{1000}, size_t{50000}, 5 * kMiB}) {
    for (int round = 0; round < 8; round++) {
      void *dirty = malloc(size);
      ASSERT_NE(dirty, nullptr);
      std::memset(dirty, 0xAB, malloc_usable_size(dirty));
      free(dirty);
      void *clean = calloc(size, 1);
      ASSERT_NE(clean, nullptr);
      EXPECT_TRUE(brisk_test::all_bytes_are(clean, size, 0)) << "size " << size;
      free(clean);
    }
  }
}

// alignment, then size: both brisk/malloc.h and the issue promise up to 4 MiB.
void check_aligned(void *p, size_t alignment, size_t size) {
  ASSERT_NE(p, nullptr) << "alignment " << alignment << " size " << size;
  EXPECT_TRUE(is_aligned(p, alignment)) << p << " alignment " << alignment;
  const size_t usable = malloc_usable_size(p);
  EXPECT_GE(usable, size);
  std::memset(p, 0x11, usable);
  free(p);
}

// Sizes at the edge between the largest size class (512 KiB) and huge
// blocks, and huge ones, through every allocation function: the whole block
// is usable, and resizing and freeing it is not taken for an overflow (the
// secure build pads small blocks by 16 bytes and puts a canary after a huge
// block's requested size).
TEST(BriskOverride, BlocksAroundTheLargestClassAreWhollyUsable) {
  const size_t kLargest = 512 * 1024;
  const size_t sizes[] = {kLargest - 16, kLargest - 8, kLargest - 1, kLargest,
                          kLargest + 1,  1 << 20,     (1 << 22) + 3};
  for (size_t size : sizes) {
    SCOPED_TRACE(size);
    auto *c = static_cast<unsigned char *>(calloc(1, size));
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c[0] | c[size / 2] | c[size - 1], 0);
    c[size - 1] = 1;
    EXPECT_GE(malloc_usable_size(c), size);
    free(c);
    auto *m = static_cast<unsigned char *>(malloc(size));
    ASSERT_NE(m, nullptr);
    m[size - 1] = 2;
    m[size / 2] = 5;
    m = static_cast<unsigned char *>(realloc(m, 2 * size));
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m[size - 1], 2);
    m[2 * size - 1] = 3;
    m = static_cast<unsigned char *>(realloc(m, size / 2 + 1));
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m[size / 2], 5) << "realloc lost bytes";
    free(m);
    auto *a = static_cast<unsigned char *>(aligned_alloc(4096, size));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
    a[size - 1] = 4;
    EXPECT_GE(malloc_usable_size(a), size);
    free(a);
  }
}

TEST(BriskOverride, AlignedAllocAndMemalignHonourPowersOfTwo) {
  for (size_t alignment = 1; alignment <= 4 * kMiB; alignment *= 2) {
    for (size_t size : {size_t{1}, size_t{100}, 3 * alignment, size_t{70000}}) {
      check_aligned(aligned_alloc(alignment, size), alignment, size);
      check_aligned(memalign(alignment, size), alignment, size);
    }
  }
}

TEST(BriskOverride, AlignedAllocRejectsNonPowerOfTwo) {
  // C17 (DR 460) and glibc 2.38+: an unsupported alignment gives NULL.
  for (size_t alignment : {size_t{0}, size_t{3}, size_t{24}, size_t{1000}}) {
    errno = 0;
    EXPECT_EQ(aligned_alloc(alignment, 64), nullptr) << alignment;
    EXPECT_EQ(errno, EINVAL) << alignment;
  }
}

// glibc's memalign rounds an alignment that is not a power of two up to
// the next one; only one above 2^63 has none (EINVAL), and one rounded up
// to 2^63 fails as every block aligned so does (ENOMEM).
TEST(BriskOverride, MemalignRoundsUpAsGlibcDoes) {
  check_aligned(memalign(24, 100), 32, 100);
  check_aligned(memalign(4097, 100), 8192, 100);
  errno = 0;
  EXPECT_EQ(memalign((size_t{1} << 62) + 1, 1), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(memalign(g_half_plus_one, 1), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(memalign(g_half_plus_one + 1, 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// The error is the return value; errno is ENOMEM as well when memory runs
// out, and untouched for a bad alignment, as glibc leaves it.
TEST(BriskOverride, PosixMemalignErrnoAsGlibc) {
  void *p = nullptr;
  errno = 0;
  EXPECT_EQ(posix_memalign(&p, 24, 64), EINVAL);
  EXPECT_EQ(errno, 0);
  EXPECT_EQ(posix_memalign(&p, 64, g_size_max), ENOMEM);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(p, nullptr);
}

TEST(BriskOverride, PosixMemalign) {
  // Not a power of two, or a power of two below sizeof(void *).
  for (size_t alignment : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{24},
                           size_t{48}, size_t{4097}}) {
    void *p = nullptr;
    EXPECT_EQ(posix_memalign(&p, alignment, 64), EINVAL) << alignment;
  }
  void *p = nullptr;
  EXPECT_EQ(posix_memalign(&p, 64, g_size_max), ENOMEM);
  EXPECT_EQ(posix_memalign(&p, 64, g_64_tib), ENOMEM);
  for (size_t alignment = sizeof(void *); alignment <= 4 * kMiB; alignment *= 2) {
    for (size_t size : {size_t{0}, size_t{8}, size_t{1000}, 2 * alignment + 1}) {
      void *q = nullptr;
      ASSERT_EQ(posix_memalign(&q, alignment, size), 0) << alignment << " " << size;
      check_aligned(q, alignment, size);
    }
  }
}

TEST(BriskOverride, VallocIsPageAligned) {
  const size_t page = page_size();
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, page, page + 1, kMiB + 3}) {
    check_aligned(valloc(size), page, size);
  }
}

TEST(BriskOverride, PvallocRoundsUpToPages) {
  const size_t page = page_size();
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, page, page + 1, kMiB + 3}) {
    void *p = pvalloc(size);
    ASSERT_NE(p, nullptr) << size;
    const size_t rounded = size == 0 ? page : (size + page - 1) / page * page;
    EXPECT_GE(malloc_usable_size(p), rounded) << size;
    check_aligned(p, page, rounded);
  }
}

TEST(BriskOverride, UsableSizeIsWritable) {
  for (size_t size = 1; size < 20 * kMiB; size = size * 3 + 1) {
    void *p = malloc(size);
    ASSERT_NE(p, nullptr);
    const size_t usable = malloc_usable_size(p);
    EXPECT_GE(usable, size);
    fill_pattern(p, usable, block_seed(p, usable));
    EXPECT_TRUE(pattern_intact(p, usable, block_seed(p, usable)));
    escape(p);
    free(p);
  }
}

// mallopt returns what glibc's returns: 0 only for M_MXFAST above glibc's
// largest fast-bin size (160 bytes on 64-bit) or negative.
TEST(BriskOverride, MalloptReturnsAsGlibc) {
  EXPECT_EQ(mallopt(M_MXFAST, 64), 1);
  EXPECT_EQ(mallopt(M_MXFAST, 160), 1);
  EXPECT_EQ(mallopt(M_MXFAST, 161), 0);
  EXPECT_EQ(mallopt(M_MXFAST, -1), 0);
  EXPECT_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
  EXPECT_EQ(mallopt(12345, 1), 1);
}

// mallopt(M_TRIM_THRESHOLD, n) bounds the bytes of free pages a heap keeps
// backed; glibc stores n in a size_t, so a program passing -1 says "never
// trim": no bound, and free pages wait for the purge delay. Under a bound
// of 0 a heap keeps none, which shows the -1 was taken.
TEST(BriskOverride, MalloptTrimThresholdMinusOneKeepsFreePages) {
  BRISK_SKIP_IF(brisk_test::purge_at_once("no free page waits, whatever the bound"));
  // About 5 pages of 4 MiB (448 KiB blocks), emptied: all but the class's
  // head page go back to their segment. The last one to go waits for the
  // purge delay, which nothing here checks again before the snapshot.
  auto free_pages_after_cycle = [] {
    std::vector<void *> blocks;
    for (int i = 0; i < 40; i++) blocks.push_back(malloc(400 << 10));
    for (void *p : blocks) free(p);
    return brisk_test::stats_snapshot().general.pages_committed;
  };
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 0), 1);
  brisk_collect(true);
  EXPECT_EQ(free_pages_after_cycle(), 0u) << "a bound of 0 kept free pages";
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, -1), 1);
  EXPECT_GE(free_pages_after_cycle(), 1u) << "mallopt(M_TRIM_THRESHOLD, -1) was ignored";
  ASSERT_EQ(mallopt(M_TRIM_THRESHOLD, 32 << 20), 1);  // brisk's default again
}

// glibc's malloc_info returns the error EINVAL for options other than 0.
TEST(BriskOverride, MallocInfoRejectsOptionsAsGlibc) {
  errno = 0;
  EXPECT_EQ(malloc_info(1, stdout), EINVAL);
  EXPECT_EQ(errno, 0);
}

// As glibc's: a block in its own mapping shows in hblks and hblkhd only.
TEST(BriskOverride, MallinfoCountsHugeBlocksApart) {
  struct mallinfo2 before = mallinfo2();
  const size_t huge = 32 * kMiB;
  void *p = malloc(huge);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 4096);
  struct mallinfo2 during = mallinfo2();
  EXPECT_EQ(during.hblks, before.hblks + 1);
  EXPECT_GE(during.hblkhd, before.hblkhd + huge);
  EXPECT_LT(during.uordblks, before.uordblks + kMiB);
  EXPECT_EQ(during.arena, during.uordblks + during.fordblks);
  free(p);
  struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(after.hblks, before.hblks);
  EXPECT_EQ(after.hblkhd, before.hblkhd);
}

// mallinfo2, mallinfo and malloc_info in a child forked while another
// thread is inside one of them: the lock their shared snapshot takes may be
// inherited held (the child hung in mallinfo2 before).
TEST(BriskOverride, IntrospectionWorksInAChildForkedDuringIt) {
  std::atomic<bool> stop{false};
  std::thread poller([&stop] {
    while (!stop.load()) {
      struct mallinfo2 m = mallinfo2();
      escape(&m);
    }
  });
  int hung = 0, failed = 0;
  for (int i = 0; i < 50 && hung + failed == 0; i++) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(5);  // a child that hangs ends with SIGALRM (and the loop with it)
      struct mallinfo2 m2 = mallinfo2();
      escape(&m2);
      FILE *null = fopen("/dev/null", "w");
      int rc = null != nullptr ? malloc_info(0, null) : -1;
      _exit(rc == 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) hung++;
    else if (WEXITSTATUS(status) != 0) failed++;
  }
  stop = true;
  poller.join();
  EXPECT_EQ(hung, 0) << "children hung in the statistics' lock";
  EXPECT_EQ(failed, 0);
}

// malloc_trim gives back what the region allocators' mapping cache holds
// (it is brisk_collect(true)), and the statistics say so.
TEST(BriskOverride, MallocTrimEmptiesTheRegionCache) {
  BRISK_SKIP_IF(brisk_test::region_cache_off("nothing for malloc_trim to empty"));
  brisk_arena_t *arena = brisk_arena_create(16 * kMiB);
  ASSERT_NE(arena, nullptr);
  std::memset(brisk_arena_alloc(arena, 4096, 0), 1, 4096);
  brisk_arena_destroy(arena);
  brisk_stats_t before = brisk_test::stats_snapshot();
  ASSERT_GE(before.region_cache.entries, 1u);
  EXPECT_EQ(malloc_trim(0), 1);
  brisk_stats_t after = brisk_test::stats_snapshot();
  EXPECT_EQ(after.region_cache.entries, 0u);
  EXPECT_EQ(after.region_cache.bytes, 0u);
  EXPECT_EQ(after.region_cache.flushed - before.region_cache.flushed, before.region_cache.entries);
  EXPECT_EQ(after.region_cache.flushed_bytes - before.region_cache.flushed_bytes,
            before.region_cache.bytes);
  EXPECT_GE(before.os.bytes_mapped - after.os.bytes_mapped, before.region_cache.bytes);
}

// bytes_requested counts the sizes asked for, not what brisk pads them to:
// the secure build's 16 bytes of canary and header (and malloc(0) served as
// 1), an aligned request's slack or rounding, in every kind of block (the
// direct table, the generic path, huge blocks, aligned ones, and a request
// just under the largest class that the secure build's padding makes huge).
TEST(BriskOverride, BytesRequestedCountsTheSizesAskedFor) {
  struct Case {
    const char *what;
    size_t size;
    int how;  // 0 malloc, 1 calloc, 2 posix_memalign(64), 3 aligned_alloc(4096), 4 realloc(NULL)
  };
  const Case cases[] = {
      {"malloc(40)", 40, 0},           {"malloc(2000)", 2000, 0},
      {"malloc(0)", 0, 0},             {"calloc(1, 40)", 40, 1},
      {"posix_memalign(64, 100)", 100, 2}, {"aligned_alloc(4096, 100)", 100, 3},
      {"posix_memalign(64, 600000)", 600000, 2}, {"malloc(512 KiB - 4)", (512 << 10) - 4, 0},
      {"realloc(NULL, 300)", 300, 4},
  };
  for (const Case &c : cases) {
    // A fresh thread: its heap starts with nothing pending.
    std::thread([&c] {
      free(malloc(8));  // the thread's heap
      const int kCount = 20;
      std::vector<void *> blocks(kCount);
      brisk_stats_t before = brisk_test::stats_snapshot();
      for (void *&p : blocks) {
        switch (c.how) {
          case 0: p = malloc(c.size); break;
          case 1: p = calloc(1, c.size); break;
          case 2: ASSERT_EQ(posix_memalign(&p, 64, c.size), 0); break;
          case 3: p = aligned_alloc(4096, c.size); break;
          default: p = realloc(nullptr, c.size); break;
        }
        ASSERT_NE(p, nullptr);
      }
      brisk_stats_t after = brisk_test::stats_snapshot();
      EXPECT_EQ(after.general.bytes_requested - before.general.bytes_requested, kCount * c.size)
          << c.what;
      for (void *p : blocks) free(p);
    }).join();
  }
}

// A library opened with RTLD_DEEPBIND (php opens every extension so) looks
// symbols up in its own dependencies first: its malloc and free would be
// libc's while the program, and libc's own strdup, use brisk's, and a block
// crossing between them would reach the wrong allocator (glibc's free of a
// brisk block crashes, or corrupts glibc's heap). brisk's dlopen drops the
// flag, so the library's calls are brisk's too.
TEST(BriskOverride, LibraryOpenedWithDeepBindUsesBrisk) {
  void *library = dlopen(BRISK_DEEPBIND_PLUGIN, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  ASSERT_NE(library, nullptr) << dlerror();
  using malloc_fn = void *(*)(size_t);
  auto plugin_malloc = reinterpret_cast<malloc_fn (*)()>(dlsym(library, "deepbind_plugin_malloc"));
  auto plugin_copy = reinterpret_cast<char *(*)(const char *)>(dlsym(library, "deepbind_plugin_copy"));
  auto plugin_free = reinterpret_cast<void (*)(void *)>(dlsym(library, "deepbind_plugin_free"));
  auto plugin_strdup_length =
      reinterpret_cast<size_t (*)(const char *)>(dlsym(library, "deepbind_plugin_strdup_length"));
  ASSERT_TRUE(plugin_malloc && plugin_copy && plugin_free && plugin_strdup_length);
  // Checked first: the blocks below would crash the test on the wrong one.
  ASSERT_EQ(reinterpret_cast<void *>(plugin_malloc()), reinterpret_cast<void *>(&malloc));
  char *copy = plugin_copy("deep");
  ASSERT_NE(copy, nullptr);
  EXPECT_STREQ(copy, "deep");
  EXPECT_GE(brisk_usable_size(copy), 5u);
  free(copy);
  void *block = malloc(100);
  ASSERT_NE(block, nullptr);
  plugin_free(block);
  EXPECT_EQ(plugin_strdup_length("bound"), 5u);
  EXPECT_EQ(dlclose(library), 0);
}

// A lookup in a library's handle finds that library's definition, whatever
// the process interposes: dlsym(dlopen("libc.so.6"), "free") was glibc's
// free (Python's ctypes.CDLL("libc.so.6").free), which crashed on the
// block libc's strdup had from brisk. brisk's dlsym answers its own
// function where it would answer libc's, and leaves every other answer.
TEST(BriskOverride, LookupsInLibcsHandleGiveBrisksFunctions) {
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr) << dlerror();
  // Checked first: the calls below would crash on glibc's functions.
  ASSERT_EQ(dlsym(libc, "free"), reinterpret_cast<void *>(&free));
  EXPECT_EQ(dlsym(libc, "malloc"), reinterpret_cast<void *>(&malloc));
  EXPECT_EQ(dlsym(libc, "realloc"), reinterpret_cast<void *>(&realloc));
  EXPECT_EQ(dlsym(libc, "posix_memalign"), reinterpret_cast<void *>(&posix_memalign));
  EXPECT_EQ(dlsym(libc, "malloc_usable_size"), reinterpret_cast<void *>(&malloc_usable_size));
  EXPECT_EQ(dlsym(libc, "malloc_trim"), reinterpret_cast<void *>(&malloc_trim));
  EXPECT_EQ(dlsym(libc, "__libc_free"), dlsym(RTLD_DEFAULT, "__libc_free"));
  auto libc_free = reinterpret_cast<void (*)(void *)>(dlsym(libc, "free"));
  char *copy = strdup("libc's strdup");
  ASSERT_NE(copy, nullptr);
  libc_free(copy);
  // Names brisk does not define: libc's own answer, its error included.
  void *libc_strdup = dlsym(libc, "strdup");
  EXPECT_NE(libc_strdup, nullptr);
  EXPECT_EQ(dlerror(), nullptr);
  EXPECT_EQ(dlsym(libc, "brisk_no_such_function"), nullptr);
  EXPECT_NE(dlerror(), nullptr);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "malloc"), reinterpret_cast<void *>(&malloc));
  EXPECT_EQ(dlclose(libc), 0);
  // Another library's own definition of an allocation name stays its own;
  // a name it leaves to libc is brisk's.
  void *plugin = dlopen(BRISK_DEEPBIND_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(plugin, nullptr) << dlerror();
  auto plugin_pvalloc = reinterpret_cast<void *(*)(size_t)>(dlsym(plugin, "pvalloc"));
  ASSERT_NE(plugin_pvalloc, nullptr);
  EXPECT_EQ(plugin_pvalloc(1), reinterpret_cast<void *>(0x5eed));
  EXPECT_EQ(dlsym(plugin, "malloc"), reinterpret_cast<void *>(&malloc));
  EXPECT_EQ(dlclose(plugin), 0);
}

// The same lookups at a version: dlvsym(dlopen("libc.so.6"), "malloc",
// "GLIBC_2.2.5") was glibc's malloc, and so was dlvsym(RTLD_DEFAULT, ...),
// since glibc's dlvsym takes only a definition of the version asked for
// and brisk's have none. brisk's dlvsym answers its own function where
// libc's definition at that version is the answer.
TEST(BriskOverride, LookupsAtAVersionGiveBrisksFunctions) {
  // x86-64's first glibc version, the only one malloc and free have.
  const char *const kVersion = "GLIBC_2.2.5";
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr) << dlerror();
  // Checked first: the call below would crash on glibc's free.
  ASSERT_EQ(dlvsym(libc, "free", kVersion), reinterpret_cast<void *>(&free));
  EXPECT_EQ(dlvsym(libc, "malloc", kVersion), reinterpret_cast<void *>(&malloc));
  EXPECT_EQ(dlvsym(libc, "realloc", kVersion), reinterpret_cast<void *>(&realloc));
  EXPECT_EQ(dlvsym(libc, "malloc_usable_size", kVersion),
            reinterpret_cast<void *>(&malloc_usable_size));
  EXPECT_EQ(dlvsym(RTLD_DEFAULT, "free", kVersion), reinterpret_cast<void *>(&free));
  EXPECT_EQ(dlvsym(RTLD_DEFAULT, "calloc", kVersion), reinterpret_cast<void *>(&calloc));
  auto libc_free = reinterpret_cast<void (*)(void *)>(dlvsym(libc, "free", kVersion));
  char *copy = strdup("libc's strdup");
  ASSERT_NE(copy, nullptr);
  libc_free(copy);
  // Names brisk does not define, and versions libc lacks: libc's own
  // answer, its error included.
  EXPECT_EQ(dlvsym(libc, "strdup", kVersion), dlsym(libc, "strdup"));
  EXPECT_EQ(dlerror(), nullptr);
  EXPECT_EQ(dlvsym(libc, "malloc", "GLIBC_0.0"), nullptr);
  EXPECT_NE(dlerror(), nullptr);
  EXPECT_EQ(dlvsym(RTLD_DEFAULT, "malloc", "GLIBC_0.0"), nullptr);
  EXPECT_NE(dlerror(), nullptr);
  // dlsym and dlopen go on finding libc's through dlvsym.
  EXPECT_EQ(dlvsym(libc, "dlsym", "GLIBC_2.34"), dlsym(libc, "dlsym"));
  EXPECT_EQ(dlclose(libc), 0);
  // In another library's handle, a name it leaves to libc is brisk's. So
  // is one it defines (pvalloc): its definition has no version, which
  // glibc's dlvsym passes over for libc's.
  void *plugin = dlopen(BRISK_DEEPBIND_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(plugin, nullptr) << dlerror();
  EXPECT_EQ(dlvsym(plugin, "malloc", kVersion), reinterpret_cast<void *>(&malloc));
  EXPECT_EQ(dlvsym(plugin, "pvalloc", kVersion), reinterpret_cast<void *>(&pvalloc));
  EXPECT_EQ(dlclose(plugin), 0);
}

#ifdef BRISK_OPTIONS_READER
// How tests/linked/options_reader.c ended: its exit status, what it printed,
// and the errno of an exec (or of the change of user) that failed.
struct ReaderRun {
  int setup_errno = 0;
  int status = -1;
  std::string out, err;
};

std::string file_text(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `program` with `environment` only, as root or as uid and gid 65534
// (nobody), its stdout and stderr into files in `dir`.
ReaderRun run_reader(const std::string &dir, const std::string &program,
                     std::vector<std::string> environment, bool as_nobody) {
  ReaderRun run;
  std::string out_path = dir + "/out", err_path = dir + "/err";
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int report[2];
  if (out < 0 || err < 0 || pipe2(report, O_CLOEXEC) != 0) {
    run.setup_errno = errno;
    return run;
  }
  std::vector<char *> envp;
  for (std::string &variable : environment) envp.push_back(&variable[0]);
  envp.push_back(nullptr);
  char *argv[] = {const_cast<char *>(program.c_str()), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    close(report[0]);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    // Reached past either only when the change of user or the exec failed.
    if (!as_nobody || (setgroups(0, nullptr) == 0 && setresgid(65534, 65534, 65534) == 0 &&
                       setresuid(65534, 65534, 65534) == 0)) {
      execve(program.c_str(), argv, envp.data());
    }
    int e = errno;
    (void)!write(report[1], &e, sizeof e);
    _exit(127);
  }
  close(report[1]);
  close(out);
  close(err);
  if (read(report[0], &run.setup_errno, sizeof run.setup_errno) != sizeof run.setup_errno) {
    run.setup_errno = 0;
  }
  close(report[0]);
  waitpid(pid, &run.status, 0);
  run.out = file_text(out_path);
  run.err = file_text(err_path);
  return run;
}

// A temporary directory that any user may enter, removed with its files.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    char name[] = "/tmp/brisk-setuid-XXXXXX";
    if (mkdtemp(name) != nullptr && chmod(name, 0755) == 0) path_ = name;
  }
  ~ScratchDirectory() {
    if (path_.empty()) return;
    for (const char *file : {"/options_reader", "/stats.jsonl", "/out", "/err"}) {
      unlink((path_ + file).c_str());
    }
    rmdir(path_.c_str());
  }
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// brisk reads its options with secure_getenv: a program installed setuid
// root and started by another user reads none, so that user cannot make it
// create or append to a file of their naming as root (BRISK_STATS_FILE) or
// print to its stderr (BRISK_VERBOSE). The same program started plainly
// reads both, which shows the check can fail. Skipped where a setuid
// program cannot be made: not root, /tmp mounted nosuid, or a container
// that keeps the setuid bit from taking effect (no_new_privs).
TEST(BriskOverride, SetuidProgramsReadNoOptions) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can install a setuid-root program";
  ScratchDirectory dir;
  ASSERT_FALSE(dir.path().empty()) << std::strerror(errno);
  struct statvfs mount;
  ASSERT_EQ(statvfs(dir.path().c_str(), &mount), 0);
  if (mount.f_flag & ST_NOSUID) GTEST_SKIP() << "/tmp is mounted nosuid";
  std::string program = dir.path() + "/options_reader";
  {
    std::ifstream in(BRISK_OPTIONS_READER, std::ios::binary);
    std::ofstream copy(program, std::ios::binary);
    copy << in.rdbuf();
    ASSERT_TRUE(in.good() && copy.good()) << BRISK_OPTIONS_READER;
  }
  ASSERT_EQ(chmod(program.c_str(), 04755), 0) << std::strerror(errno);
  std::string stats = dir.path() + "/stats.jsonl";
  std::vector<std::string> environment = {"BRISK_STATS_FILE=" + stats, "BRISK_VERBOSE=1",
                                          "PATH=/usr/bin:/bin"};

  ReaderRun plain = run_reader(dir.path(), program, environment, false);
  ASSERT_EQ(plain.setup_errno, 0) << std::strerror(plain.setup_errno);
  ASSERT_TRUE(WIFEXITED(plain.status) && WEXITSTATUS(plain.status) == 0) << plain.err;
  EXPECT_EQ(plain.out, "at_secure=0\n");
  EXPECT_NE(plain.err.find("brisk: "), std::string::npos) << "BRISK_VERBOSE printed nothing";
  EXPECT_EQ(access(stats.c_str(), F_OK), 0) << "BRISK_STATS_FILE was not created";
  unlink(stats.c_str());

  ReaderRun setuid = run_reader(dir.path(), program, environment, true);
  if (setuid.setup_errno != 0) {
    GTEST_SKIP() << "cannot run it as nobody: " << std::strerror(setuid.setup_errno);
  }
  ASSERT_TRUE(WIFEXITED(setuid.status) && WEXITSTATUS(setuid.status) == 0) << setuid.err;
  if (setuid.out == "at_secure=0\n") GTEST_SKIP() << "the setuid bit took no effect here";
  EXPECT_EQ(setuid.out, "at_secure=1\n");
  EXPECT_EQ(setuid.err, "");
  EXPECT_NE(access(stats.c_str(), F_OK), 0) << "a setuid program created BRISK_STATS_FILE";
}
#endif

}  // namespace
