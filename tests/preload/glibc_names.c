/*
 * glibc_names: glibc's introspection and alias names must be brisk's when
 * brisk is preloaded. Not linked to brisk: it finds brisk_stats_get with
 * dlsym, so that it can compare glibc's names against brisk's own numbers,
 * and it fails at once when brisk is not there. Prints "ok: ..." per check;
 * exits 1 with "FAIL: ..." at the first failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "brisk.h"

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      fprintf(stdout, "FAIL: " __VA_ARGS__);           \
      fprintf(stdout, " (%s:%d)\n", __FILE__, __LINE__); \
      exit(1);                                         \
    }                                                  \
  } while (0)

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static int (*stats_get)(brisk_stats_t *);
static bool (*collect)(bool);

static brisk_stats_t snapshot(void) {
  brisk_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK(stats_get(&s) == 0, "brisk_stats_get");
  return s;
}

/* Resident bytes. A process always has some: a reading of 0 (no /proc)
 * fails the program, since a bound checked against 0 would prove nothing. */
static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  int n = f != NULL ? fscanf(f, "%lu %lu", &size, &resident) : 0;
  if (f != NULL) fclose(f);
  CHECK(n == 2 && resident != 0, "cannot read the resident size from /proc/self/statm");
  return resident * (size_t)sysconf(_SC_PAGESIZE);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void check_mallinfo(void) {
  enum { COUNT = 4000 };
  static void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) blocks[i] = malloc(1000);
  char *huge = malloc((size_t)8 << 20);
  huge[0] = 1; /* used, so the compiler keeps the malloc */
  for (int i = 0; i < COUNT; i++) ((char *)blocks[i])[0] = 1;
  struct mallinfo2 info = mallinfo2();
  brisk_stats_t s = snapshot();
  /* As glibc's fields: the huge blocks (its mmapped chunks) in hblks and
   * hblkhd only, the rest of the heap in arena, uordblks and fordblks. */
  CHECK(info.hblkhd == s.general.huge_bytes && info.hblks == s.general.huge_blocks,
        "hblkhd %zu hblks %zu, brisk's huge blocks %zu bytes in %zu", info.hblkhd, info.hblks,
        s.general.huge_bytes, s.general.huge_blocks);
  CHECK(info.hblkhd >= (size_t)8 << 20 && info.hblks >= 1, "hblkhd %zu hblks %zu", info.hblkhd,
        info.hblks);
  CHECK(info.uordblks + info.hblkhd == s.general.bytes_in_use,
        "mallinfo2 uordblks %zu + hblkhd %zu, brisk in use %zu", info.uordblks, info.hblkhd,
        s.general.bytes_in_use);
  CHECK(info.uordblks >= (size_t)COUNT * 1000 && info.uordblks < ((size_t)8 << 20),
        "uordblks %zu: not the 4000 blocks of 1000 bytes without the 8 MiB one", info.uordblks);
  CHECK(info.arena + info.hblkhd == s.general.bytes_held, "arena %zu + hblkhd %zu, brisk held %zu",
        info.arena, info.hblkhd, s.general.bytes_held);
  CHECK(info.arena >= info.uordblks, "arena %zu < uordblks %zu", info.arena, info.uordblks);
  CHECK(info.fordblks == info.arena - info.uordblks, "fordblks %zu", info.fordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo(); /* deprecated, and still called by programs */
#pragma GCC diagnostic pop
  CHECK(old.uordblks > 0 && (size_t)old.hblkhd == info.hblkhd, "mallinfo %d %d", old.uordblks,
        old.hblkhd);
  free(huge);
  for (int i = 0; i < COUNT; i++) free(blocks[i]);
  printf("ok: mallinfo2 and mallinfo report brisk's heap\n");
}

static char *read_stream(FILE *f) {
  static char text[1 << 16];
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  return text;
}

static void check_malloc_stats_and_info(void) {
  FILE *captured = tmpfile();
  CHECK(captured != NULL, "tmpfile");
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(captured), 2);
  malloc_stats();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  CHECK(strstr(read_stream(captured), "brisk statistics") != NULL, "malloc_stats printed: %.200s",
        read_stream(captured));
  fclose(captured);

  FILE *xml = tmpfile();
  char *volatile p = malloc(100);
  p[0] = 1;
  CHECK(malloc_info(0, xml) == 0, "malloc_info returned non-zero");
  free(p);
  char *text = read_stream(xml);
  CHECK(strncmp(text, "<malloc version=\"1\">", 20) == 0, "malloc_info starts: %.60s", text);
  CHECK(strstr(text, "</malloc>\n") != NULL, "malloc_info not closed");
  CHECK(strstr(text, "to=\"112\"") != NULL, "no size class of 100-byte blocks: %.300s", text);
  fclose(xml);
  /* glibc returns the error itself (its manual page says -1 and errno). */
  errno = 0;
  CHECK(malloc_info(1, stdout) == EINVAL && errno == 0, "malloc_info(1) must return EINVAL");
  printf("ok: malloc_stats and malloc_info are brisk's\n");
}

static void check_aliases(void) {
  char *a = __libc_malloc(100);
  CHECK(a != NULL, "__libc_malloc");
  memset(a, 1, 100);
  free(a); /* glibc's block into brisk's free would abort */
  char *b = malloc(300);
  b = __libc_realloc(b, 5000);
  CHECK(b != NULL, "__libc_realloc");
  __libc_free(b);
  unsigned char *c = __libc_calloc(64, 64);
  for (int i = 0; i < 64 * 64; i++) CHECK(c[i] == 0, "__libc_calloc not zero");
  free(c);
  void *d = __libc_memalign(256, 1000);
  CHECK(((uintptr_t)d & 255) == 0, "__libc_memalign alignment");
  free(d);
  void (*free_sized)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  void (*free_aligned_sized)(void *, size_t, size_t) =
      (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
  CHECK(free_sized != NULL && free_aligned_sized != NULL, "free_sized / free_aligned_sized missing");
  free_sized(malloc(48), 48);
  free_aligned_sized(aligned_alloc(64, 640), 64, 640);
  free_sized(NULL, 0);
  printf("ok: __libc_* aliases and free_sized are brisk's\n");
}

static void check_mallopt(void) {
  CHECK(mallopt(M_TRIM_THRESHOLD, 64 << 20) == 1, "mallopt M_TRIM_THRESHOLD");
  CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1, "mallopt M_MMAP_THRESHOLD");
  CHECK(mallopt(M_ARENA_MAX, 2) == 1, "mallopt M_ARENA_MAX");
  CHECK(mallopt(M_TRIM_THRESHOLD, 32 << 20) == 1, "mallopt M_TRIM_THRESHOLD back");
  printf("ok: mallopt accepts glibc's options\n");
}

/* malloc_trim from this thread returns the free pages of a thread that is
 * alive, idle, and will never call malloc again. */
static atomic_int stage;

static void *idle_thread(void *unused) {
  (void)unused;
  enum { COUNT = 6000 };
  void **blocks = malloc(COUNT * sizeof *blocks);
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = malloc(4000);
    memset(blocks[i], 7, 4000);
  }
  for (int i = 0; i < COUNT; i++) free(blocks[i]);
  free(blocks);
  atomic_store(&stage, 1);
  while (atomic_load(&stage) != 2) sleep_ms(1);
  return NULL;
}

static void check_malloc_trim(void) {
  if (snapshot().purge.delay_ms == 0) {
    printf("skipped: malloc_trim of an idle thread's pages (BRISK_PURGE_DELAY_MS=0: free pages "
           "go back at once)\n");
    return;
  }
  pthread_t thread;
  pthread_create(&thread, NULL, idle_thread, NULL);
  while (atomic_load(&stage) != 1) sleep_ms(1);
  sleep_ms(150); /* past the purge delay: nothing but a slow path of its own would purge */
  brisk_stats_t before = snapshot();
  size_t rss_before = rss_bytes();
  CHECK(before.general.pages_committed >= 100,
        "the idle thread's free pages are gone before malloc_trim (%zu pages)",
        before.general.pages_committed);
  CHECK(malloc_trim(0) == 1, "malloc_trim returned 0 with free pages to give back");
  brisk_stats_t after = snapshot();
  size_t rss_after = rss_bytes();
  CHECK(after.general.bytes_purged - before.general.bytes_purged >= (size_t)8 << 20,
        "malloc_trim purged %llu bytes",
        (unsigned long long)(after.general.bytes_purged - before.general.bytes_purged));
  CHECK(rss_after + ((size_t)8 << 20) <= rss_before,
        "RSS %zu KiB -> %zu KiB", rss_before >> 10, rss_after >> 10);
  atomic_store(&stage, 2);
  pthread_join(thread, NULL);
  printf("ok: malloc_trim gave back an idle thread's pages (RSS %zu -> %zu KiB)\n",
         rss_before >> 10, rss_after >> 10);
}

int main(void) {
  stats_get = (int (*)(brisk_stats_t *))dlsym(RTLD_DEFAULT, "brisk_stats_get");
  collect = (bool (*)(bool))dlsym(RTLD_DEFAULT, "brisk_collect");
  CHECK(stats_get != NULL && collect != NULL, "brisk is not preloaded");
  check_mallinfo();
  check_malloc_stats_and_info();
  check_aliases();
  check_mallopt();
  check_malloc_trim();
  return 0;
}
