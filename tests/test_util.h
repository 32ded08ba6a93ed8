// Helpers shared by the brisk test programs: block patterns, RSS, build mode.
#ifndef BRISK_TEST_UTIL_H
#define BRISK_TEST_UTIL_H

#include <brisk.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace brisk_test {

// Sanitizer builds run many times slower and their shadow memory swamps RSS,
// so they scale the work down and skip RSS bounds. CMake defines this.
#if defined(BRISK_TEST_SANITIZED)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Picks the release or the sanitizer amount of work.
constexpr long scaled(long release, long sanitized) {
  return kSanitized ? sanitized : release;
}

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The seed of a block's pattern. The serial (a number unique to each
// allocation) makes two live blocks at the same address write different
// patterns, so a block handed out twice is caught as well as an overlap.
inline uint64_t block_seed(const void *p, size_t size, uint64_t serial = 0) {
  return mix64(reinterpret_cast<uintptr_t>(p) ^ mix64(size ^ (serial << 20)));
}

inline uint64_t pattern_word(uint64_t seed, size_t word_index) {
  return seed + word_index * 0x9e3779b97f4a7c15ull;
}

// Fills n bytes at p with the pattern of `seed`. memcpy keeps the accesses
// well-defined even if a block were misaligned (the tests check that apart).
inline void fill_pattern(void *p, size_t n, uint64_t seed) {
  unsigned char *bytes = static_cast<unsigned char *>(p);
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = pattern_word(seed, i);
    std::memcpy(bytes + i * 8, &w, 8);
  }
  uint64_t tail = pattern_word(seed, words);
  std::memcpy(bytes + words * 8, &tail, n % 8);
}

// The offset of the first byte that differs from the pattern, or n if none.
// (Byte j of a word is bits 8j..8j+7: x86-64 is little-endian.)
inline size_t find_pattern_mismatch(const void *p, size_t n, uint64_t seed) {
  const unsigned char *bytes = static_cast<const unsigned char *>(p);
  size_t word = 0;
  for (; word < n / 8; word++) {
    uint64_t w;
    std::memcpy(&w, bytes + word * 8, 8);
    if (w != pattern_word(seed, word)) break;
  }
  for (size_t off = word * 8; off < n; off++) {
    unsigned char expected = static_cast<unsigned char>(pattern_word(seed, off / 8) >> (8 * (off % 8)));
    if (bytes[off] != expected) return off;
  }
  return n;
}

// True when all n bytes at p equal `value`. Compared with memcmp a chunk at
// a time, which sanitizers check per call rather than per byte.
inline bool all_bytes_are(const void *p, size_t n, unsigned char value) {
  unsigned char expected[4096];
  std::memset(expected, value, sizeof expected);
  const unsigned char *bytes = static_cast<const unsigned char *>(p);
  for (size_t offset = 0; offset < n; offset += sizeof expected) {
    size_t chunk = n - offset < sizeof expected ? n - offset : sizeof expected;
    if (std::memcmp(bytes + offset, expected, chunk) != 0) return false;
  }
  return true;
}

inline bool pattern_intact(const void *p, size_t n, uint64_t seed) {
  return find_pattern_mismatch(p, n, seed) == n;
}

// Resident set size of this process in bytes, from /proc/self/status. A
// process always has some, so a reading of 0 (no /proc, no VmRSS line) ends
// the test program: a bound checked against 0 would pass whatever brisk did.
inline size_t rss_bytes() {
  FILE *f = std::fopen("/proc/self/status", "r");
  size_t kib = 0;
  if (f != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::sscanf(line, "VmRSS: %zu kB", &kib) == 1) break;
    }
    std::fclose(f);
  }
  if (kib == 0) {
    std::fprintf(stderr, "test: cannot read VmRSS from /proc/self/status\n");
    std::abort();
  }
  return kib * 1024;
}

// Memory this process has locked (mlock), in bytes, from /proc/self/status.
// It may be 0; a missing VmLck line ends the test program.
inline size_t locked_bytes() {
  FILE *f = std::fopen("/proc/self/status", "r");
  size_t kib = 0;
  bool found = false;
  if (f != nullptr) {
    char line[256];
    while (!found && std::fgets(line, sizeof line, f) != nullptr) {
      found = std::sscanf(line, "VmLck: %zu kB", &kib) == 1;
    }
    std::fclose(f);
  }
  if (!found) {
    std::fprintf(stderr, "test: cannot read VmLck from /proc/self/status\n");
    std::abort();
  }
  return kib * 1024;
}

constexpr size_t kMiB = size_t{1} << 20;

// A snapshot of brisk's statistics (brisk_stats_get with the whole struct);
// a failed call ends the test program.
inline brisk_stats_t stats_snapshot() {
  brisk_stats_t stats;
  std::memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  if (brisk_stats_get(&stats) != 0) {
    std::fprintf(stderr, "test: brisk_stats_get failed\n");
    std::abort();
  }
  return stats;
}

// Keeps the compiler from proving a pointer unused and deleting the
// allocation that produced it (it may do so for malloc and new).
inline void escape(const void *p) { asm volatile("" : : "g"(p) : "memory"); }

// Every count of a region allocator's statistics reads 0, as for a NULL
// handle; the failure names the counts that do not.
inline ::testing::AssertionResult all_counts_zero(const brisk_region_stats_t &s) {
  const struct {
    const char *name;
    size_t value;
  } counts[] = {{"bytes_requested", s.bytes_requested},
                {"bytes_in_use", s.bytes_in_use},
                {"bytes_held", s.bytes_held},
                {"system_requests", s.system_requests},
                {"allocations", s.allocations}};
  std::string nonzero;
  for (const auto &c : counts)
    if (c.value != 0) nonzero += std::string(" ") + c.name + "=" + std::to_string(c.value);
  if (nonzero.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "counts not 0:" << nonzero;
}

inline bool is_aligned(const void *p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// xorshift64*: a small deterministic generator per thread.
// A start line for the threads of a stress test, so that they all hit the
// allocator at once rather than one after another.
class StartGate {
 public:
  explicit StartGate(int n) : waiting_(n) {}
  void arrive_and_wait() {
    waiting_.fetch_sub(1);
    while (waiting_.load() > 0) std::this_thread::yield();
  }

 private:
  std::atomic<int> waiting_;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 2 + 1) {}
  uint64_t next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dull;
  }
  size_t below(size_t n) { return next() % n; }

 private:
  uint64_t state_;
};

// A block of the general allocator and its size, filled with its pattern.
struct Block {
  void *p;
  size_t size;
};

// Allocates `size` bytes and writes the block's pattern; p is NULL on failure.
inline Block make_block(size_t size) {
  Block b{brisk_malloc(size), size};
  if (b.p != nullptr) fill_pattern(b.p, size, block_seed(b.p, size));
  return b;
}

inline bool block_intact(const Block &b) {
  return pattern_intact(b.p, b.size, block_seed(b.p, b.size));
}

// ---- Options (README, Options) ----
// brisk reads them from the environment once, at load, and the tests run
// under whatever it sets (ctest's options_* tests set some). A test built
// on an option's default (its clock steps, its bounds, something kept that
// the option turns off) skips where the value in effect makes what it
// checks meaningless, naming the option: BRISK_SKIP_IF(why), where why is
// that reason or "" (the test runs). Each runs as written under the
// defaults.

// The value brisk took for the numeric option `name`: the environment's
// where it is a whole number from min to max, else the default (brisk
// warns and keeps it), as src/general/options.c parses it.
inline uint64_t option_value(const char *name, uint64_t default_value, uint64_t min,
                             uint64_t max) {
  const char *text = std::getenv(name);
  if (text == nullptr || text[0] < '0' || text[0] > '9') return default_value;
  char *end;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return default_value;
  return value;
}

// "NAME=value: why" where the option is not at its default, else "".
inline std::string option_reason(const char *name, uint64_t value, uint64_t default_value,
                                 const char *why) {
  if (value == default_value) return "";
  return std::string(name) + "=" + std::to_string(value) + ": " + why;
}

// For tests that step brisk's clock in the default purge delays' units
// (BRISK_PURGE_DELAY_MS 50, BRISK_PURGE_DELAY_MAX_MS 1000).
inline std::string purge_delays_not_default() {
  const brisk_stats_t s = stats_snapshot();
  const char *why = "the test steps the clock for the default purge delays (50 ms, 1000 ms)";
  std::string reason = option_reason("BRISK_PURGE_DELAY_MS", s.purge.delay_ms, 50, why);
  if (reason.empty()) {
    reason = option_reason("BRISK_PURGE_DELAY_MAX_MS", s.purge.max_delay_ms, 1000, why);
  }
  return reason;
}

// Where BRISK_HUGE_CACHE_MB keeps no mapping of `bytes` (and its header):
// a thread's cache takes one of at most half its bytes; and where
// BRISK_HUGE_CACHE_MS=0 keeps none.
inline std::string huge_cache_below(size_t bytes) {
  if (option_value("BRISK_HUGE_CACHE_MS", 1000, 0, 3600000) == 0)
    return "BRISK_HUGE_CACHE_MS=0: no cached mapping";
  const uint64_t mib = option_value("BRISK_HUGE_CACHE_MB", 128, 0, 65536);
  if ((mib << 20) / 2 > bytes) return "";
  return "BRISK_HUGE_CACHE_MB=" + std::to_string(mib) + ": no cached mapping of " +
         std::to_string(bytes >> 20) + " MiB";
}

// Where BRISK_PURGE_DELAY_MS is 0: free pages go back at once.
inline std::string purge_at_once(const char *what) {
  if (stats_snapshot().purge.delay_ms != 0) return "";
  return std::string("BRISK_PURGE_DELAY_MS=0: free pages go back at once, ") + what;
}

// Where the region allocators' mapping cache keeps no mapping
// (BRISK_REGION_CACHE_MB or BRISK_REGION_CACHE_MS 0).
inline std::string region_cache_off(const char *what) {
  const brisk_region_cache_stats_t c = stats_snapshot().region_cache;
  if (c.max_bytes != 0 && c.delay_ms != 0) return "";
  return std::string(c.max_bytes == 0 ? "BRISK_REGION_CACHE_MB=0" : "BRISK_REGION_CACHE_MS=0") +
         ": the region allocators' mapping cache keeps nothing, " + what;
}

// Where BRISK_STATS_FILE runs its writer thread, which takes the list of
// heaps for each line: a test whose held clock gives another thread's
// idle-heap pass one chance per step (it only tries that list) may find
// it taken.
inline std::string stats_writer_running() {
  const char *file = std::getenv("BRISK_STATS_FILE");
  if (file == nullptr || file[0] == '\0') return "";
  return std::string("BRISK_STATS_FILE=") + file +
         ": its writer takes the list of heaps for each line, and may hold it when "
         "this test's one idle-heap pass per clock step tries it";
}

#define BRISK_SKIP_IF(reason)                                          \
  do {                                                                 \
    const std::string brisk_skip_reason = (reason);                    \
    if (!brisk_skip_reason.empty()) GTEST_SKIP() << brisk_skip_reason; \
  } while (0)

// What the threads of a test wait on: counters they change under one
// mutex, each change waking every waiter.
struct Turns {
  std::mutex mutex;
  std::condition_variable changed;
  void wait_for(const std::function<bool()> &done) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, done);
  }
  void set(int &variable, int value) {
    std::lock_guard<std::mutex> lock(mutex);
    variable = value;
    changed.notify_all();
  }
  void count(int &counter) {
    std::lock_guard<std::mutex> lock(mutex);
    counter++;
    changed.notify_all();
  }
};

}  // namespace brisk_test

#endif  // BRISK_TEST_UTIL_H
