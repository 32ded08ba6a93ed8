/*
 * new_delete.cc — every form of C++ operator new and delete over brisk.
 *
 * Failure follows the standard: a throwing new calls the installed
 * new-handler and retries; with no handler it throws std::bad_alloc. The
 * nothrow forms return nullptr.
 *
 * This file is compiled with -fno-exceptions and libbrisk is linked as C, so
 * a C program that preloads brisk never loads libstdc++. The two libstdc++
 * functions used here are weak references: any program that can call
 * operator new has libstdc++ loaded, and the dynamic linker binds them there.
 */
#include <brisk/malloc.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

extern "C" {
void *_brisk_malloc_aligned(size_t size, size_t alignment, bool zero) __attribute__((visibility("hidden")));
bool _brisk_call_new_handler_nothrow(std::new_handler handler) __attribute__((visibility("hidden")));
}

namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
[[noreturn]] void __throw_bad_alloc() __attribute__((weak));
}  // namespace std

#define BRISK_EXPORT __attribute__((visibility("default")))

namespace {

/* std::bad_alloc from the throwing forms. */
[[noreturn]] void throw_bad_alloc() {
  if (&std::__throw_bad_alloc != nullptr) std::__throw_bad_alloc();
  abort(); /* operator new without a C++ runtime: cannot happen in practice */
}

/* Returns true when a handler ran and the allocation should be retried. */
bool call_new_handler(bool nothrow) {
  std::new_handler handler = &std::get_new_handler != nullptr ? std::get_new_handler() : nullptr;
  if (handler != nullptr) {
    /* A handler may throw: through the throwing forms that is the caller's
     * std::bad_alloc; the nothrow forms must catch it and return nullptr. */
    if (nothrow) return _brisk_call_new_handler_nothrow(handler);
    handler();
    return true;
  }
  if (nothrow) return false;
  throw_bad_alloc();
}

/* alignment is 1 for the forms without one. A block of 8 bytes or less is
 * only 8-aligned in the release build, so brisk_malloc serves an alignment
 * of 16 only for a bigger size. */
void *new_impl(size_t size, size_t alignment, bool nothrow) {
  /* An alignment that is not a power of two (0 included) breaks the
   * standard's precondition; libstdc++'s aligned forms fail at once
   * (bad_alloc, or nullptr from the nothrow forms), without the
   * new-handler, and so do these, rather than hand out a block aligned to
   * something else. */
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    if (nothrow) return nullptr;
    throw_bad_alloc();
  }
  bool malloc_aligns = alignment <= 8 || (alignment <= alignof(std::max_align_t) && size > 8);
  for (;;) {
    void *p = malloc_aligns ? brisk_malloc(size) : _brisk_malloc_aligned(size, alignment, false);
    if (p != nullptr) return p;
    if (!call_new_handler(nothrow)) return nullptr;
  }
}

}  // namespace

BRISK_EXPORT void *operator new(size_t size) { return new_impl(size, 1, false); }
BRISK_EXPORT void *operator new[](size_t size) { return new_impl(size, 1, false); }
BRISK_EXPORT void *operator new(size_t size, const std::nothrow_t &) noexcept {
  return new_impl(size, 1, true);
}
BRISK_EXPORT void *operator new[](size_t size, const std::nothrow_t &) noexcept {
  return new_impl(size, 1, true);
}
BRISK_EXPORT void *operator new(size_t size, std::align_val_t alignment) {
  return new_impl(size, static_cast<size_t>(alignment), false);
}
BRISK_EXPORT void *operator new[](size_t size, std::align_val_t alignment) {
  return new_impl(size, static_cast<size_t>(alignment), false);
}
BRISK_EXPORT void *operator new(size_t size, std::align_val_t alignment,
                                const std::nothrow_t &) noexcept {
  return new_impl(size, static_cast<size_t>(alignment), true);
}
BRISK_EXPORT void *operator new[](size_t size, std::align_val_t alignment,
                                  const std::nothrow_t &) noexcept {
  return new_impl(size, static_cast<size_t>(alignment), true);
}

BRISK_EXPORT void operator delete(void *p) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete[](void *p) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete(void *p, size_t) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete[](void *p, size_t) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete(void *p, std::align_val_t) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete[](void *p, std::align_val_t) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete(void *p, size_t, std::align_val_t) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete[](void *p, size_t, std::align_val_t) noexcept { brisk_free(p); }
BRISK_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  brisk_free(p);
}
BRISK_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  brisk_free(p);
}
