/*
 * misuse.h — what the misuse programs share. Each program in this folder
 * does one thing a buggy program does to its heap, through malloc and free:
 * whichever library run_misuse.py preloads answers them.
 *
 * The bug must reach the allocator as written: the programs build at -O0
 * with -fno-builtin, every pointer the bug uses passes through opaque() (an
 * out-of-line function with an empty asm the compiler cannot see through),
 * and the warnings that name the bug at compile time are off for this folder.
 *
 * A build that catches the misuse aborts inside the bad call with one
 * `brisk: ...` line. A build that does not returns, and the program then
 * checks what such a build still promises (misuse_finish): that it hands
 * out no blocks that overlap each other or the live blocks the program
 * holds, and that the live blocks the bug did not write keep their bytes.
 * It prints "misuse: no overlap" and exits 0 when that holds; it prints
 * "misuse: FAILED ..." and exits 3 when it does not.
 */
#ifndef BRISK_MISUSE_H
#define BRISK_MISUSE_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MISUSE_NOINLINE __attribute__((noinline, unused))

/* Before main: when MISUSE_EXPECT_MAPPED names a library (run_misuse.py
 * sets it to the preloaded one's file name), exit 4 unless it is mapped, so
 * that a preload that failed does not test the C library's malloc instead. */
__attribute__((constructor)) static void misuse_check_mapped(void) {
  const char *name = getenv("MISUSE_EXPECT_MAPPED");
  if (name == NULL || *name == '\0') return;
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int mapped = 0;
  while (maps != NULL && !mapped && fgets(line, sizeof line, maps) != NULL) {
    mapped = strstr(line, name) != NULL;
  }
  if (maps != NULL) fclose(maps);
  if (!mapped) {
    fprintf(stderr, "misuse: %s is not mapped into this process\n", name);
    exit(4);
  }
}

/* p, where the compiler can no longer tell where it came from. */
static MISUSE_NOINLINE void *opaque(void *p) {
  __asm__ volatile("" : "+r"(p) : : "memory");
  return p;
}

/* p, said on stderr as the pointer a build that catches the misuse must
 * name in its `brisk:` line (run_misuse.py compares the two): the pointer
 * the bad call passes, or the block a bad write hits. */
static MISUSE_NOINLINE void *misuse_named(void *p) {
  fprintf(stderr, "misuse: names %p\n", p);
  return opaque(p);
}

/* Said on stderr after the bad call returned: the build did not catch it. */
static MISUSE_NOINLINE void misuse_returned(const char *call) {
  fprintf(stderr, "misuse: %s returned\n", call);
}

/* The size and alignment of brisk's segments (src/general/types.h): each
 * starts with its header, the metadata of its pages or of its huge block. */
#define MISUSE_SEGMENT_SIZE ((uintptr_t)32 << 20)

/* A page of the program's own mapped at `at` (a multiple of the page
 * size) where the address is free, so that a bad write there without a
 * guard page lands in memory and returns, rather than faulting merely
 * because nothing is mapped. This and misuse_overflow_from_below need
 * _GNU_SOURCE (MAP_FIXED_NOREPLACE). */
#ifdef MAP_FIXED_NOREPLACE
static MISUSE_NOINLINE void misuse_map_own_page(unsigned char *at) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *mine = mmap(at, page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (mine != MAP_FAILED && mine != at) munmap(mine, page); /* a kernel without NOREPLACE */
}

/* A linear overflow out of whatever is mapped just below `start` into its
 * first 16 bytes: a page of the program's own is mapped there first
 * (misuse_map_own_page), its last 16 bytes are written, then start's first
 * 16 with the bytes they hold, so that a build with no guard page below
 * start returns with them as they were. */
static MISUSE_NOINLINE void misuse_overflow_from_below(unsigned char *start) {
  misuse_map_own_page(start - (size_t)sysconf(_SC_PAGESIZE));
  volatile unsigned char *bytes = opaque(start - 16);
  for (int i = 0; i < 32; i++) bytes[i] = i < 16 ? 0x5a : bytes[i];
}
#endif

/* The live blocks the program holds, each filled with its own bytes. */
#define MISUSE_MAX_LIVE 1024

typedef struct misuse_block_s {
  unsigned char *p;
  size_t size;
  unsigned seed;
  int checked; /* 0: the bug may have written it; its bytes are not compared */
} misuse_block_t;

static misuse_block_t misuse_live[MISUSE_MAX_LIVE];
static size_t misuse_live_count;

static unsigned char misuse_byte(unsigned seed, size_t i) {
  return (unsigned char)(seed * 131u + (unsigned)i * 7u + 1u);
}

static void misuse_fill(misuse_block_t *b) {
  for (size_t i = 0; i < b->size; i++) b->p[i] = misuse_byte(b->seed, i);
}

static MISUSE_NOINLINE void misuse_fail(const char *what, const void *p) {
  printf("misuse: FAILED: %s (%p)\n", what, p);
  fflush(stdout);
  exit(3);
}

/* malloc(size), filled and remembered as a live block. */
static MISUSE_NOINLINE unsigned char *misuse_malloc(size_t size) {
  if (misuse_live_count == MISUSE_MAX_LIVE) misuse_fail("too many live blocks", NULL);
  unsigned char *p = opaque(malloc(size));
  if (p == NULL) misuse_fail("malloc returned NULL", NULL);
  misuse_block_t *b = &misuse_live[misuse_live_count];
  *b = (misuse_block_t){p, size, (unsigned)misuse_live_count + 1u, 1};
  misuse_live_count++;
  misuse_fill(b);
  return p;
}

/* Neighbours: count live blocks of size, so that the block the bug hits is
 * not alone on its page (a count that drops to zero shows a double free
 * where a busy page would not). */
static MISUSE_NOINLINE void misuse_neighbours(size_t size, size_t count) {
  for (size_t i = 0; i < count; i++) misuse_malloc(size);
}

/* The live block that holds p stops being compared: the bug wrote it. */
static MISUSE_NOINLINE void misuse_written(const void *p) {
  for (size_t i = 0; i < misuse_live_count; i++) {
    misuse_block_t *b = &misuse_live[i];
    if ((const unsigned char *)p >= b->p && (const unsigned char *)p < b->p + b->size) b->checked = 0;
  }
}

static int misuse_by_address(const void *a, const void *b) {
  const misuse_block_t *x = a, *y = b;
  return x->p < y->p ? -1 : x->p > y->p;
}

/* After a bug the build did not catch: allocate blocks of each size in
 * sizes[] (many, so that whatever the bug left on a free list is handed
 * out), then check every live block's bytes and that no two overlap. */
static MISUSE_NOINLINE int misuse_finish(const size_t *sizes, size_t size_count) {
  for (size_t s = 0; s < size_count; s++) {
    for (int i = 0; i < 200; i++) misuse_malloc(sizes[s]);
  }
  for (size_t i = 0; i < misuse_live_count; i++) {
    const misuse_block_t *b = &misuse_live[i];
    if (!b->checked) continue;
    for (size_t j = 0; j < b->size; j++) {
      if (b->p[j] != misuse_byte(b->seed, j)) misuse_fail("a live block lost its bytes", b->p + j);
    }
  }
  qsort(misuse_live, misuse_live_count, sizeof misuse_live[0], misuse_by_address);
  for (size_t i = 0; i + 1 < misuse_live_count; i++) {
    if (misuse_live[i].p + misuse_live[i].size > misuse_live[i + 1].p) {
      misuse_fail("two live blocks overlap", misuse_live[i + 1].p);
    }
  }
  printf("misuse: no overlap (%zu live blocks)\n", misuse_live_count);
  return 0;
}

/* misuse_finish for one size. */
static MISUSE_NOINLINE int misuse_finish1(size_t size) { return misuse_finish(&size, 1); }

/* Run fn(arg) in a new thread and wait for it. */
static MISUSE_NOINLINE void misuse_run_in_thread(void *(*fn)(void *), void *arg) {
  pthread_t thread;
  if (pthread_create(&thread, NULL, fn, arg) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
}

/* free(p) in a new thread, which says so when the free returns; the caller
 * waits for it. The misuse rows "from another thread" use it. */
static MISUSE_NOINLINE void *misuse_free_it(void *p) {
  free(misuse_named(p));
  misuse_returned("free (other thread)");
  return NULL;
}

static MISUSE_NOINLINE void misuse_free_in_other_thread(void *p) {
  misuse_run_in_thread(misuse_free_it, p);
}

/* free(p) in a new thread, a free that is no misuse (it says nothing); the
 * caller waits for it. */
static MISUSE_NOINLINE void *misuse_free_quietly(void *p) {
  free(opaque(p));
  return NULL;
}

static MISUSE_NOINLINE void misuse_good_free_in_other_thread(void *p) {
  misuse_run_in_thread(misuse_free_quietly, p);
}

/* Large blocks for the rows where another thread frees a block twice:
 * misuse_alone_on_large_page(size, spare, offset_kib) returns a block of
 * size (above 64 KiB: its page is 4 MiB) that is the only live block of its
 * page, on a page that is not the head of its class's queue (a head is
 * pinned: it never empties, and a count that reaches 0 there already names
 * a double free). It fills a page with blocks (and the pages after it, up
 * to a new one, the head, which keeps one live block), keeps the one that
 * starts offset_kib KiB into the first page (the secure build's page lead
 * aside; any block when offset_kib is negative: the secure build hands a
 * page's blocks out in a random order) and frees the others. With spare
 * set, the blocks fill a whole second segment (32 MiB) first and free it
 * before the block's own pages, so that the heap already keeps an empty
 * segment of the kind when the block's segment empties: that one goes back
 * to the system. Plain malloc and free: the blocks are not filled. */
#define MISUSE_SEGMENT_MASK (((uintptr_t)32 << 20) - 1)
#define MISUSE_LARGE_PAGE_SHIFT 22
#define MISUSE_LARGE_PAGE_MASK (((uintptr_t)1 << MISUSE_LARGE_PAGE_SHIFT) - 1)

static void *misuse_large[512];

static MISUSE_NOINLINE void *misuse_alone_on_large_page(size_t size, int spare, long offset_kib) {
  size_t count = 0;
  uintptr_t page = 0, segment = 0, second = 0;
  for (;;) {
    if (count == sizeof misuse_large / sizeof misuse_large[0]) misuse_fail("too many large blocks", NULL);
    void *q = opaque(malloc(size));
    if (q == NULL) misuse_fail("malloc returned NULL", NULL);
    misuse_large[count++] = q;
    uintptr_t q_segment = (uintptr_t)q & ~MISUSE_SEGMENT_MASK;
    if (count == 1) {
      page = (uintptr_t)q >> MISUSE_LARGE_PAGE_SHIFT;
      segment = q_segment;
      continue;
    }
    if (!spare && ((uintptr_t)q >> MISUSE_LARGE_PAGE_SHIFT) != page) break;
    if (spare && q_segment != segment && second == 0) second = q_segment;
    if (spare && q_segment != segment && q_segment != second) break;
  }
  void *p = NULL;
  for (size_t i = 0; i + 1 < count && p == NULL; i++) {
    uintptr_t q = (uintptr_t)misuse_large[i];
    if ((q >> MISUSE_LARGE_PAGE_SHIFT) != page) continue;
    if (offset_kib < 0 || (long)((q & MISUSE_LARGE_PAGE_MASK) >> 10) == offset_kib) p = (void *)q;
  }
  if (p == NULL) misuse_fail("setup: no block at that offset in the first page", NULL);
  /* The last block is the head's; the second segment's blocks go first. */
  for (size_t i = 0; i + 1 < count; i++) {
    if (((uintptr_t)misuse_large[i] & ~MISUSE_SEGMENT_MASK) == second) free(misuse_large[i]);
  }
  for (size_t i = 0; i + 1 < count; i++) {
    if (misuse_large[i] != p && ((uintptr_t)misuse_large[i] & ~MISUSE_SEGMENT_MASK) != second) {
      free(misuse_large[i]);
    }
  }
  return p;
}

/* free(p) twice in a new thread, which says so when the frees return; the
 * caller waits for it. */
static MISUSE_NOINLINE void *misuse_free_it_twice(void *p) {
  free(opaque(p));
  free(misuse_named(p));
  misuse_returned("free twice (other thread)");
  return NULL;
}

static MISUSE_NOINLINE void misuse_free_twice_in_other_thread(void *p) {
  misuse_run_in_thread(misuse_free_it_twice, p);
}

/* Run late() in a new thread's key destructor after brisk's exit handler
 * has run there (brisk's key is older than ours, so its destructor comes
 * first within a round; ours asks for a second round to be sure), and
 * wait for the thread. brisk's key must exist: call malloc first. */
static pthread_key_t misuse_late_key;
static void (*misuse_late_call)(void);

static MISUSE_NOINLINE void misuse_late_destructor(void *value) {
  if (value == (void *)1) {
    pthread_setspecific(misuse_late_key, (void *)2);
    return;
  }
  misuse_late_call();
}

static MISUSE_NOINLINE void *misuse_late_thread(void *unused) {
  (void)unused;
  free(opaque(malloc(100))); /* a heap of its own, so that brisk's exit handler runs */
  pthread_setspecific(misuse_late_key, (void *)1);
  return NULL;
}

static MISUSE_NOINLINE void misuse_after_exit_handler(void (*late)(void)) {
  misuse_late_call = late;
  if (pthread_key_create(&misuse_late_key, misuse_late_destructor) != 0) {
    misuse_fail("pthread_key_create", NULL);
  }
  misuse_run_in_thread(misuse_late_thread, NULL);
}

#endif /* BRISK_MISUSE_H */
