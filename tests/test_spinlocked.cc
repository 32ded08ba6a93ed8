// The benchmarks' spinlocked baselines (bench/spinlocked.h), which brisk's
// lock-free pools are measured against: the free list honours its capacity
// exactly, the buddy allocator is exact at exhaustion and coalesces, blocks
// are aligned as promised, the hybrid sends each size to its section, and
// under threads that pass blocks to each other (more threads than cores)
// no block is handed out twice or overlaps another. Every build, TSan
// included: the locks are what keeps the plain fields race-free.
#include "spinlocked.h"

#include <errno.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::fill_pattern;
using brisk_test::is_aligned;
using brisk_test::pattern_intact;
using brisk_test::Rng;
using brisk_test::scaled;
using brisk_test::StartGate;

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

TEST(SpinPool, HandsOutItsCapacityExactlyAndTakesItBack) {
  constexpr size_t kCapacity = 1000;
  spin_pool *pool = spin_pool_create(40, kCapacity);
  ASSERT_NE(pool, nullptr);
  for (int round = 0; round < 2; round++) {
    std::vector<char *> objects;
    for (size_t i = 0; i < kCapacity; i++) {
      char *p = static_cast<char *>(spin_pool_alloc(pool));
      ASSERT_NE(p, nullptr) << i;
      EXPECT_TRUE(is_aligned(p, 16));
      objects.push_back(p);
    }
    errno = 0;
    EXPECT_EQ(spin_pool_alloc(pool), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    std::sort(objects.begin(), objects.end());
    for (size_t i = 1; i < objects.size(); i++) EXPECT_GE(objects[i] - objects[i - 1], 40);
    for (char *p : objects) spin_pool_free(pool, p);
  }
  spin_pool_destroy(pool);
}

TEST(SpinBuddy, ExactAtExhaustionAlignedAndCoalescing) {
  constexpr size_t kTotal = 256 * kKiB, kMin = 64, kMax = 64 * kKiB;
  spin_buddy *b = spin_buddy_create(kTotal, kMin, kMax);
  ASSERT_NE(b, nullptr);
  std::vector<void *> blocks;
  while (void *p = spin_buddy_alloc(b, 1)) {
    EXPECT_TRUE(is_aligned(p, kMin));
    blocks.push_back(p);
  }
  EXPECT_EQ(blocks.size(), kTotal / kMin);
  EXPECT_EQ(errno, ENOMEM);
  for (void *p : blocks) spin_buddy_free(b, p);
  // Coalesced: every tree is one max_block block again.
  for (size_t i = 0; i < kTotal / kMax; i++) {
    void *p = spin_buddy_alloc(b, kMax);
    ASSERT_NE(p, nullptr) << i;
    EXPECT_TRUE(is_aligned(p, kMax));
  }
  EXPECT_EQ(spin_buddy_alloc(b, kMin), nullptr);
  EXPECT_EQ(spin_buddy_alloc(b, kMax + 1), nullptr);
  spin_buddy_destroy(b);
}

TEST(SpinBuddyDeathTest, DoubleFreeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        spin_buddy *b = spin_buddy_create(kMiB, 64, 0);
        void *p = spin_buddy_alloc(b, 100);
        spin_buddy_free(b, p);
        spin_buddy_free(b, p);
      },
      "spin_buddy_free\\(0x[0-9a-f]+\\): double free");
}

TEST(SpinHybrid, SendsEachSizeToItsSection) {
  brisk_hybrid_config_t c{};
  c.bucket_sizes[0] = 16;
  c.bucket_counts[0] = 2;
  c.bucket_sizes[1] = 64;
  c.bucket_counts[1] = 2;
  c.region_sizes[0] = 64 * kKiB;
  spin_hybrid *h = spin_hybrid_create(&c);
  ASSERT_NE(h, nullptr);
  // Two 16-byte objects, then the 64-byte bucket is not used for 16 bytes:
  // the third goes to the region, whose blocks are 128 B and up.
  void *a = spin_hybrid_alloc(h, 10), *b = spin_hybrid_alloc(h, 16);
  void *region = spin_hybrid_alloc(h, 16);
  ASSERT_TRUE(a && b && region);
  EXPECT_EQ(std::abs(static_cast<char *>(a) - static_cast<char *>(b)), 16);
  EXPECT_TRUE(is_aligned(region, 128));
  void *big = spin_hybrid_alloc(h, 64 * kKiB);
  EXPECT_EQ(big, nullptr);  // the region holds the 16-byte block already
  for (void *p : {a, b, region}) spin_hybrid_free(h, p);
  big = spin_hybrid_alloc(h, 64 * kKiB);
  EXPECT_NE(big, nullptr);
  spin_hybrid_free(h, big);
  spin_hybrid_destroy(h);
  c.bucket_sizes[1] = 24;  // not a multiple of 16
  EXPECT_EQ(spin_hybrid_create(&c), nullptr);
}

struct Rec {
  void *p;
  size_t size;
  uint64_t seed;
};

// kThreads threads allocate blocks of random sizes up to max_size, fill
// each with a pattern, and free most of them in other threads (through
// mailboxes); a pattern found broken means two blocks overlapped.
void stress(const std::function<void *(size_t)> &alloc, const std::function<void(void *)> &release,
            size_t max_size) {
  constexpr int kThreads = 8;
  constexpr size_t kMailboxes = 32;
  const long ops = scaled(40000, 5000);
  std::vector<std::atomic<Rec *>> mailbox(kMailboxes);
  for (auto &m : mailbox) m.store(nullptr);
  std::atomic<long> corrupt{0}, allocated{0};
  auto check_and_free = [&](Rec *r) {
    if (r == nullptr) return;
    if (!pattern_intact(r->p, r->size, r->seed)) corrupt++;
    release(r->p);
    delete r;
  };
  StartGate gate(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Rng rng(900 + t);
      gate.arrive_and_wait();
      for (long i = 0; i < ops; i++) {
        size_t size = 1 + rng.below(rng.below(4) == 0 ? max_size : 64);
        void *p = alloc(size);
        if (p == nullptr) continue;
        allocated++;
        uint64_t seed = block_seed(p, size, (uint64_t(t) << 40) | uint64_t(i));
        fill_pattern(p, size, seed);
        check_and_free(mailbox[rng.below(kMailboxes)].exchange(new Rec{p, size, seed}));
      }
    });
  }
  for (auto &th : threads) th.join();
  for (auto &m : mailbox) check_and_free(m.exchange(nullptr));
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_GT(allocated.load(), kThreads * ops / 2);
}

TEST(SpinlockedThreads, PoolBlocksNeverOverlap) {
  spin_pool *pool = spin_pool_create(64, 4096);
  ASSERT_NE(pool, nullptr);
  stress([&](size_t) { return spin_pool_alloc(pool); }, [&](void *p) { spin_pool_free(pool, p); },
         64);
  spin_pool_destroy(pool);
}

TEST(SpinlockedThreads, BuddyBlocksNeverOverlap) {
  spin_buddy *b = spin_buddy_create(4 * kMiB, 16, 256 * kKiB);
  ASSERT_NE(b, nullptr);
  stress([&](size_t n) { return spin_buddy_alloc(b, n); }, [&](void *p) { spin_buddy_free(b, p); },
         8 * kKiB);
  spin_buddy_destroy(b);
}

TEST(SpinlockedThreads, HybridBlocksNeverOverlap) {
  spin_hybrid *h = spin_hybrid_create(nullptr);
  ASSERT_NE(h, nullptr);
  stress([&](size_t n) { return spin_hybrid_alloc(h, n); },
         [&](void *p) { spin_hybrid_free(h, p); }, 8 * kKiB);
  spin_hybrid_destroy(h);
}

}  // namespace
