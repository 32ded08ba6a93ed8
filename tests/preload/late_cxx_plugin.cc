// The C++ side of late_cxx_runtime.c: a library a C program opens after
// start, so libstdc++ is loaded after brisk. Each case asks for more
// memory than any system has and says what came back.
#include <cstddef>
#include <cstdio>
#include <new>

namespace {

constexpr std::size_t kTooMuch = std::size_t(1) << 50;
int handler_calls;

// Called once, then removed: the next failure throws (or returns nullptr).
void handler_once() {
  handler_calls++;
  std::set_new_handler(nullptr);
}

const char *throwing(void *(*attempt)()) {
  try {
    void *p = attempt();
    std::printf("  returned %s\n", p == nullptr ? "nullptr" : "a block");
    return "no std::bad_alloc";
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int late_cxx_run(void) {
  int failures = 0;
  auto check = [&](const char *what, const char *failure) {
    std::printf("%s: %s\n", what, failure == nullptr ? "as the standard says" : failure);
    if (failure != nullptr) failures++;
  };
  check("new throws std::bad_alloc", throwing([] { return ::operator new(kTooMuch); }));
  check("new[] throws std::bad_alloc", throwing([] { return ::operator new[](kTooMuch); }));
  check("aligned new throws std::bad_alloc",
        throwing([] { return ::operator new(kTooMuch, std::align_val_t(64)); }));
  check("nothrow new returns nullptr",
        ::operator new(kTooMuch, std::nothrow) == nullptr ? nullptr : "a block");
  check("nothrow new[] returns nullptr",
        ::operator new[](kTooMuch, std::nothrow) == nullptr ? nullptr : "a block");
  check("aligned nothrow new returns nullptr",
        ::operator new(kTooMuch, std::align_val_t(4096), std::nothrow) == nullptr ? nullptr
                                                                                 : "a block");
  handler_calls = 0;
  std::set_new_handler(handler_once);
  const char *failure = throwing([] { return ::operator new(kTooMuch); });
  check("new calls the new-handler, then throws",
        failure != nullptr ? failure : handler_calls == 1 ? nullptr : "handler not called once");
  handler_calls = 0;
  std::set_new_handler(handler_once);
  void *p = ::operator new(kTooMuch, std::nothrow);
  check("nothrow new calls the new-handler, then returns nullptr",
        p != nullptr ? "a block" : handler_calls == 1 ? nullptr : "handler not called once");
  int *small = new int(7);
  check("new of an int works", *small == 7 ? nullptr : "wrong value");
  delete small;
  return failures;
}
