// Every form of operator new/delete comes from brisk, with the standard
// failure behaviour: try the new-handler, then throw (or return nullptr).
#include <brisk.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <new>

#include "test_util.h"

using brisk_test::escape;
using brisk_test::is_aligned;

namespace {

// Far more than the address space; volatile so no call can be elided.
volatile size_t g_huge = SIZE_MAX / 4;
volatile size_t g_size_max = SIZE_MAX;

struct alignas(256) Aligned256 {
  char bytes[256];
};

// brisk_usable_size only makes sense for brisk's blocks, so this also shows
// where the memory came from.
void expect_brisk_block(const void *p, size_t size) {
  ASSERT_NE(p, nullptr);
  EXPECT_GE(brisk_usable_size(p), size);
}

TEST(BriskNewDelete, PlainAndArray) {
  int *one = new int(42);
  expect_brisk_block(one, sizeof(int));
  EXPECT_EQ(*one, 42);
  delete one;

  char *many = new char[1000];
  expect_brisk_block(many, 1000);
  many[999] = 1;
  escape(many);
  delete[] many;

  // The sized forms of delete.
  void *raw = ::operator new(300);
  expect_brisk_block(raw, 300);
  ::operator delete(raw, 300);
  void *raw_array = ::operator new[](5000);
  expect_brisk_block(raw_array, 5000);
  ::operator delete[](raw_array, 5000);
}

TEST(BriskNewDelete, Nothrow) {
  int *one = new (std::nothrow) int(7);
  expect_brisk_block(one, sizeof(int));
  delete one;
  char *many = new (std::nothrow) char[2000];
  expect_brisk_block(many, 2000);
  escape(many);
  delete[] many;
  void *raw = ::operator new(64, std::nothrow);
  expect_brisk_block(raw, 64);
  ::operator delete(raw, std::nothrow);
}

TEST(BriskNewDelete, Aligned) {
  Aligned256 *one = new Aligned256;
  expect_brisk_block(one, sizeof(Aligned256));
  EXPECT_TRUE(is_aligned(one, 256)) << one;
  delete one;

  Aligned256 *many = new Aligned256[7];
  expect_brisk_block(many, 7 * sizeof(Aligned256));
  EXPECT_TRUE(is_aligned(many, 256)) << many;
  delete[] many;

  Aligned256 *nothrow_one = new (std::nothrow) Aligned256;
  expect_brisk_block(nothrow_one, sizeof(Aligned256));
  EXPECT_TRUE(is_aligned(nothrow_one, 256)) << nothrow_one;
  delete nothrow_one;

  for (size_t alignment : {size_t{32}, size_t{4096}, size_t{1} << 16, size_t{1} << 21}) {
    const std::align_val_t al{alignment};
    void *p = ::operator new(100, al);
    expect_brisk_block(p, 100);
    EXPECT_TRUE(is_aligned(p, alignment)) << p;
    ::operator delete(p, al);

    p = ::operator new(100, al);
    EXPECT_TRUE(is_aligned(p, alignment)) << p;
    ::operator delete(p, 100, al);

    p = ::operator new[](3 * alignment, al);
    expect_brisk_block(p, 3 * alignment);
    EXPECT_TRUE(is_aligned(p, alignment)) << p;
    ::operator delete[](p, 3 * alignment, al);

    p = ::operator new(100, al, std::nothrow);
    expect_brisk_block(p, 100);
    EXPECT_TRUE(is_aligned(p, alignment)) << p;
    ::operator delete(p, al, std::nothrow);

    p = ::operator new[](100, al, std::nothrow);
    expect_brisk_block(p, 100);
    EXPECT_TRUE(is_aligned(p, alignment)) << p;
    ::operator delete[](p, al, std::nothrow);
  }
}

// An alignment up to 16 with a size of 8 bytes or less: the release
// build's blocks of 1-8 bytes are only 8-aligned, which the aligned forms
// must not hand out for 16. Many live at once, so that half of the 8-byte
// class's blocks (those at an odd multiple of 8) would come up.
TEST(BriskNewDelete, AlignedFormsHonourSixteenForTinySizes) {
  for (size_t alignment : {size_t{8}, size_t{16}}) {
    const std::align_val_t al{alignment};
    for (size_t size : {size_t{0}, size_t{1}, size_t{8}, size_t{9}}) {
      void *blocks[64];
      for (void *&p : blocks) {
        p = ::operator new(size, al);
        expect_brisk_block(p, size);
        EXPECT_TRUE(is_aligned(p, alignment)) << p << " size " << size;
      }
      for (void *p : blocks) ::operator delete(p, al);
      for (void *&p : blocks) {
        p = ::operator new[](size, al, std::nothrow);
        expect_brisk_block(p, size);
        EXPECT_TRUE(is_aligned(p, alignment)) << p << " size " << size;
      }
      for (void *p : blocks) ::operator delete[](p, al, std::nothrow);
    }
  }
}

TEST(BriskNewDelete, HugeThrowsBadAlloc) {
  EXPECT_THROW(
      {
        char *p = new char[g_huge];
        escape(p);
        delete[] p;
      },
      std::bad_alloc);
  EXPECT_THROW(escape(::operator new(g_huge)), std::bad_alloc);
  EXPECT_THROW(escape(::operator new[](g_huge)), std::bad_alloc);
  EXPECT_THROW(escape(::operator new(g_huge, std::align_val_t{64})), std::bad_alloc);
  EXPECT_THROW(escape(::operator new[](g_huge, std::align_val_t{4096})), std::bad_alloc);
}

// SIZE_MAX rounded up to an alignment wraps to a small number; libstdc++
// 12's aligned forms then return a small block. brisk's must fail.
TEST(BriskNewDelete, SizeMaxWithAnAlignmentFails) {
  for (size_t alignment : {size_t{32}, size_t{64}, size_t{4096}, size_t{1} << 21}) {
    const std::align_val_t al{alignment};
    EXPECT_THROW(escape(::operator new(g_size_max, al)), std::bad_alloc) << alignment;
    EXPECT_THROW(escape(::operator new[](g_size_max - 1, al)), std::bad_alloc) << alignment;
    EXPECT_EQ(::operator new(g_size_max, al, std::nothrow), nullptr) << alignment;
    EXPECT_EQ(::operator new[](g_size_max - alignment + 2, al, std::nothrow), nullptr) << alignment;
  }
}

TEST(BriskNewDelete, HugeNothrowReturnsNull) {
  char *p = new (std::nothrow) char[g_huge];
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(::operator new(g_huge, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](g_huge, std::nothrow), nullptr);
  EXPECT_EQ(::operator new(g_huge, std::align_val_t{64}, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](g_huge, std::align_val_t{64}, std::nothrow), nullptr);
}

// Counts its calls and uninstalls itself on the third, so new must keep
// retrying while a handler is installed and then throw.
int g_handler_calls = 0;
void counting_handler() {
  if (++g_handler_calls == 3) std::set_new_handler(nullptr);
}

class BriskNewHandler : public testing::Test {
 protected:
  void SetUp() override { g_handler_calls = 0; }
  void TearDown() override { std::set_new_handler(nullptr); }
};

TEST_F(BriskNewHandler, CalledUntilUninstalledThenThrows) {
  std::set_new_handler(counting_handler);
  EXPECT_THROW(escape(::operator new(g_huge)), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 3);
}

TEST_F(BriskNewHandler, CalledForArrayAndAlignedForms) {
  std::set_new_handler(counting_handler);
  EXPECT_THROW(escape(::operator new[](g_huge)), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 3);

  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  EXPECT_THROW(escape(::operator new(g_huge, std::align_val_t{256})), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 3);
}

TEST_F(BriskNewHandler, CalledByNothrowFormsBeforeReturningNull) {
  std::set_new_handler(counting_handler);
  EXPECT_EQ(::operator new(g_huge, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 3);

  g_handler_calls = 0;
  std::set_new_handler(counting_handler);
  EXPECT_EQ(::operator new(g_huge, std::align_val_t{64}, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 3);
}

// An alignment that is not a power of two (0 included) breaks operator new's
// precondition: libstdc++'s aligned forms fail at once, without the
// new-handler (bad_alloc, or nullptr from the nothrow forms), and so must
// brisk's, rather than hand out a block aligned to something else.
TEST_F(BriskNewHandler, NonPowerOfTwoAlignmentFailsWithoutTheHandler) {
  std::set_new_handler(counting_handler);
  EXPECT_THROW(escape(::operator new(100, std::align_val_t{24})), std::bad_alloc);
  EXPECT_THROW(escape(::operator new[](100, std::align_val_t{48})), std::bad_alloc);
  EXPECT_EQ(::operator new(100, std::align_val_t{24}, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](5000, std::align_val_t{4097}, std::nothrow), nullptr);
  // 0 is no power of two either.
  EXPECT_THROW(escape(::operator new(100, std::align_val_t{0})), std::bad_alloc);
  EXPECT_THROW(escape(::operator new[](1, std::align_val_t{0})), std::bad_alloc);
  EXPECT_EQ(::operator new(100, std::align_val_t{0}, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](100, std::align_val_t{0}, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 0);
}

// A handler that throws ends the attempt with its exception.
TEST_F(BriskNewHandler, HandlerMayThrow) {
  std::set_new_handler([] {
    g_handler_calls++;
    throw std::bad_alloc();
  });
  EXPECT_THROW(escape(::operator new(g_huge)), std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 1);
}

// The nothrow forms behave as if the throwing form ran inside
// try { } catch (...) { return nullptr; }: a throwing handler gives nullptr.
TEST_F(BriskNewHandler, NothrowFormsReturnNullWhenHandlerThrows) {
  std::set_new_handler([] {
    g_handler_calls++;
    throw std::bad_alloc();
  });
  EXPECT_EQ(::operator new(g_huge, std::nothrow), nullptr);
  EXPECT_EQ(::operator new[](g_huge, std::nothrow), nullptr);
  EXPECT_EQ(::operator new(g_huge, std::align_val_t{128}, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 3);
}

}  // namespace
