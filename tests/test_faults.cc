// Refused system calls: every caller of the OS layer handles them. The OS
// layer's test hook (os.h: _brisk_os_inject_failures, reached through
// os_calls.h) refuses mmap, mprotect, madvise, mremap, munmap or mlock on
// demand, as the kernel does when memory or address space runs out. Each
// allocator then returns NULL with errno ENOMEM, keeps no mapping from the
// failed call (the OS layer's count of mapped bytes says so), keeps the
// contents of its live blocks, and works again once the fault clears. free
// leaves errno alone even when its own system calls fail.
#include <brisk.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "os_calls.h"
#include "test_util.h"

using brisk_test::all_bytes_are;
using brisk_test::fill_pattern;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::mix64;
using brisk_test::pattern_intact;

namespace {

constexpr size_t kKiB = 1024;
constexpr uint64_t kAlways = BRISK_TEST_OS_FAIL_ALWAYS;

// Every test clears its faults when it ends, however it ends.
class Faults : public ::testing::Test {
 protected:
  void TearDown() override { brisk_test_os_fail_none(); }
};
using FaultsDeathTest = Faults;

// Address space brisk maps now, the region allocators' mapping cache
// emptied first: a mapping waiting there for the next allocator is bounded
// and expires, so it is not a leak.
size_t mapped() {
  brisk_test_os_cache_flush();
  return brisk_test_os_bytes_mapped();
}
uint64_t injected() { return brisk_test_os_injected_failures(); }

// A live block and its pattern. A block above 2 KiB carries the pattern in
// its first and last KiB only, so that hundreds of MiB of blocks stay cheap.
struct Block {
  void *p;
  size_t size;
  uint64_t seed;
};

constexpr size_t kEdge = 1024;

Block filled(void *p, size_t size) {
  static std::atomic<uint64_t> serial{1};
  Block b{p, size, mix64(serial.fetch_add(1))};
  unsigned char *bytes = static_cast<unsigned char *>(p);
  if (size <= 2 * kEdge) {
    fill_pattern(bytes, size, b.seed);
  } else {
    fill_pattern(bytes, kEdge, b.seed);
    fill_pattern(bytes + size - kEdge, kEdge, ~b.seed);
  }
  return b;
}

bool intact(const Block &b) {
  const unsigned char *bytes = static_cast<const unsigned char *>(b.p);
  if (b.size <= 2 * kEdge) return pattern_intact(bytes, b.size, b.seed);
  return pattern_intact(bytes, kEdge, b.seed) &&
         pattern_intact(bytes + b.size - kEdge, kEdge, ~b.seed);
}

size_t broken(const std::vector<Block> &blocks) {
  size_t n = 0;
  for (const Block &b : blocks) n += !intact(b);
  return n;
}

// ---------------------------------------------------------------------------
// Creating a region allocator: the n-th call of one kind refused, every n.

// Refuses the n-th system call of `kind` that create() makes, for n = 0, 1,
// ... until create() makes fewer calls of that kind than n. Each time,
// create() either fails with ENOMEM, having unmapped whatever it had mapped,
// or works around the refusal (a reservation at a hint falls back to an
// over-sized one, a prefault to touching each page, an unbounded pool to a
// smaller reservation) and then works: use() allocates from it, and after
// destroy() every byte it mapped is unmapped. Returns how many times
// create() failed; the caller expects at least one.
template <class T>
int sweep_create(brisk_test_os_kind kind, const std::function<T *()> &create,
                 const std::function<void(T *)> &use, const std::function<void(T *)> &destroy) {
  int failures = 0;
  for (uint64_t n = 0;; n++) {
    if (n == 64) {
      ADD_FAILURE() << "create() made more than 64 calls of kind " << kind;
      break;
    }
    // mapped() empties the mapping cache: create() then makes every call.
    const size_t mapped_before = mapped();
    const uint64_t injected_before = injected();
    brisk_test_os_fail(kind, n, 1);
    errno = 0;
    T *region = create();
    const int error = errno;
    brisk_test_os_fail_none();
    const bool refused = injected() != injected_before;
    if (region == nullptr) {
      EXPECT_TRUE(refused) << "create() failed with no call refused (n = " << n << ")";
      EXPECT_EQ(error, ENOMEM) << "call " << n << " of kind " << kind << " refused";
      EXPECT_EQ(mapped(), mapped_before) << "a failed create() kept a mapping (call " << n << ")";
      failures++;
      continue;
    }
    use(region);
    destroy(region);
    EXPECT_EQ(mapped(), mapped_before) << "call " << n << " of kind " << kind << " refused";
    if (!refused) break;  // create() makes only n calls of this kind
  }
  return failures;
}

// Allocates a few blocks, checks and frees them (where the allocator frees).
template <class Alloc>
void use_blocks(Alloc alloc, const std::function<void(void *)> &release, size_t size) {
  std::vector<Block> blocks;
  for (int i = 0; i < 8; i++) {
    void *p = alloc(size);
    ASSERT_NE(p, nullptr);
    blocks.push_back(filled(p, size));
  }
  EXPECT_EQ(broken(blocks), 0u);
  for (const Block &b : blocks) release(b.p);
}

// Region flags whose create makes the prefault and mlock calls; mlock may be
// refused by the system's limit (RLIMIT_MEMLOCK) without any fault, and then
// only the prefault is asked for.
unsigned resident_flags() {
  static const unsigned flags = [] {
    brisk_pool_t *pool = brisk_pool_create_ex(64, 0, 64, BRISK_REGION_PREFAULT | BRISK_REGION_LOCK);
    if (pool == nullptr) return BRISK_REGION_PREFAULT;
    brisk_pool_destroy(pool);
    return BRISK_REGION_PREFAULT | BRISK_REGION_LOCK;
  }();
  return flags;
}

TEST_F(Faults, ArenaCreate) {
  std::function<brisk_arena_t *()> create = [] { return brisk_arena_create(kMiB); };
  std::function<void(brisk_arena_t *)> use = [](brisk_arena_t *a) {
    use_blocks([a](size_t n) { return brisk_arena_alloc(a, n, 0); }, [](void *) {}, 100);
  };
  std::function<void(brisk_arena_t *)> destroy = brisk_arena_destroy;
  EXPECT_GT(sweep_create(BRISK_TEST_OS_MAP, create, use, destroy), 0);
  EXPECT_GT(sweep_create(BRISK_TEST_OS_COMMIT, create, use, destroy), 0);
}

TEST_F(Faults, StackCreate) {
  std::function<brisk_stack_t *()> create = [] { return brisk_stack_create(0); };
  std::function<void(brisk_stack_t *)> use = [](brisk_stack_t *s) {
    use_blocks([s](size_t n) { return brisk_stack_alloc(s, n, 0); }, [](void *) {}, 100);
  };
  std::function<void(brisk_stack_t *)> destroy = brisk_stack_destroy;
  // The stack's own page and its first block: both refusals fail it.
  EXPECT_EQ(sweep_create(BRISK_TEST_OS_MAP, create, use, destroy), 2);
}

TEST_F(Faults, FifoCreate) {
  std::function<brisk_fifo_t *()> create = [] { return brisk_fifo_create(0); };
  std::function<void(brisk_fifo_t *)> use = [](brisk_fifo_t *f) {
    use_blocks([f](size_t n) { return brisk_fifo_alloc(f, n); },
               [f](void *p) { brisk_fifo_free(f, p); }, 100);
  };
  std::function<void(brisk_fifo_t *)> destroy = brisk_fifo_destroy;
  EXPECT_GT(sweep_create(BRISK_TEST_OS_MAP, create, use, destroy), 0);
}

TEST_F(Faults, PoolCreate) {
  std::function<void(brisk_pool_t *)> use = [](brisk_pool_t *pool) {
    use_blocks([pool](size_t) { return brisk_pool_alloc(pool); },
               [pool](void *p) { brisk_pool_free(pool, p); }, 64);
  };
  std::function<void(brisk_pool_t *)> destroy = brisk_pool_destroy;
  // Unbounded: a refused reservation is tried again smaller, so only the
  // header's commit fails it.
  std::function<brisk_pool_t *()> unbounded = [] { return brisk_pool_create(64, 0, 0); };
  EXPECT_EQ(sweep_create(BRISK_TEST_OS_MAP, unbounded, use, destroy), 0);
  EXPECT_GT(sweep_create(BRISK_TEST_OS_COMMIT, unbounded, use, destroy), 0);
  // Bounded and resident: everything is committed, faulted in and locked at
  // create.
  const unsigned flags = resident_flags();
  std::function<brisk_pool_t *()> bounded = [flags] {
    return brisk_pool_create_ex(64, 0, 1000, flags);
  };
  EXPECT_GT(sweep_create(BRISK_TEST_OS_MAP, bounded, use, destroy), 0);
  EXPECT_EQ(sweep_create(BRISK_TEST_OS_COMMIT, bounded, use, destroy), 2);
  const int other = sweep_create(BRISK_TEST_OS_OTHER, bounded, use, destroy);
  if (flags & BRISK_REGION_LOCK) EXPECT_GT(other, 0) << "a refused mlock must fail create";
}

TEST_F(Faults, BuddyCreate) {
  const unsigned flags = resident_flags();
  std::function<brisk_buddy_t *()> create = [flags] {
    return brisk_buddy_create_ex(kMiB, 64, 0, flags);
  };
  std::function<void(brisk_buddy_t *)> use = [](brisk_buddy_t *b) {
    use_blocks([b](size_t n) { return brisk_buddy_alloc(b, n, 0); },
               [b](void *p) { brisk_buddy_free(b, p); }, 1000);
  };
  std::function<void(brisk_buddy_t *)> destroy = brisk_buddy_destroy;
  EXPECT_GT(sweep_create(BRISK_TEST_OS_MAP, create, use, destroy), 0);
  const int other = sweep_create(BRISK_TEST_OS_OTHER, create, use, destroy);
  if (flags & BRISK_REGION_LOCK) EXPECT_GT(other, 0) << "a refused mlock must fail create";
}

TEST_F(Faults, HybridCreate) {
  const unsigned flags = resident_flags();
  std::function<brisk_hybrid_t *()> create = [flags] {
    brisk_hybrid_config_t config = {};
    config.bucket_sizes[0] = 16;
    config.bucket_counts[0] = 1000;
    config.bucket_sizes[1] = 256;
    config.bucket_counts[1] = 1000;
    config.region_sizes[0] = kMiB;
    config.region_sizes[1] = 256 * kKiB;
    config.flags = flags;
    return brisk_hybrid_create(&config);
  };
  std::function<void(brisk_hybrid_t *)> use = [](brisk_hybrid_t *h) {
    for (size_t size : {10, 200, 3000}) {
      use_blocks([h](size_t n) { return brisk_hybrid_alloc(h, n, 0); },
                 [h](void *p) { brisk_hybrid_free(h, p); }, size);
    }
  };
  std::function<void(brisk_hybrid_t *)> destroy = brisk_hybrid_destroy;
  // One mapping for itself, its buckets and its first region, then the
  // second region's two (a refused mmap at a hint has a fallback, so not
  // every refusal fails create); all read-write as mapped: no commit.
  EXPECT_GT(sweep_create(BRISK_TEST_OS_MAP, create, use, destroy), 0);
  EXPECT_EQ(sweep_create(BRISK_TEST_OS_COMMIT, create, use, destroy), 0);
  const int other = sweep_create(BRISK_TEST_OS_OTHER, create, use, destroy);
  if (flags & BRISK_REGION_LOCK) EXPECT_GT(other, 0) << "a refused mlock must fail create";
}

// ---------------------------------------------------------------------------
// Growing a region allocator.

// Allocates `warm` blocks, then more while `kind` is refused, until alloc()
// returns NULL: that must come within `most` calls, with ENOMEM and no
// mapping kept. Then the blocks so far are checked, the fault cleared and
// one more block asked for. The blocks are added to *blocks.
void allocate_until_refused(brisk_test_os_kind kind, const std::function<void *(size_t)> &alloc,
                            size_t size, size_t most, std::vector<Block> *blocks,
                            int warm = 16) {
  for (int i = 0; i < warm; i++) {
    void *p = alloc(size);
    ASSERT_NE(p, nullptr);
    blocks->push_back(filled(p, size));
  }
  const uint64_t injected_before = injected();
  brisk_test_os_fail(kind, 0, kAlways);
  bool refused = false;
  for (size_t i = 0; i < most && !refused; i++) {
    const size_t mapped_before = mapped();
    errno = 0;
    void *p = alloc(size);
    if (p == nullptr) {
      EXPECT_EQ(errno, ENOMEM);
      // Nothing new mapped (the general allocator may even have given back
      // what it held, to try again).
      EXPECT_LE(mapped(), mapped_before) << "the failed allocation kept a mapping";
      refused = true;
    } else {
      blocks->push_back(filled(p, size));
    }
  }
  brisk_test_os_fail_none();
  EXPECT_TRUE(refused) << most << " allocations of " << size << " bytes made no refused call";
  EXPECT_GT(injected(), injected_before);
  EXPECT_EQ(broken(*blocks), 0u) << "live blocks changed while the system refused";
  void *p = alloc(size);
  ASSERT_NE(p, nullptr) << "allocation still fails after the fault cleared";
  blocks->push_back(filled(p, size));
  EXPECT_EQ(broken(*blocks), 0u);
}

TEST_F(Faults, ArenaGrowth) {
  const size_t mapped_before = mapped();
  brisk_arena_t *arena = brisk_arena_create(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  std::vector<Block> blocks;
  auto alloc = [arena](size_t n) { return brisk_arena_alloc(arena, n, 64); };
  allocate_until_refused(BRISK_TEST_OS_COMMIT, alloc, 16 * kKiB, 4096, &blocks);
  // A cursor claims its chunk from the arena: refused the same way.
  blocks.clear();
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, arena, 256 * kKiB);
  allocate_until_refused(BRISK_TEST_OS_COMMIT,
                         [&cursor](size_t n) { return brisk_arena_cursor_alloc(&cursor, n, 0); },
                         1000, 64 * kMiB / 1000, &blocks);
  // A refused uncommit at reset leaves the pages as they were: committed
  // again, they serve as before.
  brisk_test_os_fail(BRISK_TEST_OS_DECOMMIT, 0, kAlways);
  brisk_arena_reset(arena, 0);
  brisk_test_os_fail_none();
  blocks.clear();
  for (int i = 0; i < 100; i++) {
    void *p = alloc(16 * kKiB);
    ASSERT_NE(p, nullptr);
    blocks.push_back(filled(p, 16 * kKiB));
  }
  EXPECT_EQ(broken(blocks), 0u);
  brisk_arena_destroy(arena);
  EXPECT_EQ(mapped(), mapped_before);
}

TEST_F(Faults, StackGrowth) {
  const size_t mapped_before = mapped();
  brisk_stack_t *stack = brisk_stack_create(64 * kKiB);
  ASSERT_NE(stack, nullptr);
  brisk_stack_push(stack);
  std::vector<Block> blocks;
  allocate_until_refused(BRISK_TEST_OS_MAP,
                         [stack](size_t n) { return brisk_stack_alloc(stack, n, 0); }, 8 * kKiB,
                         1000, &blocks);
  // A realloc that needs a new block fails and leaves its block as it was.
  Block last = blocks.back();
  brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, kAlways);
  errno = 0;
  EXPECT_EQ(brisk_stack_realloc(stack, last.p, last.size, 4 * kMiB, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_test_os_fail_none();
  EXPECT_EQ(broken(blocks), 0u);
  void *moved = brisk_stack_realloc(stack, last.p, last.size, 4 * kMiB, 0);
  ASSERT_NE(moved, nullptr);
  EXPECT_TRUE(pattern_intact(moved, kEdge, last.seed));
  brisk_stack_pop(stack);
  brisk_stack_destroy(stack);
  EXPECT_EQ(mapped(), mapped_before);
}

// push returns nothing: frame records it cannot get end the program with a
// message rather than a frame that pop would not restore.
TEST_F(FaultsDeathTest, StackPushWithoutMemoryForFrameRecordsAborts) {
  brisk_stack_t *stack = brisk_stack_create(0);
  ASSERT_NE(stack, nullptr);
  EXPECT_DEATH(
      {
        brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, kAlways);
        for (int i = 0; i < 100000; i++) brisk_stack_push(stack);
      },
      "brisk: brisk_stack_push.*out of memory for frame records");
  brisk_stack_destroy(stack);
}

TEST_F(Faults, FifoGrowth) {
  const size_t mapped_before = mapped();
  brisk_fifo_t *fifo = brisk_fifo_create(64 * kKiB);
  ASSERT_NE(fifo, nullptr);
  std::vector<Block> blocks;
  allocate_until_refused(BRISK_TEST_OS_MAP, [fifo](size_t n) { return brisk_fifo_alloc(fifo, n); },
                         4 * kKiB, 1000, &blocks);
  // Blocks bigger than a page get one of their own: refused too.
  allocate_until_refused(BRISK_TEST_OS_MAP, [fifo](size_t n) { return brisk_fifo_alloc(fifo, n); },
                         kMiB, 1, &blocks);
  // A realloc that must move fails and leaves its block as it was.
  Block first = blocks.front();
  brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, kAlways);
  errno = 0;
  EXPECT_EQ(brisk_fifo_realloc(fifo, first.p, 2 * kMiB), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_test_os_fail_none();
  EXPECT_EQ(broken(blocks), 0u);
  for (const Block &b : blocks) brisk_fifo_free(fifo, b.p);
  brisk_fifo_destroy(fifo);
  EXPECT_EQ(mapped(), mapped_before);
}

// A fifo block's bytes past what was asked are zero, so that growing it in
// place exposes zeros. A shrink by 256 KiB or more drops whole OS pages with
// madvise instead of writing zeros; when madvise is refused (it is on
// mlock'ed pages) the bytes must be zeroed all the same.
TEST_F(Faults, FifoShrinkZeroesWhatTheKernelDidNotDrop) {
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  ASSERT_NE(fifo, nullptr);
  const size_t size = 2 * kMiB;
  unsigned char *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, size));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xab, size);
  const uint64_t injected_before = injected();
  brisk_test_os_fail(BRISK_TEST_OS_DECOMMIT, 0, kAlways);
  EXPECT_EQ(brisk_fifo_realloc(fifo, p, 16), p);
  brisk_test_os_fail_none();
  EXPECT_GT(injected(), injected_before) << "the shrink asked nothing of the kernel";
  EXPECT_EQ(brisk_fifo_realloc(fifo, p, size), p) << "the block grows back in place";
  EXPECT_TRUE(all_bytes_are(p, 16, 0xab));
  EXPECT_TRUE(all_bytes_are(p + 16, size - 16, 0)) << "bytes past the shrink are not zero";
  brisk_fifo_free(fifo, p);
  brisk_fifo_destroy(fifo);
}

TEST_F(Faults, PoolGrowth) {
  const size_t mapped_before = mapped();
  brisk_pool_t *pool = brisk_pool_create(256, 0, 0);
  ASSERT_NE(pool, nullptr);
  std::vector<Block> blocks;
  allocate_until_refused(BRISK_TEST_OS_COMMIT, [pool](size_t) { return brisk_pool_alloc(pool); },
                         256, 1 << 20, &blocks);
  for (const Block &b : blocks) brisk_pool_free(pool, b.p);
  brisk_pool_destroy(pool);
  EXPECT_EQ(mapped(), mapped_before);
}

// ---------------------------------------------------------------------------
// The general allocator.

// One way of allocating from the general allocator.
struct GeneralAlloc {
  const char *name;
  size_t size;
  size_t alignment;  // 0: malloc's
  bool zero;         // calloc
  void *operator()(size_t n) const {
    if (zero) return brisk_calloc(1, n);
    if (alignment != 0) return brisk_aligned_alloc(alignment, n);
    return brisk_malloc(n);
  }
};

// In a thread of its own (which takes whatever heap it is given), allocates
// until a refused call of `kind` (mmap unless named) makes it fail. The
// heap's segments with room are used up first, at most one per kind being
// empty (a spare), hence `most`.
void exhaust_in_a_thread(const GeneralAlloc &how, brisk_test_os_kind kind = BRISK_TEST_OS_MAP) {
  std::thread([&how, kind] {
    SCOPED_TRACE(how.name);
    std::vector<Block> blocks;
    const size_t most = 256 * kMiB / how.size + 64;
    std::function<void *(size_t)> alloc = [&how](size_t n) {
      void *p = how(n);
      if (p == nullptr) return p;
      if (how.zero && !all_bytes_are(p, n < 4096 ? n : 4096, 0)) ADD_FAILURE() << "calloc not zero";
      if (!is_aligned(p, how.alignment != 0 ? how.alignment : 16)) ADD_FAILURE() << "misaligned";
      return p;
    };
    allocate_until_refused(kind, alloc, how.size, most, &blocks);
    for (const Block &b : blocks) brisk_free(b.p);
  }).join();
}

TEST_F(Faults, GeneralSmall) { exhaust_in_a_thread({"small", 256, 0, false}); }
TEST_F(Faults, GeneralSmallPages) { exhaust_in_a_thread({"8 KiB class", 5000, 0, false}); }
TEST_F(Faults, GeneralMedium) { exhaust_in_a_thread({"medium", 40 * kKiB, 0, false}); }
TEST_F(Faults, GeneralLarge) { exhaust_in_a_thread({"large", 300 * kKiB, 0, false}); }
TEST_F(Faults, GeneralHuge) { exhaust_in_a_thread({"huge", 2 * kMiB, 0, false}); }
TEST_F(Faults, GeneralCalloc) { exhaust_in_a_thread({"calloc", 3000, 0, true}); }
TEST_F(Faults, GeneralHugeCalloc) { exhaust_in_a_thread({"huge calloc", 3 * kMiB, 0, true}); }
TEST_F(Faults, GeneralAligned) { exhaust_in_a_thread({"aligned 64", 200, 64, false}); }
TEST_F(Faults, GeneralAlignedOffClass) {
  exhaust_in_a_thread({"aligned 4096, inside a class", 20000, 4096, false});
}
TEST_F(Faults, GeneralAlignedHuge) {
  exhaust_in_a_thread({"aligned 1 MiB", 100 * kKiB, kMiB, false});
}
TEST_F(Faults, GeneralAlignedToSegments) {
  exhaust_in_a_thread({"aligned 64 MiB", 4 * kKiB, 64 * kMiB, false});
}

// realloc that cannot get memory returns NULL with ENOMEM and leaves the
// block as it was; when only mremap is refused, a huge block moves by copy.
TEST_F(Faults, GeneralRealloc) {
  // A small block to a huge one: the huge mapping is refused.
  Block small = filled(brisk_malloc(300), 300);
  brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, kAlways);
  size_t mapped_before = mapped();
  errno = 0;
  EXPECT_EQ(brisk_realloc(small.p, 8 * kMiB), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_LE(mapped(), mapped_before);
  brisk_test_os_fail_none();
  EXPECT_TRUE(intact(small));

  // A huge block grown: neither mremap nor mmap.
  Block huge = filled(brisk_malloc(2 * kMiB), 2 * kMiB);
  brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, kAlways);
  brisk_test_os_fail(BRISK_TEST_OS_REMAP, 0, kAlways);
  mapped_before = mapped();
  errno = 0;
  EXPECT_EQ(brisk_realloc(huge.p, 64 * kMiB), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_LE(mapped(), mapped_before);
  brisk_test_os_fail_none();
  EXPECT_TRUE(intact(huge));

  // Only mremap refused: a new mapping and a copy.
  const uint64_t injected_before = injected();
  brisk_test_os_fail(BRISK_TEST_OS_REMAP, 0, kAlways);
  void *grown = brisk_realloc(huge.p, 64 * kMiB);
  brisk_test_os_fail_none();
  ASSERT_NE(grown, nullptr);
  EXPECT_GT(injected(), injected_before) << "the huge block grew without mremap";
  EXPECT_TRUE(pattern_intact(grown, kEdge, huge.seed));

  // Still usable both ways after the faults.
  void *bigger = brisk_realloc(small.p, 8 * kMiB);
  ASSERT_NE(bigger, nullptr);
  EXPECT_TRUE(pattern_intact(bigger, 300, small.seed));
  brisk_free(bigger);
  brisk_free(grown);
}

// A refused mapping makes the general allocator give back what it holds
// unused (here a cached huge mapping) and try once more.
TEST_F(Faults, ARefusedMappingIsTriedAgainAfterWhatIsHeldGoesBack) {
  BRISK_SKIP_IF(brisk_test::huge_cache_below(8 * kMiB));
  brisk_free(brisk_malloc(8 * kMiB));
  ASSERT_GT(brisk_test::stats_snapshot().general.huge_cached_bytes, 0u);
  const uint64_t injected_before = injected();
  brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, 1);  // the next mmap only
  void *p = brisk_aligned_alloc(64 * kMiB, 4096);  // always a mapping of its own
  EXPECT_NE(p, nullptr) << "not tried again";
  EXPECT_EQ(injected(), injected_before + 1);
  EXPECT_EQ(brisk_test::stats_snapshot().general.huge_cached_bytes, 0u) << "the cached mapping was kept";
  brisk_free(p);
}

// An allocation that succeeds after a refused system call leaves errno as
// it was (glibc's malloc never sets it on success): a refused first mmap (at
// a hint, retried without one; where hints are no longer tried, as under
// ASan, the size rounded up, retried at the size needed), a refused mremap
// that realloc answers with a move.
TEST_F(Faults, ASuccessAfterARefusalLeavesErrnoAlone) {
  struct Case {
    const char *what;
    brisk_test_os_kind kind;
    uint64_t refused;
    std::function<void *()> call;
  };
  // 20 MiB and a page: a mapping of 22 MiB is tried first (8 sizes per
  // doubling), then the size needed.
  const size_t huge = 20 * kMiB + 4 * kKiB;
  void *grown_from = nullptr;
  const Case cases[] = {
      {"huge, its first mmap refused", BRISK_TEST_OS_MAP, 1, [&] { return brisk_malloc(huge); }},
      {"huge realloc, mremap refused", BRISK_TEST_OS_REMAP, kAlways,
       [&] { return brisk_realloc(grown_from, 3 * huge); }},
  };
  for (const Case &c : cases) {
    brisk_collect(true);  // no cached mapping serves the huge block
    grown_from = brisk_malloc(huge);
    ASSERT_NE(grown_from, nullptr);
    const uint64_t injected_before = injected();
    brisk_test_os_fail(c.kind, 0, c.refused);
    errno = EDOM;
    void *p = c.call();
    const int error = errno;
    brisk_test_os_fail_none();
    ASSERT_NE(p, nullptr) << c.what;
    EXPECT_GT(injected(), injected_before) << c.what << ": nothing was refused";
    EXPECT_EQ(error, EDOM) << c.what;
    if (c.kind != BRISK_TEST_OS_REMAP) brisk_free(grown_from);  // realloc took it
    brisk_free(p);
  }
}

// A freed huge block's mapping is kept for the next one, unless the options
// say none is (BRISK_HUGE_CACHE_MS=0, or a cache too small for it: ctest's
// options_huge_cache_age_zero runs this with the former).
TEST_F(Faults, AFreedHugeMappingIsCachedAsTheOptionsSay) {
  constexpr size_t kHuge = 2 * kMiB;
  const bool kept = brisk_test::huge_cache_below(kHuge + 64 * kKiB).empty();
  std::thread([kept] {
    brisk_collect(true);
    const size_t before = brisk_test::stats_snapshot().general.huge_cached_bytes;
    brisk_free(brisk_malloc(kHuge));
    const size_t after = brisk_test::stats_snapshot().general.huge_cached_bytes;
    if (kept) EXPECT_GT(after, before);
    else EXPECT_EQ(after, before) << "a mapping was cached that the options keep out";
  }).join();
}

// ... but not for a size no system could map: that costs nothing held.
TEST_F(Faults, AnUnservableSizeGivesBackNothing) {
  BRISK_SKIP_IF(brisk_test::huge_cache_below(8 * kMiB));
  brisk_free(brisk_malloc(8 * kMiB));
  const size_t cached = brisk_test::stats_snapshot().general.huge_cached_bytes;
  ASSERT_GT(cached, 0u);
  errno = 0;
  EXPECT_EQ(brisk_aligned_alloc(64 * kMiB, size_t{1} << 45), nullptr);  // no cached mapping fits
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(brisk_test::stats_snapshot().general.huge_cached_bytes, cached);
}

// Holds threads that have allocated (so own a heap) until released.
class HeapHolders {
 public:
  // Starts holders until one had to create a heap: then no heap is left
  // for a new thread to adopt.
  void take_every_spare_heap() {
    for (int i = 0; i < 2000; i++) {
      const uint64_t created = heaps_created();
      std::atomic<bool> ready{false};
      threads_.emplace_back([this, &ready] {
        brisk_free(brisk_malloc(16));
        ready = true;
        while (!release_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
      while (!ready.load()) std::this_thread::yield();
      if (heaps_created() != created) return;
    }
    ADD_FAILURE() << "2000 threads adopted heaps and none created one";
  }
  ~HeapHolders() {
    release_ = true;
    for (std::thread &t : threads_) t.join();
  }
  static uint64_t heaps_created() { return brisk_test::stats_snapshot().general.heaps_created; }

 private:
  std::atomic<bool> release_{false};
  std::vector<std::thread> threads_;
};

// A new thread whose heap cannot be mapped: its allocations fail with ENOMEM
// (its frees of other threads' blocks work without a heap), and once the
// fault clears it gets its heap.
TEST_F(Faults, HeapCreationForANewThread) {
  HeapHolders holders;
  holders.take_every_spare_heap();
  Block other = filled(brisk_malloc(500), 500);
  const uint64_t created = HeapHolders::heaps_created();
  std::thread([&other] {
    brisk_test_os_fail(BRISK_TEST_OS_MAP, 0, kAlways);
    const size_t mapped_before = mapped();
    errno = 0;
    EXPECT_EQ(brisk_malloc(100), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_calloc(10, 10), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_aligned_alloc(256, 3000), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_realloc(nullptr, 100), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_LE(mapped(), mapped_before);
    EXPECT_TRUE(intact(other));
    brisk_free(other.p);
    brisk_test_os_fail_none();
    std::vector<Block> blocks;
    for (size_t size : {100, 3000, 100000, 3000000})
      blocks.push_back(filled(brisk_malloc(size), size));
    EXPECT_EQ(broken(blocks), 0u);
    for (const Block &b : blocks) brisk_free(b.p);
  }).join();
  EXPECT_EQ(HeapHolders::heaps_created(), created + 1);
}

// Under the kernel's strict overcommit accounting (vm.overcommit_memory = 2)
// every read-write private mapping counts against the commit limit when it
// is made, so segments are reserved inaccessible and their pages committed
// as they are first taken (os.h: _brisk_os_reserve_pages). The OS layer is
// told to behave so here, whatever the machine's setting.
class StrictCommit : public Faults {
 protected:
  void SetUp() override { brisk_test_os_assume_strict_commit(true); }
  void TearDown() override {
    brisk_test_os_assume_strict_commit(false);
    Faults::TearDown();
  }
};

// A refused commit fails the allocation that needed it, with ENOMEM, and
// loses nothing; with the heuristic no segment needs a commit, so nothing
// would be refused.
TEST_F(StrictCommit, ARefusedCommitFailsTheAllocation) {
  exhaust_in_a_thread({"small", 256, 0, false}, BRISK_TEST_OS_COMMIT);
  exhaust_in_a_thread({"medium", 40 * kKiB, 0, false}, BRISK_TEST_OS_COMMIT);
  exhaust_in_a_thread({"large", 300 * kKiB, 0, false}, BRISK_TEST_OS_COMMIT);
  exhaust_in_a_thread({"calloc", 3000, 0, true}, BRISK_TEST_OS_COMMIT);
}

// The permissions of the mapping that holds `address` in /proc/self/maps
// ("rw-p", "---p"), or "" when none does.
std::string permissions_at(uintptr_t address) {
  FILE *maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return "";
  char line[512];
  std::string found;
  while (found.empty() && std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long start, end;
    char perms[8];
    if (std::sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3 && address >= start &&
        address < end)
      found = perms;
  }
  std::fclose(maps);
  return found;
}

// A fresh heap's segment is committed as its pages fill, from its start: its
// middle stays inaccessible (uncharged) until the blocks reach it, and every
// block holds what was written to it.
TEST_F(StrictCommit, ASegmentIsCommittedAsItFills) {
  HeapHolders holders;
  holders.take_every_spare_heap();  // the thread below creates its heap
  std::thread([] {
    constexpr uintptr_t kSegment = uintptr_t{32} << 20;
    void *first = brisk_malloc(1000);
    ASSERT_NE(first, nullptr);
    const uintptr_t segment = reinterpret_cast<uintptr_t>(first) & ~(kSegment - 1);
    EXPECT_EQ(permissions_at(reinterpret_cast<uintptr_t>(first)), "rw-p");
    EXPECT_EQ(permissions_at(segment + kSegment / 2), "---p") << "the whole segment was committed";
    std::vector<Block> blocks{filled(first, 1000)};
    for (int i = 0; i < 40000; i++) {  // 40 MiB of 1000-byte blocks: more than a segment
      void *p = brisk_malloc(1000);
      ASSERT_NE(p, nullptr);
      blocks.push_back(filled(p, 1000));
    }
    EXPECT_EQ(permissions_at(segment + kSegment / 2), "rw-p");
    EXPECT_EQ(permissions_at(segment + kSegment - 1), "rw-p");
    EXPECT_EQ(broken(blocks), 0u);
    for (const Block &b : blocks) brisk_free(b.p);
  }).join();
}

// Refused madvise (purging free pages) and munmap (releasing segments and
// huge mappings): memory stays mapped, nothing breaks, and calloc still
// gives zeros from pages whose purge was refused.
TEST_F(Faults, RefusedPurgeAndReleaseBreakNothing) {
  std::vector<void *> blocks;
  for (int i = 0; i < 40000; i++) {  // 40 MiB in 1 KiB blocks: more than a segment
    void *p = brisk_malloc(1000);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xcd, 1000);
    blocks.push_back(p);
  }
  for (int i = 0; i < 8; i++) {
    void *p = brisk_malloc(3 * kMiB);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xcd, 3 * kMiB);
    blocks.push_back(p);
  }
  const uint64_t injected_before = injected();
  brisk_test_os_fail(BRISK_TEST_OS_DECOMMIT, 0, kAlways);
  brisk_test_os_fail(BRISK_TEST_OS_UNMAP, 0, kAlways);
  for (void *p : blocks) brisk_free(p);
  brisk_collect(true);
  EXPECT_GT(injected(), injected_before) << "nothing was purged or released";
  blocks.clear();
  for (int i = 0; i < 40000; i++) {
    void *p = brisk_calloc(1, 1000);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(all_bytes_are(p, 1000, 0)) << "calloc " << i;
    blocks.push_back(p);
  }
  brisk_test_os_fail_none();
  for (void *p : blocks) brisk_free(p);
  brisk_collect(true);
}

// free never changes errno (POSIX asks it of free), also when the munmap or
// madvise it makes is refused.
TEST_F(Faults, FreeLeavesErrnoAlone) {
  auto free_keeps_errno = [](void *p, const char *what) {
    errno = EDOM;
    brisk_free(p);
    EXPECT_EQ(errno, EDOM) << what;
  };
  // A huge block too big for the thread's cache is unmapped at once.
  const size_t too_big_to_cache = 100 * kMiB;
  free_keeps_errno(brisk_malloc(too_big_to_cache), "huge, unmapped");
  free_keeps_errno(brisk_malloc(100), "small");
  free_keeps_errno(brisk_aligned_alloc(4096, 5000), "aligned");
  void *remote = nullptr;
  std::thread([&remote] { remote = brisk_malloc(200); }).join();
  free_keeps_errno(remote, "another thread's");

  // (Unless BRISK_HUGE_CACHE_MB keeps a block that big.)
  if (!brisk_test::huge_cache_below(too_big_to_cache).empty()) {
    const uint64_t injected_before = injected();
    brisk_test_os_fail(BRISK_TEST_OS_UNMAP, 0, kAlways);
    free_keeps_errno(brisk_malloc(too_big_to_cache), "huge, munmap refused");
    brisk_test_os_fail_none();
    EXPECT_GT(injected(), injected_before);
  }

  // Pages beyond 32 MiB of free ones are purged at once, by free.
  std::vector<void *> blocks;
  for (int i = 0; i < 40 * 64; i++) blocks.push_back(brisk_malloc(16 * kKiB));
  brisk_test_os_fail(BRISK_TEST_OS_DECOMMIT, 0, kAlways);
  const uint64_t injected_before_purge = injected();
  int changed = 0;
  for (void *p : blocks) {
    errno = EDOM;
    brisk_free(p);
    changed += errno != EDOM;
  }
  brisk_test_os_fail_none();
  EXPECT_GT(injected(), injected_before_purge) << "no free purged";
  EXPECT_EQ(changed, 0) << "frees that changed errno";
}

}  // namespace
