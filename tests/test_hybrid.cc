// The hybrid bounded pool (seed 003): buckets in front of buddy regions,
// frees dispatched by address; its totals count what was asked and every
// OS call (against the OS layer's own count), and the registry counts it
// as one hybrid, not as pools and buddies. Runs in every build, TSan
// included.
#include <brisk.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "os_calls.h"
#include "region_checks.h"
#include "test_util.h"

using brisk_test::fill_pattern;
using brisk_test::find_pattern_mismatch;
using brisk_test::Rng;
using brisk_test::scaled;
using brisk_test::Turns;

namespace {

struct HybridDeleter {
  void operator()(brisk_hybrid_t *h) const { brisk_hybrid_destroy(h); }
};
using HybridPtr = std::unique_ptr<brisk_hybrid_t, HybridDeleter>;

std::vector<brisk_hybrid_section_stats_t> stats_of(const brisk_hybrid_t *h,
                                                   size_t *fallbacks = nullptr) {
  std::vector<brisk_hybrid_section_stats_t> out(BRISK_HYBRID_MAX_BUCKETS +
                                                BRISK_HYBRID_MAX_REGIONS);
  size_t n = brisk_hybrid_stats(h, out.data(), out.size(), fallbacks);
  out.resize(n);
  return out;
}

// A small config: one 16-B bucket of `bucket_count` objects and one region.
brisk_hybrid_config_t small_config(size_t bucket_count, size_t region_size, unsigned flags) {
  brisk_hybrid_config_t c{};
  c.bucket_sizes[0] = 16;
  c.bucket_counts[0] = bucket_count;
  c.region_sizes[0] = region_size;
  c.region_min_block = 32;
  c.region_max_block = region_size;
  c.flags = flags;
  return c;
}

// A NULL hybrid (brisk/hybrid.h): destroy does nothing, the statistics
// are zeros (EINVAL), and the exported alloc fails with EINVAL and its free
// of NULL does nothing (the inline ones, which test no handle, crash).
// The totals and the exported calls dereferenced the handle before.
TEST(Hybrid, NullHybridFailsWithEinval) {
  brisk_hybrid_destroy(nullptr);
  brisk_hybrid_section_stats_t section;
  size_t fallbacks = 7;
  errno = 0;
  EXPECT_EQ(brisk_hybrid_stats(nullptr, &section, 1, &fallbacks), 0u);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(fallbacks, 0u);
  brisk_region_stats_t totals;
  std::memset(&totals, 0xff, sizeof totals);
  errno = 0;
  brisk_hybrid_totals(nullptr, &totals);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(brisk_test::all_counts_zero(totals));
  errno = 0;
  EXPECT_EQ(brisk_test_hybrid_alloc_exported(nullptr, 64, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  brisk_test_hybrid_free_exported(nullptr, nullptr);
}

TEST(Hybrid, DefaultServesEverySizeUpToOneMiB) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  std::vector<void *> blocks;
  for (size_t size = 1; size <= (1u << 20); size = size < 128 ? size + 1 : size * 2 + 3) {
    size_t capped = size > (1u << 20) ? (1u << 20) : size;
    void *p = brisk_hybrid_alloc(h.get(), capped, 0);
    ASSERT_NE(p, nullptr) << capped;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (capped % 16 == 0 ? 16 : 8), 0u) << capped;
    memset(p, 0xA5, capped);
    blocks.push_back(p);
  }
  void *whole = brisk_hybrid_alloc(h.get(), 1u << 20, 0);
  ASSERT_NE(whole, nullptr);
  errno = 0;
  EXPECT_EQ(brisk_hybrid_alloc(h.get(), (1u << 20) + 1, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_hybrid_free(h.get(), whole);
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);

  auto stats = stats_of(h.get());
  ASSERT_EQ(stats.size(), 4u);  // buckets 16, 32, 64 and one region
  EXPECT_EQ(stats[0].block_size, 16u);
  EXPECT_EQ(stats[1].block_size, 32u);
  EXPECT_EQ(stats[2].block_size, 64u);
  EXPECT_EQ(stats[3].block_size, 0u);
  EXPECT_GE(stats[3].bytes_reserved, size_t(64) << 20);
  for (const auto &s : stats) {
    EXPECT_EQ(s.in_use, 0u);
    EXPECT_GT(s.allocations, 0u);
    EXPECT_GT(s.high_water, 0u);
  }
}

TEST(Hybrid, SmallSizesGoToTheSmallestFittingBucket) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  void *a = brisk_hybrid_alloc(h.get(), 10, 0);   // 16-B bucket
  void *b = brisk_hybrid_alloc(h.get(), 17, 0);   // 32-B bucket
  void *c = brisk_hybrid_alloc(h.get(), 64, 0);   // 64-B bucket
  void *d = brisk_hybrid_alloc(h.get(), 65, 0);   // buddy region
  void *e = brisk_hybrid_alloc(h.get(), 16, 64);  // over-aligned: buddy region
  ASSERT_TRUE(a && b && c && d && e);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e) % 64, 0u);
  auto stats = stats_of(h.get());
  EXPECT_EQ(stats[0].in_use, 16u);
  EXPECT_EQ(stats[1].in_use, 32u);
  EXPECT_EQ(stats[2].in_use, 64u);
  EXPECT_GE(stats[3].in_use, 65u + 16u);
  for (void *p : {a, b, c, d, e}) brisk_hybrid_free(h.get(), p);
  stats = stats_of(h.get());
  for (const auto &s : stats) EXPECT_EQ(s.in_use, 0u);
}

// align 0 means malloc's alignment for the size asked, not the bucket's:
// a 16-byte request never comes back 8-aligned from a 24-byte bucket, and
// the fallback honours an explicit 16 for a 24-byte block.
TEST(Hybrid, DefaultAlignmentFollowsTheRequestedSize) {
  brisk_hybrid_config_t c{};
  c.bucket_sizes[0] = 24;
  c.bucket_counts[0] = 64;
  c.bucket_sizes[1] = 136;
  c.bucket_counts[1] = 64;
  c.region_sizes[0] = 1 << 16;
  c.fallback_to_malloc = 1;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<void *> blocks;
  for (int i = 0; i < 16; i++) {
    for (size_t size : {8, 16, 24, 130}) {
      void *p = brisk_hybrid_alloc(h.get(), size, 0);
      ASSERT_NE(p, nullptr);
      size_t want = size % 16 == 0 || size >= 128 ? 16 : 8;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % want, 0u) << size;
      blocks.push_back(p);
    }
  }
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);

  brisk_hybrid_config_t f{};
  f.bucket_sizes[0] = 8;
  f.bucket_counts[0] = 1;
  f.fallback_to_malloc = 1;
  HybridPtr g(brisk_hybrid_create(&f));
  ASSERT_NE(g, nullptr);
  blocks.clear();
  for (int i = 0; i < 64; i++) {
    void *p = brisk_hybrid_alloc(g.get(), 24, 16);  // no region: the fallback
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    blocks.push_back(p);
  }
  for (void *p : blocks) brisk_hybrid_free(g.get(), p);
}

TEST(Hybrid, BadInput) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  errno = 0;
  EXPECT_EQ(brisk_hybrid_alloc(h.get(), 0, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_hybrid_alloc(h.get(), 16, 3), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_hybrid_alloc(h.get(), SIZE_MAX, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_hybrid_free(h.get(), nullptr);

  brisk_hybrid_config_t c{};
  errno = 0;
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr) << "no section at all";
  EXPECT_EQ(errno, EINVAL);
  c = small_config(10, 1 << 16, 0);
  c.bucket_sizes[0] = 12;  // not a multiple of 8
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr);
  c = small_config(10, 1 << 16, 0);
  c.bucket_sizes[0] = 1024;  // above 512 B
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr);
  c = small_config(10, 1 << 16, 0);
  c.bucket_counts[0] = 0;
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr);
  c = small_config(10, 1 << 16, 0);
  c.bucket_sizes[1] = 8;  // not ascending
  c.bucket_counts[1] = 10;
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr);
  c = small_config(10, 1 << 16, 0);
  c.region_min_block = 48;  // not a power of two
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr);
  c = small_config(10, 1 << 16, 0x100);  // unknown flag
  EXPECT_EQ(brisk_hybrid_create(&c), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(Hybrid, EveryAlignmentHolds) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  std::vector<void *> blocks;
  for (size_t align = 1; align <= 4096; align *= 2) {
    for (size_t size : {1, 8, 16, 24, 33, 64, 100, 1000, 5000}) {
      void *p = brisk_hybrid_alloc(h.get(), size, align);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << size << " " << align;
      blocks.push_back(p);
    }
  }
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);
}

// The bound is exact: the bucket's objects, then the region's blocks, then
// NULL; a free makes room again. Without thread caches nothing hides.
void check_exhaustion(unsigned flags) {
  const size_t bucket_objects = 100, region = 1 << 16, min_block = 32;
  brisk_hybrid_config_t c = small_config(bucket_objects, region, flags);
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<void *> blocks;
  for (;;) {
    void *p = brisk_hybrid_alloc(h.get(), 16, 0);
    if (p == nullptr) break;
    blocks.push_back(p);
    ASSERT_LE(blocks.size(), bucket_objects + region / min_block);
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(blocks.size(), bucket_objects + region / min_block);
  auto stats = stats_of(h.get());
  EXPECT_GE(stats[0].failures, 1u);
  EXPECT_EQ(stats[0].in_use, bucket_objects * 16);
  EXPECT_EQ(stats[1].in_use, region);
  brisk_test_hybrid_validate(h.get());  // every object and block handed out
  // Free one bucket object and one region block: both come back.
  brisk_hybrid_free(h.get(), blocks.front());
  brisk_hybrid_free(h.get(), blocks.back());
  void *a = brisk_hybrid_alloc(h.get(), 16, 0);
  void *b = brisk_hybrid_alloc(h.get(), 16, 0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(brisk_hybrid_alloc(h.get(), 16, 0), nullptr);
  blocks.front() = a;
  blocks.back() = b;
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);
  brisk_test_hybrid_validate(h.get());  // everything free or cached
}

// With thread caches, what one thread frees waits in its cache, up to the
// cap of the block's class (32 KiB of blocks, at most 64: 64 blocks of
// 512 B), and only the rest goes back to the region for others: another
// thread then gets the region less at most that cap, and the first thread
// still gets its cached blocks. Nothing is lost or handed out twice.
TEST(Hybrid, ThreadCacheHoldsAtMostItsCapFromOtherThreads) {
  const size_t region = 64 << 10, block = 512, blocks = region / block, cap = 64;
  brisk_hybrid_config_t c = small_config(16, region, BRISK_REGION_THREAD_CACHE);
  c.region_min_block = 128;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<void *> mine;
  for (void *p; (p = brisk_hybrid_alloc(h.get(), block, 0)) != nullptr;) mine.push_back(p);
  ASSERT_EQ(mine.size(), blocks);
  for (void *p : mine) brisk_hybrid_free(h.get(), p);
  std::vector<void *> theirs;
  std::thread([&] {
    for (void *p; (p = brisk_hybrid_alloc(h.get(), block, 0)) != nullptr;) theirs.push_back(p);
  }).join();
  brisk_test_hybrid_validate(h.get());  // the quiet point: the other thread joined
  std::vector<void *> again;
  for (void *p; (p = brisk_hybrid_alloc(h.get(), block, 0)) != nullptr;) again.push_back(p);
#if !defined(__SANITIZE_ADDRESS__)
  // (An ASan build keeps the hybrid's caches off: the tool sees each block.)
  EXPECT_LT(theirs.size(), blocks) << "nothing was cached: nothing tested";
#endif
  EXPECT_GE(theirs.size() + cap, blocks);
  EXPECT_EQ(theirs.size() + again.size(), blocks);
  std::vector<void *> all(theirs);
  all.insert(all.end(), again.begin(), again.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a block handed out twice";
  for (void *p : all) brisk_hybrid_free(h.get(), p);
  for (const auto &s : stats_of(h.get())) EXPECT_EQ(s.in_use, 0u) << s.block_size;
  brisk_test_hybrid_validate(h.get());
}

// One thread meets the bound exactly for blocks no class holds too: with
// every block freed, the region's largest block (1 MiB, past the cached
// orders) is had even though the thread's lists still hold blocks of the
// cached orders, split out of that very block; they go back to the region
// first. (With the caches off, an ASan build, there is nothing to take
// back.)
TEST(Hybrid, OneThreadGetsABlockNoClassHoldsPastItsOwnCachedBlocks) {
  brisk_hybrid_config_t c;
  brisk_hybrid_default_config(&c);
  c.region_sizes[0] = 1 << 20;  // one tree: one block of 1 MiB
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  void *whole = brisk_hybrid_alloc(h.get(), 1 << 20, 0);
  ASSERT_NE(whole, nullptr);
  brisk_hybrid_free(h.get(), whole);
  for (size_t size : {200u, 3000u, 40000u}) {
    std::vector<void *> blocks;
    for (int i = 0; i < 5; i++) blocks.push_back(brisk_hybrid_alloc(h.get(), size, 0));
    for (void *p : blocks) {
      ASSERT_NE(p, nullptr);
      brisk_hybrid_free(h.get(), p);
    }
    for (const auto &s : stats_of(h.get())) EXPECT_EQ(s.in_use, 0u) << s.block_size;
    whole = brisk_hybrid_alloc(h.get(), 1 << 20, 0);
    EXPECT_NE(whole, nullptr) << "after blocks of " << size << " B: the thread's own cached "
                              << "blocks kept the region from serving 1 MiB";
    brisk_hybrid_free(h.get(), whole);
    brisk_test_hybrid_validate(h.get());
  }
}

// Threads that exit leave their lists in their slots, where only a slot's
// next holder would use them; a section that cannot serve a request takes
// them back first (thread_slot.h), so the one thread left meets the bound
// exactly: the region's one block of 1 MiB, which the exited threads'
// cached blocks were split from, then every bucket object and every
// smallest region block. The threads (more than cores) are alive at once,
// so each caches in a slot of its own. (An ASan build keeps the caches
// off: nothing to take back.) A request that a section serves after the
// take-back leaves errno alone.
TEST(HybridThreads, ListsOfExitedThreadsComeBackWhenASectionRunsOut) {
  const size_t bucket_objects = 4096, region = 1 << 20, min_block = 32;
  brisk_hybrid_config_t c = small_config(bucket_objects, region, BRISK_REGION_THREAD_CACHE);
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  const int kThreads = 24;
  std::atomic<int> cached{0};
  std::atomic<long> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      for (size_t size : {16u, 200u, 3000u, 20000u}) {
        void *blocks[4];
        for (void *&p : blocks) failed += (p = brisk_hybrid_alloc(h.get(), size, 0)) == nullptr;
        for (void *p : blocks) brisk_hybrid_free(h.get(), p);  // into this thread's lists
      }
      cached++;
      while (cached.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  brisk_test_hybrid_validate(h.get());
  errno = EAGAIN;
  void *whole = brisk_hybrid_alloc(h.get(), region, 0);
  EXPECT_NE(whole, nullptr) << "the lists of exited threads kept the region from serving it";
  EXPECT_EQ(errno, EAGAIN);
  brisk_hybrid_free(h.get(), whole);
  std::vector<void *> blocks;
  for (void *p; (p = brisk_hybrid_alloc(h.get(), 16, 0)) != nullptr;) blocks.push_back(p);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(blocks.size(), bucket_objects + region / min_block);
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);
  brisk_test_hybrid_validate(h.get());
}

// Each section's allocations and in_use stay exact while the thread caches
// turn over: rounds of allocations past every list's cap (refills) and
// frees past it (flushes) in every cached class of the default config, in
// this thread and in a second one (whose slot entry is new to the hybrid),
// against the test's own counts. The caches keep each class's count in the
// word that also holds the list's room.
TEST(Hybrid, SectionCountsStayExactThroughTheCaches) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  // One size per section class: buckets 16/32/64, region orders 128 B to 64 KiB.
  const size_t sizes[] = {16, 24, 40, 100, 200, 400, 1000, 2000, 4000, 8000, 16000, 30000, 60000};
  auto section_of = [](size_t size) -> size_t { return size <= 16 ? 0 : size <= 32 ? 1 : size <= 64 ? 2 : 3; };
  std::vector<size_t> expected(4, 0);
  auto churn = [&](std::vector<size_t> &counts) {
    std::vector<void *> live;
    for (int round = 0; round < 3; round++) {
      for (size_t size : sizes) {
        for (int i = 0; i < 150; i++) {  // past any cap (64): refills
          void *p = brisk_hybrid_alloc(h.get(), size, 0);
          ASSERT_NE(p, nullptr);
          memset(p, i, size);
          live.push_back(p);
          counts[section_of(size)]++;
        }
      }
      // Free all but a few: past every cap, so lists flush to the sections.
      while (live.size() > 7) {
        brisk_hybrid_free(h.get(), live.back());
        live.pop_back();
      }
    }
    for (void *p : live) brisk_hybrid_free(h.get(), p);
  };
  churn(expected);
  std::vector<size_t> theirs(4, 0);
  std::thread([&] { churn(theirs); }).join();
  brisk_test_hybrid_validate(h.get());  // two entries' lists, every class
  auto stats = stats_of(h.get());
  ASSERT_EQ(stats.size(), 4u);
  for (size_t s = 0; s < 4; s++) {
    EXPECT_EQ(stats[s].allocations, expected[s] + theirs[s]) << s;
    EXPECT_EQ(stats[s].in_use, 0u) << s;
  }
  // One block held: in_use counts it, not the blocks the caches hold.
  void *p = brisk_hybrid_alloc(h.get(), 200, 0);
  ASSERT_NE(p, nullptr);
  stats = stats_of(h.get());
  EXPECT_EQ(stats[3].in_use, 256u);
  EXPECT_EQ(stats[3].allocations, expected[3] + theirs[3] + 1);
  brisk_region_stats_t totals;
  brisk_hybrid_totals(h.get(), &totals);
  size_t all = 1;
  for (size_t s = 0; s < 4; s++) all += expected[s] + theirs[s];
  EXPECT_EQ(totals.allocations, all);
  brisk_hybrid_free(h.get(), p);
}

// A region's high_water never reads more than its bytes, and no less than
// the peak one thread filled it to. 40 threads each free one block of the
// full region and stay alive (their frees wait in their own batched counts
// of bytes in use), then the main thread fills it again: its allocations
// saw those frees' blocks as still in use, and read the region 40 blocks
// over its bytes (5.5 MB for 4 MiB) before the read was clamped.
TEST(HybridThreads, RegionHighWaterNeverReadsMoreThanItsBytes) {
  brisk_hybrid_config_t c{};
  c.region_sizes[0] = size_t(4) << 20;  // one region, no buckets, no caches
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  constexpr size_t kBlock = 32768;
  std::vector<void *> blocks;
  while (void *p = brisk_hybrid_alloc(h.get(), kBlock, 0)) blocks.push_back(p);
  ASSERT_EQ(blocks.size(), (size_t(4) << 20) / kBlock);
  constexpr int kThreads = 40;
  Turns turns;
  int freed = 0, refilled = 0;
  std::vector<std::thread> freers;
  for (int i = 0; i < kThreads; i++) {
    freers.emplace_back([&, i] {
      brisk_hybrid_free(h.get(), blocks[i]);
      turns.count(freed);
      turns.wait_for([&] { return refilled == 1; });  // alive: its count not flushed
    });
  }
  turns.wait_for([&] { return freed == kThreads; });
  for (int i = 0; i < kThreads; i++) {
    blocks[i] = brisk_hybrid_alloc(h.get(), kBlock, 0);
    ASSERT_NE(blocks[i], nullptr);
  }
  auto stats = stats_of(h.get());
  turns.count(refilled);
  for (auto &t : freers) t.join();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].bytes_reserved, size_t(4) << 20);
  EXPECT_GE(stats[0].high_water, size_t(4) << 20);
  EXPECT_LE(stats[0].high_water, stats[0].bytes_reserved);
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);
}

// The library's exported brisk_hybrid_alloc and brisk_hybrid_free (what a
// function pointer or another language's bindings reach) share the
// thread's lists with <brisk/hybrid.h>'s inline ones: a block either frees
// is the next one either hands out, and the counts stay exact across
// buckets, region orders, refills and flushes.
TEST(Hybrid, ExportedFunctionsShareTheCachesWithTheInlineOnes) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  brisk_hybrid_t *hy = h.get();
  for (size_t size : {size_t{24}, size_t{100}, size_t{3000}}) {
    void *p = brisk_test_hybrid_alloc_exported(hy, size, 0);
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, size);
    brisk_hybrid_free(hy, p);
    EXPECT_EQ(brisk_hybrid_alloc(hy, size, 0), p) << size;
    brisk_test_hybrid_free_exported(hy, p);
    EXPECT_EQ(brisk_test_hybrid_alloc_exported(hy, size, 0), p) << size;
    brisk_test_hybrid_free_exported(hy, p);
  }
  brisk_test_hybrid_free_exported(hy, nullptr);
  size_t allocations = 9;  // three per size above
  std::vector<void *> live;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 600; i++) {  // past every cap: refills, then flushes
      size_t size = 16 + (size_t)(i * 37) % 4000;
      void *p = i % 2 ? brisk_test_hybrid_alloc_exported(hy, size, 0)
                      : brisk_hybrid_alloc(hy, size, 0);
      ASSERT_NE(p, nullptr);
      memset(p, i, size);
      live.push_back(p);
      allocations++;
    }
    for (size_t i = 0; i < live.size(); i++) {
      if (i % 3)
        brisk_hybrid_free(hy, live[i]);
      else
        brisk_test_hybrid_free_exported(hy, live[i]);
    }
    live.clear();
  }
  brisk_test_hybrid_validate(hy);
  brisk_region_stats_t totals;
  brisk_hybrid_totals(hy, &totals);
  EXPECT_EQ(totals.allocations, allocations);
  EXPECT_EQ(totals.bytes_in_use, 0u);
}

// Every destroy leaves the inline free's code table zero for the next
// hybrid that takes the mapping from the cache: one destroyed with half its
// blocks in the thread's caches and half still held (the region's part of
// the table cleared whole), one after the program gave everything back
// (only cached blocks hold codes), one with every block still held. A code
// left over would name a block that is not there: the validator, run
// before the next hybrid hands anything out, finds none, and the next
// hybrid frees its own blocks at those addresses as it should. So does
// every thread entry and count (destroy zeroes those its threads used, and
// the next create leaves them): a second thread caches blocks in every
// round, and each new hybrid starts with no list and every count at 0.
TEST(Hybrid, DestroyLeavesTheCodeTableZero) {
  auto cache_hits = [] {
    brisk_stats_t s{};
    s.size = sizeof s;
    brisk_stats_get(&s);
    return s.region_cache.hits;
  };
  const uint64_t hits = cache_hits();
  for (int round = 0; round < 4; round++) {
    SCOPED_TRACE(round);
    brisk_hybrid_t *h = brisk_hybrid_create(nullptr);
    ASSERT_NE(h, nullptr);
    brisk_test_hybrid_validate(h);
    brisk_region_stats_t fresh;
    brisk_hybrid_totals(h, &fresh);
    EXPECT_EQ(fresh.allocations, 0u);
    EXPECT_EQ(fresh.bytes_requested, 0u);
    EXPECT_EQ(fresh.bytes_in_use, 0u);
    std::thread other([h] {
      std::vector<void *> mine;
      for (size_t size = 16; size <= 4000; size *= 2) mine.push_back(brisk_hybrid_alloc(h, size, 0));
      for (void *p : mine) brisk_hybrid_free(h, p);
    });
    other.join();
    std::vector<void *> blocks;
    for (size_t size = 16; size <= 40000; size = size * 5 / 4 + 1)
      for (int i = 0; i < 40; i++) {
        void *p = brisk_hybrid_alloc(h, size, 0);
        ASSERT_NE(p, nullptr);
        blocks.push_back(p);
      }
    brisk_test_hybrid_validate(h);
    size_t held = round == 0 ? blocks.size() / 2 : round == 1 ? 0 : blocks.size();
    for (size_t i = held; i < blocks.size(); i++) brisk_hybrid_free(h, blocks[i]);
    brisk_test_hybrid_validate(h);
    brisk_hybrid_destroy(h);
  }
  // Each hybrid took its predecessor's mapping, where the mapping cache
  // keeps it (BRISK_REGION_CACHE_MB and BRISK_REGION_CACHE_MS at least
  // their defaults); everything above holds for a fresh mapping too.
  const brisk_region_cache_stats_t cache = brisk_test::stats_snapshot().region_cache;
  if (cache.max_bytes >= (size_t{256} << 20) && cache.delay_ms >= 1000) {
    EXPECT_GE(cache_hits() - hits, 3u);
  }
}

TEST(Hybrid, ExhaustionIsExactLockFree) { check_exhaustion(0); }
TEST(Hybrid, ExhaustionIsExactWithThreadCache) { check_exhaustion(BRISK_REGION_THREAD_CACHE); }

TEST(Hybrid, FallbackToMallocWhenFull) {
  brisk_hybrid_config_t c = small_config(4, 1 << 12, 0);
  c.fallback_to_malloc = 1;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<void *> blocks;
  for (int i = 0; i < 400; i++) {
    void *p = brisk_hybrid_alloc(h.get(), 16, 0);
    ASSERT_NE(p, nullptr);
    memset(p, i, 16);
    blocks.push_back(p);
  }
  void *big = brisk_hybrid_alloc(h.get(), 1 << 20, 0);  // larger than any region block
  ASSERT_NE(big, nullptr);
  memset(big, 1, 1 << 20);
  size_t fallbacks = 0;
  stats_of(h.get(), &fallbacks);
  EXPECT_EQ(fallbacks, 400u - 4u - (1u << 12) / 32u + 1u);
  brisk_hybrid_free(h.get(), big);
  for (void *p : blocks) brisk_hybrid_free(h.get(), p);
}

// Every count of brisk_hybrid_totals against an independent one, in three
// modes: system_requests against the OS layer's count of the same window
// (one thread; nothing in it calls brisk_malloc), all made at creation;
// allocations and bytes_requested against the test's own sums (the sizes
// asked, not the bucket's object size), fallbacks to brisk_malloc included
// (counted after the window: their OS calls are the general allocator's);
// bytes_in_use the sections'. The registry counts the hybrid under its own
// kind and none of its pools or buddies.
TEST(Hybrid, TotalsCountWhatWasAskedAndEveryOsCall) {
  const unsigned kFlags[] = {0, BRISK_REGION_PREFAULT, BRISK_REGION_THREAD_CACHE};
  for (unsigned flags : kFlags) {
    SCOPED_TRACE(flags);
    brisk_hybrid_config_t c{};
    c.bucket_sizes[0] = 16;
    c.bucket_counts[0] = 1000;
    c.bucket_sizes[1] = 48;
    c.bucket_counts[1] = 1000;
    c.region_sizes[0] = 4 << 20;  // room for every block below: no fallback yet
    c.region_max_block = 1 << 16;
    c.flags = flags;
    c.fallback_to_malloc = 1;
    std::vector<void *> blocks(600, nullptr);
    brisk_region_kind_stats_t before[BRISK_REGION_KINDS], during[BRISK_REGION_KINDS];
    brisk_test_regions_stats(before);
    size_t asked = 0, allocations = 0;
    bool ok = true;
    // The OS layer's mapping cache emptied: creation maps afresh.
    brisk_test_os_cache_flush();
    const uint64_t os_before = brisk_test_os_calls();
    brisk_hybrid_t *h = brisk_hybrid_create(&c);
    if (h == nullptr) GTEST_FAIL() << "create";
    brisk_region_stats_t created;
    brisk_hybrid_totals(h, &created);
    for (size_t i = 0; i < blocks.size(); i++) {
      size_t size = i % 3 == 0 ? 1 + i % 48 : 49 + i * 37 % 5000;  // buckets, region
      blocks[i] = brisk_hybrid_alloc(h, size, 0);
      ok &= blocks[i] != nullptr;
      asked += size;
      allocations++;
    }
    for (size_t i = 0; i < blocks.size(); i += 2) brisk_hybrid_free(h, blocks[i]);
    ok &= brisk_hybrid_alloc(h, 0, 0) == nullptr;  // EINVAL: not counted
    brisk_region_stats_t s;
    brisk_hybrid_totals(h, &s);
    const uint64_t os_calls = brisk_test_os_calls() - os_before;
    brisk_test_regions_stats(during);

    ASSERT_TRUE(ok);
    EXPECT_EQ(s.system_requests, os_calls);
    EXPECT_EQ(s.system_requests, created.system_requests);  // all at creation
    EXPECT_EQ(s.allocations, allocations);
    EXPECT_EQ(s.bytes_requested, asked);
    size_t sections_in_use = 0;
    for (const auto &section : stats_of(h)) sections_in_use += section.in_use;
    EXPECT_EQ(s.bytes_in_use, sections_in_use);
    EXPECT_GT(s.bytes_in_use, 0u);
    EXPECT_EQ(during[BRISK_REGION_HYBRID].live, before[BRISK_REGION_HYBRID].live + 1);
    EXPECT_EQ(during[BRISK_REGION_POOL].live, before[BRISK_REGION_POOL].live);
    EXPECT_EQ(during[BRISK_REGION_BUDDY].live, before[BRISK_REGION_BUDDY].live);
    EXPECT_EQ(during[BRISK_REGION_POOL].created, before[BRISK_REGION_POOL].created);

    // Past every section: brisk_malloc serves, and the hybrid counts it.
    void *fallback = brisk_hybrid_alloc(h, 1 << 17, 0);
    ASSERT_NE(fallback, nullptr);
    size_t fallbacks = 0;
    stats_of(h, &fallbacks);
    EXPECT_EQ(fallbacks, 1u);
    brisk_hybrid_totals(h, &s);
    EXPECT_EQ(s.allocations, allocations + 1);
    EXPECT_EQ(s.bytes_requested, asked + (1 << 17));
    EXPECT_EQ(s.system_requests, created.system_requests);
    brisk_hybrid_free(h, fallback);
    for (size_t i = 1; i < blocks.size(); i += 2) brisk_hybrid_free(h, blocks[i]);
    brisk_hybrid_destroy(h);
    brisk_test_regions_stats(during);
    EXPECT_EQ(during[BRISK_REGION_HYBRID].live, before[BRISK_REGION_HYBRID].live);
  }
}

#if !defined(BRISK_TEST_SANITIZED)
// With every page faulted in at create, a burst of alloc/free takes no page
// fault (and makes no system call, which a fault would only add to).
TEST(Hybrid, PrefaultedPoolTakesNoPageFaults) {
  brisk_hybrid_config_t c;
  brisk_hybrid_default_config(&c);
  c.region_sizes[0] = 8 << 20;
  c.bucket_counts[0] = c.bucket_counts[1] = c.bucket_counts[2] = 4096;
  c.flags |= BRISK_REGION_PREFAULT;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<void *> blocks(2000);
  Rng rng(7);
  brisk_hybrid_free(h.get(), brisk_hybrid_alloc(h.get(), 16, 0));  // takes the thread slot
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  for (int round = 0; round < 20; round++) {
    for (auto &p : blocks) {
      size_t size = rng.below(4) == 0 ? 65 + rng.below(4000) : 1 + rng.below(64);
      p = brisk_hybrid_alloc(h.get(), size, 0);
      if (p != nullptr) memset(p, 0x5A, size);
    }
    for (void *p : blocks) brisk_hybrid_free(h.get(), p);
  }
  getrusage(RUSAGE_THREAD, &after);
  EXPECT_LE(after.ru_minflt - before.ru_minflt, 2) << "page faults after a prefaulted create";
}
#endif

// Whether this process holds CAP_IPC_LOCK in its effective set: with it,
// mlock ignores RLIMIT_MEMLOCK (a test run as root has it).
bool has_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1;
}

// Drops CAP_IPC_LOCK from the effective set, so that RLIMIT_MEMLOCK applies.
bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  return syscall(SYS_capset, &header, data) == 0 && !has_ipc_lock();
}

// A locked hybrid really is locked: VmLck grows by at least its bucket and
// region bytes while it lives, and falls back when it is destroyed.
TEST(Hybrid, LockedCreateLocksItsMemory) {
  if (brisk_test::kSanitized) GTEST_SKIP() << "the sanitizers' mlock returns 0 and locks nothing";
  const size_t bucket_count = 256, region_size = 1 << 16;
  const size_t needed = bucket_count * 16 + region_size;
  const size_t before = brisk_test::locked_bytes();
  struct rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  if (!has_ipc_lock() && limit.rlim_cur != RLIM_INFINITY &&
      limit.rlim_cur < before + needed + 64 * 1024) {
    GTEST_SKIP() << "RLIMIT_MEMLOCK is " << limit.rlim_cur << " bytes, " << before
                 << " already locked, and no CAP_IPC_LOCK: too little to lock " << needed;
  }
  brisk_hybrid_config_t c =
      small_config(bucket_count, region_size, BRISK_REGION_PREFAULT | BRISK_REGION_LOCK);
  errno = 0;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr) << "errno " << errno << " (" << strerror(errno) << ")";
  const size_t during = brisk_test::locked_bytes();
  EXPECT_GE(during, before + needed) << "VmLck " << before << " -> " << during << " bytes";
  void *p = brisk_hybrid_alloc(h.get(), 16, 0);
  EXPECT_NE(p, nullptr);
  brisk_hybrid_free(h.get(), p);
  h.reset();
  EXPECT_EQ(brisk_test::locked_bytes(), before) << "destroy left memory locked";
}

// Over RLIMIT_MEMLOCK a locked create fails with mlock's own errno (EPERM
// with a limit of 0, ENOMEM with a limit it would exceed) and leaves
// nothing behind: no memory still locked, no hybrid in the registry. Run in
// a child (it lowers the limit), without CAP_IPC_LOCK, so the limit applies
// even to a root run. Returns the child's exit status: 0 when all holds.
int create_over_the_memlock_limit() {
  if (!drop_ipc_lock()) {
    std::fprintf(stderr, "cannot drop CAP_IPC_LOCK\n");
    return 16;
  }
  brisk_region_kind_stats_t regions_before[BRISK_REGION_KINDS], regions_after[BRISK_REGION_KINDS];
  brisk_test_regions_stats(regions_before);
  const size_t locked_before = brisk_test::locked_bytes();
  struct rlimit limit;
  getrlimit(RLIMIT_MEMLOCK, &limit);
  const struct {
    rlim_t soft;
    int expected_errno;
  } cases[] = {{0, EPERM}, {locked_before + 4096, ENOMEM}};
  int status = 0;
  for (const auto &k : cases) {
    const unsigned long long soft = k.soft;
    limit.rlim_cur = k.soft;
    if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
      std::fprintf(stderr, "setrlimit(%llu): %s\n", soft, strerror(errno));
      return 32;
    }
    brisk_hybrid_config_t c = small_config(256, 1 << 16, BRISK_REGION_PREFAULT | BRISK_REGION_LOCK);
    errno = 0;
    brisk_hybrid_t *h = brisk_hybrid_create(&c);
    const int error = errno;
    brisk_test_regions_stats(regions_after);
    if (h != nullptr) {
      std::fprintf(stderr, "limit %llu: create worked\n", soft);
      status |= 1;
    } else if (error != k.expected_errno) {
      std::fprintf(stderr, "limit %llu: errno %d (%s), expected %d (%s)\n", soft, error,
                   strerror(error), k.expected_errno, strerror(k.expected_errno));
      status |= 2;
    }
    const size_t locked_after = brisk_test::locked_bytes();
    if (locked_after != locked_before) {
      std::fprintf(stderr, "limit %llu: VmLck %zu -> %zu bytes\n", soft, locked_before, locked_after);
      status |= 4;
    }
    if (regions_after[BRISK_REGION_HYBRID].live != regions_before[BRISK_REGION_HYBRID].live) {
      std::fprintf(stderr, "limit %llu: a hybrid is left in the registry\n", soft);
      status |= 8;
    }
  }
  return status;
}

TEST(Hybrid, LockedCreateOverTheLimitFailsWithMlocksErrno) {
  if (brisk_test::kSanitized) GTEST_SKIP() << "the sanitizers' mlock returns 0 and locks nothing";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(create_over_the_memlock_limit()), testing::ExitedWithCode(0), "");
}

// Many threads (more than cores) allocate random sizes and alignments, fill
// each block with a pattern unique to the allocation, and pass half of them
// to another thread through mailboxes; whoever frees a block checks its
// pattern first, so a block handed out twice or overlapping another is
// caught. At the end every section must be back to zero in use.
void stress(unsigned flags) {
  brisk_hybrid_config_t c;
  brisk_hybrid_default_config(&c);
  c.flags = flags;
  c.region_sizes[0] = 16 << 20;
  c.bucket_counts[0] = c.bucket_counts[1] = c.bucket_counts[2] = 2048;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);

  const int threads = 8;
  const long ops = scaled(40000, 6000);
  struct Block {
    void *p;
    size_t size;
    uint64_t seed;
  };
  std::vector<std::atomic<Block *>> mailbox(threads * 64);
  for (auto &m : mailbox) m.store(nullptr);
  std::atomic<long> corrupt{0}, misaligned{0};

  auto check_and_free = [&](Block *b) {
    if (find_pattern_mismatch(b->p, b->size, b->seed) != b->size) corrupt++;
    brisk_hybrid_free(h.get(), b->p);
    delete b;
  };
  auto worker = [&](int id) {
    Rng rng(1000 + id);
    std::vector<Block *> own;
    for (long i = 0; i < ops; i++) {
      if (own.size() < 64 && rng.below(3) != 0) {
        size_t kind = rng.below(10);
        size_t size = kind < 7 ? 1 + rng.below(64) : kind < 9 ? 65 + rng.below(2000)
                                                              : 2048 + rng.below(60000);
        size_t align = rng.below(8) == 0 ? size_t(1) << rng.below(10) : 0;
        void *p = brisk_hybrid_alloc(h.get(), size, align);
        if (p == nullptr) continue;  // the bound may be reached; nothing may overlap
        if (align && reinterpret_cast<uintptr_t>(p) % align != 0) misaligned++;
        Block *b = new Block{p, size, brisk_test::block_seed(p, size, uint64_t(id) << 40 | i)};
        fill_pattern(p, size, b->seed);
        own.push_back(b);
      } else if (!own.empty()) {
        size_t k = rng.below(own.size());
        Block *b = own[k];
        own[k] = own.back();
        own.pop_back();
        if (rng.below(2) == 0) {
          // Hand it to a random mailbox; free whatever was there.
          Block *old = mailbox[rng.below(mailbox.size())].exchange(b);
          if (old != nullptr) check_and_free(old);
        } else {
          check_and_free(b);
        }
      }
    }
    for (Block *b : own) check_and_free(b);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++) pool.emplace_back(worker, t);
  for (auto &t : pool) t.join();
  // The quiet point: eight entries' lists, the mailboxes' blocks live.
  brisk_test_hybrid_validate(h.get());
  for (auto &m : mailbox) {
    Block *b = m.exchange(nullptr);
    if (b != nullptr) check_and_free(b);
  }
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(misaligned.load(), 0);
  for (const auto &s : stats_of(h.get())) EXPECT_EQ(s.in_use, 0u) << s.block_size;
  brisk_test_hybrid_validate(h.get());
}

TEST(HybridStress, LockFreeWithThreadCache) { stress(BRISK_REGION_THREAD_CACHE); }
TEST(HybridStress, LockFreeNoCache) { stress(0); }

// A thread whose pthread key destructor calls the hybrid and a pool (both
// with thread caches) after the thread slot's own destructor gave its slot
// back: the destructor re-arms its key for every round POSIX allows, so
// its calls come after the slot's destructor in each round, the last one
// included, after which no destructor runs again. Those calls must not
// take a slot nobody gives back: more threads than slots (and than cores)
// later, every slot is free again, and the calls worked. Half the threads
// call before they exit too, half only from the destructor.
struct LateCalls {
  brisk_hybrid_t *hybrid;
  brisk_pool_t *pool;
  pthread_key_t key;
  std::atomic<long> calls{0};
  std::atomic<long> failed{0};
};
LateCalls *late_calls;

void late_round(LateCalls *late) {
  void *small = brisk_hybrid_alloc(late->hybrid, 24, 0);   // a bucket's
  void *large = brisk_hybrid_alloc(late->hybrid, 300, 0);  // the region's
  void *object = brisk_pool_alloc(late->pool);
  if (small == nullptr || large == nullptr || object == nullptr) late->failed++;
  if (small != nullptr) memset(small, 0x5A, 24);
  if (large != nullptr) memset(large, 0x5A, 300);
  if (object != nullptr) memset(object, 0x5A, 32);
  brisk_hybrid_free(late->hybrid, large);
  brisk_hybrid_free(late->hybrid, small);
  if (object != nullptr) brisk_pool_free(late->pool, object);
  late->calls++;
}

// Runs body(t) for t in [0, threads) on threads of their own, kThreadBatch
// alive at once (more than cores); each batch is joined, its threads' key
// destructors run, before the next starts.
constexpr int kThreadBatch = 8;
template <typename Body>
void run_in_batches(int threads, Body body) {
  for (int first = 0; first < threads; first += kThreadBatch) {
    std::vector<std::thread> batch;
    for (int t = first; t < first + kThreadBatch && t < threads; t++) batch.emplace_back(body, t);
    for (auto &t : batch) t.join();
  }
}

// The end of a late-destructor test: every pool object came back, then
// the test's key and pool go.
void finish_late_test(brisk_pool_t *pool, pthread_key_t key) {
  brisk_region_stats_t ps;
  brisk_pool_stats(pool, &ps);
  EXPECT_EQ(ps.bytes_in_use, 0u);
  pthread_key_delete(key);
  brisk_pool_destroy(pool);
}

void late_destructor(void *value) {
  uintptr_t round = reinterpret_cast<uintptr_t>(value);
  late_round(late_calls);
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS)
    pthread_setspecific(late_calls->key, reinterpret_cast<void *>(round + 1));
}

TEST(HybridThreads, CallsFromLaterKeyDestructorsGiveTheirSlotBack) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's runtime has let go of an exiting thread's state by
  // glibc's later destructor rounds: it crashed inside itself (SyncClock)
  // on this test's own atomic add there, about 3 runs in 8. The release and
  // ASan builds run it.
  GTEST_SKIP() << "TSan cannot follow a thread through its late key destructors";
#endif
  brisk_hybrid_config_t c = small_config(4096, 1 << 20, BRISK_REGION_THREAD_CACHE);
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  brisk_pool_t *pool = brisk_pool_create_ex(32, 0, 0, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  LateCalls late;
  late.hybrid = h.get();
  late.pool = pool;
  late_calls = &late;
  // This thread takes its slot first, which creates the slots' key before
  // this test's: glibc runs the destructors of a round in key order, so the
  // slot's comes first in every round.
  late_round(&late);
  ASSERT_EQ(pthread_key_create(&late.key, late_destructor), 0);
  unsigned held_before = brisk_test_thread_slots_held();
  const int kThreads = 160;  // more than the 128 slots
  run_in_batches(kThreads, [&late](int t) {
    if (t % 2 == 0) late_round(&late);
    pthread_setspecific(late.key, reinterpret_cast<void *>(uintptr_t{1}));
  });
  EXPECT_EQ(late.calls.load(), 1 + kThreads / 2 + long{kThreads} * PTHREAD_DESTRUCTOR_ITERATIONS);
  EXPECT_EQ(late.failed.load(), 0);
  EXPECT_EQ(brisk_test_thread_slots_held(), held_before);
  brisk_test_hybrid_validate(h.get());
  for (const auto &s : stats_of(h.get())) EXPECT_EQ(s.in_use, 0u) << s.block_size;
  finish_late_test(pool, late.key);
  late_calls = nullptr;
}

// A thread whose FIRST region call comes in glibc's last round of key
// destructors: its destructor re-arms its key for rounds 1 to 3 and calls a
// pool with thread caches in round PTHREAD_DESTRUCTOR_ITERATIONS only. The
// slots' key was created before this test's (this thread took its slot
// first), so glibc has passed it in that round and runs no round after it:
// the slot's own destructor never gives that slot back. More threads than
// slots (and than cores) do this. The slots of threads that died holding
// one come back when a thread finds every slot held (thread_slot.c), so
// each gets a slot, but for those of its batch that found none while
// another was taking them back; a thread started afterwards gets one too;
// and once the last dead holders' slots are taken back, as many are held
// as before.
struct FirstCallInLastRound {
  brisk_pool_t *pool;
  pthread_key_t key;
  std::atomic<long> calls{0};
  std::atomic<long> with_slot{0};
  std::atomic<long> failed{0};
};
FirstCallInLastRound *first_call_late;

// One pool call, and whether the calling thread held a slot for it.
bool pool_call_with_slot(brisk_pool_t *pool, std::atomic<long> *failed) {
  void *object = brisk_pool_alloc(pool);
  if (object == nullptr) {
    (*failed)++;
    return false;
  }
  memset(object, 0x5A, 32);
  bool slot = brisk_thread_slot_line_ != 0;
  brisk_pool_free(pool, object);
  return slot;
}

void first_call_late_destructor(void *value) {
  uintptr_t round = reinterpret_cast<uintptr_t>(value);
  FirstCallInLastRound *late = first_call_late;
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(late->key, reinterpret_cast<void *>(round + 1));
    return;
  }
  if (pool_call_with_slot(late->pool, &late->failed)) late->with_slot++;
  late->calls++;
}

TEST(HybridThreads, FirstCallInTheLastDestructorRoundLeaksNoSlot) {
#if defined(__SANITIZE_THREAD__)
  // As CallsFromLaterKeyDestructorsGiveTheirSlotBack: TSan's runtime has
  // let go of the exiting thread by the last round and crashes there.
  GTEST_SKIP() << "TSan cannot follow a thread through its late key destructors";
#endif
  brisk_pool_t *pool = brisk_pool_create_ex(32, 0, 0, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  FirstCallInLastRound late;
  late.pool = pool;
  first_call_late = &late;
  // The slots' key before this test's (see above).
  std::atomic<long> failed{0};
  ASSERT_TRUE(pool_call_with_slot(pool, &failed));
  ASSERT_EQ(pthread_key_create(&late.key, first_call_late_destructor), 0);
  unsigned held_before = brisk_test_thread_slots_held();
  const int kThreads = 160;  // more than the 128 slots
  run_in_batches(kThreads, [&late](int) {
    pthread_setspecific(late.key, reinterpret_cast<void *>(uintptr_t{1}));
  });
  EXPECT_EQ(late.calls.load(), kThreads);
  EXPECT_EQ(late.failed.load(), 0);
  EXPECT_GE(late.with_slot.load(), kThreads - (kThreadBatch - 1));
  bool later_has_slot = false;
  std::thread([&] { later_has_slot = pool_call_with_slot(pool, &failed); }).join();
  EXPECT_TRUE(later_has_slot);
  EXPECT_EQ(failed.load(), 0);
  brisk_test_thread_slots_reclaim();
  EXPECT_EQ(brisk_test_thread_slots_held(), held_before);
  finish_late_test(pool, late.key);
  first_call_late = nullptr;
}

class HybridDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A second destroy while the mapping cache keeps the mapping, the hybrid
// as the first destroy left it, gave the cache the mapping twice (and a
// further region's): the next two hybrids of the config were one.
TEST_F(HybridDeathTest, DoubleDestroyAborts) {
  brisk_hybrid_config_t config;
  brisk_hybrid_default_config(&config);
  config.region_sizes[1] = 1 << 20;  // a further region, in a mapping of its own
  brisk_hybrid_t *h = brisk_hybrid_create(&config);
  ASSERT_NE(h, nullptr);
  brisk_hybrid_free(h, brisk_hybrid_alloc(h, 100, 0));
  brisk_hybrid_destroy(h);
  if (!brisk_test_os_cache_holds(h)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_hybrid_destroy(h),
               "brisk: brisk_hybrid_destroy\\(0x[0-9a-f]+\\): not a live hybrid pool "
               "\\(destroyed already\\?\\)");
}

// A second destroy once the mapping went back to the system (the mapping
// cache turned off) read the unmapped hybrid and died of SIGSEGV.
TEST_F(HybridDeathTest, DoubleDestroyOfAnUnmappedHybridAborts) {
  EXPECT_DEATH(
      {
        brisk_test_os_cache_configure(0, 0, 0);
        brisk_hybrid_t *h = brisk_hybrid_create(nullptr);
        brisk_hybrid_destroy(h);
        brisk_hybrid_destroy(h);
      },
      "brisk: brisk_hybrid_destroy\\(0x[0-9a-f]+\\): not a live hybrid pool "
      "\\(destroyed already\\?\\)");
}

// Calls with a hybrid destroyed while the mapping cache keeps its mapping
// (as destroy left it): alloc refilled the calling thread's lists from
// the destroyed buckets and regions, free gave blocks back to them, and
// with the fallback on a free of a fallback block went to brisk_free:
// memory the next hybrid of the config takes back, or a block freed
// through a hybrid that no longer holds it. Each aborts now, with the
// thread caches (the default) and without. On main each failed to die,
// but the frees of blocks from before the destroy and of a foreign
// pointer, which died with other messages.
TEST_F(HybridDeathTest, CallsAfterDestroyAbort) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_hybrid_config_t plain_config, fallback_config;
  brisk_hybrid_default_config(&plain_config);
  plain_config.flags = 0;
  brisk_hybrid_default_config(&fallback_config);
  fallback_config.fallback_to_malloc = 1;
  brisk_hybrid_t *cached = brisk_hybrid_create(nullptr);
  brisk_hybrid_t *plain = brisk_hybrid_create(&plain_config);
  brisk_hybrid_t *fallback = brisk_hybrid_create(&fallback_config);
  ASSERT_TRUE(cached != nullptr && plain != nullptr && fallback != nullptr);
  void *small = brisk_hybrid_alloc(cached, 24, 0);
  void *large = brisk_hybrid_alloc(cached, 3000, 0);
  void *plain_small = brisk_hybrid_alloc(plain, 24, 0);
  void *from_malloc = brisk_malloc(100);
  ASSERT_TRUE(small != nullptr && large != nullptr && plain_small != nullptr);
  brisk_hybrid_free(cached, small);
  brisk_hybrid_free(cached, large);
  brisk_hybrid_free(plain, plain_small);
  brisk_hybrid_destroy(cached);
  brisk_hybrid_destroy(plain);
  brisk_hybrid_destroy(fallback);
  if (!brisk_test_os_cache_holds(cached) || !brisk_test_os_cache_holds(plain) ||
      !brisk_test_os_cache_holds(fallback))
    GTEST_SKIP() << "the mapping cache did not keep them";
  auto not_live = [](const char *call) {
    return std::string("brisk: ") + call +
           "\\(0x[0-9a-f]+\\): not a live hybrid pool \\(destroyed already\\?\\)";
  };
  brisk_hybrid_section_stats_t sections[8];
  brisk_region_stats_t totals;
  for (brisk_hybrid_t *h : {cached, plain}) {
    EXPECT_DEATH(brisk_hybrid_alloc(h, 24, 0), not_live("brisk_hybrid_alloc"));
    EXPECT_DEATH(brisk_hybrid_alloc(h, 3000, 0), not_live("brisk_hybrid_alloc"));
    EXPECT_DEATH(brisk_hybrid_alloc(h, 100, 64), not_live("brisk_hybrid_alloc"));
    EXPECT_DEATH(brisk_hybrid_alloc(h, 0, 0), not_live("brisk_hybrid_alloc"));
    EXPECT_DEATH(brisk_test_hybrid_alloc_exported(h, 24, 0), not_live("brisk_hybrid_alloc"));
    EXPECT_DEATH(brisk_hybrid_free(h, h == cached ? small : plain_small),
                 not_live("brisk_hybrid_free"));
    EXPECT_DEATH(brisk_test_hybrid_free_exported(h, h == cached ? small : plain_small),
                 not_live("brisk_hybrid_free"));
    EXPECT_DEATH(brisk_hybrid_free(h, from_malloc), not_live("brisk_hybrid_free"));
    EXPECT_DEATH(brisk_hybrid_stats(h, sections, 8, nullptr), not_live("brisk_hybrid_stats"));
    EXPECT_DEATH(brisk_hybrid_totals(h, &totals), not_live("brisk_hybrid_totals"));
  }
  EXPECT_DEATH(brisk_hybrid_free(cached, large), not_live("brisk_hybrid_free"));
  EXPECT_DEATH(brisk_hybrid_alloc(fallback, 1 << 22, 0), not_live("brisk_hybrid_alloc"));
  EXPECT_DEATH(brisk_hybrid_free(fallback, from_malloc), not_live("brisk_hybrid_free"));
  brisk_free(from_malloc);
}

// Another kind's live handle: a fifo's, no live hybrid's.
TEST_F(HybridDeathTest, DestroyOfAnotherKindsHandleAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        brisk_hybrid_destroy(reinterpret_cast<brisk_hybrid_t *>(fifo));
      },
      "brisk: brisk_hybrid_destroy\\(0x[0-9a-f]+\\): not a live hybrid pool");
}

// The exported free of a pointer with a NULL hybrid.
TEST_F(HybridDeathTest, ExportedFreeWithANullHybridAborts) {
  static char block[64];
  EXPECT_DEATH(brisk_test_hybrid_free_exported(nullptr, block),
               "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): the hybrid is NULL");
}

TEST_F(HybridDeathTest, ForeignPointerAborts) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  static char not_ours[64];
  EXPECT_DEATH(brisk_hybrid_free(h.get(), not_ours), "brisk.*0x");
}

// The second free on the same thread, or on another: there it once found
// the key but not the block in its own list and pushed it there too, so
// both threads were then handed the same block. Caught for a bucket's
// object and a region's block.
TEST_F(HybridDeathTest, DoubleFreeAborts) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  for (bool other_thread : {false, true}) {
    for (size_t size : {size_t{40}, size_t{200}, size_t{3000}}) {
      EXPECT_DEATH(
          {
            void *p = brisk_hybrid_alloc(h.get(), size, 0);
            brisk_hybrid_free(h.get(), p);
            if (other_thread) {
              std::thread([&] { brisk_hybrid_free(h.get(), p); }).join();
            } else {
              brisk_hybrid_free(h.get(), p);
            }
          },
          "double free")
          << size << (other_thread ? " from another thread" : "");
    }
  }
}

// Without the caches (a config without BRISK_REGION_THREAD_CACHE) every
// free goes to the block's section: a bucket's object freed twice (at
// once, after another free, from another thread) is caught by the key its
// pool keeps in free objects, a region's block by its buddy's index, both
// in the name of brisk_hybrid_free. Release builds used to take the
// bucket's object, and hand it out twice.
TEST_F(HybridDeathTest, DoubleFreeWithoutCachesAborts) {
  brisk_hybrid_config_t config;
  brisk_hybrid_default_config(&config);
  config.flags = 0;
  HybridPtr h(brisk_hybrid_create(&config));
  ASSERT_NE(h, nullptr);
  const char *const kHow[] = {"at once", "after another free", "from another thread"};
  for (size_t size : {size_t{16}, size_t{40}, size_t{200}, size_t{3000}}) {
    for (int how = 0; how < 3; how++) {
      EXPECT_DEATH(
          {
            void *p = brisk_hybrid_alloc(h.get(), size, 0);
            void *q = brisk_hybrid_alloc(h.get(), size, 0);
            brisk_hybrid_free(h.get(), p);
            if (how == 1) brisk_hybrid_free(h.get(), q);
            if (how == 2) {
              std::thread([&] { brisk_hybrid_free(h.get(), p); }).join();
            } else {
              brisk_hybrid_free(h.get(), p);
            }
          },
          "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): double free")
          << size << " " << kHow[how];
    }
  }
}

// With the caches, a bucket's object that went back from the thread's
// list to its pool (the list's older half, trimmed when it filled) and is
// freed again: it carries the hybrid's key there too. It used to be
// pushed onto the list while on its pool's free list, whose link the push
// overwrote (a crash, or an object handed out twice).
TEST_F(HybridDeathTest, DoubleFreeOfABlockBackInItsBucketAborts) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the hybrid's thread caches are off under ASan";
#endif
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  EXPECT_DEATH(
      {
        std::vector<void *> blocks(300);
        for (void *&p : blocks) p = brisk_hybrid_alloc(h.get(), 40, 0);
        for (void *p : blocks) brisk_hybrid_free(h.get(), p);
        brisk_hybrid_free(h.get(), blocks[0]);  // freed first: trimmed to the pool
      },
      "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): double free, or a block never handed out "
      "\\(it waits in another thread's cache or in its bucket\\)");
}

// A block a refill put in the thread's list beside the one it handed out
// was never handed out: its free says so, not only "double free".
TEST_F(HybridDeathTest, FreeOfACachedBlockNeverHandedOutIsNamed) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the hybrid's thread caches are off under ASan";
#endif
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  EXPECT_DEATH(
      {
        char *p = static_cast<char *>(brisk_hybrid_alloc(h.get(), 4096, 0));
        brisk_hybrid_free(h.get(), p + 8192);
      },
      "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): double free, or a block never handed out "
      "\\(it waits in this thread's cache\\)");
}

// A thread past its slot's destructor (its later key destructors) frees
// past the caches, to the block's section: a block it frees that another
// thread's cache still holds is named there too, not handed to the section
// while it waits in that cache.
struct NoSlotDoubleFree {
  brisk_hybrid_t *hybrid;
  void *block;
  pthread_key_t key;
};
NoSlotDoubleFree no_slot_double_free;

void no_slot_double_free_destructor(void *) {
  brisk_hybrid_free(no_slot_double_free.hybrid, no_slot_double_free.block);
}

// Frees a block into this thread's cache, then again from a thread's key
// destructor that runs after that thread's slot went back.
void free_cached_block_again_with_no_slot(brisk_hybrid_t *h) {
  // This thread takes its slot first, so the slots' key comes before the
  // test's and its destructor runs first in every round.
  brisk_hybrid_free(h, brisk_hybrid_alloc(h, 16, 0));
  NoSlotDoubleFree &late = no_slot_double_free;
  late.hybrid = h;
  late.block = brisk_hybrid_alloc(h, 40, 0);
  pthread_key_create(&late.key, no_slot_double_free_destructor);
  brisk_hybrid_free(h, late.block);  // into this thread's cache
  std::thread([&late] {
    brisk_hybrid_free(late.hybrid, brisk_hybrid_alloc(late.hybrid, 16, 0));
    pthread_setspecific(late.key, &late);
  }).join();
}

TEST_F(HybridDeathTest, DoubleFreeFromAThreadWithNoSlotAborts) {
#if defined(__SANITIZE_THREAD__)
  // As for CallsFromLaterKeyDestructorsGiveTheirSlotBack: TSan cannot follow
  // a thread through its later key destructors.
  GTEST_SKIP() << "TSan cannot follow a thread through its late key destructors";
#endif
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  EXPECT_DEATH(free_cached_block_again_with_no_slot(h.get()), "double free");
}

// Blocks handed out around the lists (a refill's first, an aligned
// request, a thread without a cache) never carry the key, so the check
// above takes no live block for a cached one.
TEST(Hybrid, BlocksFreedByOtherThreadsAfterTheirListsFlushedAreNotDoubleFrees) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  for (int round = 0; round < 4; round++) {
    std::vector<void *> blocks;
    for (int i = 0; i < 2000; i++) {
      size_t size = size_t{16} << (i % 12);
      blocks.push_back(brisk_hybrid_alloc(h.get(), size, i % 3 == 0 ? 64 : 0));
      ASSERT_NE(blocks.back(), nullptr);
    }
    std::thread([&] {
      for (size_t i = 0; i < blocks.size(); i += 2) brisk_hybrid_free(h.get(), blocks[i]);
    }).join();
    for (size_t i = 1; i < blocks.size(); i += 2) brisk_hybrid_free(h.get(), blocks[i]);
  }
  brisk_test_hybrid_validate(h.get());
}

// A hybrid made in a destroyed hybrid's mapping (the mapping cache hands
// it to the next hybrid of its size, at the same address, often within the
// same millisecond) has a key no other hybrid or pool has had: the old
// hybrid's cached blocks left its key in bytes that a large block of the
// new one holds unwritten, and a program may copy such bytes. Copied into
// a bucket object's second word, they made its free die of "double free"
// (the keys were drawn from the address and the millisecond alone).
TEST_F(HybridDeathTest, BytesLeftByADestroyedHybridAreNotTakenForItsKey) {
  brisk_hybrid_t *probe = brisk_hybrid_create(nullptr);
  ASSERT_NE(probe, nullptr);
  brisk_hybrid_destroy(probe);
  brisk_hybrid_t *next = brisk_hybrid_create(nullptr);
  ASSERT_NE(next, nullptr);
  brisk_hybrid_destroy(next);
  if (next != probe) GTEST_SKIP() << "the mapping cache did not hand the hybrid's mapping on";
  EXPECT_EXIT(
      {
        constexpr size_t kLarge = size_t{256} << 10; // an order no class caches
        for (int round = 0; round < 4; round++) {
          brisk_hybrid_t *old_hybrid = brisk_hybrid_create(nullptr);
          std::vector<void *> blocks(64);
          for (void *&p : blocks) p = brisk_hybrid_alloc(old_hybrid, 128, 0);
          for (void *p : blocks) brisk_hybrid_free(old_hybrid, p);
          brisk_hybrid_destroy(old_hybrid);
          brisk_hybrid_t *h = brisk_hybrid_create(nullptr);
          char *large = static_cast<char *>(brisk_hybrid_alloc(h, kLarge, 0));
          if (large == nullptr) std::exit(2);
          for (size_t at = 0; at < kLarge; at += 16) {
            char *small = static_cast<char *>(brisk_hybrid_alloc(h, 32, 0));
            if (small == nullptr) std::exit(2);
            std::memcpy(small, large + at, 16);
            brisk_hybrid_free(h, small);
          }
          brisk_hybrid_free(h, large);
          brisk_hybrid_destroy(h);
        }
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

// The exported free checks as the inline one does (the same code), and
// either one catches a block the other freed.
TEST_F(HybridDeathTest, DoubleFreeThroughTheExportedFreeAborts) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  for (size_t size : {size_t{40}, size_t{200}}) {
    EXPECT_DEATH(
        {
          void *p = brisk_test_hybrid_alloc_exported(h.get(), size, 0);
          brisk_hybrid_free(h.get(), p);
          brisk_test_hybrid_free_exported(h.get(), p);
        },
        "double free")
        << size;
    EXPECT_DEATH(
        {
          void *p = brisk_hybrid_alloc(h.get(), size, 0);
          brisk_test_hybrid_free_exported(h.get(), p);
          brisk_hybrid_free(h.get(), p);
        },
        "double free")
        << size;
  }
}

// A pointer inside a block is not a block: inside a region block's first
// unit (the inline free's rotated check), at a later unit of it (no index
// byte there: the buddy finds the block around it), of a block of an order
// no class caches, inside a bucket's object; nor is an object of the
// bucket that was never handed out (past its carved count). The messages
// name brisk_hybrid_free (a later unit's named brisk_buddy_free, and
// called it a double free, or not the start of a block).
TEST_F(HybridDeathTest, PointerInsideABlockAborts) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  char *region_block = static_cast<char *>(brisk_hybrid_alloc(h.get(), 400, 0));  // 512 B
  char *bucket_object = static_cast<char *>(brisk_hybrid_alloc(h.get(), 40, 0));  // 64 B
  char *large_block = static_cast<char *>(brisk_hybrid_alloc(h.get(), 200000, 0));  // 256 KiB
  ASSERT_TRUE(region_block && bucket_object && large_block);
  const char *const kInside = "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): not the start of a block";
  EXPECT_DEATH(brisk_hybrid_free(h.get(), region_block + 16), kInside);
  EXPECT_DEATH(brisk_hybrid_free(h.get(), region_block + 128), kInside);
  EXPECT_DEATH(brisk_hybrid_free(h.get(), large_block + 4096), kInside);
  EXPECT_DEATH(brisk_hybrid_free(h.get(), large_block + 128 * 1024), kInside);
  EXPECT_DEATH(brisk_hybrid_free(h.get(), bucket_object + 8), "not an object of this hybrid");
  EXPECT_DEATH(brisk_hybrid_free(h.get(), bucket_object + 16), "not an object of this hybrid");
  EXPECT_DEATH(brisk_hybrid_free(h.get(), bucket_object + 64 * 1000), "never handed out");
  brisk_hybrid_free(h.get(), region_block);
  brisk_hybrid_free(h.get(), bucket_object);
  brisk_hybrid_free(h.get(), large_block);
}

// A region's block that was never handed out (free memory of the buddy,
// no cache in between) is named so, not as a pointer inside a block.
TEST_F(HybridDeathTest, RegionBlockNeverHandedOutIsNamed) {
  brisk_hybrid_config_t config;
  brisk_hybrid_default_config(&config);
  config.flags = 0;
  HybridPtr h(brisk_hybrid_create(&config));
  ASSERT_NE(h, nullptr);
  char *p = static_cast<char *>(brisk_hybrid_alloc(h.get(), 4096, 0));
  ASSERT_NE(p, nullptr);
  EXPECT_DEATH(brisk_hybrid_free(h.get(), p + 8192),
               "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): double free, or a block never "
               "handed out");
  brisk_hybrid_free(h.get(), p);
}

// The inline free's code table marks the bucket objects handed out (their
// granules get the class's code as they leave the pool), so that their
// frees stay inline, and no more than the pool carved: a code past that,
// or one inside a region block, is named by the validator.
TEST_F(HybridDeathTest, CodesMarkWhatWasHandedOut) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  std::vector<void *> objects;
  for (int i = 0; i < 100; i++) objects.push_back(brisk_hybrid_alloc(h.get(), 40, 0));  // 64 B
  char *block = static_cast<char *>(brisk_hybrid_alloc(h.get(), 400, 0));              // 512 B
  ASSERT_NE(block, nullptr);
  char *unused = static_cast<char *>(objects[0]) + 64 * 5000;
  int code = brisk_test_hybrid_code(h.get(), objects[0]);
#if defined(__SANITIZE_ADDRESS__)
  // The caches are off under ASan: no class, no code anywhere; the
  // validator's checks of the table below run all the same.
  EXPECT_EQ(code, 0);
  code = 4;
#else
  // A fresh hybrid's bucket hands out its objects from the first: 100 of
  // them, each marked with its class's code, none far past them.
  EXPECT_GT(code, 0);
  for (void *p : objects) EXPECT_EQ(brisk_test_hybrid_code(h.get(), p), code);
  EXPECT_EQ(brisk_test_hybrid_code(h.get(), unused), 0);
  // A region block's granule holds its class's code (not the bucket's);
  // the granules inside it hold none.
  EXPECT_GT(brisk_test_hybrid_code(h.get(), block), 0);
  EXPECT_NE(brisk_test_hybrid_code(h.get(), block), code);
  EXPECT_EQ(brisk_test_hybrid_code(h.get(), block + 16), 0);
  EXPECT_EQ(brisk_test_hybrid_code(h.get(), block + 128), 0);
#endif
  EXPECT_EQ(brisk_test_hybrid_code(h.get(), h.get()), -1);  // past the blocks
  for (void *p : objects) brisk_hybrid_free(h.get(), p);
  brisk_test_hybrid_validate(h.get());
  EXPECT_DEATH(
      {
        brisk_test_hybrid_set_code(h.get(), unused, static_cast<unsigned char>(code));
        brisk_test_hybrid_validate(h.get());
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a code marks no object of its bucket that was "
      "handed out \\(bucket 2\\)");
  EXPECT_DEATH(
      {
        brisk_test_hybrid_set_code(h.get(), block + 128, static_cast<unsigned char>(code));
        brisk_test_hybrid_validate(h.get());
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a code where no block of its class starts "
      "\\(first region\\)");
  brisk_hybrid_free(h.get(), block);
  brisk_test_hybrid_validate(h.get());
}

// A bucket whose objects lie further apart than their size (136 B,
// 16-aligned: 144 B apart) marks its objects' own granules, none inside
// them: every object's frees stay inline, the validator finds each cached
// object's code, and a pointer 128 B into the second object (where the
// objects would start 136 B apart) is no object: its free aborts.
TEST_F(HybridDeathTest, CodesOfABucketMarkItsObjectsWhereTheyLie) {
  brisk_hybrid_config_t c = small_config(100, 1 << 16, BRISK_REGION_THREAD_CACHE);
  c.bucket_sizes[0] = 136;
  c.region_min_block = 0;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<char *> objects;
  for (int i = 0; i < 20; i++) objects.push_back(static_cast<char *>(brisk_hybrid_alloc(h.get(), 130, 0)));
  for (char *p : objects) ASSERT_NE(p, nullptr);
  std::sort(objects.begin(), objects.end());
  ASSERT_EQ(objects[1] - objects[0], 144);  // a fresh bucket hands out its first objects
#if !defined(__SANITIZE_ADDRESS__)
  int code = brisk_test_hybrid_code(h.get(), objects[0]);
  EXPECT_GT(code, 0);
  for (char *p : objects) {
    EXPECT_EQ(brisk_test_hybrid_code(h.get(), p), code) << p - objects[0];
    for (size_t in = 16; in < 144; in += 16)
      EXPECT_EQ(brisk_test_hybrid_code(h.get(), p + in), 0) << p - objects[0] << " + " << in;
  }
#endif
  EXPECT_DEATH(brisk_hybrid_free(h.get(), objects[1] + 128), "not an object of this hybrid");
  for (char *p : objects) brisk_hybrid_free(h.get(), p);
  brisk_test_hybrid_validate(h.get());
}

// A bucket of 8-aligned objects (24 B) has every other object off the
// granules, with no code of its own (its frees find the bucket by
// address): the validator takes such objects in the thread's lists, and in
// the other threads', as they are, and every object comes back.
TEST(Hybrid, BucketObjectsOffTheGranulesValidateCached) {
  brisk_hybrid_config_t c = small_config(200, 1 << 16, BRISK_REGION_THREAD_CACHE);
  c.bucket_sizes[0] = 24;
  HybridPtr h(brisk_hybrid_create(&c));
  ASSERT_NE(h, nullptr);
  std::vector<void *> objects;
  for (int i = 0; i < 150; i++) objects.push_back(brisk_hybrid_alloc(h.get(), 20, 0));
  for (void *p : objects) ASSERT_NE(p, nullptr);
  size_t off_granule = 0;
  for (void *p : objects) off_granule += reinterpret_cast<uintptr_t>(p) % 16 != 0;
  EXPECT_GT(off_granule, 0u);
  brisk_test_hybrid_validate(h.get());  // the refill's objects wait in this thread's list
  std::thread([&] {
    for (size_t i = 0; i < objects.size(); i += 2) brisk_hybrid_free(h.get(), objects[i]);
  }).join();
  for (size_t i = 1; i < objects.size(); i += 2) brisk_hybrid_free(h.get(), objects[i]);
  brisk_test_hybrid_validate(h.get());
  for (const auto &s : stats_of(h.get())) EXPECT_EQ(s.in_use, 0u) << s.block_size;
}

TEST_F(HybridDeathTest, PointerOfAnotherHybridAborts) {
  HybridPtr a(brisk_hybrid_create(nullptr));
  HybridPtr b(brisk_hybrid_create(nullptr));
  ASSERT_TRUE(a && b);
  void *p = brisk_hybrid_alloc(a.get(), 100, 0);
  EXPECT_DEATH(brisk_hybrid_free(b.get(), p), "not from this hybrid");
  brisk_hybrid_free(a.get(), p);
}

#if defined(__SANITIZE_ADDRESS__)
TEST_F(HybridDeathTest, UseAfterFreeIsCaughtByASan) {
  HybridPtr h(brisk_hybrid_create(nullptr));
  ASSERT_NE(h, nullptr);
  EXPECT_DEATH(
      {
        char *p = static_cast<char *>(brisk_hybrid_alloc(h.get(), 200, 0));
        brisk_hybrid_free(h.get(), p);
        p[100] = 1;
      },
      "use-after-poison");
}
#endif

// The validator names a corruption made on purpose behind the API's back
// (a write after free, a lost update of a room word), as a bug in the
// program or in brisk would leave it. Each hybrid (the default config:
// buckets of 16/32/64 B, region blocks of 128 B and up) is validated sound
// first, so the death is the corruption's. The corruptions are of the
// thread caches, which an ASan build keeps off.
class HybridValidatorDeathTest : public HybridDeathTest {
 protected:
  void SetUp() override {
    HybridDeathTest::SetUp();
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "the hybrid's thread caches are off under ASan: no list to corrupt";
#endif
  }
};

// A block freed into the calling thread's list, the hybrid validated sound.
void *cached_block(brisk_hybrid_t *h, size_t size) {
  void *p = brisk_hybrid_alloc(h, size, 0);
  brisk_hybrid_free(h, p);
  brisk_test_hybrid_validate(h);
  return p;
}

void set_second_word(void *p, uintptr_t value) { static_cast<uintptr_t *>(p)[1] = value; }

// A write after free that splices a block of the program's into a thread's
// list of blocks of `size`, keeping the list's length: of 200 blocks handed
// out, the second and third are freed (the list: third, second, ...), and
// the third's link is pointed at `words` words into the first, still live,
// whose own "link" is set to where the list went on after the second; with
// `with_key` the word after it gets the key, copied from the second. The
// other blocks are then freed, so the list fills and its older half goes
// back (a trim). Returns the spliced address.
void *splice_live_block(brisk_hybrid_t *h, size_t size, size_t words, bool with_key) {
  std::vector<void *> blocks;
  for (int i = 0; i < 200; i++) blocks.push_back(brisk_hybrid_alloc(h, size, 0));
  void **spliced = static_cast<void **>(blocks[0]) + words;
  void **second = static_cast<void **>(blocks[1]);
  brisk_hybrid_free(h, blocks[1]);
  brisk_hybrid_free(h, blocks[2]);
  spliced[0] = second[0];
  if (with_key) spliced[1] = second[1];
  *static_cast<void **>(blocks[2]) = spliced;
  for (size_t i = 3; i < blocks.size(); i++) brisk_hybrid_free(h, blocks[i]);
  return spliced;
}

TEST_F(HybridValidatorDeathTest, CachedBlockWithoutTheKeyIsNamed) {
  for (size_t size : {size_t{40}, size_t{200}}) {  // a bucket's, a region's
    EXPECT_DEATH(
        {
          HybridPtr h(brisk_hybrid_create(nullptr));
          set_second_word(cached_block(h.get(), size), 0x1234);
          brisk_test_hybrid_validate(h.get());
        },
        "brisk: brisk_hybrid_validate\\(0x[0-9a-f]+\\): a cached block does not carry the key "
        ".*\\(entry of slot [0-9]+\\)")
        << size;
  }
}

// The word that holds a list's room, off by one (a list one longer than it
// says), and above the class's cap.
TEST_F(HybridValidatorDeathTest, ListRoomWordIsNamed) {
  EXPECT_DEATH(
      {
        HybridPtr h(brisk_hybrid_create(nullptr));
        cached_block(h.get(), 200);
        if (!brisk_test_hybrid_add_room(h.get(), 200, 1)) std::abort();
        brisk_test_hybrid_validate(h.get());
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a list holds more blocks than its room says");
  EXPECT_DEATH(
      {
        HybridPtr h(brisk_hybrid_create(nullptr));
        cached_block(h.get(), 40);
        if (!brisk_test_hybrid_add_room(h.get(), 40, 100)) std::abort();
        brisk_test_hybrid_validate(h.get());
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a list's room is above its class's cap");
  EXPECT_DEATH(
      {
        HybridPtr h(brisk_hybrid_create(nullptr));
        cached_block(h.get(), 40);
        if (!brisk_test_hybrid_add_room(h.get(), 40, -1)) std::abort();
        brisk_test_hybrid_validate(h.get());
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a list holds fewer blocks than its room says");
}

// One block in two lists, or twice in one: its key cleared after its free
// (a write after free), so that a second free does not see it cached, and
// freed again by the same thread, or by this thread after another thread
// cached it (two slot entries).
TEST_F(HybridValidatorDeathTest, BlockCachedTwiceIsNamed) {
  for (size_t size : {size_t{40}, size_t{3000}}) {
    EXPECT_DEATH(
        {
          HybridPtr h(brisk_hybrid_create(nullptr));
          void *p = cached_block(h.get(), size);
          set_second_word(p, 0);
          brisk_hybrid_free(h.get(), p);
          brisk_test_hybrid_validate(h.get());
        },
        "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a block is cached twice")
        << size;
  }
  EXPECT_DEATH(
      {
        HybridPtr h(brisk_hybrid_create(nullptr));
        brisk_hybrid_free(h.get(), brisk_hybrid_alloc(h.get(), 200, 0));  // this thread's entry
        void *p = nullptr;
        std::thread([&] { p = cached_block(h.get(), 200); }).join();
        set_second_word(p, 0);
        brisk_hybrid_free(h.get(), p);
        brisk_test_hybrid_validate(h.get());
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a block is cached twice");
}

// A block cached twice (its key cleared after its free, a write after
// free, then freed again) links to itself: the list's blocks run on past
// the count its room word keeps. When the list fills up and gives half
// back, the walk collected blocks until the list ended, past the end of
// its 64-entry array on the stack; it stops at the count now and names
// the block whose link runs on. A second free of a block already named
// cached walks the list as far as that count too.
TEST_F(HybridValidatorDeathTest, ListLoopedByAWriteAfterFreeAbortsAtTheTrim) {
  for (size_t size : {size_t{40}, size_t{200}}) {  // a bucket's, a region's
    EXPECT_DEATH(
        {
          HybridPtr h(brisk_hybrid_create(nullptr));
          std::vector<void *> blocks;
          for (int i = 0; i < 200; i++) blocks.push_back(brisk_hybrid_alloc(h.get(), size, 0));
          brisk_hybrid_free(h.get(), blocks[0]);
          set_second_word(blocks[0], 0);
          brisk_hybrid_free(h.get(), blocks[0]);
          for (size_t i = 1; i < blocks.size(); i++) brisk_hybrid_free(h.get(), blocks[i]);
        },
        // The second push gave the block its key back, so the walk meets it
        // twice: the second time without the key the first visit cleared.
        "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): a block in a thread's cache lost its key")
        << size;
  }
}

// A thread's list that fills up gives half its blocks back to their
// section in one batch, checked there as a free of each: the message names
// brisk_hybrid_free, the call the program made, not the section's
// brisk_pool_free or brisk_buddy_free (as before). Here a freed block's
// link was overwritten (a write after free) with an address inside a live
// block, whose own "link" goes on where the list went on (so the list
// keeps the length its room word says) and whose next word holds the key
// (copied from a cached block: the trim checks both first), and the batch
// then gives it back.
TEST_F(HybridValidatorDeathTest, BatchFreeNamesTheHybridsFree) {
  const struct {
    size_t size;
    const char *why;
  } cases[] = {{40, "not an object of this pool \\(or never handed out\\)"},  // a bucket's
               {200, "not the start of a block"}};                            // a region's
  for (const auto &c : cases) {
    const size_t size = c.size;
    EXPECT_DEATH(
        {
          HybridPtr h(brisk_hybrid_create(nullptr));
          splice_live_block(h.get(), size, 1, true);  // an inside address, with the key
        },
        std::string("brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): ") + c.why)
        << size;
  }
}

// A write after free that points a cached block's link at a live block of
// the same class: the list keeps its length (the live block's first word,
// the program's, is set to where the list went on), so only the key tells
// the live block from a cached one. The trim that gives the older half of
// the list back aborts at it; before, the batch gave it back to its
// section while the program still used it, and the next allocations
// handed it out a second time.
TEST_F(HybridValidatorDeathTest, LinkToALiveBlockAbortsAtTheTrim) {
  for (size_t size : {size_t{40}, size_t{200}}) {  // a bucket's, a region's
    EXPECT_DEATH(
        {
          HybridPtr h(brisk_hybrid_create(nullptr));
          void *live = splice_live_block(h.get(), size, 0, false);  // the block's start, no key
          for (int i = 0; i < 400; i++) {
            void *p = brisk_hybrid_alloc(h.get(), size, 0);
            if (p == live) std::fprintf(stderr, "the live block was handed out again\n");
          }
        },
        "brisk: brisk_hybrid_free\\(0x[0-9a-f]+\\): a block in a thread's cache lost its key")
        << size;
  }
}

// A list's link (a cached block's first word) overwritten with a live
// block of another class: a region block of another order, an object of
// another bucket.
TEST_F(HybridValidatorDeathTest, BlockOfAnotherClassIsNamed) {
  auto link_to_other = [](size_t size, size_t other_size) {
    HybridPtr h(brisk_hybrid_create(nullptr));
    void *a = brisk_hybrid_alloc(h.get(), size, 0);
    void *b = brisk_hybrid_alloc(h.get(), size, 0);
    void *other = brisk_hybrid_alloc(h.get(), other_size, 0);
    brisk_hybrid_free(h.get(), a);
    brisk_hybrid_free(h.get(), b);  // the list: b, then a
    brisk_test_hybrid_validate(h.get());
    *static_cast<void **>(b) = other;
    brisk_test_hybrid_validate(h.get());
  };
  EXPECT_DEATH(link_to_other(200, 3000),
               "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a cached block's index byte is not its "
               "class's order \\+ 1");
  EXPECT_DEATH(link_to_other(40, 16),
               "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a cached block is no object of its "
               "class's bucket that was handed out");
}

// Debug builds check the calling thread's own lists from alloc's slow path
// every 64th time: a key overwritten after a free is named within 64 slow
// allocations (an alignment sends each out of line).
TEST_F(HybridValidatorDeathTest, DebugSlowPathChecksTheThreadsLists) {
#if defined(BRISK_DEBUG) && BRISK_DEBUG
  EXPECT_DEATH(
      {
        HybridPtr h(brisk_hybrid_create(nullptr));
        set_second_word(cached_block(h.get(), 40), 0x1234);
        for (int i = 0; i < 64; i++)
          brisk_hybrid_free(h.get(), brisk_hybrid_alloc(h.get(), 100, 16));
        std::fprintf(stderr, "not caught\n");
      },
      "brisk_hybrid_validate\\(0x[0-9a-f]+\\): a cached block does not carry the key");
#else
  GTEST_SKIP() << "needs BRISK_DEBUG (on in sanitizer builds)";
#endif
}

}  // namespace
