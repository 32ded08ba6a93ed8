// An ordinary C++ program that knows nothing of brisk: containers, strings,
// threads and new/delete, printing a deterministic checksum. run_preload.sh
// runs it with and without libbrisk preloaded and compares the output. With
// BRISK_EXPECT_PRELOAD set it first checks that malloc and operator new
// really resolve to libbrisk, and exits 3 otherwise.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

bool symbol_from_brisk(const char *name) {
  void *address = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
    std::fprintf(stderr, "%s: not found\n", name);
    return false;
  }
  if (std::strstr(info.dli_fname, "libbrisk") == nullptr) {
    std::fprintf(stderr, "%s comes from %s, not libbrisk\n", name, info.dli_fname);
    return false;
  }
  return true;
}

// FNV-1a over bytes, chained.
uint64_t fnv(uint64_t h, const void *data, size_t n) {
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < n; i++) {
    h ^= bytes[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Node {
  std::string name;
  std::vector<int> values;
  std::unique_ptr<Node> next;
};

uint64_t work(unsigned seed) {
  uint64_t h = 0xcbf29ce484222325ull;
  uint64_t state = seed * 2654435761u + 1;
  auto rand_below = [&state](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };

  std::map<std::string, std::vector<int>> index;
  for (int i = 0; i < 60000; i++) {
    std::string key(1 + rand_below(20), static_cast<char>('a' + rand_below(26)));
    key += std::to_string(rand_below(5000));
    index[key].push_back(i);
  }
  for (const auto &entry : index) {
    h = fnv(h, entry.first.data(), entry.first.size());
    h = fnv(h, entry.second.data(), entry.second.size() * sizeof(int));
  }

  // A linked list of heap nodes, built and torn down with new/delete.
  std::unique_ptr<Node> head;
  for (int i = 0; i < 20000; i++) {
    auto node = std::make_unique<Node>();
    node->name = "node" + std::to_string(i);
    node->values.assign(rand_below(40), i);
    node->next = std::move(head);
    head = std::move(node);
  }
  for (Node *n = head.get(); n != nullptr; n = n->next.get()) {
    h = fnv(h, n->name.data(), n->name.size());
    h = fnv(h, n->values.data(), n->values.size() * sizeof(int));
  }
  // Unlink iteratively: a recursive destructor this deep could overflow.
  while (head) head = std::move(head->next);

  // Raw arrays of varied sizes, some large.
  for (int i = 0; i < 2000; i++) {
    size_t n = (i % 100 == 0) ? 1 << 20 : 1 + rand_below(4000);
    char *buffer = new char[n];
    std::memset(buffer, i & 0xff, n);
    h = fnv(h, buffer + n / 2, 1);
    delete[] buffer;
  }
  return h;
}

}  // namespace

int main() {
  if (std::getenv("BRISK_EXPECT_PRELOAD") != nullptr) {
    bool ok = symbol_from_brisk("malloc");
    ok = symbol_from_brisk("free") && ok;
    ok = symbol_from_brisk("_Znwm") && ok;  // operator new(size_t)
    ok = symbol_from_brisk("_ZdlPv") && ok;  // operator delete(void *)
    if (!ok) return 3;
  }

  std::vector<uint64_t> results(6);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < results.size(); t++) {
    threads.emplace_back([t, &results] { results[t] = work(t); });
  }
  for (std::thread &t : threads) t.join();

  uint64_t total = 0xcbf29ce484222325ull;
  for (size_t t = 0; t < results.size(); t++) {
    std::printf("thread %zu: %016llx\n", t, static_cast<unsigned long long>(results[t]));
    total = fnv(total, &results[t], sizeof results[t]);
  }
  std::printf("total: %016llx\n", static_cast<unsigned long long>(total));
  return 0;
}
