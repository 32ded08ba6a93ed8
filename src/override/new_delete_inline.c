/*
 * new_delete_inline.c — the two operators a C++ program calls most,
 * operator new(size_t) and operator delete(void *), defined in C under
 * their mangled names so that they take malloc's and free's inline fast
 * paths (alloc.h, which only C can include) instead of calling brisk_malloc
 * and brisk_free. The rest of the operators, and what operator new does
 * when no memory is left (the new-handler, std::bad_alloc), are C++:
 * new_delete.cc.
 *
 * The forms derived from these (sized delete, the array forms) call them by
 * their global names, so a program's replacements keep being what they
 * call; these are weak and preemptible as every operator is
 * (override/cxx_runtime.h, new_delete.dynlist).
 */
#include "general/alloc.h"

/* The mangled names below are those of an LP64 target, where size_t is
 * unsigned long ("m"). */
_Static_assert(_Generic((size_t)0, unsigned long: 1, default: 0), "size_t is unsigned long");

#define BRISK_OPERATOR_C __attribute__((visibility("default"), weak))

/* A reference to malloc from the operators' object: a program linked to
 * libbrisk.a that calls only operator new and delete (and libc, which
 * calls malloc) pulls override.c's malloc, free and the rest out of the
 * archive with them, rather than running glibc's malloc beside brisk's
 * operators. */
void *malloc(size_t size);
__attribute__((used)) static void *(*const pull_in_malloc)(size_t) = malloc;

/* new_delete.cc: the new-handler loop after operator new(size) found no
 * memory; returns a block or throws std::bad_alloc. */
BRISK_HIDDEN void *_brisk_operator_new_failed(size_t size);

BRISK_OPERATOR_C void *brisk_operator_new(size_t size) __asm__("_Znwm");
BRISK_OPERATOR_C void brisk_operator_delete(void *p) __asm__("_ZdlPv");

/* operator new past malloc's fast path: malloc's slow path, then, with no
 * memory, the new-handler loop. Out of line, so that the fast path keeps
 * size in the register it came in and saves none. */
static BRISK_NOINLINE void *operator_new_slow(size_t size) {
  void *p = brisk_malloc_after_pop(_brisk_tls_heap, size);
  if (p != NULL) return p;
  /* A tail call: an exception thrown there unwinds from this frame's caller
   * (the file is compiled with unwind tables all the same: CMakeLists.txt). */
  return _brisk_operator_new_failed(size);
}

void *brisk_operator_new(size_t size) {
  void *p = brisk_malloc_pop_either(_brisk_tls_heap, size);
  if (BRISK_LIKELY(p != NULL)) return p;
  return operator_new_slow(size);
}

void brisk_operator_delete(void *p) { brisk_free_inline(p); }
