// A process's awkward moments, through the brisk_* names: many forks while
// other threads are inside malloc and free, fork from a signal handler,
// allocation in exit handlers and in the main thread's thread_local
// destructors while other threads still allocate, a thread whose first
// call is free() of another thread's block, a thread whose memory use
// rises and falls more slowly than the purge delay, fork handlers of the
// program's that allocate, a child forked while a post to an abandoned heap
// was halfway, and threads exiting while every other path runs at once.
// (Allocation in thread-exit destructors and a fork with a busier child are
// in test_threads.cc.)
#include <brisk.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "internal_checks.h"
#include "test_util.h"

using brisk_test::block_seed;
using brisk_test::fill_pattern;
using brisk_test::kMiB;
using brisk_test::mix64;
using brisk_test::pattern_intact;
using brisk_test::scaled;

namespace {

using brisk_test::Block;
using brisk_test::block_intact;
using brisk_test::make_block;

// Mostly small, now and then up to 128 KiB or (every 500th) a huge block.
size_t mixed_size(uint64_t i) {
  const uint64_t h = mix64(i);
  if (i % 500 == 499) return 2 * kMiB + h % kMiB;
  return (i % 10 == 9) ? 2048 + h % (128 * 1024) : 8 + h % 2048;
}

// ---------------------------------------------------------------------------
// Threads that stay inside brisk: each allocates and frees mixed sizes, and
// swaps blocks through shared slots, so that blocks are freed by threads
// that do not own them.

constexpr int kSlots = 256;

class Hammers {
 public:
  explicit Hammers(int threads) {
    for (int id = 0; id < threads; id++) threads_.emplace_back([this, id] { run(id); });
    // Let every hammer start allocating.
    while (steps_.load() < 1000 * threads) std::this_thread::yield();
  }
  ~Hammers() { stop(); }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    stop_ = true;
    for (std::thread &t : threads_) t.join();
    for (std::atomic<void *> &slot : slots_) {
      void *p = slot.exchange(nullptr);
      if (p == nullptr) continue;
      failures_ += !block_intact({p, slot_size(&slot)});
      brisk_free(p);
    }
  }
  long failures() const { return failures_.load(); }
  long steps() const { return steps_.load(); }

  // In a forked child: the slots' blocks belong to threads that were not
  // copied; free them (their contents may have been mid-write at the fork).
  void free_slots_in_child() {
    for (std::atomic<void *> &slot : slots_) brisk_free(slot.exchange(nullptr));
  }

 private:
  size_t slot_size(const std::atomic<void *> *slot) const {
    return 16 + static_cast<size_t>(slot - slots_) * 40;
  }

  void run(int id) {
    uint64_t i = static_cast<uint64_t>(id) << 40;
    while (!stop_.load(std::memory_order_relaxed)) {
      i++;
      steps_.fetch_add(1, std::memory_order_relaxed);
      Block b = make_block(mixed_size(i));
      if (b.p == nullptr) {
        failures_++;
        continue;
      }
      failures_ += !block_intact(b);
      brisk_free(b.p);
      std::atomic<void *> &slot = slots_[mix64(i) % kSlots];
      Block shared = make_block(slot_size(&slot));
      if (shared.p == nullptr) {
        failures_++;
        continue;
      }
      void *old = slot.exchange(shared.p, std::memory_order_acq_rel);
      if (old != nullptr) {
        failures_ += !block_intact({old, slot_size(&slot)});
        brisk_free(old);
      }
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<void *> slots_[kSlots] = {};
  std::atomic<bool> stop_{false};
  std::atomic<long> steps_{0};
  std::atomic<long> failures_{0};
  bool stopped_ = false;
};

// More threads than this machine has cores.
int hammer_count() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(cores == 0 ? 4 : cores + 2);
}

// What a forked child checks: it allocates and frees with brisk; its exit
// status says what went wrong. The bookkeeping is a fixed array, off any
// malloc (under a sanitizer, the C library's malloc is the sanitizer's,
// whose locks other parent threads may have held at the fork).
enum ChildStatus { kChildOk = 0, kChildNull = 1, kChildCorrupt = 2 };

int child_allocates(uint64_t seed, int count) {
  Block blocks[64];
  int live = 0;
  for (int i = 0; i < count; i++) {
    Block b = make_block(mixed_size(seed + static_cast<uint64_t>(i)));
    if (b.p == nullptr) return kChildNull;
    if (live == 64) {
      const int victim = static_cast<int>(mix64(seed + i) % 64);
      if (!block_intact(blocks[victim])) return kChildCorrupt;
      brisk_free(blocks[victim].p);
      blocks[victim] = b;
    } else {
      blocks[live++] = b;
    }
  }
  for (int k = 0; k < live; k++) {
    if (!block_intact(blocks[k])) return kChildCorrupt;
    brisk_free(blocks[k].p);
  }
  return kChildOk;
}

// Waits for a child; a failure names how it ended.
void expect_child_ok(pid_t pid, int fork_number) {
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid) << std::strerror(errno);
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "fork " << fork_number << ": child killed by signal " << WTERMSIG(status)
                  << (WTERMSIG(status) == SIGALRM ? " (deadlocked: its alarm fired)" : "");
  } else {
    EXPECT_EQ(WEXITSTATUS(status), kChildOk) << "fork " << fork_number;
  }
}

// Forks; the child frees the hammers' slots (their contents may have been
// mid-write at the fork), purges every heap if asked, allocates and exits;
// the parent checks how it ended.
void fork_a_child_that_allocates(Hammers &hammers, int fork_number, uint64_t seed, bool collect) {
  pid_t pid = fork();
  ASSERT_NE(pid, -1) << std::strerror(errno);
  if (pid == 0) {
    alarm(10);  // a deadlocked child dies of SIGALRM instead of hanging the test
    hammers.free_slots_in_child();
    if (collect) brisk_collect(true);
    _exit(child_allocates(seed, 300));
  }
  expect_child_ok(pid, fork_number);
}

// fork() while the other threads are inside malloc and free: brisk's fork
// handlers hold its locks across the fork, so every child finds brisk whole,
// whatever the other threads were doing at that instant.
TEST(Lifecycle, ForkManyTimesWhileThreadsMallocAndFree) {
  Hammers hammers(hammer_count());
  const int forks = static_cast<int>(scaled(100, 30));
  for (int i = 0; i < forks; i++) {
    const long target = hammers.steps() + 200;
    while (hammers.steps() < target) std::this_thread::yield();
    fork_a_child_that_allocates(hammers, i, static_cast<uint64_t>(i) << 20, false);
  }
  hammers.stop();
  EXPECT_EQ(hammers.failures(), 0);
}

// fork() while another thread purges every heap's free pages and cycles
// huge blocks (brisk_collect(true) and the huge cache change purge lists
// and caches under the heaps' memory locks): fork_prepare waits for each
// memory lock, so the child finds none held and no list halfway through a
// change; it purges every heap itself, then allocates.
TEST(Lifecycle, ForkWhileAnotherThreadCollectsEveryHeap) {
  Hammers hammers(hammer_count());
  std::atomic<bool> stop{false};
  std::atomic<long> collects{0};
  std::thread collector([&stop, &collects] {
    while (!stop.load(std::memory_order_relaxed)) {
      void *huge = brisk_malloc(3 * kMiB);
      if (huge != nullptr) std::memset(huge, 1, 4096);
      brisk_free(huge);
      brisk_collect(true);
      collects.fetch_add(1, std::memory_order_relaxed);
    }
  });
  const int forks = static_cast<int>(scaled(30, 10));
  for (int i = 0; i < forks; i++) {
    const long target = collects.load() + 2;
    while (collects.load() < target) std::this_thread::yield();
    fork_a_child_that_allocates(hammers, i, static_cast<uint64_t>(i) << 28, true);
  }
  stop.store(true);
  collector.join();
  hammers.stop();
  EXPECT_EQ(hammers.failures(), 0);
}

// fork() from a signal handler. brisk's fork handlers take its locks, so a
// handler may fork when it interrupted code outside brisk (the case here:
// the signal arrives while this thread computes, and other threads are
// inside malloc and free); a handler that interrupted brisk itself in the
// same thread would wait on a lock its own thread holds (README: fork).
volatile sig_atomic_t g_forked_pid = 0;
volatile sig_atomic_t g_fork_number = 0;

void fork_in_handler(int) {
  const int saved_errno = errno;
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    _exit(child_allocates(static_cast<uint64_t>(g_fork_number) << 24, 200));
  }
  g_forked_pid = pid;
  errno = saved_errno;
}

TEST(Lifecycle, ForkFromASignalHandler) {
#if defined(__SANITIZE_THREAD__)
  // TSan holds a signal back until its thread next enters the runtime,
  // which the spinning thread below never does.
  GTEST_SKIP() << "ThreadSanitizer delivers signals only at its own calls";
#endif
  struct sigaction action = {};
  action.sa_handler = fork_in_handler;
  sigemptyset(&action.sa_mask);
  struct sigaction previous;
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  Hammers hammers(hammer_count());
  const pthread_t self = pthread_self();
  const int forks = static_cast<int>(scaled(50, 20));
  for (int i = 0; i < forks; i++) {
    g_forked_pid = 0;
    g_fork_number = i;
    // Another thread sends the signal while this one spins outside brisk.
    std::thread sender([self] { pthread_kill(self, SIGUSR1); });
    volatile uint64_t work = 0;
    while (g_forked_pid == 0) work = work + 1;
    sender.join();
    ASSERT_NE(g_forked_pid, -1) << "fork in the handler failed";
    expect_child_ok(g_forked_pid, i);
  }
  hammers.stop();
  sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_EQ(hammers.failures(), 0);
}

// ---------------------------------------------------------------------------
// Other fork handlers. pthread_atfork runs the prepare handlers in the
// reverse order of their registration and the parent and child handlers in
// order. brisk's prepare handler holds every heap's locks until its parent
// or child handler lets them go, so it must run after every other prepare
// handler (one may allocate, or wait for a lock of its program's that a
// thread holds while it allocates), and its parent and child handlers
// before the others: brisk registers them first, when the library is
// loaded. A handler registered before the process's first heap (when brisk
// registered its own) and allocating in its prepare waited for ever inside
// fork() on a lock its own thread held. Threadsafe death tests re-execute
// the test binary, so the child process registers its handler before it
// allocates anything from brisk.

void *g_prepared_block;

void prepare_allocates() {
  // A page of a class not used yet, and a huge block: both take the heap's
  // memory lock.
  g_prepared_block = brisk_malloc(20000);
  brisk_free(brisk_malloc(3 * kMiB));
}

int fork_with_a_handler_that_allocates() {
  alarm(10);  // a fork that waits for ever ends in SIGALRM
  pthread_atfork(prepare_allocates, nullptr, nullptr);
  brisk_free(brisk_malloc(16));  // the process's first heap
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
  brisk_free(g_prepared_block);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
}

TEST(LifecycleDeathTest, AForkHandlerRegisteredBeforeTheFirstHeapMayAllocate) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(_exit(fork_with_a_handler_that_allocates()), testing::ExitedWithCode(0), "");
}

// A thread caught by fork() between the two steps of a remote free's post
// (the exchange of an owner heap's queue tail, then the link from the node
// before) leaves that queue with a tail the child can never reach from its
// head: the child's later posts link behind it, and the drains stop at the
// gap. For the forking thread's own heap the child ends the queue at its
// last linked node; an abandoned heap, which a thread of the child may
// free to or adopt, needs the same. A fresh process (a threadsafe death
// test) makes the state the fork would catch: the blocks of an exited
// thread, one of them appended to its heap's queue and never linked.
size_t bytes_in_use();

int fork_after_a_post_stopped_halfway() {
  alarm(10);
  constexpr int kBlocks = 100;
  std::vector<void *> blocks(kBlocks);
  brisk_free(brisk_malloc(16));  // this thread's own heap, before the other's
  std::thread([&blocks] {
    for (void *&p : blocks) p = brisk_malloc(1000);
  }).join();  // its heap is abandoned
  brisk_test_push_unlinked(blocks[0]);
  pid_t pid = fork();
  if (pid == 0) {
    const size_t before = bytes_in_use();
    for (int i = 1; i < kBlocks; i++) brisk_free(blocks[i]);
    brisk_collect(false);  // posts them: the abandoned heap takes them back
    const size_t after = bytes_in_use();
    _exit(after + (kBlocks - 1) * 1000 <= before ? 0 : 3);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
  if (WIFSIGNALED(status)) return 100 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

TEST(LifecycleDeathTest, AnAbandonedHeapsQueueWorksInAChildForkedMidPost) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(_exit(fork_after_a_post_stopped_halfway()), testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// exit(): atexit handlers and the main thread's thread_local destructors
// allocate and free, while other threads may still be allocating.

std::atomic<int> g_exit_status{kChildOk};
Block g_kept_for_last_handler;

void record(int status) {
  int expected = kChildOk;
  g_exit_status.compare_exchange_strong(expected, status);
}

// Registered first, so it runs last: frees what the other handler kept.
void last_exit_handler() {
  if (!block_intact(g_kept_for_last_handler)) record(kChildCorrupt);
  brisk_free(g_kept_for_last_handler.p);
  const int more = child_allocates(77, 200);
  if (more != kChildOk) record(more);
  _exit(g_exit_status.load());
}

void first_exit_handler() {
  const int status = child_allocates(99, 300);
  if (status != kChildOk) record(status);
  g_kept_for_last_handler = make_block(100000);
  if (g_kept_for_last_handler.p == nullptr) record(kChildNull);
}

struct AllocatesInDestructor {
  Block block{};
  ~AllocatesInDestructor() {
    if (block.p != nullptr && !block_intact(block)) record(kChildCorrupt);
    brisk_free(block.p);
    const int status = child_allocates(55, 200);
    if (status != kChildOk) record(status);
  }
};
thread_local AllocatesInDestructor t_main_thread_object;

TEST(Lifecycle, ExitHandlersAndThreadLocalDestructorsAllocate) {
  pid_t pid = fork();
  ASSERT_NE(pid, -1) << std::strerror(errno);
  if (pid == 0) {
    alarm(20);
    ASSERT_EQ(atexit(last_exit_handler), 0);
    ASSERT_EQ(atexit(first_exit_handler), 0);
    t_main_thread_object.block = make_block(3000);
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
    // exit() while other threads allocate (never stopped: exit ends them).
    // Sanitizer runtimes are not made for threads started in a forked child.
    new Hammers(2);
#endif
    std::exit(kChildOk);
  }
  expect_child_ok(pid, 0);
}

// ---------------------------------------------------------------------------
// A thread whose first call into brisk is free() of another thread's block:
// it has no heap yet (it gets a cold one for its outbox), and the blocks
// must reach their owner, whose statistics then count every byte back (the
// calling thread's counts are exact), and serve again.

size_t bytes_in_use() { return brisk_test::stats_snapshot().general.bytes_in_use; }

TEST(Lifecycle, ThreadWhoseFirstCallIsFreeOfAnotherThreadsBlock) {
  brisk_collect(false);
  // Every other block is given to the thread; the bytes each allocation
  // added to the statistics are what its free must take away.
  std::vector<Block> given, kept;
  size_t freed_bytes = 0;
  int n = 0;
  auto allocate = [&](size_t size, size_t alignment) {
    const size_t in_use = bytes_in_use();
    Block b{alignment != 0 ? brisk_aligned_alloc(alignment, size) : brisk_malloc(size), size};
    ASSERT_NE(b.p, nullptr);
    fill_pattern(b.p, size, block_seed(b.p, size));
    if (n++ % 2 == 0) {
      given.push_back(b);
      freed_bytes += bytes_in_use() - in_use;
    } else {
      kept.push_back(b);
    }
  };
  for (size_t size : {24, 500, 5000, 40000, 300000}) {
    for (int i = 0; i < 40; i++) allocate(size, 0);
  }
  for (int i = 0; i < 4; i++) allocate(10000, 4096);   // aligned inside a class
  for (int i = 0; i < 2; i++) allocate(3 * kMiB, 0);   // huge
  for (int i = 0; i < 2; i++) allocate(5000, kMiB);    // aligned, huge
  const size_t in_use_before = bytes_in_use();
  long corrupt = 0;
  std::thread([&given, &corrupt] {
    for (const Block &b : given) {
      corrupt += !block_intact(b);
      brisk_free(b.p);  // the thread's first calls: no heap of its own
    }
  }).join();
  brisk_collect(false);  // the owner takes its blocks back now
  EXPECT_EQ(corrupt, 0);
  EXPECT_EQ(bytes_in_use(), in_use_before - freed_bytes);
  // The freed blocks serve again, and the kept ones are untouched.
  for (const Block &b : kept) EXPECT_TRUE(block_intact(b));
  std::vector<Block> again;
  for (const Block &b : given) again.push_back(make_block(b.size));
  for (const Block &b : again) EXPECT_TRUE(block_intact(b));
  for (const Block &b : kept) EXPECT_TRUE(block_intact(b));
  for (const Block &b : again) brisk_free(b.p);
  for (const Block &b : kept) brisk_free(b.p);
  // The same from a thread that then allocates and frees on its own.
  Block other = make_block(700);
  std::thread([&other, &corrupt] {
    corrupt += !block_intact(other);
    brisk_free(other.p);
    for (int i = 0; i < 100; i++) brisk_free(make_block(mixed_size(i)).p);
  }).join();
  EXPECT_EQ(corrupt, 0);
}

// ---------------------------------------------------------------------------
// Purging (segment.c): free pages go back to the system after the base delay
// (BRISK_PURGE_DELAY_MS, 50 ms), except those a heap has learnt it takes
// back later, which it keeps for at most BRISK_PURGE_DELAY_MAX_MS (1 s).

constexpr size_t kCycleBlocks = 2048;
constexpr size_t kCycleBlockSize = 4000;  // 8 MiB of 64 KiB pages
constexpr size_t kCycleBytes = kCycleBlocks * kCycleBlockSize;

brisk_stats_t purge_stats() {
  brisk_stats_t s;
  s.size = sizeof s;
  EXPECT_EQ(brisk_stats_get(&s), 0);
  return s;
}

// 20,000 mallocs of one size: the heap's heartbeat runs its housekeeping,
// which purges the free pages that are due.
void housekeeping_runs() {
  for (int i = 0; i < 20000; i++) brisk_free(brisk_malloc(64));
}

// brisk's clock, held by a test for as long as it lives: time passes when
// the test says so, however slow the machine is (a sleep of 150 ms may last
// a second on a loaded one, past BRISK_PURGE_DELAY_MAX_MS).
class HeldClock {
 public:
  HeldClock() { brisk_test_clock_hold(0); }
  ~HeldClock() { brisk_test_clock_release(); }
  HeldClock(const HeldClock &) = delete;
  HeldClock &operator=(const HeldClock &) = delete;
  void advance(uint64_t ms) { brisk_test_clock_hold(ms); }
};

// Allocates 8 MiB, frees it, and lets 150 ms (more than the base delay)
// pass before it takes it back, `cycles` times; returns the bytes purged
// meanwhile.
uint64_t free_wait_and_take_back(HeldClock &clock, int cycles, std::vector<void *> &blocks) {
  const uint64_t purged_before = purge_stats().general.bytes_purged;
  for (int cycle = 0; cycle < cycles; cycle++) {
    for (void *&p : blocks) {
      p = brisk_malloc(kCycleBlockSize);
      std::memset(p, cycle, kCycleBlockSize);
    }
    for (void *p : blocks) brisk_free(p);
    clock.advance(150);
  }
  return purge_stats().general.bytes_purged - purged_before;
}

// The heap learns to keep 8 MiB (two cycles of the above), then holds the
// 8 MiB again in blocks.
void learn_to_keep_and_hold(HeldClock &clock, std::vector<void *> &blocks) {
  free_wait_and_take_back(clock, 2, blocks);
  for (void *&p : blocks) p = brisk_malloc(kCycleBlockSize);
}

// A thread that frees 8 MiB and takes it back 150 ms later, again and
// again: with the base delay alone each cycle purges pages it then faults
// in again; the heap learns to keep them, so after the first cycles nothing
// more is purged, and what it takes back was kept past the base delay.
TEST(Lifecycle, MemoryTakenBackAfterTheBaseDelayIsKeptRatherThanPurgedEachTime) {
  BRISK_SKIP_IF(brisk_test::purge_delays_not_default());
  constexpr int kCycles = 6;
  std::thread([] {
    HeldClock clock;
    std::vector<void *> blocks(kCycleBlocks);
    // With the maximum at the base, nothing is kept past it: the measure
    // below sees purges when there are any.
    const uint64_t old_max = brisk_test_set_purge_delay_max_ms(50);
    const uint64_t purged_fixed = free_wait_and_take_back(clock, kCycles, blocks);
    brisk_test_set_purge_delay_max_ms(old_max);
    EXPECT_GE(purged_fixed, kCycles / 2 * kCycleBytes / 4)
        << "the base delay alone hardly purged: the check below proves nothing";

    const brisk_stats_t before = purge_stats();
    const uint64_t purged = free_wait_and_take_back(clock, kCycles, blocks);
    const brisk_stats_t after = purge_stats();
    std::printf("purged in %d cycles: %llu KiB with the base delay alone, %llu KiB learning\n",
                kCycles, static_cast<unsigned long long>(purged_fixed >> 10),
                static_cast<unsigned long long>(purged >> 10));
    EXPECT_LE(purged, 2 * kCycleBytes) << "the heap purged what it takes back, cycle after cycle";
    EXPECT_LE(after.purge.bytes_refaulted - before.purge.bytes_refaulted, 2 * kCycleBytes);
    EXPECT_GE(after.purge.bytes_reused_late - before.purge.bytes_reused_late,
              (kCycles - 2) * kCycleBytes / 2)
        << "pages were not taken back after the base delay";
  }).join();
}

// What a heap keeps goes back after the maximum delay all the same, as
// soon as the heap's housekeeping runs.
TEST(Lifecycle, KeptMemoryGoesBackAfterTheMaximumDelay) {
  BRISK_SKIP_IF(brisk_test::purge_delays_not_default());
  std::thread([] {
    HeldClock clock;
    std::vector<void *> blocks(kCycleBlocks);
    learn_to_keep_and_hold(clock, blocks);
    for (void *p : blocks) brisk_free(p);
    housekeeping_runs();
    const uint64_t purged_before = purge_stats().general.bytes_purged;
    clock.advance(200);
    housekeeping_runs();
    const uint64_t purged_kept = purge_stats().general.bytes_purged - purged_before;
    EXPECT_LT(purged_kept, kCycleBytes / 2) << "the heap did not keep its free pages";
    clock.advance(1000);  // past the maximum
    housekeeping_runs();
    const uint64_t purged = purge_stats().general.bytes_purged - purged_before;
    std::printf("purged: %llu KiB 200 ms after the frees, %llu KiB 1200 ms after\n",
                static_cast<unsigned long long>(purged_kept >> 10),
                static_cast<unsigned long long>(purged >> 10));
    EXPECT_GE(purged, kCycleBytes * 3 / 4) << "free pages outlived the maximum delay";
  }).join();
}

// A batch of blocks allocated and then freed (glibc's bench-malloc-simple
// shape): the pages it emptied stay in their class queue, carved, instead of
// going back to their segment and being set up again for the next batch;
// housekeeping gives back those it finds empty at two passes in a row.
TEST(Lifecycle, PagesABatchEmptiedWaitForTheNextBatch) {
  std::thread([] {
    constexpr int kBlocks = 100;  // 2 KiB blocks: 4 pages of 64 KiB
    std::vector<void *> blocks(kBlocks);
    auto fill = [&blocks] {
      for (void *&p : blocks) {
        p = brisk_malloc(2048);
        ASSERT_NE(p, nullptr);
        std::memset(p, 3, 2048);
      }
    };
    fill();
    for (void *p : blocks) brisk_free(p);
    fill();  // the first batch's pages, again
    const size_t pages_full = purge_stats().general.pages_in_use;
    for (void *p : blocks) brisk_free(p);
    const size_t pages_kept = purge_stats().general.pages_in_use;
    EXPECT_EQ(pages_kept, pages_full) << "pages went back to their segment as they emptied";
    housekeeping_runs();
    housekeeping_runs();
    const size_t pages_later = purge_stats().general.pages_in_use;
    std::printf("pages in use: %zu with the batch, %zu after its frees, %zu after housekeeping\n",
                pages_full, pages_kept, pages_later);
    // Three of the four go back (the queue's head stays); housekeeping_runs
    // may have taken one page of its own.
    EXPECT_LE(pages_later + 2, pages_kept) << "pages kept empty were never given back";
    brisk_test_validate_own_heap();
  }).join();
}

// Blocks of 2 KiB on four 64 KiB pages (the fourth its queue's head): the
// blocks, and the page each is on.
constexpr size_t kKeptBlockSize = 2048;
uintptr_t page_of(const void *p) { return reinterpret_cast<uintptr_t>(p) >> 16; }

std::vector<void *> fill_four_pages() {
  std::vector<void *> blocks;
  std::vector<uintptr_t> pages;
  while (pages.size() < 4) {
    void *p = brisk_malloc(kKeptBlockSize);
    EXPECT_NE(p, nullptr);
    if (p == nullptr) break;
    if (std::find(pages.begin(), pages.end(), page_of(p)) == pages.end()) {
      pages.push_back(page_of(p));
    }
    blocks.push_back(p);
  }
  return blocks;
}

// A page kept empty in its class queue that was in use again when its
// thread exited (one block left, freed later by another thread) goes back
// to its segment when that block comes back to the abandoned heap: a heap
// nobody owns keeps no empty page in its queues (page.c), and one already
// tidied would hold it until some thread adopted the heap.
TEST(Lifecycle, APageKeptEmptyThenUsedAgainGoesBackWhenItsThreadIsGone) {
  // This thread owns a heap, so that its free below is another heap's (a
  // thread without one would adopt the abandoned heap for it).
  brisk_free(brisk_malloc(16));
  brisk_collect(false);  // the heap the thread adopts, if any, tidied: no head pages
  void *last = nullptr;
  std::thread([&last] {
    std::vector<void *> blocks = fill_four_pages();
    ASSERT_GE(blocks.size(), 8u);
    // Empty the second page (not the head): it stays in its queue, kept.
    const uintptr_t second = page_of(blocks[blocks.size() / 2]);
    std::vector<void *> rest;
    for (void *p : blocks) {
      if (page_of(p) == second) {
        brisk_free(p);
      } else {
        rest.push_back(p);
      }
    }
    // Fill the head page: the next block comes from the kept page.
    const uintptr_t head = page_of(rest.back());
    void *p;
    while (page_of(p = brisk_malloc(kKeptBlockSize)) == head) rest.push_back(p);
    ASSERT_EQ(page_of(p), second) << "the emptied page was not kept in its queue";
    last = p;
    for (void *q : rest) brisk_free(q);
  }).join();
  ASSERT_NE(last, nullptr);
  EXPECT_TRUE(brisk_collect(false));  // tidies the abandoned heap
  ASSERT_TRUE(brisk_test_page_in_use(last));
  brisk_free(last);      // to the abandoned, tidied heap
  brisk_collect(false);  // posts it
  EXPECT_FALSE(brisk_test_page_in_use(last)) << "the abandoned heap kept its emptied page";
  brisk_test_validate_idle_heaps();
}

// An exiting thread's pages kept empty go back to their segment (onto the
// purge list, which keeps at most WARM_FREE_BYTES backed): a warm heap
// waiting for an adopter holds its queues' pinned heads, no more.
TEST(Lifecycle, AnExitingThreadKeepsNoEmptyPageInItsQueues) {
  HeldClock clock;  // the abandoned heap stays warm: nobody tidies it meanwhile
  brisk_collect(false);
  const size_t pages_before = purge_stats().general.pages_in_use;
  std::thread([] {
    std::vector<void *> blocks = fill_four_pages();
    const size_t pages_full = purge_stats().general.pages_in_use;
    for (void *p : blocks) brisk_free(p);
    // Three pages emptied behind the head: kept while the thread runs.
    EXPECT_EQ(purge_stats().general.pages_in_use, pages_full)
        << "no page was kept empty: the check below proves nothing";
  }).join();
  const size_t pages_after = purge_stats().general.pages_in_use;
  std::printf("pages in use: %zu before the thread, %zu after its exit\n", pages_before,
              pages_after);
  EXPECT_LE(pages_after, pages_before + 1) << "the abandoned heap holds pages kept empty";
  brisk_test_validate_idle_heaps();
}

// A warm abandoned heap keeps no large page (4 MiB each) that empties,
// neither a head its thread emptied before exit nor one that other threads'
// frees empty later: a dozen large classes would otherwise hold 48 MiB per
// exited thread until a tidy or an adopter.
TEST(Lifecycle, AnAbandonedHeapKeepsNoEmptyLargePage) {
  HeldClock clock;  // the abandoned heap stays warm: nobody tidies it meanwhile
  brisk_collect(false);
  std::atomic<int> stage{0};
  std::vector<void *> handed;
  // B frees what A hands it after A has exited; its exit posts those frees
  // (its outbox) to A's abandoned heap.
  std::thread freer([&] {
    brisk_free(brisk_malloc(64));  // a heap of its own before A's exits
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    for (void *p : handed) brisk_free(p);
  });
  while (stage.load() != 1) std::this_thread::yield();
  const brisk_stats_t before = purge_stats();
  std::thread([&handed] {
    // One block of each large class (64 KiB .. 512 KiB) handed out, and one
    // of each freed here: every head holds a block at exit, or none.
    for (size_t size = 80 * 1024, i = 0; size <= 512 * 1024; size += 16 * 1024 << (i++ / 4)) {
      void *p = brisk_malloc(size);
      ASSERT_NE(p, nullptr);
      std::memset(p, 1, size);
      if (i % 2) handed.push_back(p);
      else brisk_free(p);
    }
  }).join();
  stage = 2;
  freer.join();
  const brisk_stats_t after = purge_stats();
  std::printf("pages in use %zu -> %zu, free pages backed %zu -> %zu, held %zu -> %zu MiB\n",
              before.general.pages_in_use, after.general.pages_in_use,
              before.general.pages_committed, after.general.pages_committed,
              before.general.bytes_held / kMiB, after.general.bytes_held / kMiB);
  EXPECT_LE(after.general.pages_in_use, before.general.pages_in_use + 1)
      << "large pages stayed in the abandoned heap's queues";
  EXPECT_LT(after.general.bytes_held, before.general.bytes_held + 4 * kMiB)
      << "the abandoned heap holds an empty large page";
  brisk_test_validate_idle_heaps();
}

// An exiting thread's heap waits warm with the huge mappings it cached: the
// next thread adopts the heap and gets the mapping back instead of mapping
// (and faulting in) a new one, as a program running rounds of threads that
// each use a few blocks of several MiB would otherwise do every round.
TEST(Lifecycle, AThreadGetsBackTheHugeMappingItsPredecessorFreed) {
  constexpr size_t kHugeBytes = 4 * kMiB;
  BRISK_SKIP_IF(brisk_test::huge_cache_below(kHugeBytes));
  BRISK_SKIP_IF(brisk_test::purge_at_once("and an exited thread's heap is tidied at once "
                                          "(after twice the purge delay), its cache with it"));
  HeldClock clock;  // the abandoned heap stays warm: nobody tidies it meanwhile
  std::thread([] {
    void *p = brisk_malloc(kHugeBytes);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kHugeBytes);
    brisk_free(p);
  }).join();
  const brisk_stats_t before = purge_stats();
  brisk_stats_t after{};
  std::thread([&after] {
    void *p = brisk_malloc(kHugeBytes);  // adopts the heap abandoned last
    ASSERT_NE(p, nullptr);
    std::memset(p, 2, kHugeBytes);
    after = purge_stats();
    brisk_free(p);
  }).join();
  EXPECT_GE(after.general.huge_allocations, before.general.huge_allocations + 1);
  EXPECT_EQ(after.os.map_calls, before.os.map_calls)
      << "the second thread mapped its huge block anew";
  EXPECT_EQ(after.os.unmap_calls, before.os.unmap_calls)
      << "a huge mapping went back to the system while the second thread ran";
}

// A thread that learnt to keep its free pages and then sits idle, alive,
// keeps them until it runs again; brisk_collect(true) from another thread
// (what malloc_trim does) gives them back at once, whatever was learnt.
TEST(Lifecycle, CollectGivesBackWhatAnIdleHeapKeeps) {
  BRISK_SKIP_IF(brisk_test::purge_delays_not_default());
  std::atomic<int> stage{0};
  std::thread idle([&] {
    std::vector<void *> blocks(kCycleBlocks);
    {
      HeldClock clock;
      learn_to_keep_and_hold(clock, blocks);
      for (void *p : blocks) brisk_free(p);
      clock.advance(200);  // past the base delay, kept
      housekeeping_runs();
    }
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  const brisk_stats_t before = purge_stats();
  // (Half of the 8 MiB freed, in 64 KiB pages.)
  EXPECT_GE(before.general.pages_committed, kCycleBytes / 2 / (64 << 10))
      << "the idle heap kept nothing: the check below proves nothing";
  EXPECT_TRUE(brisk_collect(true));
  const brisk_stats_t after = purge_stats();
  stage = 2;
  idle.join();
  std::printf("free pages backed: %zu before brisk_collect(true), %zu after\n",
              before.general.pages_committed, after.general.pages_committed);
  EXPECT_EQ(after.general.pages_committed, 0u);
}

// A thread that learnt to keep its free pages and then sits idle, alive,
// gets them purged by another thread's housekeeping once it has run none of
// its own for the maximum delay: nobody calls brisk_collect, and they still
// go back.
TEST(Lifecycle, AnIdleThreadsKeptPagesGoBackThroughAnotherThreadsHousekeeping) {
  BRISK_SKIP_IF(brisk_test::purge_delays_not_default());
  BRISK_SKIP_IF(brisk_test::stats_writer_running());
  HeldClock clock;
  std::atomic<int> stage{0};
  std::thread idle([&] {
    std::vector<void *> blocks(kCycleBlocks);
    learn_to_keep_and_hold(clock, blocks);
    for (void *p : blocks) brisk_free(p);
    housekeeping_runs();
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  const size_t kept_pages = kCycleBytes / 2 / (64 << 10);  // half of the 8 MiB
  clock.advance(200);  // past the base delay: the idle heap keeps what it learnt
  housekeeping_runs();
  const brisk_stats_t before = purge_stats();
  EXPECT_GE(before.general.pages_committed, kept_pages)
      << "the idle heap kept nothing: the check below proves nothing";
  clock.advance(1000);  // past the maximum delay since its last housekeeping
  housekeeping_runs();
  const brisk_stats_t after = purge_stats();
  stage = 2;
  idle.join();
  std::printf("free pages backed: %zu 200 ms after the idle thread's last housekeeping, "
              "%zu 1200 ms after\n",
              before.general.pages_committed, after.general.pages_committed);
  EXPECT_GE(before.general.pages_committed - after.general.pages_committed, kept_pages)
      << "an idle thread's free pages outlived the maximum delay";
}

// The same, for pages its thread freed after its last housekeeping, not
// yet due when another thread's pass first finds the heap idle: that pass
// must not mark the heap done while they wait, or they stay backed for as
// long as the thread sleeps.
TEST(Lifecycle, AnIdleThreadsPagesFreedAfterItsLastHousekeepingGoBackToo) {
  BRISK_SKIP_IF(brisk_test::purge_delays_not_default());
  BRISK_SKIP_IF(brisk_test::stats_writer_running());
  HeldClock clock;
  std::atomic<int> stage{0};
  std::thread idle([&] {
    std::vector<void *> blocks(kCycleBlocks);
    learn_to_keep_and_hold(clock, blocks);
    housekeeping_runs();  // its last: nothing of its own to purge after this
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    for (void *p : blocks) brisk_free(p);  // own frees: pages retire, no housekeeping
    stage = 3;
    while (stage.load() != 4) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  const brisk_stats_t idle_before = purge_stats();
  clock.advance(500);
  stage = 2;
  while (stage.load() != 3) std::this_thread::yield();
  const brisk_stats_t before = purge_stats();
  clock.advance(600);  // idle 1100 ms: a pass finds it, its pages kept 600 ms
  housekeeping_runs();
  clock.advance(2000);  // every page it freed is past the maximum delay
  housekeeping_runs();
  const brisk_stats_t after = purge_stats();
  stage = 4;
  idle.join();
  const size_t kept_pages = kCycleBytes / 2 / (64 << 10);
  std::printf("free pages backed: %zu before the idle thread's frees, %zu after, "
              "%zu 2600 ms later\n",
              idle_before.general.pages_committed, before.general.pages_committed,
              after.general.pages_committed);
  // The pass at 1100 ms purges those past what the heap keeps: the kept
  // ones are what it must not leave behind.
  EXPECT_GE(before.general.pages_committed, idle_before.general.pages_committed + kept_pages)
      << "the idle thread's frees left few pages backed: the check below proves little";
  EXPECT_LE(after.general.pages_committed, idle_before.general.pages_committed)
      << "pages an idle thread freed after its last housekeeping outlived the maximum delay";
}

// A huge block an idle thread frees after its last housekeeping, and
// `pass_first`: after another thread's pass found the heap idle with
// nothing to give back (and marked it done), else before any pass. Returns
// the huge cached bytes (process-wide) before the thread's free, and 2600
// ms after it.
std::pair<size_t, size_t> idle_thread_frees_huge(HeldClock &clock, bool pass_first,
                                                 size_t huge, size_t *after_free) {
  std::atomic<int> stage{0};
  std::thread idle([&] {
    void *p = brisk_malloc(huge);
    if (p != nullptr) std::memset(p, 1, huge);
    housekeeping_runs();
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    brisk_free(p);  // into its heap's huge cache, no housekeeping
    stage = 3;
    while (stage.load() != 4) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  const size_t before = purge_stats().general.huge_cached_bytes;
  if (pass_first) {
    clock.advance(1100);
    housekeeping_runs();  // idle 1100 ms, nothing to give back: done
  } else {
    clock.advance(500);
  }
  stage = 2;
  while (stage.load() != 3) std::this_thread::yield();
  *after_free = purge_stats().general.huge_cached_bytes;
  clock.advance(600);  // idle past the maximum: a pass finds it
  housekeeping_runs();
  clock.advance(2000);  // the mapping is past its age
  housekeeping_runs();
  const size_t after = purge_stats().general.huge_cached_bytes;
  stage = 4;
  idle.join();
  return {before, after};
}

// An idle thread frees an 8 MiB huge block (after a pass marked its heap
// done, with marked_first): the cached mapping goes back once past its age.
void expect_idle_threads_huge_mapping_goes_back(bool marked_first, const char *what) {
  HeldClock clock;
  constexpr size_t kHuge = 8 * kMiB;
  BRISK_SKIP_IF(brisk_test::huge_cache_below(kHuge));
  BRISK_SKIP_IF(brisk_test::stats_writer_running());
  // The clock steps: the heap is idle 1100 ms after its last housekeeping,
  // and the mapping 2600 ms old at the end.
  const uint64_t max_delay_ms = brisk_test::stats_snapshot().purge.max_delay_ms;
  if (max_delay_ms > 1100) {
    GTEST_SKIP() << "BRISK_PURGE_DELAY_MAX_MS=" << max_delay_ms
                 << ": a heap counts as idle only after it, past the test's clock steps";
  }
  const uint64_t age_ms = brisk_test::option_value("BRISK_HUGE_CACHE_MS", 1000, 0, 3600000);
  if (age_ms > 2000) {
    GTEST_SKIP() << "BRISK_HUGE_CACHE_MS=" << age_ms
                 << ": the mapping is kept past the test's clock steps";
  }
  size_t after_free = 0;
  const auto [before, after] = idle_thread_frees_huge(clock, marked_first, kHuge, &after_free);
  std::printf("huge cached: %zu before the idle thread's free, %zu after, %zu 2600 ms later\n",
              before, after_free, after);
  EXPECT_GE(after_free, before + kHuge) << "the idle heap cached nothing: the check below proves nothing";
  EXPECT_LE(after, before) << what;
}

// Its cached mapping goes back once past its age, though the first pass
// that found the heap idle came before that.
TEST(Lifecycle, AnIdleThreadsHugeMappingFreedAfterItsLastHousekeepingGoesBack) {
  expect_idle_threads_huge_mapping_goes_back(false,
                                             "an idle thread's cached huge mapping outlived its age");
}

// ... and also when a pass had marked the heap done before the free.
TEST(Lifecycle, AHugeMappingFreedIntoAnIdleHeapAlreadyPassedOverGoesBack) {
  expect_idle_threads_huge_mapping_goes_back(
      true, "a huge mapping freed into a heap marked done outlived its age");
}

// An exited thread's heap waits warm for an adopter with the huge mappings
// it cached. Its tidy gives them back, but only twice the purge delay after
// the exit: under BRISK_PURGE_DELAY_MS=3600000 (options_purge_hour) two
// hours, where every other heap's go once past their age
// (BRISK_HUGE_CACHE_MS, 1 s): still cached after the 2100 ms below, before
// this was fixed. Another thread's idle-heap passes (one per purge delay or
// age, whichever is shorter) now trim them by age too.
TEST(Lifecycle, AnExitedThreadsHugeMappingGoesBackPastItsAge) {
  constexpr size_t kHuge = 4 * kMiB;
  BRISK_SKIP_IF(brisk_test::huge_cache_below(kHuge));
  BRISK_SKIP_IF(brisk_test::stats_writer_running());
  BRISK_SKIP_IF(brisk_test::purge_at_once("an exited thread's heap is tidied at its exit"));
  const uint64_t age_ms = brisk_test::option_value("BRISK_HUGE_CACHE_MS", 1000, 0, 3600000);
  if (age_ms > 1000) {
    GTEST_SKIP() << "BRISK_HUGE_CACHE_MS=" << age_ms << ": kept past the test's clock steps";
  }
  HeldClock clock;
  brisk_free(brisk_malloc(64));  // this thread's own heap: it adopts no other below
  const size_t before = purge_stats().general.huge_cached_bytes;
  std::thread([] {
    void *p = brisk_malloc(kHuge);
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kHuge);
    brisk_free(p);
  }).join();
  const size_t after_exit = purge_stats().general.huge_cached_bytes;
  ASSERT_GE(after_exit, before + kHuge) << "the exited heap cached nothing: the rest proves nothing";
  // The age, then one pass interval (at most the age), in 50 ms steps.
  uint64_t waited = 0;
  size_t cached = after_exit;
  for (; waited <= 2 * age_ms + 100; waited += 50) {
    housekeeping_runs();
    cached = purge_stats().general.huge_cached_bytes;
    if (cached <= before) break;
    clock.advance(50);
  }
  std::printf("huge cached: %zu before, %zu after the exit, %zu %llu ms later\n", before,
              after_exit, cached, static_cast<unsigned long long>(waited));
  EXPECT_LE(cached, before) << "an exited thread's cached huge mapping outlived its age";
}

// Threads that go quiet (no brisk call) with free pages, kept empty pages
// and cached huge mappings, then come back, while the others' passes purge
// their heaps (the clock moves on past the maximum delay all the time) and
// the main thread forks: blocks kept live across a quiet spell keep their
// bytes, each heap passes its validator, and a child can allocate. Run
// under ThreadSanitizer, the owner's page and huge-cache work races the
// passes.
TEST(Lifecycle, IdleHeapPassesRaceTheirThreadsComingBack) {
  HeldClock clock;
  const int threads = hammer_count() + 2;
  const int rounds = static_cast<int>(scaled(40, 15));
  std::atomic<int> running{threads};
  std::atomic<long> failures{0};
  std::vector<std::thread> workers;
  for (int id = 0; id < threads; id++) {
    workers.emplace_back([&, id] {
      std::vector<Block> live;
      for (int round = 0; round < rounds; round++) {
        const uint64_t seed = (static_cast<uint64_t>(id) << 32) + static_cast<uint64_t>(round) * 1000;
        std::vector<Block> passing;
        for (uint64_t i = 0; i < 300; i++) {
          const uint64_t h = mix64(seed + i);
          size_t size = i % 100 == 99 ? 600 * 1024 + h % (2 * kMiB)  // huge
                        : i % 10 == 9 ? 2048 + h % (256 * 1024)     // medium, large
                                      : 8 + h % 4000;
          Block b = make_block(size);
          if (b.p == nullptr) {
            failures++;
            continue;
          }
          (i % 7 == 0 ? live : passing).push_back(b);
        }
        for (const Block &b : passing) {
          failures += !block_intact(b);
          brisk_free(b.p);
        }
        if (live.size() > 200) {
          for (size_t k = 0; k < live.size(); k += 2) {
            failures += !block_intact(live[k]);
            brisk_free(live[k].p);
            live[k].p = nullptr;
          }
          live.erase(std::remove_if(live.begin(), live.end(), [](const Block &b) { return b.p == nullptr; }),
                     live.end());
        }
        brisk_test_validate_own_heap();
        // Quiet: no brisk call while the clock moves on by a few hundred ms.
        for (int spin = 0; spin < 2000 + (id * 37 + round * 11) % 3000; spin++) std::this_thread::yield();
        for (const Block &b : live) failures += !block_intact(b);
      }
      for (const Block &b : live) {
        failures += !block_intact(b);
        brisk_free(b.p);
      }
      running--;
    });
  }
  int forks = 0;
  while (running.load() != 0) {
    clock.advance(300);
    for (int i = 0; i < 200; i++) brisk_free(brisk_malloc(64 + static_cast<size_t>(i) * 32));
    if (forks < 3) {
      forks++;
      pid_t pid = fork();
      ASSERT_NE(pid, -1) << std::strerror(errno);
      if (pid == 0) {
        alarm(10);  // a deadlocked child dies of SIGALRM instead of hanging the test
        _exit(child_allocates(static_cast<uint64_t>(forks) << 20, 200));
      }
      expect_child_ok(pid, forks);
    }
    std::this_thread::yield();
  }
  for (std::thread &t : workers) t.join();
  EXPECT_EQ(failures.load(), 0);
  brisk_test_validate_own_heap();
  brisk_test_validate_idle_heaps();
}

// A base delay of 0 purges a page as soon as it is free, whatever the heap
// learnt to keep.
TEST(Lifecycle, PurgeDelayZeroPurgesAtOnceAfterTheHeapLearntToKeep) {
  std::thread([] {
    std::vector<void *> blocks(kCycleBlocks);
    {
      HeldClock clock;
      free_wait_and_take_back(clock, 2, blocks);
    }
    const uint64_t old_delay = brisk_test_set_purge_delay_ms(0);
    for (void *&p : blocks) p = brisk_malloc(kCycleBlockSize);
    const uint64_t purged_before = purge_stats().general.bytes_purged;
    for (void *p : blocks) brisk_free(p);
    const uint64_t purged = purge_stats().general.bytes_purged - purged_before;
    brisk_test_set_purge_delay_ms(old_delay);
    EXPECT_GE(purged, kCycleBytes * 3 / 4);
  }).join();
}

// ---------------------------------------------------------------------------
// Everything at once. Threads (more than cores) live a few hundred steps
// each and exit while others free, realloc (across classes, into and out of
// huge blocks) and free the plain, aligned and zeroed blocks they made; some
// start with a free of another thread's block, some allocate and free in
// thread_local destructors and in key destructors that run after brisk's
// exit handler; two threads sleep now and then past the purge delays
// (shortened) while the others' housekeeping purges their heaps; one
// collects and takes snapshots all the time. Blocks change hands through
// shared slots, each with a header (its size and serial) and a pattern
// checked whenever it moves. When every thread is gone: no block was broken,
// the heaps are valid, and the counts are back where they were (blocks in
// use per class, huge blocks, live heaps).
namespace everything {

constexpr int kSlots = 512;
std::atomic<void *> g_slots[kSlots];
std::atomic<long> g_failures{0};
std::atomic<uint64_t> g_serial{1};
std::atomic<bool> g_stop{false};
pthread_key_t g_late_key;

// The pattern covers a block's first 8 KiB at most: a block handed out
// twice, or a realloc that lost its contents, shows there.
size_t covered(size_t size) { return std::min<size_t>(size, 8192) - 16; }

struct Header {
  uint64_t size;
  uint64_t serial;
};

void stamp(void *p, size_t size) {
  const Header h{size, g_serial.fetch_add(1, std::memory_order_relaxed)};
  std::memcpy(p, &h, sizeof h);
  fill_pattern(static_cast<char *>(p) + 16, covered(size), block_seed(p, size, h.serial));
}

// Whether p's header and pattern are whole; *out gets the header.
bool intact(const void *p, Header *out) {
  Header h;
  std::memcpy(&h, p, sizeof h);
  *out = h;
  if (h.size < 16 || h.size > 8 * kMiB) return false;
  return pattern_intact(static_cast<const char *>(p) + 16, covered(h.size),
                        block_seed(p, h.size, h.serial));
}

size_t random_size(brisk_test::Rng &rng) {
  const size_t pick = rng.below(1000);
  if (pick < 700) return 16 + rng.below(1024);
  if (pick < 900) return 1024 + rng.below(63 * 1024);
  if (pick < 985) return 64 * 1024 + rng.below(448 * 1024);
  return 512 * 1024 + rng.below(3 * kMiB);  // huge
}

void *make(brisk_test::Rng &rng) {
  const size_t size = random_size(rng);
  void *p = nullptr;
  switch (rng.below(8)) {
    case 0: {
      const size_t alignment = size_t{16} << rng.below(17);  // up to 1 MiB
      p = brisk_aligned_alloc(alignment, size);
      if (p != nullptr && reinterpret_cast<uintptr_t>(p) % alignment != 0) g_failures++;
      break;
    }
    case 1:
      p = brisk_calloc(1, size);
      if (p != nullptr && !brisk_test::all_bytes_are(p, std::min<size_t>(size, 8192), 0)) g_failures++;
      break;
    default:
      p = brisk_malloc(size);
  }
  if (p == nullptr) {
    g_failures++;
    return nullptr;
  }
  stamp(p, size);
  return p;
}

void put(brisk_test::Rng &rng, void *p);

// A block taken from a slot: checked, then freed, or resized (its kept
// contents checked) and put back.
void consume(brisk_test::Rng &rng, void *p) {
  Header h;
  if (!intact(p, &h)) {
    g_failures++;
    return;  // leaked: its memory cannot be trusted
  }
  if (rng.below(4) != 0) {
    brisk_free(p);
    return;
  }
  const size_t size = random_size(rng);
  void *q = brisk_realloc(p, size);
  if (q == nullptr) {
    g_failures++;
    return;
  }
  Header moved;
  std::memcpy(&moved, q, sizeof moved);
  const size_t kept = covered(std::min(size, h.size));
  if (moved.size != h.size || moved.serial != h.serial ||
      !pattern_intact(static_cast<char *>(q) + 16, kept, block_seed(p, h.size, h.serial))) {
    g_failures++;
  }
  stamp(q, size);
  put(rng, q);
}

void put(brisk_test::Rng &rng, void *p) {
  void *old = g_slots[rng.below(kSlots)].exchange(p, std::memory_order_acq_rel);
  if (old == nullptr) return;
  Header h;
  if (!intact(old, &h)) {
    g_failures++;
    return;
  }
  brisk_free(old);
}

void take_one(brisk_test::Rng &rng) {
  void *p = g_slots[rng.below(kSlots)].exchange(nullptr, std::memory_order_acq_rel);
  if (p != nullptr) consume(rng, p);
}

void steps(brisk_test::Rng &rng, int count) {
  void *own[8] = {};
  for (int i = 0; i < count; i++) {
    void *&mine = own[rng.below(8)];
    if (mine != nullptr) {
      Header h;
      if (intact(mine, &h)) brisk_free(mine);
      else g_failures++;
    }
    mine = make(rng);
    if (void *shared = make(rng)) put(rng, shared);
    if (rng.below(2) == 0) take_one(rng);
  }
  for (void *p : own) {
    Header h;
    if (p != nullptr && !intact(p, &h)) g_failures++;
    brisk_free(p);
  }
}

struct AtThreadExit {
  bool armed = false;
  ~AtThreadExit() {
    if (!armed) return;
    brisk_test::Rng rng(reinterpret_cast<uintptr_t>(this));
    take_one(rng);
    if (void *p = make(rng)) put(rng, p);
  }
};
thread_local AtThreadExit t_at_exit;

// A key created after brisk's: it runs after brisk's exit handler, in
// three rounds.
void late_destructor(void *round) {
  brisk_test::Rng rng(reinterpret_cast<uintptr_t>(round) * 977 + reinterpret_cast<uintptr_t>(&rng));
  take_one(rng);
  if (void *p = make(rng)) put(rng, p);
  const uintptr_t next = reinterpret_cast<uintptr_t>(round) + 1;
  if (next <= 3) pthread_setspecific(g_late_key, reinterpret_cast<void *>(next));
}

void short_thread(uint64_t seed) {
  brisk_test::Rng rng(seed);
  switch (rng.below(4)) {
    case 0: take_one(rng); break;  // its first call may free another thread's block
    case 1: t_at_exit.armed = true; break;
#if !defined(__SANITIZE_THREAD__)
    // ThreadSanitizer cannot run code after its own key destructor.
    case 2: pthread_setspecific(g_late_key, reinterpret_cast<void *>(1)); break;
#endif
    default: break;
  }
  steps(rng, 20 + static_cast<int>(rng.below(200)));
}

}  // namespace everything

TEST(Lifecycle, ThreadsExitWhileOthersFreeReallocCollectAndSleep) {
  using namespace everything;
  brisk_free(brisk_malloc(1));  // brisk's exit handler's key comes before ours
  ASSERT_EQ(pthread_key_create(&g_late_key, late_destructor), 0);
  const uint64_t old_delay = brisk_test_set_purge_delay_ms(2);
  const uint64_t old_max = brisk_test_set_purge_delay_max_ms(5);
  brisk_collect(true);
  const brisk_stats_t before = brisk_test::stats_snapshot();
  const int kRounds = static_cast<int>(scaled(200, 20));
  std::atomic<int> spawners_left{3};
  std::vector<std::thread> threads;
  for (int s = 0; s < 3; s++) {
    threads.emplace_back([s, kRounds, &spawners_left] {
      brisk_test::Rng rng(1000 + s);
      for (int round = 0; round < kRounds; round++) {
        std::thread a(short_thread, rng.next()), b(short_thread, rng.next());
        a.join();
        b.join();
      }
      if (--spawners_left == 0) g_stop = true;
    });
  }
  for (int s = 0; s < 2; s++) {
    threads.emplace_back([s] {
      brisk_test::Rng rng(2000 + s);
      while (!g_stop.load()) {
        steps(rng, 50);
        std::this_thread::sleep_for(std::chrono::milliseconds(rng.below(20)));
      }
    });
  }
  threads.emplace_back([] {
    brisk_test::Rng rng(3000);
    while (!g_stop.load()) {
      steps(rng, 20);
      brisk_collect(rng.below(2) == 0);
      brisk_test::stats_snapshot();
      brisk_test_validate_idle_heaps();
    }
  });
  for (std::thread &t : threads) t.join();
  for (std::atomic<void *> &slot : g_slots) {
    void *p = slot.exchange(nullptr);
    Header h;
    if (p != nullptr && !intact(p, &h)) g_failures++;
    brisk_free(p);
  }
  pthread_key_delete(g_late_key);
  brisk_collect(false);  // this thread's own queue, drained
  brisk_test_validate_own_heap();
  brisk_test_validate_idle_heaps();
  const brisk_stats_t after = brisk_test::stats_snapshot();
  brisk_test_set_purge_delay_ms(old_delay);
  brisk_test_set_purge_delay_max_ms(old_max);
  EXPECT_EQ(g_failures.load(), 0);
  for (size_t c = 1; c < BRISK_STATS_CLASSES; c++) {
    EXPECT_EQ(after.classes[c].blocks_in_use, before.classes[c].blocks_in_use)
        << after.classes[c].block_size << "-byte blocks";
  }
  EXPECT_EQ(after.general.huge_blocks, before.general.huge_blocks);
  EXPECT_EQ(after.general.heaps_live, before.general.heaps_live);
}

}  // namespace

