/*
 * base.h — compiler macros, bit operations and atomics used by every layer.
 * Defined once here so the rest of brisk never spells a compiler builtin.
 */
#ifndef BRISK_BASE_H
#define BRISK_BASE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BRISK_LIKELY(x)   __builtin_expect(!!(x), 1)
#define BRISK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BRISK_INLINE      static inline __attribute__((always_inline))
#define BRISK_NOINLINE    __attribute__((noinline))
#define BRISK_COLD        __attribute__((cold, noinline))
#define BRISK_NORETURN    __attribute__((noreturn))
/* Cross-file internal symbols (_brisk_*) never leave the library. */
#define BRISK_HIDDEN      __attribute__((visibility("hidden")))
#define BRISK_CACHE_LINE  64
#define BRISK_ALIGNED(n)  __attribute__((aligned(n)))

/* Thread-local storage that a preloaded library can use before main and in
 * thread destructors: initial-exec never calls __tls_get_addr (which may
 * allocate). */
#define BRISK_TLS __thread __attribute__((tls_model("initial-exec")))

/* Debug checks (set by CMake's BRISK_DEBUG option, on in sanitizer builds). */
#ifndef BRISK_DEBUG
#define BRISK_DEBUG 0
#endif

/* An internal invariant, checked in debug builds and compiled out (though
 * still type-checked) in release: "brisk: internal check failed: CONDITION
 * (FILE:LINE)" and abort. */
#define BRISK_ASSERT(condition)                                          \
  do {                                                                   \
    if (BRISK_DEBUG && __builtin_expect(!(condition), 0)) {              \
      _brisk_assert_failed(#condition, __FILE__, __LINE__);              \
    }                                                                    \
  } while (0)
__attribute__((visibility("hidden"), noreturn, cold)) void _brisk_assert_failed(
    const char *condition, const char *file, int line);

/* The secure build (libbrisk-secure.so; CMake defines BRISK_SECURE=1 for its
 * targets): encoded and checked free lists, double-free tags, canaries after
 * each block's requested size. Tested as `if (BRISK_SECURE)`, so the release
 * build compiles the same code with the checks folded away. */
#ifndef BRISK_SECURE
#define BRISK_SECURE 0
#endif

/* For racy-by-design reads (a lock-free list's link word in pool.c, a
 * statistics snapshot of counts their owner keeps without atomics):
 * keeps ThreadSanitizer from instrumenting those loads. */
#define BRISK_NO_TSAN __attribute__((no_sanitize("thread")))

/* For a validator that reads what a region allocator keeps poisoned (the
 * fifo's block headers and free space) without unpoisoning it: keeps
 * AddressSanitizer from checking that function's own loads. */
#define BRISK_NO_ASAN __attribute__((no_sanitize("address")))

/* The sanitizer a build has: GCC says so with __SANITIZE_ADDRESS__ and
 * __SANITIZE_THREAD__, clang (the fuzz build's) with __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define BRISK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BRISK_ASAN 1
#endif
#endif
#ifndef BRISK_ASAN
#define BRISK_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#define BRISK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BRISK_TSAN 1
#endif
#endif
#ifndef BRISK_TSAN
#define BRISK_TSAN 0
#endif
#define BRISK_SANITIZED (BRISK_ASAN || BRISK_TSAN)

/* The body of a spin-wait loop: tells the CPU (and a hyperthread sibling)
 * that this thread is only waiting. */
BRISK_INLINE void brisk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/*
 * Add n to a counter that only the calling thread writes and any thread may
 * read with a relaxed load (per-thread statistics). On x86-64 one plain
 * `add` to memory: not locked, since there is one writer, and an aligned
 * 8-byte store is single-copy atomic for the readers. Elsewhere, and under
 * ThreadSanitizer (which must see the access), a relaxed load and store.
 */
BRISK_INLINE void brisk_owner_add(_Atomic size_t *counter, size_t n) {
#if defined(__x86_64__) && !BRISK_TSAN
  __asm__ __volatile__("addq %1, %0" : "+m"(*(size_t *)counter) : "er"(n));
#else
  atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n,
                        memory_order_relaxed);
#endif
}

/* Make the compiler hold x in one register from here on. Used where GCC
 * would otherwise rebuild an address in several addressing forms on a fast
 * path (three instructions where one register does). Emits nothing. */
#define BRISK_KEEP_IN_REGISTER(x) __asm__("" : "+r"(x))

/*
 * Decrement a plain (single-thread) counter and tell whether its old value,
 * read as signed, was at most 1: "it reached zero, or was already zero or
 * negative" in one test. On x86-64 one `sub` to memory whose flags are the
 * answer (GCC will not fuse the C form: for the old value INT_MIN the flags
 * and the wrapped new value disagree, which callers here never meet).
 */
BRISK_INLINE bool brisk_decrement_was_at_most_one(uint32_t *counter) {
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__) && !BRISK_SANITIZED
  bool at_most_one;
  __asm__("subl $1, %0" : "+m"(*counter), "=@ccle"(at_most_one));
  return at_most_one;
#else
  uint32_t old = *counter;
  *counter = old - 1;
  return (int32_t)old <= 1;
#endif
}

BRISK_INLINE size_t brisk_bit_scan_reverse(size_t x) { /* x != 0 */
  return (size_t)(63 - __builtin_clzll((unsigned long long)x));
}
BRISK_INLINE size_t brisk_count_trailing_zeros(uint64_t x) { /* x != 0 */
  return (size_t)__builtin_ctzll(x);
}
BRISK_INLINE bool brisk_is_power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }
BRISK_INLINE size_t brisk_align_up(size_t x, size_t align) { /* align: power of two */
  return (x + align - 1) & ~(align - 1);
}
BRISK_INLINE bool brisk_mul_overflows(size_t a, size_t b, size_t *out) {
  return __builtin_mul_overflow(a, b, out);
}

/* Relaxed atomics for fields that are shared but carry no ordering of their
 * own (hints and owner tags whose races are benign by design). */
#define brisk_load_relaxed(p)     atomic_load_explicit((p), memory_order_relaxed)
#define brisk_store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

#endif /* BRISK_BASE_H */
