/*
 * annotate.c — the one fact annotate.h needs at run time: whether this
 * process runs under a Valgrind tool that tracks heap blocks, asked once
 * when the library loads.
 */
#include "base/annotate.h"

#if BRISK_VALGRIND
#include <stdlib.h>
#include <string.h>

bool _brisk_under_valgrind;

/*
 * Valgrind preloads vgpreload_<tool>-<platform>.so for the tools that
 * replace malloc (memcheck, helgrind, drd, massif, dhat); those are the
 * ones that read MALLOCLIKE/mempool requests. Profilers (callgrind,
 * cachegrind) preload only vgpreload_core, and a client request there
 * would only add instructions to the counts being measured.
 */
static bool tool_tracks_heap_blocks(void) {
  const char *preload = getenv("LD_PRELOAD");
  if (preload == NULL) return true; /* unknown: annotate, the safe side */
  static const char *const tools[] = {"memcheck", "helgrind", "drd", "massif", "dhat"};
  for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++)
    if (strstr(preload, tools[i]) != NULL) return true;
  return strstr(preload, "vgpreload_core") == NULL;
}

static void __attribute__((constructor)) detect_valgrind(void) {
  _brisk_under_valgrind = RUNNING_ON_VALGRIND != 0 && tool_tracks_heap_blocks();
}
#endif
