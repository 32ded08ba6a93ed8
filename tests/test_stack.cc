// The frame (stack) allocator: frames restore exactly, BRISK_STACK_SCOPE,
// realloc in place and by copy, alignment and bad input, big blocks, the
// per-thread stacks, seed 002's worst_case() bound, and the sanitizer
// poisoning of popped memory. Runs in the release, ASan and TSan builds.
#include <brisk.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "../src/regions/stack.h"
#include "os_calls.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::pattern_intact;
using brisk_test::scaled;

namespace {

// Sizes that can never be served on x86-64 (47-bit user address space).
const size_t kUnservableSizes[] = {SIZE_MAX, SIZE_MAX / 2 + 1, size_t{1} << 46};

struct Block {
  void *p;
  size_t size;
  uint64_t seed;
};

// Allocates and fills `size` bytes, remembering the block for later checks.
Block make_block(brisk_stack_t *s, size_t size, size_t align, uint64_t serial) {
  void *p = brisk_stack_alloc(s, size, align);
  EXPECT_NE(p, nullptr);
  if (p == nullptr) return {nullptr, 0, 0};
  EXPECT_TRUE(is_aligned(p, align == 0 ? 16 : align)) << p << " align " << align;
  uint64_t seed = block_seed(p, size, serial);
  fill_pattern(p, size, seed);
  return {p, size, seed};
}

// Address space of this process in bytes, from /proc/self/status.
size_t vm_size_bytes() {
  FILE *f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

bool intact(const Block &b) { return b.p == nullptr || pattern_intact(b.p, b.size, b.seed); }

size_t in_use(const brisk_stack_t *s) {
  brisk_region_stats_t st;
  brisk_stack_stats(s, &st);
  return st.bytes_in_use;
}

// A size for allocation k of a level: mostly small, now and then larger
// than a 64 KiB block, so that frames span blocks.
size_t level_size(int level, int k) {
  if ((level * 31 + k) % 23 == 0) return 70000 + 1000 * static_cast<size_t>(k);
  return 1 + static_cast<size_t>((level * 97 + k * 13) % 300);
}

// Pushes a frame, fills blocks, recurses, checks its own blocks survived the
// inner frames, pops, and checks that the first allocation after the pop
// lands where the first allocation after the push did.
void nested_level(brisk_stack_t *s, int level, int max_level, std::vector<Block> *outer,
                  uint64_t *serial) {
  const size_t first_size = 40;
  brisk_stack_push(s);
  size_t used_at_push = in_use(s);
  void *first = brisk_stack_alloc(s, first_size, 16);
  ASSERT_NE(first, nullptr);
  std::vector<Block> mine;
  for (int k = 0; k < 40; k++) {
    size_t align = size_t{1} << (k % 8);
    mine.push_back(make_block(s, level_size(level, k), align, (*serial)++));
  }
  if (level < max_level) {
    for (int child = 0; child < 2; child++) {
      nested_level(s, level + 1, max_level, &mine, serial);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  for (const Block &b : mine) ASSERT_TRUE(intact(b)) << "level " << level;
  for (const Block &b : *outer) ASSERT_TRUE(intact(b)) << "outer of level " << level;
  brisk_stack_pop(s);
  EXPECT_EQ(in_use(s), used_at_push);
  // The pop gave everything back: the same request gets the same address.
  void *again = brisk_stack_alloc(s, first_size, 16);
  EXPECT_EQ(again, first) << "level " << level;
  // It is now the outer frame's: record it there.
  outer->push_back(make_block(s, first_size, 16, (*serial)++));
  escape(again);
}

TEST(BriskStack, CreateAndDestroy) {
  // The OS layer's mapping cache emptied: creation maps afresh.
  brisk_test_os_cache_flush();
  const uint64_t os_before = brisk_test_os_calls();
  brisk_stack_t *s = brisk_stack_create(0);
  brisk_region_stats_t st;
  if (s != nullptr) brisk_stack_stats(s, &st);
  const uint64_t os_calls = brisk_test_os_calls() - os_before;
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(st.bytes_requested, 0u);
  EXPECT_EQ(st.allocations, 0u);
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_GE(st.bytes_held, 64u * 1024 + 4096);
  EXPECT_EQ(st.system_requests, os_calls);  // its page and its first block
  EXPECT_GE(st.system_requests, 2u);
  brisk_stack_destroy(s);
  brisk_stack_destroy(nullptr);

  brisk_stack_t *tiny = brisk_stack_create(1);
  ASSERT_NE(tiny, nullptr);
  for (int i = 0; i < 10000; i++) ASSERT_NE(brisk_stack_alloc(tiny, 100, 0), nullptr);
  brisk_stack_destroy(tiny);

  errno = 0;
  EXPECT_EQ(brisk_stack_create(SIZE_MAX), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST(BriskStack, NestedFramesRestoreExactly) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  uint64_t serial = 1;
  std::vector<Block> base;
  for (int k = 0; k < 10; k++) base.push_back(make_block(s, 24 + k, 8, serial++));
  int rounds = static_cast<int>(scaled(6, 2));
  for (int round = 0; round < rounds; round++) {
    nested_level(s, 0, 5, &base, &serial);
    if (HasFatalFailure()) break;
  }
  for (const Block &b : base) EXPECT_TRUE(intact(b));
  brisk_stack_destroy(s);
}

TEST(BriskStack, PopRestoresTheAllocationPoint) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  void *outer = brisk_stack_alloc(s, 100, 0);
  ASSERT_NE(outer, nullptr);
  for (int i = 0; i < 1000; i++) {
    brisk_stack_push(s);
    void *a = brisk_stack_alloc(s, 33, 0);
    brisk_stack_push(s);
    for (int k = 0; k < 50; k++) ASSERT_NE(brisk_stack_alloc(s, 1000 + k, 0), nullptr);
    brisk_stack_pop(s);
    void *b = brisk_stack_alloc(s, 33, 0);
    brisk_stack_pop(s);
    // After both pops the next allocation takes the first one's place.
    void *c = brisk_stack_alloc(s, 33, 0);
    EXPECT_EQ(c, a);
    EXPECT_NE(b, a);
    brisk_stack_push(s);
    void *d = brisk_stack_alloc(s, 33, 0);
    EXPECT_NE(d, c);
    brisk_stack_pop(s);
    // c stays in the base frame: start the next round from a fresh frame.
    brisk_stack_push(s);
    brisk_stack_pop(s);
    if (HasFailure()) break;
  }
  brisk_stack_destroy(s);
}

// BRISK_STACK_SCOPE pops however the block is left.
int scope_with_early_return(brisk_stack_t *s, int n) {
  BRISK_STACK_SCOPE(s);
  for (int i = 0; i < n; i++) {
    char *p = static_cast<char *>(brisk_stack_alloc(s, 64, 0));
    p[0] = 1;
    if (i == 3) return i;
  }
  return -1;
}

TEST(BriskStack, ScopePopsOnReturnBreakAndGoto) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  void *marker = brisk_stack_alloc(s, 8, 0);
  ASSERT_NE(marker, nullptr);
  size_t before = in_use(s);

  EXPECT_EQ(scope_with_early_return(s, 10), 3);
  EXPECT_EQ(in_use(s), before);

  for (int i = 0; i < 5; i++) {
    BRISK_STACK_SCOPE(s);
    ASSERT_NE(brisk_stack_alloc(s, 100, 0), nullptr);
    if (i == 2) break;
  }
  EXPECT_EQ(in_use(s), before);

  {
    BRISK_STACK_SCOPE(s);
    ASSERT_NE(brisk_stack_alloc(s, 100, 0), nullptr);
    goto out;
  }
out:
  EXPECT_EQ(in_use(s), before);

  {
    BRISK_STACK_SCOPE(s);
    BRISK_STACK_SCOPE(s);  // two scopes in one block pop twice
    ASSERT_NE(brisk_stack_alloc(s, 100, 0), nullptr);
  }
  EXPECT_EQ(in_use(s), before);

  // The scope's argument is evaluated once.
  int evaluations = 0;
  {
    BRISK_STACK_SCOPE((evaluations++, s));
    ASSERT_NE(brisk_stack_alloc(s, 100, 0), nullptr);
  }
  EXPECT_EQ(evaluations, 1);
  EXPECT_EQ(in_use(s), before);

  // Every push was popped: one more pop would have nothing to pop. The
  // next allocation lands right after the marker's frame state.
  brisk_stack_push(s);
  void *a = brisk_stack_alloc(s, 8, 0);
  brisk_stack_pop(s);
  EXPECT_EQ(a, brisk_stack_alloc(s, 8, 0));
  brisk_stack_destroy(s);
}

TEST(BriskStack, ReallocInPlaceForTheLastAllocation) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  brisk_stack_push(s);
  char *p = static_cast<char *>(brisk_stack_alloc(s, 100, 0));
  ASSERT_NE(p, nullptr);
  fill_pattern(p, 100, 7);
  // Grow, grow, shrink: always the same pointer, contents kept.
  char *q = static_cast<char *>(brisk_stack_realloc(s, p, 100, 1000, 0));
  EXPECT_EQ(q, p);
  EXPECT_TRUE(pattern_intact(q, 100, 7));
  std::memset(q + 100, 0x5a, 900);
  q = static_cast<char *>(brisk_stack_realloc(s, q, 1000, 4000, 0));
  EXPECT_EQ(q, p);
  EXPECT_TRUE(pattern_intact(q, 100, 7));
  q = static_cast<char *>(brisk_stack_realloc(s, q, 4000, 50, 0));
  EXPECT_EQ(q, p);
  EXPECT_TRUE(pattern_intact(q, 50, 7));
  // The shrink gave the room back: the next allocation follows at once.
  char *next = static_cast<char *>(brisk_stack_alloc(s, 10, 1));
  EXPECT_EQ(next, p + 50);

  // A dynamic array grown by doubling stays in place while the block has room.
  size_t size = 16;
  char *array = static_cast<char *>(brisk_stack_alloc(s, size, 8));
  fill_pattern(array, size, 11);
  int moves = 0;
  while (size < 32 * 1024) {
    char *grown = static_cast<char *>(brisk_stack_realloc(s, array, size, size * 2, 8));
    ASSERT_NE(grown, nullptr);
    ASSERT_TRUE(pattern_intact(grown, size, 11));
    if (grown != array) moves++;
    array = grown;
    size *= 2;
    fill_pattern(array, size, 11);
  }
  EXPECT_LE(moves, 1);
  brisk_stack_pop(s);
  brisk_stack_destroy(s);
}

TEST(BriskStack, ReallocCopiesOtherwise) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  brisk_stack_push(s);
  char *p = static_cast<char *>(brisk_stack_alloc(s, 100, 0));
  fill_pattern(p, 100, 3);
  char *other = static_cast<char *>(brisk_stack_alloc(s, 10, 0));
  ASSERT_NE(other, nullptr);
  // Not the last allocation: a copy.
  char *q = static_cast<char *>(brisk_stack_realloc(s, p, 100, 300, 0));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  EXPECT_TRUE(pattern_intact(q, 100, 3));
  // Shrinking a block that is not the last one keeps it where it is.
  char *r = static_cast<char *>(brisk_stack_realloc(s, other, 10, 5, 0));
  EXPECT_EQ(r, other);

  // The last allocation, but the block has no room for the new size.
  char *last = static_cast<char *>(brisk_stack_alloc(s, 1000, 0));
  fill_pattern(last, 1000, 5);
  char *big = static_cast<char *>(brisk_stack_realloc(s, last, 1000, 4 * kMiB, 0));
  ASSERT_NE(big, nullptr);
  EXPECT_NE(big, last);
  EXPECT_TRUE(pattern_intact(big, 1000, 5));

  // After a child frame is popped, the parent's last allocation grows in
  // place again.
  char *parent_last = static_cast<char *>(brisk_stack_alloc(s, 64, 0));
  fill_pattern(parent_last, 64, 9);
  brisk_stack_push(s);
  ASSERT_NE(brisk_stack_alloc(s, 32, 0), nullptr);
  brisk_stack_pop(s);
  char *grown = static_cast<char *>(brisk_stack_realloc(s, parent_last, 64, 256, 0));
  EXPECT_EQ(grown, parent_last);
  EXPECT_TRUE(pattern_intact(grown, 64, 9));
  // From a child frame it is not the top frame's last allocation: copied
  // (into the child frame, and the old block is gone).
  brisk_stack_push(s);
  char *copy = static_cast<char *>(brisk_stack_realloc(s, grown, 256, 512, 0));
  EXPECT_NE(copy, grown);
  EXPECT_TRUE(pattern_intact(copy, 64, 9));
  brisk_stack_pop(s);

  // A stricter alignment than the block has: copied to an aligned place.
  char *odd = static_cast<char *>(brisk_stack_alloc(s, 3, 1));
  char *odd2 = static_cast<char *>(brisk_stack_alloc(s, 3, 1));
  std::memcpy(odd2, "ab", 3);
  char *aligned = static_cast<char *>(brisk_stack_realloc(s, odd2, 3, 64, 4096));
  ASSERT_NE(aligned, nullptr);
  EXPECT_TRUE(is_aligned(aligned, 4096));
  EXPECT_STREQ(aligned, "ab");
  escape(odd);

  // NULL allocates.
  void *fresh = brisk_stack_realloc(s, nullptr, 0, 40, 0);
  EXPECT_NE(fresh, nullptr);
  EXPECT_TRUE(is_aligned(fresh, 16));
  brisk_stack_pop(s);
  brisk_stack_destroy(s);
}

// realloc's ownership check lets every live allocation through: in an
// earlier block, in a lower frame, of size 0, ending at the position.
TEST(BriskStack, ReallocAcceptsEveryLiveAllocation) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  char *base = static_cast<char *>(brisk_stack_alloc(s, 100, 0));  // the base frame's
  fill_pattern(base, 100, 1);
  brisk_stack_push(s);
  char *first = static_cast<char *>(brisk_stack_alloc(s, 200, 0));
  fill_pattern(first, 200, 2);
  char *second = static_cast<char *>(brisk_stack_alloc(s, 200, 0));
  fill_pattern(second, 200, 3);
  void *zero = brisk_stack_alloc(s, 0, 0);
  for (int i = 0; i < 6; i++) ASSERT_NE(brisk_stack_alloc(s, 40000, 0), nullptr);  // new blocks
  brisk_stack_push(s);
  char *a = static_cast<char *>(brisk_stack_realloc(s, first, 200, 300, 0));
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(pattern_intact(a, 200, 2));
  char *b = static_cast<char *>(brisk_stack_realloc(s, base, 100, 150, 0));
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(pattern_intact(b, 100, 1));
  EXPECT_NE(brisk_stack_realloc(s, zero, 0, 10, 0), nullptr);
  // A shorter old_size than the allocation's is a smaller copy.
  char *c = static_cast<char *>(brisk_stack_realloc(s, second, 50, 60, 0));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(pattern_intact(c, 50, 3));
  // The last allocation of a lower frame whose child allocated nothing.
  char *last = static_cast<char *>(brisk_stack_alloc(s, 32, 0));
  brisk_stack_push(s);
  EXPECT_NE(brisk_stack_realloc(s, last, 32, 64, 0), nullptr);
  brisk_stack_pop(s);
  brisk_stack_pop(s);
  brisk_stack_pop(s);
  brisk_stack_destroy(s);
}

TEST(BriskStack, AlignmentsAreHonoured) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  brisk_stack_push(s);
  for (int round = 0; round < 50; round++) {
    for (size_t align = 1; align <= 4096; align *= 2) {
      // An odd-sized block first, so that the next one needs padding.
      ASSERT_NE(brisk_stack_alloc(s, 1 + static_cast<size_t>(round), 1), nullptr);
      void *p = brisk_stack_alloc(s, 24, align);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(is_aligned(p, align)) << p << " align " << align;
      std::memset(p, 0xab, 24);
    }
  }
  // Alignments larger than a page, in a fresh block of their own.
  for (size_t align = 8192; align <= 4 * kMiB; align *= 4) {
    void *p = brisk_stack_alloc(s, 100, align);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(is_aligned(p, align));
    std::memset(p, 1, 100);
  }
  // Default alignment is 16.
  ASSERT_NE(brisk_stack_alloc(s, 3, 1), nullptr);
  EXPECT_TRUE(is_aligned(brisk_stack_alloc(s, 8, 0), 16));
  brisk_stack_pop(s);
  brisk_stack_destroy(s);
}

// A NULL stack: realloc is NULL/EINVAL, destroy does nothing, stats are
// zero (alloc, push and pop are inline and not tested for it).
TEST(BriskStack, NullStackIsEinvalOrNothing) {
  errno = 0;
  EXPECT_EQ(brisk_stack_realloc(nullptr, nullptr, 0, 16, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  char local[16];
  errno = 0;
  EXPECT_EQ(brisk_stack_realloc(nullptr, local, 16, 32, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  brisk_stack_destroy(nullptr);
  brisk_region_stats_t st;
  std::memset(&st, 0xff, sizeof st);
  brisk_stack_stats(nullptr, &st);
  EXPECT_TRUE(brisk_test::all_counts_zero(st));
}

TEST(BriskStack, BadAlignmentIsEinval) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  const size_t bad[] = {3, 6, 12, 24, 48, 100, 4095, SIZE_MAX, (size_t{1} << 63) + 1};
  for (size_t align : bad) {
    SCOPED_TRACE(align);
    errno = 0;
    EXPECT_EQ(brisk_stack_alloc(s, 16, align), nullptr);
    EXPECT_EQ(errno, EINVAL);
    void *p = brisk_stack_alloc(s, 16, 0);
    errno = 0;
    EXPECT_EQ(brisk_stack_realloc(s, p, 16, 32, align), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(brisk_stack_realloc(s, nullptr, 0, 32, align), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  brisk_stack_destroy(s);
}

TEST(BriskStack, SizeZeroGivesUniquePointers) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  std::set<void *> seen;
  for (size_t align = 1; align <= 64; align *= 2) {
    for (int i = 0; i < 20; i++) {
      void *p = brisk_stack_alloc(s, 0, align);
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(is_aligned(p, align));
      EXPECT_TRUE(seen.insert(p).second) << "size 0 gave " << p << " twice";
    }
  }
  // And a zero-size block is no one's neighbour: the next one differs.
  void *z = brisk_stack_alloc(s, 0, 1);
  void *n = brisk_stack_alloc(s, 5, 1);
  EXPECT_NE(z, n);
  brisk_stack_destroy(s);
}

TEST(BriskStack, UnservableSizesAreEnomem) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  brisk_stack_push(s);
  void *p = brisk_stack_alloc(s, 64, 0);
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, 64);
  for (size_t size : kUnservableSizes) {
    SCOPED_TRACE(size);
    errno = 0;
    EXPECT_EQ(brisk_stack_alloc(s, size, 0), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_stack_alloc(s, size, 4096), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_stack_realloc(s, p, 64, size, 0), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_TRUE(brisk_test::all_bytes_are(p, 64, 7));
  }
  // Huge alignments cannot be served either.
  errno = 0;
  EXPECT_EQ(brisk_stack_alloc(s, 1, size_t{1} << 62), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  // The stack still works.
  void *q = brisk_stack_alloc(s, 100, 0);
  EXPECT_NE(q, nullptr);
  brisk_stack_pop(s);
  brisk_stack_destroy(s);
}

TEST(BriskStack, BigAllocations) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  const size_t sizes[] = {100 * 1024, kMiB, 3 * kMiB + 5, 16 * kMiB, 64 * kMiB};
  std::vector<Block> blocks;
  uint64_t serial = 1;
  brisk_stack_push(s);
  for (size_t size : sizes) {
    if (brisk_test::kSanitized && size > 16 * kMiB) continue;
    blocks.push_back(make_block(s, size, 64, serial++));
    blocks.push_back(make_block(s, 100, 0, serial++));
  }
  for (const Block &b : blocks) EXPECT_TRUE(intact(b));
  brisk_region_stats_t st;
  brisk_stack_stats(s, &st);
  size_t asked = 0;
  for (const Block &b : blocks) asked += b.size;
  EXPECT_EQ(st.bytes_in_use, asked);
  EXPECT_GE(st.bytes_held, asked);
  brisk_stack_pop(s);
  // Popped big blocks are reused, not mapped again.
  brisk_stack_stats(s, &st);
  size_t maps = st.system_requests;
  brisk_stack_push(s);
  Block again = make_block(s, 3 * kMiB, 64, serial++);
  EXPECT_TRUE(intact(again));
  brisk_stack_pop(s);
  brisk_stack_stats(s, &st);
  EXPECT_EQ(st.system_requests, maps);
  brisk_stack_destroy(s);
}

TEST(BriskStack, DeepFrames) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  const int depth = static_cast<int>(scaled(100000, 20000));
  std::vector<uint32_t *> cells(static_cast<size_t>(depth));
  for (int i = 0; i < depth; i++) {
    brisk_stack_push(s);
    cells[i] = static_cast<uint32_t *>(brisk_stack_alloc(s, sizeof(uint32_t), 4));
    ASSERT_NE(cells[i], nullptr);
    *cells[i] = static_cast<uint32_t>(i) * 2654435761u;
  }
  for (int i = depth - 1; i >= 0; i--) {
    ASSERT_EQ(*cells[i], static_cast<uint32_t>(i) * 2654435761u) << i;
    brisk_stack_pop(s);
  }
  EXPECT_EQ(in_use(s), 0u);
  brisk_stack_destroy(s);
}

TEST(BriskStack, StatsAreSane) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  brisk_region_stats_t st;
  brisk_stack_stats(s, &st);
  const size_t created_requests = st.system_requests;
  ASSERT_NE(brisk_stack_alloc(s, 10, 0), nullptr);
  brisk_stack_push(s);
  ASSERT_NE(brisk_stack_alloc(s, 100, 0), nullptr);
  ASSERT_NE(brisk_stack_alloc(s, 1000, 0), nullptr);
  brisk_stack_stats(s, &st);
  EXPECT_EQ(st.bytes_requested, 1110u);
  EXPECT_EQ(st.allocations, 3u);
  EXPECT_EQ(st.bytes_in_use, 1110u);
  EXPECT_EQ(st.system_requests, created_requests);  // room in the first block
  brisk_stack_push(s);
  ASSERT_NE(brisk_stack_alloc(s, 200 * 1024, 0), nullptr);
  brisk_stack_stats(s, &st);
  EXPECT_EQ(st.bytes_in_use, 1110u + 200 * 1024);
  EXPECT_GE(st.bytes_held, 64u * 1024 + 200 * 1024);
  EXPECT_GT(st.system_requests, created_requests);  // a second block
  brisk_stack_pop(s);
  brisk_stack_stats(s, &st);
  EXPECT_EQ(st.bytes_in_use, 1110u);
  EXPECT_EQ(st.bytes_requested, 1110u + 200 * 1024);
  EXPECT_EQ(st.allocations, 4u);
  brisk_stack_pop(s);
  brisk_stack_stats(s, &st);
  EXPECT_EQ(st.bytes_in_use, 10u);
  EXPECT_EQ(st.bytes_held % 4096, 0u);
  EXPECT_EQ(_brisk_stack_mapped_total(s) + 4096, st.bytes_held);  // the blocks and its page
  brisk_stack_destroy(s);
}

// Every count against an independent one, over a sequence that maps and
// reuses blocks, gives surplus blocks back to the OS, grows the frame
// records past the stack's page, reallocs every way and decays the mean
// (more than 65,535 allocations): system_requests against the OS layer's
// count of the same window (one thread; nothing else in it calls brisk),
// bytes_requested and allocations against the test's own sums (a realloc is
// one allocation of its new size; a failed call counts nothing).
TEST(BriskStack, StatsCountWhatWasAskedAndEveryOsCall) {
  static const size_t kSizes[] = {0, 1, 7, 100, 4000, 70000, 200000};
  static const size_t kAligns[] = {0, 1, 64};
  const size_t spike = 8 * kMiB;
  size_t asked = 0, allocations = 0;
  bool ok = true;
  // The OS layer's mapping cache emptied: creation maps afresh.
  brisk_test_os_cache_flush();
  const uint64_t os_before = brisk_test_os_calls();
  brisk_stack_t *s = brisk_stack_create(0);
  if (s == nullptr) GTEST_FAIL() << "create";
  auto alloc = [&](size_t size, size_t align) {
    void *p = brisk_stack_alloc(s, size, align);
    ok &= p != nullptr;
    asked += size;
    allocations++;
    return p;
  };
  auto realloc = [&](void *p, size_t old_size, size_t new_size) {
    void *q = brisk_stack_realloc(s, p, old_size, new_size, 0);
    ok &= q != nullptr;
    asked += new_size;
    allocations++;
    return q;
  };
  brisk_stack_push(s);
  for (size_t size : kSizes)
    for (size_t align : kAligns) alloc(size, align);
  void *p = alloc(100, 0);
  p = realloc(p, 100, 500);  // in place, growing
  p = realloc(p, 500, 50);   // in place, shrinking
  alloc(10, 0);
  p = realloc(p, 50, 20);    // not the last allocation: shrinks where it is
  p = realloc(p, 20, 5000);  // copied
  realloc(nullptr, 0, 30);   // an allocation
  ok &= brisk_stack_alloc(s, 10, 3) == nullptr;  // EINVAL: not counted
  brisk_stack_pop(s);
  // Deep frames: the records outgrow the stack's page, twice over.
  for (int i = 0; i < 1000; i++) {
    brisk_stack_push(s);
    alloc(8, 0);
  }
  for (int i = 0; i < 1000; i++) brisk_stack_pop(s);
  // The seed's mean decays every 65,535 allocations.
  brisk_stack_push(s);
  for (int i = 0; i < 70000; i++) alloc(8, 1);
  brisk_stack_pop(s);
  // A spike of big blocks, then frames that cross blocks until the kept
  // blocks shrink back and the surplus is given back to the OS.
  brisk_stack_push(s);
  for (size_t got = 0; got < spike; got += kMiB) alloc(kMiB, 0);
  brisk_stack_pop(s);
  for (int i = 0; i < 1200; i++) {
    brisk_stack_push(s);
    alloc(40000, 0);
    alloc(40000, 0);
    brisk_stack_pop(s);
  }
  brisk_region_stats_t st;
  brisk_stack_stats(s, &st);
  const uint64_t os_calls = brisk_test_os_calls() - os_before;

  ASSERT_TRUE(ok);
  EXPECT_EQ(st.system_requests, os_calls);
  EXPECT_LT(st.bytes_held, spike) << "no block went back to the OS: releases untested";
  EXPECT_EQ(st.bytes_requested, asked);
  EXPECT_EQ(st.allocations, allocations);
  EXPECT_EQ(st.bytes_in_use, 0u);
  brisk_stack_destroy(s);
}

// Seed 002's worst_case(): rounds of 20,000 small blocks in a scope, each
// followed by one oversized block in the outer frame. The seed mapped 35 MiB
// of blocks in total before its fix and 7.5 MiB after; brisk must not map
// more. A count, not a time: the same on every machine.
TEST(BriskStack, WorstCaseMapsAtMostSevenAndAHalfMiB) {
  const int depth = 20;
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  {
    BRISK_STACK_SCOPE(s);
    for (int i = 0; i < depth; i++) {
      {
        BRISK_STACK_SCOPE(s);
        for (int k = 0; k < 20000; k++) {
          char *p = static_cast<char *>(brisk_stack_alloc(s, 100, 1));
          ASSERT_NE(p, nullptr);
          p[0] = p[99] = 1;
        }
      }
      size_t big = 80000 + 4096 * static_cast<size_t>(depth);
      char *p = static_cast<char *>(brisk_stack_alloc(s, big, 1));
      ASSERT_NE(p, nullptr);
      p[0] = p[big - 1] = 1;
    }
  }
  size_t total = _brisk_stack_mapped_total(s);
  RecordProperty("worst_case_mapped_bytes", std::to_string(total));
  EXPECT_LE(total, 15 * kMiB / 2) << total / 1024 << " KiB mapped";
  brisk_stack_destroy(s);
}

// After a spike, the free blocks kept shrink back towards what is in use.
TEST(BriskStack, FreeBlocksAreBounded) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  const size_t spike = static_cast<size_t>(scaled(256, 32)) * kMiB;
  brisk_stack_push(s);
  for (size_t got = 0; got < spike; got += kMiB) ASSERT_NE(brisk_stack_alloc(s, kMiB, 0), nullptr);
  brisk_stack_pop(s);
  brisk_region_stats_t st;
  brisk_stack_stats(s, &st);
  EXPECT_GE(st.bytes_held, spike);
  // Many small frames that each cross into a second block.
  for (int i = 0; i < 5000; i++) {
    brisk_stack_push(s);
    ASSERT_NE(brisk_stack_alloc(s, 40000, 0), nullptr);
    ASSERT_NE(brisk_stack_alloc(s, 40000, 0), nullptr);
    brisk_stack_pop(s);
  }
  brisk_stack_stats(s, &st);
  EXPECT_LE(st.bytes_held, 4 * kMiB) << st.bytes_held / kMiB << " MiB still held";
  brisk_stack_destroy(s);
}

// A process-wide snapshot (the registry) reads a stack's and a fifo's
// counters from another thread while their owner works: ThreadSanitizer
// reports nothing (the reads are racy by design, documented at
// brisk_stack_stats), every count read is one the owner wrote (the counts
// of calls never go back, bytes in use never wrap), though the counts of
// one snapshot may be a moment apart.
TEST(BriskStack, SnapshotFromAnotherThreadWhileTheOwnerWorks) {
  std::atomic<bool> done{false};
  int insane = 0;
  std::thread owner([&] {
    brisk_stack_t *s = brisk_stack_create(0);
    brisk_fifo_t *f = brisk_fifo_create(0);
    for (int i = 0; i < static_cast<int>(scaled(20000, 2000)); i++) {
      brisk_stack_push(s);
      for (size_t k = 0; k < 20; k++) escape(brisk_stack_alloc(s, 100 + 997 * k, 0));
      brisk_stack_pop(s);
      brisk_fifo_free(f, brisk_fifo_alloc(f, 100 + static_cast<size_t>(i % 5000)));
    }
    brisk_fifo_destroy(f);
    brisk_stack_destroy(s);
    done.store(true);
  });
  int snapshots = 0;
  brisk_region_kind_stats_t before[BRISK_REGION_KINDS];
  brisk_test_regions_stats(before);
  while (!done.load() || snapshots == 0) {
    brisk_region_kind_stats_t now[BRISK_REGION_KINDS];
    brisk_test_regions_stats(now);
    for (int kind : {BRISK_REGION_STACK, BRISK_REGION_FIFO}) {
      const brisk_region_stats_t &a = before[kind].totals, &b = now[kind].totals;
      if (b.bytes_in_use > (size_t{1} << 40)) insane++;
      // The same allocators live in both snapshots: their counts only grow.
      if (before[kind].created == now[kind].created && before[kind].live == now[kind].live &&
          (b.allocations < a.allocations || b.bytes_requested < a.bytes_requested ||
           b.system_requests < a.system_requests))
        insane++;
    }
    std::memcpy(before, now, sizeof now);
    snapshots++;
  }
  owner.join();
  EXPECT_EQ(insane, 0);
  EXPECT_GT(snapshots, 0);
}

TEST(BriskStack, ThreadStacksAreDistinct) {
  const int threads = 12;
  const int rounds = static_cast<int>(scaled(300, 40));
  std::mutex mutex;
  std::set<brisk_stack_t *> stacks;
  std::atomic<int> arrived{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++) {
    pool.emplace_back([&, t] {
      brisk_stack_t *s = brisk_stack_tls();
      if (s == nullptr || brisk_stack_tls() != s) failures++;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!stacks.insert(s).second) failures++;
      }
      // Hold every thread's stack at once, so that a shared one would show.
      arrived++;
      while (arrived.load() < threads) std::this_thread::yield();
      uint64_t serial = static_cast<uint64_t>(t) << 40;
      for (int r = 0; r < rounds; r++) {
        BRISK_STACK_SCOPE(s);
        std::vector<Block> outer;
        for (int k = 0; k < 20; k++)
          outer.push_back(make_block(s, level_size(t + r, k) % 2000 + 1, 8, serial++));
        for (int inner = 0; inner < 3; inner++) {
          BRISK_STACK_SCOPE(brisk_stack_tls());
          std::vector<Block> mine;
          for (int k = 0; k < 30; k++)
            mine.push_back(make_block(s, level_size(r, k + inner), 16, serial++));
          for (const Block &b : mine)
            if (!intact(b)) failures++;
        }
        for (const Block &b : outer)
          if (!intact(b)) failures++;
      }
    });
  }
  for (auto &th : pool) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(stacks.size(), static_cast<size_t>(threads));
  // The main thread has its own too.
  brisk_stack_t *mine = brisk_stack_tls();
  EXPECT_NE(mine, nullptr);
  EXPECT_EQ(brisk_stack_tls(), mine);
}

// Threads that exit give their stacks back: many short-lived threads do not
// pile up mappings (the destructor runs; each stack is created afresh).
TEST(BriskStack, ThreadStacksAreDestroyedAtExit) {
  const int waves = 50;
  size_t vm_before = vm_size_bytes();
  for (int w = 0; w < waves; w++) {
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; t++) {
      pool.emplace_back([] {
        brisk_stack_t *s = brisk_stack_tls();
        BRISK_STACK_SCOPE(s);
        // Big enough to need a second block, which the destructor unmaps.
        void *p = brisk_stack_alloc(s, 4 * kMiB, 0);
        ASSERT_NE(p, nullptr);
        std::memset(p, 1, 4096);
      });
    }
    for (auto &th : pool) th.join();
  }
  // Each thread mapped a block of 4 MiB or more: 200 of them, had they
  // been kept, would add at least 800 MiB of address space.
  EXPECT_LT(vm_size_bytes(), vm_before + 400 * kMiB);
}

// A thread's default stack used from a pthread key destructor in every
// round of glibc's key destructors, the last one included: the stacks'
// own destructor (its key created before this test's, so it runs first in
// each round) destroys the thread's stack, the next call makes another,
// and the one made in the last round has no round left for its
// destructor. More threads than cores do this; no stack of theirs may
// outlive them: those whose destructor never ran are destroyed by the
// sweep of stacks whose thread died (stack.c), which creating a default
// stack runs whenever their list has doubled since the last sweep, so
// fewer wait for it than the threads that did this, and none after it.
struct LateStackCalls {
  pthread_key_t key;
  std::atomic<long> calls{0};
  std::atomic<long> failed{0};
};
LateStackCalls *late_stack_calls;

void late_stack_round(LateStackCalls *late) {
  brisk_stack_t *s = brisk_stack_tls();
  BRISK_STACK_SCOPE(s);
  void *p = brisk_stack_alloc(s, 1000, 0);
  if (p == nullptr) {
    late->failed++;
    return;
  }
  std::memset(p, 0x5A, 1000);
  late->calls++;
}

void late_stack_destructor(void *value) {
  uintptr_t round = reinterpret_cast<uintptr_t>(value);
  late_stack_round(late_stack_calls);
  if (round < PTHREAD_DESTRUCTOR_ITERATIONS)
    pthread_setspecific(late_stack_calls->key, reinterpret_cast<void *>(round + 1));
}

size_t live_stacks() {
  brisk_region_kind_stats_t kinds[BRISK_REGION_KINDS];
  brisk_test_regions_stats(kinds);
  return kinds[BRISK_REGION_STACK].live;
}

TEST(BriskStackThreads, CallsFromTheLastDestructorRoundLeaveNoStack) {
#if defined(__SANITIZE_THREAD__)
  // As test_hybrid's late-destructor tests: TSan's runtime has let go of
  // the exiting thread by the later rounds and crashes there.
  GTEST_SKIP() << "TSan cannot follow a thread through its late key destructors";
#endif
  LateStackCalls late;
  late_stack_calls = &late;
  // The stacks' key before this test's.
  late_stack_round(&late);
  ASSERT_EQ(pthread_key_create(&late.key, late_stack_destructor), 0);
  size_t live_before = live_stacks();
  const int kThreads = 160;
  const int kBatch = 8;  // alive at once: more than cores
  for (int first = 0; first < kThreads; first += kBatch) {
    std::vector<std::thread> batch;
    for (int t = first; t < first + kBatch; t++)
      batch.emplace_back([&late] {
        late_stack_round(&late);
        pthread_setspecific(late.key, reinterpret_cast<void *>(uintptr_t{1}));
      });
    for (auto &t : batch) t.join();  // after the thread's destructors ran
  }
  EXPECT_EQ(late.failed.load(), 0);
  EXPECT_EQ(late.calls.load(), 1 + long{kThreads} * (1 + PTHREAD_DESTRUCTOR_ITERATIONS));
  // Each thread left one stack made in the last round; the sweeps destroyed
  // all but those made since the last one.
  size_t waiting = live_stacks() - live_before;
  EXPECT_LT(waiting, size_t{kThreads} / 2);
  EXPECT_EQ(_brisk_stack_tls_sweep(), waiting);
  EXPECT_EQ(live_stacks(), live_before);
  pthread_key_delete(late.key);
  late_stack_calls = nullptr;
}

class BriskStackDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(BriskStackDeathTest, PopWithoutPushAborts) {
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_pop(s);
      },
      "brisk: brisk_stack_pop: no frame to pop");
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_push(s);
        brisk_stack_push(s);
        brisk_stack_pop(s);
        brisk_stack_pop(s);
        brisk_stack_pop(s);
      },
      "no frame to pop");
}

// BRISK_STACK_SCOPE's own pop names the scope, the call the program made,
// not brisk_stack_pop, which it did not call there (the scope's push on a
// destroyed stack: CallsAfterDestroyAbort). Named brisk_stack_pop before.
TEST_F(BriskStackDeathTest, ScopesOwnPopNamesTheScope) {
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        {
          BRISK_STACK_SCOPE(s);
          brisk_stack_pop(s);  // the scope's frame, popped by hand
        }
      },
      "brisk: BRISK_STACK_SCOPE: no frame to pop \\(more pops than pushes\\)");
}

// realloc copies old_size bytes from p: a p the stack's live frames do
// not hold, or an old_size past what the stack handed out, is named.
TEST_F(BriskStackDeathTest, ReallocOfAPointerItNeverHandedOutAborts) {
  const char *kNotOurs =
      "brisk: brisk_stack_realloc\\(0x[0-9a-f]+\\): not an allocation of this stack";
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        void *m = brisk_malloc(100);
        brisk_stack_realloc(s, m, 100, 200, 0);
      },
      kNotOurs);
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        alignas(16) char local[64] = {0};
        escape(local);
        brisk_stack_realloc(s, local, 64, 200, 0);
      },
      kNotOurs);
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_t *t = brisk_stack_create(0);
        void *p = brisk_stack_alloc(t, 64, 0);
        brisk_stack_alloc(t, 64, 0);
        brisk_stack_realloc(s, p, 64, 200, 0);
      },
      kNotOurs);
  // The last allocation of another stack, at the same place in its block.
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_t *t = brisk_stack_create(0);
        brisk_stack_alloc(s, 64, 0);
        brisk_stack_realloc(s, brisk_stack_alloc(t, 64, 0), 64, 32, 0);
      },
      kNotOurs);
}

TEST_F(BriskStackDeathTest, ReallocOfAPoppedAllocationAborts) {
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_push(s);
        void *p = brisk_stack_alloc(s, 64, 0);
        brisk_stack_pop(s);
        brisk_stack_realloc(s, p, 64, 200, 0);
      },
      "brisk_stack_realloc\\(0x[0-9a-f]+\\): not an allocation of this stack \\(or popped "
      "already\\)");
  // In a block that the pop made free.
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_push(s);
        void *p = nullptr;
        for (int i = 0; i < 4; i++) p = brisk_stack_alloc(s, 40000, 0);
        brisk_stack_pop(s);
        brisk_stack_realloc(s, p, 40000, 50000, 0);
      },
      "brisk_stack_realloc\\(0x[0-9a-f]+\\): not an allocation of this stack");
}

TEST_F(BriskStackDeathTest, ReallocPastWhatWasHandedOutAborts) {
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        char *p = static_cast<char *>(brisk_stack_alloc(s, 64, 0));
        brisk_stack_alloc(s, 8, 0);
        brisk_stack_realloc(s, p, 1000, 2000, 0);  // old_size past the position
      },
      "brisk: brisk_stack_realloc\\(0x[0-9a-f]+\\): old_size runs past what this stack "
      "handed out");
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        char *p = static_cast<char *>(brisk_stack_alloc(s, 64, 0));
        for (int i = 0; i < 4; i++) brisk_stack_alloc(s, 40000, 0);  // p's block is behind
        brisk_stack_realloc(s, p, 1 << 20, 2 << 20, 0);               // past its block
      },
      "old_size runs past what this stack handed out");
}

// A thread's default stack is destroyed at its exit: destroyed by hand
// too, it would be destroyed twice.
TEST_F(BriskStackDeathTest, DestroyOfAThreadsDefaultStackAborts) {
  EXPECT_DEATH(brisk_stack_destroy(brisk_stack_tls()),
               "brisk: brisk_stack_destroy\\(0x[0-9a-f]+\\): a thread's default stack");
}

// A second destroy while the mapping cache keeps the stack's page, as
// the first destroy left it (its list of blocks too), gave the cache the
// page and every block again: later stacks shared them.
TEST_F(BriskStackDeathTest, DoubleDestroyAborts) {
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(brisk_stack_alloc(s, 100, 0), nullptr);
  brisk_stack_destroy(s);
  if (!brisk_test_os_cache_holds(s)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_stack_destroy(s),
               "brisk: brisk_stack_destroy\\(0x[0-9a-f]+\\): not a live stack \\(destroyed "
               "already\\?\\)");
}

// A second destroy once the stack's page went back to the system (the
// mapping cache turned off) read it unmapped and died of SIGSEGV.
TEST_F(BriskStackDeathTest, DoubleDestroyOfAnUnmappedStackAborts) {
  EXPECT_DEATH(
      {
        brisk_test_os_cache_configure(0, 0, 0);
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_destroy(s);
        brisk_stack_destroy(s);
      },
      "brisk: brisk_stack_destroy\\(0x[0-9a-f]+\\): not a live stack \\(destroyed "
      "already\\?\\)");
}

// The default stack of a thread that exited: its key destructor destroyed
// it (the stack was taken for a live default stack before).
TEST_F(BriskStackDeathTest, DestroyOfAnExitedThreadsDefaultStackAborts) {
  brisk_stack_t *s = nullptr;
  std::thread([&s] { s = brisk_stack_tls(); }).join();
  if (!brisk_test_os_cache_holds(s)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_stack_destroy(s),
               "brisk: brisk_stack_destroy\\(0x[0-9a-f]+\\): not a live stack");
}

// Calls with a stack destroyed while the mapping cache keeps its page (as
// destroy left it) worked on memory that the next stack takes back: the
// inline alloc bumped the destroyed block's position, push wrote records
// into frame records the cache held, pop restored a frame of blocks gone.
// Each aborts now. Each passed on main (no death), but the pushes past the
// records, which gave the cache the old records again: "memory the
// mapping cache holds already (the stack was destroyed?)" on main.
TEST_F(BriskStackDeathTest, CallsAfterDestroyAbort) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_stack_t *s = brisk_stack_create(0);
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 200; i++) brisk_stack_push(s);  // past the records in its page
  char *p = static_cast<char *>(brisk_stack_alloc(s, 100, 0));
  ASSERT_NE(p, nullptr);
  brisk_stack_destroy(s);
  if (!brisk_test_os_cache_holds(s)) GTEST_SKIP() << "the mapping cache did not keep it";
  auto not_live = [](const char *call) {
    return std::string("brisk: ") + call +
           "\\(0x[0-9a-f]+\\): not a live stack \\(destroyed already\\?\\)";
  };
  EXPECT_DEATH(brisk_stack_alloc(s, 64, 0), not_live("brisk_stack_alloc"));
  EXPECT_DEATH(brisk_stack_alloc(s, 0, 0), not_live("brisk_stack_alloc"));
  EXPECT_DEATH(brisk_stack_push(s), not_live("brisk_stack_push"));
  EXPECT_DEATH(
      {
        for (int i = 0; i < 1000; i++) brisk_stack_push(s);
      },
      not_live("brisk_stack_push"));
  EXPECT_DEATH(brisk_stack_pop(s), not_live("brisk_stack_pop"));
  EXPECT_DEATH({ BRISK_STACK_SCOPE(s); }, not_live("BRISK_STACK_SCOPE"));
  EXPECT_DEATH(brisk_stack_realloc(s, p, 100, 200, 0), not_live("brisk_stack_realloc"));
  EXPECT_DEATH(brisk_stack_realloc(s, nullptr, 0, 200, 0), not_live("brisk_stack_realloc"));
  brisk_region_stats_t st;
  EXPECT_DEATH(brisk_stack_stats(s, &st), not_live("brisk_stack_stats"));
}

// The default stack of a thread that exited, which its key destructor
// destroyed: used by another thread, it is a destroyed stack. (On main
// the alloc succeeded.) The thread's own calls after its destructor ran
// get a stack of their own (ThreadStacksAreDestroyedAtExit and the
// late-destructor tests).
TEST_F(BriskStackDeathTest, UseOfAnExitedThreadsDefaultStackAborts) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_stack_t *s = nullptr;
  std::thread([&s] {
    s = brisk_stack_tls();
    brisk_stack_push(s);
    escape(brisk_stack_alloc(s, 100, 0));
  }).join();
  if (!brisk_test_os_cache_holds(s)) GTEST_SKIP() << "the mapping cache did not keep it";
  EXPECT_DEATH(brisk_stack_alloc(s, 100, 0),
               "brisk: brisk_stack_alloc\\(0x[0-9a-f]+\\): not a live stack");
  EXPECT_DEATH(brisk_stack_pop(s), "brisk: brisk_stack_pop\\(0x[0-9a-f]+\\): not a live stack");
}

// Another kind's live handle: no live stack's.
TEST_F(BriskStackDeathTest, DestroyOfAnotherKindsHandleAborts) {
  EXPECT_DEATH(
      {
        brisk_arena_t *arena = brisk_arena_create(kMiB);
        brisk_stack_destroy(reinterpret_cast<brisk_stack_t *>(arena));
      },
      "brisk: brisk_stack_destroy\\(0x[0-9a-f]+\\): not a live stack");
}

TEST_F(BriskStackDeathTest, UseAfterPopIsCaughtByAsan) {
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_push(s);
        volatile char *p = static_cast<volatile char *>(brisk_stack_alloc(s, 64, 0));
        p[0] = 1;
        brisk_stack_pop(s);
        p[10] = 2;
      },
      "use-after-poison");
  // Across blocks too: a frame whose memory spans several blocks.
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        brisk_stack_push(s);
        for (int i = 0; i < 10; i++) brisk_stack_alloc(s, 40000, 0);
        volatile char *p = static_cast<volatile char *>(brisk_stack_alloc(s, 64, 0));
        p[0] = 1;
        brisk_stack_pop(s);
        p[1] = 2;
      },
      "use-after-poison");
  // A realloc that moved leaves the old copy poisoned.
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        volatile char *p = static_cast<volatile char *>(brisk_stack_alloc(s, 64, 0));
        brisk_stack_alloc(s, 8, 0);
        brisk_stack_realloc(s, const_cast<char *>(p), 64, 128, 0);
        p[3] = 2;
      },
      "use-after-poison");
  // A realloc that shrank in place gives its tail back.
  EXPECT_DEATH(
      {
        brisk_stack_t *s = brisk_stack_create(0);
        volatile char *p = static_cast<volatile char *>(brisk_stack_alloc(s, 64, 0));
        brisk_stack_realloc(s, const_cast<char *>(p), 64, 8, 0);
        p[7] = 1;
        p[40] = 2;
      },
      "use-after-poison");
#else
  GTEST_SKIP() << "needs an AddressSanitizer build";
#endif
}

}  // namespace
