// Statistics of the general allocator: each count is checked against what
// the test itself did (allocations, frees, remote frees, requested bytes,
// huge blocks), across threads, and through the reset; the JSON and table
// forms are checked for their shape. Runs in every build: the test's own
// mallocs (GoogleTest's) are never brisk's here, only brisk_* calls are.
#include <brisk.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using brisk_test::stats_snapshot;

// The size class of a size, found through the statistics themselves: the
// first class whose block holds it.
size_t ClassOf(const brisk_stats_t &stats, size_t size) {
  for (size_t c = 1; c < BRISK_STATS_CLASSES; c++) {
    if (stats.classes[c].block_size >= size) return c;
  }
  return 0;
}

TEST(Stats, GetRejectsNullAndTooSmallSizes) {
  errno = 0;
  EXPECT_EQ(brisk_stats_get(nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  brisk_stats_t stats;
  stats.size = 4;
  errno = 0;
  EXPECT_EQ(brisk_stats_get(&stats), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST(Stats, AnOlderSmallerStructGetsTheFieldsItKnows) {
  brisk_stats_t whole = stats_snapshot();
  struct {
    brisk_stats_t stats;
    unsigned char guard[64];
  } small;
  std::memset(&small, 0xAB, sizeof small);
  small.stats.size = offsetof(brisk_stats_t, classes);
  ASSERT_EQ(brisk_stats_get(&small.stats), 0);
  EXPECT_EQ(small.stats.size, offsetof(brisk_stats_t, classes));
  EXPECT_EQ(small.stats.version, (uint32_t)BRISK_STATS_VERSION);
  EXPECT_GE(small.stats.general.segments, 0u);
  EXPECT_GE(small.stats.time_ms, whole.time_ms);
  // Nothing written past the size the caller gave.
  const unsigned char *past = reinterpret_cast<const unsigned char *>(&small.stats) +
                              offsetof(brisk_stats_t, classes);
  EXPECT_EQ(past[0], 0xAB);
  EXPECT_EQ(past[100], 0xAB);
}

// region_cache was added at the end: a program built before it gets
// everything up to it and nothing written there; one built with it is told
// (size) that the library filled it.
TEST(Stats, AStructWithoutTheRegionCacheGetsTheRest) {
  brisk_stats_t stats;
  std::memset(&stats, 0xAB, sizeof stats);
  stats.size = offsetof(brisk_stats_t, region_cache);
  ASSERT_EQ(brisk_stats_get(&stats), 0);
  EXPECT_EQ(stats.size, offsetof(brisk_stats_t, region_cache));
  EXPECT_EQ(stats.regions[BRISK_REGION_KINDS - 1].totals.allocations,
            stats_snapshot().regions[BRISK_REGION_KINDS - 1].totals.allocations);
  const unsigned char *past = reinterpret_cast<const unsigned char *>(&stats.region_cache);
  for (size_t i = 0; i < sizeof stats.region_cache; i++) ASSERT_EQ(past[i], 0xAB) << i;
  EXPECT_EQ(stats_snapshot().size, sizeof(brisk_stats_t));
}

TEST(Stats, CountsTheCallingThreadsAllocationsAndFreesExactly) {
  // Run on a fresh thread: its heap starts with nothing folded or pending.
  std::thread([] {
    const size_t kCount = 1000, kSize = 40;
    brisk_stats_t before = stats_snapshot();
    size_t c = ClassOf(before, kSize);
    ASSERT_NE(c, 0u);
    std::vector<void *> blocks(kCount);
    for (auto &p : blocks) p = brisk_malloc(kSize);
    brisk_stats_t during = stats_snapshot();
    EXPECT_EQ(during.classes[c].allocations - before.classes[c].allocations, kCount);
    EXPECT_EQ(during.classes[c].frees - before.classes[c].frees, 0u);
    EXPECT_EQ(during.classes[c].blocks_in_use - before.classes[c].blocks_in_use, kCount);
    EXPECT_EQ(during.general.bytes_requested - before.general.bytes_requested, kCount * kSize);
    EXPECT_GE(during.general.bytes_in_use - before.general.bytes_in_use,
              kCount * during.classes[c].block_size);
    EXPECT_GE(during.classes[c].pages, 1u);
    for (void *p : blocks) brisk_free(p);
    brisk_stats_t after = stats_snapshot();
    EXPECT_EQ(after.classes[c].allocations - before.classes[c].allocations, kCount);
    EXPECT_EQ(after.classes[c].frees - before.classes[c].frees, kCount);
    EXPECT_EQ(after.classes[c].blocks_in_use, before.classes[c].blocks_in_use);
    EXPECT_EQ(after.classes[c].remote_frees, before.classes[c].remote_frees);
    EXPECT_EQ(after.general.allocations - before.general.allocations, kCount);
  }).join();
}

TEST(Stats, MallocFreeLoopsOnOnePageAreCounted) {
  // A malloc/free loop of one block never leaves the fast paths (the head
  // page is pinned): the snapshot must still see every call.
  std::thread([] {
    brisk_stats_t before = stats_snapshot();
    const size_t kLoops = 100000;
    for (size_t i = 0; i < kLoops; i++) {
      void *p = brisk_malloc(24);
      brisk_free(p);
    }
    brisk_stats_t after = stats_snapshot();
    size_t c = ClassOf(before, 24);
    EXPECT_EQ(after.classes[c].allocations - before.classes[c].allocations, kLoops);
    EXPECT_EQ(after.classes[c].frees - before.classes[c].frees, kLoops);
  }).join();
}

TEST(Stats, RemoteFreesAreCountedOnceAtTheOwner) {
  const size_t kCount = 640, kSize = 100;
  std::vector<void *> blocks(kCount);
  brisk_stats_t before, after;
  std::atomic<int> stage{0};
  // The owner stays alive while another thread frees its blocks (an exited
  // owner's heap would be adopted by the freeing thread, making the frees
  // local), then takes them back with brisk_collect.
  std::thread owner([&] {
    before = stats_snapshot();
    for (auto &p : blocks) p = brisk_malloc(kSize);
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    brisk_collect(false);
    after = stats_snapshot();
  });
  while (stage.load() != 1) std::this_thread::yield();
  // The freeing thread's exit posts its batches.
  std::thread([&] {
    for (void *p : blocks) brisk_free(p);
  }).join();
  stage = 2;
  owner.join();
  size_t c = ClassOf(before, kSize);
  EXPECT_EQ(after.classes[c].allocations - before.classes[c].allocations, kCount);
  EXPECT_EQ(after.classes[c].frees - before.classes[c].frees, kCount);
  EXPECT_EQ(after.classes[c].remote_frees - before.classes[c].remote_frees, kCount);
  EXPECT_EQ(after.general.remote_frees - before.general.remote_frees, kCount);
}

TEST(Stats, ASleepingThreadsCallsAreCountedAsTheyStand) {
  // A thread allocates, then frees every other block, and sleeps after each
  // step without calling malloc again: its calls stayed on the fast paths
  // (no fold, no housekeeping), and each snapshot must count them anyway.
  const size_t kCount = 3000, kSize = 200;
  std::vector<void *> blocks(kCount);
  std::atomic<int> stage{0};
  brisk_stats_t before = stats_snapshot();
  std::thread worker([&] {
    for (auto &p : blocks) p = brisk_malloc(kSize);
    stage = 1;
    while (stage.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (size_t i = 0; i < kCount; i += 2) brisk_free(blocks[i]);
    stage = 3;
    while (stage.load() != 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (size_t i = 1; i < kCount; i += 2) brisk_free(blocks[i]);
  });
  size_t c = ClassOf(before, kSize);
  size_t block = before.classes[c].block_size;
  while (stage.load() != 1) std::this_thread::yield();
  brisk_stats_t allocated = stats_snapshot();
  EXPECT_EQ(allocated.classes[c].allocations - before.classes[c].allocations, kCount);
  EXPECT_EQ(allocated.classes[c].blocks_in_use - before.classes[c].blocks_in_use, kCount);
  EXPECT_EQ(allocated.general.bytes_requested - before.general.bytes_requested, kCount * kSize);
  EXPECT_EQ(allocated.general.bytes_in_use - before.general.bytes_in_use, kCount * block);
  stage = 2;
  while (stage.load() != 3) std::this_thread::yield();
  brisk_stats_t half_freed = stats_snapshot();
  EXPECT_EQ(half_freed.classes[c].frees - before.classes[c].frees, kCount / 2);
  EXPECT_EQ(half_freed.classes[c].blocks_in_use - before.classes[c].blocks_in_use, kCount / 2);
  EXPECT_EQ(half_freed.general.bytes_in_use - before.general.bytes_in_use, kCount / 2 * block);
  stage = 4;
  worker.join();
  brisk_stats_t after = stats_snapshot();
  EXPECT_EQ(after.classes[c].frees - before.classes[c].frees, kCount);
  EXPECT_EQ(after.classes[c].blocks_in_use, before.classes[c].blocks_in_use);
}

// A snapshot taken while the owner runs through malloc's heartbeats (every
// 16384 blocks of one size its counts are folded and the count-down starts
// again) counts every malloc made before it began, once, and none that was
// not made when it ended: the fold's sequence count keeps a reader racing
// it from counting a fold's blocks twice or not at all.
TEST(Stats, SnapshotsRacingTheOwnersFoldsCountEachMallocOnce) {
  const size_t kSize = 24;
  // The worker goes on until both are done: however the two threads are
  // scheduled, every snapshot races a worker that is still running.
  const uint64_t kMallocs = static_cast<uint64_t>(brisk_test::scaled(100, 6)) * 16384;
  const uint64_t kSnapshots = brisk_test::scaled(2000, 200);
  const brisk_stats_t before = stats_snapshot();
  const size_t c = ClassOf(before, kSize);
  ASSERT_NE(c, 0u);
  std::atomic<uint64_t> done{0};
  std::atomic<bool> enough_snapshots{false};
  std::thread worker([&] {
    for (uint64_t i = 1; i <= kMallocs || !enough_snapshots.load(std::memory_order_relaxed); i++) {
      void *p = brisk_malloc(kSize);
      brisk_free(p);
      // release: the snapshot that reads i sees malloc number i counted.
      done.store(i, std::memory_order_release);
    }
  });
  uint64_t wrong = 0, first_low = 0, first_counted = 0, first_high = 0;
  for (uint64_t snapshot = 0; snapshot < kSnapshots; snapshot++) {
    uint64_t low = done.load(std::memory_order_acquire);
    brisk_stats_t now = stats_snapshot();
    uint64_t high = done.load(std::memory_order_acquire);
    uint64_t counted = now.classes[c].allocations - before.classes[c].allocations;
    // The worker may have made one malloc more than it has said.
    if (counted < low || counted > high + 1) {
      if (wrong++ == 0) {
        first_low = low;
        first_counted = counted;
        first_high = high;
      }
    }
  }
  enough_snapshots = true;
  worker.join();
  EXPECT_EQ(wrong, 0u) << "of " << kSnapshots << " snapshots; the first counted "
                       << first_counted << " mallocs of " << first_low << ".." << first_high + 1;
  const brisk_stats_t after = stats_snapshot();
  EXPECT_EQ(after.classes[c].allocations - before.classes[c].allocations, done.load());
}

TEST(Stats, ThreadsThatExitedAreCountedExactly) {
  // More threads than cores, on purpose.
  const int kThreads = 8;
  const size_t kPerThread = brisk_test::scaled(20000, 2000);
  brisk_stats_t before = stats_snapshot();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      std::vector<void *> live;
      for (size_t i = 0; i < kPerThread; i++) {
        live.push_back(brisk_malloc(16 + (i * 7 + t) % 2000));
        if (live.size() > 100) {
          brisk_free(live.front());
          live.erase(live.begin());
        }
      }
      for (void *p : live) brisk_free(p);
    });
  }
  for (auto &t : threads) t.join();
  brisk_stats_t after = stats_snapshot();
  EXPECT_EQ(after.general.allocations - before.general.allocations, kThreads * kPerThread);
  EXPECT_EQ(after.general.frees - before.general.frees, kThreads * kPerThread);
  EXPECT_GE(after.general.heaps_abandoned - before.general.heaps_abandoned, (uint64_t)kThreads);
  EXPECT_EQ(after.general.heaps_live, before.general.heaps_live);
}

TEST(Stats, HugeBlocksAreCountedWithTheirMappings) {
  std::thread([] {
    brisk_stats_t before = stats_snapshot();
    const size_t kSize = size_t(6) << 20;
    void *p = brisk_malloc(kSize);
    ASSERT_NE(p, nullptr);
    brisk_stats_t during = stats_snapshot();
    EXPECT_EQ(during.general.huge_blocks - before.general.huge_blocks, 1u);
    EXPECT_GE(during.general.huge_bytes - before.general.huge_bytes, kSize);
    EXPECT_EQ(during.general.huge_allocations - before.general.huge_allocations, 1u);
    EXPECT_GE(during.general.bytes_in_use - before.general.bytes_in_use, kSize);
    EXPECT_GE(during.general.bytes_held, during.general.bytes_in_use);
    EXPECT_EQ(during.general.bytes_requested - before.general.bytes_requested, kSize);
    brisk_free(p);
    brisk_stats_t after = stats_snapshot();
    EXPECT_EQ(after.general.huge_blocks, before.general.huge_blocks);
    EXPECT_EQ(after.general.frees - before.general.frees, 1u);
    brisk_collect(false);  // the cached mapping goes back
    brisk_stats_t collected = stats_snapshot();
    EXPECT_EQ(collected.general.huge_cached_bytes, before.general.huge_cached_bytes);
    EXPECT_GT(collected.os.unmap_calls, before.os.unmap_calls);
  }).join();
}

TEST(Stats, ResetStartsTheCountsAgain) {
  std::thread([] {
    void *keep = brisk_malloc(64);  // a live block: a gauge the reset leaves alone
    brisk_stats_reset();
    brisk_stats_t zero = stats_snapshot();
    EXPECT_EQ(zero.general.allocations, 0u);
    EXPECT_EQ(zero.general.frees, 0u);
    EXPECT_EQ(zero.os.map_calls, 0u);
    EXPECT_GE(zero.general.bytes_in_use, 64u);
    for (int i = 0; i < 10; i++) brisk_free(brisk_malloc(300));
    brisk_stats_t ten = stats_snapshot();
    EXPECT_EQ(ten.general.allocations, 10u);
    EXPECT_EQ(ten.general.frees, 10u);
    brisk_free(keep);
  }).join();
}

// A snapshot reads a running thread's allocations, then the blocks live on
// its pages: mallocs in between count as live but not yet as allocated, so
// its frees (allocations less live blocks) may come out a few lower than
// an earlier snapshot's. Counts since a reset must then read 0, not wrap
// around below the reset's baseline. A thread that mostly allocates, and
// snapshots right after resets.
TEST(Stats, CountsSinceAResetNeverGoBelowZero) {
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::thread worker([&] {
    std::vector<void *> blocks(20000);
    while (!stop.load(std::memory_order_relaxed)) {
      for (void *&p : blocks) p = brisk_malloc(64);
      started.store(true);
      for (void *p : blocks) brisk_free(p);
    }
  });
  while (!started.load()) std::this_thread::yield();
  const int kResets = static_cast<int>(brisk_test::scaled(200, 40));
  uint64_t wrapped = 0, first = 0;
  for (int round = 0; round < kResets; round++) {
    brisk_stats_reset();
    for (int i = 0; i < 20; i++) {
      const brisk_stats_t s = stats_snapshot();
      bool bad = s.general.frees > (uint64_t{1} << 62);
      for (const brisk_class_stats_t &of_class : s.classes) {
        bad |= of_class.frees > (uint64_t{1} << 62) || of_class.allocations > (uint64_t{1} << 62);
      }
      if (bad && wrapped++ == 0) first = s.general.frees;
    }
  }
  stop.store(true);
  worker.join();
  EXPECT_EQ(wrapped, 0u) << "snapshots with a count below the reset's, of " << kResets * 20
                         << "; the first read " << first << " frees";
}

TEST(Stats, PeakCoversWhatWasInUse) {
  std::thread([] {
    brisk_stats_reset();
    const size_t kBytes = size_t(16) << 20;
    std::vector<void *> blocks;
    for (size_t used = 0; used < kBytes; used += 4096) blocks.push_back(brisk_malloc(4000));
    for (void *p : blocks) brisk_free(p);
    brisk_stats_t after = stats_snapshot();
    // Published in steps of at most 256 KiB per heap.
    EXPECT_GE(after.general.bytes_in_use_peak + (size_t(256) << 10), kBytes);
  }).join();
}

// A snapshot's peak counts the blocks it read that the heap has not
// published yet (less than 256 KiB here), and later snapshots keep it: it
// once fell back to 0 when those blocks were freed before the next one.
TEST(Stats, PeakNeverFallsBetweenSnapshots) {
  std::thread([] {
    brisk_stats_reset();
    std::vector<void *> blocks;
    for (int i = 0; i < 3000; i++) blocks.push_back(brisk_malloc(64));
    brisk_stats_t live = stats_snapshot();
    EXPECT_GE(live.general.bytes_in_use_peak, size_t(3000) * 64);
    for (void *p : blocks) brisk_free(p);
    brisk_stats_t after = stats_snapshot();
    EXPECT_GE(after.general.bytes_in_use_peak, live.general.bytes_in_use_peak);
  }).join();
}

// Blocks above 512 KiB (their own mappings) count toward the peak as any
// block does, and the peak keeps them after they are freed: it once added
// the huge bytes live at the snapshot to the peak of the rest, so a program
// whose memory was mostly huge blocks saw its peak fall back as it freed them.
TEST(Stats, PeakKeepsHugeBlocksAfterTheyAreFreed) {
  std::thread([] {
    brisk_stats_reset();
    const size_t kBlock = size_t(4) << 20;
    const int kBlocks = 6;
    void *blocks[kBlocks];
    for (void *&p : blocks) {
      p = brisk_malloc(kBlock);
      ASSERT_NE(p, nullptr);
      std::memset(p, 1, kBlock);
    }
    brisk_stats_t live = stats_snapshot();
    EXPECT_GE(live.general.bytes_in_use_peak, kBlocks * kBlock);
    for (void *p : blocks) brisk_free(p);
    brisk_stats_t after = stats_snapshot();
    EXPECT_LT(after.general.huge_bytes, kBlock);
    EXPECT_GE(after.general.bytes_in_use_peak, kBlocks * kBlock);
    // A reset starts the peak again from what is in use now.
    brisk_stats_reset();
    EXPECT_LT(stats_snapshot().general.bytes_in_use_peak, kBlocks * kBlock);
  }).join();
}

std::string Capture(void (*print)(FILE *)) {
  FILE *file = std::tmpfile();
  print(file);
  std::rewind(file);
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  std::fclose(file);
  return text;
}

TEST(Stats, JsonIsOneObjectOnOneLine) {
  std::thread([] {
    void *p = brisk_malloc(200);
    std::string json = Capture(brisk_stats_json);
    brisk_free(p);
    ASSERT_GE(json.size(), 2u);
    EXPECT_EQ(json.front(), '{');
    EXPECT_EQ(json.substr(json.size() - 2), "}\n");
    EXPECT_EQ(json.find('\n'), json.size() - 1);
    int depth = 0;
    for (char ch : json) {
      depth += ch == '{' || ch == '[';
      depth -= ch == '}' || ch == ']';
      ASSERT_GE(depth, 0);
    }
    EXPECT_EQ(depth, 0);
    for (const char *key : {"\"general\":", "\"os\":", "\"regions\":", "\"classes\":",
                            "\"bytes_in_use\":", "\"bytes_held\":", "\"time_ms\":"}) {
      EXPECT_NE(json.find(key), std::string::npos) << key;
    }
  }).join();
}

TEST(Stats, TableHasUnitsAndTheClassesInUse) {
  std::thread([] {
    void *p = brisk_malloc(3000);
    std::string table = Capture(brisk_stats_print);
    brisk_free(p);
    EXPECT_NE(table.find("brisk statistics"), std::string::npos);
    EXPECT_NE(table.find("in use"), std::string::npos);
    EXPECT_NE(table.find("KiB"), std::string::npos);
    EXPECT_NE(table.find("system calls"), std::string::npos);
  }).join();
}

TEST(Stats, CollectWithForceGivesBackAnIdleThreadsFreePages) {
  BRISK_SKIP_IF(brisk_test::purge_at_once("none are left for brisk_collect"));
  // A thread frees 8 MiB of pages and then waits, alive, never calling
  // malloc again: its free pages wait on the purge delay for a slow path it
  // will not take. brisk_collect(true) from this thread decommits them.
  std::atomic<int> stage{0};
  std::thread idle([&] {
    std::vector<void *> blocks;
    for (int i = 0; i < 2048; i++) blocks.push_back(brisk_malloc(4000));
    for (void *p : blocks) brisk_free(p);
    stage = 1;
    while (stage.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (stage.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // past the purge delay
  brisk_stats_t before = stats_snapshot();
  EXPECT_GE(before.general.pages_committed, 8u) << "the idle thread's pages were purged already";
  EXPECT_TRUE(brisk_collect(true));
  brisk_stats_t after = stats_snapshot();
  EXPECT_LT(after.general.pages_committed, before.general.pages_committed);
  EXPECT_GE(after.general.bytes_purged - before.general.bytes_purged, size_t(4) << 20);
  // Nothing is left to give back: the answer is this call's, so it must be
  // false now (it once compared process-wide counts, which other threads
  // move too).
  EXPECT_FALSE(brisk_collect(true));
  stage = 2;
  idle.join();
}

}  // namespace

namespace {

// brisk_collect(true) decommits other threads' free pages and drops their
// huge caches while those threads take pages and huge mappings from the
// same lists. Threads (more than cores) keep blocks filled with a pattern
// while one thread collects in a loop: a page decommitted while in use, or
// a cached mapping handed out twice, shows as a broken pattern.
TEST(Stats, CollectWithForceRacesSafelyWithBusyThreads) {
  const int kWorkers = 3;
  const long kRounds = brisk_test::scaled(300, 40);
  std::atomic<bool> done{false};
  std::atomic<long> broken{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; t++) {
    workers.emplace_back([&, t] {
      for (long round = 0; round < kRounds; round++) {
        std::vector<std::pair<unsigned char *, size_t>> blocks;
        for (int i = 0; i < 64; i++) {
          // Page-sized blocks retire pages often; every 16th is huge.
          size_t size = i % 16 == 0 ? (size_t(1) << 20) + 4096 * t : 3000 + 64 * i;
          auto *p = static_cast<unsigned char *>(brisk_malloc(size));
          brisk_test::fill_pattern(p, size, brisk_test::block_seed(p, size, round));
          blocks.push_back({p, size});
        }
        for (auto &[p, size] : blocks) {
          if (!brisk_test::pattern_intact(p, size, brisk_test::block_seed(p, size, round))) broken++;
          brisk_free(p);
        }
      }
    });
  }
  std::thread collector([&] {
    while (!done.load()) {
      brisk_collect(true);
      std::this_thread::yield();
    }
  });
  for (auto &w : workers) w.join();
  done = true;
  collector.join();
  EXPECT_EQ(broken.load(), 0);
}

}  // namespace
