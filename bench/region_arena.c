/*
 * region_arena — seed 001's experiment. T threads each make M small
 * allocations (8..64 B, default alignment 16) into ONE shared arena:
 *
 *   cas       a bump allocator written here, whose offset advances with a
 *             compare_exchange_weak retry loop (the seed's first version);
 *             its commit logic is brisk's (reserve PROT_NONE, mprotect in
 *             growing chunks, CAS-max of the frontier), so only the claim
 *             differs. noinline, like the library call it is compared to.
 *   fetch_add brisk_arena_alloc: one unconditional fetch_add per block.
 *   malloc    the C library's malloc for the same sizes (each thread its own
 *             blocks). Frees are not timed: every block is freed after the
 *             clock stops, and glibc is told not to trim, so each run starts
 *             from a warm heap as the arenas do (reset, keeping memory).
 *
 * Each thread stores every pointer in its own array (the same for all
 * three), so no allocation can be optimised away. Time per allocation is
 * wall time from the first thread's start to the last one's end (each reads
 * the clock itself after a barrier), divided by T * M: with
 * more threads than cores it is the inverse of the throughput. Every
 * measurement runs REPS times, the three allocators interleaved, after one
 * untimed warm-up; the table shows medians.
 *
 * Contention needs the threads to run at once. On a shared 2-core VM a
 * run of a few milliseconds sometimes has its threads one after the other
 * (the other vCPU was elsewhere): CAS and fetch_add then both show their
 * single-thread cost, and the comparison says nothing. So with no more
 * threads than the CPUs this process may use, a timed run is measured
 * again (at most MAX_RETRIES times; the count is printed as
 * serialized_runs) when a thread started more than half the run's wall
 * time after the first, or was on a CPU for less than half of its own
 * span (CLOCK_THREAD_CPUTIME_ID). Neither depends on how fast the
 * allocator under test is: a thread that is merely slower, or loses CAS
 * races, still runs the whole time.
 *
 * Before that experiment, the arena as a user calls it (region_user.h):
 * one thread makes USER_BLOCKS blocks of 8-64 B (4 M; --quick 256 K),
 * writes each whole and keeps its pointer, in a new arena per trial
 * (created, filled, destroyed: `brisk_arena_alloc`, and a cursor), against
 * malloc (the same blocks, each written, then every one freed).
 *
 * Usage: region_arena [--quick] [--reps N] [--allocs M] [--user | --seed]
 *   --user: only the user's patterns (what region_arena_brisk runs);
 *   --seed: only seed 001's experiment.
 * Output: "### arena", Markdown tables, key=value lines, status=ok.
 */
#define _GNU_SOURCE
#include <brisk.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "bench_common.h"
#include "region_user.h"

#define MAX_THREADS 8
#define MAX_REPS 64
#define RESERVE ((size_t)4 << 30)

static const int thread_counts[] = {1, 2, 4, 8};
#define NUM_COUNTS ((int)(sizeof thread_counts / sizeof thread_counts[0]))

/* ---- The CAS-loop bump allocator (the benchmark's only) ---- */

typedef struct cas_arena {
    uint8_t *data;
    size_t limit;
    _Atomic size_t committed;
    size_t page;
    _Alignas(64) _Atomic size_t offset;
    _Alignas(64) char pad;
} cas_arena;

static bool cas_arena_init(cas_arena *a, size_t reserve)
{
    void *p = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return false;
    a->data = p;
    a->limit = reserve;
    a->page = (size_t)sysconf(_SC_PAGESIZE);
    atomic_init(&a->committed, 0);
    atomic_init(&a->offset, 0);
    return true;
}

/* The same commit as brisk's arena: whoever needs memory commits it. */
static __attribute__((noinline)) bool cas_arena_commit(cas_arena *a, size_t end)
{
    size_t cur = atomic_load_explicit(&a->committed, memory_order_acquire);
    if (cur >= end)
        return true;
    size_t chunk = cur / 4;
    if (chunk < ((size_t)1 << 20))
        chunk = (size_t)1 << 20;
    if (chunk > ((size_t)64 << 20))
        chunk = (size_t)64 << 20;
    size_t target = cur + chunk > end ? cur + chunk : end;
    target = (target + a->page - 1) & ~(a->page - 1);
    if (target > a->limit)
        target = a->limit;
    if (mprotect(a->data + cur, target - cur, PROT_READ | PROT_WRITE) != 0)
        return false;
    while (cur < target && !atomic_compare_exchange_weak_explicit(&a->committed, &cur, target,
                                                                  memory_order_acq_rel,
                                                                  memory_order_acquire)) {
    }
    return true;
}

static __attribute__((noinline)) void *cas_arena_alloc(cas_arena *a, size_t size)
{
    size_t claim = (size + (size == 0) + 15) & ~(size_t)15;
    size_t start = atomic_load_explicit(&a->offset, memory_order_relaxed);
    size_t end;
    do {
        end = start + claim;
        if (end > a->limit)
            return NULL;
    } while (!atomic_compare_exchange_weak_explicit(&a->offset, &start, end, memory_order_relaxed,
                                                    memory_order_relaxed));
    if (end > atomic_load_explicit(&a->committed, memory_order_acquire) &&
        !cas_arena_commit(a, end))
        return NULL;
    return a->data + start;
}

static void cas_arena_reset(cas_arena *a) { atomic_store(&a->offset, 0); }

static void cas_arena_free(cas_arena *a) { munmap(a->data, a->limit); }

/* ---- As a user calls it (region_user.h) ---- */

/* Reserved per arena: generous, as the README's example (address space
 * only; what is used is committed as it goes). Valgrind refuses that
 * much: the callgrind mode asks for 1 GiB. */
static size_t g_user_reserve = (size_t)64 << 30;

/* USER_MALLOC_ALLOCS: malloc's trial timed up to its last malloc, the
 * frees left out (shown beside, for what a trial's frees cost). */
enum user_kind { USER_ARENA, USER_MALLOC, USER_CURSOR, USER_MALLOC_ALLOCS, USER_KINDS,
                 USER_FLOOR /* the callgrind mode's harness alone */ };

typedef struct user_ctx {
    size_t count;
    uint8_t *sizes; /* 8..64, drawn before any trial */
    void **ptrs;
} user_ctx;

static double user_trial(void *arg, int kind)
{
    user_ctx *c = arg;
    size_t n = c->count;
    const uint8_t *sizes = c->sizes;
    void **ptrs = c->ptrs;
    double start = bench_now();
    if (kind == USER_MALLOC || kind == USER_MALLOC_ALLOCS) {
        for (size_t i = 0; i < n; i++) {
            void *p = malloc(sizes[i]);
            if (p == NULL)
                return -1;
            user_write(p, sizes[i], (unsigned)i);
            ptrs[i] = p;
        }
        double allocs = bench_now() - start;
        for (size_t i = 0; i < n; i++)
            free(ptrs[i]);
        return kind == USER_MALLOC ? bench_now() - start : allocs;
    }
    if (kind == USER_FLOOR) {
        /* The same loop and writes, the blocks bumped from one buffer. */
        uint8_t *buffer = malloc(n * 64 + 64), *pos = buffer;
        if (buffer == NULL)
            return -1;
        for (size_t i = 0; i < n; i++) {
            void *p = pos;
            pos += (sizes[i] + 15u) & ~(size_t)15;
            user_write(p, sizes[i], (unsigned)i);
            ptrs[i] = p;
        }
        free(buffer);
        return bench_now() - start;
    }
    brisk_arena_t *arena = brisk_arena_create(g_user_reserve);
    if (arena == NULL)
        return -1;
    if (kind == USER_ARENA) {
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_arena_alloc(arena, sizes[i], 0);
            if (p == NULL)
                return -1;
            user_write(p, sizes[i], (unsigned)i);
            ptrs[i] = p;
        }
    } else {
        brisk_arena_cursor_t cursor;
        brisk_arena_cursor_init(&cursor, arena, 0);
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_arena_cursor_alloc(&cursor, sizes[i], 0);
            if (p == NULL)
                return -1;
            user_write(p, sizes[i], (unsigned)i);
            ptrs[i] = p;
        }
    }
    brisk_arena_destroy(arena);
    return bench_now() - start;
}

static bool user_patterns(size_t count, int reps)
{
    user_ctx c = {count, malloc(count), malloc(count * sizeof(void *))};
    if (c.sizes == NULL || c.ptrs == NULL)
        bench_oom("region_arena", count * sizeof(void *));
    bench_rng rng;
    bench_rng_seed(&rng, 11);
    for (size_t i = 0; i < count; i++)
        c.sizes[i] = (uint8_t)bench_rng_range(&rng, 8, 64);
    memset(c.ptrs, 0, count * sizeof(void *));
    double s[USER_KINDS];
    if (!user_measure(user_trial, &c, USER_KINDS, reps, s)) {
        fprintf(stderr, "region_arena: a user trial failed\n");
        return false;
    }
    printf("#### arena as a user calls it\n\n");
    printf("One thread: a new arena (64 GiB reserved) per trial, %zu blocks of 8-64 B, each "
           "written whole (memset) and its pointer kept, then the arena destroyed; malloc: the "
           "same blocks, each written, then all freed. ns per block, whole trial; medians of "
           "%d interleaved trials.\n\n", count, reps);
    user_table_head("arena", "malloc");
    user_row("`brisk_arena_alloc`", s[USER_ARENA], s[USER_MALLOC], (double)count);
    user_row("cursor (`brisk_arena_cursor_alloc`)", s[USER_CURSOR], s[USER_MALLOC],
             (double)count);
    printf("\nmalloc's trial without its frees (timed up to the last malloc): %.2f ns per "
           "block; `brisk_arena_alloc` %.2fx, the cursor %.2fx against that.\n\n",
           s[USER_MALLOC_ALLOCS] * 1e9 / (double)count, s[USER_MALLOC_ALLOCS] / s[USER_ARENA],
           s[USER_MALLOC_ALLOCS] / s[USER_CURSOR]);
    char extra[96];
    snprintf(extra, sizeof extra, "baseline_no_frees_ns=%.3f ratio_no_frees=%.3f",
             s[USER_MALLOC_ALLOCS] * 1e9 / (double)count, s[USER_MALLOC_ALLOCS] / s[USER_ARENA]);
    user_report_extra("arena_alloc", s[USER_ARENA], s[USER_MALLOC], (double)count, reps, "block",
                      extra);
    snprintf(extra, sizeof extra, "baseline_no_frees_ns=%.3f ratio_no_frees=%.3f",
             s[USER_MALLOC_ALLOCS] * 1e9 / (double)count, s[USER_MALLOC_ALLOCS] / s[USER_CURSOR]);
    user_report_extra("arena_cursor", s[USER_CURSOR], s[USER_MALLOC], (double)count, reps,
                      "block", extra);
    printf("\n");
    free(c.sizes);
    free(c.ptrs);
    return true;
}

/* callgrind units (region_user.h): n blocks of the user's pattern. */
static int user_units(const char *kind, size_t n)
{
    uint8_t *sizes = malloc(n + 1);
    void **ptrs = malloc((n + 1) * sizeof(void *));
    if (sizes == NULL || ptrs == NULL)
        return 1;
    g_user_reserve = (size_t)1 << 30;
    bench_rng rng;
    bench_rng_seed(&rng, 11);
    for (size_t i = 0; i < n; i++)
        sizes[i] = (uint8_t)bench_rng_range(&rng, 8, 64);
    int status = 0;
    user_ctx c = {n, sizes, ptrs};
    if (strcmp(kind, "floor") == 0)
        status = user_trial(&c, USER_FLOOR) < 0;
    else if (strcmp(kind, "malloc") == 0)
        status = user_trial(&c, USER_MALLOC) < 0;
    else if (strcmp(kind, "arena") == 0 || strcmp(kind, "cursor") == 0)
        status = user_trial(&c, kind[0] == 'a' ? USER_ARENA : USER_CURSOR) < 0;
    else
        status = 2;
    free(sizes);
    free(ptrs);
    return status;
}

/* ---- The measurement ---- */

enum kind { KIND_CAS, KIND_FETCH_ADD, KIND_CURSOR, KIND_MALLOC, NUM_KINDS };
static const char *const kind_names[NUM_KINDS] = {"cas", "fetch_add", "cursor", "malloc"};

typedef struct worker {
    pthread_t thread;
    enum kind kind;
    size_t count;
    uint8_t *sizes; /* precomputed, 8..64 */
    void **ptrs;
    size_t failed;
    size_t claimed; /* bytes the arenas should have used for this thread */
    double start, end;
    double cpu_start, cpu_end; /* the thread's own CPU time */
} worker;

static cas_arena g_cas;
static brisk_arena_t *g_arena;
static pthread_barrier_t g_start;
/* Timed runs measured again because their threads did not run at once
 * (see above), and the most times one run is. */
static unsigned g_serialized_runs;
enum { MAX_RETRIES = 50 };

/* CPUs this process may run on (its affinity mask, not the machine's). */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return (int)sysconf(_SC_NPROCESSORS_ONLN);
    return CPU_COUNT(&set);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    size_t n = w->count, failed = 0;
    const uint8_t *sizes = w->sizes;
    void **ptrs = w->ptrs;
    pthread_barrier_wait(&g_start);
    w->start = bench_now();
    w->cpu_start = bench_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    switch (w->kind) {
    case KIND_CAS:
        for (size_t i = 0; i < n; i++) {
            void *p = cas_arena_alloc(&g_cas, sizes[i]);
            failed += p == NULL;
            ptrs[i] = p;
        }
        break;
    case KIND_FETCH_ADD:
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_arena_alloc(g_arena, sizes[i], 0);
            failed += p == NULL;
            ptrs[i] = p;
        }
        break;
    case KIND_CURSOR: {
        brisk_arena_cursor_t cursor;
        brisk_arena_cursor_init(&cursor, g_arena, 0);
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_arena_cursor_alloc(&cursor, sizes[i], 0);
            failed += p == NULL;
            ptrs[i] = p;
        }
        break;
    }
    default:
        for (size_t i = 0; i < n; i++) {
            void *p = malloc(sizes[i]);
            failed += p == NULL;
            ptrs[i] = p;
        }
        break;
    }
    w->cpu_end = bench_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    w->end = bench_now();
    w->failed = failed;
    return NULL;
}

/* One timed run: ns per allocation, or a negative value on failure; *serial
 * tells whether a thread started late or was off its CPU for half its span. */
static double run_once(worker *workers, int threads, enum kind kind, bool *serial)
{
    if (pthread_barrier_init(&g_start, NULL, (unsigned)threads + 1) != 0)
        return -1;
    for (int t = 0; t < threads; t++) {
        workers[t].kind = kind;
        if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0)
            return -1;
    }
    pthread_barrier_wait(&g_start);
    for (int t = 0; t < threads; t++)
        pthread_join(workers[t].thread, NULL);
    pthread_barrier_destroy(&g_start);
    /* From the first worker's start to the last one's end: the main thread's
     * own wake-up after the barrier is not part of it. */
    double first = workers[0].start, last = workers[0].end;
    for (int t = 1; t < threads; t++) {
        if (workers[t].start < first)
            first = workers[t].start;
        if (workers[t].end > last)
            last = workers[t].end;
    }
    double elapsed = last - first;
    *serial = false;
    for (int t = 0; t < threads; t++) {
        double span = workers[t].end - workers[t].start;
        if (workers[t].start - first > 0.5 * elapsed ||
            workers[t].cpu_end - workers[t].cpu_start < 0.5 * span)
            *serial = true;
    }

    size_t total = 0, failed = 0, claimed = 0;
    for (int t = 0; t < threads; t++) {
        total += workers[t].count;
        failed += workers[t].failed;
        claimed += workers[t].claimed;
    }
    bool ok = failed == 0;
    switch (kind) {
    case KIND_CAS:
        ok = ok && atomic_load(&g_cas.offset) == claimed;
        cas_arena_reset(&g_cas);
        break;
    case KIND_FETCH_ADD:
        ok = ok && brisk_arena_used(g_arena) == claimed;
        brisk_arena_reset(g_arena, 1);
        break;
    case KIND_CURSOR:
        /* Whole chunks: at least the blocks, at most one chunk more per thread. */
        ok = ok && brisk_arena_used(g_arena) >= claimed &&
             brisk_arena_used(g_arena) <= claimed + (size_t)threads * (64 << 10);
        brisk_arena_reset(g_arena, 1);
        break;
    default:
        for (int t = 0; t < threads; t++)
            for (size_t i = 0; i < workers[t].count; i++)
                free(workers[t].ptrs[i]);
        break;
    }
    if (!ok) {
        fprintf(stderr, "region_arena: %s at %d threads: %zu failed allocations or wrong offset\n",
                kind_names[kind], threads, failed);
        return -1;
    }
    return elapsed * 1e9 / (double)total;
}

/* run_once, again while its threads ran one after the other, when they
 * could have run at once; timed runs count their retries. */
static double run_concurrent(worker *workers, int threads, enum kind kind, bool timed)
{
    bool may_overlap = threads > 1 && threads <= usable_cpus();
    for (int attempt = 0;; attempt++) {
        bool serial;
        double ns = run_once(workers, threads, kind, &serial);
        if (ns < 0 || !serial || !may_overlap || attempt == MAX_RETRIES)
            return ns;
        if (timed)
            g_serialized_runs++;
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: region_arena [--quick] [--reps N] [--allocs M] [--user | --seed]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    size_t allocs = 500000; /* per thread */
    size_t user_blocks = (size_t)4 << 20;
    int reps = 7, user_reps = 5;
    bool user = true, seed = true;
    int status;
    if (user_callgrind_mode(argc, argv, "region_arena", user_units, &status))
        return status;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            allocs = 100000;
            reps = 5;
            user_blocks = (size_t)256 << 10;
            user_reps = 3;
        } else if (strcmp(argv[i], "--user") == 0) {
            seed = false;
        } else if (strcmp(argv[i], "--seed") == 0) {
            user = false;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)bench_parse_uint("region_arena", "--reps", argv[++i]);
            user_reps = reps;
        } else if (strcmp(argv[i], "--allocs") == 0 && i + 1 < argc) {
            allocs = (size_t)bench_parse_uint("region_arena", "--allocs", argv[++i]);
        } else {
            usage();
        }
    }
    if (reps < 1 || reps > MAX_REPS || user_reps > USER_MAX_REPS || allocs == 0 ||
        allocs > ((size_t)4 << 20) || (!user && !seed))
        usage();
    bench_check_malloc("region_arena");

    printf("### arena\n\n");
    /* First, with glibc's settings as a program has them (the experiment
     * below changes its trim threshold). */
    if (user && !user_patterns(user_blocks, user_reps))
        return 1;
    if (!seed) {
        printf("status=ok\n");
        return 0;
    }

#ifdef M_TRIM_THRESHOLD
    /* Keep freed blocks in glibc's heaps between runs (see the top). */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    if (!cas_arena_init(&g_cas, RESERVE) || (g_arena = brisk_arena_create(RESERVE)) == NULL) {
        fprintf(stderr, "region_arena: cannot reserve %zu bytes\n", RESERVE);
        return 1;
    }

    worker workers[MAX_THREADS];
    for (int t = 0; t < MAX_THREADS; t++) {
        worker *w = &workers[t];
        w->count = allocs;
        w->sizes = malloc(allocs);
        w->ptrs = malloc(allocs * sizeof *w->ptrs);
        if (w->sizes == NULL || w->ptrs == NULL) {
            fprintf(stderr, "region_arena: out of memory\n");
            return 1;
        }
        bench_rng rng;
        bench_rng_seed(&rng, (uint64_t)t + 1);
        w->claimed = 0;
        for (size_t i = 0; i < allocs; i++) {
            w->sizes[i] = (uint8_t)bench_rng_range(&rng, 8, 64);
            w->claimed += (w->sizes[i] + 15u) & ~(size_t)15;
        }
        memset(w->ptrs, 0, allocs * sizeof *w->ptrs); /* fault the arrays in now */
    }

    double medians[NUM_COUNTS][NUM_KINDS];
    for (int c = 0; c < NUM_COUNTS; c++) {
        int threads = thread_counts[c];
        double samples[NUM_KINDS][MAX_REPS];
        for (int k = 0; k < NUM_KINDS; k++) /* warm-up: commit, fault, grow the heaps */
            if (run_concurrent(workers, threads, (enum kind)k, false) < 0)
                return 1;
        for (int r = 0; r < reps; r++) {
            for (int k = 0; k < NUM_KINDS; k++) {
                double ns = run_concurrent(workers, threads, (enum kind)k, true);
                if (ns < 0)
                    return 1;
                samples[k][r] = ns;
            }
        }
        for (int k = 0; k < NUM_KINDS; k++)
            medians[c][k] = bench_median(samples[k], reps);
    }

    printf("#### seed 001: fetch_add against a CAS loop\n\n");
    printf("T threads each make %zu allocations of 8-64 B (alignment 16) into one shared arena "
           "(4 GiB reserved). ns/alloc = wall time / (T x %zu); median of %d runs, allocators "
           "interleaved, after a warm-up run; arenas reset keeping their memory between runs, "
           "malloc's blocks freed untimed. %ld CPUs online: numbers on a shared machine are "
           "noisy. Runs measured again because their threads did not run at once: %u.\n\n",
           allocs, allocs, reps, sysconf(_SC_NPROCESSORS_ONLN), g_serialized_runs);
    printf("Cursor: brisk_arena_cursor_alloc, one cursor per thread claiming 64 KiB chunks "
           "with brisk_arena_alloc and bumping inside them inline.\n\n");
    printf("| threads | CAS-loop ns/alloc | fetch_add ns/alloc | fetch_add speedup | "
           "cursor ns/alloc | malloc ns/alloc | fetch_add vs malloc | cursor vs malloc |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        double cas = medians[c][KIND_CAS], fa = medians[c][KIND_FETCH_ADD];
        double cur = medians[c][KIND_CURSOR], mal = medians[c][KIND_MALLOC];
        printf("| %d | %.2f | %.2f | %.2fx | %.2f | %.2f | %.1fx | %.1fx |\n", thread_counts[c],
               cas, fa, cas / fa, cur, mal, mal / fa, mal / cur);
    }
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        int t = thread_counts[c];
        printf("cas_ns_%dt=%.3f\nfetchadd_ns_%dt=%.3f\nmalloc_ns_%dt=%.3f\n", t,
               medians[c][KIND_CAS], t, medians[c][KIND_FETCH_ADD], t, medians[c][KIND_MALLOC]);
        printf("fetchadd_vs_cas_%dt=%.2f\narena_vs_malloc_%dt=%.2f\n", t,
               medians[c][KIND_CAS] / medians[c][KIND_FETCH_ADD], t,
               medians[c][KIND_MALLOC] / medians[c][KIND_FETCH_ADD]);
        printf("cursor_ns_%dt=%.3f\ncursor_vs_malloc_%dt=%.2f\n", t, medians[c][KIND_CURSOR], t,
               medians[c][KIND_MALLOC] / medians[c][KIND_CURSOR]);
    }
    double vs_malloc = medians[0][KIND_MALLOC] / medians[0][KIND_CURSOR];
    double vs_cas = medians[1][KIND_CAS] / medians[1][KIND_FETCH_ADD];
    printf("serialized_runs=%u\n", g_serialized_runs);
    printf("target_arena_cursor_vs_malloc_1t_20x=%s\n", vs_malloc >= 20 ? "met" : "missed");
    printf("target_fetchadd_vs_cas_2t_1.5x=%s\n", vs_cas >= 1.5 ? "met" : "missed");

    brisk_arena_destroy(g_arena);
    cas_arena_free(&g_cas);
    for (int t = 0; t < MAX_THREADS; t++) {
        free(workers[t].sizes);
        free(workers[t].ptrs);
    }
    printf("status=ok\n");
    return 0;
}
