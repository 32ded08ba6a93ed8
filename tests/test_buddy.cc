// The lock-free buddy allocator: bad arguments fail with the right errno,
// blocks are aligned to their rounded size and to `align`, exhaustion is
// exact with one thread, freed buddies coalesce, concurrent allocations and
// cross-thread frees of random sizes never overlap (lock-free, and with
// the thread cache), validate sees a whole tree again after
// everything is freed, and misuse (foreign pointer, interior pointer,
// double free; use after free under ASan) aborts with a message, and the
// statistics count what was asked and every OS call (against the OS
// layer's own count).
#include <brisk.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "../src/regions/buddy.h"
#include "os_calls.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::find_pattern_mismatch;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::Rng;
using brisk_test::scaled;
using brisk_test::StartGate;

namespace {

constexpr int kThreads = 8;  // the test machine has 2 cores: oversubscribe
constexpr size_t kKiB = 1024;

size_t round_up_pow2(size_t x) {
  size_t r = 1;
  while (r < x) r <<= 1;
  return r;
}

brisk_buddy_counters_t counters_of(const brisk_buddy_t *b) {
  brisk_buddy_counters_t c;
  _brisk_buddy_counters(b, &c);
  return c;
}

brisk_region_stats_t stats_of(const brisk_buddy_t *b) {
  brisk_region_stats_t s;
  brisk_buddy_stats(b, &s);
  return s;
}

// validate() == 1 and, when asked, every tree whole again.
void expect_consistent(brisk_buddy_t *b, bool expect_all_free) {
  int all_free = -1;
  EXPECT_EQ(brisk_buddy_validate(b, &all_free), 1);
  if (expect_all_free) EXPECT_EQ(all_free, 1);
}

TEST(Buddy, BadArgumentsFailWithErrno) {
  errno = 0;
  EXPECT_EQ(brisk_buddy_create(0, 64), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_create(kMiB, 2 * kMiB), nullptr);  // min_block > total
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_create_ex(kMiB, 128, 64, 0), nullptr);  // min_block > max_block
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_create_ex(kMiB, 64, 2 * kMiB, 0), nullptr);  // max_block > total
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_create_ex(kMiB, 64, 0, 0x100u), nullptr);  // unknown flag
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_create(size_t{1} << 62, 64), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  // Sizes below the smallest block (16) round up to it, total included: a
  // buddy of one 16-byte block, not EINVAL; and a success leaves errno.
  for (size_t total : {size_t{1}, size_t{8}, size_t{15}}) {
    for (size_t min_block : {size_t{0}, size_t{1}, total}) {
      SCOPED_TRACE(testing::Message() << "total " << total << " min_block " << min_block);
      errno = EAGAIN;
      brisk_buddy_t *tiny = brisk_buddy_create_ex(total, min_block, min_block, 0);
      ASSERT_NE(tiny, nullptr);
      EXPECT_EQ(errno, EAGAIN);
      void *p = brisk_buddy_alloc(tiny, total, 0);
      EXPECT_NE(p, nullptr);
      EXPECT_EQ(brisk_buddy_alloc(tiny, 1, 0), nullptr);  // its one block is out
      brisk_buddy_free(tiny, p);
      expect_consistent(tiny, true);
      brisk_buddy_destroy(tiny);
    }
  }

  brisk_buddy_t *b = brisk_buddy_create_ex(kMiB, 64, 64 * kKiB, 0);
  ASSERT_NE(b, nullptr);
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(b, 0, 0), nullptr);  // size 0: EINVAL
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 48), nullptr);  // not a power of two
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(b, 64 * kKiB + 1, 0), nullptr);  // above max_block
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 128 * kKiB), nullptr);  // align above max_block
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(b, SIZE_MAX, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_buddy_free(b, nullptr);  // does nothing
  EXPECT_EQ(counters_of(b).failures, 3u);  // every ENOMEM is a failure, EINVAL is not
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
  brisk_buddy_destroy(nullptr);
}

// EINVAL is for a shape no buddy can have, whatever the sizes; a request
// of a good shape that is only too large fails with ENOMEM (or succeeds
// where the system has the memory). max_block 0 takes a row of trees of
// 2^31 units where total has more units than one tree can count.
TEST(Buddy, HugeRequestsOfAGoodShapeAreEnomem) {
  const size_t kTiB = size_t{1} << 40;
  errno = 0;
  brisk_buddy_t *b = brisk_buddy_create_ex(kTiB, 16, 0, 0);  // 2^36 units
  if (b != nullptr) {
    brisk_buddy_destroy(b);
  } else {
    EXPECT_EQ(errno, ENOMEM);
  }
  // Its shape, without the memory: 1 TiB of blocks, 9 bytes per unit.
  size_t region = 0, meta = 0;
  ASSERT_EQ(_brisk_buddy_footprint(kTiB, 16, 0, &region, &meta), 0);
  EXPECT_EQ(region, kTiB);
  EXPECT_GE(meta, kTiB / 16 * 9);
  EXPECT_LT(meta, kTiB / 16 * 9 + kMiB);
  EXPECT_EQ(_brisk_buddy_footprint(64 * (kTiB >> 10), 16, 0, &region, &meta), 0);
  EXPECT_EQ(region, 64 * (kTiB >> 10));
  // One tree of 2^31 units is the most with max_block 0, and then a row.
  EXPECT_EQ(_brisk_buddy_footprint(size_t{3} << 35, 16, 0, &region, &meta), 0);
  EXPECT_EQ(region, size_t{3} << 35);  // three trees of 32 GiB, not 128 GiB
  // Above 64 TiB, whatever max_block (a good one): ENOMEM.
  const size_t sizes[] = {size_t{1} << 47, size_t{1} << 50, size_t{1} << 62, SIZE_MAX};
  for (size_t total : sizes) {
    SCOPED_TRACE(total);
    errno = 0;
    EXPECT_EQ(brisk_buddy_create(total, 4096), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_buddy_create(total, 16), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_buddy_create_ex(total, size_t{1} << 20, size_t{1} << 46, 0), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_buddy_create(total, total), nullptr);  // one block of it all
    EXPECT_EQ(errno, ENOMEM);
    // A bad shape stays EINVAL at any size: too many units per tree, an
    // unknown flag, min_block > max_block.
    errno = 0;
    EXPECT_EQ(brisk_buddy_create_ex(total, 16, total, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(brisk_buddy_create_ex(total, 4096, 0, 0x100u), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(brisk_buddy_create_ex(total, 8192, 4096, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  // And at sizes that fit: 2^32 units in one tree is EINVAL when asked for.
  errno = 0;
  EXPECT_EQ(brisk_buddy_create_ex(size_t{1} << 36, 16, size_t{1} << 36, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(_brisk_buddy_footprint(size_t{1} << 36, 16, size_t{1} << 36, &region, &meta), EINVAL);
}

// A NULL buddy allocator: alloc is NULL/EINVAL, free of NULL, trim and
// destroy do nothing, stats are zero, validate is 0 with EINVAL.
TEST(Buddy, NullBuddyIsEinvalOrNothing) {
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(nullptr, 64, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  brisk_buddy_free(nullptr, nullptr);
  brisk_buddy_trim(nullptr);
  brisk_buddy_destroy(nullptr);
  brisk_region_stats_t st;
  std::memset(&st, 0xff, sizeof st);
  brisk_buddy_stats(nullptr, &st);
  EXPECT_TRUE(brisk_test::all_counts_zero(st));
  int all_free = -1;
  errno = 0;
  EXPECT_EQ(brisk_buddy_validate(nullptr, &all_free), 0);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(all_free, 0);
}

TEST(Buddy, SizesAreRoundedUpToPowersOfTwo) {
  brisk_buddy_t *b = brisk_buddy_create(1000, 20);  // min 32, total (one tree) 1024
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(_brisk_buddy_min_block(b), 32u);
  EXPECT_EQ(_brisk_buddy_max_block(b), 1024u);
  uintptr_t lo, hi;
  _brisk_buddy_range(b, &lo, &hi);
  EXPECT_EQ(hi - lo, 1024u);
  EXPECT_EQ(lo % 1024, 0u);
  brisk_buddy_destroy(b);

  // min_block below 16 becomes 16; total becomes a multiple of max_block,
  // and max_block may pass total only by total's own rounding.
  b = brisk_buddy_create_ex(600 * kKiB, 1, 256 * kKiB, 0);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(_brisk_buddy_min_block(b), 16u);
  _brisk_buddy_range(b, &lo, &hi);
  EXPECT_EQ(hi - lo, 768 * kKiB);
  brisk_buddy_destroy(b);
  b = brisk_buddy_create_ex(600 * kKiB, 64, kMiB, 0);
  ASSERT_NE(b, nullptr);
  _brisk_buddy_range(b, &lo, &hi);
  EXPECT_EQ(hi - lo, kMiB);
  brisk_buddy_destroy(b);
}

// Every block is aligned to its rounded size and to `align` (any power of
// two up to max_block), and lies inside the region.
TEST(Buddy, BlocksAreAlignedToTheirSizeAndToAlign) {
  const size_t max_block = 256 * kKiB;
  brisk_buddy_t *b = brisk_buddy_create_ex(4 * kMiB, 16, max_block, 0);
  ASSERT_NE(b, nullptr);
  uintptr_t lo, hi;
  _brisk_buddy_range(b, &lo, &hi);
  Rng rng(7);
  std::vector<void *> live;
  for (int i = 0; i < 2000; i++) {
    size_t size = 1 + rng.below(rng.below(4) == 0 ? 16 * kKiB : 300);
    size_t align = rng.below(3) == 0 ? 0 : size_t{1} << rng.below(19);  // up to max_block
    void *p = brisk_buddy_alloc(b, size, align);
    if (p == nullptr) {
      ASSERT_EQ(errno, ENOMEM);
      for (void *q : live) brisk_buddy_free(b, q);
      live.clear();
      continue;
    }
    size_t block = round_up_pow2(std::max({size, align, size_t{16}}));
    EXPECT_TRUE(is_aligned(p, block)) << p << " size " << size << " align " << align;
    EXPECT_TRUE(is_aligned(p, align == 0 ? 16 : align));
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    EXPECT_GE(a, lo);
    EXPECT_LE(a + block, hi);
    std::memset(p, 0xab, size);
    live.push_back(p);
  }
  expect_consistent(b, false);
  for (void *q : live) brisk_buddy_free(b, q);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// 1 MiB of 64-B units: exactly 16384 blocks of 64 B, then ENOMEM; one free
// makes room for exactly one. Counters and statistics follow exactly.
TEST(Buddy, ExhaustionIsExactWithOneThread) {
  brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
  ASSERT_NE(b, nullptr);
  std::vector<char *> blocks;
  for (int i = 0; i < 16384; i++) {
    char *p = static_cast<char *>(brisk_buddy_alloc(b, 64, 0));
    ASSERT_NE(p, nullptr) << i;
    p[0] = static_cast<char>(i);
    blocks.push_back(p);
  }
  errno = 0;
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(brisk_buddy_alloc(b, 16, 0), nullptr);
  // Every unit is used once: the blocks are the region, in some order.
  std::vector<char *> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); i++) ASSERT_EQ(sorted[i], sorted[i - 1] + 64);
  brisk_buddy_counters_t c = counters_of(b);
  EXPECT_EQ(c.in_use, kMiB);
  EXPECT_EQ(c.high_water, kMiB);
  EXPECT_EQ(c.allocations, 16384u);
  EXPECT_EQ(c.failures, 2u);
  brisk_region_stats_t s = stats_of(b);
  EXPECT_EQ(s.bytes_in_use, kMiB);
  EXPECT_EQ(s.bytes_requested, kMiB);
  EXPECT_EQ(s.allocations, 16384u);  // the failures are not counted
  EXPECT_GE(s.bytes_held, kMiB);

  char *freed = blocks[1234];
  brisk_buddy_free(b, freed);
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 0), freed);
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 0), nullptr);
  expect_consistent(b, false);
  for (char *p : blocks) brisk_buddy_free(b, p);
  c = counters_of(b);
  EXPECT_EQ(c.in_use, 0u);
  EXPECT_EQ(c.high_water, kMiB);
  expect_consistent(b, true);
  // Whole again: the root is one block.
  void *all = brisk_buddy_alloc(b, kMiB, 0);
  EXPECT_NE(all, nullptr);
  brisk_buddy_free(b, all);
  brisk_buddy_destroy(b);
}

// Free every other 64-B block: half the region is free but no 128-B block
// is. Freeing one freed block's buddy coalesces the pair into one.
TEST(Buddy, FreedBuddiesCoalesce) {
  brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
  ASSERT_NE(b, nullptr);
  std::vector<char *> blocks;
  for (;;) {
    char *p = static_cast<char *>(brisk_buddy_alloc(b, 64, 0));
    if (p == nullptr) break;
    blocks.push_back(p);
  }
  ASSERT_EQ(blocks.size(), 16384u);
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 0; i < blocks.size(); i += 2) brisk_buddy_free(b, blocks[i]);
  EXPECT_EQ(counters_of(b).in_use, kMiB / 2);
  EXPECT_EQ(brisk_buddy_alloc(b, 128, 0), nullptr);
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 128), nullptr);  // the same block size
  expect_consistent(b, false);
  brisk_buddy_free(b, blocks[1001]);  // the buddy of the free blocks[1000]
  EXPECT_EQ(brisk_buddy_alloc(b, 128, 0), blocks[1000]);
  EXPECT_EQ(brisk_buddy_alloc(b, 128, 0), nullptr);
  expect_consistent(b, false);
  brisk_buddy_free(b, blocks[1000]);
  for (size_t i = 1; i < blocks.size(); i += 2)
    if (i != 1001) brisk_buddy_free(b, blocks[i]);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// Buddies destroyed while the program still holds a block (a region
// allocator's everyday end: destroy takes every block): each region goes
// to the OS layer's mapping cache as it is, and the next buddy of the same
// shape takes it and hands out the same address again, a block like any
// other. Under Valgrind each block goes with its buddy: two live blocks at
// one address would abort memcheck's leak check at exit.
TEST(Buddy, DestroyTakesLiveBlocksAndLeavesTheRegionToTheNextBuddy) {
  char *first_block = nullptr;
  for (int round = 0; round < 3; round++) {
    brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
    ASSERT_NE(b, nullptr);
    char *p = static_cast<char *>(brisk_buddy_alloc(b, 100, 0));
    ASSERT_NE(p, nullptr);
    if (round == 0) first_block = p;
    EXPECT_EQ(p, first_block) << "the region came back from the mapping cache";
    std::memset(p, 0x5A + round, 100);
    expect_consistent(b, false);
    brisk_buddy_destroy(b);  // p never freed
  }
}

// Random sizes on one thread, validated as it goes, over several trees.
TEST(Buddy, RandomSizesStayConsistent) {
  brisk_buddy_t *b = brisk_buddy_create_ex(2 * kMiB, 32, 256 * kKiB, 0);
  ASSERT_NE(b, nullptr);
  Rng rng(99);
  struct Live {
    void *p;
    size_t size;
  };
  std::vector<Live> live;
  size_t bytes = 0;
  for (int i = 0; i < scaled(20000, 4000); i++) {
    if (!live.empty() && rng.below(5) < 2) {
      size_t j = rng.below(live.size());
      ASSERT_EQ(find_pattern_mismatch(live[j].p, live[j].size, block_seed(live[j].p, live[j].size)),
                live[j].size);
      brisk_buddy_free(b, live[j].p);
      bytes -= round_up_pow2(std::max(live[j].size, size_t{32}));
      live[j] = live.back();
      live.pop_back();
    } else {
      size_t size = 1 + rng.below(size_t{1} << (5 + rng.below(13)));
      void *p = brisk_buddy_alloc(b, size, 0);
      if (p == nullptr) continue;
      fill_pattern(p, size, block_seed(p, size));
      bytes += round_up_pow2(std::max(size, size_t{32}));
      live.push_back({p, size});
    }
    if (i % 2000 == 0) {
      expect_consistent(b, false);
      ASSERT_EQ(counters_of(b).in_use, bytes);
    }
  }
  for (const Live &l : live) brisk_buddy_free(b, l.p);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// Every count against an independent one, in every mode: system_requests
// against the OS layer's count of the same window (one thread; nothing else
// in it calls brisk), made at creation only (two reservations, and with
// PREFAULT a prefault of each), allocations and bytes_requested against the
// test's own sums (sizes as asked, before rounding; failures not counted).
TEST(Buddy, StatsCountWhatWasAskedAndEveryOsCall) {
  const unsigned kFlags[] = {0, BRISK_REGION_PREFAULT, BRISK_REGION_THREAD_CACHE};
  for (unsigned flags : kFlags) {
    SCOPED_TRACE(flags);
    std::vector<void *> blocks(2000, nullptr);
    std::vector<size_t> taken(blocks.size(), 0);  // each live block's rounded size
    size_t asked = 0, allocations = 0, live_bytes = 0;
    bool ok = true;
    // The OS layer's mapping cache emptied: creation maps afresh.
    brisk_test_os_cache_flush();
    const uint64_t os_before = brisk_test_os_calls();
    brisk_buddy_t *b = brisk_buddy_create_ex(4 * kMiB, 64, 256 * kKiB, flags);
    if (b == nullptr) GTEST_FAIL() << "create";
    brisk_region_stats_t created = stats_of(b);
    for (int round = 0; round < 2; round++) {
      for (size_t i = 0; i < blocks.size(); i++) {
        if (blocks[i] != nullptr) continue;
        size_t size = 1 + (i * 7919 + static_cast<size_t>(round)) % 3000;
        blocks[i] = brisk_buddy_alloc(b, size, i % 5 == 0 ? 256 : 0);
        if (blocks[i] == nullptr) continue;  // full: not counted
        asked += size;
        allocations++;
        taken[i] = round_up_pow2(std::max(size, i % 5 == 0 ? size_t{256} : size_t{64}));
        live_bytes += taken[i];
      }
      for (size_t i = round; i < blocks.size(); i += 3) {
        if (blocks[i] == nullptr) continue;
        live_bytes -= taken[i];
        brisk_buddy_free(b, blocks[i]);
        blocks[i] = nullptr;
      }
    }
    ok &= brisk_buddy_alloc(b, 0, 0) == nullptr;            // EINVAL
    ok &= brisk_buddy_alloc(b, 512 * kKiB, 0) == nullptr;   // above max_block: ENOMEM
    brisk_region_stats_t s = stats_of(b);
    const uint64_t os_calls = brisk_test_os_calls() - os_before;

    ASSERT_TRUE(ok);
    EXPECT_EQ(s.system_requests, os_calls);
    EXPECT_EQ(s.system_requests, created.system_requests);  // all at creation
    EXPECT_GE(s.system_requests, flags == BRISK_REGION_PREFAULT ? 4u : 2u);
    EXPECT_EQ(s.allocations, allocations);
    EXPECT_EQ(s.bytes_requested, asked);
    EXPECT_EQ(s.bytes_in_use, live_bytes);
    brisk_buddy_destroy(b);
  }
}

// A run (the hybrid's refill): 2^j adjacent blocks of order k from one
// split block, each then freed alone; the tree stays consistent throughout
// (the validator counts the run's blocks as live ones), a run needs a free
// block of order k + j, and the region is whole again at the end.
TEST(Buddy, RunsSplitOneBlockIntoBlocksFreedAlone) {
  const size_t region = 64 * kKiB, min = 128;
  brisk_buddy_t *b = brisk_buddy_create_ex(region, min, 16 * kKiB, 0);
  ASSERT_NE(b, nullptr);
  std::vector<void *> run(8, nullptr);
  ASSERT_EQ(_brisk_buddy_take_run(b, 1, 3, run.data()), 8u);  // 8 blocks of 256 B
  for (size_t i = 0; i < run.size(); i++) {
    EXPECT_EQ(static_cast<char *>(run[i]) - static_cast<char *>(run[0]),
              static_cast<ptrdiff_t>(i * 256));
    EXPECT_TRUE(is_aligned(run[i], 256));
    memset(run[i], 0x5A, 256);
  }
  brisk_region_stats_t s = stats_of(b);
  EXPECT_EQ(s.bytes_in_use, 8 * 256u);
  EXPECT_EQ(s.allocations, 8u);
  expect_consistent(b, false);
  // 16 KiB blocks, a tree each: the run took one of the 4 trees.
  std::vector<void *> big;
  for (void *p; (p = brisk_buddy_alloc(b, 16 * kKiB, 0)) != nullptr;) big.push_back(p);
  EXPECT_EQ(big.size(), 3u);
  // 14 KiB left, in the run's tree: a run from a 512 B block fits, one
  // from a 16 KiB block does not.
  void *small[4], *none[8];
  EXPECT_EQ(_brisk_buddy_take_run(b, 0, 2, small), 4u);
  EXPECT_EQ(_brisk_buddy_take_run(b, 4, 3, none), 0u);
  for (void *p : small) brisk_buddy_free(b, p);
  for (size_t i = 0; i < run.size(); i += 2) brisk_buddy_free(b, run[i]);
  expect_consistent(b, false);
  for (size_t i = 1; i < run.size(); i += 2) brisk_buddy_free(b, run[i]);
  for (void *p : big) brisk_buddy_free(b, p);
  expect_consistent(b, true);
  EXPECT_EQ(stats_of(b).bytes_in_use, 0u);
  // Whole again: a run as big as a tree, none bigger.
  void *all[128];
  EXPECT_EQ(_brisk_buddy_take_run(b, 0, 7, all), 128u);
  EXPECT_EQ(_brisk_buddy_take_run(b, 0, 8, all), 0u) << "k + j above the largest order";
  for (int i = 0; i < 128; i++) brisk_buddy_free(b, all[i]);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// _brisk_buddy_free_batch (a cache in front gives back half a list): a
// batch of blocks of one order from runs and single allocations in several
// trees, in a shuffled order, is freed as if one by one: the counters
// validate after each batch, the bytes in use follow, and once every block
// is back each tree is one free root (a block the size of the region's
// trees fits in every one of them). A batch of mixed orders takes the
// one-by-one path, with the same result.
TEST(Buddy, BatchFreeIsManyFreesInOne) {
  const size_t region = 256 * kKiB, min = 128, max = 16 * kKiB;  // 16 trees
  brisk_buddy_t *b = brisk_buddy_create_ex(region, min, max, 0);
  ASSERT_NE(b, nullptr);
  std::vector<void *> blocks;  // order 1 (256 B)
  for (int r = 0; r < 12; r++) {
    void *run[8];
    ASSERT_EQ(_brisk_buddy_take_run(b, 1, 3, run), 8u);
    blocks.insert(blocks.end(), run, run + 8);
    void *one = brisk_buddy_alloc(b, 200, 0);
    ASSERT_NE(one, nullptr);
    blocks.push_back(one);
    void *big = brisk_buddy_alloc(b, max, 0);  // keeps runs in several trees
    ASSERT_NE(big, nullptr);
    brisk_buddy_free(b, big);
  }
  std::vector<void *> mixed = {brisk_buddy_alloc(b, 128, 0), brisk_buddy_alloc(b, 1024, 0),
                               brisk_buddy_alloc(b, 256, 0)};
  for (void *p : mixed) ASSERT_NE(p, nullptr);
  Rng rng(7);
  for (size_t i = blocks.size(); i > 1; i--) std::swap(blocks[i - 1], blocks[rng.next() % i]);
  size_t in_use = counters_of(b).in_use;
  ASSERT_EQ(in_use, blocks.size() * 256 + 128 + 1024 + 256);
  for (size_t done = 0; done < blocks.size(); done += 37) {
    size_t n = std::min<size_t>(37, blocks.size() - done);
    _brisk_buddy_free_batch(b, blocks.data() + done, n, "brisk_buddy_free");
    in_use -= n * 256;
    EXPECT_EQ(counters_of(b).in_use, in_use);
    expect_consistent(b, false);
  }
  _brisk_buddy_free_batch(b, mixed.data(), mixed.size(), "brisk_buddy_free");
  EXPECT_EQ(counters_of(b).in_use, 0u);
  expect_consistent(b, true);
  std::vector<void *> trees;
  for (void *p; (p = brisk_buddy_alloc(b, max, 0)) != nullptr;) trees.push_back(p);
  EXPECT_EQ(trees.size(), region / max);
  _brisk_buddy_free_batch(b, trees.data(), trees.size(), "brisk_buddy_free");
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// _brisk_buddy_forget_blocks (a cache in front thrown away with the
// buddy): every block still handed out is shown to the visitor once, and
// afterwards every tree is one free root with no index byte set, though
// only the nodes in use were visited.
TEST(Buddy, ForgetBlocksVisitsEachBlockAndLeavesTreesWhole) {
  const size_t region = 256 * kKiB, min = 128, max = 16 * kKiB;
  brisk_buddy_t *b = brisk_buddy_create_ex(region, min, max, 0);
  ASSERT_NE(b, nullptr);
  std::vector<void *> held;
  void *run[16];
  ASSERT_EQ(_brisk_buddy_take_run(b, 0, 4, run), 16u);
  held.insert(held.end(), run, run + 16);
  for (size_t size : {128u, 300u, 1000u, 4096u, 16384u}) held.push_back(brisk_buddy_alloc(b, size, 0));
  for (void *p : held) ASSERT_NE(p, nullptr);
  brisk_buddy_free(b, held[3]);  // a hole in the run
  held.erase(held.begin() + 3);
  std::vector<void *> seen;
  _brisk_buddy_forget_blocks(
      b, [](void *ctx, void *p) { static_cast<std::vector<void *> *>(ctx)->push_back(p); },
      &seen);
  std::sort(seen.begin(), seen.end());
  std::sort(held.begin(), held.end());
  EXPECT_EQ(seen, held);
  EXPECT_EQ(counters_of(b).in_use, 0u);
  expect_consistent(b, true);
  std::vector<void *> trees;
  for (void *p; (p = brisk_buddy_alloc(b, max, 0)) != nullptr;) trees.push_back(p);
  EXPECT_EQ(trees.size(), region / max);
  for (void *p : trees) brisk_buddy_free(b, p);
  brisk_buddy_destroy(b);
}

// A cached block stays allocated in the tree: another thread cannot have
// it until trim; the freeing thread gets it back, and flushes its cache
// when the tree alone cannot serve a request.
TEST(Buddy, ThreadCacheHoldsBlocksUntilTrim) {
  brisk_buddy_t *b = brisk_buddy_create_ex(64 * kKiB, 64, 0, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(b, nullptr);
  std::vector<char *> blocks;
  for (int i = 0; i < 1024; i++) {
    blocks.push_back(static_cast<char *>(brisk_buddy_alloc(b, 64, 0)));
    ASSERT_NE(blocks.back(), nullptr);
  }
  std::sort(blocks.begin(), blocks.end());
  brisk_buddy_free(b, blocks[10]);  // into this thread's cache
  void *other = reinterpret_cast<void *>(1);
  std::thread([&] { other = brisk_buddy_alloc(b, 64, 0); }).join();
  EXPECT_EQ(other, nullptr);  // the documented cost of a cache
  EXPECT_EQ(brisk_buddy_alloc(b, 64, 0), blocks[10]);  // this thread's cache

  // Two cached buddies: the tree can't give 128 B until the cache is flushed.
  brisk_buddy_free(b, blocks[10]);
  brisk_buddy_free(b, blocks[11]);
  expect_consistent(b, false);
  EXPECT_EQ(brisk_buddy_alloc(b, 128, 0), blocks[10]);
  brisk_buddy_free(b, blocks[10]);

  brisk_buddy_free(b, blocks[20]);
  brisk_buddy_trim(b);  // every slot's cache back to the tree
  std::vector<void *> got(4, nullptr);
  std::thread([&] {
    for (void *&p : got) p = brisk_buddy_alloc(b, 64, 0);
  }).join();
  EXPECT_NE(got[0], nullptr);
  EXPECT_NE(got[1], nullptr);
  EXPECT_NE(got[2], nullptr);
  EXPECT_EQ(got[3], nullptr);
  for (int i = 0; i < 3; i++) brisk_buddy_free(b, got[i]);
  for (size_t i = 0; i < blocks.size(); i++)
    if (i != 10 && i != 11 && i != 20) brisk_buddy_free(b, blocks[i]);
  brisk_buddy_trim(b);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// A thread that exits leaves its cache in its slot, where only the slot's
// next holder would use it; a request the trees cannot serve takes such
// caches back first (thread_slot.h), so the one thread left gets the whole
// region without a trim. The threads (more than cores) are alive at once,
// so each caches in a slot of its own.
TEST(BuddyThreads, CachesOfExitedThreadsComeBackWhenTheTreesRunOut) {
  brisk_buddy_t *b = brisk_buddy_create_ex(64 * kKiB, 64, 0, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(b, nullptr);
  const int kThreads = 24;
  std::atomic<int> cached{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      void *blocks[4];
      for (void *&p : blocks) p = brisk_buddy_alloc(b, size_t{64} << (t % 4), 0);
      for (void *p : blocks) brisk_buddy_free(b, p);  // into this thread's cache
      cached++;
      while (cached.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto &t : threads) t.join();
  expect_consistent(b, false);  // the exited threads' caches hold their blocks
  void *whole = brisk_buddy_alloc(b, 64 * kKiB, 0);
  EXPECT_NE(whole, nullptr) << "the caches of exited threads kept the region from serving it";
  brisk_buddy_free(b, whole);
  brisk_buddy_trim(b);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// ---- Threads: random sizes and alignments, blocks handed between threads ----

struct Rec {
  void *p;
  size_t size;
  uint64_t seed;
};

// Log-uniform sizes from 1 B to max (mostly small), random alignments.
size_t random_size(Rng &rng, size_t max_shift) {
  return 1 + rng.below(size_t{1} << (4 + rng.below(max_shift - 3)));
}
size_t random_align(Rng &rng) {
  if (rng.below(8) != 0) return rng.below(2) ? 0 : 16;
  return size_t{32} << rng.below(6);
}

// kThreads threads: each keeps a few blocks of its own and swaps others
// through shared mailboxes, so most blocks are freed by another thread;
// every block carries a pattern checked on free. Afterwards (trim, then
// validate) the trees are consistent and whole again.
void stress(size_t total, size_t min_block, size_t max_block, unsigned flags,
            size_t max_shift = brisk_test::kSanitized ? 12 : 15) {  // sizes up to 4 or 32 KiB
  brisk_buddy_t *b = brisk_buddy_create_ex(total, min_block, max_block, flags);
  ASSERT_NE(b, nullptr);
  const long ops = scaled(200000, 20000);
  constexpr size_t kMailboxes = 64;
  constexpr size_t kOwn = 16;
  std::vector<std::atomic<Rec *>> mailbox(kMailboxes);
  for (auto &m : mailbox) m.store(nullptr);
  std::atomic<long> corrupt{0}, misaligned{0}, failures{0};
  StartGate gate(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Rng rng(500 + t);
      std::vector<Rec *> own(kOwn, nullptr);
      auto release = [&](Rec *r) {
        if (r == nullptr) return;
        if (find_pattern_mismatch(r->p, r->size, r->seed) != r->size) corrupt++;
        brisk_buddy_free(b, r->p);
        delete r;
      };
      gate.arrive_and_wait();
      for (long i = 0; i < ops; i++) {
        size_t size = random_size(rng, max_shift);
        size_t align = random_align(rng);
        void *p = brisk_buddy_alloc(b, size, align);
        if (p == nullptr) {
          failures++;
          Rec *&victim = own[rng.below(kOwn)];  // make room
          release(victim);
          victim = nullptr;
          continue;
        }
        if (!is_aligned(p, align == 0 ? 16 : align)) misaligned++;
        uint64_t seed = block_seed(p, size, (uint64_t(t) << 40) | uint64_t(i));
        fill_pattern(p, size, seed);
        Rec *r = new Rec{p, size, seed};
        if (rng.below(4) == 0) {
          Rec *&slot = own[rng.below(kOwn)];
          release(slot);
          slot = r;
        } else {
          release(mailbox[rng.below(kMailboxes)].exchange(r));
        }
      }
      for (Rec *r : own) release(r);
    });
  }
  for (auto &th : threads) th.join();
  for (auto &m : mailbox) {
    Rec *r = m.exchange(nullptr);
    if (r == nullptr) continue;
    if (find_pattern_mismatch(r->p, r->size, r->seed) != r->size) corrupt++;
    brisk_buddy_free(b, r->p);
    delete r;
  }
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(misaligned.load(), 0);
  brisk_buddy_counters_t c = counters_of(b);
  EXPECT_EQ(c.in_use, 0u);
  EXPECT_GT(c.high_water, 0u);
  // Approximate with threads: within 64 KiB (a slot's unflushed delta) per thread.
  EXPECT_LE(c.high_water, total + kThreads * 64 * kKiB);
  EXPECT_EQ(c.failures, static_cast<size_t>(failures.load()));
  EXPECT_EQ(c.allocations + c.failures, static_cast<size_t>(kThreads) * ops);
  brisk_buddy_trim(b);
  expect_consistent(b, true);
  brisk_buddy_destroy(b);
}

// Many trees (threads start in different ones), and one tree for everyone.
TEST(BuddyThreads, RandomSizesManyTrees) { stress(16 * kMiB, 16, 256 * kKiB, 0); }
TEST(BuddyThreads, RandomSizesOneTree) { stress(4 * kMiB, 16, 0, 0); }
TEST(BuddyThreads, RandomSizesWithThreadCache) {
  stress(16 * kMiB, 16, 256 * kKiB, BRISK_REGION_THREAD_CACHE);
}
// A region too small for the load: failures, then everything comes back.
TEST(BuddyThreads, NearExhaustion) { stress(kMiB, 64, 128 * kKiB, BRISK_REGION_THREAD_CACHE); }
// 256 units in one tree: nearly every search meets another thread's
// reservations, gives them back and redirects.
TEST(BuddyThreads, TinyTreeContention) { stress(4 * kKiB, 16, 0, 0, 9); }
TEST(BuddyThreads, TinyTreeContentionWithThreadCache) {
  stress(4 * kKiB, 16, 0, BRISK_REGION_THREAD_CACHE, 9);
}

// ---- Misuse ----

// "threadsafe" death tests re-execute the binary instead of forking.
class BuddyDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(BuddyDeathTest, ForeignPointerAborts) {
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        alignas(64) char local[128];
        escape(local);
        brisk_buddy_free(b, local);
      },
      "brisk: brisk_buddy_free\\(0x[0-9a-f]+\\): not a block of this buddy allocator");
  EXPECT_DEATH(
      {
        brisk_buddy_t *a = brisk_buddy_create(kMiB, 64);
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        brisk_buddy_free(b, brisk_buddy_alloc(a, 64, 0));
      },
      "brisk_buddy_free\\(0x[0-9a-f]+\\): not a block of this buddy allocator");
}

TEST_F(BuddyDeathTest, InteriorPointerAborts) {
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        char *p = static_cast<char *>(brisk_buddy_alloc(b, 256, 0));
        brisk_buddy_free(b, p + 8);
      },
      "brisk_buddy_free\\(0x[0-9a-f]+\\): not the start of a block");
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        char *p = static_cast<char *>(brisk_buddy_alloc(b, 256, 0));
        brisk_buddy_free(b, p + 64);  // a unit's start inside the block
      },
      "brisk_buddy_free\\(0x[0-9a-f]+\\): not the start of a block");
  // A unit's start in free memory: no block around it.
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        char *p = static_cast<char *>(brisk_buddy_alloc(b, 256, 0));
        brisk_buddy_free(b, p + 512);
      },
      "brisk_buddy_free\\(0x[0-9a-f]+\\): double free, or a block never handed out");
}

TEST_F(BuddyDeathTest, DoubleFreeAborts) {
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        void *keep = brisk_buddy_alloc(b, 100, 0);
        void *p = brisk_buddy_alloc(b, 100, 0);
        escape(keep);
        brisk_buddy_free(b, p);
        brisk_buddy_free(b, p);
      },
      "brisk_buddy_free\\(0x[0-9a-f]+\\): double free");
  // Caught too when the first free put the block in a thread cache.
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create_ex(kMiB, 64, 0, BRISK_REGION_THREAD_CACHE);
        void *p = brisk_buddy_alloc(b, 100, 0);
        brisk_buddy_free(b, p);
        brisk_buddy_free(b, p);
      },
      "brisk_buddy_free\\(0x[0-9a-f]+\\): double free");
}

TEST_F(BuddyDeathTest, FreeToANullBuddyAborts) {
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        brisk_buddy_free(nullptr, brisk_buddy_alloc(b, 64, 0));
      },
      "brisk: brisk_buddy_free\\(0x[0-9a-f]+\\): no buddy allocator \\(NULL\\) to free it to");
}

// A second destroy while the mapping cache keeps the meta mapping (every
// block was freed), its header as the first destroy left it, gave the
// cache both mappings twice: the next two buddies of the shape were one.
TEST_F(BuddyDeathTest, DoubleDestroyAborts) {
  brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
  ASSERT_NE(b, nullptr);
  brisk_buddy_free(b, brisk_buddy_alloc(b, 100, 0));
  brisk_buddy_destroy(b);
  if (!brisk_test_os_cache_holds(b)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_buddy_destroy(b),
               "brisk: brisk_buddy_destroy\\(0x[0-9a-f]+\\): not a live buddy allocator "
               "\\(destroyed already\\?\\)");
}

// A second destroy once the meta mapping went back to the system read its
// header unmapped and died of SIGSEGV: with the mapping cache turned off,
// and whatever the cache when a block was still live at the first destroy.
TEST_F(BuddyDeathTest, DoubleDestroyOfAnUnmappedBuddyAborts) {
  const char *kNotLive =
      "brisk: brisk_buddy_destroy\\(0x[0-9a-f]+\\): not a live buddy allocator "
      "\\(destroyed already\\?\\)";
  EXPECT_DEATH(
      {
        brisk_test_os_cache_configure(0, 0, 0);
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        brisk_buddy_destroy(b);
        brisk_buddy_destroy(b);
      },
      kNotLive);
  EXPECT_DEATH(
      {
        brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
        escape(brisk_buddy_alloc(b, 100, 0));
        brisk_buddy_destroy(b);
        brisk_buddy_destroy(b);
      },
      kNotLive);
}

// Calls with a buddy destroyed while the mapping cache keeps its meta
// mapping (every block was freed; its header as destroy left it): alloc
// searched the destroyed trees and handed out blocks of the region the
// cache keeps, both of which the next buddy of the shape takes back.
// Each aborts now. On main each failed to die, but the free of a block
// from before the destroy, named "double free, or a block never handed
// out".
TEST_F(BuddyDeathTest, CallsAfterDestroyAbort) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
  brisk_buddy_t *cached = brisk_buddy_create_ex(kMiB, 64, 0, BRISK_REGION_THREAD_CACHE);
  ASSERT_TRUE(b != nullptr && cached != nullptr);
  void *p = brisk_buddy_alloc(b, 100, 0);
  void *c = brisk_buddy_alloc(cached, 100, 0);
  ASSERT_TRUE(p != nullptr && c != nullptr);
  brisk_buddy_free(b, p);
  brisk_buddy_free(cached, c);  // in this thread's cache until destroy
  brisk_buddy_destroy(b);
  brisk_buddy_destroy(cached);
  if (!brisk_test_os_cache_holds(b) || !brisk_test_os_cache_holds(cached))
    GTEST_SKIP() << "the mapping cache did not keep them";
  auto not_live = [](const char *call) {
    return std::string("brisk: ") + call +
           "\\(0x[0-9a-f]+\\): not a live buddy allocator \\(destroyed already\\?\\)";
  };
  brisk_region_stats_t s;
  int all_free;
  EXPECT_DEATH(brisk_buddy_alloc(b, 100, 0), not_live("brisk_buddy_alloc"));
  EXPECT_DEATH(brisk_buddy_alloc(cached, 100, 0), not_live("brisk_buddy_alloc"));
  EXPECT_DEATH(brisk_buddy_alloc(b, 0, 3), not_live("brisk_buddy_alloc"));
  EXPECT_DEATH(brisk_buddy_free(b, p), not_live("brisk_buddy_free"));
  EXPECT_DEATH(brisk_buddy_free(cached, c), not_live("brisk_buddy_free"));
  EXPECT_DEATH(brisk_buddy_trim(cached), not_live("brisk_buddy_trim"));
  EXPECT_DEATH(brisk_buddy_stats(b, &s), not_live("brisk_buddy_stats"));
  EXPECT_DEATH(brisk_buddy_validate(b, &all_free), not_live("brisk_buddy_validate"));
}

// Another kind's live handle: no live buddy allocator's.
TEST_F(BuddyDeathTest, DestroyOfAnotherKindsHandleAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(64, 0, 100);
        brisk_buddy_destroy(reinterpret_cast<brisk_buddy_t *>(pool));
      },
      "brisk: brisk_buddy_destroy\\(0x[0-9a-f]+\\): not a live buddy allocator");
}

TEST(BuddyDeathTestAsan, UseAfterFreeIsCaught) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  brisk_buddy_t *b = brisk_buddy_create(kMiB, 64);
  ASSERT_NE(b, nullptr);
  char *p = static_cast<char *>(brisk_buddy_alloc(b, 64, 0));
  ASSERT_NE(p, nullptr);
  p[10] = 1;  // fine while the block lives
  brisk_buddy_free(b, p);
  EXPECT_DEATH(
      {
        volatile char *q = p;
        q[10] = 2;
      },
      "use-after-poison");
  char *r = static_cast<char *>(brisk_buddy_alloc(b, 64, 0));
  ASSERT_EQ(r, p);  // handed out again: usable
  r[10] = 3;
  brisk_buddy_free(b, r);
  brisk_buddy_destroy(b);
#else
  GTEST_SKIP() << "needs AddressSanitizer (-DBRISK_SANITIZE=address)";
#endif
}

}  // namespace
