// Thread lifetimes and fork: many short-lived threads must not grow RSS
// without bound, allocation must work in thread-exit destructors, and a
// child forked while other threads allocate must be able to allocate.
#include <brisk.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <condition_variable>
#include <atomic>
#include <functional>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "internal_checks.h"
#ifdef BRISK_TEST_SECURE
#include "os_calls.h"
#endif
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::escape;
using brisk_test::fill_pattern;
using brisk_test::kMiB;
using brisk_test::kSanitized;
using brisk_test::pattern_intact;
using brisk_test::scaled;
using brisk_test::Turns;

namespace {

using brisk_test::Block;
using brisk_test::block_intact;
using brisk_test::make_block;

// Mixed sizes from a cheap deterministic sequence: mostly small, every
// tenth up to 128 KiB.
size_t mixed_size(uint64_t i) {
  uint64_t h = brisk_test::mix64(i);
  return (i % 10 == 9) ? 2048 + h % (128 * 1024) : 8 + h % 2048;
}

// One churn thread: ~100 blocks, a third freed here, the rest handed back.
void churn_thread_body(uint64_t cycle, std::vector<Block> &handed_back, long &failures) {
  std::vector<Block> blocks;
  for (uint64_t i = 0; i < 100; i++) {
    Block b = make_block(mixed_size(cycle * 100 + i));
    if (b.p == nullptr) {
      failures++;
      continue;
    }
    blocks.push_back(b);
  }
  for (size_t i = 0; i < blocks.size(); i++) {
    if (i % 3 == 0) {
      failures += !block_intact(blocks[i]);
      brisk_free(blocks[i].p);
    } else {
      handed_back.push_back(blocks[i]);
    }
  }
}

TEST(BriskThreads, CreateExitChurnKeepsRssBounded) {
  const long cycles = scaled(10000, 1000);
  const long checkpoint = 500;
  // A heap leaked per thread (several KiB at the least) over the 9,500
  // cycles after the checkpoint would exceed this.
  const size_t allowed_growth = 16 * kMiB;
  size_t rss_at_checkpoint = 0;
  long failures = 0;
  for (long cycle = 0; cycle < cycles; cycle++) {
    std::vector<Block> handed_back;
    std::thread(churn_thread_body, cycle, std::ref(handed_back), std::ref(failures)).join();
    // The thread is gone: these frees reach pages of an exited thread.
    for (const Block &b : handed_back) {
      failures += !block_intact(b);
      brisk_free(b.p);
    }
    if (cycle + 1 == checkpoint) rss_at_checkpoint = brisk_test::rss_bytes();
  }
  EXPECT_EQ(failures, 0);
  brisk_test_validate_idle_heaps();  // the exited threads' heaps, abandoned or tidied
  if (kSanitized) return;  // shadow memory makes RSS meaningless there
  // A checkpoint never reached would leave 0 here, and the bound below
  // would test nothing but the allowance.
  ASSERT_GT(rss_at_checkpoint, 0u) << "no RSS reading at cycle " << checkpoint;
  const size_t rss_end = brisk_test::rss_bytes();
  std::printf("RSS after %ld cycles: %zu KiB; after %ld: %zu KiB\n", checkpoint,
              rss_at_checkpoint / 1024, cycles, rss_end / 1024);
  EXPECT_LE(rss_end, rss_at_checkpoint + allowed_growth)
      << "after " << checkpoint << " cycles: " << rss_at_checkpoint / 1024 << " KiB; after "
      << cycles << ": " << rss_end / 1024 << " KiB";
}

// Allocation during thread exit, after brisk may have retired the thread's
// heap: a C++ thread_local destructor and a pthread key destructor (its key
// is created after brisk's first use, so it runs after any key brisk made).
std::mutex g_exit_mutex;
std::vector<Block> g_allocated_at_exit;
long g_exit_failures = 0;

void allocate_at_exit(void *block_to_free) {
  Block own = make_block(200);
  Block kept = make_block(3000);
  std::lock_guard<std::mutex> lock(g_exit_mutex);
  if (own.p == nullptr || kept.p == nullptr) {
    g_exit_failures++;
    return;
  }
  g_exit_failures += !block_intact(own);
  brisk_free(own.p);
  brisk_free(block_to_free);
  g_allocated_at_exit.push_back(kept);
}

struct ExitAllocator {
  void *block = nullptr;
  ~ExitAllocator() { allocate_at_exit(block); }
};
thread_local ExitAllocator t_exit_allocator;

pthread_key_t g_exit_key;

// An exiting thread leaves its heap warm for the next thread to adopt: a
// pinned head page per size class it used, and at most 4 MiB of its other
// free pages still backed (heap.c: WARM_FREE_BYTES). Four threads fill 16 MiB each with blocks of every
// class up to 8 KiB, free them and exit together (so none adopts another's
// heap); returns the RSS before them. The RSS while they hold their blocks
// must show the blocks (else the bounds on later readings prove nothing),
// and the RSS right after they exit must show the exit's purge.
size_t exit_four_filled_heaps() {
  constexpr int kThreads = 4;
  constexpr size_t kBytesPerThread = 16 * kMiB;
  const size_t rss_before = brisk_test::rss_bytes();
  std::atomic<int> filled_threads{0}, done{0};
  std::atomic<bool> measured{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&filled_threads, &done, &measured] {
      std::vector<void *> blocks;
      for (size_t n = 0, filled = 0; filled < kBytesPerThread; n++) {
        const size_t size = 16 + (n % 512) * 16;
        void *p = brisk_malloc(size);
        std::memset(p, 1, size);
        blocks.push_back(p);
        filled += size;
      }
      filled_threads.fetch_add(1);
      while (!measured.load()) std::this_thread::yield();
      for (void *p : blocks) brisk_free(p);
      done.fetch_add(1);
      while (done.load() < kThreads) std::this_thread::yield();
    });
  }
  while (filled_threads.load() < kThreads) std::this_thread::yield();
  const size_t rss_filled = brisk_test::rss_bytes();
  measured.store(true);
  for (std::thread &t : threads) t.join();
  EXPECT_GT(rss_filled, rss_before + kThreads * kBytesPerThread / 2)
      << "the threads' blocks do not show in RSS: the bounds on RSS prove nothing";
  const size_t rss_after_exit = brisk_test::rss_bytes();
  EXPECT_LE(rss_after_exit, rss_before + kThreads * kBytesPerThread / 2)
      << "an exiting heap keeps at most 4 MiB of free pages and its head pages backed";
  std::printf("RSS before: %zu KiB; threads filled: %zu KiB; threads exited: %zu KiB\n",
              rss_before / 1024, rss_filled / 1024, rss_after_exit / 1024);
  return rss_before;
}

// The RSS bounds below allow for 64 KiB pages: under BRISK_THP=1 a page
// touched in an empty 2 MiB range may cost the whole huge page.
std::string thp_reason() {
  return brisk_test::option_reason("BRISK_THP", brisk_test::option_value("BRISK_THP", 0, 0, 1), 0,
                                   "RSS counts whole 2 MiB huge pages, past the bounds' allowance");
}

// ... and when no thread adopts those heaps, another thread's slow paths
// (here the main thread's mallocs) tidy them and give the rest back.
TEST(BriskThreads, UnadoptedHeapsGiveTheirMemoryBack) {
  if (kSanitized) GTEST_SKIP() << "shadow memory makes RSS meaningless";
  // The main thread's slow paths below tidy the exited threads' heaps after
  // twice the purge delay: within the 2 s the loop waits at the default.
  const uint64_t delay_ms = brisk_test::stats_snapshot().purge.delay_ms;
  if (delay_ms > 500) {
    GTEST_SKIP() << "BRISK_PURGE_DELAY_MS=" << delay_ms << ": exited threads' heaps are tidied "
                 << "after twice the purge delay, past the 2 s this test waits";
  }
  BRISK_SKIP_IF(thp_reason());
  const size_t rss_before = exit_four_filled_heaps();
  size_t rss_now = brisk_test::rss_bytes();
  // The probe's own pages: a head page for each of its 512 sizes' classes.
  const size_t probe_pages = 6 * kMiB;
  for (int round = 0; round < 200 && rss_now > rss_before + probe_pages; round++) {
    // Slow paths of every size class up to 8 KiB: housekeeping runs.
    std::vector<void *> blocks;
    for (size_t size = 16; size <= 8192; size += 16) blocks.push_back(brisk_malloc(size));
    for (void *p : blocks) brisk_free(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    rss_now = brisk_test::rss_bytes();
  }
  std::printf("later: %zu KiB\n", rss_now / 1024);
  EXPECT_LE(rss_now, rss_before + probe_pages);
}

// brisk_collect tidies them at once, even from a thread that has never
// allocated (and so has no heap of its own).
TEST(BriskThreads, CollectFromAThreadWithoutAHeapTidiesUnadoptedHeaps) {
  if (kSanitized) GTEST_SKIP() << "shadow memory makes RSS meaningless";
  BRISK_SKIP_IF(thp_reason());
  const size_t rss_before = exit_four_filled_heaps();
  std::thread([] { brisk_collect(false); }).join();
  const size_t rss_now = brisk_test::rss_bytes();
  std::printf("after brisk_collect: %zu KiB\n", rss_now / 1024);
  EXPECT_LE(rss_now, rss_before + 3 * kMiB);
}

// Remote frees wait in the freeing thread's outbox until a batch fills (64
// blocks) or that thread reaches a slow path. A thread that frees a few of
// another thread's blocks and then sits idle must not keep them: its
// brisk_collect sends them. The probe: once all 50 blocks of a fresh page are
// back and their owner collects, the page is given back, and asking for the
// size of one of its blocks aborts as a use of a free block.
void free_from_idle_thread(const std::vector<void *> &blocks, bool collect,
                           const std::function<void()> &while_idle) {
  std::atomic<int> stage{0};
  std::thread freer([&] {
    brisk_free(brisk_malloc(1));  // a heap of its own (a heapless thread posts each block alone)
    for (void *p : blocks) brisk_free(p);
    if (collect) brisk_collect(false);
    stage.store(1);
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  while_idle();
  stage.store(2);
  freer.join();
}

std::vector<void *> blocks_of_one_page() {
  std::vector<void *> blocks;
  for (int i = 0; i < 50; i++) blocks.push_back(brisk_malloc(1000));  // the 1 KiB class
  return blocks;
}

TEST(BriskThreadsDeathTest, CollectSendsAnIdleThreadsRemoteFreesHome) {
#ifdef BRISK_TEST_SECURE
  // The secure build tags a block free at the free itself: a block still
  // in another thread's outbox is already known to be free.
  EXPECT_DEATH(
      {
        std::vector<void *> mine = blocks_of_one_page();
        free_from_idle_thread(mine, false, [&] {
          escape(reinterpret_cast<void *>(brisk_usable_size(mine[0])));
        });
      },
      "already free");
  return;
#endif
  // Without brisk_collect in the freeing thread, the blocks stay in its
  // outbox while it idles: their page is still in use.
  std::vector<void *> blocks = blocks_of_one_page();
  free_from_idle_thread(blocks, false, [&] {
    brisk_collect(false);
    EXPECT_EQ(brisk_usable_size(blocks[0]), 1024u);
  });
  EXPECT_DEATH(
      {
        std::vector<void *> mine = blocks_of_one_page();
        free_from_idle_thread(mine, true, [&] {
          brisk_collect(false);
          escape(reinterpret_cast<void *>(brisk_usable_size(mine[0])));
        });
      },
      "already free");
}

size_t mapping_count() {
  FILE *maps = std::fopen("/proc/self/maps", "r");
  size_t lines = 0;
  for (int c; (c = std::fgetc(maps)) != EOF;) lines += c == '\n';
  std::fclose(maps);
  return lines;
}

// glibc frees some of a thread's own memory after every key destructor has
// run (its dlerror buffer, in __libc_thread_freeres); a key destructor may
// free in glibc's last round (PTHREAD_DESTRUCTOR_ITERATIONS, 4). A free
// there must not take a heap again: no later round would abandon it, and
// each such thread would leak one (a mapping and its segments).
pthread_key_t late_key;
thread_local int late_rounds;
thread_local void *late_block;

void late_free(void *) {
  if (++late_rounds < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(late_key, reinterpret_cast<void *>(1));  // again next round
    return;
  }
  brisk_free(late_block);
}

// Blocks of every small size and small aligned blocks, written whole,
// freed by another thread and taken home by their owner: nothing is
// reported (the secure build checks a small block's canary, which may
// share a word with its free tag, in the freeing thread, and a bigger
// block's in the owner), and each comes back for reuse.
TEST(BriskThreads, SmallBlocksFreedByAnotherThreadGoHomeIntact) {
  std::vector<void *> blocks;
  for (size_t size = 0; size <= 80; size++) blocks.push_back(brisk_malloc(size));
  for (size_t alignment : {16, 32, 64}) {
    for (size_t size = 1; size <= 24; size++) blocks.push_back(brisk_aligned_alloc(alignment, size));
  }
  uint64_t remote_before = brisk_test::stats_snapshot().general.remote_frees;
  for (void *p : blocks) {
    ASSERT_NE(p, nullptr);
    std::memset(p, 0xA5, brisk_usable_size(p));
  }
  std::thread([&] {
    for (void *p : blocks) brisk_free(p);
    brisk_collect(false);  // its outbox posted
  }).join();
  brisk_collect(false);  // the owner drains: every block checked and home
  // (std::thread's own state may add one remote free.)
  EXPECT_GE(brisk_test::stats_snapshot().general.remote_frees - remote_before, blocks.size());
}

// The owner's frees refill the list malloc pops, so a thread busy on its
// own blocks may never take malloc's slow path; the heartbeat (every 16384
// blocks of one size) still drains what other threads freed. Here another
// thread frees 1024 blocks of 4 KiB (32 pages or more) while the owner only mallocs
// and frees one 32-byte block: the pages must go back.
TEST(BriskThreads, RemoteFreesGoHomeWhileTheOwnerLoopsOnItsOwnBlocks) {
  constexpr size_t kBlocks = 1024, kSize = 4096;
  const brisk_stats_t before = brisk_test::stats_snapshot();
  std::vector<void *> blocks(kBlocks);
  for (void *&p : blocks) {
    p = brisk_malloc(kSize);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5A, kSize);
  }
  brisk_free(brisk_malloc(32));  // the loop's page, before the remote frees
  // The blocks' class (the secure build pads a request): the one that grew.
  const brisk_stats_t allocated = brisk_test::stats_snapshot();
  size_t class_index = 0, grown = 0;
  for (size_t c = 1; c < BRISK_STATS_CLASSES; c++) {
    size_t growth = allocated.classes[c].pages - before.classes[c].pages;
    if (allocated.classes[c].pages > before.classes[c].pages && growth > grown) {
      class_index = c;
      grown = growth;
    }
  }
  ASSERT_GE(grown, kBlocks * kSize / (128 * 1024)) << "class " << class_index;
  std::thread([&] {
    for (void *p : blocks) brisk_free(p);
    brisk_collect(false);  // its outbox posted
  }).join();
  size_t pages_before = brisk_test::stats_snapshot().classes[class_index].pages;
  ASSERT_EQ(pages_before, allocated.classes[class_index].pages);
  for (int i = 0; i < 3 * 65536; i++) {
    void *p = brisk_malloc(32);
    escape(p);
    brisk_free(p);
  }
  EXPECT_LE(brisk_test::stats_snapshot().classes[class_index].pages,
            before.classes[class_index].pages + 1)
      << "pages of the class before the loop: " << pages_before;
}

// The same for a loop of blocks above 1 KiB, which malloc takes from its
// class's head page past the direct table (the heartbeat there: every 16384
// blocks of one class); the heap must stay whole after the heartbeats drained
// and retired pages under the loop.
TEST(BriskThreads, RemoteFreesGoHomeWhileTheOwnerLoopsOnItsOwnLargerBlocks) {
  constexpr size_t kBlocks = 1024, kSize = 4096, kLoopSize = 2000;
  std::atomic<int> stage{0};
  std::vector<void *> blocks(kBlocks);
  size_t class_index = 0, pages_before = 0, pages_allocated = 0, pages_after = 0;
  // A thread of its own: the loop's class page is its, from the start.
  std::thread owner([&] {
    const brisk_stats_t before = brisk_test::stats_snapshot();
    for (void *&p : blocks) {
      p = brisk_malloc(kSize);
      std::memset(p, 0x5A, kSize);
    }
    brisk_free(brisk_malloc(kLoopSize));  // the loop's page, before the remote frees
    const brisk_stats_t allocated = brisk_test::stats_snapshot();
    size_t grown = 0;
    for (size_t c = 1; c < BRISK_STATS_CLASSES; c++) {
      if (allocated.classes[c].pages > before.classes[c].pages &&
          allocated.classes[c].pages - before.classes[c].pages > grown) {
        class_index = c;
        grown = allocated.classes[c].pages - before.classes[c].pages;
      }
    }
    pages_before = before.classes[class_index].pages;
    pages_allocated = allocated.classes[class_index].pages;
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    for (int i = 0; i < 3 * 65536; i++) {
      void *p = brisk_malloc(kLoopSize);
      escape(p);
      brisk_free(p);
    }
    pages_after = brisk_test::stats_snapshot().classes[class_index].pages;
    brisk_test_validate_own_heap();
  });
  while (stage.load() != 1) std::this_thread::yield();
  std::thread([&] {
    for (void *p : blocks) {
      ASSERT_NE(p, nullptr);
      brisk_free(p);
    }
    brisk_collect(false);  // its outbox posted
  }).join();
  stage = 2;
  owner.join();
  ASSERT_GE(pages_allocated - pages_before, kBlocks * kSize / (128 * 1024));
  EXPECT_LE(pages_after, pages_before + 1) << "pages of the class with the blocks: "
                                           << pages_allocated;
}

// A thread that only frees other threads' blocks (a consumer, a logger)
// posts them in batches of its own, which the owners empty. An owner that
// never posts batches of its own has no use for them, and one that does
// must not make them its own for good: they must come back to the
// consumer, or a consumer of more producers than its batches cover
// (types.h: BRISK_HEAP_BATCHES and BRISK_BATCH_CHUNKS, about 1900) runs out
// and posts every remote free alone, for good.
//
// Each round, 256 live producers each hand the consumer 4 batches' worth of
// blocks and drain them. In a pipeline, each producer also frees 4 batches'
// worth of a sink thread's blocks first, which the sink drains last.
// Returns what the consumer can still take after each round; before the
// first, *before.

std::vector<size_t> consumer_batches_per_round(bool pipeline, int rounds, size_t *before) {
  constexpr int kProducers = 256;
  constexpr size_t kBlocksEach = 4 * 64, kSize = 32;
  std::vector<std::vector<void *>> blocks(kProducers, std::vector<void *>(kBlocksEach));
  std::vector<std::vector<void *>> sink_blocks(kProducers, std::vector<void *>(kBlocksEach));
  Turns turns;
  int allocated = 0, sunk = 0, drained = 0, round_started = 0, round_freed = 0, round_drained = 0;
  std::thread sink([&] {
    for (int round = 1; round <= rounds; round++) {
      if (pipeline) {
        for (auto &of_one : sink_blocks) {
          for (void *&p : of_one) p = brisk_malloc(kSize);
        }
      }
      turns.set(round_started, round);
      turns.wait_for([&] { return drained == round * kProducers; });
      brisk_collect(false);  // its queue drained: it posts nothing, so keeps nothing
      turns.set(round_drained, round);
    }
  });
  std::vector<std::thread> producers;
  for (int i = 0; i < kProducers; i++) {
    producers.emplace_back([&, i] {
      for (int round = 1; round <= rounds; round++) {
        turns.wait_for([&] { return round_started == round; });
        for (void *&p : blocks[i]) p = brisk_malloc(kSize);
        if (pipeline) {
          for (void *p : sink_blocks[i]) brisk_free(p);
          brisk_collect(false);  // nothing left open in its outbox
        }
        turns.count(allocated);
        turns.wait_for([&] { return round_freed == round; });
        brisk_collect(false);  // its queue drained: each batch kept or sent home
        turns.count(drained);
        turns.wait_for([&] { return round_drained == round; });
      }
    });
  }
  std::vector<size_t> left;
  std::thread consumer([&] {
    brisk_free(brisk_malloc(1));  // a heap of its own
    *before = brisk_test_own_batches_left();
    for (int round = 1; round <= rounds; round++) {
      turns.wait_for([&] { return allocated == round * kProducers; });
      for (auto &of_one : blocks) {
        for (void *p : of_one) brisk_free(p);
      }
      brisk_collect(false);  // nothing left open in its outbox
      turns.set(round_freed, round);
      turns.wait_for([&] { return round_drained == round; });
      left.push_back(brisk_test_own_batches_left());
    }
  });
  consumer.join();
  for (auto &t : producers) t.join();
  sink.join();
  return left;
}

TEST(BriskThreads, AConsumerOfManyProducersGetsItsBatchesBack) {
  size_t before = 0;
  std::vector<size_t> left = consumer_batches_per_round(false, 2, &before);
  ASSERT_EQ(left.size(), 2u);
  std::printf("the consumer's batches: %zu before, %zu and %zu after each round\n", before,
              left[0], left[1]);
  ASSERT_GE(before, size_t(256 * 4)) << "too few batches to hand out";
  // (16: batches its own outbox held open at the start.)
  for (size_t after : left) EXPECT_GE(after + 16, before) << "the producers kept its batches";
}

// In a pipeline the producers post too, and may keep the consumer's
// batches for their next posts: those come back from the sink.
TEST(BriskThreads, AConsumerAtTheEndOfAPipelineGetsItsBatchesBack) {
  size_t before = 0;
  std::vector<size_t> left = consumer_batches_per_round(true, 3, &before);
  ASSERT_EQ(left.size(), 3u);
  std::printf("the consumer's batches: %zu before, %zu, %zu and %zu after each round\n", before,
              left[0], left[1], left[2]);
  ASSERT_GE(before, size_t(256 * 4)) << "too few batches to hand out";
  // At most the last round's, kept by the producers for their next posts.
  for (size_t after : left) {
    EXPECT_GE(after + 16 + 256 * 4, before) << "the producers made its batches their own";
  }
}

// Producers that posted batches of their own (to a sink) and then exited:
// nobody will post from their heaps until a thread adopts them, so the
// consumer's batches, emptied on their behalf as it frees their blocks,
// must go back to it.
TEST(BriskThreads, AConsumerOfExitedProducersGetsItsBatchesBack) {
  // Two batches' worth of blocks per producer: the consumer may adopt a heap
  // an earlier test left with part of its batches held elsewhere (the
  // pipeline's consumer had 720 of 1744; under load this one got 971).
  constexpr int kProducers = 256;
  constexpr size_t kBlocksEach = 2 * 64, kSize = 32;
  std::vector<std::vector<void *>> blocks(kProducers, std::vector<void *>(kBlocksEach));
  std::vector<std::vector<void *>> sink_blocks(kProducers, std::vector<void *>(kBlocksEach));
  Turns turns;
  int sink_ready = 0, allocated = 0, sink_done = 0;
  std::thread sink([&] {
    for (auto &of_one : sink_blocks) {
      for (void *&p : of_one) p = brisk_malloc(kSize);
    }
    turns.count(sink_ready);
    turns.wait_for([&] { return sink_done == 1; });
    brisk_collect(false);  // its queue drained
  });
  turns.wait_for([&] { return sink_ready == 1; });
  std::vector<std::thread> producers;
  for (int i = 0; i < kProducers; i++) {
    producers.emplace_back([&, i] {
      for (void *&p : blocks[i]) p = brisk_malloc(kSize);
      for (void *p : sink_blocks[i]) brisk_free(p);
      brisk_collect(false);  // its batches posted to the sink
      turns.count(allocated);
      turns.wait_for([&] { return allocated == kProducers; });  // all alive at once: 256 heaps
    });
  }
  for (auto &t : producers) t.join();
  size_t before = 0, after = 0;
  std::thread([&] {
    brisk_free(brisk_malloc(1));  // a heap of its own (perhaps a producer's, adopted)
    before = brisk_test_own_batches_left();
    for (auto &of_one : blocks) {
      for (void *p : of_one) brisk_free(p);
    }
    brisk_collect(false);  // its outbox posted, and emptied by the exited producers' queues
    after = brisk_test_own_batches_left();
  }).join();
  turns.count(sink_done);
  sink.join();
  std::printf("the consumer's batches: %zu before, %zu after\n", before, after);
  ASSERT_GE(before, size_t(kProducers * 2)) << "too few batches to hand out";
  EXPECT_GE(after + 16, before) << "the exited producers' heaps kept its batches";
}

// A batch posted to a heap just as its thread exits. The exiting thread
// stores the heap's `abandoned` flag, then drains its queue; the poster
// links its batch into the queue, then reads the flag, and drains the heap
// itself if it is set. One of them must see the other's store, or the
// batch waits in the queue of a heap nobody drains, its blocks counted in
// use, until a later free to that heap or its adoption. (x86 let the
// poster's load of the flag pass its link, still in its store buffer,
// before heap.c fenced them.) The window is narrow, so the poster times
// its post by a delay after the owner starts to exit, tuned each round to
// land where the flag is stored: brisk_test_heap_abandoned, just after the
// post, says whether it came late. After each round the heap's queue must
// be empty.
TEST(BriskThreads, ABatchPostedAsItsOwnerExitsIsTakenBack) {
  constexpr int kBatch = 64;  // types.h: BRISK_OUTBOX_BATCH, posted when full
  constexpr size_t kSize = 1000;
  void *blocks[kBatch];
  // 1: the owner's blocks are ready; 2: the poster holds all but one in
  // its outbox, the owner exits; 3: the poster posted the last.
  std::atomic<int> stage{0};
  std::atomic<bool> quit{false};
  std::thread poster([&] {
    brisk_free(brisk_malloc(1));  // a heap of its own, for its outbox
    brisk_test::Rng rng(1);
    unsigned delay = 0;
    while (!quit.load()) {
      if (stage.load() != 1) {
        std::this_thread::yield();
        continue;
      }
      for (int i = 0; i < kBatch - 1; i++) brisk_free(blocks[i]);
      stage.store(2);
      for (volatile unsigned spin = delay + static_cast<unsigned>(rng.below(64)); spin > 0;
           spin = spin - 1) {
      }
      void *last = blocks[kBatch - 1];
      brisk_free(last);  // the batch is full: posted
      if (brisk_test_heap_abandoned(last)) {
        if (delay > 0) delay--;
      } else {
        delay++;
      }
      stage.store(3);
    }
  });
  const long rounds = scaled(100000, 1000);
  long stranded = 0;
  for (long round = 0; round < rounds; round++) {
    std::thread owner([&] {
      for (void *&p : blocks) p = brisk_malloc(kSize);
      stage.store(1);
      // Spins, to exit as soon as the poster is ready; yields when the
      // poster does not run (more threads than cores).
      for (int spin = 0; stage.load() < 2; spin++) {
        if (spin > 1000) std::this_thread::yield();
      }
    });
    owner.join();
    while (stage.load() != 3) std::this_thread::yield();
    stage.store(0);
    // The owner's exit or the poster drained the batch. (A stranded one
    // goes back when the next round's owner adopts the heap.)
    if (!brisk_test_heap_queue_empty(blocks[0])) stranded++;
  }
  quit.store(true);
  poster.join();
  EXPECT_EQ(stranded, 0) << "rounds whose batch stayed queued in the abandoned heap, of " << rounds;
}

TEST(BriskThreads, FreeAfterTheExitHandlerTakesNoHeap) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer ends its own record of a thread in the last destructor
  // round too; instrumented code that runs after it crashes TSan itself.
  GTEST_SKIP() << "ThreadSanitizer cannot run code in the last destructor round";
#endif
  brisk_free(brisk_malloc(1));  // brisk's key exists before ours
  ASSERT_EQ(pthread_key_create(&late_key, late_free), 0);
  auto body = [] {
    late_block = brisk_malloc(100);
    pthread_setspecific(late_key, reinterpret_cast<void *>(1));
    void *more[64];
    for (void *&p : more) p = brisk_malloc(3000);
    for (void *p : more) brisk_free(p);
  };
  for (int i = 0; i < 20; i++) std::thread(body).join();
  const size_t before = mapping_count();
  for (int i = 0; i < 300; i++) std::thread(body).join();
  const size_t after = mapping_count();
  pthread_key_delete(late_key);
  EXPECT_LE(after, before + 20) << "mappings grew from " << before << " to " << after;
}

// A key destructor may allocate in glibc's last round too. The heap that
// malloc takes there must be handed back at once: no later round would
// abandon it, and it would stay owned by a thread that is gone (counted in
// heaps_live for ever, its memory out of every other thread's reach).
std::vector<void *> g_last_round_blocks;

void last_round_malloc(void *) {
  if (++late_rounds < PTHREAD_DESTRUCTOR_ITERATIONS) {
    pthread_setspecific(late_key, reinterpret_cast<void *>(1));  // again next round
    return;
  }
  void *small = brisk_malloc(48);
  void *aligned = brisk_aligned_alloc(256, 1000);
  void *zeroed = brisk_calloc(10, 100);
  void *over_aligned = brisk_aligned_alloc(8192, 100);     // an interior address of a class block
  void *huge_aligned = brisk_aligned_alloc(64, 600 * 1024); // its own mapping
  void *huge = brisk_malloc(1 << 20);
  std::lock_guard<std::mutex> lock(g_exit_mutex);
  for (void *p : {small, aligned, zeroed, over_aligned, huge_aligned, huge}) {
    if (p != nullptr) std::memset(p, 0x5A, 48);
    g_last_round_blocks.push_back(p);
  }
}

TEST(BriskThreads, MallocInTheLastDestructorRoundKeepsNoHeap) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot run code in the last destructor round";
#endif
  brisk_free(brisk_malloc(1));  // brisk's key exists before ours
  ASSERT_EQ(pthread_key_create(&late_key, last_round_malloc), 0);
  const size_t live_before = brisk_test::stats_snapshot().general.heaps_live;
  constexpr int kThreads = 50;
  for (int i = 0; i < kThreads; i++) {
    std::thread([] {
      brisk_free(brisk_malloc(100));
      pthread_setspecific(late_key, reinterpret_cast<void *>(1));
    }).join();
  }
  pthread_key_delete(late_key);
  const size_t live_after = brisk_test::stats_snapshot().general.heaps_live;
  EXPECT_EQ(g_last_round_blocks.size(), 6u * kThreads);
  for (void *p : g_last_round_blocks) {
    EXPECT_NE(p, nullptr);
    brisk_free(p);
  }
  g_last_round_blocks.clear();
  EXPECT_LE(live_after, live_before) << "heaps kept by exited threads";
}

TEST(BriskThreads, AllocationInThreadExitDestructors) {
  brisk_free(brisk_malloc(1));  // make sure brisk has set up whatever it keeps per thread
  ASSERT_EQ(pthread_key_create(&g_exit_key, allocate_at_exit), 0);
  const long cycles = scaled(300, 50);
  for (long i = 0; i < cycles; i++) {
    std::thread([] {
      t_exit_allocator.block = brisk_malloc(64);
      void *p = brisk_malloc(64);
      pthread_setspecific(g_exit_key, p);
    }).join();
    std::lock_guard<std::mutex> lock(g_exit_mutex);
    for (const Block &b : g_allocated_at_exit) {
      g_exit_failures += !block_intact(b);
      brisk_free(b.p);
    }
    g_allocated_at_exit.clear();
  }
  pthread_key_delete(g_exit_key);
  EXPECT_EQ(g_exit_failures, 0);
}

// Blocks published by the hammer threads. Whoever swaps a block out of a
// slot frees it, so blocks are freed by threads other than their owner (and,
// in a forked child, owned by threads that do not exist there).
constexpr int kSlots = 512;
std::atomic<void *> g_slots[kSlots];

size_t slot_block_size(int slot) { return 16 + static_cast<size_t>(slot) * 37; }

// Empty every slot, freeing each block after checking it; returns the
// failures.
long drain_slots() {
  long failures = 0;
  for (int slot = 0; slot < kSlots; slot++) {
    void *p = g_slots[slot].exchange(nullptr);
    if (p == nullptr) continue;
    failures += !block_intact({p, slot_block_size(slot)});
    brisk_free(p);
  }
  return failures;
}

// Put a new block of the slot's size into the slot and free the block it
// held, after checking it; returns the failures (0 or 1 each).
long swap_into_slot(int slot) {
  Block shared = make_block(slot_block_size(slot));
  if (shared.p == nullptr) return 1;
  void *old = g_slots[slot].exchange(shared.p, std::memory_order_acq_rel);
  if (old == nullptr) return 0;
  long failures = !block_intact({old, slot_block_size(slot)});
  brisk_free(old);
  return failures;
}

// Hammer threads count their iterations here, so forks land mid-activity.
std::atomic<long> g_hammer_progress{0};
// How often a hammer makes a block of several MiB, and how many iterations
// the hammers make between forks (filling big blocks is slow under TSan).
const uint64_t kHammerHugeEvery = scaled(64, 512);
const long kHammerStepsPerFork = scaled(2000, 300);

void hammer(int id, const std::atomic<bool> &stop, std::atomic<long> &failures) {
  uint64_t i = static_cast<uint64_t>(id) << 32;
  while (!stop.load(std::memory_order_relaxed)) {
    i++;
    g_hammer_progress.fetch_add(1, std::memory_order_relaxed);
    // Some local pairs across all size ranges, up to several MiB.
    size_t size = (i % kHammerHugeEvery == 0) ? kMiB + brisk_test::mix64(i) % (7 * kMiB) : mixed_size(i);
    Block b = make_block(size);
    if (b.p == nullptr) {
      failures++;
      continue;
    }
    failures += !block_intact(b);
    brisk_free(b.p);

    failures += swap_into_slot(static_cast<int>(brisk_test::mix64(i) % kSlots));
  }
}

// What a forked child does; its exit code says what went wrong.
enum ChildStatus { kChildOk = 0, kChildNull = 1, kChildCorrupt = 2, kChildThreadFailed = 3 };

// The child's own bookkeeping stays off the C library's malloc (a fixed
// array, not a vector): under a sanitizer that malloc is the sanitizer's,
// whose locks are not held across fork and may be left locked (GCC 12's
// ASan was seen deadlocking there), and only brisk is under test here.
constexpr uint64_t kChildBlocks = 4000;

int allocate_and_free_many() {
  std::array<Block, kChildBlocks> blocks;
  size_t live = 0;
  const uint64_t count = scaled(kChildBlocks, 1000);
  for (uint64_t i = 0; i < count; i++) {
    size_t size = (i % 500 == 0) ? 4 * kMiB + i : mixed_size(i);
    Block b = make_block(size);
    if (b.p == nullptr) return kChildNull;
    blocks[live++] = b;
    if (i % 3 == 0) {
      // Free a random earlier block, so freed blocks get reused.
      size_t victim = brisk_test::mix64(i) % live;
      if (!block_intact(blocks[victim])) return kChildCorrupt;
      brisk_free(blocks[victim].p);
      blocks[victim] = blocks[--live];
    }
  }
  for (size_t k = 0; k < live; k++) {
    if (!block_intact(blocks[k])) return kChildCorrupt;
    brisk_free(blocks[k].p);
  }
  return kChildOk;
}

[[noreturn]] void child_main() {
  alarm(10);  // a deadlocked child dies of SIGALRM instead of hanging the test
  // Blocks of threads that were not copied into this process: just free them
  // (their contents were written by threads racing with the fork).
  for (std::atomic<void *> &slot : g_slots) brisk_free(slot.exchange(nullptr));
  int status = allocate_and_free_many();
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
  // TSan does not support starting threads in the child of a multi-threaded
  // process, and ASan's thread start allocates from its own allocator, whose
  // locks another parent thread may have held at the fork (seen deadlocking:
  // AsanThread::Init -> free -> SizeClassAllocator64 lock). Elsewhere check
  // that a new thread in the child can allocate.
  if (status == kChildOk) {
    std::thread([&status] {
      if (allocate_and_free_many() != kChildOk) status = kChildThreadFailed;
    }).join();
  }
#endif
  _exit(status);
}

TEST(BriskThreads, ForkWhileOtherThreadsAllocate) {
  std::atomic<bool> stop{false};
  std::atomic<long> failures{0};
  std::vector<std::thread> hammers;
  for (int id = 0; id < 4; id++) {
    hammers.emplace_back(hammer, id, std::cref(stop), std::ref(failures));
  }
  for (int i = 0; i < 20; i++) {
    // Let the hammers make progress (and fill slots) before each fork.
    const long target = g_hammer_progress.load() + kHammerStepsPerFork;
    while (g_hammer_progress.load() < target) std::this_thread::yield();
    pid_t pid = fork();
    if (pid == -1) {
      ADD_FAILURE() << "fork failed: " << std::strerror(errno);
      break;  // still stop and join the hammers below
    }
    if (pid == 0) child_main();
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "waitpid failed: " << std::strerror(errno);
      break;
    }
    if (WIFSIGNALED(status)) {
      ADD_FAILURE() << "fork " << i << ": child killed by signal " << WTERMSIG(status)
                    << (WTERMSIG(status) == SIGALRM ? " (deadlocked: alarm fired)" : "");
    } else {
      EXPECT_EQ(WEXITSTATUS(status), kChildOk) << "fork " << i;
    }
  }
  stop = true;
  for (std::thread &t : hammers) t.join();
  failures += drain_slots();
  EXPECT_EQ(failures, 0);
}


// fork() while threads exit and adopt heaps all the time, with the tidy of
// abandoned heaps due on every slow path (purge delay 0): a thread that
// holds a heap's drain_lock (draining its exiting heap, tidying the warm
// heap it adopts, or a stale one) retires pages, and a page retire runs the
// tidy pass, which takes heaps_lock; fork_prepare holds heaps_lock while it
// waits for every drain_lock. A tidy pass that waited for heaps_lock there
// deadlocked the parent inside fork() (seen within 15 to 70 forks); the
// alarm turns that hang into a failure.
TEST(BriskThreads, ForkWhileThreadsExitAndTidyAbandonedHeaps) {
  const uint64_t old_delay = brisk_test_set_purge_delay_ms(0);
  std::atomic<bool> stop{false};
  std::atomic<long> failures{0};
  std::atomic<long> exits{0};
  auto short_lived = [&failures, &exits](uint64_t seed) {
    Block mine[32];
    for (int k = 0; k < 32; k++) {
      mine[k] = make_block(mixed_size(seed + k));
      if (mine[k].p == nullptr) failures++;
    }
    // Swap some through the slots, so that exiting threads' blocks are freed
    // by others, and other heaps' blocks by this one.
    for (int k = 0; k < 32; k += 2) {
      if (mine[k].p == nullptr) continue;
      failures += swap_into_slot(static_cast<int>(brisk_test::mix64(seed + k) % kSlots));
    }
    for (Block &b : mine) {
      if (b.p == nullptr) continue;
      failures += !block_intact(b);
      brisk_free(b.p);
    }
    exits.fetch_add(1, std::memory_order_relaxed);
  };
  std::vector<std::thread> churners;
  for (int id = 0; id < 4; id++) {
    churners.emplace_back([&stop, &short_lived, id] {
      uint64_t seed = static_cast<uint64_t>(id) << 40;
      while (!stop.load(std::memory_order_relaxed)) {
        std::thread a(short_lived, seed += 64), b(short_lived, seed += 64);
        a.join();
        b.join();
      }
    });
  }
  alarm(120);  // a parent deadlocked in fork() dies of SIGALRM instead of hanging
  const int forks = static_cast<int>(scaled(150, 40));
  for (int i = 0; i < forks; i++) {
    const long target = exits.load() + 8;
    while (exits.load() < target) std::this_thread::yield();
    pid_t pid = fork();
    if (pid == -1) {
      ADD_FAILURE() << "fork failed: " << std::strerror(errno);
      break;
    }
    if (pid == 0) {
      alarm(10);
      void *p = brisk_malloc(100);
      _exit(p == nullptr ? kChildNull : kChildOk);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
      ADD_FAILURE() << "waitpid failed: " << std::strerror(errno);
      break;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kChildOk) << "fork " << i;
  }
  alarm(0);
  stop = true;
  for (std::thread &t : churners) t.join();
  failures += drain_slots();
  brisk_test_set_purge_delay_ms(old_delay);
  EXPECT_EQ(failures, 0);
}

}  // namespace

// free()'s fast path takes a block as the calling thread's when its
// segment's owner_thread is the caller's thread pointer. glibc hands an
// exited thread's stack, and so its thread pointer, to later threads (and a
// forked child's new threads may get those of the parent's other threads),
// so a heap's segments must stop naming a thread once it no longer owns
// the heap.
TEST(BriskThreads, ASegmentNamesOnlyTheThreadThatOwnsItsHeapNow) {
  void *mine = brisk_malloc(64);
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(brisk_test_owner_thread(mine), brisk_test_thread_id());

  void *theirs = nullptr;
  uintptr_t their_id = 0;
  std::thread([&] {
    theirs = brisk_malloc(64);
    their_id = brisk_test_thread_id();
    EXPECT_EQ(brisk_test_owner_thread(theirs), their_id);
  }).join();
  ASSERT_NE(theirs, nullptr);
  EXPECT_NE(their_id, brisk_test_thread_id());
  EXPECT_EQ(brisk_test_owner_thread(theirs), 0u) << "the exited thread still owns its heap's segments";

  // A later thread may adopt that heap: then the segments name it.
  std::thread([&] {
    void *next = brisk_malloc(64);
    uintptr_t owner = brisk_test_owner_thread(theirs);
    EXPECT_TRUE(owner == 0 || owner == brisk_test_thread_id()) << owner;
    brisk_free(next);
  }).join();
  brisk_free(theirs);

  // fork while another thread owns a heap: in the child that thread is gone.
  std::mutex gate;
  gate.lock();
  void *held = nullptr;
  std::atomic<bool> ready{false};
  std::thread holder([&] {
    held = brisk_malloc(64);
    ready = true;
    std::lock_guard<std::mutex> wait(gate);
  });
  while (!ready) std::this_thread::yield();
  ASSERT_NE(brisk_test_owner_thread(held), 0u);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    bool ok = brisk_test_owner_thread(held) == 0 && brisk_test_owner_thread(mine) == brisk_test_thread_id();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "in the child, the parent's other thread still owns its heap's segments";
  gate.unlock();
  holder.join();
  brisk_free(held);
  brisk_free(mine);
}

#ifdef BRISK_TEST_SECURE
namespace {

// The protection of the mapping that holds address ("rw-p", "---p"), or ""
// where nothing is mapped.
std::string protection_at(uintptr_t address) {
  FILE *maps = std::fopen("/proc/self/maps", "r");
  char line[4096];
  std::string found;
  while (found.empty() && std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long start = 0, end = 0;
    char protection[8] = "";
    if (std::sscanf(line, "%lx-%lx %7s", &start, &end, protection) == 3 && start <= address &&
        address < end) {
      found = protection;
    }
  }
  std::fclose(maps);
  return found;
}

// What lies just before and just after [start, start + size), where the
// secure build must have put no-access pages; "" when both are "---p".
// (A huge block's mapping ends in its guard: the caller passes the mapping
// less its last page.)
std::string unguarded_sides(const char *what, uintptr_t start, size_t size) {
  std::string before = protection_at(start - 1), after = protection_at(start + size);
  if (before == "---p" && after == "---p") return "";
  char at[32];
  std::snprintf(at, sizeof at, " at %#lx", static_cast<unsigned long>(start));
  return std::string(what) + at + ": before it '" + before + "', after it '" + after + "'\n";
}

}  // namespace

// The secure build keeps its metadata between no-access pages, however the
// kernel placed the mappings around it: each thread's heap (its direct
// table and queues), each segment of pages (its header at the start,
// blocks up to its last byte) and each huge block's mapping (its header at
// the start) have a no-access page just before and just after them, so no
// overflow out of a neighbouring mapping reaches them and none runs out of
// a segment's last block into the next mapping. More threads than cores,
// each with its own heap and segments of every kind.
TEST(BriskSecureLayout, HeapsAndSegmentsLieBetweenNoAccessPages) {
  constexpr int kThreads = 8;
  std::mutex mutex;
  std::string failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      std::string mine;
      uintptr_t start = 0;
      size_t size = 0;
      // Small, medium and large classes: one segment of each kind.
      void *blocks[] = {brisk_malloc(1000), brisk_malloc(20000), brisk_malloc(200000)};
      brisk_test_heap_mapping(&start, &size);
      mine += unguarded_sides("the heap", start, size);
      for (void *block : blocks) {
        brisk_test_segment_mapping(block, &start, &size);
        mine += unguarded_sides("a segment", start, size);
      }
      void *huge = brisk_malloc(4 * kMiB);
      brisk_test_segment_mapping(huge, &start, &size);
      mine += unguarded_sides("a huge block's mapping", start, size - sysconf(_SC_PAGESIZE));
      brisk_free(huge);
      for (void *block : blocks) brisk_free(block);
      std::lock_guard<std::mutex> lock(mutex);
      failures += mine;
    });
  }
  for (std::thread &thread : threads) thread.join();
  EXPECT_EQ(failures, "");
}

// Allocates `size` until an allocation meets the injected refusals (the
// guard pages' mprotect, kind OTHER: after `skip` calls, every one), then
// checks that it failed with ENOMEM and left no more mapped than before
// (it may have given back free memory before it gave up); frees the rest.
void expect_refused_guard_maps_nothing(size_t size, uint64_t skip) {
  std::vector<void *> blocks;
  uint64_t refused = brisk_test_os_injected_failures();
  brisk_test_os_fail(BRISK_TEST_OS_OTHER, skip, BRISK_TEST_OS_FAIL_ALWAYS);
  bool met = false;
  while (!met && blocks.size() < 4096) {
    size_t mapped = brisk_test_os_bytes_mapped();
    errno = 0;
    void *p = brisk_malloc(size);
    met = brisk_test_os_injected_failures() != refused;
    if (met) {
      EXPECT_EQ(p, nullptr) << size << " B, guard call " << skip;
      EXPECT_EQ(errno, ENOMEM);
      EXPECT_LE(brisk_test_os_bytes_mapped(), mapped) << size << " B, guard call " << skip;
    }
    if (p != nullptr) blocks.push_back(p);
  }
  brisk_test_os_fail_none();
  EXPECT_TRUE(met) << size << " B: no guard page was asked for";
  for (void *p : blocks) brisk_free(p);
}

// Guard pages the kernel refuses: the segment (from its lower guard, its
// upper guard or its header page's guard on) or the huge block's mapping
// (from its lower guard or its last page on) goes back whole each time,
// and malloc fails with ENOMEM.
TEST(BriskSecureLayout, ARefusedGuardPageFailsTheAllocationAndMapsNothing) {
  for (uint64_t skip = 0; skip < 3; skip++) expect_refused_guard_maps_nothing(200000, skip);
  for (uint64_t skip = 0; skip < 2; skip++) expect_refused_guard_maps_nothing(40 * kMiB + 4096, skip);
}

// Whether the last page of the huge block p's mapping is its no-access guard.
bool huge_block_guarded(const void *p) {
  uintptr_t start = 0;
  size_t size = 0;
  brisk_test_segment_mapping(p, &start, &size);
  return protection_at(start + size - sysconf(_SC_PAGESIZE)) == "---p";
}

// A realloc that resizes a huge block's mapping and then meets a refused
// guard page (the kernel at its limit of mappings) cannot undo the resize:
// the block, moved or not, stays the program's, whole and writable, only
// without its guard. Freed, such a mapping is not cached (a later block
// would be handed out without a guard): the next block of that size gets
// a guarded mapping. Its own thread, after a collect, so that no cached
// mapping of another test's serves the requests.
TEST(BriskSecureLayout, AHugeBlockWhoseResizeMeetsARefusedGuardKeepsItsContents) {
  std::thread([] {
    brisk_collect(false);
    constexpr size_t kOld = 8 * kMiB, kNew = 20 * kMiB;
    void *p = brisk_malloc(kOld);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(huge_block_guarded(p));
    fill_pattern(p, kOld, 7);
    uint64_t refused = brisk_test_os_injected_failures();
    brisk_test_os_fail(BRISK_TEST_OS_OTHER, 0, 1);
    void *q = brisk_realloc(p, kNew);
    brisk_test_os_fail_none();
    ASSERT_EQ(brisk_test_os_injected_failures(), refused + 1) << "the resize asked for no guard";
    ASSERT_NE(q, nullptr);
    EXPECT_TRUE(pattern_intact(q, kOld, 7));
    EXPECT_FALSE(huge_block_guarded(q));
    fill_pattern(q, kNew, 8);
    EXPECT_TRUE(pattern_intact(q, kNew, 8));
    EXPECT_GE(brisk_usable_size(q), kNew);
    brisk_free(q);
    void *r = brisk_malloc(kNew);
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(huge_block_guarded(r));
    brisk_free(r);
  }).join();
}

// A cached mapping grown for a bigger block whose new guard is refused is
// a free mapping without its guard: it goes back to the system, once, and
// the block gets a fresh mapping, guarded. The OS layer's count of mapped
// bytes shows a second unmap of the same mapping.
TEST(BriskSecureLayout, ACachedMappingWhoseGrowthMeetsARefusedGuardIsLetGoOnce) {
  std::thread([] {
    brisk_collect(false);
    void *p = brisk_malloc(4 * kMiB);
    ASSERT_NE(p, nullptr);
    uintptr_t start = 0;
    size_t cached_size = 0;
    brisk_test_segment_mapping(p, &start, &cached_size);
    brisk_free(p);
    size_t mapped = brisk_test_os_bytes_mapped();
    uint64_t refused = brisk_test_os_injected_failures();
    brisk_test_os_fail(BRISK_TEST_OS_OTHER, 0, 1);
    void *q = brisk_malloc(12 * kMiB);
    brisk_test_os_fail_none();
    ASSERT_EQ(brisk_test_os_injected_failures(), refused + 1)
        << "the cached mapping was not grown (was it cached?)";
    ASSERT_NE(q, nullptr);
    EXPECT_TRUE(huge_block_guarded(q));
    size_t new_size = 0;
    brisk_test_segment_mapping(q, &start, &new_size);
    EXPECT_EQ(brisk_test_os_bytes_mapped(), mapped - cached_size + new_size);
    fill_pattern(q, 12 * kMiB, 9);
    EXPECT_TRUE(pattern_intact(q, 12 * kMiB, 9));
    brisk_free(q);
  }).join();
}
#endif
