/*
 * annotate.c — the one fact annotate.h needs at run time: whether this
 * process runs under Valgrind, asked once when the library loads.
 */
#include "base/annotate.h"

#if BRISK_VALGRIND
bool _brisk_under_valgrind;

static void __attribute__((constructor)) detect_valgrind(void) {
  _brisk_under_valgrind = RUNNING_ON_VALGRIND != 0;
}
#endif
