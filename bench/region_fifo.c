/*
 * region_fifo: brisk's FIFO allocator against malloc/free in one program, on
 * the three loops of seed 002 (Intersec's mem-fifo benchmark):
 *
 *   1. alloc then free at once;
 *   2. a ring of pointers walked in order: each slot's block is freed and a
 *      new one allocated (constant live memory, first allocated first freed);
 *   3. the same ring, a random slot each time (FIFO order lost).
 *
 * Sizes are uniform in [min, max] (default 8..256 bytes: small messages, as
 * the seed's inter-process use; its default 64 KiB page then holds ~450
 * blocks). Sizes and slots are drawn before timing, the same for both
 * allocators. Each block's first word is read (brisk_fifo_alloc must hand out
 * zeros: a non-zero word fails the run) and written, for both.
 * malloc is whatever the program gets (glibc's unless preloaded).
 *
 * Every repetition runs each loop under both allocators back to back, in
 * alternating order; the medians of the repetitions are reported
 * (in-process CLOCK_MONOTONIC), and the speedup is the median of the
 * per-repetition ratios. Defaults: 2M operations per loop, 21 repetitions;
 * --quick: 500k operations, 7 repetitions (about a second).
 *
 * Before them, the fifo as a user calls it (region_user.h): a ring of
 * USER_RING blocks of 16-255 B freed in the order they were allocated,
 * every block written whole, a new fifo per trial (created, USER_OPS
 * replacements, every block freed, destroyed), against calloc (the fifo
 * hands out zeroed memory, so calloc is what it replaces).
 *
 * usage: region_fifo [--quick] [--ops N] [--ring N] [--min B] [--max B]
 *                    [--reps N] [--page B] [--loop 1|2|3] [--only fifo|malloc]
 *                    [--user | --seed]
 * (--loop and --only narrow a run down for a profiler; the table then shows
 * zeros for what did not run; --user runs only the user's pattern, --seed
 * only the seed's loops.)
 * Output: "### fifo", a Markdown table, key=value lines, last "status=ok".
 */
#define _GNU_SOURCE
#include "bench_common.h"
#include "region_user.h"

#include <brisk.h>

enum { LOOPS = 3, MAX_REPS = 101 };

static const char *const loop_names[LOOPS] = {
    "1. alloc, free at once", "2. ring, FIFO order", "3. ring, random order"};

typedef struct config {
    size_t ops, ring, min, max, reps, page;
    size_t loop;      /* 1..3: run only that loop (profiling); 0: all */
    const char *only; /* "fifo" or "malloc": run only that one (profiling) */
} config;

typedef struct workload {
    uint32_t *sizes; /* ops sizes */
    uint32_t *slots; /* ops random ring slots (loop 3) */
    void **ring;
} workload;

/* One copy of each loop per allocator, so that neither pays for an
 * indirect call. */
#define DEFINE_LOOPS(NAME, ALLOC, FREE)                                                   \
    static uint64_t NAME##_loop1(void *ctx, const workload *w, size_t ops)               \
    {                                                                                     \
        uint64_t dirty = 0;                                                               \
        for (size_t i = 0; i < ops; i++) {                                                \
            uint64_t *p = ALLOC(ctx, w->sizes[i]);                                        \
            if (p == NULL)                                                                \
                bench_oom("region_fifo", w->sizes[i]);                                    \
            dirty |= *(volatile uint64_t *)p;                                             \
            *(volatile uint64_t *)p = i + 1;                                              \
            FREE(ctx, p);                                                                 \
        }                                                                                 \
        return dirty;                                                                     \
    }                                                                                     \
    static uint64_t NAME##_ring(void *ctx, const workload *w, size_t ops, size_t ring,    \
                                int random_order)                                        \
    {                                                                                     \
        uint64_t dirty = 0;                                                               \
        for (size_t i = 0; i < ops; i++) {                                                \
            size_t slot = random_order ? w->slots[i] : i % ring;                          \
            FREE(ctx, w->ring[slot]);                                                     \
            uint64_t *p = ALLOC(ctx, w->sizes[i]);                                        \
            if (p == NULL)                                                                \
                bench_oom("region_fifo", w->sizes[i]);                                    \
            dirty |= *(volatile uint64_t *)p;                                             \
            *(volatile uint64_t *)p = i + 1;                                              \
            w->ring[slot] = p;                                                            \
        }                                                                                 \
        for (size_t slot = 0; slot < ring; slot++) {                                      \
            FREE(ctx, w->ring[slot]);                                                     \
            w->ring[slot] = NULL;                                                         \
        }                                                                                 \
        return dirty;                                                                     \
    }

#define FIFO_ALLOC(ctx, size) brisk_fifo_alloc((brisk_fifo_t *)(ctx), (size))
#define FIFO_FREE(ctx, p)     brisk_fifo_free((brisk_fifo_t *)(ctx), (p))
#define LIBC_ALLOC(ctx, size) malloc(size)
#define LIBC_FREE(ctx, p)     free(p)

DEFINE_LOOPS(fifo, FIFO_ALLOC, FIFO_FREE)
DEFINE_LOOPS(libc, LIBC_ALLOC, LIBC_FREE)

typedef struct fifo_run {
    double ns;
    brisk_region_stats_t stats;
} fifo_run;

static fifo_run run_fifo(int loop, const config *c, const workload *w)
{
    brisk_fifo_t *fifo = brisk_fifo_create(c->page);
    if (fifo == NULL) {
        fprintf(stderr, "region_fifo: brisk_fifo_create failed\n");
        exit(1);
    }
    double start = bench_now();
    uint64_t dirty = loop == 0 ? fifo_loop1(fifo, w, c->ops) : fifo_ring(fifo, w, c->ops, c->ring, loop == 2);
    double elapsed = bench_now() - start;
    fifo_run run = {elapsed * 1e9 / (double)c->ops, {0}};
    brisk_fifo_stats(fifo, &run.stats);
    if (dirty != 0 || run.stats.bytes_in_use != 0) {
        fprintf(stderr, "region_fifo: loop %d: %s\n", loop + 1,
                dirty != 0 ? "brisk_fifo_alloc returned memory that was not zero"
                           : "bytes_in_use is not 0 after every block was freed");
        printf("status=fail\n");
        exit(1);
    }
    brisk_fifo_destroy(fifo);
    return run;
}

/*
 * Bytes the fifo holds from the system at its peak, and the bytes live in
 * the ring at that moment, for loops 2 and 3: one untimed run that reads
 * the statistics after every operation.
 */
static void fifo_peak(int loop, const config *c, const workload *w, size_t *peak_held,
                      size_t *live_at_peak)
{
    brisk_fifo_t *fifo = brisk_fifo_create(c->page);
    if (fifo == NULL)
        bench_oom("region_fifo", c->page);
    *peak_held = *live_at_peak = 0;
    size_t live = 0;
    size_t *sizes = calloc(c->ring, sizeof *sizes);
    if (sizes == NULL)
        bench_oom("region_fifo", c->ring * sizeof *sizes);
    for (size_t i = 0; i < c->ops; i++) {
        size_t slot = loop == 2 ? w->slots[i] : i % c->ring;
        brisk_fifo_free(fifo, w->ring[slot]);
        live -= sizes[slot];
        w->ring[slot] = brisk_fifo_alloc(fifo, w->sizes[i]);
        if (w->ring[slot] == NULL)
            bench_oom("region_fifo", w->sizes[i]);
        sizes[slot] = w->sizes[i];
        live += sizes[slot];
        brisk_region_stats_t s;
        brisk_fifo_stats(fifo, &s);
        if (s.bytes_held > *peak_held) {
            *peak_held = s.bytes_held;
            *live_at_peak = live;
        }
    }
    for (size_t slot = 0; slot < c->ring; slot++) {
        brisk_fifo_free(fifo, w->ring[slot]);
        w->ring[slot] = NULL;
    }
    free(sizes);
    brisk_fifo_destroy(fifo);
}

/* Where malloc's loops leave what they read, so it is not optimised away. */
static volatile uint64_t bench_sink;

static double run_libc(int loop, const config *c, const workload *w)
{
    double start = bench_now();
    uint64_t dirty = loop == 0 ? libc_loop1(NULL, w, c->ops) : libc_ring(NULL, w, c->ops, c->ring, loop == 2);
    double elapsed = bench_now() - start;
    bench_sink = dirty;
    return elapsed * 1e9 / (double)c->ops;
}

/* ---- As a user calls it (region_user.h) ---- */

#define USER_RING 1024
#define USER_MIN 16
#define USER_MAX 255

typedef struct user_ctx {
    size_t ops;
    uint8_t *sizes;
    void *ring[USER_RING];
} user_ctx;

static double user_trial(void *arg, int kind)
{
    user_ctx *c = arg;
    double start = bench_now();
    if (kind == 2) { /* the callgrind mode's harness alone: a buffer per slot */
        static unsigned char buffers[USER_RING][256];
        for (size_t i = 0; i < c->ops; i++) {
            size_t slot = i % USER_RING;
            void *p = buffers[slot];
            user_write(p, c->sizes[i], (unsigned)i);
            c->ring[slot] = p;
        }
        return bench_now() - start;
    }
    if (kind == 1) {
        for (size_t i = 0; i < c->ops; i++) {
            size_t slot = i % USER_RING;
            free(c->ring[slot]);
            void *p = calloc(1, c->sizes[i]);
            if (p == NULL)
                return -1;
            user_write(p, c->sizes[i], (unsigned)i);
            c->ring[slot] = p;
        }
        for (size_t slot = 0; slot < USER_RING; slot++) {
            free(c->ring[slot]);
            c->ring[slot] = NULL;
        }
        return bench_now() - start;
    }
    brisk_fifo_t *fifo = brisk_fifo_create(0);
    if (fifo == NULL)
        return -1;
    for (size_t i = 0; i < c->ops; i++) {
        size_t slot = i % USER_RING;
        brisk_fifo_free(fifo, c->ring[slot]);
        void *p = brisk_fifo_alloc(fifo, c->sizes[i]);
        if (p == NULL)
            return -1;
        user_write(p, c->sizes[i], (unsigned)i);
        c->ring[slot] = p;
    }
    for (size_t slot = 0; slot < USER_RING; slot++) {
        brisk_fifo_free(fifo, c->ring[slot]);
        c->ring[slot] = NULL;
    }
    brisk_fifo_destroy(fifo);
    return bench_now() - start;
}

/* callgrind units (region_user.h): n operations of the ring. */
static int user_units(const char *kind, size_t n)
{
    static user_ctx c;
    c.ops = n;
    c.sizes = malloc(n + 1);
    if (c.sizes == NULL)
        return 1;
    bench_rng rng;
    bench_rng_seed(&rng, 12);
    for (size_t i = 0; i < n; i++)
        c.sizes[i] = (uint8_t)bench_rng_range(&rng, USER_MIN, USER_MAX);
    int status = 0;
    if (strcmp(kind, "floor") == 0) {
        status = user_trial(&c, 2) < 0;
    } else if (strcmp(kind, "calloc") == 0 || strcmp(kind, "fifo") == 0) {
        status = user_trial(&c, kind[0] == 'c') < 0;
    } else {
        status = 2;
    }
    free(c.sizes);
    return status;
}

static bool user_patterns(size_t ops, int reps)
{
    static user_ctx c;
    c.ops = ops;
    c.sizes = malloc(ops);
    if (c.sizes == NULL)
        bench_oom("region_fifo", ops);
    bench_rng rng;
    bench_rng_seed(&rng, 12);
    for (size_t i = 0; i < ops; i++)
        c.sizes[i] = (uint8_t)bench_rng_range(&rng, USER_MIN, USER_MAX);
    double s[2];
    if (!user_measure(user_trial, &c, 2, reps, s)) {
        fprintf(stderr, "region_fifo: a user trial failed\n");
        return false;
    }
    free(c.sizes);
    printf("#### fifo as a user calls it\n\n");
    printf("A ring of %d blocks of %d-%d B freed in the order they were allocated: each "
           "operation frees the oldest block and allocates one, written whole. A trial: a new "
           "fifo (64 KiB pages), %zu operations, every block freed, the fifo destroyed; calloc: "
           "the same (the fifo hands out zeroed memory). ns per operation (free + alloc); "
           "medians of %d interleaved trials.\n\n",
           USER_RING, USER_MIN, USER_MAX, ops, reps);
    user_table_head("fifo", "calloc/free");
    user_row("ring, FIFO order", s[0], s[1], (double)ops);
    printf("\n");
    user_report("fifo_ring", s[0], s[1], (double)ops, reps, "operation");
    printf("\n");
    return true;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: region_fifo [--quick] [--ops N] [--ring N] [--min B] [--max B] "
                 "[--reps N] [--page B] [--loop 1|2|3] [--only fifo|malloc] "
                 "[--user | --seed]\n");
}

int main(int argc, char **argv)
{
    config c = {.ops = 2000000, .ring = 4096, .min = 8, .max = 256, .reps = 21, .page = 0};
    bool user = true, seed = true, reps_given = false;
    int status;
    if (user_callgrind_mode(argc, argv, "region_fifo", user_units, &status))
        return status;
    size_t user_ops = 2000000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        size_t *field = NULL;
        if (strcmp(a, "--quick") == 0) {
            c.ops = 500000;
            c.reps = 7;
            user_ops = 200000;
            continue;
        }
        if (strcmp(a, "--user") == 0 || strcmp(a, "--seed") == 0) {
            *(a[2] == 'u' ? &seed : &user) = false;
            continue;
        }
        reps_given |= strcmp(a, "--reps") == 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--only") == 0 && i + 1 < argc) {
            c.only = argv[++i];
            continue;
        }
        if (strcmp(a, "--ops") == 0) field = &c.ops;
        else if (strcmp(a, "--ring") == 0) field = &c.ring;
        else if (strcmp(a, "--min") == 0) field = &c.min;
        else if (strcmp(a, "--max") == 0) field = &c.max;
        else if (strcmp(a, "--reps") == 0) field = &c.reps;
        else if (strcmp(a, "--page") == 0) field = &c.page;
        else if (strcmp(a, "--loop") == 0) field = &c.loop;
        if (field == NULL || i + 1 == argc) {
            usage(stderr);
            return 2;
        }
        *field = (size_t)bench_parse_uint("region_fifo", a + 2, argv[++i]);
    }
    if (c.ops == 0 || c.ring == 0 || c.min < 8 || c.max < c.min || c.max > UINT32_MAX ||
        c.reps == 0 || c.reps > MAX_REPS || c.loop > LOOPS ||
        (c.only != NULL && strcmp(c.only, "fifo") != 0 && strcmp(c.only, "malloc") != 0) ||
        (!user && !seed) || (reps_given && c.reps > USER_MAX_REPS)) {
        fprintf(stderr, "region_fifo: need ops, ring > 0, 8 <= min <= max, 1 <= reps <= %d\n",
                MAX_REPS);
        return 2;
    }

    bench_check_malloc("region_fifo");
    printf("### fifo\n\n");
    int user_reps = reps_given ? (int)c.reps : c.reps > 7 ? 5 : 3;
    if (user && !user_patterns(user_ops, user_reps))
        return 1;
    if (!seed) {
        printf("status=ok\n");
        return 0;
    }

    workload w;
    w.sizes = malloc(c.ops * sizeof *w.sizes);
    w.slots = malloc(c.ops * sizeof *w.slots);
    w.ring = calloc(c.ring, sizeof *w.ring);
    if (w.sizes == NULL || w.slots == NULL || w.ring == NULL)
        bench_oom("region_fifo", c.ops * sizeof *w.sizes);
    bench_rng rng;
    bench_rng_seed(&rng, 2);
    for (size_t i = 0; i < c.ops; i++) {
        w.sizes[i] = (uint32_t)bench_rng_range(&rng, c.min, c.max);
        w.slots[i] = (uint32_t)bench_rng_range(&rng, 0, c.ring - 1);
    }

    static double fifo_ns[LOOPS][MAX_REPS], libc_ns[LOOPS][MAX_REPS];
    size_t pages[LOOPS] = {0}, held[LOOPS] = {0};
    for (size_t rep = 0; rep < c.reps; rep++) {
        for (int loop = 0; loop < LOOPS; loop++) {
            if (c.loop != 0 && (size_t)loop + 1 != c.loop)
                continue;
            int with_fifo = c.only == NULL || strcmp(c.only, "fifo") == 0;
            int with_libc = c.only == NULL || strcmp(c.only, "malloc") == 0;
            /* Alternate which allocator goes first, so neither always runs warm. */
            if (with_libc && rep % 2 == 0)
                libc_ns[loop][rep] = run_libc(loop, &c, &w);
            if (with_fifo) {
                fifo_run f = run_fifo(loop, &c, &w);
                fifo_ns[loop][rep] = f.ns;
                pages[loop] = f.stats.system_requests;
                held[loop] = f.stats.bytes_held;
            }
            if (with_libc && rep % 2 == 1)
                libc_ns[loop][rep] = run_libc(loop, &c, &w);
        }
    }

    /* The speedup is the median of each repetition's own ratio: both ran
     * back to back, so a slow spell of the machine cancels out. */
    double fifo_med[LOOPS], libc_med[LOOPS], speedup[LOOPS];
    for (int loop = 0; loop < LOOPS; loop++) {
        static double ratio[MAX_REPS];
        for (size_t rep = 0; rep < c.reps; rep++)
            ratio[rep] = fifo_ns[loop][rep] > 0 ? libc_ns[loop][rep] / fifo_ns[loop][rep] : 0;
        speedup[loop] = bench_median(ratio, c.reps);
        fifo_med[loop] = bench_median(fifo_ns[loop], c.reps);
        libc_med[loop] = bench_median(libc_ns[loop], c.reps);
    }

    size_t peak_held[LOOPS] = {0}, live_at_peak[LOOPS] = {0};
    for (int loop = 1; loop < LOOPS; loop++)
        if (c.only == NULL || strcmp(c.only, "fifo") == 0)
            fifo_peak(loop, &c, &w, &peak_held[loop], &live_at_peak[loop]);

    printf("#### seed 002's loops\n\n");
    printf("brisk_fifo (page %zu B) against malloc/free; sizes uniform in %zu..%zu B, "
           "ring of %zu blocks, %zu operations per loop; medians of %zu runs, ns per "
           "alloc+free pair; speedup: median of the per-run ratios malloc/fifo. System calls: "
           "the last run's (a fifo made after another takes its pages from the OS layer's "
           "cache of mappings).\n\n",
           c.page ? c.page : (size_t)65536, c.min, c.max, c.ring, c.ops, c.reps);
    printf("| loop | fifo ns/op | malloc ns/op | speedup | fifo system calls |\n");
    printf("| --- | ---: | ---: | ---: | ---: |\n");
    for (int loop = 0; loop < LOOPS; loop++)
        printf("| %s | %.2f | %.2f | %.2fx | %zu |\n", loop_names[loop], fifo_med[loop],
               libc_med[loop], speedup[loop], pages[loop]);
    printf("\n");
    printf("fifo_ops=%zu\nfifo_ring=%zu\nfifo_size_min=%zu\nfifo_size_max=%zu\nfifo_reps=%zu\n",
           c.ops, c.ring, c.min, c.max, c.reps);
    for (int loop = 0; loop < LOOPS; loop++) {
        printf("fifo_loop%d_ns=%.2f\n", loop + 1, fifo_med[loop]);
        printf("malloc_loop%d_ns=%.2f\n", loop + 1, libc_med[loop]);
        printf("fifo_vs_malloc_loop%d=%.2f\n", loop + 1, speedup[loop]);
        printf("fifo_system_requests_loop%d=%zu\n", loop + 1, pages[loop]);
        printf("fifo_bytes_held_end_loop%d=%zu\n", loop + 1, held[loop]);
        if (loop > 0) {
            printf("fifo_peak_held_loop%d=%zu\n", loop + 1, peak_held[loop]);
            printf("fifo_live_at_peak_loop%d=%zu\n", loop + 1, live_at_peak[loop]);
        }
    }
    free(w.sizes);
    free(w.slots);
    free(w.ring);
    printf("status=ok\n");
    return 0;
}
