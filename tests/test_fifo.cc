// The FIFO allocator (brisk_fifo_*): zeroed and aligned blocks, the seed's
// page policy seen through the statistics and through where blocks land,
// realloc in place, big blocks, bad input, the deferred destroy, misuse
// that must abort, a use after free that ASan must catch, statistics
// that count what was asked and every OS call (against the OS layer's own
// count), and the validator (regions/fifo.h): run through the stress and
// policy tests, and shown to name each corruption made on purpose.
#include <brisk.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "os_calls.h"
#include "region_checks.h"
#include "test_util.h"

using brisk_test::all_bytes_are;
using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::is_aligned;
using brisk_test::kMiB;
using brisk_test::pattern_intact;
using brisk_test::scaled;

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kDefaultPage = 64 * kKiB;
// What a page keeps for itself before its first block (its header, which
// starts up to 960 bytes into the mapping), and a block's header:
// implementation details the placement tests below lean on.
constexpr size_t kPageHeader = 40;
constexpr size_t kMaxColor = 960;
constexpr size_t kBlockHeader = 8;

// The bytes a block of `size` takes in its page.
constexpr size_t span_of(size_t size) { return (size + kBlockHeader + 15) & ~size_t{15}; }

brisk_region_stats_t stats_of(const brisk_fifo_t *fifo) {
  brisk_region_stats_t s;
  brisk_fifo_stats(fifo, &s);
  return s;
}

// bytes_held counts the fifo's control page too; the policy tests count pages.
constexpr size_t kControlPage = 4096;
size_t pages_held(const brisk_fifo_t *fifo) { return stats_of(fifo).bytes_held - kControlPage; }

// True while the memory at p is mapped (mincore fails with ENOMEM otherwise).
bool is_mapped(const void *p) {
  unsigned char vec[1];
  void *page = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095});
  return mincore(page, 4096, vec) == 0;
}

// True when the fifo let the memory at p go: unmapped, or kept by the OS
// layer's mapping cache (for the next fifo), which holds no fifo's pages.
bool is_released(const void *p) { return !is_mapped(p) || brisk_test_os_cache_holds(p); }

// Mapped, and not in the OS layer's cache: the fifo holds it.
bool is_held(const void *p) { return is_mapped(p) && !brisk_test_os_cache_holds(p); }

struct FifoDeleter {
  void operator()(brisk_fifo_t *f) const { brisk_fifo_destroy(f); }
};
using FifoPtr = std::unique_ptr<brisk_fifo_t, FifoDeleter>;

FifoPtr make_fifo(size_t page_size = 0) {
  brisk_fifo_t *f = brisk_fifo_create(page_size);
  EXPECT_NE(f, nullptr);
  return FifoPtr(f);
}

TEST(Fifo, CreateMapsOnePage) {
  // The OS layer's mapping cache emptied: creation maps afresh.
  brisk_test_os_cache_flush();
  const uint64_t os_before = brisk_test_os_calls();
  brisk_fifo_t *created = brisk_fifo_create(0);
  brisk_region_stats_t s;
  if (created != nullptr) brisk_fifo_stats(created, &s);
  const uint64_t os_calls = brisk_test_os_calls() - os_before;
  FifoPtr fifo(created);
  ASSERT_NE(created, nullptr);
  EXPECT_EQ(s.bytes_requested, 0u);
  EXPECT_EQ(s.allocations, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_held, kDefaultPage + kControlPage);
  EXPECT_EQ(s.system_requests, os_calls);  // the control page and one page
  EXPECT_GE(s.system_requests, 2u);
}

TEST(Fifo, PageSizeIsRoundedToOsPages) {
  FifoPtr fifo = make_fifo(5000);
  EXPECT_EQ(pages_held(fifo.get()), 8 * kKiB);
}

TEST(Fifo, StatsCountRequestsAndLiveSpans) {
  FifoPtr fifo = make_fifo();
  void *a = brisk_fifo_alloc(fifo.get(), 10);
  void *b = brisk_fifo_alloc(fifo.get(), 100);
  brisk_region_stats_t s = stats_of(fifo.get());
  EXPECT_EQ(s.bytes_requested, 110u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.bytes_in_use, span_of(10) + span_of(100));
  brisk_fifo_free(fifo.get(), a);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, span_of(100));
  brisk_fifo_free(fifo.get(), b);
  s = stats_of(fifo.get());
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_requested, 110u);
  EXPECT_EQ(s.allocations, 2u);
}

// The library's exported brisk_fifo_alloc and brisk_fifo_free (what a
// function pointer or another language's bindings reach) share the fifo
// with <brisk/fifo.h>'s inline ones: either frees what the other handed
// out, blocks land where the other's would, and the counts stay exact,
// across pages and for a big block.
TEST(Fifo, ExportedFunctionsShareTheFifoWithTheInlineOnes) {
  FifoPtr fifo = make_fifo();
  brisk_fifo_t *f = fifo.get();
  auto *a = static_cast<unsigned char *>(brisk_test_fifo_alloc_exported(f, 10));
  auto *b = static_cast<unsigned char *>(brisk_fifo_alloc(f, 100));
  auto *c = static_cast<unsigned char *>(brisk_test_fifo_alloc_exported(f, 30));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(b, a + span_of(10));
  EXPECT_EQ(c, b + span_of(100));
  EXPECT_TRUE(all_bytes_are(a, 10, 0));
  EXPECT_TRUE(all_bytes_are(c, 30, 0));
  brisk_region_stats_t s = stats_of(f);
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.bytes_requested, 140u);
  EXPECT_EQ(s.bytes_in_use, span_of(10) + span_of(100) + span_of(30));
  brisk_fifo_free(f, a);
  brisk_test_fifo_free_exported(f, b);
  brisk_test_fifo_free_exported(f, nullptr);
  EXPECT_EQ(stats_of(f).bytes_in_use, span_of(30));
  brisk_test_fifo_free_exported(f, c);
  EXPECT_EQ(stats_of(f).bytes_in_use, 0u);

  // Four pages' worth through the exported functions alone, a big block
  // among them, freed in order: the page policy runs behind them too.
  std::vector<void *> blocks;
  for (int i = 0; i < 1200; i++) {
    size_t size = i == 600 ? 3 * kDefaultPage : 200;
    void *p = brisk_test_fifo_alloc_exported(f, size);
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, size);
    blocks.push_back(p);
  }
  s = stats_of(f);
  EXPECT_EQ(s.allocations, 1203u);
  EXPECT_EQ(s.bytes_requested, 140u + 1199 * 200 + 3 * kDefaultPage);
  brisk_test_fifo_validate(f);
  for (void *p : blocks) brisk_test_fifo_free_exported(f, p);
  EXPECT_EQ(stats_of(f).bytes_in_use, 0u);
  brisk_test_fifo_validate(f);
}

// A block that starts a 4 KiB page: the exported free sends it out of line
// (its header lies on the page before), where it is freed all the same.
TEST(Fifo, ExportedFreeOfABlockThatStartsAPage) {
  FifoPtr fifo = make_fifo();
  brisk_fifo_t *f = fifo.get();
  std::vector<void *> before;
  void *p = nullptr;
  for (int i = 0; i < 1000 && p == nullptr; i++) {
    void *q = brisk_fifo_alloc(f, 8);  // spans of 16: one starts each 4 KiB
    ASSERT_NE(q, nullptr);
    if ((reinterpret_cast<uintptr_t>(q) & 4095) == 0)
      p = q;
    else
      before.push_back(q);
  }
  ASSERT_NE(p, nullptr) << "no block started a 4 KiB page";
  brisk_test_fifo_free_exported(f, p);
  EXPECT_EQ(stats_of(f).bytes_in_use, before.size() * span_of(8));
  brisk_test_fifo_validate(f);
  for (void *q : before) brisk_test_fifo_free_exported(f, q);
  EXPECT_EQ(stats_of(f).bytes_in_use, 0u);
  brisk_test_fifo_validate(f);
}

// Thousands of pages, each left behind by a block: the set of pages that
// free and realloc look a pointer up in before they read its header grows
// past the control block into a mapping of its own (counted as held and
// as system requests), follows each page out, and frees, reallocs and the
// validator find every page through it.
TEST(Fifo, ThousandsOfPagesLeftBehindStayFindable) {
  brisk_test_os_cache_flush();  // every mapping from the OS: counted by both
  const uint64_t os_before = brisk_test_os_calls();
  FifoPtr fifo = make_fifo(4096);
  brisk_fifo_t *f = fifo.get();
  const size_t n = static_cast<size_t>(scaled(3000, 600));
  std::vector<unsigned char *> blocks;
  for (size_t i = 0; i < n; i++) {
    auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(f, 2100));  // one per page
    ASSERT_NE(p, nullptr);
    fill_pattern(p, 2100, block_seed(p, 2100));
    blocks.push_back(p);
  }
  brisk_test_fifo_validate(f);
  brisk_region_stats_t s = stats_of(f);
  EXPECT_GT(s.bytes_held, n * 4096 + kControlPage) << "the set of pages is mapped and held";
  EXPECT_EQ(s.system_requests, brisk_test_os_calls() - os_before);
  // Shrunk in place (each is its page's last block), then freed in a
  // scattered order: pages go, the set follows.
  std::mt19937_64 rng(7);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (size_t i = 0; i < blocks.size(); i++) {
    unsigned char *p = blocks[i];
    ASSERT_EQ(brisk_fifo_realloc(f, p, 1000), p);
    EXPECT_TRUE(pattern_intact(p, 1000, block_seed(p, 2100)));
    brisk_fifo_free(f, p);
    if (i % 500 == 0) brisk_test_fifo_validate(f);
  }
  brisk_test_fifo_validate(f);
  EXPECT_EQ(stats_of(f).bytes_in_use, 0u);
}

// A fifo whose set of pages moved to a mapping of its own leaves its
// control page to the mapping cache with the inline slots zero (the next
// fifo there clears only the control block before them): the next fifo
// to take the page starts with an empty set.
TEST(Fifo, AControlPageWhoseSetMovedOutComesBackWithAnEmptySet) {
  brisk_test_os_cache_flush();
  brisk_fifo_t *f = brisk_fifo_create(64 * kKiB);
  ASSERT_NE(f, nullptr);
  std::vector<void *> blocks;
  for (int i = 0; i < 100; i++) {  // one per page: past the 64 the inline slots hold
    void *p = brisk_fifo_alloc(f, 40 * kKiB);
    ASSERT_NE(p, nullptr);
    blocks.push_back(p);
  }
  ASSERT_GT(stats_of(f).bytes_held, 100 * 64 * kKiB + kControlPage) << "the set has a mapping";
  brisk_fifo_destroy(f);
  for (void *p : blocks) brisk_fifo_free(f, p);
  if (!brisk_test_os_cache_holds(f)) GTEST_SKIP() << "the mapping cache did not keep it";
  brisk_fifo_t *g = brisk_fifo_create(64 * kKiB);
  ASSERT_NE(g, nullptr);
  if (g != f) {
    brisk_fifo_destroy(g);
    GTEST_SKIP() << "the next fifo took another control page";
  }
  brisk_test_fifo_validate(g);
  void *p = brisk_fifo_alloc(g, 100);
  ASSERT_NE(p, nullptr);
  brisk_fifo_free(g, p);
  brisk_test_fifo_validate(g);
  brisk_fifo_destroy(g);
}

TEST(Fifo, BlocksAre16AlignedAndDisjoint) {
  FifoPtr fifo = make_fifo();
  std::vector<std::pair<char *, size_t>> blocks;
  for (size_t size = 0; size < 700; size += 7) {
    char *p = static_cast<char *>(brisk_fifo_alloc(fifo.get(), size));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(is_aligned(p, 16)) << size;
    fill_pattern(p, size, block_seed(p, size));
    blocks.emplace_back(p, size);
  }
  for (auto &[p, size] : blocks) {
    EXPECT_TRUE(pattern_intact(p, size, block_seed(p, size))) << size;
    brisk_fifo_free(fifo.get(), p);
  }
}

TEST(Fifo, SizeZeroGivesUniqueFreeablePointers) {
  FifoPtr fifo = make_fifo();
  void *a = brisk_fifo_alloc(fifo.get(), 0);
  void *b = brisk_fifo_alloc(fifo.get(), 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(brisk_fifo_realloc(fifo.get(), a, 0), a);
  brisk_fifo_free(fifo.get(), a);
  brisk_fifo_free(fifo.get(), b);
  brisk_fifo_free(fifo.get(), nullptr);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
}

TEST(Fifo, UnservableSizesFailWithEnomem) {
  FifoPtr fifo = make_fifo();
  void *keep = brisk_fifo_alloc(fifo.get(), 32);
  ASSERT_NE(keep, nullptr);
  memset(keep, 0x5a, 32);
  for (size_t size : {SIZE_MAX, SIZE_MAX - 8, SIZE_MAX / 2 + 1, size_t{1} << 46}) {
    SCOPED_TRACE(size);
    errno = 0;
    EXPECT_EQ(brisk_fifo_alloc(fifo.get(), size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(brisk_fifo_realloc(fifo.get(), keep, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_TRUE(all_bytes_are(keep, 32, 0x5a));
    errno = 0;
    EXPECT_EQ(brisk_fifo_realloc(fifo.get(), nullptr, size), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  brisk_region_stats_t s = stats_of(fifo.get());
  EXPECT_EQ(s.bytes_in_use, span_of(32));
  EXPECT_EQ(s.bytes_held, kDefaultPage + kControlPage);
  brisk_fifo_free(fifo.get(), keep);
}

// Dirty every block, free in several orders, and check that every block
// handed out afterwards is all zero: the current page reused in place, the
// spare, the 1/8 replacement and cached pages all come back through here.
// A NULL fifo: realloc and the exported alloc are NULL/EINVAL, the
// exported free of NULL and destroy do nothing, stats are zero (the inline
// alloc and free are not tested for it).
TEST(Fifo, NullFifoIsEinvalOrNothing) {
  errno = 0;
  EXPECT_EQ(brisk_fifo_realloc(nullptr, nullptr, 16), nullptr);
  EXPECT_EQ(errno, EINVAL);
  alignas(16) char local[32] = {};
  errno = 0;
  EXPECT_EQ(brisk_fifo_realloc(nullptr, local + 16, 32), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(brisk_test_fifo_alloc_exported(nullptr, 16), nullptr);
  EXPECT_EQ(errno, EINVAL);
  brisk_test_fifo_free_exported(nullptr, nullptr);
  brisk_fifo_destroy(nullptr);
  brisk_region_stats_t st;
  std::memset(&st, 0xff, sizeof st);
  brisk_fifo_stats(nullptr, &st);
  EXPECT_TRUE(brisk_test::all_counts_zero(st));
}

TEST(Fifo, AllocIsZeroedAfterReuseOfDirtyMemory) {
  FifoPtr fifo = make_fifo(16 * kKiB);
  std::mt19937_64 rng(3);
  std::vector<std::pair<unsigned char *, size_t>> live;
  const long rounds = scaled(200, 40);
  for (long round = 0; round < rounds; round++) {
    size_t count = 1 + rng() % 400;
    for (size_t i = 0; i < count; i++) {
      size_t size = rng() % 3 == 0 ? rng() % 2000 : rng() % 100;
      auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), size));
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(all_bytes_are(p, size, 0)) << "round " << round << " size " << size;
      memset(p, 0xff, size);
      live.emplace_back(p, size);
    }
    // Free most of them: FIFO order in even rounds, random order in odd ones.
    if (round % 2 == 1) std::shuffle(live.begin(), live.end(), rng);
    size_t keep = live.size() / 4;
    for (size_t i = 0; i < live.size() - keep; i++) brisk_fifo_free(fifo.get(), live[i].first);
    live.erase(live.begin(), live.end() - static_cast<long>(keep));
  }
  for (auto &[p, size] : live) brisk_fifo_free(fifo.get(), p);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
}

// Alloc then free at once reuses the current page forever: one mapping.
TEST(Fifo, AllocThenFreeNeverMapsAgain) {
  FifoPtr fifo = make_fifo();
  const size_t created = stats_of(fifo.get()).system_requests;
  const long n = scaled(1000000, 100000);
  for (long i = 0; i < n; i++) {
    auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), 8 + i % 300));
    ASSERT_NE(p, nullptr);
    p[0] = 1;
    brisk_fifo_free(fifo.get(), p);
  }
  brisk_region_stats_t s = stats_of(fifo.get());
  EXPECT_EQ(s.system_requests, created);  // no OS call at all
  EXPECT_EQ(s.bytes_held, kDefaultPage + kControlPage);
}

// A ring of blocks freed and reallocated in FIFO order many times over:
// pages are reused, so the maps stay few and the memory held bounded.
TEST(Fifo, RingInFifoOrderReusesPages) {
  FifoPtr fifo = make_fifo();
  const size_t ring = 2000;  // about 300 KiB live: five pages or so
  std::vector<void *> slots(ring, nullptr);
  std::mt19937_64 rng(5);
  const long n = scaled(2000000, 200000);
  size_t peak_held = 0;
  for (long i = 0; i < n; i++) {
    size_t slot = static_cast<size_t>(i) % ring;
    brisk_fifo_free(fifo.get(), slots[slot]);
    slots[slot] = brisk_fifo_alloc(fifo.get(), 16 + rng() % 256);
    ASSERT_NE(slots[slot], nullptr);
    peak_held = std::max(peak_held, pages_held(fifo.get()));
  }
  brisk_region_stats_t s = stats_of(fifo.get());
  // live ~ 2000 * 160 B = 320 KiB = 5 pages; a few more for the pages in
  // flight, the spare and the cache, however many times the ring turned:
  // at most 16 mappings of 1 to 3 system calls each (3 where the kernel
  // ignores the reservation hints, as under TSan) and their releases.
  EXPECT_LE(s.system_requests, 4 * 16u);
  EXPECT_LE(peak_held, 16 * kDefaultPage);
  for (void *p : slots) brisk_fifo_free(fifo.get(), p);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
}

// As many blocks as any page of `page_size` holds, whatever its color; the
// sizes used below leave less than one block of room in any page.
size_t page_room(size_t page_size) { return page_size - kPageHeader - kMaxColor; }

std::vector<void *> fill_page(brisk_fifo_t *fifo, size_t page_size, size_t block = 1000) {
  std::vector<void *> blocks;
  size_t room = page_room(page_size);
  size_t span = span_of(block);
  for (size_t used = 0; used + span <= room; used += span) {
    void *p = brisk_fifo_alloc(fifo, block);
    EXPECT_NE(p, nullptr);
    blocks.push_back(p);
  }
  return blocks;
}

void free_all(brisk_fifo_t *fifo, const std::vector<void *> &blocks) {
  for (void *p : blocks) brisk_fifo_free(fifo, p);
}

// The seed's policy, 1: when a page empties while a spare exists and the
// current page has less than 1/8 free, the emptied page becomes current:
// the next block lands at the start of the page that just emptied.
TEST(FifoPolicy, EmptiedPageReplacesCurrentWithLessThanAnEighthFree) {
  FifoPtr fifo = make_fifo();
  std::vector<void *> a = fill_page(fifo.get(), kDefaultPage);
  std::vector<void *> b = fill_page(fifo.get(), kDefaultPage);
  // Current (the third page) filled to more than 7/8.
  std::vector<void *> c;
  size_t span = span_of(1000);
  for (size_t used = 0; used < kDefaultPage * 15 / 16; used += span)
    c.push_back(brisk_fifo_alloc(fifo.get(), 1000));
  EXPECT_EQ(pages_held(fifo.get()), 3 * kDefaultPage);
  const size_t mapped = stats_of(fifo.get()).system_requests;
  free_all(fifo.get(), a);  // no spare yet: a becomes the spare
  brisk_test_fifo_validate(fifo.get());
  free_all(fifo.get(), b);  // spare exists, current < 1/8 free: b replaces it
  brisk_test_fifo_validate(fifo.get());
  void *next = brisk_fifo_alloc(fifo.get(), 1000);
  EXPECT_EQ(next, b.front());
  // c is no longer current; once b is full, the next page is the spare, a.
  std::vector<void *> rest;
  for (size_t used = span; used + span <= page_room(kDefaultPage); used += span)
    rest.push_back(brisk_fifo_alloc(fifo.get(), 1000));
  void *after = brisk_fifo_alloc(fifo.get(), 1000);
  EXPECT_EQ(after, a.front());
  EXPECT_EQ(stats_of(fifo.get()).system_requests, mapped);  // no page mapped or released
  EXPECT_EQ(pages_held(fifo.get()), 3 * kDefaultPage);
  // c empties while it is not current and no spare exists: c becomes spare.
  free_all(fifo.get(), c);
  EXPECT_EQ(pages_held(fifo.get()), 3 * kDefaultPage);
  brisk_test_fifo_validate(fifo.get());
  brisk_fifo_free(fifo.get(), next);
  brisk_fifo_free(fifo.get(), after);
  free_all(fifo.get(), rest);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
  brisk_test_fifo_validate(fifo.get());
}

// The seed's policy, 2: with a spare and a current that still has room, an
// emptied page is let go: kept by the fifo's small page cache while that
// has room (1 MiB of pages: one page of 1 MiB), released after that (to
// the OS layer's mapping cache, which the fifo no longer counts).
TEST(FifoPolicy, EmptiedPageIsReleasedWhenCurrentHasRoom) {
  const size_t page = kMiB;
  FifoPtr fifo = make_fifo(page);
  std::vector<void *> a = fill_page(fifo.get(), page, 64 * kKiB);
  std::vector<void *> b = fill_page(fifo.get(), page, 64 * kKiB);
  std::vector<void *> c = fill_page(fifo.get(), page, 64 * kKiB);
  void *d = brisk_fifo_alloc(fifo.get(), 64 * kKiB);  // current: a fourth page, nearly empty
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(pages_held(fifo.get()), 4 * page);
  free_all(fifo.get(), a);  // becomes the spare
  EXPECT_EQ(pages_held(fifo.get()), 4 * page);
  free_all(fifo.get(), b);  // dropped into the page cache
  EXPECT_EQ(pages_held(fifo.get()), 4 * page);
  EXPECT_TRUE(is_held(b.front()));
  brisk_test_fifo_validate(fifo.get());  // current, spare and a cached page
  free_all(fifo.get(), c);  // dropped, cache full: released
  EXPECT_EQ(pages_held(fifo.get()), 3 * page);
  EXPECT_TRUE(is_released(c.front()));
  // The current page is never let go, even empty.
  brisk_fifo_free(fifo.get(), d);
  brisk_region_stats_t s = stats_of(fifo.get());
  EXPECT_EQ(s.bytes_held, 3 * page + kControlPage);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_TRUE(is_held(d));
  // An empty current is reset and reused when it fills up: no new mapping.
  for (int i = 0; i < 100; i++) brisk_fifo_free(fifo.get(), brisk_fifo_alloc(fifo.get(), 64 * kKiB));
  EXPECT_EQ(stats_of(fifo.get()).system_requests, s.system_requests);
  brisk_test_fifo_validate(fifo.get());
}

TEST(FifoRealloc, NullIsAlloc) {
  FifoPtr fifo = make_fifo();
  auto *p = static_cast<unsigned char *>(brisk_fifo_realloc(fifo.get(), nullptr, 100));
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(all_bytes_are(p, 100, 0));
  brisk_fifo_free(fifo.get(), p);
}

TEST(FifoRealloc, ShrinkKeepsPointerAndGrowingBackExposesZeros) {
  FifoPtr fifo = make_fifo();
  auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), 200));
  void *after = brisk_fifo_alloc(fifo.get(), 10);  // p is not the last block
  memset(p, 0xab, 200);
  EXPECT_EQ(brisk_fifo_realloc(fifo.get(), p, 50), p);
  EXPECT_TRUE(all_bytes_are(p, 50, 0xab));
  // Growing back within the span: the same pointer, bytes past 50 zero.
  EXPECT_EQ(brisk_fifo_realloc(fifo.get(), p, 200), p);
  EXPECT_TRUE(all_bytes_are(p, 50, 0xab));
  EXPECT_TRUE(all_bytes_are(p + 50, 150, 0));
  brisk_fifo_free(fifo.get(), p);
  brisk_fifo_free(fifo.get(), after);
}

TEST(FifoRealloc, LastBlockGrowsInPlaceWithZeroedTail) {
  FifoPtr fifo = make_fifo();
  void *before = brisk_fifo_alloc(fifo.get(), 10);
  auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), 100));
  memset(p, 0x11, 100);
  size_t in_use = stats_of(fifo.get()).bytes_in_use;
  auto *q = static_cast<unsigned char *>(brisk_fifo_realloc(fifo.get(), p, 5000));
  EXPECT_EQ(q, p);
  EXPECT_TRUE(all_bytes_are(q, 100, 0x11));
  EXPECT_TRUE(all_bytes_are(q + 100, 4900, 0));
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, in_use - span_of(100) + span_of(5000));
  // Shrinking the last block gives its tail back to the page, zeroed: the
  // next block starts right after the shrunk one.
  memset(q, 0x22, 5000);
  EXPECT_EQ(brisk_fifo_realloc(fifo.get(), q, 30), q);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, in_use - span_of(100) + span_of(30));
  auto *again = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), 4000));
  EXPECT_EQ(again, q + span_of(30));
  EXPECT_TRUE(all_bytes_are(again, 4000, 0));
  EXPECT_TRUE(all_bytes_are(q, 30, 0x22));
  brisk_fifo_free(fifo.get(), again);
  brisk_fifo_free(fifo.get(), q);
  brisk_fifo_free(fifo.get(), before);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
}

TEST(FifoRealloc, GrowMovesWhenNotLastOrNoRoom) {
  FifoPtr fifo = make_fifo();
  auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), 300));
  void *filler = brisk_fifo_alloc(fifo.get(), 55000);  // p is not the last block
  fill_pattern(p, 300, 77);
  auto *q = static_cast<unsigned char *>(brisk_fifo_realloc(fifo.get(), p, 3000));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  EXPECT_TRUE(pattern_intact(q, 300, 77));
  EXPECT_TRUE(all_bytes_are(q + 300, 2700, 0));
  // q is the last block now, but 20000 bytes more do not fit in the page.
  auto *r = static_cast<unsigned char *>(brisk_fifo_realloc(fifo.get(), q, 20000));
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r, q);
  EXPECT_TRUE(pattern_intact(r, 300, 77));
  EXPECT_TRUE(all_bytes_are(r + 300, 20000 - 300, 0));
  EXPECT_EQ(pages_held(fifo.get()), 2 * kDefaultPage);
  brisk_fifo_free(fifo.get(), filler);
  brisk_fifo_free(fifo.get(), r);
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
}

TEST(FifoBig, BlocksLargerThanAPageGetTheirOwnPage) {
  FifoPtr fifo = make_fifo();
  void *small = brisk_fifo_alloc(fifo.get(), 100);
  const size_t size = 1000 * kKiB;
  auto *big = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), size));
  ASSERT_NE(big, nullptr);
  EXPECT_TRUE(is_aligned(big, 16));
  EXPECT_TRUE(all_bytes_are(big, size, 0));
  memset(big, 0x77, size);
  brisk_region_stats_t s = stats_of(fifo.get());
  EXPECT_GE(s.bytes_held, kDefaultPage + size + kControlPage);
  EXPECT_LE(s.bytes_held, kDefaultPage + size + 8 * kKiB + kControlPage);  // one big page
  // The current page is untouched: the next small block follows the first.
  void *small2 = brisk_fifo_alloc(fifo.get(), 100);
  EXPECT_EQ(static_cast<char *>(small2), static_cast<char *>(small) + span_of(100));
  // Shrink in place (the dropped part reads zero when grown back), then grow
  // past the mapping: a move with the contents kept.
  EXPECT_EQ(brisk_fifo_realloc(fifo.get(), big, size / 2), big);
  EXPECT_EQ(brisk_fifo_realloc(fifo.get(), big, size), big);
  EXPECT_TRUE(all_bytes_are(big, size / 2, 0x77));
  EXPECT_TRUE(all_bytes_are(big + size / 2, size / 2, 0));
  auto *bigger = static_cast<unsigned char *>(brisk_fifo_realloc(fifo.get(), big, 2 * size));
  ASSERT_NE(bigger, nullptr);
  EXPECT_TRUE(all_bytes_are(bigger, size / 2, 0x77));
  EXPECT_TRUE(all_bytes_are(bigger + size / 2, size * 3 / 2, 0));
  brisk_fifo_free(fifo.get(), bigger);
  s = stats_of(fifo.get());
  EXPECT_EQ(s.bytes_held, kDefaultPage + kControlPage);  // big pages go back at once
  EXPECT_EQ(s.bytes_in_use, span_of(100) * 2);
  brisk_fifo_free(fifo.get(), small);
  brisk_fifo_free(fifo.get(), small2);
}

// Every count against an independent one, over a sequence that maps pages,
// keeps emptied ones (spare, cache) and releases the rest, gives a block a
// page of its own, decommits what a big shrink drops, and reallocs every
// way: system_requests against the OS layer's count of the same window
// (one thread; nothing else in it calls brisk), bytes_requested and
// allocations against the test's own sums (a realloc is one allocation of
// its new size, in place or not).
TEST(Fifo, StatsCountWhatWasAskedAndEveryOsCall) {
  const size_t n = 1500;  // about 24 pages of 1 KiB blocks
  std::vector<void *> blocks(n, nullptr);
  size_t asked = 0, allocations = 0, peak_pages = 0;
  bool ok = true;
  // The OS layer's mapping cache emptied: creation maps afresh.
  brisk_test_os_cache_flush();
  const uint64_t os_before = brisk_test_os_calls();
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  if (fifo == nullptr) GTEST_FAIL() << "create";
  auto alloc = [&](size_t size) {
    void *p = brisk_fifo_alloc(fifo, size);
    ok &= p != nullptr;
    asked += size;
    allocations++;
    return p;
  };
  auto realloc = [&](void *p, size_t size) {
    void *q = brisk_fifo_realloc(fifo, p, size);
    ok &= q != nullptr;
    asked += size;
    allocations++;
    return q;
  };
  for (size_t i = 0; i < n; i++) blocks[i] = alloc(1000 + i % 7);
  peak_pages = pages_held(fifo) / kDefaultPage;
  for (void *p : blocks) brisk_fifo_free(fifo, p);  // a spare, 16 cached, the rest unmapped
  void *big = alloc(kMiB);  // a page of its own
  big = realloc(big, 100);       // shrinks in place: the dropped MiB is decommitted
  big = realloc(big, 500 * kKiB);  // grows back within its page
  big = realloc(big, 2 * kMiB);  // moves to a new page; the old one goes
  brisk_fifo_free(fifo, big);
  void *a = realloc(nullptr, 100);  // an allocation
  void *b = alloc(0);
  a = realloc(a, 3000);  // not the last block: copied
  a = realloc(a, 5000);  // the last block now, with room: in place
  b = realloc(b, 4);     // within its span
  brisk_fifo_free(fifo, a);
  brisk_fifo_free(fifo, b);
  brisk_region_stats_t s = stats_of(fifo);
  const uint64_t os_calls = brisk_test_os_calls() - os_before;

  ASSERT_TRUE(ok);
  EXPECT_EQ(s.system_requests, os_calls);
  EXPECT_LT(pages_held(fifo) / kDefaultPage, peak_pages) << "no page was unmapped";
  EXPECT_EQ(s.bytes_requested, asked);
  EXPECT_EQ(s.allocations, allocations);
  EXPECT_EQ(s.bytes_in_use, 0u);
  brisk_fifo_destroy(fifo);
}

// A random mix of alloc, realloc and free against a model of every block's
// contents: nothing overlaps, nothing is lost, new bytes are zero. Page
// sizes that are and are not powers of two: free finds a block's page from
// its address, through the mapping's alignment and color, and some blocks
// are bigger than a page (a mapping of their own).
class FifoStress : public testing::TestWithParam<size_t> {};

TEST_P(FifoStress, RandomOperationsKeepContents) {
  const size_t page_size = GetParam();
  FifoPtr fifo = make_fifo(page_size);
  struct Block {
    unsigned char *p;
    size_t size;
    uint64_t seed;
  };
  std::deque<Block> live;
  std::mt19937_64 rng(11);
  const long n = scaled(100000, 10000);
  uint64_t serial = 0;
  for (long i = 0; i < n; i++) {
    unsigned op = rng() % 10;
    if (op < 5 || live.empty()) {
      size_t size = rng() % 8 == 0 ? rng() % 20000 : rng() % 200;
      if (rng() % 512 == 0) size = page_size + rng() % page_size;
      auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), size));
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(is_aligned(p, 16));
      ASSERT_TRUE(all_bytes_are(p, size, 0));
      uint64_t seed = block_seed(p, size, ++serial);
      fill_pattern(p, size, seed);
      live.push_back({p, size, seed});
    } else if (op < 7) {
      Block &b = live[rng() % live.size()];
      size_t new_size = rng() % 2 ? rng() % 400 : rng() % 20000;
      auto *q = static_cast<unsigned char *>(brisk_fifo_realloc(fifo.get(), b.p, new_size));
      ASSERT_NE(q, nullptr);
      size_t kept = std::min(b.size, new_size);
      ASSERT_TRUE(brisk_test::find_pattern_mismatch(q, kept, b.seed) == kept);
      ASSERT_TRUE(all_bytes_are(q + kept, new_size - kept, 0));
      b.seed = block_seed(q, new_size, ++serial);
      fill_pattern(q, new_size, b.seed);
      b.p = q;
      b.size = new_size;
    } else {
      // Mostly oldest first, as a FIFO is meant to be used, sometimes any.
      size_t index = rng() % 4 == 0 ? rng() % live.size() : 0;
      Block b = live[index];
      ASSERT_TRUE(pattern_intact(b.p, b.size, b.seed));
      brisk_fifo_free(fifo.get(), b.p);
      live.erase(live.begin() + static_cast<long>(index));
    }
    if (i % 1024 == 0) brisk_test_fifo_validate(fifo.get());
  }
  brisk_test_fifo_validate(fifo.get());
  for (const Block &b : live) {
    ASSERT_TRUE(pattern_intact(b.p, b.size, b.seed));
    brisk_fifo_free(fifo.get(), b.p);
  }
  EXPECT_EQ(stats_of(fifo.get()).bytes_in_use, 0u);
  // Every page emptied is kept or released: the counts match exactly now.
  brisk_test_fifo_validate(fifo.get());
}

INSTANTIATE_TEST_SUITE_P(PageSizes, FifoStress,
                         testing::Values(4 * kKiB, 8 * kKiB, 12 * kKiB, kDefaultPage, 100 * kKiB, kMiB),
                         [](const testing::TestParamInfo<size_t> &info) {
                           return std::to_string(info.param / kKiB) + "KiB";
                         });

// Destroy with live blocks: everything stays usable until the last free,
// which gives every page and the fifo itself back to the system.
TEST(FifoDestroy, LiveBlocksOutliveDestroy) {
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  ASSERT_NE(fifo, nullptr);
  std::vector<unsigned char *> blocks;
  for (int i = 0; i < 500; i++) {  // several pages, one big block among them
    size_t size = i == 250 ? 300 * kKiB : 1000;
    auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, size));
    ASSERT_NE(p, nullptr);
    memset(p, (i + 1) & 0xff, size);
    blocks.push_back(p);
  }
  unsigned char *first = blocks.front();
  unsigned char *big = blocks[250];
  brisk_test_fifo_validate(fifo);
  brisk_fifo_destroy(fifo);
  EXPECT_TRUE(is_held(fifo));
  brisk_test_fifo_validate(fifo);  // destroyed: it keeps no page
  // Every block but the first, in random order: pages go as they empty.
  std::mt19937_64 rng(7);
  std::shuffle(blocks.begin() + 1, blocks.end(), rng);
  for (size_t i = 1; i < blocks.size(); i++) brisk_fifo_free(fifo, blocks[i]);
  EXPECT_TRUE(is_released(big));
  EXPECT_TRUE(is_held(fifo));
  EXPECT_TRUE(is_held(first));
  EXPECT_EQ(first[999], 1);
  brisk_fifo_free(fifo, first);
  // The last free released the first page and the control page.
  EXPECT_TRUE(is_released(first));
  EXPECT_TRUE(is_released(fifo));
}

TEST(FifoDestroy, WithoutLiveBlocksReleasesAtOnce) {
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  ASSERT_NE(fifo, nullptr);
  auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, 100));
  brisk_fifo_free(fifo, p);
  brisk_fifo_destroy(fifo);
  EXPECT_TRUE(is_released(fifo));
  EXPECT_TRUE(is_released(p));
  brisk_fifo_destroy(nullptr);
}

// Many threads, each with a fifo of its own (a fifo is single-threaded),
// running a ring with content checks: fifos share nothing.
TEST(FifoThreads, OneFifoPerThread) {
  const int threads = 12;
  const long n = scaled(300000, 20000);
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([t, n, &failures] {
      brisk_fifo_t *fifo = brisk_fifo_create(t % 2 ? 0 : 16 * kKiB);
      if (fifo == nullptr) {
        failures[t]++;
        return;
      }
      const size_t ring = 300;
      std::vector<std::pair<unsigned char *, size_t>> slots(ring, {nullptr, 0});
      std::mt19937_64 rng(static_cast<uint64_t>(t));
      for (long i = 0; i < n; i++) {
        size_t slot = t % 3 == 0 ? rng() % ring : static_cast<size_t>(i) % ring;
        auto &[p, size] = slots[slot];
        if (p != nullptr) {
          if (!pattern_intact(p, size, block_seed(p, size, static_cast<uint64_t>(t)))) failures[t]++;
          brisk_fifo_free(fifo, p);
        }
        size = rng() % 500;
        p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, size));
        if (p == nullptr || !all_bytes_are(p, size, 0)) {
          failures[t]++;
          return;
        }
        fill_pattern(p, size, block_seed(p, size, static_cast<uint64_t>(t)));
        if (i % 4096 == 0) brisk_test_fifo_validate(fifo);  // its own thread, between calls
      }
      for (auto &[p, size] : slots) brisk_fifo_free(fifo, p);
      brisk_test_fifo_validate(fifo);
      brisk_region_stats_t s;
      brisk_fifo_stats(fifo, &s);
      if (s.bytes_in_use != 0) failures[t]++;
      brisk_fifo_destroy(fifo);
    });
  }
  for (auto &w : workers) w.join();
  for (int t = 0; t < threads; t++) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// Misuse that must abort with a message rather than corrupt the fifo.
// "threadsafe" death tests re-execute the binary instead of forking.
class FifoDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(FifoDeathTest, DoubleFreeAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        void *keep = brisk_fifo_alloc(fifo, 10);  // so the page stays as it is
        void *p = brisk_fifo_alloc(fifo, 10);
        escape(keep);
        brisk_fifo_free(fifo, p);
        brisk_fifo_free(fifo, p);
      },
      "brisk: brisk_fifo_free\\(0x[0-9a-f]+\\): double free");
}

TEST_F(FifoDeathTest, ForeignPointerAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        alignas(16) unsigned char local[64] = {};
        escape(local);
        brisk_fifo_free(fifo, local + 16);
      },
      "brisk_fifo_free\\(0x[0-9a-f]+\\): not a block of a fifo");
}

TEST_F(FifoDeathTest, MallocPointerAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        void *p = brisk_malloc(48);
        escape(p);
        brisk_fifo_free(fifo, p);
      },
      "brisk_fifo_free\\(0x[0-9a-f]+\\): not a block of a fifo");
}

TEST_F(FifoDeathTest, InteriorPointerAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        auto *p = static_cast<char *>(brisk_fifo_alloc(fifo, 100));
        brisk_fifo_free(fifo, p + 16);
      },
      "brisk_fifo_free\\(0x[0-9a-f]+\\): not a block of a fifo");
}

// The exported free checks as the inline one does (the same code).
TEST_F(FifoDeathTest, DoubleFreeThroughTheExportedFreeAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        void *keep = brisk_test_fifo_alloc_exported(fifo, 10);
        void *p = brisk_test_fifo_alloc_exported(fifo, 10);
        escape(keep);
        brisk_test_fifo_free_exported(fifo, p);
        brisk_test_fifo_free_exported(fifo, p);
      },
      "brisk: brisk_fifo_free\\(0x[0-9a-f]+\\): double free");
}

// A fifo destroyed with a live block goes with that block's free: its
// page and its control page wait in the mapping cache, zeroed. A second
// free of the block then finds a zero header and a zero control block
// (no set of pages): each free names the fifo gone.
TEST_F(FifoDeathTest, DoubleFreeAfterTheFreeThatReleasedTheFifoAborts) {
  const char *kNotLive =
      "brisk: brisk_fifo_free\\(0x[0-9a-f]+\\): not a live fifo \\(destroyed already\\?\\)";
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  ASSERT_NE(fifo, nullptr);
  void *p = brisk_fifo_alloc(fifo, 100);
  ASSERT_NE(p, nullptr);
  brisk_fifo_destroy(fifo);
  brisk_fifo_free(fifo, p);
  if (!brisk_test_os_cache_holds(fifo) || !brisk_test_os_cache_holds(p))
    GTEST_SKIP() << "the mapping cache did not keep the fifo's memory";
  EXPECT_DEATH(brisk_fifo_free(fifo, p), kNotLive);
  EXPECT_DEATH(brisk_test_fifo_free_exported(fifo, p), kNotLive);
  EXPECT_DEATH(brisk_fifo_free_slow_(fifo, p), kNotLive);
}

// The other fifo's pages are sized and aligned differently, so the page
// this fifo computes from the address is not the one the header names.
TEST_F(FifoDeathTest, BlockOfAFifoWithAnotherPageSizeAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *a = brisk_fifo_create(0);
        brisk_fifo_t *b = brisk_fifo_create(kMiB);
        void *p = brisk_fifo_alloc(b, 10);
        brisk_fifo_free(a, p);
      },
      "brisk_fifo_free\\(0x[0-9a-f]+\\): a block of another fifo");
}

TEST_F(FifoDeathTest, BlockOfAnotherFifoAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *a = brisk_fifo_create(0);
        brisk_fifo_t *b = brisk_fifo_create(0);
        void *p = brisk_fifo_alloc(a, 10);
        brisk_fifo_realloc(b, p, 20);
      },
      "brisk_fifo_realloc\\(0x[0-9a-f]+\\): a block of another fifo");
}

// realloc checks p as free does, before it copies from it.
TEST_F(FifoDeathTest, ReallocOfAPointerItNeverHandedOutAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        void *p = brisk_malloc(48);
        escape(p);
        brisk_fifo_realloc(fifo, p, 100);
      },
      "brisk: brisk_fifo_realloc\\(0x[0-9a-f]+\\): not a block of a fifo");
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        alignas(16) unsigned char local[64] = {};
        escape(local);
        brisk_fifo_realloc(fifo, local + 16, 100);
      },
      "brisk_fifo_realloc\\(0x[0-9a-f]+\\): not a block of a fifo");
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        auto *p = static_cast<char *>(brisk_fifo_alloc(fifo, 100));
        brisk_fifo_realloc(fifo, p + 16, 200);
      },
      "brisk_fifo_realloc\\(0x[0-9a-f]+\\): not a block of a fifo");
}

TEST_F(FifoDeathTest, ReallocOfAFreedBlockAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        void *keep = brisk_fifo_alloc(fifo, 10);  // so the page stays as it is
        void *p = brisk_fifo_alloc(fifo, 10);
        escape(keep);
        brisk_fifo_free(fifo, p);
        brisk_fifo_realloc(fifo, p, 100);
      },
      "brisk: brisk_fifo_realloc\\(0x[0-9a-f]+\\): a freed block");
}

TEST_F(FifoDeathTest, ExportedFreeToANullFifoAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        brisk_test_fifo_free_exported(nullptr, brisk_fifo_alloc(fifo, 10));
      },
      "brisk: brisk_fifo_free\\(0x[0-9a-f]+\\): no fifo \\(NULL\\) to free it to");
}

// A second destroy: of a fifo whose control page the mapping cache keeps
// (zeroed), or of one that its live blocks keep.
TEST_F(FifoDeathTest, DoubleDestroyAborts) {
  const char *kNotLive =
      "brisk: brisk_fifo_destroy\\(0x[0-9a-f]+\\): not a live fifo \\(destroyed already\\?\\)";
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  ASSERT_NE(fifo, nullptr);
  brisk_fifo_destroy(fifo);
  if (brisk_test_os_cache_holds(fifo))
    EXPECT_DEATH(brisk_fifo_destroy(fifo), kNotLive);
  EXPECT_DEATH(
      {
        brisk_fifo_t *kept = brisk_fifo_create(0);
        escape(brisk_fifo_alloc(kept, 10));
        brisk_fifo_destroy(kept);
        brisk_fifo_destroy(kept);
      },
      kNotLive);
}

// A second destroy once the control page went back to the system (the
// mapping cache turned off) read it unmapped and died of SIGSEGV.
TEST_F(FifoDeathTest, DoubleDestroyOfAnUnmappedFifoAborts) {
  EXPECT_DEATH(
      {
        brisk_test_os_cache_configure(0, 0, 0);
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        brisk_fifo_destroy(fifo);
        brisk_fifo_destroy(fifo);
      },
      "brisk: brisk_fifo_destroy\\(0x[0-9a-f]+\\): not a live fifo \\(destroyed "
      "already\\?\\)");
}

// A pointer whose header would lie in memory that is not mapped, or not
// readable: the first bytes of a mapping after a guard page, or of a buddy
// allocator's region. realloc, the exported free and the free past the
// inline path (what an annotated fifo's frees take, and a pointer that is
// no multiple of 16) find that it lies in none of the fifo's pages before
// they read anything there. (The inline free reads the header first:
// brisk/fifo.h.)
unsigned char *after_a_guard_page() {
  auto *m = static_cast<unsigned char *>(
      mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (m == MAP_FAILED) std::abort();
  mprotect(m, 4096, PROT_NONE);
  return m + 4096;
}

TEST_F(FifoDeathTest, PointerAfterAGuardPageAborts) {
  const char *kFree = "brisk: brisk_fifo_free\\(0x[0-9a-f]+\\): not a block of a fifo";
  const char *kRealloc = "brisk: brisk_fifo_realloc\\(0x[0-9a-f]+\\): not a block of a fifo";
  EXPECT_DEATH(brisk_fifo_realloc(brisk_fifo_create(0), after_a_guard_page(), 100), kRealloc);
  EXPECT_DEATH(brisk_test_fifo_free_exported(brisk_fifo_create(0), after_a_guard_page()), kFree);
  EXPECT_DEATH(brisk_fifo_free_slow_(brisk_fifo_create(0), after_a_guard_page()), kFree);
  EXPECT_DEATH(brisk_fifo_free(brisk_fifo_create(0), after_a_guard_page() + 4), kFree);
  EXPECT_DEATH(brisk_fifo_realloc(brisk_fifo_create(0), after_a_guard_page() + 4, 100), kRealloc);
}

TEST_F(FifoDeathTest, FirstBlockOfABuddyAllocatorAborts) {
  auto buddy_block = [] {
    void *p = brisk_buddy_alloc(brisk_buddy_create(kMiB, 64), kMiB, 0);  // at the region's start
    if (p == nullptr) std::abort();
    return p;
  };
  EXPECT_DEATH(brisk_fifo_realloc(brisk_fifo_create(0), buddy_block(), 100),
               "brisk: brisk_fifo_realloc\\(0x[0-9a-f]+\\): not a block of a fifo");
  EXPECT_DEATH(brisk_test_fifo_free_exported(brisk_fifo_create(0), buddy_block()),
               "brisk: brisk_fifo_free\\(0x[0-9a-f]+\\): not a block of a fifo");
}

// Another kind's live handle: no live fifo's.
TEST_F(FifoDeathTest, DestroyOfAnotherKindsHandleAborts) {
  EXPECT_DEATH(
      {
        brisk_pool_t *pool = brisk_pool_create(64, 0, 100);
        brisk_fifo_destroy(reinterpret_cast<brisk_fifo_t *>(pool));
      },
      "brisk: brisk_fifo_destroy\\(0x[0-9a-f]+\\): not a live fifo");
}

TEST_F(FifoDeathTest, AllocAfterDestroyAborts) {
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(0);
        void *p = brisk_fifo_alloc(fifo, 10);
        escape(p);
        brisk_fifo_destroy(fifo);  // p keeps the fifo alive
        brisk_fifo_alloc(fifo, 10);
      },
      "brisk_fifo_alloc\\(0x[0-9a-f]+\\): not a live fifo \\(destroyed already\\?\\)");
}

// Calls with a fifo destroyed with no live block, while the mapping cache
// keeps its control page (zeroed): alloc read a NULL current page and
// died of SIGSEGV, a free of a block from before the destroy was named
// "not a block of a fifo" or "a block of another fifo", stats read zeros.
// Each aborts now, naming the destroyed fifo; so do stats and realloc
// with a fifo whose live blocks keep it (stats passed on main). None of
// them died with this message on main.
TEST_F(FifoDeathTest, CallsAfterDestroyAbort) {
  brisk_test::CacheKeepsForAMinute kept;
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  ASSERT_NE(fifo, nullptr);
  void *p = brisk_fifo_alloc(fifo, 100);
  ASSERT_NE(p, nullptr);
  brisk_fifo_free(fifo, p);
  brisk_fifo_destroy(fifo);
  if (!brisk_test_os_cache_holds(fifo)) GTEST_SKIP() << "the mapping cache did not keep it";
  auto not_live = [](const char *call) {
    return std::string("brisk: ") + call +
           "\\(0x[0-9a-f]+\\): not a live fifo \\(destroyed already\\?\\)";
  };
  brisk_region_stats_t s;
  EXPECT_DEATH(brisk_fifo_alloc(fifo, 100), not_live("brisk_fifo_alloc"));
  EXPECT_DEATH(brisk_fifo_alloc(fifo, 1 << 20), not_live("brisk_fifo_alloc"));
  EXPECT_DEATH(brisk_test_fifo_alloc_exported(fifo, 100), not_live("brisk_fifo_alloc"));
  EXPECT_DEATH(brisk_fifo_free(fifo, p), not_live("brisk_fifo_free"));
  EXPECT_DEATH(brisk_test_fifo_free_exported(fifo, p), not_live("brisk_fifo_free"));
  EXPECT_DEATH(brisk_fifo_realloc(fifo, p, 200), not_live("brisk_fifo_realloc"));
  EXPECT_DEATH(brisk_fifo_realloc(fifo, nullptr, 200), not_live("brisk_fifo_realloc"));
  EXPECT_DEATH(brisk_fifo_stats(fifo, &s), not_live("brisk_fifo_stats"));
  EXPECT_DEATH(
      {
        brisk_fifo_t *kept = brisk_fifo_create(0);
        escape(brisk_fifo_alloc(kept, 10));
        brisk_fifo_destroy(kept);  // its live block keeps it
        brisk_fifo_stats(kept, &s);
      },
      not_live("brisk_fifo_stats"));
}

// The validator names a corruption made on purpose behind the API's back
// (brisk_test_poke writes where ASan keeps the fifo's memory poisoned), as
// a stray write in the program would. They lean on the block header's
// layout: one little-endian word, the offset back to the page in bytes 0-3,
// the span in 16-byte units in bytes 4-6, the state in the top 5 bits
// (byte 7: 0x58 live, 0xd8 freed).
class FifoValidatorDeathTest : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// n bytes of `byte`, or a value's bytes, written at p behind ASan's back.
void poke_fill(void *p, unsigned char byte, size_t n) {
  std::vector<unsigned char> bytes(n, byte);
  brisk_test_poke(p, bytes.data(), n);
}

template <typename T>
void poke_value(void *p, T value) {
  brisk_test_poke(p, &value, sizeof value);
}

// Two blocks of 24 bytes: spans of 32, so a's bytes end where b's header starts.
struct TwoBlocks {
  brisk_fifo_t *fifo;
  unsigned char *a, *b;
};

TwoBlocks two_blocks() {
  brisk_fifo_t *fifo = brisk_fifo_create(0);
  auto *a = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, 24));
  auto *b = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, 24));
  EXPECT_EQ(b, a + span_of(24));
  brisk_test_fifo_validate(fifo);  // sound until the corruption
  return {fifo, a, b};
}

TEST_F(FifoValidatorDeathTest, OverflowIntoTheNextHeaderIsNamed) {
  EXPECT_DEATH(
      {
        TwoBlocks t = two_blocks();
        poke_fill(t.a + 24, 'A', 8);  // 8 bytes past a's 24
        brisk_test_fifo_validate(t.fifo);
      },
      "brisk: brisk_fifo_validate\\(0x[0-9a-f]+\\): a block header is garbled");
}

TEST_F(FifoValidatorDeathTest, HeaderLeadingToAnotherPageIsNamed) {
  EXPECT_DEATH(
      {
        TwoBlocks t = two_blocks();
        poke_value<uint32_t>(t.b - kBlockHeader, 4096);  // the page 4096 bytes back
        brisk_test_fifo_validate(t.fifo);
      },
      "brisk_fifo_validate\\(0x[0-9a-f]+\\): a block header does not lead to its page");
}

TEST_F(FifoValidatorDeathTest, SpanPastTheUsedPartIsNamed) {
  EXPECT_DEATH(
      {
        TwoBlocks t = two_blocks();
        poke_value<uint16_t>(t.b - kBlockHeader + 4, 0xffff);  // 1 MiB in a 64 KiB page
        brisk_test_fifo_validate(t.fifo);
      },
      "brisk_fifo_validate\\(0x[0-9a-f]+\\): a block's span runs past its page's used part");
}

// A live block tagged freed without its page's count going down.
TEST_F(FifoValidatorDeathTest, LiveBlockTaggedFreedIsNamed) {
  EXPECT_DEATH(
      {
        TwoBlocks t = two_blocks();
        poke_fill(t.b - 1, 0xd8, 1);
        brisk_test_fifo_validate(t.fifo);
      },
      "brisk_fifo_validate\\(0x[0-9a-f]+\\): a page's count of live blocks disagrees");
}

// A page left behind by a live block is reached only through its blocks
// and the fifo's set of pages: its header garbled (an overflow out of the
// mapping before it would do that) is named all the same.
TEST_F(FifoValidatorDeathTest, GarbledHeaderOfAPageLeftBehindIsNamed) {
  // A 4 KiB page has one color: its header starts the mapping, 40 bytes
  // (8 of them the magic, last) before its first block's header.
  const size_t kMagicBeforeFirstBlock = kBlockHeader + 8;
  EXPECT_DEATH(
      {
        brisk_fifo_t *fifo = brisk_fifo_create(4096);
        auto *a = static_cast<unsigned char *>(brisk_fifo_alloc(fifo, 3000));
        escape(brisk_fifo_alloc(fifo, 3000));  // a second page: the first is left behind
        brisk_test_fifo_validate(fifo);
        poke_value<uint64_t>(a - kMagicBeforeFirstBlock, 0);
        brisk_test_fifo_validate(fifo);
      },
      "brisk_fifo_validate\\(0x[0-9a-f]+\\): a page in the fifo's set of pages is garbled");
}

// One byte written past the last block: the zeroes alloc hands out are gone.
TEST_F(FifoValidatorDeathTest, WritePastTheLastBlockIsNamed) {
  EXPECT_DEATH(
      {
        TwoBlocks t = two_blocks();
        poke_fill(t.b + 24 + 100, 1, 1);
        brisk_test_fifo_validate(t.fifo);
      },
      "brisk_fifo_validate\\(0x[0-9a-f]+\\): a page's free space is not zero");
}

// Debug builds validate from alloc's slow path every 64th time: a header
// garbled in a page the fifo keeps (its page cache) is found with no call
// to the validator, within 64 pages filled.
TEST_F(FifoValidatorDeathTest, DebugBuildsFindCorruptionFromTheSlowPath) {
#if defined(BRISK_DEBUG) && BRISK_DEBUG
  EXPECT_DEATH(
      {
        const size_t page = kMiB;
        brisk_fifo_t *fifo = brisk_fifo_create(page);
        std::vector<void *> a = fill_page(fifo, page, 64 * kKiB);
        std::vector<void *> b = fill_page(fifo, page, 64 * kKiB);
        void *d = brisk_fifo_alloc(fifo, 64 * kKiB);  // current: a third page
        free_all(fifo, a);                            // the spare
        free_all(fifo, b);                            // the page cache
        poke_fill(static_cast<unsigned char *>(b.front()) - kBlockHeader, 0xff, 8);
        brisk_fifo_free(fifo, d);
        // Each alloc finds current full: its slow path resets the empty page.
        for (int i = 0; i < 200; i++) brisk_fifo_free(fifo, brisk_fifo_alloc(fifo, 900 * kKiB));
      },
      "brisk_fifo_validate\\(0x[0-9a-f]+\\): a block header is garbled");
#else
  GTEST_SKIP() << "needs BRISK_DEBUG (on in sanitizer builds)";
#endif
}

// AddressSanitizer catches a use of a block after brisk_fifo_free.
TEST_F(FifoDeathTest, UseAfterFreeIsCaught) {
#if defined(__SANITIZE_ADDRESS__)
  FifoPtr fifo = make_fifo();
  void *keep = brisk_fifo_alloc(fifo.get(), 64);  // the page stays in use
  auto *p = static_cast<unsigned char *>(brisk_fifo_alloc(fifo.get(), 64));
  ASSERT_NE(p, nullptr);
  p[10] = 1;  // fine while the block lives
  brisk_fifo_free(fifo.get(), p);
  EXPECT_DEATH(
      {
        volatile unsigned char *q = p;
        q[10] = 2;
      },
      "use-after-poison");
  // So is a write into a block header, and into the page's free space.
  EXPECT_DEATH(
      {
        volatile unsigned char *q = static_cast<unsigned char *>(keep);
        q[-4] = 2;
      },
      "use-after-poison");
  EXPECT_DEATH(
      {
        volatile unsigned char *q = p;
        q[4096] = 2;
      },
      "use-after-poison");
  brisk_fifo_free(fifo.get(), keep);
#else
  GTEST_SKIP() << "needs AddressSanitizer (-DBRISK_SANITIZE=address)";
#endif
}

}  // namespace
