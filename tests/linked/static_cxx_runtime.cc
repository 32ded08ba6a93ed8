// operator new's failure in a program linked with libbrisk.a and
// -static-libstdc++: the C++ runtime functions brisk's operators call (the
// new-handler's getter, the throw of std::bad_alloc, the catch of the
// nothrow forms) are linked in from libstdc++.a. They were weak references,
// which pull no archive member, so the program aborted where new should
// throw. Exits 1 with a line per check that failed.
#include <cstdint>
#include <cstdio>
#include <new>

namespace {

int handler_calls;
int failures;

void fail(const char *what) {
  std::fprintf(stderr, "static_cxx_runtime: %s\n", what);
  failures++;
}

// More than any allocator can give (beyond PTRDIFF_MAX): fails at once.
volatile std::size_t too_big = SIZE_MAX / 2 + 1;

}  // namespace

int main() {
  try {
    void *p = ::operator new(too_big);
    fail("operator new of too many bytes returned");
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
  }

  std::set_new_handler([] {
    if (++handler_calls == 3) std::set_new_handler(nullptr);
  });
  try {
    void *p = ::operator new[](too_big, std::align_val_t{64});
    fail("aligned operator new[] of too many bytes returned");
    ::operator delete[](p, std::align_val_t{64});
  } catch (const std::bad_alloc &) {
    if (handler_calls != 3) fail("the new-handler did not run until it removed itself");
  }

  // A handler that throws: the nothrow form returns nullptr.
  std::set_new_handler([] { throw std::bad_alloc(); });
  if (::operator new(too_big, std::nothrow) != nullptr) fail("nothrow new of too many bytes");
  std::set_new_handler(nullptr);

  if (failures != 0) return 1;
  std::printf("static_cxx_runtime: bad_alloc thrown, new-handler called, nothrow gave nullptr\n");
  return 0;
}
