/* brisk_hybrid_alloc and brisk_hybrid_free as a program reaches them
 * without <brisk/hybrid.h>'s inline functions (another language's
 * bindings, a function pointer): the library's exported symbols, declared
 * here by hand as such a binding would, for test_hybrid (region_checks.h).
 * This file must not include a brisk header: they define the two names
 * static inline. */
#include <stddef.h>

typedef struct brisk_hybrid_s brisk_hybrid_t;

void *brisk_hybrid_alloc(brisk_hybrid_t *hybrid, size_t size, size_t align);
void brisk_hybrid_free(brisk_hybrid_t *hybrid, void *p);

void *(*const brisk_test_hybrid_alloc_exported)(brisk_hybrid_t *, size_t, size_t) =
    brisk_hybrid_alloc;
void (*const brisk_test_hybrid_free_exported)(brisk_hybrid_t *, void *) = brisk_hybrid_free;
