/*
 * fuzz_brisk.c — a libFuzzer harness for every brisk allocator.
 *
 * The input is read as a sequence of operations: allocate (with a size and
 * an alignment), free, realloc, usable size, a free or an allocation by
 * another thread, a thread's exit, on the general allocator (brisk_malloc,
 * brisk_calloc, brisk_realloc, brisk_aligned_alloc, brisk_free), and
 * allocate, free, realloc, reset, push/pop, local caches and destroy on two
 * instances each of the arena (and a cursor), the stack, the fifo, the pool,
 * the buddy and the hybrid, created with parameters read from the input.
 * Sizes come near the allocators' boundaries (the general size classes
 * among them); a realloc may take a size relative to the block's (half its
 * usable size, a byte more or less, twice); the stack pushes and pops one
 * frame or up to 255 at once, through brisk_stack_push or
 * BRISK_STACK_SCOPE's functions.
 *
 * A shadow model keeps every live block: its address, its size, the byte it
 * was filled with and what it belongs to. The harness aborts (a crash for
 * libFuzzer) on any mismatch: a block whose bytes changed, two live blocks
 * that overlap, a misaligned block, a block that should be zero and is
 * not, NULL where the allocator must succeed (or success where it must
 * fail), an errno other than the documented one, a buddy tree that does not
 * validate, a pool's bytes_in_use other than its objects in use (without
 * per-thread caches), a stack's, fifo's, buddy's or hybrid's statistics
 * other than the model's counts (check_region_stats), or a region
 * allocator still registered after every one was destroyed. The pool's,
 * the fifo's and the hybrid's own validators (regions/pool.h,
 * regions/fifo.h, regions/hybrid.h; they abort with a "brisk:" line) run
 * on every live one at the check operation and before each destroy (a
 * hybrid of the default config, whose 64 MiB region takes long to validate
 * under ASan, before its destroy only): between two operations is a quiet
 * point, since the other thread's jobs are waited for. It is built with
 * AddressSanitizer (and UBSan), which also sees the region allocators'
 * poisoning of what they take back: a byte the harness touches outside a
 * live region block is a report.
 *
 * Each input starts from no region allocator and no live block, and ends by
 * checking and freeing every block and destroying every allocator; the
 * general allocator's heaps live on from input to input, as in a program.
 *
 * tests/fuzz/corpus holds the inputs that `-set_cover_merge=1
 * -use_counters=0` kept of runs of a few minutes: the fewest that reach
 * every edge those runs reached. Remade the same way when the operations
 * or the allocators change much. Four were added with the relative
 * reallocs, the class edges and the stack's many frames and scopes: one
 * written by hand to reach each of them (a scope, 200 frames pushed past
 * the records in the stack's page and popped, a class edge's block
 * resized to half its usable size and past it, a pool's statistics), and
 * the three of a 31-minute campaign that added the most edges. One more,
 * written by hand with the region statistics' checks: two allocations on
 * a stack, the first shrunk in place, then a check (its old size stays
 * counted: it is not the frame's last).
 */
#include <brisk.h>

#include "regions/fifo.h"
#include "regions/hybrid.h"
#include "regions/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failing ---- */

static void fail(const char *format, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *format, ...) {
  va_list args;
  va_start(args, format);
  fprintf(stderr, "fuzz_brisk: ");
  vfprintf(stderr, format, args);
  fprintf(stderr, "\n");
  va_end(args);
  abort();
}

/* ---- reading the input ---- */

typedef struct input_s {
  const uint8_t *p;
  size_t n;
} input_t;

static uint8_t u8(input_t *in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->p++;
}

static uint16_t u16(input_t *in) {
  uint16_t lo = u8(in);
  return (uint16_t)(lo | (uint16_t)u8(in) << 8);
}

/* A general size class's block size (general/size_class.h: 8, 16-byte
 * steps to 128, 8 steps per doubling to 64 KiB, 4 to 512 KiB) or a
 * multiple of 4 KiB up to 140 KiB, or the byte either side of it. */
static size_t class_edge(uint16_t value) {
  size_t delta = value % 3, i = (size_t)(value / 3) % 128, base;
  if (i == 0) {
    base = 8;
  } else if (i <= 8) {
    base = i * 16;
  } else if (i <= 80) {
    size_t j = i - 9, b = 7 + j / 8;
    base = ((size_t)1 << b) + ((j % 8 + 1) << (b - 3));
  } else if (i <= 92) {
    size_t j = i - 81, b = 16 + j / 4;
    base = ((size_t)1 << b) + ((j % 4 + 1) << (b - 2));
  } else {
    base = (i - 92) * 4096;
  }
  return base + delta - 1;
}

/* Sizes around every boundary the allocators have: tiny, the general
 * allocator's class limits (1 KiB direct, 8 KiB small, 64 KiB medium,
 * 512 KiB large), huge, and exact edge values. */
static size_t read_size(input_t *in) {
  static const size_t edges[] = {0,     1,      7,      8,      9,      15,     16,     17,
                                 128,   129,    1024,   1025,   4096,   4097,   8192,   8193,
                                 65536, 65537,  524288, 524289, 1 << 20, 3 << 20, 4 << 20, 24};
  static const size_t ranges[] = {16,    64,     128,      256,       512,       1024,     4096,
                                  8193,  16384,  65537,    131072,    524289,    1 << 20,  4 << 20};
  uint8_t shape = u8(in);
  unsigned kind = shape % 16;
  uint16_t value = u16(in);
  if (kind == 14 && shape >> 4 >= 14) return class_edge(value);
  if (kind == 14) return edges[value % (sizeof edges / sizeof edges[0])];
  if (kind == 15) return value;
  size_t max = ranges[kind];
  if (max <= 65536) return value % (max + 1);
  return ((size_t)value * (max >> 16) + (shape >> 4)) % (max + 1);
}

/* 0 (the default), a power of two up to 4 KiB, now and then a larger one,
 * and rarely not a power of two (which must be refused). */
static size_t read_align(input_t *in) {
  uint8_t a = u8(in);
  if (a < 64) return 0;
  if (a < 232) return (size_t)1 << (a % 13);
  if (a < 252) return (size_t)1 << (13 + a % 10); /* 8 KiB .. 4 MiB */
  return (size_t)(a % 2 == 0 ? 24 : 48);
}

/* A new size for a block of `size` bytes whose allocator holds `usable`
 * for it: the edges a resize has (in place or moved, the general
 * allocator's half-used limit, one byte more or less, twice as much). */
static size_t read_resize(input_t *in, size_t size, size_t usable) {
  uint8_t how = u8(in);
  switch (how % 8) {
    case 0: return usable / 2;
    case 1: return usable / 2 > 0 ? usable / 2 - 1 : 0;
    case 2: return usable;
    case 3: return usable + 1;
    case 4: return size + 1;
    case 5: return size > 0 ? size - 1 : 0;
    case 6: return size * 2;
    default: return size + (size_t)(how >> 3) * 16;
  }
}

static bool power_of_two(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

static size_t pow2_at_least(size_t x) {
  size_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

/* ---- the shadow model ---- */

enum kind { K_GENERAL, K_ARENA, K_STACK, K_FIFO, K_POOL, K_BUDDY, K_HYBRID, K_KINDS };

#define MAX_BLOCKS 512
#define MAX_LIVE_BYTES ((size_t)96 << 20)
#define SLOTS 2
#define STACK_MAX_DEPTH 1000

typedef struct block_s {
  unsigned char *p;
  size_t size;    /* bytes the harness fills and checks */
  size_t extent;  /* bytes no other live block may touch (>= size, >= 1) */
  void *owner;    /* the allocator (a fifo's survives its destroy) */
  uint32_t depth; /* stack: the frame depth it was allocated in */
  uint8_t kind;
  uint8_t fill;
  uint8_t slot;
  uint8_t orphan; /* a fifo block whose fifo was destroyed */
} block_t;

static block_t blocks[MAX_BLOCKS];
static size_t nblocks;
static size_t live_bytes;
static uint8_t next_fill = 1;

/* The region allocators, SLOTS of each kind, made on first use. */
typedef struct slot_s {
  void *handle;
  /* arena */
  size_t reserve;
  brisk_arena_cursor_t cursor;
  /* stack */
  uint32_t depth;
  size_t frame_bytes[STACK_MAX_DEPTH + 1]; /* bytes each live frame holds, by depth */
  void *frame_last[STACK_MAX_DEPTH + 1];  /* each live frame's last allocation, or NULL */
  /* pool */
  size_t obj_size, obj_align, capacity;
  unsigned flags;
  brisk_pool_local_t local;
  bool local_on;
  /* buddy */
  size_t min_block;
  bool small_tree; /* a buddy, a hybrid: few enough units to validate often */
  /* What the statistics of a stack, fifo, buddy or hybrid must count:
   * successful allocations (a realloc is one of its new size) and the
   * sizes they asked for. */
  size_t allocations, bytes_requested;
} slot_t;

static slot_t slots[K_KINDS][SLOTS];

static bool all_bytes(const unsigned char *p, size_t n, unsigned char value) {
  static unsigned char pattern[256][4096];
  static bool made[256];
  if (!made[value]) {
    memset(pattern[value], value, sizeof pattern[value]);
    made[value] = true;
  }
  for (size_t off = 0; off < n; off += 4096) {
    size_t chunk = n - off < 4096 ? n - off : 4096;
    if (memcmp(p + off, pattern[value], chunk) != 0) return false;
  }
  return true;
}

static void check_block(const block_t *b, const char *when) {
  if (!all_bytes(b->p, b->size, b->fill)) {
    size_t at = 0;
    while (at < b->size && b->p[at] == b->fill) at++;
    fail("%s: block %p (kind %d, %zu bytes) changed at byte %zu: 0x%02x, not 0x%02x", when,
         (void *)b->p, b->kind, b->size, at, b->p[at], b->fill);
  }
}

static void check_aligned(const void *p, size_t align, const char *what) {
  if (align != 0 && (uintptr_t)p % align != 0)
    fail("%s: %p is not aligned to %zu", what, p, align);
}

/* Adds a live block after checking it overlaps none; fills it. The first
 * `keep` bytes already hold the block's contents (realloc), and with
 * `zeroed` the rest must read zero first. */
static block_t *add_block(int kind, int slot, void *owner, void *p, size_t size, size_t extent,
                          size_t keep, uint8_t keep_fill, bool zeroed) {
  if (extent < size) extent = size;
  if (extent == 0) extent = 1;
  uintptr_t lo = (uintptr_t)p, hi = lo + extent;
  for (size_t i = 0; i < nblocks; i++) {
    uintptr_t blo = (uintptr_t)blocks[i].p, bhi = blo + blocks[i].extent;
    if (lo < bhi && blo < hi)
      fail("kind %d: new block [%p, +%zu) overlaps live block [%p, +%zu) of kind %d", kind, p,
           extent, (void *)blocks[i].p, blocks[i].extent, blocks[i].kind);
  }
  if (nblocks == MAX_BLOCKS) fail("harness: too many blocks");
  unsigned char *bytes = p;
  if (keep > size) keep = size;
  if (keep != 0 && !all_bytes(bytes, keep, keep_fill))
    fail("kind %d: realloc lost the contents of %p", kind, p);
  if (zeroed && !all_bytes(bytes + keep, size - keep, 0))
    fail("kind %d: block %p (%zu bytes) is not zeroed", kind, p, size);
  block_t *b = &blocks[nblocks++];
  b->p = bytes;
  b->size = size;
  b->extent = extent;
  b->owner = owner;
  b->depth = 0;
  b->kind = (uint8_t)kind;
  b->slot = (uint8_t)slot;
  b->orphan = 0;
  b->fill = next_fill;
  next_fill = (uint8_t)(next_fill % 255 + 1);
  memset(bytes, b->fill, size);
  live_bytes += size;
  return b;
}

static void remove_block(size_t i) {
  live_bytes -= blocks[i].size;
  blocks[i] = blocks[--nblocks];
}

static bool room_for(size_t size) { return live_bytes + size <= MAX_LIVE_BYTES; }

/* NULL from an allocation: errno must say why. */
static void expect_errno(int expected, const char *what) {
  if (errno != expected) fail("%s: NULL with errno %d, expected %d", what, errno, expected);
}

/* ---- another thread: frees and allocations on request ---- */

typedef struct job_s {
  int kind; /* K_* of the block to free, or -1: allocate `size` with brisk_malloc */
  void *owner;
  void *p;
  size_t size;
  bool exit; /* end the thread (its heap is abandoned; the next one adopts it) */
} job_t;

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cond = PTHREAD_COND_INITIALIZER;
static job_t job;
static bool job_posted, job_done;
static pthread_t worker;

static void *worker_main(void *unused) {
  (void)unused;
  for (;;) {
    pthread_mutex_lock(&job_lock);
    while (!job_posted) pthread_cond_wait(&job_cond, &job_lock);
    job_t j = job;
    pthread_mutex_unlock(&job_lock);
    if (j.exit) {
      /* Returns without signalling: run_job joins this thread. */
      return NULL;
    }
    switch (j.kind) {
      case -1:
        j.p = brisk_malloc(j.size);
        break;
      case K_GENERAL: brisk_free(j.p); break;
      case K_POOL: brisk_pool_free(j.owner, j.p); break;
      case K_BUDDY: brisk_buddy_free(j.owner, j.p); break;
      case K_HYBRID: brisk_hybrid_free(j.owner, j.p); break;
      default: fail("harness: no remote free for kind %d", j.kind);
    }
    pthread_mutex_lock(&job_lock);
    job = j;
    job_posted = false;
    job_done = true;
    pthread_cond_broadcast(&job_cond);
    pthread_mutex_unlock(&job_lock);
  }
}

static void start_worker(void) {
  if (pthread_create(&worker, NULL, worker_main, NULL) != 0) fail("harness: pthread_create");
}

/* Runs j on the worker and waits for it; returns the job as it ended. */
static job_t run_job(job_t j) {
  pthread_mutex_lock(&job_lock);
  job = j;
  job_posted = true;
  job_done = false;
  pthread_cond_broadcast(&job_cond);
  if (j.exit) {
    pthread_mutex_unlock(&job_lock);
    pthread_join(worker, NULL);
    pthread_mutex_lock(&job_lock);
    job_posted = false;
    pthread_mutex_unlock(&job_lock);
    start_worker();
    return j;
  }
  while (!job_done) pthread_cond_wait(&job_cond, &job_lock);
  j = job;
  pthread_mutex_unlock(&job_lock);
  return j;
}

/* ---- freeing a block, whatever it is ---- */

static void release_block(size_t i, bool remote) {
  block_t *b = &blocks[i];
  check_block(b, "free");
  slot_t *s = &slots[b->kind][b->slot];
  if (remote && (b->kind == K_GENERAL || b->kind == K_POOL || b->kind == K_BUDDY ||
                 b->kind == K_HYBRID)) {
    job_t j = {.kind = b->kind, .owner = b->owner, .p = b->p};
    run_job(j);
    remove_block(i);
    return;
  }
  switch (b->kind) {
    case K_GENERAL: {
      int saved = errno = 4242;
      brisk_free(b->p);
      if (errno != saved) fail("brisk_free changed errno to %d", errno);
      break;
    }
    case K_FIFO: brisk_fifo_free(b->owner, b->p); break;
    case K_POOL:
      if (s->local_on && s->handle == b->owner && b->fill % 2 == 0)
        brisk_pool_local_free(&s->local, b->p);
      else
        brisk_pool_free(b->owner, b->p);
      break;
    case K_BUDDY: brisk_buddy_free(b->owner, b->p); break;
    case K_HYBRID: brisk_hybrid_free(b->owner, b->p); break;
    default: break; /* arena and stack blocks are dropped, never freed one by one */
  }
  remove_block(i);
}

/* ---- the region allocators: made and destroyed ---- */

/* The validators of the pool (with its local cache), of the fifo and of
 * the hybrid (at a check, a small one only). */
static void validate_slot(int kind, const slot_t *s, bool at_destroy) {
  if (s->handle == NULL) return;
  if (kind == K_FIFO) _brisk_fifo_validate(s->handle);
  if (kind == K_HYBRID && (at_destroy || s->small_tree)) _brisk_hybrid_validate(s->handle);
  if (kind == K_POOL) {
    const brisk_pool_local_t *locals[] = {&s->local};
    _brisk_pool_validate(s->handle, locals, s->local_on ? 1 : 0);
  }
}

static void destroy_slot(int kind, int slot) {
  slot_t *s = &slots[kind][slot];
  if (s->handle == NULL) return;
  validate_slot(kind, s, true);
  for (size_t i = nblocks; i-- > 0;) {
    block_t *b = &blocks[i];
    if (b->kind != kind || b->owner != s->handle) continue;
    check_block(b, "destroy");
    if (kind == K_FIFO) {
      b->orphan = 1; /* outlives the fifo, freed later */
    } else if (kind == K_HYBRID) {
      release_block(i, false); /* fallback blocks are brisk_malloc's */
    } else {
      remove_block(i); /* the destroy takes them back */
    }
  }
  switch (kind) {
    case K_ARENA: brisk_arena_destroy(s->handle); break;
    case K_STACK: brisk_stack_destroy(s->handle); break;
    case K_FIFO: brisk_fifo_destroy(s->handle); break;
    case K_POOL:
      if (s->local_on) brisk_pool_local_flush(&s->local);
      brisk_pool_destroy(s->handle);
      break;
    case K_BUDDY: {
      int all_free = 0;
      brisk_buddy_trim(s->handle);
      if (s->small_tree && !brisk_buddy_validate(s->handle, &all_free))
        fail("buddy: tree inconsistent at destroy");
      brisk_buddy_destroy(s->handle);
      break;
    }
    case K_HYBRID: brisk_hybrid_destroy(s->handle); break;
    default: break;
  }
  memset(s, 0, sizeof *s);
}

static slot_t *get_slot(input_t *in, int kind) {
  int slot = u8(in) % SLOTS;
  slot_t *s = &slots[kind][slot];
  if (s->handle != NULL) return s;
  uint8_t a = u8(in), b = u8(in), c = u8(in);
  switch (kind) {
    case K_ARENA: {
      static const size_t reserves[] = {4096, 65536, 1 << 20, 64 << 20, 100, 12345};
      s->reserve = reserves[a % 6];
      s->handle = brisk_arena_create(s->reserve);
      if (s->handle != NULL) brisk_arena_cursor_init(&s->cursor, s->handle, (size_t)(b % 4) * 4096);
      break;
    }
    case K_STACK: {
      static const size_t firsts[] = {0, 4096, 65536, 100};
      s->handle = brisk_stack_create(firsts[a % 4]);
      break;
    }
    case K_FIFO: {
      static const size_t pages[] = {0, 4096, 16384, 65536, 1 << 20, 5000};
      s->handle = brisk_fifo_create(pages[a % 6]);
      break;
    }
    case K_POOL: {
      static const size_t aligns[] = {0, 8, 16, 64, 4096};
      static const size_t capacities[] = {0, 1, 7, 100, 1000};
      static const unsigned flags[] = {0, BRISK_REGION_THREAD_CACHE, BRISK_REGION_PREFAULT,
                                       BRISK_REGION_THREAD_CACHE | BRISK_REGION_PREFAULT};
      s->obj_size = 1 + (size_t)a * 16 + b % 16;
      s->obj_align = aligns[b % 5];
      s->capacity = capacities[c % 5];
      s->flags = flags[(c / 5) % 4];
      s->handle = brisk_pool_create_ex(s->obj_size, s->obj_align, s->capacity, s->flags);
      if (s->handle != NULL && (c & 0x80)) {
        brisk_pool_local_init(&s->local, s->handle, (unsigned)(a % 8));
        s->local_on = true;
      }
      break;
    }
    case K_BUDDY: {
      static const size_t totals[] = {4096, 65536, 1 << 20, 3 << 20, 4 << 20, 5000};
      static const size_t mins[] = {0, 16, 64, 256, 4096};
      static const size_t maxs[] = {0, 4096, 65536, 1 << 20};
      static const unsigned flags[] = {0, BRISK_REGION_THREAD_CACHE, BRISK_REGION_PREFAULT};
      size_t total = totals[a % 6], min = mins[b % 5], max = maxs[c % 4];
      if (max != 0 && max > pow2_at_least(total)) max = 0;
      if (max != 0 && max < min) max = min;
      s->min_block = pow2_at_least(min < 16 ? 16 : min);
      s->small_tree = pow2_at_least(total) / s->min_block <= 4096;
      s->handle = brisk_buddy_create_ex(total, min, max, flags[(c / 4) % 3]);
      break;
    }
    case K_HYBRID: {
      /* The default: 64 MiB, which ASan's poisoning makes slow. */
      s->small_tree = a % 16 != 0;
      if (!s->small_tree) {
        s->handle = brisk_hybrid_create(NULL);
        break;
      }
      brisk_hybrid_config_t config;
      memset(&config, 0, sizeof config);
      size_t buckets = a % 4, size = 8;
      for (size_t i = 0; i < buckets; i++) {
        size += 8 + (size_t)((b >> (2 * i)) & 3) * 40;
        if (size > 512) size = 512;
        config.bucket_sizes[i] = size;
        config.bucket_counts[i] = 1 + (size_t)(c % 64) * (i + 1);
        if (size == 512) {
          buckets = i + 1;
          break;
        }
      }
      config.region_sizes[0] = (size_t)64 << (b % 12); /* 64 B .. 128 KiB */
      if (c & 0x40) config.region_sizes[1] = 1 << 20;
      static const unsigned flags[] = {0, BRISK_REGION_THREAD_CACHE, BRISK_REGION_PREFAULT};
      config.flags = flags[(a / 4) % 3];
      config.fallback_to_malloc = (c & 0x80) != 0;
      s->handle = brisk_hybrid_create(&config);
      if (s->handle == NULL && errno != EINVAL) fail("hybrid: create failed with errno %d", errno);
      break;
    }
    default: break;
  }
  if (s->handle == NULL && kind != K_HYBRID)
    fail("kind %d: create failed with errno %d", kind, errno);
  return s->handle != NULL ? s : NULL;
}

static int slot_index(const slot_t *s, int kind) { return (int)(s - slots[kind]); }

/* ---- the operations ---- */

/* The alignment every general block has: 16 above 8 bytes, else 8. */
static size_t general_align(size_t size) { return size > 8 ? 16 : 8; }

static void add_general(void *p, size_t size, size_t align, size_t keep, uint8_t keep_fill,
                        bool zeroed, const char *what) {
  size_t usable = brisk_usable_size(p);
  if (usable < size) fail("%s: usable size %zu below %zu", what, usable, size);
  check_aligned(p, general_align(size), what);
  check_aligned(p, align, what);
  add_block(K_GENERAL, 0, NULL, p, size, usable, keep, keep_fill, zeroed);
}

static void op_general_alloc(input_t *in, int how) {
  size_t size = read_size(in);
  if (!room_for(size)) return;
  errno = 0;
  void *p;
  size_t align = 0;
  const char *what;
  switch (how) {
    case 0: what = "brisk_malloc"; p = brisk_malloc(size); break;
    case 1: {
      size_t count = 1 + u8(in) % 4;
      size = size / count;
      what = "brisk_calloc";
      p = brisk_calloc(count, size);
      size *= count;
      break;
    }
    default:
      align = read_align(in);
      if (align == 0) align = 1;
      what = "brisk_aligned_alloc";
      p = brisk_aligned_alloc(align, size);
      if (!power_of_two(align)) {
        if (p != NULL) fail("brisk_aligned_alloc(%zu): not refused", align);
        expect_errno(EINVAL, what);
        return;
      }
      break;
  }
  if (p == NULL) fail("%s(%zu): NULL (errno %d)", what, size, errno);
  add_general(p, size, align, 0, 0, how == 1, what);
}

static void op_general_realloc(size_t i, input_t *in, bool relative) {
  block_t old = blocks[i];
  check_block(&old, "realloc");
  size_t size = relative ? read_resize(in, old.size, old.extent) : read_size(in);
  if (!room_for(size)) return;
  if (size == 0) {
    /* Frees p and returns NULL, as glibc's does. */
    if (brisk_realloc(old.p, 0) != NULL) fail("brisk_realloc(p, 0) returned a block");
    remove_block(i);
    return;
  }
  remove_block(i);
  void *p = brisk_realloc(old.p, size);
  if (p == NULL) fail("brisk_realloc(%zu): NULL (errno %d)", size, errno);
  add_general(p, size, 0, old.size, old.fill, false, "brisk_realloc");
}

static void op_remote_malloc(input_t *in) {
  size_t size = read_size(in);
  if (!room_for(size)) return;
  job_t j = {.kind = -1, .size = size};
  j = run_job(j);
  if (j.p == NULL) fail("brisk_malloc(%zu) in another thread: NULL", size);
  add_general(j.p, size, 0, 0, 0, false, "brisk_malloc in another thread");
}

static void op_arena_alloc(input_t *in, bool cursor) {
  slot_t *s = get_slot(in, K_ARENA);
  if (s == NULL) return;
  size_t size = read_size(in), align = read_align(in);
  if (!room_for(size)) return;
  size_t used = brisk_arena_used(s->handle);
  errno = 0;
  void *p = cursor ? brisk_arena_cursor_alloc(&s->cursor, size, align)
                   : brisk_arena_alloc(s->handle, size, align);
  if (align != 0 && !power_of_two(align)) {
    if (p != NULL) fail("arena: alignment %zu not refused", align);
    expect_errno(EINVAL, "arena alloc");
    return;
  }
  if (!cursor) {
    /* Exhaustion is exact: the block fits whenever its claim does. */
    size_t padding = align > 16 ? align - 16 : 0;
    size_t claim = ((size + (size == 0) + 15) & ~(size_t)15) + padding;
    /* The limit is the reservation rounded up to a claim's 16-byte step. */
    size_t limit = (s->reserve + 15) & ~(size_t)15;
    bool fits = size <= limit && padding < limit && used + claim <= limit;
    if (fits != (p != NULL))
      fail("arena (%zu reserved, %zu used): %zu bytes aligned %zu %s", s->reserve, used, size,
           align, p != NULL ? "handed out past the limit" : "refused though it fits");
    /* A claim larger than the whole limit is refused before it is made;
     * one that only overruns what is left fills the arena until reset. */
    bool never = size > limit || padding >= limit || claim > limit;
    size_t after = brisk_arena_used(s->handle);
    if (p == NULL && after != (never ? used : limit))
      fail("arena (%zu reserved): %zu bytes aligned %zu refused, used %zu -> %zu", s->reserve,
           size, align, used, after);
  }
  if (p == NULL) {
    expect_errno(ENOMEM, "arena alloc");
    return;
  }
  check_aligned(p, align != 0 ? align : 16, "arena alloc");
  add_block(K_ARENA, slot_index(s, K_ARENA), s->handle, p, size, size, 0, 0, false);
}

static void op_arena_reset(input_t *in) {
  slot_t *s = get_slot(in, K_ARENA);
  if (s == NULL) return;
  int keep = u8(in) & 1;
  for (size_t i = nblocks; i-- > 0;) {
    if (blocks[i].kind == K_ARENA && blocks[i].owner == s->handle) {
      check_block(&blocks[i], "arena reset");
      remove_block(i);
    }
  }
  brisk_arena_reset(s->handle, keep);
  if (brisk_arena_used(s->handle) != 0) fail("arena: used after reset");
}

static void op_stack_alloc(input_t *in) {
  slot_t *s = get_slot(in, K_STACK);
  if (s == NULL) return;
  size_t size = read_size(in), align = read_align(in);
  if (!room_for(size)) return;
  errno = 0;
  void *p = brisk_stack_alloc(s->handle, size, align);
  if (align != 0 && !power_of_two(align)) {
    if (p != NULL) fail("stack: alignment %zu not refused", align);
    expect_errno(EINVAL, "brisk_stack_alloc");
    return;
  }
  if (p == NULL) fail("brisk_stack_alloc(%zu, %zu): NULL (errno %d)", size, align, errno);
  check_aligned(p, align != 0 ? align : 16, "brisk_stack_alloc");
  block_t *b = add_block(K_STACK, slot_index(s, K_STACK), s->handle, p, size, size, 0, 0, false);
  b->depth = s->depth;
  s->frame_bytes[s->depth] += size;
  s->frame_last[s->depth] = p;
  s->allocations++;
  s->bytes_requested += size;
}

/* Pushes one frame, or (many) up to 255 at once: enough to outgrow the
 * frame records kept in the stack's own page. Through BRISK_STACK_SCOPE's
 * functions (`scope`) or brisk_stack_push. */
static void op_stack_push(input_t *in, bool many, bool scope) {
  slot_t *s = get_slot(in, K_STACK);
  if (s == NULL) return;
  unsigned n = many ? u8(in) : 1;
  for (unsigned k = 0; k < n && s->depth < STACK_MAX_DEPTH; k++) {
    if (scope)
      (void)brisk_stack_scope_begin_(s->handle);
    else
      brisk_stack_push(s->handle);
    s->depth++;
    s->frame_last[s->depth] = NULL;
  }
}

/* Pops one frame, or (many) up to 255, as op_stack_push pushes them. */
static void op_stack_pop(input_t *in, bool many, bool scope) {
  slot_t *s = get_slot(in, K_STACK);
  if (s == NULL) return;
  size_t n = many ? u8(in) : 1;
  if (n > s->depth) n = s->depth;
  /* The blocks of every frame about to go, checked while all are live. */
  for (size_t i = nblocks; i-- > 0;) {
    block_t *b = &blocks[i];
    if (b->kind == K_STACK && b->owner == s->handle && b->depth > s->depth - n) {
      check_block(b, "stack pop");
      remove_block(i);
    }
  }
  for (size_t k = 0; k < n; k++) {
    brisk_stack_t *stack = s->handle;
    if (scope)
      brisk_stack_scope_end_(&stack);
    else
      brisk_stack_pop(s->handle);
    s->frame_bytes[s->depth] = 0;
    s->depth--;
  }
}

static void op_stack_realloc(size_t i, input_t *in, bool relative) {
  block_t old = blocks[i];
  slot_t *s = &slots[K_STACK][old.slot];
  check_block(&old, "stack realloc");
  size_t size = relative ? read_resize(in, old.size, old.size) : read_size(in);
  size_t align = read_align(in);
  if (align != 0 && !power_of_two(align)) align = 0;
  if (!room_for(size)) return;
  errno = 0;
  void *p = brisk_stack_realloc(s->handle, old.p, old.size, size, align);
  if (p == NULL) fail("brisk_stack_realloc(%zu): NULL (errno %d)", size, errno);
  check_aligned(p, align != 0 ? align : 16, "brisk_stack_realloc");
  remove_block(i);
  block_t *b = add_block(K_STACK, old.slot, s->handle, p, size, size, old.size, old.fill, false);
  /* In place it stays in its frame: the top frame's last allocation
   * takes its new size; any other (shrunk) keeps its old size until its
   * frame is popped. Moved, it is the top frame's last, and the old copy
   * stays in its frame until that is popped. */
  b->depth = p == old.p ? old.depth : s->depth;
  if (p != old.p) {
    s->frame_bytes[s->depth] += size;
    s->frame_last[s->depth] = p;
  } else if (old.depth == s->depth && s->frame_last[s->depth] == p) {
    s->frame_bytes[s->depth] = s->frame_bytes[s->depth] - old.size + size;
  }
  s->allocations++;
  s->bytes_requested += size;
}

static void op_fifo_alloc(input_t *in) {
  slot_t *s = get_slot(in, K_FIFO);
  if (s == NULL) return;
  size_t size = read_size(in);
  if (!room_for(size)) return;
  void *p = brisk_fifo_alloc(s->handle, size);
  if (p == NULL) fail("brisk_fifo_alloc(%zu): NULL (errno %d)", size, errno);
  check_aligned(p, 16, "brisk_fifo_alloc");
  add_block(K_FIFO, slot_index(s, K_FIFO), s->handle, p, size, size, 0, 0, true);
  s->allocations++;
  s->bytes_requested += size;
}

static void op_fifo_realloc(size_t i, input_t *in, bool relative) {
  block_t old = blocks[i];
  if (old.orphan) {
    release_block(i, false); /* its fifo is destroyed: only free is allowed */
    return;
  }
  check_block(&old, "fifo realloc");
  size_t size = relative ? read_resize(in, old.size, old.size) : read_size(in);
  if (!room_for(size)) return;
  void *p = brisk_fifo_realloc(old.owner, old.p, size);
  if (p == NULL) fail("brisk_fifo_realloc(%zu): NULL (errno %d)", size, errno);
  check_aligned(p, 16, "brisk_fifo_realloc");
  remove_block(i);
  /* What was past the old size reads zero, moved or not. */
  add_block(K_FIFO, old.slot, old.owner, p, size, size, old.size, old.fill, true);
  slot_t *s = &slots[K_FIFO][old.slot];
  s->allocations++;
  s->bytes_requested += size;
}

/* The live blocks of kind from the allocator `owner`: their sum of sizes
 * (each rounded by `round`, if not NULL), and how many. */
static size_t live_sum(int kind, const void *owner, size_t (*round)(size_t), size_t *count) {
  size_t sum = 0, n = 0;
  for (size_t i = 0; i < nblocks; i++) {
    const block_t *b = &blocks[i];
    if (b->kind != kind || b->owner != owner || b->orphan) continue;
    sum += round != NULL ? round(b->size) : b->extent;
    n++;
  }
  if (count != NULL) *count = n;
  return sum;
}

/* Objects of the pool in the program's hands: the model's, and those its
 * local cache holds (which count as in use). */
static size_t pool_in_use(const slot_t *s) {
  size_t n;
  live_sum(K_POOL, s->handle, NULL, &n);
  return n + (s->local_on ? s->local.count : 0);
}

static void op_pool_alloc(input_t *in, bool local) {
  slot_t *s = get_slot(in, K_POOL);
  if (s == NULL) return;
  if (!room_for(s->obj_size)) return;
  local = local && s->local_on;
  size_t in_use = pool_in_use(s);
  errno = 0;
  void *p = local ? brisk_pool_local_alloc(&s->local) : brisk_pool_alloc(s->handle);
  /* A bounded pool without per-thread caches refuses exactly at capacity
   * (its local cache's objects count as in use; other threads cache
   * nothing without BRISK_REGION_THREAD_CACHE). */
  if (s->capacity != 0 && !(s->flags & BRISK_REGION_THREAD_CACHE) && !local) {
    bool fits = in_use < s->capacity;
    if (fits != (p != NULL))
      fail("pool (capacity %zu, %zu in use): %s", s->capacity, in_use,
           p != NULL ? "handed out past capacity" : "refused below capacity");
  }
  if (p == NULL) {
    if (s->capacity == 0) fail("unbounded pool: NULL (errno %d)", errno);
    expect_errno(ENOMEM, "brisk_pool_alloc");
    return;
  }
  check_aligned(p, s->obj_align != 0 ? s->obj_align : 16, "brisk_pool_alloc");
  add_block(K_POOL, slot_index(s, K_POOL), s->handle, p, s->obj_size, s->obj_size, 0, 0, false);
}

static void op_buddy_alloc(input_t *in) {
  slot_t *s = get_slot(in, K_BUDDY);
  if (s == NULL) return;
  size_t size = read_size(in), align = read_align(in);
  if (!room_for(size)) return;
  errno = 0;
  void *p = brisk_buddy_alloc(s->handle, size, align);
  if (size == 0 || (align != 0 && !power_of_two(align))) {
    if (p != NULL) fail("buddy: size %zu align %zu not refused", size, align);
    expect_errno(EINVAL, "brisk_buddy_alloc");
    return;
  }
  if (p == NULL) {
    expect_errno(ENOMEM, "brisk_buddy_alloc");
    return;
  }
  /* The block is the size rounded up to a power of two (at least min_block
   * and align) and is aligned to that. */
  size_t block = pow2_at_least(size);
  if (block < s->min_block) block = s->min_block;
  if (block < align) block = align;
  check_aligned(p, block, "brisk_buddy_alloc");
  add_block(K_BUDDY, slot_index(s, K_BUDDY), s->handle, p, size, block, 0, 0, false);
  s->allocations++;
  s->bytes_requested += size;
}

static void op_buddy_validate(input_t *in) {
  slot_t *s = get_slot(in, K_BUDDY);
  if (s == NULL || !s->small_tree) return;
  int all_free = 0;
  if (u8(in) & 1) brisk_buddy_trim(s->handle);
  if (!brisk_buddy_validate(s->handle, &all_free)) fail("buddy: tree inconsistent");
}

static void op_hybrid_alloc(input_t *in) {
  slot_t *s = get_slot(in, K_HYBRID);
  if (s == NULL) return;
  size_t size = read_size(in), align = read_align(in);
  if (!room_for(size)) return;
  errno = 0;
  void *p = brisk_hybrid_alloc(s->handle, size, align);
  if (size == 0 || (align != 0 && !power_of_two(align))) {
    if (p != NULL) fail("hybrid: size %zu align %zu not refused", size, align);
    expect_errno(EINVAL, "brisk_hybrid_alloc");
    return;
  }
  if (p == NULL) {
    expect_errno(ENOMEM, "brisk_hybrid_alloc");
    return;
  }
  check_aligned(p, align != 0 ? align : (size % 16 == 0 ? 16 : 8), "brisk_hybrid_alloc");
  add_block(K_HYBRID, slot_index(s, K_HYBRID), s->handle, p, size, size, 0, 0, false);
  s->allocations++;
}

/* A live block picked by the input (any kind), or -1 when there is none. */
static ssize_t pick_block(input_t *in) {
  if (nblocks == 0) return -1;
  return (ssize_t)(u16(in) % nblocks);
}

static void op_free(input_t *in, bool remote) {
  ssize_t i = pick_block(in);
  if (i < 0) return;
  if (blocks[i].kind == K_ARENA || blocks[i].kind == K_STACK) {
    check_block(&blocks[i], "check");
    return;
  }
  release_block((size_t)i, remote);
}

/* relative: the new size is read_resize's, from the block's. */
static void op_realloc(input_t *in, bool relative) {
  ssize_t i = pick_block(in);
  if (i < 0) return;
  switch (blocks[i].kind) {
    case K_GENERAL: op_general_realloc((size_t)i, in, relative); break;
    case K_STACK: op_stack_realloc((size_t)i, in, relative); break;
    case K_FIFO: op_fifo_realloc((size_t)i, in, relative); break;
    default: check_block(&blocks[i], "check"); break;
  }
}

/* A general block grows to its usable size: all of it is the program's. */
static void op_use_usable(input_t *in) {
  ssize_t i = pick_block(in);
  if (i < 0 || blocks[i].kind != K_GENERAL) return;
  block_t *b = &blocks[i];
  check_block(b, "usable size");
  size_t usable = brisk_usable_size(b->p);
  /* The secure build's malloc(0) (the harness built with BRISK_SECURE=1):
   * usable size 0, where the block's extent counts 1. */
  if (usable == 0 && b->size == 0) return;
  if (usable != b->extent)
    fail("usable size of %p changed: %zu, was %zu", (void *)b->p, usable, b->extent);
  if (!room_for(usable - b->size)) return;
  live_bytes += usable - b->size;
  b->size = usable;
  memset(b->p, b->fill, usable);
}

static void op_destroy(input_t *in) {
  int kind = 1 + u8(in) % (K_KINDS - 1);
  destroy_slot(kind, u8(in) % SLOTS);
}

static void check_all(void) {
  for (size_t i = 0; i < nblocks; i++) check_block(&blocks[i], "check");
}

/* A pool without per-thread caches counts exactly the objects in the
 * program's hands (its local cache's too) as in use, each taking its
 * stride: obj_size rounded up to the alignment (16 by default, 8 at
 * least). */
static void check_pool_stats(const slot_t *s) {
  if (s->handle == NULL || (s->flags & BRISK_REGION_THREAD_CACHE)) return;
  size_t unit = s->obj_align == 0 ? 16 : s->obj_align < 8 ? 8 : s->obj_align;
  size_t stride = (s->obj_size + unit - 1) / unit * unit;
  brisk_region_stats_t stats;
  brisk_pool_stats(s->handle, &stats);
  if (stats.bytes_in_use != pool_in_use(s) * stride)
    fail("pool (object %zu, align %zu): bytes_in_use %zu, expected %zu objects of %zu",
         s->obj_size, s->obj_align, (size_t)stats.bytes_in_use, pool_in_use(s), stride);
}

static void expect_count(const char *what, const char *count, size_t got, size_t expected) {
  if (got != expected) fail("%s: %s %zu, expected %zu", what, count, got, expected);
}

/* A fifo block's span for size: its 8-byte header and the size, rounded
 * up to 16 (regions/fifo.h's bytes_in_use). */
static size_t fifo_span(size_t size) { return (size + 8 + 15) & ~(size_t)15; }

/* A stack's, a fifo's, a buddy's and a hybrid's statistics against the
 * model: allocations and bytes_requested exactly (a hybrid's allocations,
 * summed over its sections and fallbacks); bytes_in_use exactly where the
 * model knows it (a stack: the bytes asked in its live frames, counting a
 * moved realloc's old copy, and the old size of a block shrunk in place
 * that was not its frame's last, until the frame is popped; a buddy: its
 * live blocks' power-of-two sizes), else bounded (a fifo: at least the
 * spans of its live blocks, as a realloc in place may keep a larger span
 * and a block bigger than a page takes what its mapping holds; 0 with none
 * live). */
static void check_region_stats(int kind, const slot_t *s) {
  if (s->handle == NULL) return;
  brisk_region_stats_t stats;
  size_t count = 0;
  switch (kind) {
    case K_STACK: {
      brisk_stack_stats(s->handle, &stats);
      size_t asked = 0;
      for (uint32_t d = 0; d <= s->depth; d++) asked += s->frame_bytes[d];
      expect_count("stack", "bytes_in_use", stats.bytes_in_use, asked);
      break;
    }
    case K_FIFO: {
      brisk_fifo_stats(s->handle, &stats);
      size_t spans = live_sum(K_FIFO, s->handle, fifo_span, &count);
      if (stats.bytes_in_use < spans || (count == 0 && stats.bytes_in_use != 0))
        fail("fifo: bytes_in_use %zu for %zu live blocks of %zu bytes in spans",
             (size_t)stats.bytes_in_use, count, spans);
      break;
    }
    case K_BUDDY:
      brisk_buddy_stats(s->handle, &stats);
      expect_count("buddy", "bytes_in_use", stats.bytes_in_use,
                   live_sum(K_BUDDY, s->handle, NULL, NULL));
      break;
    case K_HYBRID: {
      brisk_hybrid_section_stats_t sections[64];
      size_t fallbacks = 0, allocations = 0;
      size_t n = brisk_hybrid_stats(s->handle, sections, 64, &fallbacks);
      if (n > 64) fail("hybrid: %zu sections", n);
      for (size_t i = 0; i < n; i++) allocations += sections[i].allocations;
      expect_count("hybrid", "allocations", allocations + fallbacks, s->allocations);
      return;
    }
    default: return;
  }
  const char *what = kind == K_STACK ? "stack" : kind == K_FIFO ? "fifo" : "buddy";
  expect_count(what, "allocations", stats.allocations, s->allocations);
  expect_count(what, "bytes_requested", stats.bytes_requested, s->bytes_requested);
}

/* check_all, every live region allocator's statistics against the model,
 * and every live pool, fifo and small hybrid validated. */
static void op_check(void) {
  check_all();
  for (int slot = 0; slot < SLOTS; slot++) {
    check_pool_stats(&slots[K_POOL][slot]);
    for (int kind = K_STACK; kind <= K_HYBRID; kind++) check_region_stats(kind, &slots[kind][slot]);
    validate_slot(K_FIFO, &slots[K_FIFO][slot], false);
    validate_slot(K_POOL, &slots[K_POOL][slot], false);
    validate_slot(K_HYBRID, &slots[K_HYBRID][slot], false);
  }
}

static void end_input(void) {
  /* Orphaned fifo blocks and the rest, in an order the input chose. */
  check_all();
  while (nblocks > 0) {
    size_t i = nblocks - 1;
    if (blocks[i].kind == K_ARENA || blocks[i].kind == K_STACK) {
      remove_block(i);
      continue;
    }
    release_block(i, false);
  }
  for (int kind = 1; kind < K_KINDS; kind++)
    for (int slot = 0; slot < SLOTS; slot++) destroy_slot(kind, slot);
  if (live_bytes != 0) fail("harness: %zu live bytes left", live_bytes);
  brisk_stats_t stats;
  stats.size = sizeof stats;
  if (brisk_stats_get(&stats) != 0) fail("brisk_stats_get failed");
  for (int kind = 0; kind < BRISK_REGION_KINDS; kind++) {
    if (stats.regions[kind].live != 0)
      fail("region kind %d: %zu still registered after every one was destroyed", kind,
           stats.regions[kind].live);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  start_worker();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input_t in = {data, size};
  while (in.n > 0) {
    uint8_t op = u8(&in);
    /* The top bits pick a variant of some operations: 0xe0 and up, the
     * realloc of a size read_resize picks, many frames pushed or popped;
     * 0xc0 to 0xdf, frames through BRISK_STACK_SCOPE's functions. */
    bool variant = op >= 0xe0, scope = op >= 0xc0 && op < 0xe0;
    switch (op % 32) {
      case 0: case 1: op_general_alloc(&in, 0); break;
      case 2: op_general_alloc(&in, 1); break;
      case 3: op_general_alloc(&in, 2); break;
      case 4: case 5: op_free(&in, false); break;
      case 6: op_free(&in, true); break;
      case 7: case 8: op_realloc(&in, variant); break;
      case 9: op_use_usable(&in); break;
      case 10: op_remote_malloc(&in); break;
      case 11:
        if ((u8(&in) & 7) == 0) {
          job_t j = {.exit = true};
          run_job(j);
        } else {
          brisk_collect(u8(&in) & 1);
        }
        break;
      case 12: case 13: op_arena_alloc(&in, false); break;
      case 14: op_arena_alloc(&in, true); break;
      case 15: op_arena_reset(&in); break;
      case 16: op_stack_push(&in, variant, scope); break;
      case 17: case 18: op_stack_alloc(&in); break;
      case 19: op_stack_pop(&in, variant, scope); break;
      case 20: case 21: op_fifo_alloc(&in); break;
      case 22: case 23: op_pool_alloc(&in, false); break;
      case 24: op_pool_alloc(&in, true); break;
      case 25: case 26: op_buddy_alloc(&in); break;
      case 27: op_buddy_validate(&in); break;
      case 28: case 29: op_hybrid_alloc(&in); break;
      case 30: op_destroy(&in); break;
      default: op_check(); break;
    }
  }
  end_input();
  return 0;
}
