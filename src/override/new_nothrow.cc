/*
 * new_nothrow.cc — the nothrow forms of operator new, as the standard
 * defines them: the throwing form, called by its global name (a program's
 * replacement where there is one; new_delete.cc), inside
 * try { } catch (...) { return nullptr; }. So a new-handler that throws
 * makes them return nullptr too. The only file of brisk compiled with
 * exceptions.
 */
#include <cstddef>
#include <new>

#include "override/cxx_runtime.h"

extern "C" __attribute__((visibility("hidden"))) void *_brisk_operator_new_nothrow(
    std::size_t size, std::size_t alignment);

#if BRISK_CXX_RUNTIME_WEAK
/* The C++ runtime functions a catch needs, weak (cxx_runtime.h). The
 * personality routine is referenced from the unwind tables the compiler
 * emits, through a word the dynamic linker fills in when brisk is loaded:
 * null there (libstdc++ loaded later, by a library a C program opened), no
 * catch of this file works, and each form below makes the throwing form's
 * calls itself without throwing (_brisk_operator_new_nothrow, new_delete.cc;
 * a replacement of the throwing form such a library brings is not
 * called). Only an assembler directive makes that reference weak. */
__asm__(".weak __gxx_personality_v0");
extern "C" {
void *__cxa_begin_catch(void *) throw() __attribute__((weak));
void __cxa_end_catch() __attribute__((weak));
void __gxx_personality_v0() __attribute__((weak));
}
#define BRISK_CATCH_WORKS (&__gxx_personality_v0 != nullptr)
#else
#define BRISK_CATCH_WORKS true
#endif

BRISK_OPERATOR void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
  if (!BRISK_CATCH_WORKS) return _brisk_operator_new_nothrow(size, 1);
  try {
    return ::operator new(size);
  } catch (...) {
    return nullptr;
  }
}
BRISK_OPERATOR void *operator new[](std::size_t size, const std::nothrow_t &) noexcept {
  if (!BRISK_CATCH_WORKS) return _brisk_operator_new_nothrow(size, 1);
  try {
    return ::operator new[](size);
  } catch (...) {
    return nullptr;
  }
}
BRISK_OPERATOR void *operator new(std::size_t size, std::align_val_t alignment,
                                  const std::nothrow_t &) noexcept {
  if (!BRISK_CATCH_WORKS) return _brisk_operator_new_nothrow(size, static_cast<std::size_t>(alignment));
  try {
    return ::operator new(size, alignment);
  } catch (...) {
    return nullptr;
  }
}
BRISK_OPERATOR void *operator new[](std::size_t size, std::align_val_t alignment,
                                    const std::nothrow_t &) noexcept {
  if (!BRISK_CATCH_WORKS) return _brisk_operator_new_nothrow(size, static_cast<std::size_t>(alignment));
  try {
    return ::operator new[](size, alignment);
  } catch (...) {
    return nullptr;
  }
}
