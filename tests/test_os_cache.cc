// The OS layer's mapping cache (src/os/map_cache.c) as the region
// allocators use it: a destroyed allocator's mappings go to the next one of
// the same kind and size (same addresses, no system call, its pages still
// resident), within the bound in bytes and in entries and for the delay
// only; brisk_collect expires them (force: all); what an allocator promises
// zeroed is zeroed on reuse, and what it keeps counters in starts at zero;
// threads that create and destroy allocators at once never share a
// mapping. Also: an arena's reservation asks for transparent huge pages.
// Its statistics (brisk_stats_t.region_cache) are checked against the OS
// layer's own counts, and its options (BRISK_REGION_CACHE_MB/MS) in child
// processes that read them at load.
#include <brisk.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "os_calls.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::fill_pattern;
using brisk_test::find_pattern_mismatch;
using brisk_test::scaled;

namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// Sanitizer builds turn brisk's debug checks on; their pools keep out of
// the cache (their live bits would come in set).
constexpr bool kDebugPools = brisk_test::kSanitized;

bool is_mapped(const void *p) {
  unsigned char vec[1];
  void *page = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
  return mincore(page, 4096, vec) == 0;
}

brisk_test_cache_info_t cache_info() {
  brisk_test_cache_info_t info;
  brisk_test_os_cache_info(&info);
  return info;
}

// Every test starts from an empty cache with the default limits and leaves
// it so.
class MapCache : public testing::Test {
 protected:
  void SetUp() override {
    brisk_test_os_cache_defaults();
    brisk_test_os_cache_flush();
  }
  void TearDown() override {
    brisk_test_os_cache_defaults();
    brisk_test_os_cache_flush();
  }
};

// An arena's first block after its predecessor was destroyed: the same
// address, no system call to make the arena, the page still resident and
// holding what the predecessor wrote (the arena never promised zeroes).
TEST_F(MapCache, ArenaTakesItsPredecessorsReservation) {
  const size_t reserve = 256 * kMiB, used = 4 * kMiB;
  const uint64_t hits = cache_info().hits;
  brisk_arena_t *a = brisk_arena_create(reserve);
  ASSERT_NE(a, nullptr);
  auto *first = static_cast<unsigned char *>(brisk_arena_alloc(a, used, 0));
  ASSERT_NE(first, nullptr);
  memset(first, 0xAB, used);
  brisk_arena_destroy(a);
  EXPECT_TRUE(brisk_test_os_cache_holds(first));
  EXPECT_EQ(cache_info().entries, 1u);

  const uint64_t before = brisk_test_os_calls();
  brisk_arena_t *b = brisk_arena_create(reserve);
  const uint64_t calls = brisk_test_os_calls() - before;
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(calls, 0u);
  brisk_region_stats_t s;
  brisk_arena_stats(b, &s);
  EXPECT_EQ(s.system_requests, 0u);
  EXPECT_EQ(s.allocations, 0u);  // the header was cleared
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_FALSE(brisk_test_os_cache_holds(first));
  EXPECT_EQ(cache_info().hits, hits + 1);
  auto *again = static_cast<unsigned char *>(brisk_arena_alloc(b, used, 0));
  ASSERT_EQ(again, first);
  // Resident before this arena wrote anything: no fault to bring it in.
  EXPECT_EQ(brisk_test_os_resident(again, used), used);
  EXPECT_EQ(again[0], 0xAB);
  EXPECT_EQ(again[used - 1], 0xAB);
  brisk_arena_stats(b, &s);
  EXPECT_EQ(s.system_requests, 0u) << "the cached reservation was committed already";
  brisk_arena_destroy(b);
}

// A range that overlaps a mapping the cache keeps, the same one given
// again included, is refused and left alone: kept twice, the mapping went
// to two takers (a region allocator destroyed twice did that).
TEST_F(MapCache, MemoryItHoldsIsRefused) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto *p = static_cast<unsigned char *>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_TRUE(brisk_test_os_cache_put(p + page, page));
  const brisk_test_cache_info_t before = cache_info();
  EXPECT_FALSE(brisk_test_os_cache_put(p + page, page));      // the same
  EXPECT_FALSE(brisk_test_os_cache_put(p, 2 * page));         // its head
  EXPECT_FALSE(brisk_test_os_cache_put(p + page, 2 * page));  // its start and past its end
  const brisk_test_cache_info_t after = cache_info();
  EXPECT_EQ(after.entries, before.entries);
  EXPECT_EQ(after.puts, before.puts);
  EXPECT_TRUE(is_mapped(p) && is_mapped(p + 2 * page)) << "a refused range is not released";
  EXPECT_EQ(brisk_test_os_cache_take(page), p + page);
  EXPECT_EQ(brisk_test_os_cache_take(page), nullptr) << "kept once";
  // Next to it, not over it: kept.
  ASSERT_TRUE(brisk_test_os_cache_put(p + page, page));
  EXPECT_TRUE(brisk_test_os_cache_put(p, page));
  EXPECT_TRUE(brisk_test_os_cache_put(p + 2 * page, page));
  EXPECT_EQ(cache_info().entries, before.entries + 2);
  // Out of the cache again, to be unmapped here: the OS layer did not map
  // them, so it must not count their release.
  for (int i = 0; i < 3; i++) EXPECT_NE(brisk_test_os_cache_take(page), nullptr);
  munmap(p, 3 * page);
}

// Another size, or another kind, does not get it.
TEST_F(MapCache, OnlyTheSameKindAndSize) {
  const uint64_t hits = cache_info().hits;
  brisk_arena_t *a = brisk_arena_create(64 * kMiB);
  ASSERT_NE(a, nullptr);
  void *p = brisk_arena_alloc(a, 100, 0);
  brisk_arena_destroy(a);
  ASSERT_TRUE(brisk_test_os_cache_holds(p));
  brisk_arena_t *other = brisk_arena_create(128 * kMiB);
  ASSERT_NE(other, nullptr);
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(brisk_test_os_cache_holds(p));
  EXPECT_EQ(cache_info().hits, hits);
  brisk_stack_destroy(s);
  brisk_arena_destroy(other);
}

// A mapping with more resident bytes than the bound goes back to the OS at
// once; smaller ones are kept, the oldest going first to make room.
TEST_F(MapCache, BoundInBytes) {
  brisk_test_os_cache_configure(3 * kMiB, 32, 60000);
  brisk_arena_t *big = brisk_arena_create(64 * kMiB);
  ASSERT_NE(big, nullptr);
  auto *p = static_cast<unsigned char *>(brisk_arena_alloc(big, 4 * kMiB, 0));
  ASSERT_NE(p, nullptr);
  memset(p, 1, 4 * kMiB);
  brisk_arena_destroy(big);
  EXPECT_FALSE(brisk_test_os_cache_holds(p));
  EXPECT_FALSE(is_mapped(p));

  // Two arenas of 2 MiB touched each (of two sizes: the second must not
  // take the first's reservation): the second puts the first out.
  unsigned char *blocks[2];
  for (int i = 0; i < 2; i++) {
    unsigned char *&block = blocks[i];
    brisk_arena_t *a = brisk_arena_create((size_t{32} + i) * kMiB);
    ASSERT_NE(a, nullptr);
    block = static_cast<unsigned char *>(brisk_arena_alloc(a, 2 * kMiB - 64 * kKiB, 0));
    ASSERT_NE(block, nullptr);
    memset(block, 2, 2 * kMiB - 64 * kKiB);
    brisk_arena_destroy(a);
    EXPECT_TRUE(brisk_test_os_cache_holds(block));
  }
  EXPECT_FALSE(brisk_test_os_cache_holds(blocks[0]));
  EXPECT_FALSE(is_mapped(blocks[0]));
  brisk_test_cache_info_t info = cache_info();
  EXPECT_EQ(info.entries, 1u);
  EXPECT_LE(info.resident, 3 * kMiB);
  EXPECT_GE(info.resident, 2 * kMiB - 64 * kKiB);
}

// No more entries than the bound: the oldest go.
TEST_F(MapCache, BoundInEntries) {
  brisk_test_os_cache_configure(256 * kMiB, 3, 60000);
  const uint64_t releases = cache_info().releases;
  // Six reservations alive at once, so that none reuses the address of
  // one released before it; then destroyed in order.
  std::vector<brisk_arena_t *> arenas;
  std::vector<void *> firsts;
  for (int i = 0; i < 6; i++) {
    // Different sizes, so that none takes another's reservation.
    arenas.push_back(brisk_arena_create((size_t{16} + i) * kMiB));
    ASSERT_NE(arenas.back(), nullptr);
    firsts.push_back(brisk_arena_alloc(arenas.back(), 1000, 0));
    memset(firsts.back(), 3, 1000);
  }
  for (brisk_arena_t *a : arenas) brisk_arena_destroy(a);
  brisk_test_cache_info_t info = cache_info();
  EXPECT_EQ(info.entries, 3u);
  EXPECT_GE(info.releases, releases + 3);
  for (int i = 0; i < 6; i++) {
    EXPECT_EQ(brisk_test_os_cache_holds(firsts[i]) != 0, i >= 3) << i;
    EXPECT_EQ(is_mapped(firsts[i]), i >= 3) << i;
  }
}

// Kept for the delay only: an expiry before it leaves the mapping, one
// after it releases it, and so does brisk_collect.
TEST_F(MapCache, ReleasedAfterTheDelay) {
  brisk_test_os_cache_configure(256 * kMiB, 32, 3600 * 1000);
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  void *p = brisk_stack_alloc(s, 1000, 0);
  memset(p, 4, 1000);
  brisk_stack_destroy(s);
  brisk_test_os_cache_expire();
  EXPECT_TRUE(brisk_test_os_cache_holds(p)) << "an hour has not passed";
  EXPECT_TRUE(is_mapped(p));

  brisk_test_os_cache_configure(256 * kMiB, 32, 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  brisk_test_os_cache_expire();
  EXPECT_FALSE(brisk_test_os_cache_holds(p));
  EXPECT_FALSE(is_mapped(p));

  // brisk_collect without force expires by age too.
  s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  p = brisk_stack_alloc(s, 1000, 0);
  brisk_stack_destroy(s);
  EXPECT_TRUE(brisk_test_os_cache_holds(p));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(brisk_collect(false));
  EXPECT_FALSE(is_mapped(p));
  EXPECT_EQ(cache_info().entries, 0u);
}

// brisk_collect(true) (malloc_trim) gives everything back at once.
TEST_F(MapCache, CollectWithForceReleasesEverything) {
  brisk_fifo_t *f = brisk_fifo_create(0);
  ASSERT_NE(f, nullptr);
  void *p = brisk_fifo_alloc(f, 100);
  brisk_fifo_free(f, p);
  brisk_fifo_destroy(f);
  EXPECT_TRUE(brisk_test_os_cache_holds(p));
  EXPECT_TRUE(brisk_collect(true));
  EXPECT_FALSE(is_mapped(p));
  EXPECT_EQ(cache_info().entries, 0u);
  EXPECT_EQ(cache_info().resident, 0u);
}

// The fifo promises zeroed blocks: from pages another fifo filled, too.
TEST_F(MapCache, FifoPagesComeBackZeroed) {
  const size_t page = 64 * kKiB;
  std::vector<void *> blocks;
  brisk_fifo_t *f = brisk_fifo_create(page);
  ASSERT_NE(f, nullptr);
  for (int i = 0; i < 600; i++) {  // ten pages and more, and a big block
    size_t size = i == 300 ? 200 * kKiB : 1000 + i;
    void *p = brisk_fifo_alloc(f, size);
    ASSERT_NE(p, nullptr);
    memset(p, 0xEE, size);
    blocks.push_back(p);
  }
  for (void *p : blocks) brisk_fifo_free(f, p);
  brisk_fifo_destroy(f);
  EXPECT_GE(cache_info().entries, 2u);

  const uint64_t hits = cache_info().hits;
  f = brisk_fifo_create(page);
  ASSERT_NE(f, nullptr);
  blocks.clear();
  for (int i = 0; i < 600; i++) {
    size_t size = i == 300 ? 200 * kKiB : 1000 + (i * 7) % 900;
    auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(f, size));
    ASSERT_NE(p, nullptr);
    for (size_t k = 0; k < size; k++) ASSERT_EQ(p[k], 0) << "block " << i << " byte " << k;
    memset(p, 0x11, size);
    blocks.push_back(p);
  }
  EXPECT_GT(cache_info().hits, hits) << "no page came from the cache: nothing tested";
  for (void *p : blocks) brisk_fifo_free(f, p);
  brisk_fifo_destroy(f);
}

// A buddy allocator's counters and index start at zero on a reused
// mapping, which goes into the cache only when every block was freed.
TEST_F(MapCache, BuddyCountersStartAtZero) {
  const uint64_t hits = cache_info().hits;
  for (int round = 0; round < 3; round++) {
    SCOPED_TRACE(round);
    brisk_buddy_t *b = brisk_buddy_create_ex(4 * kMiB, 64, 256 * kKiB, BRISK_REGION_THREAD_CACHE);
    ASSERT_NE(b, nullptr);
    brisk_region_stats_t s;
    brisk_buddy_stats(b, &s);
    EXPECT_EQ(s.allocations, 0u);
    EXPECT_EQ(s.bytes_in_use, 0u);
    int all_free = 0;
    EXPECT_EQ(brisk_buddy_validate(b, &all_free), 1);
    EXPECT_EQ(all_free, 1);
    if (round > 0) EXPECT_GE(cache_info().hits, hits + 2u * static_cast<unsigned>(round));
    // The whole region, block by block: everything free at the start.
    std::vector<void *> blocks;
    for (void *p; (p = brisk_buddy_alloc(b, 4096, 0)) != nullptr;) blocks.push_back(p);
    EXPECT_EQ(blocks.size(), 4 * kMiB / 4096);
    for (void *p : blocks) memset(p, 0x5A, 4096);
    for (void *p : blocks) brisk_buddy_free(b, p);
    brisk_buddy_destroy(b);
    // Its header is its meta mapping: kept, as every block was freed.
    EXPECT_TRUE(brisk_test_os_cache_holds(b));
  }
  // A block still live at destroy: the meta mapping is not kept.
  brisk_buddy_t *b = brisk_buddy_create_ex(4 * kMiB, 64, 256 * kKiB, 0);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(brisk_buddy_alloc(b, 100, 0), nullptr);
  brisk_buddy_destroy(b);
  EXPECT_FALSE(brisk_test_os_cache_holds(b));
  b = brisk_buddy_create_ex(4 * kMiB, 64, 256 * kKiB, 0);
  ASSERT_NE(b, nullptr);
  int all_free = 0;
  EXPECT_EQ(brisk_buddy_validate(b, &all_free), 1);
  EXPECT_EQ(all_free, 1);
  brisk_buddy_destroy(b);
}

// A bounded pool made again from its predecessor's reservation: counters at
// zero, the capacity exact.
TEST_F(MapCache, PoolStartsEmptyAndKeepsItsBound) {
  const size_t capacity = 1000;
  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round);
    const uint64_t hits = cache_info().hits;
    brisk_pool_t *pool = brisk_pool_create_ex(48, 16, capacity, 0);
    ASSERT_NE(pool, nullptr);
    if (round > 0 && !kDebugPools) EXPECT_EQ(cache_info().hits, hits + 1);
    brisk_region_stats_t s;
    brisk_pool_stats(pool, &s);
    EXPECT_EQ(s.allocations, 0u);
    EXPECT_EQ(s.bytes_in_use, 0u);
    std::vector<void *> objects;
    for (void *p; (p = brisk_pool_alloc(pool)) != nullptr;) objects.push_back(p);
    EXPECT_EQ(objects.size(), capacity);
    std::sort(objects.begin(), objects.end());
    EXPECT_EQ(std::adjacent_find(objects.begin(), objects.end()), objects.end());
    for (void *p : objects) memset(p, 0x77, 48);
    for (void *p : objects) brisk_pool_free(pool, p);
    brisk_pool_destroy(pool);
  }
}

// A growing pool (capacity 0) made again from the cache: the objects its
// predecessor committed are read-write already, so creating it and
// allocating as many again makes no system call (a commit of the same
// bytes again was one per task).
TEST_F(MapCache, GrowingPoolCommitsNothingAgain) {
  if (kDebugPools) GTEST_SKIP() << "debug builds' pools keep out of the cache";
  const size_t count = 20000;  // 960 KiB: past the first 256 KiB slab
  for (int round = 0; round < 3; round++) {
    SCOPED_TRACE(round);
    const uint64_t before = brisk_test_os_calls();
    brisk_pool_t *pool = brisk_pool_create_ex(48, 16, 0, 0);
    ASSERT_NE(pool, nullptr);
    std::vector<void *> objects;
    for (size_t i = 0; i < count; i++) {
      void *p = brisk_pool_alloc(pool);
      ASSERT_NE(p, nullptr);
      memset(p, 0x5A, 48);
      objects.push_back(p);
    }
    const uint64_t calls = brisk_test_os_calls() - before;
    brisk_region_stats_t s;
    brisk_pool_stats(pool, &s);
    EXPECT_EQ(s.system_requests, calls);
    if (round > 0) EXPECT_EQ(calls, 0u) << "the predecessor's objects were committed already";
    for (void *p : objects) brisk_pool_free(pool, p);
    brisk_pool_destroy(pool);
  }
}

// A hybrid made again from the cache: its sections' counts start at zero
// and it serves as the first one did.
TEST_F(MapCache, HybridStartsEmpty) {
  const uint64_t hits = cache_info().hits;
  for (int round = 0; round < 2; round++) {
    SCOPED_TRACE(round);
    brisk_hybrid_t *h = brisk_hybrid_create(nullptr);
    ASSERT_NE(h, nullptr);
    brisk_region_stats_t s;
    brisk_hybrid_totals(h, &s);
    EXPECT_EQ(s.allocations, 0u);
    EXPECT_EQ(s.bytes_in_use, 0u);
    std::vector<void *> blocks;
    for (size_t size = 1; size <= 4096; size += 7) {
      void *p = brisk_hybrid_alloc(h, size, 0);
      ASSERT_NE(p, nullptr);
      memset(p, 0x33, size);
      blocks.push_back(p);
    }
    for (void *p : blocks) brisk_hybrid_free(h, p);
    brisk_hybrid_destroy(h);
  }
  // The second takes the first one's mapping (itself, its buckets and its
  // first region).
  EXPECT_GE(cache_info().hits, hits + 1);
}

// A hybrid destroyed while the program still held its blocks leaves its
// region's counters and index bytes set in the mapping: the next hybrid
// that takes the mapping clears them, so its whole region serves again
// (a small block and 63 of 1 MiB, where stale counters would leave none).
TEST_F(MapCache, HybridAfterOneDestroyedWithLiveBlocksStartsClean) {
  const uint64_t hits = cache_info().hits;
  for (int round = 0; round < 3; round++) {
    SCOPED_TRACE(round);
    brisk_hybrid_t *h = brisk_hybrid_create(nullptr);
    ASSERT_NE(h, nullptr);
    EXPECT_NE(brisk_hybrid_alloc(h, 16, 0), nullptr);
    EXPECT_NE(brisk_hybrid_alloc(h, 200, 0), nullptr);  // in the region's first MiB
    size_t blocks = 0;
    while (brisk_hybrid_alloc(h, kMiB, 0) != nullptr) blocks++;
    EXPECT_EQ(blocks, 63u);
    brisk_hybrid_destroy(h);  // every block still out
  }
  EXPECT_GE(cache_info().hits, hits + 2);
}

// Threads (more than cores) creating, filling, checking and destroying
// allocators at once: no two live allocators ever share a mapping (each
// block's pattern survives until its allocator goes).
TEST_F(MapCache, ThreadsNeverShareAMapping) {
  constexpr int kThreads = 8;
  const int rounds = static_cast<int>(scaled(300, 40));
  std::atomic<long> bad{0};
  const uint64_t hits = cache_info().hits;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < rounds; r++) {
        uint64_t serial = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(r);
        brisk_arena_t *a = brisk_arena_create(16 * kMiB);
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_fifo_t *f = brisk_fifo_create(0);
        if (a == nullptr || s == nullptr || f == nullptr) {
          bad++;
          return;
        }
        void *blocks[3] = {brisk_arena_alloc(a, 3000, 0), brisk_stack_alloc(s, 3000, 0),
                           brisk_fifo_alloc(f, 3000)};
        for (void *p : blocks) fill_pattern(p, 3000, block_seed(p, 3000, serial));
        std::this_thread::yield();
        for (void *p : blocks)
          if (find_pattern_mismatch(p, 3000, block_seed(p, 3000, serial)) != 3000) bad++;
        brisk_fifo_free(f, blocks[2]);
        brisk_fifo_destroy(f);
        brisk_stack_destroy(s);
        brisk_arena_destroy(a);
      }
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(cache_info().hits, hits) << "nothing was reused: nothing tested";
}

// ---- Statistics: brisk_stats_t.region_cache ----

using brisk_test::stats_snapshot;

// An arena made, destroyed, made again and destroyed, then brisk_collect
// (true): every count and gauge of the cache, exactly, each against what
// the OS layer counted on its own (bytes_mapped: the reservation's size; no
// mmap for the second arena; munmap of those bytes at the collect). The
// reset clears the counts and leaves the gauges.
TEST_F(MapCache, StatsCountAnArenasReuseExactly) {
  brisk_stats_reset();
  brisk_stats_t s0 = stats_snapshot();
  const brisk_region_cache_stats_t &c0 = s0.region_cache;
  EXPECT_EQ(c0.entries, 0u);
  EXPECT_EQ(c0.bytes, 0u);
  EXPECT_EQ(c0.resident_bytes, 0u);
  EXPECT_EQ(c0.max_bytes, size_t{256} * kMiB);
  EXPECT_EQ(c0.delay_ms, 1000u);
  EXPECT_EQ(c0.hits + c0.misses + c0.kept + c0.declined + c0.expired + c0.evicted + c0.flushed,
            0u)
      << "the reset did not clear the counts";

  brisk_arena_t *a = brisk_arena_create(64 * kMiB);
  ASSERT_NE(a, nullptr);
  auto *p = static_cast<unsigned char *>(brisk_arena_alloc(a, kMiB, 0));
  ASSERT_NE(p, nullptr);
  memset(p, 1, kMiB);
  brisk_stats_t s1 = stats_snapshot();
  const size_t mapped = s1.os.bytes_mapped - s0.os.bytes_mapped;
  ASSERT_GE(mapped, 64 * kMiB);
  EXPECT_EQ(s1.region_cache.misses, 1u);
  EXPECT_EQ(s1.region_cache.hits, 0u);

  brisk_arena_destroy(a);
  brisk_stats_t s2 = stats_snapshot();
  const brisk_region_cache_stats_t &c2 = s2.region_cache;
  EXPECT_EQ(s2.os.bytes_mapped, s1.os.bytes_mapped) << "the cache holds it: still mapped";
  EXPECT_EQ(c2.entries, 1u);
  EXPECT_EQ(c2.bytes, mapped);
  EXPECT_GE(c2.resident_bytes, kMiB);
  EXPECT_LE(c2.resident_bytes, mapped);
  EXPECT_EQ(c2.kept, 1u);
  EXPECT_EQ(c2.kept_bytes, mapped);
  EXPECT_EQ(c2.declined, 0u);

  brisk_arena_t *b = brisk_arena_create(64 * kMiB);
  ASSERT_NE(b, nullptr);
  brisk_stats_t s3 = stats_snapshot();
  const brisk_region_cache_stats_t &c3 = s3.region_cache;
  EXPECT_EQ(s3.os.map_calls, s2.os.map_calls);
  EXPECT_EQ(c3.hits, 1u);
  EXPECT_EQ(c3.hit_bytes, mapped);
  EXPECT_EQ(c3.misses, 1u);
  EXPECT_EQ(c3.entries, 0u);
  EXPECT_EQ(c3.bytes, 0u);
  EXPECT_EQ(c3.resident_bytes, 0u);
  brisk_arena_destroy(b);
  EXPECT_EQ(stats_snapshot().region_cache.kept, 2u);

  brisk_stats_reset();
  brisk_stats_t s4 = stats_snapshot();
  const brisk_region_cache_stats_t &c4 = s4.region_cache;
  EXPECT_EQ(c4.hits, 0u);
  EXPECT_EQ(c4.hit_bytes, 0u);
  EXPECT_EQ(c4.misses, 0u);
  EXPECT_EQ(c4.kept, 0u);
  EXPECT_EQ(c4.kept_bytes, 0u);
  EXPECT_EQ(c4.entries, 1u) << "a gauge: the reset keeps it";
  EXPECT_EQ(c4.bytes, mapped);

  EXPECT_TRUE(brisk_collect(true));
  brisk_stats_t s5 = stats_snapshot();
  const brisk_region_cache_stats_t &c5 = s5.region_cache;
  EXPECT_EQ(c5.flushed, 1u);
  EXPECT_EQ(c5.flushed_bytes, mapped);
  EXPECT_EQ(c5.expired + c5.evicted, 0u);
  EXPECT_EQ(c5.entries, 0u);
  EXPECT_EQ(c5.bytes, 0u);
  EXPECT_EQ(c5.resident_bytes, 0u);
  EXPECT_GE(s5.os.unmap_bytes - s4.os.unmap_bytes, mapped);
  EXPECT_EQ(s4.os.bytes_mapped - s5.os.bytes_mapped, mapped);
}

// A stack (two mappings: its own page and its first block) made, destroyed
// and made again: the first one's mappings were all misses, each a fresh
// mmap; the second's all hits, no mmap, exactly the bytes the first gave
// back.
TEST_F(MapCache, StatsCountAStacksReuseExactly) {
  brisk_stats_t s0 = stats_snapshot();
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  memset(brisk_stack_alloc(s, 1000, 0), 5, 1000);
  brisk_stats_t s1 = stats_snapshot();
  const uint64_t misses = s1.region_cache.misses - s0.region_cache.misses;
  EXPECT_GE(misses, 2u);
  EXPECT_EQ(misses, s1.os.map_calls - s0.os.map_calls);
  EXPECT_EQ(s1.region_cache.hits, s0.region_cache.hits);
  const size_t mapped = s1.os.bytes_mapped - s0.os.bytes_mapped;

  brisk_stack_destroy(s);
  brisk_stats_t s2 = stats_snapshot();
  const uint64_t kept = s2.region_cache.kept - s1.region_cache.kept;
  EXPECT_EQ(kept, misses);
  EXPECT_EQ(s2.region_cache.kept_bytes - s1.region_cache.kept_bytes, mapped);
  EXPECT_EQ(s2.region_cache.entries, kept);
  EXPECT_EQ(s2.region_cache.bytes, mapped);
  EXPECT_EQ(s2.os.bytes_mapped, s1.os.bytes_mapped);

  s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  memset(brisk_stack_alloc(s, 1000, 0), 6, 1000);
  brisk_stats_t s3 = stats_snapshot();
  EXPECT_EQ(s3.os.map_calls, s2.os.map_calls);
  EXPECT_EQ(s3.region_cache.hits - s2.region_cache.hits, kept);
  EXPECT_EQ(s3.region_cache.hit_bytes - s2.region_cache.hit_bytes, mapped);
  EXPECT_EQ(s3.region_cache.misses, s2.region_cache.misses);
  EXPECT_EQ(s3.region_cache.entries, 0u);
  EXPECT_EQ(s3.region_cache.bytes, 0u);
  brisk_stack_destroy(s);
}

// What leaves the cache other than to a taker, by reason: after the delay
// (brisk_collect without force), to make room, and what it never took in
// (more resident than the bound); each with the bytes the OS layer
// unmapped for it.
TEST_F(MapCache, StatsCountEachWayOut) {
  // After the delay.
  brisk_test_os_cache_configure(256 * kMiB, 32, 20);
  brisk_arena_t *a = brisk_arena_create(16 * kMiB);
  ASSERT_NE(a, nullptr);
  brisk_arena_destroy(a);
  brisk_stats_t s0 = stats_snapshot();
  ASSERT_EQ(s0.region_cache.entries, 1u);
  const size_t size16 = s0.region_cache.bytes;
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(brisk_collect(false));
  brisk_stats_t s1 = stats_snapshot();
  EXPECT_EQ(s1.region_cache.expired - s0.region_cache.expired, 1u);
  EXPECT_EQ(s1.region_cache.expired_bytes - s0.region_cache.expired_bytes, size16);
  EXPECT_EQ(s1.region_cache.entries, 0u);
  EXPECT_EQ(s0.os.bytes_mapped - s1.os.bytes_mapped, size16);

  // To make room: one entry at most, two arenas of different sizes.
  brisk_test_os_cache_configure(256 * kMiB, 1, 60000);
  brisk_arena_t *first = brisk_arena_create(16 * kMiB);
  brisk_arena_t *second = brisk_arena_create(17 * kMiB);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  brisk_arena_destroy(first);
  brisk_stats_t s2 = stats_snapshot();
  brisk_arena_destroy(second);
  brisk_stats_t s3 = stats_snapshot();
  EXPECT_EQ(s3.region_cache.evicted - s2.region_cache.evicted, 1u);
  EXPECT_EQ(s3.region_cache.evicted_bytes - s2.region_cache.evicted_bytes, size16);
  EXPECT_EQ(s3.region_cache.entries, 1u);
  EXPECT_EQ(s3.region_cache.bytes, s3.region_cache.kept_bytes - s2.region_cache.kept_bytes);
  EXPECT_EQ(s2.os.bytes_mapped - s3.os.bytes_mapped, size16);

  // Over the bound: released at once.
  brisk_test_os_cache_configure(kMiB, 32, 60000);
  EXPECT_EQ(stats_snapshot().region_cache.max_bytes, kMiB);
  a = brisk_arena_create(16 * kMiB);
  ASSERT_NE(a, nullptr);
  memset(brisk_arena_alloc(a, 2 * kMiB, 0), 7, 2 * kMiB);
  brisk_stats_t s4 = stats_snapshot();
  brisk_arena_destroy(a);
  brisk_stats_t s5 = stats_snapshot();
  EXPECT_EQ(s5.region_cache.declined - s4.region_cache.declined, 1u);
  EXPECT_EQ(s5.region_cache.declined_bytes - s4.region_cache.declined_bytes, size16);
  EXPECT_EQ(s5.region_cache.kept, s4.region_cache.kept);
  EXPECT_EQ(s5.region_cache.entries, s4.region_cache.entries);
  EXPECT_EQ(s4.os.bytes_mapped - s5.os.bytes_mapped, size16);
}

// Over the whole run, everything kept was taken, released or is still
// there, and the gauges agree with the cache's own list (threads making
// and destroying allocators at once, more than cores).
TEST_F(MapCache, StatsBalanceUnderThreads) {
  brisk_test_os_cache_configure(8 * kMiB, 6, 60000);  // small: evictions too
  brisk_stats_t s0 = stats_snapshot();
  const int rounds = static_cast<int>(scaled(200, 30));
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; t++) {
    threads.emplace_back([rounds, t] {
      for (int r = 0; r < rounds; r++) {
        brisk_arena_t *a = brisk_arena_create((size_t{4} + static_cast<size_t>(t % 3)) * kMiB);
        brisk_stack_t *s = brisk_stack_create(0);
        if (a != nullptr) memset(brisk_arena_alloc(a, 1000, 0), 1, 1000);
        brisk_stack_destroy(s);
        brisk_arena_destroy(a);
      }
    });
  }
  for (auto &th : threads) th.join();
  brisk_stats_t s1 = stats_snapshot();
  const brisk_region_cache_stats_t &c0 = s0.region_cache, &c1 = s1.region_cache;
  EXPECT_GT(c1.hits, c0.hits) << "nothing was reused: nothing tested";
  EXPECT_EQ(c1.kept - c0.kept,
            (c1.hits - c0.hits) + (c1.expired - c0.expired) + (c1.evicted - c0.evicted) +
                (c1.flushed - c0.flushed) + c1.entries - c0.entries);
  EXPECT_EQ(c1.kept_bytes - c0.kept_bytes,
            (c1.hit_bytes - c0.hit_bytes) + (c1.expired_bytes - c0.expired_bytes) +
                (c1.evicted_bytes - c0.evicted_bytes) + (c1.flushed_bytes - c0.flushed_bytes) +
                c1.bytes - c0.bytes);
  brisk_test_cache_info_t info = cache_info();
  EXPECT_EQ(c1.entries, info.entries);
  EXPECT_EQ(c1.resident_bytes, info.resident);
  EXPECT_LE(c1.entries, 6u);
}

// The table and the JSON line say what the cache holds.
TEST_F(MapCache, StatsTableAndJson) {
  brisk_arena_t *a = brisk_arena_create(16 * kMiB);
  ASSERT_NE(a, nullptr);
  brisk_arena_destroy(a);
  const brisk_region_cache_stats_t c = stats_snapshot().region_cache;
  ASSERT_EQ(c.entries, 1u);
  auto capture = [](void (*print)(FILE *)) {
    FILE *file = std::tmpfile();
    print(file);
    std::rewind(file);
    std::string text;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
    std::fclose(file);
    return text;
  };
  std::string json = capture(brisk_stats_json);
  std::string expected = "\"region_cache\":{\"entries\":1,\"bytes\":" + std::to_string(c.bytes) +
                         ",\"resident_bytes\":" + std::to_string(c.resident_bytes) +
                         ",\"max_bytes\":" + std::to_string(256 * kMiB) + ",\"delay_ms\":1000";
  EXPECT_NE(json.find(expected), std::string::npos) << json;
  for (const char *key : {"\"hits\":", "\"misses\":", "\"kept_bytes\":", "\"declined\":",
                          "\"expired_bytes\":", "\"evicted\":", "\"flushed_bytes\":"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  std::string table = capture(brisk_stats_print);
  EXPECT_NE(table.find("region mapping cache: 1 mappings, 16.0 MiB"), std::string::npos)
      << table;
  EXPECT_NE(table.find(" hits ("), std::string::npos) << table;
}

// ---- Options: BRISK_REGION_CACHE_MB and BRISK_REGION_CACHE_MS ----
// Read once at load, so each case runs in a child: a "threadsafe" death test
// re-executes this program with the environment set here. The child checks
// and exits 0, or prints what is wrong and exits 1. It runs under the
// options its case sets and no other: those this program runs under (the
// other bound, BRISK_VERBOSE's lines, a warning) are put aside meanwhile.

class RegionCacheOption : public testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    for (char **entry = environ; *entry != nullptr; entry++) {
      if (std::strncmp(*entry, "BRISK_", 6) == 0) saved_.emplace_back(*entry);
    }
    for (const std::string &entry : saved_) unsetenv(entry.substr(0, entry.find('=')).c_str());
  }
  void TearDown() override {
    unsetenv("BRISK_REGION_CACHE_MB");
    unsetenv("BRISK_REGION_CACHE_MS");
    for (const std::string &entry : saved_) {
      const size_t equals = entry.find('=');
      setenv(entry.substr(0, equals).c_str(), entry.c_str() + equals + 1, 1);
    }
  }

 private:
  std::vector<std::string> saved_;
};

[[noreturn]] void child_result(const std::string &failure) {
  if (!failure.empty()) std::fprintf(stderr, "child: %s\n", failure.c_str());
  std::fflush(stderr);
  _exit(failure.empty() ? 0 : 1);
}

std::string numbers(const char *what, uint64_t got, uint64_t want) {
  return got == want ? "" : std::string(what) + " " + std::to_string(got) + ", expected " +
                                std::to_string(want);
}

// Destroys an arena of `reserve` bytes with `touched` bytes written; the
// cache's counts before and after.
void arena_round(size_t reserve, size_t touched, brisk_region_cache_stats_t *before,
                 brisk_region_cache_stats_t *after) {
  *before = stats_snapshot().region_cache;
  brisk_arena_t *a = brisk_arena_create(reserve);
  if (a == nullptr) child_result("brisk_arena_create failed");
  if (touched != 0) memset(brisk_arena_alloc(a, touched, 0), 9, touched);
  brisk_arena_destroy(a);
  *after = stats_snapshot().region_cache;
}

// 1 MiB: an arena with 2 MiB resident is not kept, one with 64 KiB is.
void child_limit_in_mib() {
  brisk_region_cache_stats_t before, after;
  std::string failure = numbers("max_bytes", stats_snapshot().region_cache.max_bytes, kMiB);
  arena_round(16 * kMiB, 2 * kMiB, &before, &after);
  if (failure.empty()) failure = numbers("declined", after.declined - before.declined, 1);
  if (failure.empty()) failure = numbers("entries", after.entries, 0);
  arena_round(16 * kMiB, 64 * kKiB, &before, &after);
  if (failure.empty()) failure = numbers("kept", after.kept - before.kept, 1);
  if (failure.empty()) failure = numbers("entries", after.entries, 1);
  child_result(failure);
}

TEST_F(RegionCacheOption, LimitInMiB) {
  setenv("BRISK_REGION_CACHE_MB", "1", 1);
  EXPECT_EXIT(child_limit_in_mib(), testing::ExitedWithCode(0), "");
}

// 0: the cache keeps nothing, not even a mapping with nothing resident, so
// an arena made again maps afresh.
void child_zero_disables_the_cache() {
  brisk_region_cache_stats_t before, after, again;
  std::string failure = numbers("max_bytes", stats_snapshot().region_cache.max_bytes, 0);
  arena_round(16 * kMiB, 0, &before, &after);
  arena_round(16 * kMiB, 0, &after, &again);
  if (failure.empty()) failure = numbers("declined", again.declined - before.declined, 2);
  if (failure.empty()) failure = numbers("kept", again.kept, 0);
  if (failure.empty()) failure = numbers("hits", again.hits, 0);
  if (failure.empty()) failure = numbers("misses", again.misses - before.misses, 2);
  if (failure.empty()) failure = numbers("entries", again.entries, 0);
  if (failure.empty()) failure = numbers("bytes", again.bytes, 0);
  // A buddy that handed out nothing gives back a region with nothing
  // resident: not kept either.
  brisk_buddy_t *b = brisk_buddy_create_ex(4 * kMiB, 64, 256 * kKiB, 0);
  if (b == nullptr) child_result("brisk_buddy_create_ex failed");
  brisk_buddy_destroy(b);
  brisk_region_cache_stats_t last = stats_snapshot().region_cache;
  if (failure.empty()) failure = numbers("kept after a buddy", last.kept, 0);
  if (failure.empty()) failure = numbers("entries after a buddy", last.entries, 0);
  child_result(failure);
}

TEST_F(RegionCacheOption, ZeroDisablesTheCache) {
  setenv("BRISK_REGION_CACHE_MB", "0", 1);
  EXPECT_EXIT(child_zero_disables_the_cache(), testing::ExitedWithCode(0), "");
}

// 10 ms: a mapping kept 60 ms ago goes at the next brisk_collect (the
// default, 1 s, would keep it).
void child_delay_in_milliseconds() {
  brisk_region_cache_stats_t before, after;
  std::string failure = numbers("delay_ms", stats_snapshot().region_cache.delay_ms, 10);
  arena_round(16 * kMiB, 4096, &before, &after);
  if (failure.empty()) failure = numbers("entries", after.entries, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  brisk_collect(false);
  brisk_region_cache_stats_t later = stats_snapshot().region_cache;
  if (failure.empty()) failure = numbers("expired", later.expired - after.expired, 1);
  if (failure.empty()) failure = numbers("entries", later.entries, 0);
  child_result(failure);
}

TEST_F(RegionCacheOption, DelayInMilliseconds) {
  setenv("BRISK_REGION_CACHE_MS", "10", 1);
  EXPECT_EXIT(child_delay_in_milliseconds(), testing::ExitedWithCode(0), "");
}

// A delay of 0 keeps nothing either.
void child_zero_delay_disables_the_cache() {
  brisk_region_cache_stats_t before, after;
  std::string failure = numbers("delay_ms", stats_snapshot().region_cache.delay_ms, 0);
  arena_round(16 * kMiB, 4096, &before, &after);
  if (failure.empty()) failure = numbers("declined", after.declined - before.declined, 1);
  if (failure.empty()) failure = numbers("entries", after.entries, 0);
  child_result(failure);
}

TEST_F(RegionCacheOption, ZeroDelayDisablesTheCache) {
  setenv("BRISK_REGION_CACHE_MS", "0", 1);
  EXPECT_EXIT(child_zero_delay_disables_the_cache(), testing::ExitedWithCode(0), "");
}

// Bad values: a warning naming each, and the defaults.
void child_defaults() {
  brisk_region_cache_stats_t c = stats_snapshot().region_cache;
  std::string failure = numbers("max_bytes", c.max_bytes, 256 * kMiB);
  if (failure.empty()) failure = numbers("delay_ms", c.delay_ms, 1000);
  child_result(failure);
}

TEST_F(RegionCacheOption, BadValuesWarnAndKeepTheDefaults) {
  setenv("BRISK_REGION_CACHE_MB", "banana", 1);
  setenv("BRISK_REGION_CACHE_MS", "-5", 1);
  EXPECT_EXIT(child_defaults(), testing::ExitedWithCode(0),
              "^brisk: BRISK_REGION_CACHE_MB=banana is not a whole number from 0 to 65536; using "
              "the default\nbrisk: BRISK_REGION_CACHE_MS=-5 is not a whole number from 0 to "
              "3600000; using the default\n$");
}

// Where the kernel gives transparent huge pages to ranges that ask, an
// arena's reservation asks for them past its first huge page (VmFlags "hg").
TEST_F(MapCache, ArenaAsksForHugePages) {
  const size_t huge = brisk_test_os_huge_page_size();
  if (huge == 0) GTEST_SKIP() << "no transparent huge pages here";
  brisk_arena_t *a = brisk_arena_create(256 * kMiB);
  ASSERT_NE(a, nullptr);
  auto *p = static_cast<unsigned char *>(brisk_arena_alloc(a, 8 * kMiB, 0));
  ASSERT_NE(p, nullptr);
  memset(p, 1, 8 * kMiB);
  uintptr_t probe = reinterpret_cast<uintptr_t>(p) + 6 * kMiB;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false, found = false, asked = false;
  while (std::getline(smaps, line)) {
    unsigned long lo, hi;
    if (sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') > 8) {
      inside = lo <= probe && probe < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      found = true;
      asked = line.find(" hg") != std::string::npos;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(asked) << "no MADV_HUGEPAGE on the arena's data";
  brisk_arena_destroy(a);
}

}  // namespace
