// Out of memory for real: a child process under a lowered RLIMIT_AS, where
// more threads than cores allocate with every allocation function of the C
// and C++ libraries (brisk's, linked from libbrisk.a) until each fails.
// Every failure must be NULL with errno ENOMEM (posix_memalign's return
// value, operator new's std::bad_alloc), nothing may crash or change a live
// block (also when threads free each other's blocks while memory is out),
// and once the blocks are freed, allocation works again.
#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

namespace {

// How the child ended: its exit status.
enum Status {
  kOk = 0,
  kWrongErrno = 1,    // NULL with an errno other than ENOMEM
  kCorrupt = 2,       // a live block changed
  kNeverFailed = 3,   // a function never ran out
  kNoRecovery = 4,    // allocation failed after everything was freed
  kSetupFailed = 5,   // the child could not set itself up
};

// The allocation functions, each with its own way of failing.
enum Fn { kMalloc, kCalloc, kRealloc, kAlignedAlloc, kPosixMemalign, kMemalign, kValloc,
          kPvalloc, kNew, kNewArray, kNewNothrow, kNewAligned, kFnCount };
const char *const kFnNames[kFnCount] = {
    "malloc",   "calloc",  "realloc", "aligned_alloc", "posix_memalign", "memalign", "valloc",
    "pvalloc",  "new",     "new[]",   "new(nothrow)",  "new(align_val_t)"};

// A live block: its first and last 8 bytes carry a pattern.
struct Block {
  void *p;
  size_t size;
  Fn fn;
};

uint64_t tag_of(const Block &b) {
  return reinterpret_cast<uintptr_t>(b.p) * 0x9e3779b97f4a7c15ull ^ b.size;
}

void mark(const Block &b) {
  const uint64_t tag = tag_of(b);
  std::memcpy(b.p, &tag, 8);
  std::memcpy(static_cast<char *>(b.p) + b.size - 8, &tag, 8);
}

bool intact(const Block &b) {
  uint64_t head, tail;
  std::memcpy(&head, b.p, 8);
  std::memcpy(&tail, static_cast<char *>(b.p) + b.size - 8, 8);
  return head == tag_of(b) && tail == tag_of(b);
}

void release(const Block &b) {
  switch (b.fn) {
    case kNew: operator delete(b.p); break;
    case kNewArray: operator delete[](b.p); break;
    case kNewNothrow: operator delete(b.p, std::nothrow); break;
    case kNewAligned: operator delete(b.p, std::align_val_t{64}); break;
    default: free(b.p); break;
  }
}

// One allocation of `size` (at least 16) with fn. NULL on failure, with
// *error what the function said: errno, posix_memalign's result, or ENOMEM
// for a std::bad_alloc.
void *allocate(Fn fn, size_t size, int *error, std::vector<Block> *mine) {
  errno = 0;
  void *p = nullptr;
  switch (fn) {
    case kMalloc: p = malloc(size); break;
    case kCalloc: p = calloc((size + 15) / 16, 16); break;
    case kRealloc: {
      // Grows the thread's latest malloc'd block, or makes a new one; a
      // refused realloc must leave the block as it was.
      for (auto it = mine->rbegin(); it != mine->rend(); ++it) {
        if (it->p == nullptr || (it->fn != kMalloc && it->fn != kRealloc)) continue;
        Block old = *it;
        p = realloc(old.p, old.size + size);
        if (p == nullptr) {
          *error = errno;
          return intact(old) ? nullptr : reinterpret_cast<void *>(-1);
        }
        mine->erase(std::next(it).base());
        Block grown{p, old.size + size, kRealloc};
        uint64_t head;
        std::memcpy(&head, p, 8);
        if (head != tag_of(old)) return reinterpret_cast<void *>(-1);
        mark(grown);
        mine->push_back(grown);
        return p;
      }
      p = realloc(nullptr, size);
      if (p == nullptr) {
        *error = errno;
        return nullptr;
      }
      Block b{p, size, kRealloc};
      mark(b);
      mine->push_back(b);
      return p;
    }
    case kAlignedAlloc: p = aligned_alloc(64, size); break;
    case kPosixMemalign: {
      int result = posix_memalign(&p, 256, size);
      if (result != 0) {
        *error = result;
        return nullptr;
      }
      break;
    }
    case kMemalign: p = memalign(4096, size); break;
    case kValloc: p = valloc(size); break;
    case kPvalloc: p = pvalloc(size); break;
    case kNew:
    case kNewArray:
    case kNewAligned:
      try {
        p = fn == kNew ? operator new(size)
            : fn == kNewArray ? operator new[](size)
                              : operator new(size, std::align_val_t{64});
      } catch (const std::bad_alloc &) {
        *error = ENOMEM;
        return nullptr;
      }
      break;
    case kNewNothrow: p = operator new(size, std::nothrow); break;
    case kFnCount: break;
  }
  if (p == nullptr) *error = errno;
  if (p != nullptr) {
    Block b{p, size, fn};
    mark(b);
    mine->push_back(b);
  }
  return p;
}

constexpr size_t kSizes[] = {24, 1000, 20000, 300000, 3 << 20};
// Blocks a thread may hold: its list never grows (memory is out).
constexpr size_t kMaxBlocks = 1 << 16;

struct Shared {
  std::atomic<int> status{kOk};
  std::atomic<long> failures[kFnCount] = {};
  std::atomic<int> arrived{0};
  std::atomic<int> phase{0};
  void fail(int s) {
    int expected = kOk;
    status.compare_exchange_strong(expected, s);
  }
};

void wait_for_phase(Shared &shared, int phase) {
  while (shared.phase.load() < phase) std::this_thread::yield();
}

// Each function in turn allocates (sizes rotating) until it fails.
void allocate_until_every_function_failed(Shared &shared, std::vector<Block> &mine, unsigned seed) {
  for (int round = 0; round < 2; round++) {
    for (int f = 0; f < kFnCount; f++) {
      for (unsigned i = seed;; i++) {
        if (mine.size() + 1 >= kMaxBlocks) {
          shared.fail(kSetupFailed);
          return;
        }
        int error = 0;
        void *p = allocate(static_cast<Fn>(f), kSizes[i % 5], &error, &mine);
        if (p == reinterpret_cast<void *>(-1)) {
          shared.fail(kCorrupt);
          return;
        }
        if (p != nullptr) continue;
        if (error != ENOMEM) {
          std::fprintf(stderr, "%s(%zu): NULL with errno %d\n", kFnNames[f], kSizes[i % 5], error);
          shared.fail(kWrongErrno);
        }
        shared.failures[f]++;
        break;
      }
    }
  }
}

// Phases, each started by the main thread once every thread has arrived:
// 1 run out of memory with every function; 2 (still out of memory) free
// half of another thread's blocks, remote frees that may need memory of
// their own to batch; 3 run out again.
void thread_body(Shared &shared, std::vector<Block> &mine, std::vector<Block> &neighbours,
                 unsigned id) {
  mine.reserve(kMaxBlocks);  // no allocation for bookkeeping once memory is out
  shared.arrived++;
  wait_for_phase(shared, 1);
  allocate_until_every_function_failed(shared, mine, id);
  shared.arrived++;
  wait_for_phase(shared, 2);
  for (size_t i = 0; i < neighbours.size(); i += 2) {
    if (!intact(neighbours[i])) shared.fail(kCorrupt);
    release(neighbours[i]);
    neighbours[i].p = nullptr;
  }
  shared.arrived++;
  wait_for_phase(shared, 3);
  allocate_until_every_function_failed(shared, mine, id * 7);
}

size_t address_space_in_use() {
  FILE *f = std::fopen("/proc/self/status", "r");
  size_t kib = 0;
  if (f == nullptr) return 0;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

int child_main() {
  alarm(60);  // a deadlock ends the child with SIGALRM
  const unsigned cores = std::thread::hardware_concurrency();
  const int threads = static_cast<int>((cores == 0 ? 2 : cores) + 2);
  Shared shared;
  std::vector<std::vector<Block>> blocks(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++) {
    pool.emplace_back(thread_body, std::ref(shared), std::ref(blocks[t]),
                      std::ref(blocks[(t + 1) % threads]), static_cast<unsigned>(t));
  }
  while (shared.arrived.load() < threads) std::this_thread::yield();
  // 256 MiB of address space beyond what is mapped now (the threads' stacks
  // included): plenty of room to allocate, little to wait for.
  const size_t in_use = address_space_in_use();
  if (in_use == 0) return kSetupFailed;
  struct rlimit limit;
  limit.rlim_cur = limit.rlim_max = in_use + (256u << 20);
  if (setrlimit(RLIMIT_AS, &limit) != 0) return kSetupFailed;
  for (int phase = 1; phase <= 3; phase++) {
    while (shared.arrived.load() < phase * threads) std::this_thread::yield();
    shared.phase = phase;
  }
  for (std::thread &t : pool) t.join();
  if (shared.status.load() != kOk) return shared.status.load();
  for (int f = 0; f < kFnCount; f++) {
    if (shared.failures[f].load() == 0) {
      std::fprintf(stderr, "%s never failed\n", kFnNames[f]);
      return kNeverFailed;
    }
  }
  // Everything back: every function works again at every size, and so does
  // a block of 128 MiB, half of all the room there was, which needs the
  // address space brisk held for the blocks (segments of the exited
  // threads' heaps, cached huge mappings): given back on the failure.
  for (std::vector<Block> &list : blocks) {
    for (const Block &b : list) {
      if (b.p == nullptr) continue;
      if (!intact(b)) return kCorrupt;
      release(b);
    }
    list.clear();
  }
  std::vector<Block> again;
  again.reserve(64);
  for (int f = 0; f < kFnCount; f++) {
    for (size_t size : kSizes) {
      int error = 0;
      if (allocate(static_cast<Fn>(f), size, &error, &again) == nullptr) {
        std::fprintf(stderr, "after the frees, %s(%zu) still fails (errno %d)\n", kFnNames[f],
                     size, error);
        return kNoRecovery;
      }
    }
  }
  for (const Block &b : again) release(b);
  void *big = malloc(128u << 20);
  if (big == nullptr) {
    std::fprintf(stderr, "after the frees, 128 MiB still fails\n");
    return kNoRecovery;
  }
  std::memset(big, 1, 4096);
  free(big);
  return kOk;
}

TEST(OutOfMemory, EveryFunctionFailsWithEnomemAndRecoversUnderRlimitAs) {
  pid_t pid = fork();
  ASSERT_NE(pid, -1) << std::strerror(errno);
  if (pid == 0) _exit(child_main());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the child died of signal " << WTERMSIG(status)
                                    << (WTERMSIG(status) == SIGALRM ? " (deadlocked)" : "");
  EXPECT_EQ(WEXITSTATUS(status), kOk)
      << "1: NULL with another errno, 2: a block changed, 3: a function never failed, "
         "4: no recovery after the frees, 5: setup failed";
}

}  // namespace
