/*
 * options.c — one table of runtime options, read from the environment once
 * at load time. A value that is not a number in its range gets one warning
 * naming the option and the value, and the default is used: the program
 * runs on. An option set to the empty string is one not set (as glibc's
 * tunables and most tools take it): the default, and no warning. Parsing
 * allocates nothing (brisk may be the malloc being set up).
 *
 * A setuid or setgid program (AT_SECURE) reads no option: secure_getenv
 * answers NULL there, as glibc ignores its own tunables, so that the user
 * who starts it cannot make it write a file of their naming
 * (BRISK_STATS_FILE) or print to its stderr.
 */
#define _GNU_SOURCE
#include "general/options.h"
#include "os/os.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

brisk_options_t _brisk_options = {
    .stats = false,
    .stats_file = NULL,
    .stats_interval_ms = 1000,
    .purge_delay_ms = 50,
    .purge_delay_max_ms = 1000,
    .verbose = false,
    .huge_cache_bytes = (size_t)128 << 20,
    .huge_cache_ms = 1000,
    .huge_pages = false,
    .region_cache_bytes = BRISK_OS_CACHE_DEFAULT_BYTES,
    .region_cache_ms = BRISK_OS_CACHE_DEFAULT_DELAY_MS,
};

typedef enum { OPTION_BOOL, OPTION_NUMBER, OPTION_MIB, OPTION_PATH } option_type_t;

typedef struct option_s {
  const char *name;
  option_type_t type;
  uint64_t min, max;   /* numbers: the accepted range (MiB for OPTION_MIB) */
  void *field;
  const char *meaning;
} option_t;

static const option_t options[] = {
    {"BRISK_STATS", OPTION_BOOL, 0, 1, &_brisk_options.stats,
     "print the statistics table to stderr at exit"},
    {"BRISK_STATS_FILE", OPTION_PATH, 0, 0, &_brisk_options.stats_file,
     "append one JSON line of statistics per interval to this file"},
    {"BRISK_STATS_INTERVAL_MS", OPTION_NUMBER, 1, 3600000, &_brisk_options.stats_interval_ms,
     "milliseconds between lines of BRISK_STATS_FILE"},
    {"BRISK_PURGE_DELAY_MS", OPTION_NUMBER, 0, 3600000, &_brisk_options.purge_delay_ms,
     "free pages go back to the system after this many ms (0: at once)"},
    {"BRISK_PURGE_DELAY_MAX_MS", OPTION_NUMBER, 0, 3600000, &_brisk_options.purge_delay_max_ms,
     "the longest a free page kept for reuse waits (a heap keeps as much as it faulted in "
     "again soon after purging it)"},
    {"BRISK_VERBOSE", OPTION_BOOL, 0, 1, &_brisk_options.verbose,
     "print the options in effect at start"},
    {"BRISK_HUGE_CACHE_MB", OPTION_MIB, 0, 65536, &_brisk_options.huge_cache_bytes,
     "MiB of freed huge-block mappings each thread keeps for reuse (0: none)"},
    {"BRISK_HUGE_CACHE_MS", OPTION_NUMBER, 0, 3600000, &_brisk_options.huge_cache_ms,
     "how long a freed huge-block mapping is kept"},
    {"BRISK_THP", OPTION_BOOL, 0, 1, &_brisk_options.huge_pages,
     "ask the kernel for transparent huge pages on segments (madvise)"},
    {"BRISK_REGION_CACHE_MB", OPTION_MIB, 0, 65536, &_brisk_options.region_cache_bytes,
     "MiB of destroyed region allocators' memory kept for the next ones (0: none)"},
    {"BRISK_REGION_CACHE_MS", OPTION_NUMBER, 0, 3600000, &_brisk_options.region_cache_ms,
     "how long a destroyed region allocator's mapping is kept (0: not at all)"},
};

static bool parse_number(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
  if (text[0] < '0' || text[0] > '9') return false; /* no sign, no blanks */
  char *end;
  /* strtoull reports overflow only through errno: the program's errno is
   * put back either way (this runs before main, which must not find an
   * ERANGE of ours there). */
  int saved_errno = errno;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  bool overflow = errno != 0;
  errno = saved_errno;
  if (overflow || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

const char *_brisk_options_quote(char *out, size_t capacity, const char *text) {
  static const char hex[] = "0123456789abcdef";
  size_t length = 0, i = 0;
  for (; text[i] != '\0' && i < 200; i++) {
    unsigned char c = (unsigned char)text[i];
    if (length + 5 > capacity) break;
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out[length++] = (char)c;
    } else {
      out[length++] = '\\';
      out[length++] = 'x';
      out[length++] = hex[c >> 4];
      out[length++] = hex[c & 15];
    }
  }
  if (text[i] != '\0' && length + 4 <= capacity) {
    memcpy(out + length, "...", 3);
    length += 3;
  }
  out[length] = '\0';
  return out;
}

static void warn_bad_value(const option_t *option, const char *text) {
  char message[BRISK_QUOTE_CAPACITY + 256];
  char quoted[BRISK_QUOTE_CAPACITY];
  _brisk_options_quote(quoted, sizeof quoted, text);
  if (option->type == OPTION_BOOL) {
    snprintf(message, sizeof message, "brisk: %s=%s is not 0 or 1; using the default\n",
             option->name, quoted);
  } else {
    snprintf(message, sizeof message,
             "brisk: %s=%s is not a whole number from %llu to %llu; using the default\n",
             option->name, quoted, (unsigned long long)option->min,
             (unsigned long long)option->max);
  }
  _brisk_os_write_warning(message);
}

static void print_option(const option_t *option) {
  char value[64];
  switch (option->type) {
    case OPTION_BOOL: snprintf(value, sizeof value, "%d", *(bool *)option->field); break;
    case OPTION_NUMBER:
      snprintf(value, sizeof value, "%llu", (unsigned long long)*(uint64_t *)option->field);
      break;
    case OPTION_MIB:
      snprintf(value, sizeof value, "%zu", *(size_t *)option->field >> 20);
      break;
    case OPTION_PATH: {
      const char *path = *(const char **)option->field;
      char quoted[BRISK_QUOTE_CAPACITY];
      if (path != NULL) _brisk_options_quote(quoted, sizeof quoted, path);
      snprintf(value, sizeof value, "%.60s", path != NULL ? quoted : "(none)");
      break;
    }
  }
  char line[256];
  snprintf(line, sizeof line, "brisk: option %-24s %-12s %s\n", option->name, value,
           option->meaning);
  _brisk_os_write_warning(line);
}

void _brisk_options_init(void) {
  static bool done;
  if (done) return;
  done = true;
  /* The stderr its warnings, and the statistics table at exit, go to. */
  _brisk_os_stderr_remember();
  for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
    const option_t *option = &options[i];
    const char *text = secure_getenv(option->name);
    if (text == NULL || text[0] == '\0') continue;
    uint64_t number;
    switch (option->type) {
      case OPTION_PATH: *(const char **)option->field = text; break;
      case OPTION_BOOL:
        if (parse_number(text, 0, 1, &number)) *(bool *)option->field = number != 0;
        else warn_bad_value(option, text);
        break;
      case OPTION_NUMBER:
        if (parse_number(text, option->min, option->max, &number)) *(uint64_t *)option->field = number;
        else warn_bad_value(option, text);
        break;
      case OPTION_MIB:
        if (parse_number(text, option->min, option->max, &number)) {
          *(size_t *)option->field = (size_t)number << 20;
        } else {
          warn_bad_value(option, text);
        }
        break;
    }
  }
  /* The OS layer reads no option: it is told. Mappings kept before this
   * (by other libraries' constructors) that no longer fit are released. */
  _brisk_os_cache_configure(_brisk_options.region_cache_bytes, BRISK_OS_CACHE_MAX_ENTRIES,
                            _brisk_options.region_cache_ms);
  if (_brisk_options.verbose) {
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) print_option(&options[i]);
  }
}
