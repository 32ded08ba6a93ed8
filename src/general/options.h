/*
 * options.h — the runtime options, read once from the environment when the
 * library is loaded (options.c), before any slow path can want them. Slow
 * paths read the fields below; no fast path reads an option, and nothing
 * calls getenv after start-up.
 */
#ifndef BRISK_GENERAL_OPTIONS_H
#define BRISK_GENERAL_OPTIONS_H

#include "base/base.h"

typedef struct brisk_options_s {
  bool stats;                  /* BRISK_STATS: print the statistics table to stderr at exit */
  const char *stats_file;      /* BRISK_STATS_FILE: append JSON lines here (NULL: none) */
  uint64_t stats_interval_ms;  /* BRISK_STATS_INTERVAL_MS: one line per this many ms */
  uint64_t purge_delay_ms;     /* BRISK_PURGE_DELAY_MS: free pages go back after this; 0 = at once */
  uint64_t purge_delay_max_ms; /* BRISK_PURGE_DELAY_MAX_MS: the longest a free page a heap keeps
                                  past that delay for reuse stays backed (segment.c) */
  bool verbose;                /* BRISK_VERBOSE: print the options in effect at start */
  size_t huge_cache_bytes;     /* BRISK_HUGE_CACHE_MB: freed huge mappings kept per thread */
  uint64_t huge_cache_ms;      /* BRISK_HUGE_CACHE_MS: how long they are kept */
  bool huge_pages;             /* BRISK_THP: ask for transparent huge pages on segments */
  size_t region_cache_bytes;   /* BRISK_REGION_CACHE_MB: resident bytes of the region
                                  allocators' mapping cache (0: no cache) */
  uint64_t region_cache_ms;    /* BRISK_REGION_CACHE_MS: how long it keeps a mapping */
} brisk_options_t;

extern BRISK_HIDDEN brisk_options_t _brisk_options;

/* Read the environment (the library's constructor; idempotent), and hand
 * the OS layer's mapping cache its limits. */
BRISK_HIDDEN void _brisk_options_init(void);

/* text as a warning may print it: at most 200 of its characters, each byte
 * outside printable ASCII as \xNN (a newline would start a line of its own,
 * one that could pass for brisk's), "..." after a cut. Returns out. */
BRISK_HIDDEN const char *_brisk_options_quote(char *out, size_t capacity, const char *text);
/* Room _brisk_options_quote needs for any text. */
#define BRISK_QUOTE_CAPACITY (200 * 4 + 4)

#endif /* BRISK_GENERAL_OPTIONS_H */
