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

#if BRISK_CXX_RUNTIME_WEAK
/* The C++ runtime functions a catch needs, weak (cxx_runtime.h): C
 * programs never run this code. The personality routine is referenced from
 * the unwind tables the compiler emits, not from code, so only an
 * assembler directive makes that reference weak. */
__asm__(".weak __gxx_personality_v0");
extern "C" {
void *__cxa_begin_catch(void *) throw() __attribute__((weak));
void __cxa_end_catch() __attribute__((weak));
}
#endif

BRISK_OPERATOR void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
  try {
    return ::operator new(size);
  } catch (...) {
    return nullptr;
  }
}
BRISK_OPERATOR void *operator new[](std::size_t size, const std::nothrow_t &) noexcept {
  try {
    return ::operator new[](size);
  } catch (...) {
    return nullptr;
  }
}
BRISK_OPERATOR void *operator new(std::size_t size, std::align_val_t alignment,
                                  const std::nothrow_t &) noexcept {
  try {
    return ::operator new(size, alignment);
  } catch (...) {
    return nullptr;
  }
}
BRISK_OPERATOR void *operator new[](std::size_t size, std::align_val_t alignment,
                                    const std::nothrow_t &) noexcept {
  try {
    return ::operator new[](size, alignment);
  } catch (...) {
    return nullptr;
  }
}
