// The fixed-size pool: bad arguments fail with EINVAL, every object keeps
// its alignment, a bounded pool honours its capacity exactly (one thread,
// with and without the per-thread cache), an
// unbounded one grows over many slabs, no object is ever handed out twice
// under an ABA storm (4 objects, 16 threads on 2 cores), objects passed
// between threads keep their contents, misuse aborts with a message, the
// statistics count what was asked and every OS call (against the OS
// layer's own count), and the registry sums every live arena and pool.
// The validator (regions/pool.h) runs at the quiet points of these tests
// (after their threads are joined), and is shown to name each corruption
// made on purpose behind the API's back.
#include <brisk.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "os_calls.h"
#include "region_checks.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::find_pattern_mismatch;
using brisk_test::is_aligned;
using brisk_test::Rng;
using brisk_test::scaled;

namespace {

struct Mode {
  const char *name;
  unsigned flags;
};

// Every way of running a pool: the lock-free shards, with the per-thread
// cache, and the pinned (prefaulted) variants.
const Mode kModes[] = {
    {"lock-free", 0},
    {"thread-cache", BRISK_REGION_THREAD_CACHE},
    {"prefault", BRISK_REGION_PREFAULT},
    {"prefault+cache", BRISK_REGION_PREFAULT | BRISK_REGION_THREAD_CACHE},
};

brisk_region_stats_t stats_of(const brisk_pool_t *pool) {
  brisk_region_stats_t s;
  brisk_pool_stats(pool, &s);
  return s;
}

TEST(Pool, BadArgumentsFailWithEinval) {
  errno = 0;
  EXPECT_EQ(brisk_pool_create(0, 0, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  for (size_t align : {size_t{3}, size_t{24}, size_t{8192}, size_t{1} << 20}) {
    errno = 0;
    EXPECT_EQ(brisk_pool_create(16, align, 0), nullptr) << align;
    EXPECT_EQ(errno, EINVAL) << align;
  }
  errno = 0;
  EXPECT_EQ(brisk_pool_create(SIZE_MAX / 2, 0, 4), nullptr);  // size * capacity overflows
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_pool_create(SIZE_MAX - 2, 0, 1), nullptr);  // the stride overflows
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_pool_create(8, 0, (size_t{1} << 32) + 1), nullptr);  // indexes are 32-bit
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_pool_create(size_t{1} << 40, 0, size_t{1} << 20), nullptr);  // 2^60 bytes
  EXPECT_EQ(errno, ENOMEM);

  brisk_pool_t *pool = brisk_pool_create(16, 0, 0);
  ASSERT_NE(pool, nullptr);
  brisk_pool_free(pool, nullptr);  // does nothing
  brisk_region_stats_t s = stats_of(pool);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 0u);
  brisk_pool_destroy(pool);
  brisk_pool_destroy(nullptr);
}

// A NULL pool (brisk/pool.h): destroy does nothing, alloc fails with
// EINVAL, a free of NULL does nothing, the statistics are zeros (EINVAL),
// and a local cache over it hands out nothing, inline or not. (Each of
// these dereferenced the handle before.)
TEST(Pool, NullPoolFailsWithEinval) {
  brisk_pool_destroy(nullptr);
  errno = 0;
  EXPECT_EQ(brisk_pool_alloc(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  brisk_pool_free(nullptr, nullptr);
  brisk_region_stats_t s;
  std::memset(&s, 0xff, sizeof s);
  errno = 0;
  brisk_pool_stats(nullptr, &s);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(brisk_test::all_counts_zero(s));
  brisk_pool_local_t local;
  brisk_pool_local_init(&local, nullptr, 0);
  for (int i = 0; i < 3; i++) {
    errno = 0;
    EXPECT_EQ(brisk_pool_local_alloc(&local), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  brisk_pool_local_free(&local, nullptr);
  brisk_pool_local_flush(&local);
}

TEST(Pool, EveryObjectIsAligned) {
  const size_t aligns[] = {0, 1, 2, 8, 16, 32, 64, 256, 4096};
  const size_t sizes[] = {1, 7, 8, 24, 100, 1000};
  for (const Mode &mode : kModes) {
    for (size_t align : aligns) {
      for (size_t size : sizes) {
        SCOPED_TRACE(testing::Message() << mode.name << " align " << align << " size " << size);
        brisk_pool_t *pool = brisk_pool_create_ex(size, align, 0, mode.flags);
        ASSERT_NE(pool, nullptr);
        size_t want = align == 0 ? 16 : align;
        std::vector<void *> objects;
        for (int i = 0; i < 40; i++) {
          void *p = brisk_pool_alloc(pool);
          ASSERT_NE(p, nullptr);
          ASSERT_TRUE(is_aligned(p, want)) << p;
          fill_pattern(p, size, block_seed(p, size));
          objects.push_back(p);
        }
        std::vector<void *> sorted = objects;
        std::sort(sorted.begin(), sorted.end());
        for (size_t i = 1; i < sorted.size(); i++) {
          ASSERT_GE(static_cast<char *>(sorted[i]) - static_cast<char *>(sorted[i - 1]),
                    static_cast<ptrdiff_t>(size));
        }
        for (void *p : objects) {
          ASSERT_EQ(find_pattern_mismatch(p, size, block_seed(p, size)), size);
          brisk_pool_free(pool, p);
        }
        // Recycled objects keep their alignment too.
        for (int i = 0; i < 10; i++) {
          void *p = brisk_pool_alloc(pool);
          ASSERT_TRUE(is_aligned(p, want)) << p;
          objects[i] = p;
        }
        for (int i = 0; i < 10; i++) brisk_pool_free(pool, objects[i]);
        brisk_pool_destroy(pool);
      }
    }
  }
}

// With capacity N exactly N allocations succeed, the next fails with
// ENOMEM, and after one free the next succeeds; again after freeing all.
TEST(Pool, BoundedPoolHonoursItsCapacityExactly) {
  for (const Mode &mode : kModes) {
    for (size_t capacity : {size_t{1}, size_t{4}, size_t{100}, size_t{1000}}) {
      SCOPED_TRACE(testing::Message() << mode.name << " capacity " << capacity);
      brisk_pool_t *pool = brisk_pool_create_ex(40, 8, capacity, mode.flags);
      ASSERT_NE(pool, nullptr);
      for (int round = 0; round < 3; round++) {
        std::vector<void *> objects;
        for (size_t i = 0; i < capacity; i++) {
          void *p = brisk_pool_alloc(pool);
          ASSERT_NE(p, nullptr) << "round " << round << " object " << i;
          objects.push_back(p);
        }
        std::set<void *> distinct(objects.begin(), objects.end());
        ASSERT_EQ(distinct.size(), capacity);
        errno = 0;
        ASSERT_EQ(brisk_pool_alloc(pool), nullptr);
        EXPECT_EQ(errno, ENOMEM);
        EXPECT_EQ(stats_of(pool).bytes_in_use, capacity * 40);
        brisk_test_pool_validate(pool);  // carved to the bound, nothing free
        void *back = objects[capacity / 2];
        brisk_pool_free(pool, back);
        void *again = brisk_pool_alloc(pool);
        ASSERT_NE(again, nullptr);
        EXPECT_EQ(again, back);
        errno = 0;
        ASSERT_EQ(brisk_pool_alloc(pool), nullptr);
        EXPECT_EQ(errno, ENOMEM);
        for (void *p : objects) brisk_pool_free(pool, p);
        EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
        brisk_test_pool_validate(pool);
      }
      brisk_pool_destroy(pool);
    }
  }
}

// The batches of a cache in front (the hybrid's lists): a take hands out
// up to `want` distinct objects in one step (freshly carved, or one
// shard's chain), counted as allocations; a give puts them back as one
// chain, counted as frees; the bound holds (a take past it gets what is
// left, then 0 with ENOMEM), and the pool validates throughout.
TEST(Pool, BatchesTakeAndGiveManyObjectsAtOnce) {
  const size_t capacity = 20;
  brisk_pool_t *pool = brisk_pool_create_ex(48, 16, capacity, 0);
  ASSERT_NE(pool, nullptr);
  void *first[8], *second[16], *third[16], *none[4];
  ASSERT_EQ(brisk_test_pool_take_batch(pool, 8, first), 8u);
  for (void *p : first) std::memset(p, 0x3C, 48);
  EXPECT_EQ(stats_of(pool).allocations, 8u);
  EXPECT_EQ(stats_of(pool).bytes_in_use, 8 * 48u);
  brisk_test_pool_validate(pool);
  brisk_test_pool_give_batch(pool, first, 8);
  EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
  brisk_test_pool_validate(pool);
  // The 8 come back as one chain; then the 12 never carved; then none.
  size_t a = brisk_test_pool_take_batch(pool, 16, second);
  size_t b = brisk_test_pool_take_batch(pool, 16, third);
  EXPECT_EQ(a, 8u);
  EXPECT_EQ(b, capacity - 8);
  std::set<void *> distinct(second, second + a);
  distinct.insert(third, third + b);
  EXPECT_EQ(distinct.size(), capacity);
  errno = 0;
  EXPECT_EQ(brisk_test_pool_take_batch(pool, 4, none), 0u);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(stats_of(pool).bytes_in_use, capacity * 48);
  brisk_test_pool_validate(pool);
  brisk_test_pool_give_batch(pool, third, b);
  for (size_t i = 0; i < a; i++) brisk_pool_free(pool, second[i]);
  EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
  EXPECT_EQ(stats_of(pool).allocations, 8 + capacity);
  brisk_test_pool_validate(pool);
  brisk_pool_destroy(pool);
}

TEST(Pool, PinnedBoundedPoolHoldsEverythingFromTheStart) {
  brisk_pool_t *pool = brisk_pool_create_ex(100, 0, 1000, BRISK_REGION_PREFAULT);
  ASSERT_NE(pool, nullptr);
  brisk_region_stats_t before = stats_of(pool);
  EXPECT_GE(before.bytes_held, size_t{1000} * 112);
  std::vector<void *> objects;
  for (int i = 0; i < 1000; i++) objects.push_back(brisk_pool_alloc(pool));
  brisk_region_stats_t after = stats_of(pool);
  EXPECT_EQ(after.system_requests, before.system_requests);  // no commit after create
  EXPECT_EQ(after.bytes_held, before.bytes_held);
  for (void *p : objects) brisk_pool_free(pool, p);
  brisk_pool_destroy(pool);
}

// Capacity 0: objects are carved slab after slab (many commits), never
// overlap, and the statistics follow.
TEST(Pool, UnboundedPoolGrowsOverManySlabs) {
  const size_t size = 1000;
  const size_t count = static_cast<size_t>(scaled(40000, 10000));  // 40 / 10 MB
  for (const Mode &mode : kModes) {
    SCOPED_TRACE(mode.name);
    // The mapping cache emptied: a reservation the previous mode's pool
    // left there would come committed already, its slabs with it.
    brisk_test_os_cache_flush();
    brisk_pool_t *pool = brisk_pool_create_ex(size, 0, 0, mode.flags);
    ASSERT_NE(pool, nullptr);
    size_t held_before = stats_of(pool).bytes_held;
    std::vector<void *> objects;
    objects.reserve(count);
    for (size_t i = 0; i < count; i++) {
      void *p = brisk_pool_alloc(pool);
      ASSERT_NE(p, nullptr) << i;
      fill_pattern(p, size, block_seed(p, size));
      objects.push_back(p);
    }
    brisk_region_stats_t s = stats_of(pool);
    EXPECT_EQ(s.bytes_in_use, count * 1008);  // each takes its stride: 1000 rounded to 16
    EXPECT_EQ(s.bytes_requested, count * size);
    EXPECT_EQ(s.allocations, count);
    EXPECT_GE(s.bytes_held, held_before + count * size);
    EXPECT_LE(s.bytes_held, held_before + count * size * 2 + (size_t{64} << 20));
    EXPECT_GE(s.system_requests, 6u) << "several slabs committed";
    std::vector<void *> sorted = objects;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); i++)
      ASSERT_GE(static_cast<char *>(sorted[i]) - static_cast<char *>(sorted[i - 1]), 1000);
    for (void *p : objects) {
      ASSERT_EQ(find_pattern_mismatch(p, size, block_seed(p, size)), size);
      brisk_pool_free(pool, p);
    }
    s = stats_of(pool);
    EXPECT_EQ(s.bytes_in_use, 0u);
    brisk_test_pool_validate(pool);
    // Everything freed is reused before anything new is carved.
    size_t requests = s.system_requests;
    for (size_t i = 0; i < count; i++) objects[i] = brisk_pool_alloc(pool);
    EXPECT_EQ(stats_of(pool).system_requests, requests);
    for (void *p : objects) brisk_pool_free(pool, p);
    brisk_pool_destroy(pool);
  }
}

// ABA storm: 4 objects, 16 threads on 2 cores, each taking 1 to 3 objects
// at a time (retrying on NULL), checking that nobody else owns them (an
// atomic exchange of an owner mark that must find 0), then giving them
// back. A block handed out twice shows up as a non-zero mark.
void aba_storm(unsigned flags, size_t capacity, int max_burst = 3) {
  constexpr int kThreads = 16;
  const long budget = scaled(3000000, 200000);
  // The marks start at 0 in fresh memory: a pool made from the OS layer's
  // mapping cache would bring in what an earlier test left in its objects.
  brisk_test_os_cache_flush();
  brisk_pool_t *pool = brisk_pool_create_ex(16, 8, capacity, flags);
  ASSERT_NE(pool, nullptr);
  std::atomic<long> taken{0};
  std::atomic<long> clashes{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      const uint32_t me = static_cast<uint32_t>(t + 1);
      Rng rng(static_cast<uint64_t>(t) + 7);
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      void *held[16];
      while (taken.load(std::memory_order_relaxed) < budget) {
        int want = 1 + static_cast<int>(rng.below(static_cast<size_t>(max_burst))), got = 0;
        for (int tries = 0; got < want && tries < 64; tries++) {
          void *p = brisk_pool_alloc(pool);
          if (p == nullptr) {
            if (got > 0) break;
            std::this_thread::yield();
            continue;
          }
          // Bytes 0..3 hold the free list's link: the mark lives at 8.
          auto *mark = reinterpret_cast<std::atomic<uint32_t> *>(static_cast<char *>(p) + 8);
          if (mark->exchange(me) != 0) clashes.fetch_add(1);
          held[got++] = p;
        }
        for (int i = 0; i < got; i++) {
          auto *mark = reinterpret_cast<std::atomic<uint32_t> *>(static_cast<char *>(held[i]) + 8);
          if (mark->exchange(0) != me) clashes.fetch_add(1);
          brisk_pool_free(pool, held[i]);
        }
        taken.fetch_add(got, std::memory_order_relaxed);
      }
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(clashes.load(), 0);
  EXPECT_GE(taken.load(), budget);
  EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
  brisk_test_pool_validate(pool);  // the quiet point: every thread joined
  if (!(flags & BRISK_REGION_THREAD_CACHE)) {
    // Nothing cached anywhere: the whole capacity is back, exactly.
    std::vector<void *> all;
    for (size_t i = 0; i < capacity; i++) {
      void *p = brisk_pool_alloc(pool);
      ASSERT_NE(p, nullptr);
      all.push_back(p);
    }
    EXPECT_EQ(brisk_pool_alloc(pool), nullptr);
    brisk_test_pool_validate(pool);
    for (void *p : all) brisk_pool_free(pool, p);
    brisk_test_pool_validate(pool);
  }
  brisk_pool_destroy(pool);
}

TEST(PoolThreads, AbaStormLockFree) { aba_storm(0, 4); }
TEST(PoolThreads, AbaStormThreadCache) { aba_storm(BRISK_REGION_THREAD_CACHE, 4); }
// Larger magazines (8, batches of 4) and bursts of up to 12 objects, so
// magazines overflow: batch pops and chain pushes race.
TEST(PoolThreads, AbaStormThreadCacheBatches) { aba_storm(BRISK_REGION_THREAD_CACHE, 64, 12); }

// Objects filled with a per-allocation pattern travel between threads
// through shared mailboxes and are checked intact by whoever frees them.
void contents_travel(unsigned flags) {
  constexpr int kThreads = 8;
  constexpr int kMailboxes = 64;
  constexpr size_t kSize = 72;
  const long steps = scaled(100000, 40000);
  brisk_pool_t *pool = brisk_pool_create_ex(kSize, 8, 0, flags);
  ASSERT_NE(pool, nullptr);
  std::atomic<uintptr_t> mailbox[kMailboxes];
  for (auto &m : mailbox) m.store(0);
  std::atomic<long> broken{0};
  std::atomic<size_t> allocations{0};
  auto check_and_free = [&](void *p) {
    uint64_t serial;
    std::memcpy(&serial, p, 8);
    char *rest = static_cast<char *>(p) + 8;
    if (find_pattern_mismatch(rest, kSize - 8, block_seed(p, kSize, serial)) != kSize - 8)
      broken.fetch_add(1);
    brisk_pool_free(pool, p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Rng rng(static_cast<uint64_t>(t) * 31 + 5);
      uint64_t serial = static_cast<uint64_t>(t) << 40;
      std::vector<void *> local;
      for (long i = 0; i < steps; i++) {
        uint64_t r = rng.next();
        if (r % 4 != 0 || local.empty()) {
          void *p = brisk_pool_alloc(pool);
          if (p == nullptr) {
            broken.fetch_add(1);
            continue;
          }
          allocations.fetch_add(1, std::memory_order_relaxed);
          serial++;
          std::memcpy(p, &serial, 8);
          fill_pattern(static_cast<char *>(p) + 8, kSize - 8, block_seed(p, kSize, serial));
          // Through a mailbox to another thread; what was there comes to us.
          uintptr_t old = mailbox[(r >> 8) % kMailboxes].exchange(reinterpret_cast<uintptr_t>(p));
          if (old != 0) local.push_back(reinterpret_cast<void *>(old));
        }
        if (local.size() > 16 || (r >> 20) % 3 == 0) {
          if (!local.empty()) {
            size_t k = (r >> 32) % local.size();
            check_and_free(local[k]);
            local[k] = local.back();
            local.pop_back();
          }
        }
      }
      for (void *p : local) check_and_free(p);
    });
  }
  for (auto &th : threads) th.join();
  for (auto &m : mailbox) {
    uintptr_t p = m.exchange(0);
    if (p != 0) check_and_free(reinterpret_cast<void *>(p));
  }
  EXPECT_EQ(broken.load(), 0);
  brisk_test_pool_validate(pool);
  brisk_region_stats_t s = stats_of(pool);
  EXPECT_EQ(s.bytes_in_use, 0u);
  // Counted in each thread's slot (or the shared one), whoever freed them.
  EXPECT_EQ(s.allocations, allocations.load());
  EXPECT_EQ(s.bytes_requested, allocations.load() * kSize);
  brisk_pool_destroy(pool);
}

TEST(PoolThreads, ContentsSurviveTravelLockFree) { contents_travel(0); }
TEST(PoolThreads, ContentsSurviveTravelThreadCache) { contents_travel(BRISK_REGION_THREAD_CACHE); }

// Many threads fill a bounded pool at once: together they get exactly its
// capacity (no cache), never more.
// A local cache hands out only pool objects, keeps the bound exact for its
// thread (what it holds counts as in use), and gives everything back on
// flush.
TEST(PoolLocal, BoundStaysExactAndFlushGivesEverythingBack) {
  const size_t capacity = 100;
  brisk_pool_t *pool = brisk_pool_create_ex(40, 8, capacity, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  brisk_pool_local_t local;
  brisk_pool_local_init(&local, pool, 8);
  std::vector<void *> held;
  for (;;) {
    void *p = brisk_pool_local_alloc(&local);
    if (p == nullptr) break;
    ASSERT_TRUE(is_aligned(p, 8));
    held.push_back(p);
    ASSERT_LE(held.size(), capacity);
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(held.size(), capacity);
  EXPECT_EQ(std::set<void *>(held.begin(), held.end()).size(), capacity);
  brisk_pool_local_free(&local, held.back());
  held.pop_back();
  void *again = brisk_pool_local_alloc(&local);
  EXPECT_NE(again, nullptr);
  held.push_back(again);
  brisk_pool_local_free(&local, nullptr);
  for (void *p : held) brisk_pool_local_free(&local, p);
  // Sanitizer (debug) builds send every local call through the pool.
  if (!brisk_test::kSanitized)
    EXPECT_GT(stats_of(pool).bytes_in_use, 0u) << "cached objects count as in use";
  const brisk_pool_local_t *locals[] = {&local};
  brisk_test_pool_validate_locals(pool, locals, 1);
  brisk_pool_local_flush(&local);
  EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
  brisk_test_pool_validate_locals(pool, locals, 1);
  // All of them back in the pool: it can hand out its capacity again.
  for (size_t i = 0; i < capacity; i++) ASSERT_NE(brisk_pool_alloc(pool), nullptr) << i;
  brisk_pool_destroy(pool);
}

// Threads with local caches of their own pass objects to each other (so an
// object is freed into another thread's cache) and check their contents.
// Once they are joined, the pool is validated with every local cache still
// full, then flushed (by the main thread now) and validated again.
TEST(PoolLocal, ObjectsTravelBetweenLocalCaches) {
  brisk_pool_t *pool = brisk_pool_create_ex(64, 0, 0, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  const int threads = 8;
  const long ops = scaled(200000, 20000);
  std::vector<std::atomic<void *>> mailbox(64);
  for (auto &m : mailbox) m.store(nullptr);
  std::atomic<long> corrupt{0};
  std::vector<brisk_pool_local_t> locals(threads);
  auto worker = [&](int id) {
    brisk_pool_local_t &local = locals[static_cast<size_t>(id)];
    brisk_pool_local_init(&local, pool, 0);
    Rng rng(500 + id);
    for (long i = 0; i < ops; i++) {
      auto *p = static_cast<uint64_t *>(brisk_pool_local_alloc(&local));
      ASSERT_NE(p, nullptr);
      uint64_t seed = block_seed(p, 64, uint64_t(id) << 40 | uint64_t(i));
      p[0] = seed;
      fill_pattern(p + 1, 56, seed);
      void *old = mailbox[rng.below(mailbox.size())].exchange(p);
      if (old != nullptr) {
        auto *q = static_cast<uint64_t *>(old);
        if (find_pattern_mismatch(q + 1, 56, q[0]) != 56) corrupt++;
        brisk_pool_local_free(&local, old);
      }
    }
  };
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; t++) pool_threads.emplace_back(worker, t);
  for (auto &t : pool_threads) t.join();
  for (auto &m : mailbox) {
    void *p = m.exchange(nullptr);
    if (p != nullptr) brisk_pool_free(pool, p);
  }
  std::vector<const brisk_pool_local_t *> named;
  for (const brisk_pool_local_t &local : locals) named.push_back(&local);
  brisk_test_pool_validate_locals(pool, named.data(), named.size());
  for (brisk_pool_local_t &local : locals) brisk_pool_local_flush(&local);
  brisk_test_pool_validate_locals(pool, named.data(), named.size());
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
  brisk_pool_destroy(pool);
}

// A free object carries the pool's key (brisk/pool.h), and every way out
// clears it: objects handed out and freed again without a write of the
// program's, by every path (the shards, magazines filled from the shards
// or freshly carved, local caches, batches), and those of a pool made
// from a destroyed one's mapping (whose objects hold that pool's keys),
// are never taken for a double free. Objects of 8 bytes, which have no
// room for the key, and of 16, which just hold it.
TEST(Pool, FreesOfObjectsNeverWrittenAreNotDoubleFrees) {
  for (const Mode &mode : kModes) {
    for (size_t size : {size_t{8}, size_t{16}, size_t{24}, size_t{64}}) {
      SCOPED_TRACE(testing::Message() << mode.name << " size " << size);
      for (int generation = 0; generation < 3; generation++) {
        // align 8: an 8-byte object's stride is 8.
        brisk_pool_t *pool = brisk_pool_create_ex(size, 8, 2000, mode.flags);
        ASSERT_NE(pool, nullptr);
        std::vector<void *> objects(300);
        for (int round = 0; round < 3; round++) {
          for (void *&p : objects) ASSERT_NE(p = brisk_pool_alloc(pool), nullptr);
          for (void *p : objects) brisk_pool_free(pool, p);
        }
        brisk_pool_local_t local;
        brisk_pool_local_init(&local, pool, 16);
        for (int round = 0; round < 3; round++) {
          for (void *&p : objects) ASSERT_NE(p = brisk_pool_local_alloc(&local), nullptr);
          for (void *p : objects) brisk_pool_local_free(&local, p);
        }
        for (void *&p : objects) ASSERT_NE(p = brisk_pool_local_alloc(&local), nullptr);
        for (void *p : objects) brisk_pool_free(pool, p);
        brisk_pool_local_flush(&local);
        void *batch[40];
        for (int round = 0; round < 3; round++) {
          size_t n = brisk_test_pool_take_batch(pool, 40, batch);
          ASSERT_GT(n, 0u);
          brisk_test_pool_give_batch(pool, batch, n);
        }
        for (void *&p : objects) ASSERT_NE(p = brisk_pool_alloc(pool), nullptr);
        // Freed by another thread: into its magazine or home shard.
        std::thread([&] {
          for (void *p : objects) brisk_pool_free(pool, p);
        }).join();
        for (void *&p : objects) ASSERT_NE(p = brisk_pool_alloc(pool), nullptr);
        for (void *p : objects) brisk_pool_free(pool, p);
        brisk_test_pool_validate(pool);
        EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
        brisk_pool_destroy(pool);  // the next generation takes its mapping
      }
    }
  }
}

// Threads that exit leave objects in their slots' magazines, where only a
// slot's next holder would use them; a thread that finds the pool
// exhausted takes them back first (thread_slot.h), so the one thread left
// still gets the whole capacity. The threads (more than cores) are alive
// at once, so each caches in a slot of its own.
TEST(PoolThreads, MagazinesOfExitedThreadsComeBackWhenThePoolRunsOut) {
  const size_t capacity = 1000;
  const int kThreads = 40;  // 16 objects cached each after the rounds below
  brisk_pool_t *pool = brisk_pool_create_ex(64, 0, capacity, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  brisk_pool_free(pool, brisk_pool_alloc(pool));  // this thread's slot, first
  std::atomic<int> cached{0};
  std::atomic<long> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      void *objects[10];
      for (void *&p : objects) failed += (p = brisk_pool_alloc(pool)) == nullptr;
      for (void *p : objects) brisk_pool_free(pool, p);  // into the magazine
      cached++;
      while (cached.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto &t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  brisk_test_pool_validate(pool);
  std::vector<void *> all;
  for (void *p; (p = brisk_pool_alloc(pool)) != nullptr;) all.push_back(p);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(all.size(), capacity) << "objects left in exited threads' magazines";
  std::set<void *> distinct(all.begin(), all.end());
  EXPECT_EQ(distinct.size(), all.size());
  for (void *p : all) brisk_pool_free(pool, p);
  brisk_test_pool_validate(pool);
  brisk_pool_destroy(pool);
}

// Creation leaves errno as it found it when it succeeds, in every mode
// (its checks of the system's answers cleared errno before).
TEST(Pool, CreateLeavesErrnoAloneOnSuccess) {
  for (const Mode &mode : kModes) {
    for (size_t capacity : {size_t{0}, size_t{100}}) {
      SCOPED_TRACE(testing::Message() << mode.name << " capacity " << capacity);
      errno = EAGAIN;
      brisk_pool_t *pool = brisk_pool_create_ex(32, 0, capacity, mode.flags);
      ASSERT_NE(pool, nullptr);
      EXPECT_EQ(errno, EAGAIN);
      brisk_pool_destroy(pool);
    }
  }
}

TEST(PoolThreads, ConcurrentFillStopsAtCapacity) {
  constexpr int kThreads = 8;
  const size_t capacity = 5000;
  brisk_pool_t *pool = brisk_pool_create(32, 0, capacity);
  ASSERT_NE(pool, nullptr);
  std::vector<std::vector<void *>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (void *p; (p = brisk_pool_alloc(pool)) != nullptr;) got[t].push_back(p);
    });
  }
  for (auto &th : threads) th.join();
  std::set<void *> all;
  for (auto &v : got) all.insert(v.begin(), v.end());
  size_t total = 0;
  for (auto &v : got) total += v.size();
  EXPECT_EQ(total, capacity);
  EXPECT_EQ(all.size(), capacity);
  EXPECT_EQ(stats_of(pool).allocations, capacity);  // the failures are not counted
  brisk_test_pool_validate(pool);
  for (void *p : all) brisk_pool_free(pool, p);
  brisk_test_pool_validate(pool);
  brisk_pool_destroy(pool);
}

// Every count against an independent one, in every mode, bounded (all
// committed at creation, exhausted on purpose) and unbounded (commits slab
// by slab): system_requests against the OS layer's count of the same
// window (one thread; nothing else in it calls brisk), allocations against
// the test's own count (failures not counted), bytes_requested obj_size per
// allocation, bytes_in_use the stride of each live object.
TEST(Pool, StatsCountWhatWasAskedAndEveryOsCall) {
  const size_t kSize = 40, kStride = 48;  // 40 rounded up to the default 16
  const size_t n = static_cast<size_t>(scaled(30000, 6000));
  for (const Mode &mode : kModes) {
    for (size_t capacity : {size_t{0}, n / 2}) {
      SCOPED_TRACE(std::string(mode.name) + (capacity ? ", bounded" : ", unbounded"));
      std::vector<void *> objects(n, nullptr);
      size_t allocations = 0, live = 0;
      // The OS layer's mapping cache emptied: creation maps afresh.
      brisk_test_os_cache_flush();
      const uint64_t os_before = brisk_test_os_calls();
      brisk_pool_t *pool = brisk_pool_create_ex(kSize, 0, capacity, mode.flags);
      if (pool == nullptr) GTEST_FAIL() << "create";
      for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++) {
          if (objects[i] == nullptr && (objects[i] = brisk_pool_alloc(pool)) != nullptr) {
            allocations++;
            live++;
          }
        }
        for (size_t i = 0; i < n; i += 2) {  // every other one back
          if (objects[i] != nullptr) live--;
          brisk_pool_free(pool, objects[i]);
          objects[i] = nullptr;
        }
      }
      brisk_region_stats_t s = stats_of(pool);
      const uint64_t os_calls = brisk_test_os_calls() - os_before;

      EXPECT_EQ(s.system_requests, os_calls);
      EXPECT_GE(s.system_requests, 3u);  // a reservation, the header, the objects
      EXPECT_EQ(s.allocations, allocations);
      EXPECT_EQ(s.bytes_requested, allocations * kSize);
      EXPECT_EQ(s.bytes_in_use, live * kStride);
      if (capacity != 0) EXPECT_LT(allocations, 2 * n) << "the bound was never met";
      for (void *p : objects) brisk_pool_free(pool, p);
      EXPECT_EQ(stats_of(pool).bytes_in_use, 0u);
      brisk_pool_destroy(pool);
    }
  }
}

// The registry (registry.h) behind brisk_stats_get's regions[]: every live
// arena and pool under its kind, with totals equal to the sum of their own
// statistics; a destroy takes each out again. Compared with what was live
// before, so allocators of other tests (none should be left) do not count.
TEST(Registry, SumsEveryLiveArenaAndPool) {
  brisk_region_kind_stats_t before[BRISK_REGION_KINDS], during[BRISK_REGION_KINDS],
      after[BRISK_REGION_KINDS];
  brisk_test_regions_stats(before);
  brisk_arena_t *arenas[3];
  brisk_pool_t *pools[2];
  for (int i = 0; i < 3; i++) {
    arenas[i] = brisk_arena_create(size_t{64} << 20);
    ASSERT_NE(arenas[i], nullptr);
    for (int k = 0; k <= i * 10; k++)
      ASSERT_NE(brisk_arena_alloc(arenas[i], 100 + 1000 * static_cast<size_t>(k), 0), nullptr);
  }
  for (int i = 0; i < 2; i++) {
    pools[i] = i == 0 ? brisk_pool_create(24, 0, 0)
                      : brisk_pool_create_ex(64, 0, 1000, BRISK_REGION_THREAD_CACHE);
    ASSERT_NE(pools[i], nullptr);
    for (int k = 0; k < 100 + 50 * i; k++) ASSERT_NE(brisk_pool_alloc(pools[i]), nullptr);
  }
  brisk_region_stats_t sum[2] = {};
  auto add = [](brisk_region_stats_t &total, const brisk_region_stats_t &s) {
    total.bytes_requested += s.bytes_requested;
    total.bytes_in_use += s.bytes_in_use;
    total.bytes_held += s.bytes_held;
    total.system_requests += s.system_requests;
    total.allocations += s.allocations;
  };
  for (brisk_arena_t *a : arenas) {
    brisk_region_stats_t s;
    brisk_arena_stats(a, &s);
    add(sum[0], s);
  }
  for (brisk_pool_t *p : pools) add(sum[1], stats_of(p));
  brisk_test_regions_stats(during);

  const brisk_region_kind_t kinds[2] = {BRISK_REGION_ARENA, BRISK_REGION_POOL};
  const size_t counts[2] = {3, 2};
  for (int j = 0; j < 2; j++) {
    SCOPED_TRACE(j == 0 ? "arenas" : "pools");
    const brisk_region_kind_stats_t &b = before[kinds[j]], &d = during[kinds[j]];
    EXPECT_EQ(d.live, b.live + counts[j]);
    EXPECT_EQ(d.created, b.created + counts[j]);
    EXPECT_EQ(d.totals.bytes_requested, b.totals.bytes_requested + sum[j].bytes_requested);
    EXPECT_EQ(d.totals.bytes_in_use, b.totals.bytes_in_use + sum[j].bytes_in_use);
    EXPECT_EQ(d.totals.bytes_held, b.totals.bytes_held + sum[j].bytes_held);
    EXPECT_EQ(d.totals.system_requests, b.totals.system_requests + sum[j].system_requests);
    EXPECT_EQ(d.totals.allocations, b.totals.allocations + sum[j].allocations);
    EXPECT_GT(sum[j].allocations, 0u);
  }
  for (int k = 0; k < BRISK_REGION_KINDS; k++) {
    if (k == BRISK_REGION_ARENA || k == BRISK_REGION_POOL) continue;
    EXPECT_EQ(during[k].live, before[k].live) << "kind " << k;
  }

  for (brisk_arena_t *a : arenas) brisk_arena_destroy(a);
  for (brisk_pool_t *p : pools) brisk_pool_destroy(p);
  brisk_test_regions_stats(after);
  for (int j = 0; j < 2; j++) {
    const brisk_region_kind_stats_t &b = before[kinds[j]], &a = after[kinds[j]];
    EXPECT_EQ(a.live, b.live);
    EXPECT_EQ(a.created, b.created + counts[j]);
    EXPECT_EQ(a.totals.bytes_held, b.totals.bytes_held);
    EXPECT_EQ(a.totals.allocations, b.totals.allocations);
  }
}

// Misuse that must abort with a message. "threadsafe" death tests
// re-execute the binary instead of forking.
class PoolDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(PoolDeathTest, ForeignPointerAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(32, 0, 0);
        escape(brisk_pool_alloc(pool));
        alignas(64) unsigned char local[64] = {};
        escape(local);
        brisk_pool_free(pool, local);
      },
      "brisk: brisk_pool_free\\(0x[0-9a-f]+\\): not an object of this pool");
}

TEST_F(PoolDeathTest, ObjectOfAnotherPoolAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *a = brisk_pool_create(32, 0, 0);
        brisk_pool_t *b = brisk_pool_create(32, 0, 0);
        void *p = brisk_pool_alloc(a);
        escape(brisk_pool_alloc(b));
        brisk_pool_free(b, p);
      },
      "brisk_pool_free\\(0x[0-9a-f]+\\): not an object of this pool");
}

// Inside the reservation but never handed out: in an unbounded pool the
// memory is not even committed, in a bounded one the object would later be
// handed out twice. Both are caught in every build.
TEST_F(PoolDeathTest, ObjectNeverHandedOutAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(64, 0, 0);
        char *p = static_cast<char *>(brisk_pool_alloc(pool));
        brisk_pool_free(pool, p + 64 * 10000000);
      },
      "brisk_pool_free\\(0x[0-9a-f]+\\): not an object of this pool");
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(64, 0, 4);
        char *p = static_cast<char *>(brisk_pool_alloc(pool));
        brisk_pool_free(pool, p + 64 * 3);
      },
      "brisk_pool_free\\(0x[0-9a-f]+\\): not an object of this pool");
}

TEST_F(PoolDeathTest, ForeignPointerThroughLocalCacheAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(64, 0, 0);
        brisk_pool_local_t local;
        brisk_pool_local_init(&local, pool, 0);
        escape(brisk_pool_local_alloc(&local));
        static char not_ours[64];
        brisk_pool_local_free(&local, not_ours);
      },
      "brisk: brisk_pool_local_free\\(0x[0-9a-f]+\\): not an object of this pool");
}

TEST_F(PoolDeathTest, InteriorPointerAborts) {
  for (size_t offset : {size_t{1}, size_t{8}, size_t{24}}) {
    EXPECT_DEATH(
        {
          brisk_pool_t *pool = brisk_pool_create(40, 8, 0);  // stride 40: odd factor 5
          char *p = static_cast<char *>(brisk_pool_alloc(pool));
          escape(brisk_pool_alloc(pool));
          brisk_pool_free(pool, p + offset);
        },
        "brisk_pool_free\\(0x[0-9a-f]+\\): not an object of this pool")
        << offset;
  }
}

// A free of a pointer with a NULL pool, or through a local cache of none.
TEST_F(PoolDeathTest, FreeWithANullPoolAborts) {
  brisk_pool_t *pool = brisk_pool_create(64, 0, 0);
  void *p = brisk_pool_alloc(pool);
  ASSERT_NE(p, nullptr);
  EXPECT_DEATH(brisk_pool_free(nullptr, p),
               "brisk: brisk_pool_free\\(0x[0-9a-f]+\\): the pool is NULL");
  EXPECT_DEATH(
      {
        brisk_pool_local_t local;
        brisk_pool_local_init(&local, nullptr, 0);
        brisk_pool_local_free(&local, p);
      },
      "brisk: brisk_pool_local_free\\(0x[0-9a-f]+\\): the pool is NULL");
  brisk_pool_free(pool, p);
  brisk_pool_destroy(pool);
}

// A second free of an object that waits free aborts in every build: at
// once, after other frees (p, q, p), from another thread, or after the
// object went on from the magazine to a shard (the per-thread cache: the
// frees after it flush the magazine's older half); bounded pools and
// unbounded ones, in every mode. Release builds used to push the object
// twice, and hand it out twice.
TEST_F(PoolDeathTest, DoubleFreeAborts) {
  const char *const kHow[] = {"at once", "after another free", "from another thread",
                              "after 100 other frees"};
  for (const Mode &mode : kModes) {
    for (size_t capacity : {size_t{0}, size_t{1000}}) {
      for (int how = 0; how < 4; how++) {
        EXPECT_DEATH(
            {
              brisk_pool_t *pool = brisk_pool_create_ex(32, 0, capacity, mode.flags);
              std::vector<void *> others(101);
              for (void *&p : others) p = brisk_pool_alloc(pool);
              void *p = others.back();
              others.pop_back();
              brisk_pool_free(pool, p);
              if (how == 1) brisk_pool_free(pool, others[0]);
              if (how == 3)
                for (void *q : others) brisk_pool_free(pool, q);
              if (how == 2) {
                std::thread([&] { brisk_pool_free(pool, p); }).join();
              } else {
                brisk_pool_free(pool, p);
              }
            },
            "brisk: brisk_pool_free\\(0x[0-9a-f]+\\): double free")
            << mode.name << " capacity " << capacity << ", " << kHow[how];
      }
    }
  }
}

// A free of an object the pool never handed out but holds in a thread's
// cache (carved with the one handed out) is one of a free object.
TEST_F(PoolDeathTest, FreeOfAnObjectWaitingInACacheAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create_ex(32, 0, 0, BRISK_REGION_THREAD_CACHE);
        char *p = static_cast<char *>(brisk_pool_alloc(pool));
        brisk_pool_free(pool, p + 32);
      },
      "brisk: brisk_pool_free\\(0x[0-9a-f]+\\): double free");
}

// Through a local cache: the second free into the same local cache, into
// the pool after the local cache, into the local cache after the pool, or
// into another thread's local cache. Each message names the call made.
TEST_F(PoolDeathTest, DoubleFreeThroughLocalCachesAborts) {
  const char *const kLocal = "brisk: brisk_pool_local_free\\(0x[0-9a-f]+\\): double free";
  const char *const kPool = "brisk: brisk_pool_free\\(0x[0-9a-f]+\\): double free";
  struct Case {
    // 0: this thread's local cache, 1: the pool, 2: another thread's local cache
    int first, second;
    const char *message;
  };
  for (const Case &c : {Case{0, 0, kLocal}, Case{0, 1, kPool}, Case{1, 0, kLocal},
                        Case{0, 2, kLocal}}) {
    EXPECT_DEATH(
        {
          brisk_pool_t *pool = brisk_pool_create(64, 0, 0);
          brisk_pool_local_t local;
          brisk_pool_local_init(&local, pool, 0);
          void *p = brisk_pool_local_alloc(&local);
          escape(brisk_pool_local_alloc(&local));
          auto free_by = [&](int who) {
            if (who == 0) {
              brisk_pool_local_free(&local, p);
            } else if (who == 1) {
              brisk_pool_free(pool, p);
            } else {
              // Its first free goes out of line (it has seen no object
              // yet), where the key is tested as inline.
              std::thread([&] {
                brisk_pool_local_t theirs;
                brisk_pool_local_init(&theirs, pool, 0);
                brisk_pool_local_free(&theirs, p);
              }).join();
            }
          };
          free_by(c.first);
          free_by(c.second);
        },
        c.message)
        << c.first << " then " << c.second;
  }
}

// Objects of 8 bytes or less (align 8 or less) have no room for the key:
// a double free is caught by debug builds' live bits only (brisk/pool.h).
TEST_F(PoolDeathTest, DoubleFreeOfAnEightByteObjectAbortsInDebugBuilds) {
#if defined(BRISK_DEBUG) && BRISK_DEBUG
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(8, 8, 0);
        void *p = brisk_pool_alloc(pool);
        escape(brisk_pool_alloc(pool));
        brisk_pool_free(pool, p);
        brisk_pool_free(pool, p);
      },
      "brisk_pool_free\\(0x[0-9a-f]+\\): double free");
#else
  GTEST_SKIP() << "needs BRISK_DEBUG (on in sanitizer builds)";
#endif
}

// A pool made in a destroyed pool's memory (the mapping cache hands the
// reservation to the next pool of its size, at the same address, often
// within the same millisecond) has a key no other pool has had: the old
// pool's free objects left its key in bytes the new pool hands out
// unwritten, and a program may copy such bytes. A 48-byte stride over a
// 32-byte one's objects puts old object 1's key word (offset 40) in new
// object 0's last 16 bytes; copied to the head of new object 1, they made
// its free die of "double free" (the keys were drawn from the address and
// the millisecond alone).
TEST_F(PoolDeathTest, BytesLeftByADestroyedPoolAreNotTakenForItsKey) {
  // Debug builds keep pools out of the mapping cache: nothing to test.
  brisk_pool_t *probe = brisk_pool_create_ex(32, 0, 128, 0);
  ASSERT_NE(probe, nullptr);
  void *first = brisk_pool_alloc(probe);
  brisk_pool_destroy(probe);
  brisk_pool_t *next = brisk_pool_create_ex(48, 0, 85, 0);
  ASSERT_NE(next, nullptr);
  void *first_of_next = brisk_pool_alloc(next);
  brisk_pool_destroy(next);
  if (first != first_of_next) GTEST_SKIP() << "the mapping cache did not hand the pool's memory on";
  EXPECT_EXIT(
      {
        for (int round = 0; round < 20; round++) {
          brisk_pool_t *old_pool = brisk_pool_create_ex(32, 0, 128, 0);
          std::vector<void *> objects(128);
          for (void *&p : objects) p = brisk_pool_alloc(old_pool);
          for (void *p : objects) brisk_pool_free(old_pool, p);
          brisk_pool_destroy(old_pool);
          brisk_pool_t *pool = brisk_pool_create_ex(48, 0, 85, 0);
          char *a = static_cast<char *>(brisk_pool_alloc(pool));
          char *b = static_cast<char *>(brisk_pool_alloc(pool));
          if (a == nullptr || b == nullptr) std::exit(2);
          std::memcpy(b, a + 32, 16);
          brisk_pool_free(pool, b);
          brisk_pool_free(pool, a);
          brisk_pool_destroy(pool);
        }
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

// A second destroy while the mapping cache keeps the reservation, its
// header as the first destroy left it, gave the cache the reservation
// twice: the next two pools of the size were one. (Debug builds, the
// sanitizers', give a pool's memory back to the system at destroy: the
// next test.)
TEST_F(PoolDeathTest, DoubleDestroyAborts) {
  brisk_pool_t *pool = brisk_pool_create(64, 0, 100);
  ASSERT_NE(pool, nullptr);
  brisk_pool_destroy(pool);
  if (!brisk_test_os_cache_holds(pool)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_pool_destroy(pool),
               "brisk: brisk_pool_destroy\\(0x[0-9a-f]+\\): not a live pool \\(destroyed "
               "already\\?\\)");
}

// A second destroy once the reservation went back to the system (the
// mapping cache turned off; a debug build's pool, whatever the cache)
// read the unmapped header and died of SIGSEGV.
TEST_F(PoolDeathTest, DoubleDestroyOfAnUnmappedPoolAborts) {
  EXPECT_DEATH(
      {
        brisk_test_os_cache_configure(0, 0, 0);
        brisk_pool_t *pool = brisk_pool_create(64, 0, 100);
        brisk_pool_destroy(pool);
        brisk_pool_destroy(pool);
      },
      "brisk: brisk_pool_destroy\\(0x[0-9a-f]+\\): not a live pool \\(destroyed "
      "already\\?\\)");
}

// Calls with a pool destroyed while the mapping cache keeps its
// reservation (its header as destroy left it): alloc popped the shards
// (and a THREAD_CACHE pool the calling thread's magazine) of the
// destroyed pool, free pushed onto them, and the local caches refilled
// and flushed through it: memory that the next pool of the size takes
// back. Each aborts now. Each "failed to die" on main.
TEST_F(PoolDeathTest, CallsAfterDestroyAbort) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_pool_t *pool = brisk_pool_create(64, 0, 100);
  brisk_pool_t *cached = brisk_pool_create_ex(64, 0, 100, BRISK_REGION_THREAD_CACHE);
  ASSERT_NE(pool, nullptr);
  ASSERT_NE(cached, nullptr);
  void *p = brisk_pool_alloc(pool);
  void *q = brisk_pool_alloc(pool);
  void *c = brisk_pool_alloc(cached);
  ASSERT_TRUE(p != nullptr && q != nullptr && c != nullptr);
  brisk_pool_free(pool, q);  // on a shard
  brisk_pool_free(cached, c);  // in this thread's magazine (without the debug checks)
  brisk_pool_local_t full, empty;
  brisk_pool_local_init(&full, pool, 0);
  brisk_pool_local_init(&empty, pool, 0);
  brisk_pool_local_free(&full, brisk_pool_local_alloc(&full));  // objects in it
  brisk_pool_destroy(pool);
  brisk_pool_destroy(cached);
  if (!brisk_test_os_cache_holds(pool) || !brisk_test_os_cache_holds(cached))
    GTEST_SKIP() << "the mapping cache did not keep them";
  auto not_live = [](const char *call) {
    return std::string("brisk: ") + call +
           "\\(0x[0-9a-f]+\\): not a live pool \\(destroyed already\\?\\)";
  };
  brisk_region_stats_t s;
  EXPECT_DEATH(brisk_pool_alloc(pool), not_live("brisk_pool_alloc"));
  EXPECT_DEATH(brisk_pool_alloc(cached), not_live("brisk_pool_alloc"));
  EXPECT_DEATH(brisk_pool_free(pool, p), not_live("brisk_pool_free"));
  EXPECT_DEATH(brisk_pool_free(cached, c), not_live("brisk_pool_free"));
  EXPECT_DEATH(brisk_pool_stats(pool, &s), not_live("brisk_pool_stats"));
  EXPECT_DEATH(brisk_pool_local_init(&empty, pool, 0), not_live("brisk_pool_local_init"));
  EXPECT_DEATH(brisk_pool_local_alloc(&empty), not_live("brisk_pool_local_alloc"));
  EXPECT_DEATH(brisk_pool_local_free(&empty, p), not_live("brisk_pool_local_free"));
  EXPECT_DEATH(brisk_pool_local_flush(&full), not_live("brisk_pool_local_flush"));
}

// Another kind's live handle: no live pool's.
TEST_F(PoolDeathTest, DestroyOfAnotherKindsHandleAborts) {
  EXPECT_DEATH(
      {
        brisk_arena_t *arena = brisk_arena_create(1 << 20);
        brisk_pool_destroy(reinterpret_cast<brisk_pool_t *>(arena));
      },
      "brisk: brisk_pool_destroy\\(0x[0-9a-f]+\\): not a live pool");
}

// The validator names a corruption made on purpose behind the API's back,
// as a bug in the program (or in brisk) would leave it. Each pool is
// validated sound first, so the death is the corruption's.
class PoolValidatorDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Two objects a and b freed in that order: onto the calling thread's home
// shard, or into its magazine with the per-thread cache; b first, its link
// leading to a.
struct TwoFree {
  brisk_pool_t *pool;
  void *a, *b;
};

TwoFree two_free(unsigned flags) {
  brisk_pool_t *pool = brisk_pool_create_ex(32, 0, 0, flags);
  void *a = brisk_pool_alloc(pool);
  void *b = brisk_pool_alloc(pool);
  escape(brisk_pool_alloc(pool));
  brisk_pool_free(pool, a);
  brisk_pool_free(pool, b);
  brisk_test_pool_validate(pool);
  return {pool, a, b};
}

// A double free that no check of free sees (not even a debug build's live
// bits): onto a shard, and into a per-thread magazine.
TEST_F(PoolValidatorDeathTest, DoubleFreeBehindTheApiIsNamed) {
  for (unsigned flags : {0u, unsigned{BRISK_REGION_THREAD_CACHE}}) {
    EXPECT_DEATH(
        {
          TwoFree t = two_free(flags);
          brisk_test_pool_push_behind_api(t.pool, t.a);
          brisk_test_pool_validate(t.pool);
        },
        "brisk: brisk_pool_validate\\(0x[0-9a-f]+\\): an object is free twice")
        << flags;
  }
}

// A shard's link (index + 1 in a free object's first 4 bytes) overwritten:
// with an index past the carved objects, and with 0, which cuts the list.
TEST_F(PoolValidatorDeathTest, OverwrittenShardLinkIsNamed) {
  EXPECT_DEATH(
      {
        TwoFree t = two_free(0);
        const uint32_t far = 1u << 30;
        std::memcpy(t.b, &far, sizeof far);
        brisk_test_pool_validate(t.pool);
      },
      "brisk_pool_validate\\(0x[0-9a-f]+\\): a free list leads past the carved objects");
  EXPECT_DEATH(
      {
        TwoFree t = two_free(0);
        const uint32_t end = 0;
        std::memcpy(t.b, &end, sizeof end);
        brisk_test_pool_validate(t.pool);
      },
      "brisk_pool_validate\\(0x[0-9a-f]+\\): free and in-use objects do not add up");
}

// A magazine's link (a pointer in the first 8 bytes) overwritten with a
// pointer inside an object.
TEST_F(PoolValidatorDeathTest, OverwrittenMagazineLinkIsNamed) {
  EXPECT_DEATH(
      {
        TwoFree t = two_free(BRISK_REGION_THREAD_CACHE);
        char *inside = static_cast<char *>(t.a) + 8;
        std::memcpy(t.b, &inside, sizeof inside);
        brisk_test_pool_validate(t.pool);
      },
      "brisk_pool_validate\\(0x[0-9a-f]+\\): a cache holds a pointer that is no object");
}

// A shard holds objects but its bit in the nonempty bitmap is clear.
TEST_F(PoolValidatorDeathTest, ClearedNonemptyBitIsNamed) {
  EXPECT_DEATH(
      {
        TwoFree t = two_free(0);
        brisk_test_pool_clear_nonempty(t.pool);
        brisk_test_pool_validate(t.pool);
      },
      "brisk_pool_validate\\(0x[0-9a-f]+\\): a shard holds objects and its nonempty bit is "
      "clear");
}

// An object in use pushed onto a shard: free and in use at once. Debug
// builds see its live bit first; release builds, the counts.
TEST_F(PoolValidatorDeathTest, ObjectInUsePushedAsFreeIsNamed) {
  EXPECT_DEATH(
      {
        TwoFree t = two_free(0);
        void *p = brisk_pool_alloc(t.pool);
        brisk_test_pool_push_behind_api(t.pool, p);
        brisk_test_pool_validate(t.pool);
      },
#if defined(BRISK_DEBUG) && BRISK_DEBUG
      "brisk_pool_validate\\(0x[0-9a-f]+\\): a free object is marked live"
#else
      "brisk_pool_validate\\(0x[0-9a-f]+\\): free and in-use objects do not add up"
#endif
  );
}

// What a local cache's inline free lets through (brisk/pool.h): an
// interior pointer (a double free it catches: DoubleFreeThroughLocalCachesAborts).
// Debug builds send every local call through the pool, which catches it
// at the free.
TEST_F(PoolValidatorDeathTest, LocalCacheMisuseIsNamed) {
#if defined(BRISK_DEBUG) && BRISK_DEBUG
  GTEST_SKIP() << "debug builds catch these at the free (their local caches hold nothing)";
#else
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(64, 0, 0);
        brisk_pool_local_t local;
        brisk_pool_local_init(&local, pool, 0);
        auto *p = static_cast<char *>(brisk_pool_local_alloc(&local));
        escape(brisk_pool_local_alloc(&local));
        const brisk_pool_local_t *locals[] = {&local};
        brisk_test_pool_validate_locals(pool, locals, 1);
        brisk_pool_local_free(&local, p + 8);
        brisk_test_pool_validate_locals(pool, locals, 1);
      },
      "brisk_pool_validate\\(0x[0-9a-f]+\\): a cache holds a pointer that is no "
      "object \\(interior or foreign\\?\\) \\(local cache 0\\)");
#endif
}

// AddressSanitizer catches a use of an object after brisk_pool_free (all
// but its first 8 bytes, where the free list's link lives).
TEST_F(PoolDeathTest, UseAfterFreeIsCaught) {
#if defined(__SANITIZE_ADDRESS__)
  for (unsigned flags : {0u, unsigned{BRISK_REGION_THREAD_CACHE}}) {
    brisk_pool_t *pool = brisk_pool_create_ex(64, 0, 0, flags);
    auto *p = static_cast<unsigned char *>(brisk_pool_alloc(pool));
    ASSERT_NE(p, nullptr);
    p[10] = 1;  // fine while the object lives
    brisk_pool_free(pool, p);
    EXPECT_DEATH(
        {
          volatile unsigned char *q = p;
          q[10] = 2;
        },
        "use-after-poison")
        << flags;
    // Handed out again, it is usable in full.
    auto *r = static_cast<unsigned char *>(brisk_pool_alloc(pool));
    ASSERT_EQ(r, p);
    r[63] = 3;
    brisk_pool_free(pool, r);
    brisk_pool_destroy(pool);
  }
#else
  GTEST_SKIP() << "needs AddressSanitizer (-DBRISK_SANITIZE=address)";
#endif
}

}  // namespace
