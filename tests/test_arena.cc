// The lock-free arena: concurrent allocations never overlap and keep their
// alignment, exhaustion is exact (alone and under a race), bad arguments
// fail with the right errno, a 64 GiB reservation commits only what is
// used, reset keeps or returns committed memory, the statistics count
// what was asked and every OS call (against the OS layer's own count), and
// under ASan a use after reset is caught.
#include <brisk.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "os_calls.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::fill_pattern;
using brisk_test::find_pattern_mismatch;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::scaled;
using brisk_test::Rng;
using brisk_test::StartGate;

namespace {

constexpr int kThreads = 8;  // the test machine has 2 cores: oversubscribe
constexpr size_t kGiB = size_t{1} << 30;

struct Block {
  uintptr_t p;
  size_t size;
  size_t align;
  uint64_t serial;  // owner thread in the top bits, then a counter
};

// Mostly small alignments (0 means 16), one in ten from 32 up to 4096.
size_t random_align(Rng &rng) {
  if (rng.below(10) != 0) {
    static const size_t small[] = {0, 1, 2, 4, 8, 16};
    return small[rng.below(6)];
  }
  return size_t{32} << rng.below(8);
}

// Every block writes a pattern of its own; afterwards the patterns are
// intact, alignments hold, blocks lie inside the arena's range and no two
// overlap (a size-0 block counts as one byte, so it must be unique too).
void check_blocks(std::vector<Block> blocks, size_t reserve) {
  ASSERT_FALSE(blocks.empty());
  for (const Block &b : blocks) {
    void *p = reinterpret_cast<void *>(b.p);
    size_t align = b.align == 0 ? 16 : b.align;
    ASSERT_TRUE(is_aligned(p, align)) << p << " align " << align;
    size_t bad = find_pattern_mismatch(p, b.size, block_seed(p, b.size, b.serial));
    ASSERT_EQ(bad, b.size) << "block " << p << " of " << b.size << " overwritten at " << bad;
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const Block &a, const Block &b) { return a.p < b.p; });
  ASSERT_LE(blocks.back().p + blocks.back().size - blocks.front().p, reserve);
  for (size_t i = 1; i < blocks.size(); i++) {
    size_t prev_len = blocks[i - 1].size == 0 ? 1 : blocks[i - 1].size;
    ASSERT_LE(blocks[i - 1].p + prev_len, blocks[i].p)
        << "blocks " << i - 1 << " and " << i << " overlap";
  }
}

void fill(const Block &b) {
  void *p = reinterpret_cast<void *>(b.p);
  fill_pattern(p, b.size, block_seed(p, b.size, b.serial));
}

brisk_region_stats_t stats_of(const brisk_arena_t *arena) {
  brisk_region_stats_t s;
  brisk_arena_stats(arena, &s);
  return s;
}

// kThreads threads, released at once, each make per_thread allocations of
// size_of(rng) bytes and random_align(rng) alignment through the callable
// that make_alloc(thread) returns, and fill every block with its pattern.
// Returns every block; failures[t] counts thread t's NULLs.
template <typename MakeAlloc, typename SizeOf>
std::vector<Block> allocate_from_threads(long per_thread, uint64_t seed, std::vector<int> &failures,
                                         MakeAlloc make_alloc, SizeOf size_of) {
  std::vector<std::vector<Block>> per(kThreads);
  failures.assign(kThreads, 0);
  StartGate gate(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Rng rng(seed + t);
      auto alloc = make_alloc(t);
      std::vector<Block> &mine = per[t];
      mine.reserve(per_thread);
      gate.arrive_and_wait();
      for (long i = 0; i < per_thread; i++) {
        size_t size = size_of(rng);
        size_t align = random_align(rng);
        void *p = alloc(size, align);
        if (p == nullptr) {
          failures[t]++;
          continue;
        }
        Block b{reinterpret_cast<uintptr_t>(p), size, align, (uint64_t(t) << 40) | uint64_t(i)};
        fill(b);
        mine.push_back(b);
      }
    });
  }
  for (std::thread &th : threads) th.join();
  std::vector<Block> all;
  for (int t = 0; t < kThreads; t++) all.insert(all.end(), per[t].begin(), per[t].end());
  return all;
}

TEST(Arena, ConcurrentAllocationsNeverOverlap) {
  const size_t reserve = 4 * kGiB;
  const long per_thread = scaled(100000, 8000);
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  std::vector<int> failures;
  std::vector<Block> all = allocate_from_threads(
      per_thread, 1000, failures,
      [&](int) { return [&](size_t size, size_t align) { return brisk_arena_alloc(arena, size, align); }; },
      [](Rng &rng) { return rng.below(257); });
  size_t sum = 0;
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(failures[t], 0) << "thread " << t;
  for (const Block &b : all) sum += b.size;
  EXPECT_EQ(all.size(), size_t(kThreads) * per_thread);
  check_blocks(all, reserve);
  brisk_region_stats_t s = stats_of(arena);
  // Counted in each thread's own slot, summed: exact once the threads are done.
  EXPECT_EQ(s.allocations, size_t(kThreads) * per_thread);
  EXPECT_EQ(s.bytes_requested, sum);
  EXPECT_GE(s.bytes_in_use, sum);
  EXPECT_EQ(s.bytes_in_use, brisk_arena_used(arena));
  EXPECT_GE(s.bytes_held, s.bytes_in_use);
  EXPECT_LE(s.bytes_held, s.bytes_in_use + s.bytes_in_use / 2 + 2 * kMiB);
  brisk_arena_destroy(arena);
}

// Cursors (one per thread, its own chunks; small chunks for odd threads, so
// that claims, large requests and tails interleave) alongside direct
// allocations from thread 0: no overlap, every alignment, patterns intact.
TEST(ArenaCursor, ConcurrentCursorsAndDirectAllocationsNeverOverlap) {
  const size_t reserve = 4 * kGiB;
  const long per_thread = scaled(100000, 8000);
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  std::vector<int> failures;
  std::vector<Block> all = allocate_from_threads(
      per_thread, 2000, failures,
      [&](int t) {
        auto cursor = std::make_shared<brisk_arena_cursor_t>();
        brisk_arena_cursor_init(cursor.get(), arena, t % 2 ? 4096 : 0);
        return [arena, cursor, t](size_t size, size_t align) {
          return t == 0 ? brisk_arena_alloc(arena, size, align)
                        : brisk_arena_cursor_alloc(cursor.get(), size, align);
        };
      },
      [](Rng &rng) { return rng.below(20) == 0 ? rng.below(10000) : rng.below(257); });
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(failures[t], 0) << "thread " << t;
  check_blocks(all, reserve);
  brisk_arena_destroy(arena);
}

// A cursor whose chunk predates a reset must not hand out that memory:
// after the reset the arena gives the same addresses to someone else.
TEST(ArenaCursor, NoticesReset) {
  brisk_arena_t *arena = brisk_arena_create(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, arena, 0);
  char *before = static_cast<char *>(brisk_arena_cursor_alloc(&cursor, 64, 0));
  ASSERT_NE(before, nullptr);
  brisk_arena_reset(arena, 1);
  // The arena starts over: its first claims cover the old chunk.
  char *direct = static_cast<char *>(brisk_arena_alloc(arena, 128 << 10, 0));
  ASSERT_NE(direct, nullptr);
  EXPECT_LE(direct, before);
  char *after = static_cast<char *>(brisk_arena_cursor_alloc(&cursor, 64, 0));
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(after >= direct + (128 << 10) || after + 64 <= direct)
      << "cursor reused memory from before the reset";
  brisk_arena_destroy(arena);
}

// brisk/arena.h: "When the arena has no room for a whole chunk, the request
// alone is tried, so a cursor fails only where brisk_arena_alloc would." A
// chunk claim that does not fit must not be made: a failed claim fills the
// arena until reset, and the request (which fits) would then fail too.
TEST(ArenaCursor, NearlyFullArenaServesTheRequestAlone) {
  const size_t reserve = kMiB;
  const size_t chunk = 64 << 10;
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  ASSERT_NE(brisk_arena_alloc(arena, reserve - 4096, 0), nullptr);
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, arena, chunk);
  // 4 KiB left, less than a chunk: blocks come one by one until it is used.
  size_t got = 0;
  for (;;) {
    errno = 0;
    void *p = brisk_arena_cursor_alloc(&cursor, 64, 0);
    if (p == nullptr) break;
    ASSERT_TRUE(is_aligned(p, 16));
    got += 64;
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(got, size_t{4096});
  EXPECT_EQ(brisk_arena_used(arena), reserve);
  // The same with an alignment the chunk would have served.
  brisk_arena_reset(arena, 1);
  ASSERT_NE(brisk_arena_alloc(arena, reserve - 512, 0), nullptr);
  brisk_arena_cursor_init(&cursor, arena, chunk);
  void *p = brisk_arena_cursor_alloc(&cursor, 100, 256);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_aligned(p, 256));
  EXPECT_NE(brisk_arena_alloc(arena, 16, 0), nullptr);
  brisk_arena_destroy(arena);
}

TEST(ArenaCursor, BadInputAndExhaustion) {
  const size_t reserve = 1 * kMiB;
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, arena, 64 << 10);
  errno = 0;
  EXPECT_EQ(brisk_arena_cursor_alloc(&cursor, 8, 3), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_arena_cursor_alloc(&cursor, SIZE_MAX, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(brisk_arena_cursor_alloc(&cursor, SIZE_MAX - 3, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  // With a chunk in hand too: rounding a size near SIZE_MAX must not wrap.
  ASSERT_NE(brisk_arena_cursor_alloc(&cursor, 16, 0), nullptr);
  for (size_t huge : {SIZE_MAX, SIZE_MAX - 5, SIZE_MAX - 14, reserve + 1}) {
    errno = 0;
    EXPECT_EQ(brisk_arena_cursor_alloc(&cursor, huge, 0), nullptr) << huge;
    EXPECT_EQ(errno, ENOMEM);
  }
  void *z1 = brisk_arena_cursor_alloc(&cursor, 0, 0);
  void *z2 = brisk_arena_cursor_alloc(&cursor, 0, 0);
  ASSERT_TRUE(z1 && z2);
  EXPECT_NE(z1, z2);
  // Fill up: every block 16-aligned and inside the arena; the cursor stops
  // short of the reservation by less than one chunk.
  size_t got = 0;
  for (;;) {
    void *p = brisk_arena_cursor_alloc(&cursor, 48, 0);
    if (p == nullptr) break;
    ASSERT_TRUE(is_aligned(p, 16));
    got += 48;
  }
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_GE(got + (64 << 10) + 64, reserve * 48 / 64 - (64 << 10));
  EXPECT_LE(brisk_arena_used(arena), reserve);
  brisk_arena_destroy(arena);
}

TEST(Arena, DefaultAlignmentClaimsSixteenByteSteps) {
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  size_t expected = 0;
  uintptr_t prev = 0;
  for (size_t size : {1, 16, 17, 0, 100, 8, 64}) {
    void *p = brisk_arena_alloc(arena, size, 0);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(is_aligned(p, 16));
    if (prev != 0) EXPECT_GT(reinterpret_cast<uintptr_t>(p), prev);
    prev = reinterpret_cast<uintptr_t>(p);
    expected += (std::max<size_t>(size, 1) + 15) & ~size_t{15};
  }
  EXPECT_EQ(brisk_arena_used(arena), expected);
  brisk_arena_destroy(arena);
}

TEST(Arena, ExhaustionIsExact) {
  const size_t reserve = kMiB;
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  Rng rng(7);
  std::vector<Block> blocks;
  size_t total = 0;
  for (uint64_t serial = 0;; serial++) {
    size_t size = 1 + rng.below(4096);
    size_t before = brisk_arena_used(arena);
    errno = 0;
    void *p = brisk_arena_alloc(arena, size, 16);
    if (p == nullptr) {
      EXPECT_EQ(errno, ENOMEM);
      // It failed only because its claim no longer fitted.
      EXPECT_GT(((size + 15) & ~size_t{15}), reserve - before);
      break;
    }
    Block b{reinterpret_cast<uintptr_t>(p), size, 16, serial};
    fill(b);
    blocks.push_back(b);
    total += size;
  }
  EXPECT_LE(total, reserve);
  EXPECT_GT(total, reserve - 2 * 4096 - 16 * blocks.size());
  check_blocks(blocks, reserve);
  // Once a claim has failed, the arena stays full until reset.
  errno = 0;
  EXPECT_EQ(brisk_arena_alloc(arena, 16, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(brisk_arena_used(arena), reserve);

  // After reset the whole reservation is one block, and not a byte more.
  brisk_arena_reset(arena, 1);
  EXPECT_EQ(brisk_arena_used(arena), 0u);
  void *whole = brisk_arena_alloc(arena, reserve, 16);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole, reinterpret_cast<void *>(blocks.front().p));
  fill_pattern(whole, reserve, 1);
  errno = 0;
  EXPECT_EQ(brisk_arena_alloc(arena, 1, 1), nullptr);
  EXPECT_EQ(errno, ENOMEM);

  // Exactly reserve / 1 KiB blocks of 1 KiB fit, after either kind of reset.
  for (int keep = 0; keep < 2; keep++) {
    brisk_arena_reset(arena, keep);
    size_t count = 0;
    while (brisk_arena_alloc(arena, 1024, 16) != nullptr) count++;
    EXPECT_EQ(count, reserve / 1024) << "keep_committed " << keep;
  }
  brisk_arena_destroy(arena);
}

// Claims are whole 16-byte steps: a reservation that is not a multiple of
// 16 still serves a request of its own size, and not a step more.
TEST(Arena, AReservationOfAnySizeServesARequestOfThatSize) {
  for (size_t reserve : {size_t{1}, size_t{15}, size_t{100}, size_t{4097}}) {
    brisk_arena_t *arena = brisk_arena_create(reserve);
    ASSERT_NE(arena, nullptr) << reserve;
    errno = 0;
    void *p = brisk_arena_alloc(arena, reserve, 0);
    ASSERT_NE(p, nullptr) << reserve << " errno " << errno;
    fill_pattern(p, reserve, 3);
    errno = 0;
    EXPECT_EQ(brisk_arena_alloc(arena, 16, 0), nullptr) << reserve;
    EXPECT_EQ(errno, ENOMEM) << reserve;
    brisk_arena_destroy(arena);
  }
}

TEST(Arena, ExhaustionUnderConcurrency) {
  const size_t reserve = 4 * kMiB;
  const int rounds = int(scaled(20, 4));
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  for (int round = 0; round < rounds; round++) {
    std::vector<std::vector<Block>> per(kThreads);
    std::vector<int> wrong_errno(kThreads, 0);
    StartGate gate(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++) {
      threads.emplace_back([&, t] {
        Rng rng(uint64_t(round) * 100 + t);
        gate.arrive_and_wait();
        // Keep racing past the end for a while after the first failure.
        int failures = 0;
        for (uint64_t i = 0; failures < 64; i++) {
          size_t size = 1 + rng.below(1024);
          size_t align = random_align(rng);
          errno = 0;
          void *p = brisk_arena_alloc(arena, size, align);
          if (p == nullptr) {
            if (errno != ENOMEM) wrong_errno[t]++;
            failures++;
            continue;
          }
          Block b{reinterpret_cast<uintptr_t>(p), size, align, (uint64_t(t) << 40) | i};
          fill(b);
          per[t].push_back(b);
        }
      });
    }
    for (std::thread &th : threads) th.join();
    std::vector<Block> all;
    size_t total = 0;
    for (int t = 0; t < kThreads; t++) {
      EXPECT_EQ(wrong_errno[t], 0);
      for (const Block &b : per[t]) total += b.size;
      all.insert(all.end(), per[t].begin(), per[t].end());
    }
    EXPECT_LE(total, reserve);
    EXPECT_EQ(brisk_arena_used(arena), reserve);
    check_blocks(all, reserve);
    if (HasFatalFailure()) break;
    brisk_arena_reset(arena, round % 2);
  }
  brisk_arena_destroy(arena);
}

TEST(Arena, BadAlignmentIsEinval) {
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  for (size_t align : {size_t{3}, size_t{24}, size_t{48}, size_t{4097}, SIZE_MAX,
                       (size_t{1} << 63) + 1}) {
    errno = 0;
    EXPECT_EQ(brisk_arena_alloc(arena, 8, align), nullptr) << align;
    EXPECT_EQ(errno, EINVAL) << align;
  }
  EXPECT_EQ(brisk_arena_used(arena), 0u);
  for (size_t align = 1; align <= 64 * 1024; align *= 2) {
    void *p = brisk_arena_alloc(arena, 8, align);
    ASSERT_NE(p, nullptr) << align;
    EXPECT_TRUE(is_aligned(p, align)) << align;
  }
  // An alignment as large as the arena can never be served.
  errno = 0;
  EXPECT_EQ(brisk_arena_alloc(arena, 1, size_t{1} << 62), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_arena_destroy(arena);
}

TEST(Arena, LargeAlignments) {
  brisk_arena_t *arena = brisk_arena_create(64 * kMiB);
  ASSERT_NE(arena, nullptr);
  for (size_t align : {size_t{1} << 16, size_t{1} << 20, size_t{1} << 21, size_t{1} << 22}) {
    ASSERT_NE(brisk_arena_alloc(arena, 24, 0), nullptr);  // knock it off alignment
    void *p = brisk_arena_alloc(arena, 100, align);
    ASSERT_NE(p, nullptr) << align;
    EXPECT_TRUE(is_aligned(p, align)) << align;
    fill_pattern(p, 100, align);
  }
  brisk_arena_destroy(arena);
}

TEST(Arena, SizeZeroGivesUniquePointers) {
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  std::vector<uintptr_t> seen;
  for (int i = 0; i < 1000; i++) {
    void *p = brisk_arena_alloc(arena, 0, i % 3 == 0 ? 64 : 0);
    ASSERT_NE(p, nullptr);
    seen.push_back(reinterpret_cast<uintptr_t>(p));
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  brisk_arena_destroy(arena);
}

TEST(Arena, HugeSizesAreEnomemAndLeaveTheArenaUsable) {
  const size_t reserve = 64 * kMiB;
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  for (size_t size : {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX - 15, reserve + 1, size_t{1} << 46}) {
    for (size_t align : {size_t{0}, size_t{1}, size_t{4096}}) {
      errno = 0;
      EXPECT_EQ(brisk_arena_alloc(arena, size, align), nullptr) << size << " " << align;
      EXPECT_EQ(errno, ENOMEM) << size << " " << align;
    }
  }
  // Refused before any claim: nothing was used up.
  EXPECT_EQ(brisk_arena_used(arena), 0u);
  void *p = brisk_arena_alloc(arena, 64, 0);
  ASSERT_NE(p, nullptr);
  fill_pattern(p, 64, 3);
  brisk_arena_destroy(arena);
}

// A large alignment claims align - 16 bytes of padding beside the size:
// a request whose claim is larger than the whole reservation can never be
// served, and is refused before it claims anything (a claim that runs
// past the end fills the arena until reset).
TEST(Arena, ARequestThatCanNeverFitClaimsNothing) {
  const size_t reserve = kMiB;
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  const size_t cases[][2] = {{reserve, 4096}, {reserve - 16, 64}, {reserve / 2, reserve}};
  for (const auto &c : cases) {
    errno = 0;
    EXPECT_EQ(brisk_arena_alloc(arena, c[0], c[1]), nullptr) << c[0] << " " << c[1];
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_EQ(brisk_arena_used(arena), 0u) << c[0] << " " << c[1];
  }
  // The largest that can: size + align - 16 == reserve.
  void *p = brisk_arena_alloc(arena, reserve - 4080, 4096);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(is_aligned(p, 4096));
  brisk_arena_reset(arena, 1);
  // And the arena still serves all of itself.
  void *whole = brisk_arena_alloc(arena, reserve, 0);
  ASSERT_NE(whole, nullptr);
  fill_pattern(whole, reserve, 5);
  brisk_arena_destroy(arena);
}

TEST(Arena, CreateRejectsBadReservations) {
  errno = 0;
  EXPECT_EQ(brisk_arena_create(0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_arena_create(SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  brisk_arena_destroy(nullptr);  // a no-op, like free(NULL)
}

// A NULL arena: alloc, a cursor's alloc: NULL/EINVAL; reset and destroy
// do nothing; used 0, stats all zero (as of an empty arena).
TEST(Arena, NullArenaIsEinvalOrNothing) {
  errno = 0;
  EXPECT_EQ(brisk_arena_alloc(nullptr, 16, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  brisk_arena_reset(nullptr, 0);
  brisk_arena_reset(nullptr, 1);
  brisk_arena_destroy(nullptr);
  EXPECT_EQ(brisk_arena_used(nullptr), 0u);
  brisk_region_stats_t st;
  std::memset(&st, 0xff, sizeof st);
  brisk_arena_stats(nullptr, &st);
  EXPECT_TRUE(brisk_test::all_counts_zero(st));
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, nullptr, 0);
  for (size_t size : {size_t{0}, size_t{16}, size_t{100000}}) {
    errno = 0;
    EXPECT_EQ(brisk_arena_cursor_alloc(&cursor, size, 0), nullptr) << size;
    EXPECT_EQ(errno, EINVAL) << size;
  }
}

TEST(Arena, Reserve64GiBCommitsLazily) {
  const size_t reserve = 64 * kGiB;  // more than the machine's memory
  brisk_arena_t *arena = brisk_arena_create(reserve);
  ASSERT_NE(arena, nullptr);
  brisk_region_stats_t s = stats_of(arena);
  EXPECT_LE(s.bytes_held, size_t{16} << 10);  // the header pages
  EXPECT_EQ(s.bytes_in_use, 0u);
  const size_t block = 64 * 1024;
  for (int i = 0; i < 64; i++) {  // 4 MiB
    void *p = brisk_arena_alloc(arena, block, 0);
    ASSERT_NE(p, nullptr);
    fill_pattern(p, block, uint64_t(i));
  }
  s = stats_of(arena);
  EXPECT_EQ(s.bytes_in_use, 4 * kMiB);
  EXPECT_EQ(s.bytes_requested, 4 * kMiB);
  EXPECT_GE(s.bytes_held, 4 * kMiB);
  EXPECT_LE(s.bytes_held, 8 * kMiB);
  EXPECT_LE(s.system_requests, 10u);  // chunks, not a commit per block
  // A big block commits what it needs and no more than a chunk beyond.
  void *big = brisk_arena_alloc(arena, kGiB / 4, 0);
  ASSERT_NE(big, nullptr);
  s = stats_of(arena);
  EXPECT_LE(s.bytes_held, kGiB / 4 + 8 * kMiB + 64 * kMiB);
  brisk_arena_destroy(arena);
}

TEST(Arena, ResetKeepsOrReturnsCommittedMemory) {
  brisk_arena_t *arena = brisk_arena_create(kGiB);
  ASSERT_NE(arena, nullptr);
  void *first = nullptr;
  for (int i = 0; i < 128; i++) {  // 8 MiB
    void *p = brisk_arena_alloc(arena, 64 * 1024, 0);
    ASSERT_NE(p, nullptr);
    if (i == 0) first = p;
    fill_pattern(p, 64 * 1024, uint64_t(i));
  }
  const size_t header = size_t{16} << 10;  // at most
  brisk_region_stats_t before = stats_of(arena);
  EXPECT_GE(before.bytes_held, 8 * kMiB);

  brisk_arena_reset(arena, 1);
  brisk_region_stats_t kept = stats_of(arena);
  EXPECT_EQ(kept.bytes_in_use, 0u);
  EXPECT_EQ(kept.bytes_held, before.bytes_held);
  EXPECT_EQ(kept.bytes_requested, 8 * kMiB);  // sums over resets
  void *again = brisk_arena_alloc(arena, 100, 0);
  EXPECT_EQ(again, first);  // the same memory, reused
  EXPECT_EQ(stats_of(arena).system_requests, before.system_requests);  // no new commit

  brisk_arena_reset(arena, 0);
  brisk_region_stats_t returned = stats_of(arena);
  EXPECT_EQ(returned.bytes_in_use, 0u);
  EXPECT_LE(returned.bytes_held, header);  // the header pages only
  void *p = brisk_arena_alloc(arena, 1000, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p, first);
  EXPECT_GT(stats_of(arena).bytes_held, header);
  brisk_arena_destroy(arena);
}

// Every count against an independent one, over creation, lazy commits, a
// reset that uncommits and one that keeps, failed calls, aligned blocks and
// a cursor: system_requests against the OS layer's count of the same
// window (one thread; nothing else in it calls brisk), bytes_requested and
// allocations against the test's own sums (sizes as asked: no rounding to
// 16, no alignment padding, failures not counted).
TEST(Arena, StatsCountWhatWasAskedAndEveryOsCall) {
  static const size_t kSizes[] = {0, 1, 15, 17, 100, 4000, 70000, 3 << 20};
  static const size_t kAligns[] = {0, 8, 64, 4096};
  size_t asked = 0, allocations = 0;
  bool all_served = true;
  // The OS layer's mapping cache emptied: creation maps afresh.
  brisk_test_os_cache_flush();
  const uint64_t os_before = brisk_test_os_calls();
  brisk_arena_t *arena = brisk_arena_create(kGiB);
  if (arena == nullptr) GTEST_FAIL() << "create";
  for (int round = 0; round < 3; round++) {
    for (size_t size : kSizes) {
      for (size_t align : kAligns) {
        all_served &= brisk_arena_alloc(arena, size, align) != nullptr;
        asked += size;
        allocations++;
      }
    }
    brisk_arena_reset(arena, round == 1);  // uncommit, keep, uncommit
  }
  all_served &= brisk_arena_alloc(arena, 10, 3) == nullptr;        // EINVAL: not counted
  all_served &= brisk_arena_alloc(arena, 2 * kGiB, 0) == nullptr;  // ENOMEM: not counted
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, arena, 64 << 10);
  for (int i = 0; i < 100; i++) all_served &= brisk_arena_cursor_alloc(&cursor, 100, 0) != nullptr;
  asked += 64 << 10;  // the cursor asks for one chunk; its blocks are its own
  allocations++;
  brisk_region_stats_t s = stats_of(arena);
  const uint64_t os_calls = brisk_test_os_calls() - os_before;

  ASSERT_TRUE(all_served);
  EXPECT_EQ(s.system_requests, os_calls);
  // At least: reserve and commit the header; commit in rounds 0 and 1 and
  // for the cursor, each after an uncommit of two calls.
  EXPECT_GE(s.system_requests, 2u + 3 * (1u + 2u));
  EXPECT_EQ(s.bytes_requested, asked);
  EXPECT_EQ(s.allocations, allocations);
  EXPECT_EQ(s.bytes_in_use, brisk_arena_used(arena));
  brisk_arena_destroy(arena);
}

// "threadsafe" death tests re-execute the binary instead of forking.
class ArenaDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A second destroy while the mapping cache keeps the reservation, its
// header as the first destroy left it, gave the cache the reservation
// twice: the next two arenas of the size were one.
TEST_F(ArenaDeathTest, DoubleDestroyAborts) {
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  brisk_arena_destroy(arena);
  if (!brisk_test_os_cache_holds(arena)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_arena_destroy(arena),
               "brisk: brisk_arena_destroy\\(0x[0-9a-f]+\\): not a live arena \\(destroyed "
               "already\\?\\)");
}

// A second destroy once the reservation went back to the system (the
// mapping cache turned off) read the unmapped header and died of SIGSEGV.
TEST_F(ArenaDeathTest, DoubleDestroyOfAnUnmappedArenaAborts) {
  EXPECT_DEATH(
      {
        brisk_test_os_cache_configure(0, 0, 0);
        brisk_arena_t *arena = brisk_arena_create(kMiB);
        brisk_arena_destroy(arena);
        brisk_arena_destroy(arena);
      },
      "brisk: brisk_arena_destroy\\(0x[0-9a-f]+\\): not a live arena \\(destroyed "
      "already\\?\\)");
}

// Calls with an arena destroyed while the mapping cache keeps its
// reservation (as the first destroy left it) worked on memory that the
// next arena of the size takes back: two arenas handed out the same
// bytes. Each aborts now, a cursor's first allocation after the destroy
// too (inline, within the chunk it claimed before). Each of them passed
// on main (no death).
TEST_F(ArenaDeathTest, CallsAfterDestroyAbort) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  brisk_arena_cursor_t cursor;
  brisk_arena_cursor_init(&cursor, arena, 0);
  ASSERT_NE(brisk_arena_cursor_alloc(&cursor, 64, 0), nullptr);  // a chunk with room left
  ASSERT_NE(brisk_arena_alloc(arena, 64, 0), nullptr);
  brisk_arena_destroy(arena);
  if (!brisk_test_os_cache_holds(arena)) GTEST_SKIP() << "the mapping cache did not keep it";
  auto not_live = [](const char *call) {
    return std::string("brisk: ") + call +
           "\\(0x[0-9a-f]+\\): not a live arena \\(destroyed already\\?\\)";
  };
  EXPECT_DEATH(brisk_arena_alloc(arena, 64, 0), not_live("brisk_arena_alloc"));
  EXPECT_DEATH(brisk_arena_alloc(arena, 0, 0), not_live("brisk_arena_alloc"));
  EXPECT_DEATH(brisk_arena_alloc(arena, 64, 4096), not_live("brisk_arena_alloc"));
  EXPECT_DEATH(brisk_arena_alloc(arena, 64, 3), not_live("brisk_arena_alloc"));
  EXPECT_DEATH(brisk_arena_cursor_alloc(&cursor, 64, 0), not_live("brisk_arena_cursor_alloc"));
  EXPECT_DEATH(brisk_arena_cursor_alloc(&cursor, 0, 0), not_live("brisk_arena_cursor_alloc"));
  EXPECT_DEATH(brisk_arena_cursor_init(&cursor, arena, 0), not_live("brisk_arena_cursor_init"));
  EXPECT_DEATH(brisk_arena_reset(arena, 1), not_live("brisk_arena_reset"));
  EXPECT_DEATH(brisk_arena_used(arena), not_live("brisk_arena_used"));
  brisk_region_stats_t s;
  EXPECT_DEATH(brisk_arena_stats(arena, &s), not_live("brisk_arena_stats"));
}

// A new arena of the same size takes a destroyed one's reservation from
// the mapping cache, at the same address. A cursor made on the destroyed
// arena went on bumping inside the chunk it had claimed (inline: the new
// arena's reset count matched its own), memory the new arena hands out
// again: two owners of the same bytes. Its first allocation after the
// destroy aborts now, the inline ones within its old chunk too, while the
// new arena's own cursors work, across a reset as well. On main both
// allocations below returned blocks (no death).
TEST_F(ArenaDeathTest, CursorOfADestroyedArenaAbortsOnTheArenaInItsPlace) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  brisk_arena_cursor_t stale;
  brisk_arena_cursor_init(&stale, arena, 0);
  ASSERT_NE(brisk_arena_cursor_alloc(&stale, 64, 0), nullptr);  // a chunk with room left
  brisk_arena_destroy(arena);
  brisk_arena_t *next = brisk_arena_create(kMiB);
  ASSERT_NE(next, nullptr);
  if (next != arena) {
    brisk_arena_destroy(next);
    GTEST_SKIP() << "the new arena did not take the destroyed one's reservation";
  }
  brisk_arena_cursor_t own;
  brisk_arena_cursor_init(&own, next, 0);
  EXPECT_NE(brisk_arena_cursor_alloc(&own, 64, 0), nullptr);
  brisk_arena_reset(next, 1);
  EXPECT_NE(brisk_arena_cursor_alloc(&own, 64, 0), nullptr);
  const std::string not_live =
      "brisk: brisk_arena_cursor_alloc\\(0x[0-9a-f]+\\): not a live arena \\(destroyed "
      "already\\?\\)";
  EXPECT_DEATH(brisk_arena_cursor_alloc(&stale, 64, 0), not_live);
  EXPECT_DEATH(brisk_arena_cursor_alloc(&stale, 0, 0), not_live);
  brisk_arena_destroy(next);
}

// Another kind's live handle: no live arena's.
TEST_F(ArenaDeathTest, DestroyOfAnotherKindsHandleAborts) {
  EXPECT_DEATH(
      {
        brisk_stack_t *stack = brisk_stack_create(0);
        brisk_arena_destroy(reinterpret_cast<brisk_arena_t *>(stack));
      },
      "brisk: brisk_arena_destroy\\(0x[0-9a-f]+\\): not a live arena");
}

TEST_F(ArenaDeathTest, UseAfterResetIsCaught) {
#if defined(__SANITIZE_ADDRESS__)
  brisk_arena_t *arena = brisk_arena_create(kMiB);
  ASSERT_NE(arena, nullptr);
  char *p = static_cast<char *>(brisk_arena_alloc(arena, 64, 0));
  ASSERT_NE(p, nullptr);
  p[0] = 1;  // fine while the block lives
  brisk_arena_reset(arena, 1);
  EXPECT_DEATH(
      {
        volatile char *q = p;
        q[10] = 2;
      },
      "use-after-poison");
  // A block handed out again is usable.
  char *r = static_cast<char *>(brisk_arena_alloc(arena, 64, 0));
  ASSERT_EQ(r, p);
  r[10] = 3;
  brisk_arena_destroy(arena);
#else
  GTEST_SKIP() << "needs AddressSanitizer (-DBRISK_SANITIZE=address)";
#endif
}

}  // namespace
