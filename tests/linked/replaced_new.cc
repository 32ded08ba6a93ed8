// A program that replaces only the four basic forms of operator new and
// delete, as a leak tracker or a pool does: each block carries a header
// with a tag and the program counts its calls. The standard defines every
// other form (arrays, sized, nothrow, the aligned ones) as a call of these,
// so every such form that brisk defines must reach them: a block of the
// program's must never reach brisk's free (which would abort on a pointer
// 32 bytes into a block), nor one of brisk's the program's delete.
//
// Built three ways (tests/CMakeLists.txt): linked with libbrisk.a and with
// libbrisk-secure.a (brisk's operators are weak there, so the program's own
// win without a "multiple definition" error), and linked with neither, to
// run under LD_PRELOAD of each shared library. Exits 1 with a line per
// form that missed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

constexpr std::size_t kHeader = 32;  // keeps any alignment up to 32
constexpr std::uint64_t kTag = 0x6e65772d72706c63;  // "new-rplc"

long news, deletes, aligned_news, aligned_deletes;
int failures;

void *tagged(std::size_t size, std::size_t alignment) {
  // The header takes a whole alignment (a power of two, 32 at least), so
  // the block after it is aligned too.
  std::size_t lead = alignment > kHeader ? alignment : kHeader;
  char *raw = static_cast<char *>(std::aligned_alloc(lead, (lead + size + lead - 1) / lead * lead));
  if (raw == nullptr) throw std::bad_alloc();
  char *block = raw + lead;
  std::memcpy(block - 16, &kTag, sizeof kTag);
  std::memcpy(block - 8, &raw, sizeof raw);
  return block;
}

void untag(void *p, const char *who) {
  if (p == nullptr) return;
  char *block = static_cast<char *>(p);
  std::uint64_t tag;
  std::memcpy(&tag, block - 16, sizeof tag);
  if (tag != kTag) {
    std::fprintf(stderr, "replaced_new: %s got a block the program's operator new did not make\n", who);
    std::exit(1);
  }
  char *raw;
  std::memcpy(&raw, block - 8, sizeof raw);
  std::memset(block - 16, 0, sizeof tag);
  std::free(raw);
}

}  // namespace

void *operator new(std::size_t size) {
  news++;
  return tagged(size, 16);
}
void operator delete(void *p) noexcept {
  deletes++;
  untag(p, "operator delete(void *)");
}
void *operator new(std::size_t size, std::align_val_t alignment) {
  aligned_news++;
  return tagged(size, static_cast<std::size_t>(alignment));
}
void operator delete(void *p, std::align_val_t) noexcept {
  aligned_deletes++;
  untag(p, "operator delete(void *, std::align_val_t)");
}

namespace {

// Keeps the compiler from pairing up or removing the calls below.
void *volatile sink;

void expect(const char *form, long &counter, long before) {
  if (counter != before + 1) {
    std::fprintf(stderr, "replaced_new: %s did not call the program's basic form\n", form);
    failures++;
  }
}

}  // namespace

int main() {
  const std::align_val_t a64{64};
  const std::size_t n = 40;
  long before;

  before = news;
  sink = ::operator new[](n);
  expect("operator new[](size_t)", news, before);
  before = deletes;
  ::operator delete[](sink);
  expect("operator delete[](void *)", deletes, before);

  sink = ::operator new(n);
  before = deletes;
  ::operator delete(sink, n);
  expect("operator delete(void *, size_t)", deletes, before);

  sink = ::operator new[](n);
  before = deletes;
  ::operator delete[](sink, n);
  expect("operator delete[](void *, size_t)", deletes, before);

  before = news;
  sink = ::operator new(n, std::nothrow);
  expect("operator new(size_t, nothrow_t)", news, before);
  before = deletes;
  ::operator delete(sink, std::nothrow);
  expect("operator delete(void *, nothrow_t)", deletes, before);

  before = news;
  sink = ::operator new[](n, std::nothrow);
  expect("operator new[](size_t, nothrow_t)", news, before);
  before = deletes;
  ::operator delete[](sink, std::nothrow);
  expect("operator delete[](void *, nothrow_t)", deletes, before);

  before = aligned_news;
  sink = ::operator new[](n, a64);
  expect("operator new[](size_t, align_val_t)", aligned_news, before);
  before = aligned_deletes;
  ::operator delete[](sink, a64);
  expect("operator delete[](void *, align_val_t)", aligned_deletes, before);

  sink = ::operator new(n, a64);
  before = aligned_deletes;
  ::operator delete(sink, n, a64);
  expect("operator delete(void *, size_t, align_val_t)", aligned_deletes, before);

  sink = ::operator new[](n, a64);
  before = aligned_deletes;
  ::operator delete[](sink, n, a64);
  expect("operator delete[](void *, size_t, align_val_t)", aligned_deletes, before);

  before = aligned_news;
  sink = ::operator new(n, a64, std::nothrow);
  expect("operator new(size_t, align_val_t, nothrow_t)", aligned_news, before);
  before = aligned_deletes;
  ::operator delete(sink, a64, std::nothrow);
  expect("operator delete(void *, align_val_t, nothrow_t)", aligned_deletes, before);

  before = aligned_news;
  sink = ::operator new[](n, a64, std::nothrow);
  expect("operator new[](size_t, align_val_t, nothrow_t)", aligned_news, before);
  before = aligned_deletes;
  ::operator delete[](sink, a64, std::nothrow);
  expect("operator delete[](void *, align_val_t, nothrow_t)", aligned_deletes, before);

  // What a new-expression and a delete-expression compile to (the sized
  // delete since C++14).
  struct Node {
    long fields[5];
  };
  before = news;
  sink = new Node();
  expect("new Node", news, before);
  before = deletes;
  delete static_cast<Node *>(sink);
  expect("delete of a Node", deletes, before);

  if (failures != 0) return 1;
  std::printf("replaced_new: every form reached the program's operators\n");
  return 0;
}
