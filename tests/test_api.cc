// The brisk_* API: bad input, alignment, contents and sizes, through the
// brisk_* names only, so this file runs in the sanitizer builds too.
#include <brisk.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "internal_checks.h"
#include "test_util.h"

using brisk_test::all_bytes_are;
using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::pattern_intact;

namespace {

// Sizes that can never be served on x86-64 (47-bit user address space).
const size_t kUnservableSizes[] = {SIZE_MAX, SIZE_MAX / 2 + 1, size_t{1} << 46};

// The alignment every block of `size` bytes is promised in brisk/malloc.h: the
// x86-64 ABI's 16 above 8 bytes (alignof(max_align_t)).
size_t promised_alignment(size_t size) { return size > 8 ? 16 : 8; }

TEST(BriskApi, MallocZeroGivesUniqueFreeablePointers) {
  void *a = brisk_malloc(0);
  void *b = brisk_malloc(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  brisk_free(a);
  brisk_free(b);
}

TEST(BriskApi, UnservableSizesFailWithEnomem) {
  for (size_t size : kUnservableSizes) {
    SCOPED_TRACE(size);
    errno = 0;
    EXPECT_EQ(brisk_malloc(size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_calloc(1, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_realloc(nullptr, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_aligned_alloc(64, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  // A valid power-of-two alignment that no address space can honour.
  for (int shift : {47, 62, 63}) {
    SCOPED_TRACE(shift);
    errno = 0;
    EXPECT_EQ(brisk_aligned_alloc(size_t{1} << shift, 1), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
}

TEST(BriskApi, CallocOverflowFailsWithEnomem) {
  const size_t overflowing[][2] = {
      {SIZE_MAX / 2, 3},
      {SIZE_MAX, SIZE_MAX},
      {SIZE_MAX, 2},
      {2, SIZE_MAX},
      {size_t{1} << 32, size_t{1} << 32},  // wraps to exactly 0
      {(size_t{1} << 32) + 1, size_t{1} << 32},
  };
  for (const auto &c : overflowing) {
    SCOPED_TRACE(testing::Message() << c[0] << " * " << c[1]);
    errno = 0;
    EXPECT_EQ(brisk_calloc(c[0], c[1]), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  // No overflow, but 64 TiB.
  errno = 0;
  EXPECT_EQ(brisk_calloc(size_t{1} << 23, size_t{1} << 23), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(BriskApi, CallocOfZeroBytesGivesFreeablePointer) {
  void *a = brisk_calloc(0, 16);
  void *b = brisk_calloc(16, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  brisk_free(a);
  brisk_free(b);
}

TEST(BriskApi, FailedReallocLeavesBlockIntact) {
  for (size_t old_size : {size_t{100}, size_t{200} << 10, size_t{20} * kMiB}) {
    void *p = brisk_malloc(old_size);
    ASSERT_NE(p, nullptr);
    const size_t usable = brisk_usable_size(p);
    const uint64_t seed = block_seed(p, old_size);
    fill_pattern(p, old_size, seed);
    for (size_t new_size : kUnservableSizes) {
      SCOPED_TRACE(testing::Message() << old_size << " -> " << new_size);
      errno = 0;
      EXPECT_EQ(brisk_realloc(p, new_size), nullptr);
      EXPECT_EQ(errno, ENOMEM);
      EXPECT_TRUE(pattern_intact(p, old_size, seed));
      EXPECT_EQ(brisk_usable_size(p), usable);
    }
    brisk_free(p);
  }
}

TEST(BriskApi, AlignedAllocRejectsNonPowerOfTwoAlignment) {
  const size_t bad_alignments[] = {0, 3, 6, 24, 48, 100, 1000, 4095, 4097,
                                   (size_t{1} << 20) + 1, SIZE_MAX};
  for (size_t alignment : bad_alignments) {
    SCOPED_TRACE(alignment);
    errno = 0;
    EXPECT_EQ(brisk_aligned_alloc(alignment, 64), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
}

TEST(BriskApi, AlignedAllocHonoursEveryPowerOfTwo) {
  const size_t sizes[] = {0, 1, 100, 5000, kMiB, 10 * kMiB};
  for (size_t alignment = 1; alignment <= 64 * kMiB; alignment *= 2) {
    // All sizes live at once, each filled with its own byte, so overlapping
    // blocks would show.
    void *blocks[sizeof sizes / sizeof sizes[0]];
    size_t usable[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      SCOPED_TRACE(testing::Message() << "alignment " << alignment << " size " << sizes[i]);
      blocks[i] = brisk_aligned_alloc(alignment, sizes[i]);
      ASSERT_NE(blocks[i], nullptr);
      EXPECT_TRUE(is_aligned(blocks[i], alignment)) << blocks[i];
      usable[i] = brisk_usable_size(blocks[i]);
      EXPECT_GE(usable[i], sizes[i]);
      std::memset(blocks[i], static_cast<int>(i + 1), usable[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      EXPECT_TRUE(all_bytes_are(blocks[i], usable[i], static_cast<unsigned char>(i + 1)))
          << "alignment " << alignment << " size " << sizes[i];
      brisk_free(blocks[i]);
    }
  }
}

// A block of 0 bytes aligned to a MiB or more has a mapping of its own,
// which must hold the block's address: at its end, the address could be
// another mapping's first byte (before, mincore found nothing mapped there).
TEST(BriskApi, AlignedBlockOfZeroBytesLiesInsideItsMapping) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t alignment = 1; alignment <= 64 * kMiB; alignment *= 2) {
    SCOPED_TRACE(testing::Message() << "alignment " << alignment);
    void *first = brisk_aligned_alloc(alignment, 0);
    void *second = brisk_aligned_alloc(alignment, 0);
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    EXPECT_NE(first, second);
    for (void *block : {first, second}) {
      EXPECT_TRUE(is_aligned(block, alignment)) << block;
      void *block_page = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(block) & ~(page - 1));
      unsigned char resident;
      EXPECT_EQ(mincore(block_page, page, &resident), 0) << block << ": " << std::strerror(errno);
    }
    brisk_free(first);
    brisk_free(second);
  }
}

TEST(BriskApi, NullPointers) {
  EXPECT_EQ(brisk_usable_size(nullptr), 0u);
  brisk_free(nullptr);
}

// Dirties blocks of `size`, frees them, then checks that calloc hands back
// zeroed memory, several times over so the dirty blocks really get reused.
// `free_elsewhere` frees the dirty blocks from another thread, so they come
// back to this thread's heap through the remote-free path.
void check_calloc_zeroes_dirty_blocks(size_t size, bool free_elsewhere) {
  const size_t count = std::min<size_t>(64, std::max<size_t>(2, 8 * kMiB / size));
  std::vector<void *> blocks(count);
  for (int round = 0; round < 4; round++) {
    for (void *&p : blocks) {
      p = brisk_malloc(size);
      ASSERT_NE(p, nullptr);
      std::memset(p, 0xAB, brisk_usable_size(p));
    }
    if (free_elsewhere) {
      std::thread([&blocks] {
        for (void *p : blocks) brisk_free(p);
      }).join();
    } else {
      for (void *p : blocks) brisk_free(p);
    }
    for (size_t i = 0; i < count; i++) {
      // Alternate the split between count and size; the product is the same.
      void *p = (i % 2 == 0) ? brisk_calloc(1, size) : brisk_calloc(size / 8, 8);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(all_bytes_are(p, size, 0)) << "size " << size << " round " << round << " block " << i;
      std::memset(p, 0xAB, brisk_usable_size(p));
      blocks[i] = p;
    }
    for (void *p : blocks) brisk_free(p);
  }
}

const size_t kCallocSizes[] = {8,     16,     24,     48,          104,         256,
                               1000,  4000,   5000,   16384,       40000,       100000,
                               300000, kMiB,  3 * kMiB, 20 * kMiB};

TEST(BriskApi, CallocZeroesReusedDirtyBlocks) {
  for (size_t size : kCallocSizes) check_calloc_zeroes_dirty_blocks(size, false);
}

TEST(BriskApi, CallocZeroesBlocksFreedByAnotherThread) {
  for (size_t size : kCallocSizes) check_calloc_zeroes_dirty_blocks(size, true);
}

// Sizes from tiny to certainly above the biggest size class.
const size_t kReallocSizes[] = {1,          16,       100,      1000,     5000,
                                70000,      600 << 10, 3 * kMiB, 20 * kMiB, 40 * kMiB};

TEST(BriskApi, ReallocKeepsContentsBetweenAllSizes) {
  uint64_t serial = 0;
  for (size_t from : kReallocSizes) {
    for (size_t to : kReallocSizes) {
      SCOPED_TRACE(testing::Message() << from << " -> " << to);
      void *p = brisk_malloc(from);
      ASSERT_NE(p, nullptr);
      // The seed ignores the address: realloc may move the block.
      const uint64_t seed = block_seed(nullptr, from, ++serial);
      fill_pattern(p, from, seed);
      void *q = brisk_realloc(p, to);
      ASSERT_NE(q, nullptr);
      EXPECT_TRUE(pattern_intact(q, std::min(from, to), seed));
      const size_t usable = brisk_usable_size(q);
      EXPECT_GE(usable, to);
      EXPECT_TRUE(is_aligned(q, promised_alignment(to))) << q;
      std::memset(q, 0x5A, usable);
      brisk_free(q);
    }
  }
}

TEST(BriskApi, ReallocChainGrowsThenShrinks) {
  const uint64_t seed = block_seed(nullptr, 0, 42);
  size_t size = 1;
  void *p = brisk_malloc(size);
  ASSERT_NE(p, nullptr);
  fill_pattern(p, size, seed);
  std::vector<size_t> steps;
  for (size_t s = 2; s <= 100 * kMiB; s += s / 3 + 1) steps.push_back(s);
  for (size_t i = steps.size(); i-- > 0;) steps.push_back(steps[i] / 2 + 1);
  for (size_t next : steps) {
    SCOPED_TRACE(testing::Message() << size << " -> " << next);
    p = brisk_realloc(p, next);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(pattern_intact(p, std::min(size, next), seed));
    EXPECT_GE(brisk_usable_size(p), next);
    fill_pattern(p, next, seed);
    size = next;
  }
  brisk_free(p);
}

TEST(BriskApi, ReallocOfNullIsMalloc) {
  void *p = brisk_realloc(nullptr, 100);
  ASSERT_NE(p, nullptr);
  EXPECT_GE(brisk_usable_size(p), 100u);
  std::memset(p, 1, 100);
  void *empty = brisk_realloc(nullptr, 0);
  ASSERT_NE(empty, nullptr);
  EXPECT_NE(empty, p);
  brisk_free(p);
  brisk_free(empty);
}

TEST(BriskApi, ReallocToZeroFreesAndReturnsNull) {
  for (size_t size : {size_t{1}, size_t{100}, size_t{100000}, 20 * kMiB}) {
    void *p = brisk_malloc(size);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, size);
    EXPECT_EQ(brisk_realloc(p, 0), nullptr) << size;
  }
}

// 1 B .. 16 MiB: every size up to 1100 (all small class boundaries), a
// geometric series with ratio 1.1, and each power of two with its neighbours.
std::vector<size_t> sweep_sizes() {
  const size_t top = 16 * kMiB;
  std::set<size_t> sizes;
  for (size_t s = 1; s <= 1100; s++) sizes.insert(s);
  for (double s = 1; s <= top; s = s * 1.1 + 1) sizes.insert(static_cast<size_t>(s));
  for (size_t p = 2; p <= top; p *= 2) sizes.insert({p - 1, p, p + 1});
  return {sizes.begin(), sizes.end()};
}

// The ABI promise, with many blocks live at once: a fresh page's first block
// is aligned whatever the class, so one block at a time would hide a class
// whose size is 8 mod 16. Every size from 1 B to 2 KiB four times over, then
// every 61st size to 64 KiB (a step smaller than any class there), all live
// together, filled, checked and freed in a shuffled order.
TEST(BriskApi, EveryLiveBlockAboveEightBytesIs16Aligned) {
  struct Live {
    void *p;
    size_t size;
  };
  std::vector<Live> live;
  for (int round = 0; round < 4; round++) {
    for (size_t size = 1; size <= 2048; size++) live.push_back({brisk_malloc(size), size});
  }
  for (size_t size = 2049; size <= 64 * 1024; size += 61) live.push_back({brisk_malloc(size), size});
  size_t misaligned = 0;
  for (const Live &b : live) {
    ASSERT_NE(b.p, nullptr) << b.size;
    if (!is_aligned(b.p, promised_alignment(b.size))) {
      if (misaligned++ < 5) ADD_FAILURE() << "size " << b.size << " at " << b.p;
    }
    fill_pattern(b.p, b.size, block_seed(b.p, b.size));
  }
  EXPECT_EQ(misaligned, 0u) << "of " << live.size() << " blocks";
  brisk_test::Rng rng(7);
  for (size_t i = live.size(); i > 1; i--) std::swap(live[i - 1], live[rng.below(i)]);
  for (const Live &b : live) {
    EXPECT_TRUE(pattern_intact(b.p, b.size, block_seed(b.p, b.size))) << b.size;
    brisk_free(b.p);
  }
}

TEST(BriskApi, GeometricSizeSweep) {
  // The last few blocks stay live, so an overlap between neighbouring sizes
  // would corrupt an older block's pattern before it is checked.
  struct Live {
    void *p;
    size_t usable;
  };
  constexpr size_t kLive = 8;
  Live ring[kLive] = {};
  size_t n = 0;
  auto retire = [](const Live &b) {
    if (b.p == nullptr) return;
    EXPECT_TRUE(pattern_intact(b.p, b.usable, block_seed(b.p, b.usable))) << b.p;
    brisk_free(b.p);
  };
  for (size_t size : sweep_sizes()) {
    void *p = brisk_malloc(size);
    ASSERT_NE(p, nullptr) << size;
    const size_t usable = brisk_usable_size(p);
    EXPECT_GE(usable, size);
    EXPECT_TRUE(is_aligned(p, promised_alignment(size))) << "size " << size << " at " << p;
    fill_pattern(p, usable, block_seed(p, usable));
    Live &slot = ring[n++ % kLive];
    retire(slot);
    slot = {p, usable};
  }
  for (const Live &b : ring) retire(b);
}

// Freeing a pointer brisk never handed out must abort with the address.
// "threadsafe" death tests re-execute the test binary in the child instead
// of forking a process that may have threads (TSan included) mid-operation.
class BriskApiDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(BriskApiDeathTest, FreeOfStackAddressAborts) {
  EXPECT_DEATH(
      {
        char local[64];
        escape(local);
        brisk_free(local);
      },
      "brisk.*0x");
}

TEST_F(BriskApiDeathTest, FreeOfPlainMmapAborts) {
  void *region = mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  EXPECT_DEATH(brisk_free(region), "brisk.*0x");
  munmap(region, kMiB);
}

// A foreign pointer at a large power-of-two boundary: what a segment start
// looks like to code that finds a segment by masking the address.
TEST_F(BriskApiDeathTest, FreeOfAlignedForeignMappingAborts) {
  const size_t boundary = 64 * kMiB;
  void *region = mmap(nullptr, 2 * boundary, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  uintptr_t aligned = (reinterpret_cast<uintptr_t>(region) + boundary - 1) & ~(boundary - 1);
  char *inside = reinterpret_cast<char *>(aligned) + 4096;
  EXPECT_DEATH(brisk_free(inside), "brisk.*0x");
  munmap(region, 2 * boundary);
}

// A huge block's mapping is cached when freed; freeing it again must abort
// rather than cache it twice (which would hand one mapping out twice).
TEST_F(BriskApiDeathTest, DoubleFreeOfHugeBlockAborts) {
  EXPECT_DEATH(
      {
        void *p = brisk_malloc(4 * kMiB);
        brisk_free(p);
        brisk_free(p);
      },
      "brisk.*0x.*double free");
}

// A pointer into the header area of one of brisk's own segments: brisk's
// metadata, never handed out (not a double free).
TEST_F(BriskApiDeathTest, FreeOfSegmentHeaderAddressAborts) {
  EXPECT_DEATH(
      {
        void *p = brisk_malloc(16);
        uintptr_t segment = reinterpret_cast<uintptr_t>(p) & ~((uintptr_t{32} << 20) - 1);
        brisk_free(reinterpret_cast<void *>(segment + 64));
      },
      "brisk.*0x.*not allocated by brisk");
}

// The last block of a class's current page is freed twice: the page's
// count would go below its pin.
TEST_F(BriskApiDeathTest, DoubleFreeOfLastSmallBlockAborts) {
  EXPECT_DEATH(
      {
        void *p = brisk_malloc(200);
        brisk_free(p);
        brisk_free(p);
      },
      "brisk.*0x.*double free");
}

// The heap validator: a heap that only saw correct calls passes; a double
// free that free()'s fast path cannot see (p, q, p with a neighbour still
// live) is named at the next check.
TEST(BriskValidate, AHeapThatSawOnlyCorrectCallsPasses) {
  std::vector<void *> blocks;
  for (int i = 0; i < 20000; i++) blocks.push_back(brisk_malloc(static_cast<size_t>(8 + i % 3000)));
  for (size_t i = 0; i < blocks.size(); i += 2) brisk_free(blocks[i]);
  brisk_test_validate_own_heap();
  for (size_t i = 1; i < blocks.size(); i += 2) brisk_free(blocks[i]);
  brisk_test_validate_own_heap();
}

TEST_F(BriskApiDeathTest, ValidatorNamesADoubleFreeTheFastPathMissed) {
  EXPECT_DEATH(
      {
        void *p = brisk_malloc(72);
        void *q = brisk_malloc(72);
        void *neighbour = brisk_malloc(72);
        escape(neighbour);
        brisk_free(p);
        brisk_free(q);
        brisk_free(p);
        brisk_test_validate_own_heap();
      },
      "brisk: heap check: a block is free twice");
}

TEST_F(BriskApiDeathTest, ValidatorNamesAFreeListLeavingItsPage) {
  EXPECT_DEATH(
      {
        void *p = brisk_malloc(72);
        void *neighbour = brisk_malloc(72);
        escape(neighbour);
        brisk_free(p);
        static char elsewhere[64];
        *static_cast<void **>(p) = elsewhere;  // a write after free over the link
        brisk_test_validate_own_heap();
      },
      "brisk: heap check: a free list leaves its page");
}

// An interior pointer freed by a thread that does not own the page.
TEST_F(BriskApiDeathTest, CrossThreadFreeOfInteriorPointerAborts) {
  EXPECT_DEATH(
      {
        char *p = static_cast<char *>(brisk_malloc(48));
        std::thread([p] { brisk_free(p + 16); }).join();
      },
      "brisk.*0x.*not the start of a block");
}

// realloc and usable_size of a pointer inside a block abort rather than
// report (and copy) bytes past the block's end.
TEST_F(BriskApiDeathTest, ReallocOfInteriorPointerAborts) {
  EXPECT_DEATH(
      {
        char *p = static_cast<char *>(brisk_malloc(48));
        escape(brisk_realloc(p + 16, 4096));
      },
      "brisk.*realloc.*0x.*not the start of a block");
  EXPECT_DEATH(
      {
        char *p = static_cast<char *>(brisk_malloc(48));
        escape(reinterpret_cast<void *>(brisk_usable_size(p + 8)));
      },
      "brisk.*0x.*not the start of a block");
}

// A pointer inside a live block freed by the thread that owns its page:
// free()'s fast path must not put it on the free list (malloc would hand it
// out over the block and its neighbour), on small, medium and large pages.
// The block has live neighbours, so no page count shows anything. (Each
// pointer is 8-aligned: the fast path stores its link through the pointer
// before the test, which UBSan reports first for a misaligned one.)
TEST_F(BriskApiDeathTest, LocalFreeOfInteriorPointerAborts) {
  struct Case {
    size_t size, offset;
    const char *message;
  };
  const Case cases[] = {
      {256, 32, "brisk: free\\(0x[0-9a-f]+\\): invalid pointer: not the start of a block, "
                "size class 17 \\(256-byte blocks\\)"},
      {48, 16, "not the start of a block, size class 4 \\(48-byte blocks\\)"},
      {16, 8, "not the start of a block, size class 2 \\(16-byte blocks\\)"},
      {20000, 8, "not the start of a block, size class 67 \\(20480-byte blocks\\)"},
      {200 * 1024, 4096, "not the start of a block, size class 88 \\(229376-byte blocks\\)"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.size);
    EXPECT_DEATH(
        {
          void *before = brisk_malloc(c.size);
          char *p = static_cast<char *>(brisk_malloc(c.size));
          void *after = brisk_malloc(c.size);
          escape(before);
          escape(after);
          brisk_free(p + c.offset);
        },
        c.message);
  }
}

// The arithmetic behind the test above and behind the block start of an
// interior aligned pointer, for every class and every byte of its page.
TEST(BriskApi, BlockStartArithmeticIsExact) {
  uint64_t checked = 0;
  EXPECT_EQ(brisk_test_block_start_errors(&checked), 0u);
  EXPECT_GT(checked, uint64_t{100} << 20);
}

TEST(BriskApi, SizeClassTableIsConsistent) {
  uint64_t checked = 0;
  EXPECT_EQ(brisk_test_size_class_errors(&checked), 0u);
  EXPECT_EQ(checked, uint64_t{512} << 10);
}

TEST_F(BriskApiDeathTest, FreeOfSystemMallocPointerAborts) {
  void *foreign = std::malloc(100);
  ASSERT_NE(foreign, nullptr);
  EXPECT_DEATH(brisk_free(foreign), "brisk.*0x");
  std::free(foreign);
}

}  // namespace

// Size classes: from 128 B to 64 KiB no block is more than 12.5% larger than
// asked for, above it up to the biggest class (512 KiB) no more than 25%; up
// to 128 B every size rounds to the next multiple of 16 (8 B and less to 8).
TEST(BriskApi, InternalWasteIsBounded) {
  for (size_t size = 1; size <= 512 * 1024; size += (size < 8192 ? 1 : 61)) {
    void *p = brisk_malloc(size);
    ASSERT_NE(p, nullptr) << size;
    size_t usable = brisk_usable_size(p);
    brisk_free(p);
    ASSERT_GE(usable, size);
    if (size <= 128) {
      EXPECT_EQ(usable, size <= 8 ? 8 : (size + 15) / 16 * 16) << "size " << size;
    } else if (size <= 64 * 1024) {
      EXPECT_LE(usable - size, size / 8) << "size " << size << " usable " << usable;
    } else {
      EXPECT_LE(usable - size, size / 4) << "size " << size << " usable " << usable;
    }
  }
}
