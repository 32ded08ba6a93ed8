/*
 * new_delete.cc — C++ operator new and delete over brisk: the four forms a
 * program may replace on their own (operator new(size_t) and operator
 * delete(void *) are in new_delete_inline.c, in C for malloc's and free's
 * inline paths), and the forms the standard defines in terms of them.
 *
 * The standard defines operator new[] as a call of operator new, and the
 * array, sized and nothrow forms of delete as calls of operator delete (the
 * aligned forms likewise, of the aligned basic ones), so that a program that
 * replaces only operator new(size_t) and operator delete(void *) (a leak
 * tracker that puts a header before each block, a pool) has every form
 * reach its own. These do the same: each derived form calls the basic one
 * by its global name, which binds to the program's replacement where there
 * is one and to the basic form below otherwise (the shared libraries keep
 * the operators preemptible despite -Bsymbolic-functions:
 * new_delete.dynlist). The nothrow forms of new are in new_nothrow.cc,
 * which may catch what the throwing form throws.
 *
 * Failure follows the standard: a throwing new calls the installed
 * new-handler and retries; with no handler it throws std::bad_alloc.
 * Compiled with -fno-exceptions; cxx_runtime.h says how libstdc++ is
 * reached.
 */
#include <brisk/malloc.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "override/cxx_runtime.h"

extern "C" {
void *_brisk_malloc_aligned(size_t size, size_t alignment, bool zero) __attribute__((visibility("hidden")));
}

namespace std {
new_handler get_new_handler() noexcept BRISK_CXX_RUNTIME;
[[noreturn]] void __throw_bad_alloc() BRISK_CXX_RUNTIME;
}  // namespace std

#if BRISK_CXX_RUNTIME_WEAK
/* The global scope first (a program linked with libstdc++, or a library
 * opened RTLD_GLOBAL), then libstdc++.so.6 wherever it was loaded: a
 * library opened RTLD_LOCAL (ctypes' default) brings it in outside the
 * global scope. RTLD_NOLOAD loads nothing; the reference it takes is
 * dropped at once, and the library stays with the objects that loaded it,
 * the caller among them. */
extern "C" void *_brisk_cxx_late_symbol(const char *name) {
  void *symbol = dlsym(RTLD_DEFAULT, name);
  if (symbol != nullptr) return symbol;
  void *library = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  symbol = dlsym(library, name);
  dlclose(library);
  return symbol;
}
#endif

namespace {

/* std::bad_alloc from the throwing forms. */
[[noreturn]] void throw_bad_alloc() {
  auto throw_it = BRISK_CXX_RUNTIME_FUNCTION(std::__throw_bad_alloc, "_ZSt17__throw_bad_allocv");
  if (throw_it != nullptr) throw_it();
  abort(); /* operator new called with no C++ runtime in the process */
}

/* The installed new-handler, or null. */
std::new_handler installed_new_handler() {
  auto get = BRISK_CXX_RUNTIME_FUNCTION(std::get_new_handler, "_ZSt15get_new_handlerv");
  return get != nullptr ? get() : nullptr;
}

/* alignment is 1 for the forms without one. A block of 8 bytes or less is
 * only 8-aligned in the release build, so brisk_malloc serves an alignment
 * of 16 only for a bigger size. NULL when there is no memory. */
void *allocate(size_t size, size_t alignment) {
  bool malloc_aligns = alignment <= 8 || (alignment <= alignof(std::max_align_t) && size > 8);
  return malloc_aligns ? brisk_malloc(size) : _brisk_malloc_aligned(size, alignment, false);
}

/* After an allocation found no memory: the installed new-handler, then
 * another try, until one succeeds; with no handler, std::bad_alloc. */
void *allocate_after_failure(size_t size, size_t alignment) {
  for (;;) {
    std::new_handler handler = installed_new_handler();
    if (handler == nullptr) throw_bad_alloc();
    handler(); /* frees memory and returns (try again), throws, or ends the program */
    void *p = allocate(size, alignment);
    if (p != nullptr) return p;
  }
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) void *_brisk_operator_new_failed(size_t size) {
  return allocate_after_failure(size, 1);
}

/* The nothrow forms where no catch can work (new_nothrow.cc): the block, or
 * after a failure the new-handler and another try until one succeeds;
 * nullptr with no handler, and for an alignment that is not a power of
 * two. */
extern "C" __attribute__((visibility("hidden"))) void *_brisk_operator_new_nothrow(size_t size,
                                                                                   size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
  for (;;) {
    void *p = allocate(size, alignment);
    if (p != nullptr) return p;
    std::new_handler handler = installed_new_handler();
    if (handler == nullptr) return nullptr;
    handler();
  }
}

/* The basic forms but the two in new_delete_inline.c. */
BRISK_OPERATOR void *operator new(size_t size, std::align_val_t alignment_value) {
  size_t alignment = static_cast<size_t>(alignment_value);
  /* An alignment that is not a power of two (0 included) breaks the
   * standard's precondition; libstdc++'s aligned forms fail at once
   * (bad_alloc, or nullptr from the nothrow forms), without the
   * new-handler, and so does this, rather than hand out a block aligned to
   * something else. */
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) throw_bad_alloc();
  void *p = allocate(size, alignment);
  if (p != nullptr) return p;
  return allocate_after_failure(size, alignment);
}
BRISK_OPERATOR void operator delete(void *p, std::align_val_t) noexcept { brisk_free(p); }

/* The derived forms, each as the standard defines it. operator
 * delete(void *) is defined in new_delete_inline.c, which GCC's
 * -Wsized-deallocation cannot see from here. */
#pragma GCC diagnostic ignored "-Wsized-deallocation"
BRISK_OPERATOR void *operator new[](size_t size) { return ::operator new(size); }
BRISK_OPERATOR void *operator new[](size_t size, std::align_val_t alignment) {
  return ::operator new(size, alignment);
}
BRISK_OPERATOR void operator delete[](void *p) noexcept { ::operator delete(p); }
BRISK_OPERATOR void operator delete(void *p, size_t) noexcept { ::operator delete(p); }
BRISK_OPERATOR void operator delete[](void *p, size_t) noexcept { ::operator delete[](p); }
BRISK_OPERATOR void operator delete(void *p, const std::nothrow_t &) noexcept { ::operator delete(p); }
BRISK_OPERATOR void operator delete[](void *p, const std::nothrow_t &) noexcept {
  ::operator delete[](p);
}
BRISK_OPERATOR void operator delete[](void *p, std::align_val_t alignment) noexcept {
  ::operator delete(p, alignment);
}
BRISK_OPERATOR void operator delete(void *p, size_t, std::align_val_t alignment) noexcept {
  ::operator delete(p, alignment);
}
BRISK_OPERATOR void operator delete[](void *p, size_t, std::align_val_t alignment) noexcept {
  ::operator delete[](p, alignment);
}
BRISK_OPERATOR void operator delete(void *p, std::align_val_t alignment,
                                    const std::nothrow_t &) noexcept {
  ::operator delete(p, alignment);
}
BRISK_OPERATOR void operator delete[](void *p, std::align_val_t alignment,
                                      const std::nothrow_t &) noexcept {
  ::operator delete[](p, alignment);
}
