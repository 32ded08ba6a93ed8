/* brisk_fifo_alloc and brisk_fifo_free as a program reaches them without
 * <brisk/fifo.h>'s inline functions (another language's bindings, a
 * function pointer): the library's exported symbols, declared here by hand
 * as such a binding would, for test_fifo (region_checks.h). This file must
 * not include a brisk header: they define the two names static inline. */
#include <stddef.h>

typedef struct brisk_fifo_s brisk_fifo_t;

void *brisk_fifo_alloc(brisk_fifo_t *fifo, size_t size);
void brisk_fifo_free(brisk_fifo_t *fifo, void *p);

void *(*const brisk_test_fifo_alloc_exported)(brisk_fifo_t *, size_t) = brisk_fifo_alloc;
void (*const brisk_test_fifo_free_exported)(brisk_fifo_t *, void *) = brisk_fifo_free;
