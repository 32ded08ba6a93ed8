/*
 * new_handler.cc — run the C++ new-handler for the nothrow forms of
 * operator new, where a handler that throws must make new return nullptr
 * (the standard's "as if inside try { } catch (...)"). The only file of
 * brisk compiled with exceptions. The C++ runtime functions a catch needs
 * are weak references, as in new_delete.cc: C programs never run this code,
 * and C++ programs have libstdc++ loaded to bind them.
 */
#include <new>

/* The personality routine is referenced from the unwind tables the
 * compiler emits, not from code, so only an assembler directive makes that
 * reference weak. */
__asm__(".weak __gxx_personality_v0");

extern "C" {
void *__cxa_begin_catch(void *) throw() __attribute__((weak));
void __cxa_end_catch() __attribute__((weak));
bool _brisk_call_new_handler_nothrow(std::new_handler handler) __attribute__((visibility("hidden")));
}

/* true: the handler returned, try again; false: it threw, give up. */
bool _brisk_call_new_handler_nothrow(std::new_handler handler) {
  try {
    handler();
    return true;
  } catch (...) {
    return false;
  }
}
