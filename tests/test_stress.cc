// Multi-threaded stress: more threads than cores allocate random sizes, write
// a pattern naming each block, pass half of their blocks to a neighbour (so
// half of all frees are cross-thread) and check every block just before it
// is freed. In release builds RSS must fall well below the peak at the end.
#include <brisk.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "internal_checks.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::fill_pattern;
using brisk_test::find_pattern_mismatch;
using brisk_test::kMiB;
using brisk_test::kSanitized;
using brisk_test::scaled;
using brisk_test::Rng;

namespace {

constexpr int kThreads = 8;  // the test machine has 2 cores: oversubscribe
const long kRounds = scaled(200, 60);
const long kBlocksPerRound = scaled(2000, 600);
// Live bytes each thread builds up once, mid-run, for the RSS peak.
const size_t kPeakBytesPerThread = kSanitized ? 4 * kMiB : 48 * kMiB;

struct Block {
  void *p;
  size_t size;
  uint64_t serial;  // unique per allocation: part of the pattern's seed
};

// Mostly 8..1024 B, some up to 64 KiB, a few up to 1 MiB.
size_t random_size(Rng &rng) {
  size_t pick = rng.below(1000);
  if (pick < 900) return 8 + rng.below(1024 - 8 + 1);
  if (pick < 990) return 1025 + rng.below(64 * 1024 - 1024);
  return 64 * 1024 + 1 + rng.below(kMiB - 64 * 1024);
}

// A lock-protected inbox: the only way blocks travel between threads.
class Inbox {
 public:
  void put(std::vector<Block> &&batch) {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.insert(blocks_.end(), batch.begin(), batch.end());
  }
  std::vector<Block> take_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(blocks_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<Block> blocks_;
};

class StressRun {
 public:
  StressRun() {
    pthread_barrier_init(&peak_reached_, nullptr, kThreads + 1);
    pthread_barrier_init(&peak_measured_, nullptr, kThreads + 1);
    pthread_barrier_init(&all_sent_, nullptr, kThreads);
  }
  ~StressRun() {
    pthread_barrier_destroy(&peak_reached_);
    pthread_barrier_destroy(&peak_measured_);
    pthread_barrier_destroy(&all_sent_);
  }

  void start() {
    for (int i = 0; i < kThreads; i++) threads_.emplace_back([this, i] { worker(i); });
  }
  // Called by the main thread: returns once every worker holds its peak.
  void wait_for_peak() { pthread_barrier_wait(&peak_reached_); }
  void release_peak() { pthread_barrier_wait(&peak_measured_); }
  void join() {
    for (std::thread &t : threads_) t.join();
  }

  long failures() const { return failures_.load(); }

 private:
  void fail(const char *what, const Block &b, size_t offset) {
    // Report the first few in detail; one corruption often causes many.
    if (failures_.fetch_add(1) < 5) {
      ADD_FAILURE() << what << ": block " << b.p << " size " << b.size << " serial " << b.serial
                    << " first bad byte at offset " << offset;
    }
  }

  bool allocate(int thread, Rng &rng, uint64_t &serial, std::vector<Block> &live) {
    Block b;
    b.size = random_size(rng);
    b.serial = (static_cast<uint64_t>(thread) << 48) | ++serial;
    b.p = brisk_malloc(b.size);
    if (b.p == nullptr) {
      fail("brisk_malloc returned NULL", b, 0);
      return false;
    }
    if (brisk_usable_size(b.p) < b.size) fail("usable size below the request", b, 0);
    fill_pattern(b.p, b.size, block_seed(b.p, b.size, b.serial));
    live.push_back(b);
    return true;
  }

  void check_and_free(const Block &b) {
    size_t bad = find_pattern_mismatch(b.p, b.size, block_seed(b.p, b.size, b.serial));
    if (bad != b.size) fail("pattern overwritten before free", b, bad);
    brisk_free(b.p);
  }

  // Half of `live`, picked at random, goes to the next thread; this thread
  // then frees what it was sent and the half it kept.
  void exchange_and_free(int thread, Rng &rng, std::vector<Block> &live) {
    for (size_t i = live.size(); i > 1; i--) std::swap(live[i - 1], live[rng.below(i)]);
    std::vector<Block> outgoing(live.begin(), live.begin() + live.size() / 2);
    live.erase(live.begin(), live.begin() + live.size() / 2);
    inboxes_[(thread + 1) % kThreads].put(std::move(outgoing));
    for (const Block &b : inboxes_[thread].take_all()) check_and_free(b);
    for (const Block &b : live) check_and_free(b);
    live.clear();
  }

  void worker(int thread) {
    Rng rng(0x5eed0000 + thread);
    uint64_t serial = 0;
    std::vector<Block> live;
    for (long round = 0; round < kRounds; round++) {
      if (round == kRounds / 2) {
        size_t bytes = 0;
        while (bytes < kPeakBytesPerThread && allocate(thread, rng, serial, live)) {
          bytes += live.back().size;
        }
        brisk_test_validate_own_heap();  // a quiet point: every block is live
        pthread_barrier_wait(&peak_reached_);
        pthread_barrier_wait(&peak_measured_);
      } else {
        for (long i = 0; i < kBlocksPerRound; i++) allocate(thread, rng, serial, live);
      }
      exchange_and_free(thread, rng, live);
    }
    // Blocks may arrive after a thread's last round: drain once all are sent.
    pthread_barrier_wait(&all_sent_);
    for (const Block &b : inboxes_[thread].take_all()) check_and_free(b);
    brisk_test_validate_own_heap();
  }

  Inbox inboxes_[kThreads];
  std::vector<std::thread> threads_;
  pthread_barrier_t peak_reached_, peak_measured_, all_sent_;
  std::atomic<long> failures_{0};
};

TEST(BriskStress, CrossThreadFreesKeepEveryBlockIntactAndRssFalls) {
  const size_t rss_baseline = brisk_test::rss_bytes();
  StressRun run;
  run.start();
  run.wait_for_peak();
  const size_t rss_peak = brisk_test::rss_bytes();
  run.release_peak();
  run.join();
  brisk_test_validate_idle_heaps();  // the workers' heaps, abandoned now
  const size_t rss_after = brisk_test::rss_bytes();

  EXPECT_EQ(run.failures(), 0);

  if (kSanitized) return;  // shadow memory makes RSS meaningless there
  std::printf("RSS: baseline %zu MiB, peak %zu MiB, after the final free %zu MiB\n",
              rss_baseline / kMiB, rss_peak / kMiB, rss_after / kMiB);
  const size_t live_at_peak = kThreads * kPeakBytesPerThread;
  ASSERT_GT(rss_peak, rss_baseline + live_at_peak / 2)
      << "the peak phase did not make RSS grow; the RSS check below would prove nothing";
  const long long grown_at_peak = static_cast<long long>(rss_peak - rss_baseline);
  const long long grown_after = static_cast<long long>(rss_after) - static_cast<long long>(rss_baseline);
  EXPECT_LT(grown_after, grown_at_peak / 2)
      << "baseline " << rss_baseline / kMiB << " MiB, peak " << rss_peak / kMiB << " MiB, after "
      << rss_after / kMiB << " MiB";
}

// Purging that learns (segment.c) with delays short enough that every path
// runs many times (a base of 1 ms, a maximum of 30 ms): waves of threads
// grow and shrink their memory in pages of every kind, some sleeping
// between rounds, and exit (their heaps abandoned, adopted by the next
// wave), while another thread purges every heap at once over and over
// (brisk_collect(true), from outside under each heap's memory lock) and
// takes snapshots. Each heap stays whole at quiet points.
TEST(BriskStress, PurgesWhileHeapsLearnAndAnotherThreadCollects) {
  const uint64_t old_delay = brisk_test_set_purge_delay_ms(1);
  const uint64_t old_max = brisk_test_set_purge_delay_max_ms(30);
  std::atomic<bool> done{false};
  std::thread collector([&] {
    while (!done.load()) {
      brisk_collect(true);
      brisk_test::stats_snapshot();
      std::this_thread::yield();
    }
  });
  std::atomic<long> failures{0};
  const int kWaves = static_cast<int>(scaled(6, 3));
  for (int wave = 0; wave < kWaves; wave++) {
    std::vector<std::thread> workers;
    for (int t = 0; t < 6; t++) {
      workers.emplace_back([&, t, wave] {
        Rng rng(0xabc000 + wave * 16 + t);
        const size_t sizes[] = {100, 4000, 40000, 300000};  // every kind of page
        std::vector<void *> live;
        for (int round = 0; round < 200; round++) {
          const size_t count = 1 + rng.below(200), size = sizes[rng.below(4)];
          for (size_t i = 0; i < count; i++) {
            void *p = brisk_malloc(size);
            if (p == nullptr) {
              failures++;
              continue;
            }
            std::memset(p, 1, std::min<size_t>(size, 4096));
            live.push_back(p);
          }
          const size_t keep = rng.below(live.size() + 1);
          for (size_t i = keep; i < live.size(); i++) brisk_free(live[i]);
          live.resize(keep);
          if (rng.below(8) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng.below(5)));
          if (round % 50 == 0) brisk_test_validate_own_heap();
        }
        for (void *p : live) brisk_free(p);
        brisk_test_validate_own_heap();
      });
    }
    for (auto &w : workers) w.join();
  }
  done = true;
  collector.join();
  brisk_test_validate_idle_heaps();
  brisk_test_set_purge_delay_ms(old_delay);
  brisk_test_set_purge_delay_max_ms(old_max);
  const brisk_stats_t after = brisk_test::stats_snapshot();
  std::printf("%llu MiB faulted in again soon after a purge\n",
              static_cast<unsigned long long>(after.purge.bytes_refaulted >> 20));
  EXPECT_GT(after.purge.bytes_refaulted, 0u) << "no heap learnt anything: the run proves little";
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
