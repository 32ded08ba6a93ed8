/*
 * region_hybrid — seed 003's experiment. Every thread replays a random
 * sequence of allocations and frees generated before the clock starts
 * (10,000 allocations per round, each freed later by the same thread, at
 * most LIVE blocks alive at once), at 1, 2, 4, 8, 16 and 32 threads: more
 * threads than cores is the point, since a spinlock collapses when its
 * holder is descheduled. Time is the wall time from the barrier to the last
 * thread's end; the tables show medians of REPS runs, allocators
 * interleaved inside each repetition.
 *
 * Two sequences:
 *   mixed  sizes as the hybrid's sections see them: 70% 1–64 B (the
 *          buckets), 25% 65 B–4 KiB and 5% 4–64 KiB, both log-uniform (the
 *          buddy region). Run by glibc malloc, brisk_malloc, the buddy alone
 *          (with and without its thread cache), the hybrid (default config:
 *          thread caches on), the hybrid with the lock-free structures alone
 *          (no thread cache: the seed's design), and the spinlocked
 *          baselines of buddy and hybrid (spinlocked.h).
 *   fixed  every block 64 B: the free list alone (a brisk_pool, lock-free
 *          with and without thread cache; the spinlocked baseline's
 *          spin_pool) against glibc malloc and brisk_malloc on the same
 *          sequence.
 *
 * Percentages follow the seed's Tables 2 and 3: "gain" is
 * (t_malloc / t − 1) × 100 (the seed's increase of performance; +100% is
 * twice as fast) and "degradation" is (t / t_malloc − 1) × 100 (+300% is
 * four times slower), both against glibc malloc in the same repetition.
 *
 * Before them, the hybrid as a user calls it (region_user.h): a new
 * brisk_hybrid_create(NULL) per trial, 2, 8 and 32 threads replaying
 * sequences of the same shape with sizes uniform in 16-512 B and at most
 * USER_LIVE blocks alive per thread, every block written whole, against
 * malloc on the same sequences. The time of a trial is the hybrid's
 * creation, the threads' run (from the barrier to the last one's end) and
 * the hybrid's destruction.
 *
 * Usage: region_hybrid [--quick] [--reps N] [--rounds R] [--user | --seed]
 *        region_hybrid trials hybrid|malloc|floor THREADS N [ROUNDS] (user_trials)
 *        region_hybrid callgrind KIND N (region_user.h)
 * Output: Markdown tables, then key=value lines (table= threads= and one
 * <allocator>_ms= per allocator) that run.py turns into a chart, status=ok.
 */
#define _GNU_SOURCE
#include <brisk.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "bench_common.h"
#include "region_user.h"
#include "spinlocked.h"

#define ALLOCS_PER_ROUND 10000
#define LIVE 256
#define MAX_THREADS 32
#define MAX_REPS 32

static const int thread_counts[] = {1, 2, 4, 8, 16, 32};
#define NUM_COUNTS ((int)(sizeof thread_counts / sizeof thread_counts[0]))

/* ---- The allocators under test: one noinline pair each, same call cost ---- */

static brisk_hybrid_t *g_hybrid, *g_hybrid_plain;
static brisk_buddy_t *g_buddy, *g_buddy_cached;
static brisk_pool_t *g_pool, *g_pool_cached;
static spin_hybrid *g_hybrid_spin;
static spin_buddy *g_buddy_spin;
static spin_pool *g_pool_spin;

#define NOINLINE __attribute__((noinline))
static NOINLINE void *a_glibc(size_t n) { return malloc(n); }
static NOINLINE void f_glibc(void *p) { free(p); }
static NOINLINE void *a_brisk(size_t n) { return brisk_malloc(n); }
static NOINLINE void f_brisk(void *p) { brisk_free(p); }
static NOINLINE void *a_hybrid(size_t n) { return brisk_hybrid_alloc(g_hybrid, n, 0); }
static NOINLINE void f_hybrid(void *p) { brisk_hybrid_free(g_hybrid, p); }
static NOINLINE void *a_hybrid_plain(size_t n) { return brisk_hybrid_alloc(g_hybrid_plain, n, 0); }
static NOINLINE void f_hybrid_plain(void *p) { brisk_hybrid_free(g_hybrid_plain, p); }
static NOINLINE void *a_hybrid_spin(size_t n) { return spin_hybrid_alloc(g_hybrid_spin, n); }
static NOINLINE void f_hybrid_spin(void *p) { spin_hybrid_free(g_hybrid_spin, p); }
static NOINLINE void *a_buddy(size_t n) { return brisk_buddy_alloc(g_buddy, n, 0); }
static NOINLINE void f_buddy(void *p) { brisk_buddy_free(g_buddy, p); }
static NOINLINE void *a_buddy_cached(size_t n) { return brisk_buddy_alloc(g_buddy_cached, n, 0); }
static NOINLINE void f_buddy_cached(void *p) { brisk_buddy_free(g_buddy_cached, p); }
static NOINLINE void *a_buddy_spin(size_t n) { return spin_buddy_alloc(g_buddy_spin, n); }
static NOINLINE void f_buddy_spin(void *p) { spin_buddy_free(g_buddy_spin, p); }
static NOINLINE void *a_pool(size_t n) { (void)n; return brisk_pool_alloc(g_pool); }
static NOINLINE void f_pool(void *p) { brisk_pool_free(g_pool, p); }
static NOINLINE void *a_pool_cached(size_t n) { (void)n; return brisk_pool_alloc(g_pool_cached); }
static NOINLINE void f_pool_cached(void *p) { brisk_pool_free(g_pool_cached, p); }
static NOINLINE void *a_pool_spin(size_t n) { (void)n; return spin_pool_alloc(g_pool_spin); }
static NOINLINE void f_pool_spin(void *p) { spin_pool_free(g_pool_spin, p); }

typedef struct allocator {
    const char *name;  /* column and key name */
    const char *label; /* table header */
    void *(*alloc)(size_t);
    void (*free)(void *);
    bool spinlocked;   /* goes into the degradation table */
} allocator;

static const allocator mixed_allocators[] = {
    {"glibc", "glibc malloc", a_glibc, f_glibc, false},
    {"brisk", "brisk_malloc", a_brisk, f_brisk, false},
    {"buddy", "buddy (lock-free)", a_buddy, f_buddy, false},
    {"buddy_cached", "buddy (lock-free + thread cache)", a_buddy_cached, f_buddy_cached, false},
    {"hybrid_plain", "hybrid (lock-free, no cache)", a_hybrid_plain, f_hybrid_plain, false},
    {"hybrid", "hybrid (lock-free + thread cache)", a_hybrid, f_hybrid, false},
    {"buddy_spin", "buddy (spinlocked)", a_buddy_spin, f_buddy_spin, true},
    {"hybrid_spin", "hybrid (spinlocked)", a_hybrid_spin, f_hybrid_spin, true},
};
static const allocator fixed_allocators[] = {
    {"glibc", "glibc malloc", a_glibc, f_glibc, false},
    {"brisk", "brisk_malloc", a_brisk, f_brisk, false},
    {"pool", "free list (lock-free)", a_pool, f_pool, false},
    {"pool_cached", "free list (lock-free + thread cache)", a_pool_cached, f_pool_cached, false},
    {"pool_spin", "free list (spinlocked)", a_pool_spin, f_pool_spin, true},
};
#define NUM_MIXED ((int)(sizeof mixed_allocators / sizeof mixed_allocators[0]))
#define NUM_FIXED ((int)(sizeof fixed_allocators / sizeof fixed_allocators[0]))
#define MAX_ALLOCATORS 10

/* ---- The pre-generated sequences ---- */

/* One step: allocate `size` bytes into live slot `slot`, or (size 0) free it. */
typedef struct step {
    uint32_t size;
    uint32_t slot;
} step;

typedef struct sequence {
    step *steps;
    size_t count;
} sequence;

static size_t log_uniform(bench_rng *rng, size_t lo, size_t hi)
{
    /* 2^(log2 lo + u (log2 hi − log2 lo)), by bits: pick an octave, then a
     * uniform size inside it. */
    int lo_bit = 63 - __builtin_clzll(lo), hi_bit = 63 - __builtin_clzll(hi);
    int bit = lo_bit + (int)bench_rng_range(rng, 0, (size_t)(hi_bit - lo_bit));
    size_t base = (size_t)1 << bit;
    size_t size = base + bench_rng_range(rng, 0, base - 1);
    return size < lo ? lo : size > hi ? hi : size;
}

static size_t mixed_size(bench_rng *rng)
{
    size_t roll = bench_rng_range(rng, 0, 99);
    if (roll < 70)
        return bench_rng_range(rng, 1, 64);
    if (roll < 95)
        return log_uniform(rng, 65, 4096);
    return log_uniform(rng, 4097, 65536);
}

/* Sizes: 0 mixed (above), 1 fixed 64 B, 2 uniform in 16-512 B (the user's). */
enum size_kind { SIZES_MIXED, SIZES_FIXED, SIZES_USER };
#define USER_LIVE 128

static void make_sequence_of(sequence *s, uint64_t seed, enum size_kind sizes, size_t max_live)
{
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    s->steps = malloc(sizeof(step) * 2 * ALLOCS_PER_ROUND);
    if (s->steps == NULL)
        bench_oom("region_hybrid", sizeof(step) * 2 * ALLOCS_PER_ROUND);
    uint32_t live[LIVE], free_slots[LIVE];
    size_t live_count = 0, free_count = max_live, allocs = 0, n = 0;
    for (uint32_t i = 0; i < max_live; i++)
        free_slots[i] = (uint32_t)(max_live - 1 - i);
    while (allocs < ALLOCS_PER_ROUND || live_count > 0) {
        bool alloc = allocs < ALLOCS_PER_ROUND && free_count > 0 &&
                     (live_count == 0 || bench_rng_range(&rng, 0, 1) == 0);
        if (alloc) {
            uint32_t slot = free_slots[--free_count];
            live[live_count++] = slot;
            uint32_t size = sizes == SIZES_FIXED  ? 64
                            : sizes == SIZES_USER ? (uint32_t)bench_rng_range(&rng, 16, 512)
                                                  : (uint32_t)mixed_size(&rng);
            s->steps[n++] = (step){size, slot};
            allocs++;
        } else {
            size_t k = bench_rng_range(&rng, 0, live_count - 1);
            uint32_t slot = live[k];
            live[k] = live[--live_count];
            free_slots[free_count++] = slot;
            s->steps[n++] = (step){0, slot};
        }
    }
    s->count = n;
}

static void make_sequence(sequence *s, uint64_t seed, bool fixed)
{
    make_sequence_of(s, seed, fixed ? SIZES_FIXED : SIZES_MIXED, LIVE);
}

/* ---- The measurement ---- */

typedef struct worker {
    pthread_t thread;
    const sequence *seq;
    const allocator *a;
    int rounds;
    bool write_whole; /* every block written whole (the user's pattern) */
    size_t failed;
    double start, end;
    double cpu;       /* the thread's CPU time over its run */
} worker;

static pthread_barrier_t g_start;
/* key=value lines, printed after every table (run.py reads the last block). */
static char g_kv[2 * NUM_COUNTS][512];
static int g_kv_count;

static void *worker_main(void *arg)
{
    worker *w = arg;
    void *slots[LIVE];
    const step *steps = w->seq->steps;
    size_t count = w->seq->count, failed = 0;
    void *(*alloc)(size_t) = w->a->alloc;
    void (*release)(void *) = w->a->free;
    pthread_barrier_wait(&g_start);
    w->start = bench_now();
    double cpu_start = bench_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    for (int r = 0; r < w->rounds; r++) {
        for (size_t i = 0; i < count; i++) {
            step s = steps[i];
            if (s.size != 0) {
                void *p = alloc(s.size);
                if (p == NULL)
                    failed++;
                else if (w->write_whole)
                    user_write(p, s.size, (unsigned)i);
                else
                    *(volatile char *)p = 1; /* a program touches what it asked for */
                slots[s.slot] = p;
            } else if (slots[s.slot] != NULL) {
                release(slots[s.slot]);
            }
        }
    }
    w->cpu = bench_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_start;
    w->end = bench_now();
    w->failed = failed;
    return NULL;
}

/* Wall time (s) of one run: `threads` threads replaying their sequences. */
/* CPU time of the last run_threads, all threads together (seconds). */
static double g_run_cpu;

static double run_threads(const allocator *a, const sequence *seqs, int threads, int rounds,
                          bool write_whole, size_t *failed)
{
    worker workers[MAX_THREADS];
    pthread_barrier_init(&g_start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        workers[t] =
            (worker){.seq = &seqs[t], .a = a, .rounds = rounds, .write_whole = write_whole};
        if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0) {
            fprintf(stderr, "region_hybrid: pthread_create failed\n");
            exit(1);
        }
    }
    double first = 0, last = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        if (t == 0 || workers[t].start < first)
            first = workers[t].start;
        if (workers[t].end > last)
            last = workers[t].end;
        *failed += workers[t].failed;
    }
    g_run_cpu = 0;
    for (int t = 0; t < threads; t++)
        g_run_cpu += workers[t].cpu;
    pthread_barrier_destroy(&g_start);
    return last - first;
}

static double run_once(const allocator *a, const sequence *seqs, int threads, int rounds,
                       size_t *failed)
{
    return run_threads(a, seqs, threads, rounds, false, failed);
}

/* ---- As a user calls it (region_user.h) ---- */

static const int user_thread_counts[] = {2, 8, 32};
#define USER_COUNTS ((int)(sizeof user_thread_counts / sizeof user_thread_counts[0]))

static brisk_hybrid_t *g_user_hybrid;
static NOINLINE void *a_user_hybrid(size_t n) { return brisk_hybrid_alloc(g_user_hybrid, n, 0); }
static NOINLINE void f_user_hybrid(void *p) { brisk_hybrid_free(g_user_hybrid, p); }
/* The harness alone: the same calls and writes, each thread's blocks taken
 * in turn from a buffer of its own as big as its live blocks can be (a
 * block may be reused while live: nothing reads them). */
static __thread unsigned char *floor_buffer;
static __thread unsigned floor_next;
static NOINLINE void *a_floor(size_t n)
{
    (void)n;
    if (floor_buffer == NULL && (floor_buffer = malloc((size_t)USER_LIVE * 512)) == NULL)
        return NULL;
    return floor_buffer + (size_t)(floor_next++ % USER_LIVE) * 512;
}
static NOINLINE void f_floor(void *p) { (void)p; }

static const allocator user_allocators[] = {
    {"hybrid", "brisk_hybrid_create(NULL)", a_user_hybrid, f_user_hybrid, false},
    {"malloc", "malloc", a_glibc, f_glibc, false},
    {"floor", "the harness alone", a_floor, f_floor, false},
};

typedef struct user_ctx {
    const sequence *seqs;
    int threads, rounds;
} user_ctx;

/* CPUs this process may run on. */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return (int)sysconf(_SC_NPROCESSORS_ONLN);
    return CPU_COUNT(&set);
}

/* User trials measured again because their threads kept fewer CPUs busy
 * than they could (see user_run), and the most times one trial is. */
static unsigned g_user_retries;
enum { USER_MAX_RETRIES = 20 };

/*
 * One run of the user's pattern. On this shared 2-vCPU machine a run's
 * threads sometimes get one CPU between them (the host runs both vCPUs on
 * one core for a while, or other work takes one), which doubles its wall
 * time whatever the allocator. So a run whose threads kept, together, less
 * than 3/4 of the CPUs they could have used busy (CPU time over wall
 * time) is run again, up to USER_MAX_RETRIES times. That measures the
 * scheduler, not the allocator: a run that is merely slower keeps its
 * CPUs just as busy.
 */
static double user_run(const allocator *a, const sequence *seqs, int threads, int rounds,
                       size_t *failed)
{
    int cpus = usable_cpus();
    double busy_floor = 0.75 * (threads < cpus ? threads : cpus);
    double s = 0;
    for (int attempt = 0;; attempt++) {
        s = run_threads(a, seqs, threads, rounds, true, failed);
        if (*failed != 0 || g_run_cpu >= busy_floor * s || attempt == USER_MAX_RETRIES)
            return s;
        g_user_retries++;
    }
}

static double user_trial(void *arg, int kind)
{
    user_ctx *c = arg;
    size_t failed = 0;
    if (kind != 0) {
        double s = user_run(&user_allocators[kind], c->seqs, c->threads, c->rounds, &failed);
        return failed == 0 ? s : -1;
    }
    double start = bench_now();
    g_user_hybrid = brisk_hybrid_create(NULL);
    if (g_user_hybrid == NULL)
        return -1;
    double created = bench_now() - start;
    double run = user_run(&user_allocators[0], c->seqs, c->threads, c->rounds, &failed);
    start = bench_now();
    brisk_hybrid_destroy(g_user_hybrid);
    g_user_hybrid = NULL;
    return failed == 0 ? created + run + (bench_now() - start) : -1;
}

/*
 * `region_hybrid trials KIND THREADS N [ROUNDS]`: N trials of one kind of
 * the user pattern (hybrid, malloc or floor: the harness alone), each as
 * user_trial runs it but never run again, and their medians: wall ns per
 * allocation (the hybrid's creation and destruction in), CPU ns per
 * allocation (the threads' CPU time, plus the hybrid's creation and
 * destruction), and the hybrid's creation and destruction in us. On a
 * machine shared with other work the CPU time moves far less than the
 * wall time; interleave runs of two builds to compare them.
 */
static int user_trials(int argc, char **argv)
{
    if (argc < 5 || argc > 6)
        return 2;
    int kind = strcmp(argv[2], "hybrid") == 0   ? 0
               : strcmp(argv[2], "malloc") == 0 ? 1
               : strcmp(argv[2], "floor") == 0  ? 2
                                                : -1;
    int threads = (int)bench_parse_uint("region_hybrid", "THREADS", argv[3]);
    int trials = (int)bench_parse_uint("region_hybrid", "N", argv[4]);
    int rounds = argc == 6 ? (int)bench_parse_uint("region_hybrid", "ROUNDS", argv[5]) : 5;
    if (kind < 0 || threads < 1 || threads > MAX_THREADS || trials < 1 || trials > MAX_REPS ||
        rounds < 1)
        return 2;
    static sequence seqs[MAX_THREADS];
    for (int t = 0; t < MAX_THREADS; t++)
        make_sequence_of(&seqs[t], 9000 + (uint64_t)t, SIZES_USER, USER_LIVE);
    double allocs = (double)threads * ALLOCS_PER_ROUND * rounds;
    double wall[MAX_REPS], cpu[MAX_REPS], create_us[MAX_REPS], destroy_us[MAX_REPS];
    for (int r = 0; r < trials; r++) {
        size_t failed = 0;
        double created = 0, destroyed = 0, start = bench_now();
        if (kind == 0 && (g_user_hybrid = brisk_hybrid_create(NULL)) == NULL)
            return 1;
        created = bench_now() - start;
        double run = run_threads(&user_allocators[kind], seqs, threads, rounds, true, &failed);
        if (kind == 0) {
            start = bench_now();
            brisk_hybrid_destroy(g_user_hybrid);
            g_user_hybrid = NULL;
            destroyed = bench_now() - start;
        }
        if (failed != 0)
            return 1;
        wall[r] = (created + run + destroyed) * 1e9 / allocs;
        cpu[r] = (created + g_run_cpu + destroyed) * 1e9 / allocs;
        create_us[r] = created * 1e6;
        destroy_us[r] = destroyed * 1e6;
    }
    printf("kind=%s threads=%d trials=%d rounds=%d wall_ns=%.3f cpu_ns=%.3f create_us=%.1f "
           "destroy_us=%.1f\n",
           argv[2], threads, trials, rounds, bench_median(wall, (size_t)trials),
           bench_median(cpu, (size_t)trials), bench_median(create_us, (size_t)trials),
           bench_median(destroy_us, (size_t)trials));
    return 0;
}

/* callgrind units (region_user.h): n rounds of thread 0's sequence, one
 * hybrid for all of them, writes as in the benchmark. */
static int user_units(const char *kind, size_t n)
{
    static sequence seq;
    make_sequence_of(&seq, 9000, SIZES_USER, USER_LIVE);
    void *slots[LIVE];
    static unsigned char buffers[USER_LIVE][512];
    bool floor = strcmp(kind, "floor") == 0, hybrid = strcmp(kind, "hybrid") == 0;
    if (!floor && !hybrid && strcmp(kind, "malloc") != 0)
        return 2;
    if (hybrid && (g_user_hybrid = brisk_hybrid_create(NULL)) == NULL)
        return 1;
    for (size_t r = 0; r < n; r++) {
        for (size_t i = 0; i < seq.count; i++) {
            step s = seq.steps[i];
            if (s.size != 0) {
                void *p = floor    ? buffers[s.slot]
                          : hybrid ? a_user_hybrid(s.size)
                                   : a_glibc(s.size);
                if (p == NULL)
                    return 1;
                user_write(p, s.size, (unsigned)i);
                slots[s.slot] = p;
            } else if (hybrid) {
                f_user_hybrid(slots[s.slot]);
            } else if (!floor) {
                f_glibc(slots[s.slot]);
            }
        }
    }
    if (hybrid)
        brisk_hybrid_destroy(g_user_hybrid);
    free(seq.steps);
    return 0;
}

static bool user_patterns(int reps, int rounds)
{
    static sequence seqs[MAX_THREADS];
    for (int t = 0; t < MAX_THREADS; t++)
        make_sequence_of(&seqs[t], 9000 + (uint64_t)t, SIZES_USER, USER_LIVE);
    double s[USER_COUNTS][3];
    for (int c = 0; c < USER_COUNTS; c++) {
        user_ctx ctx = {seqs, user_thread_counts[c], rounds};
        if (!user_measure(user_trial, &ctx, 3, reps, s[c])) {
            fprintf(stderr, "region_hybrid: a user trial failed at %d threads\n",
                    user_thread_counts[c]);
            return false;
        }
    }
    printf("#### hybrid as a user calls it\n\n");
    printf("Each thread replays its own sequence of %d allocations per round (%d round(s)) and "
           "their frees, sizes uniform in 16-512 B, at most %d alive; every block written whole. "
           "A trial: brisk_hybrid_create(NULL), the threads' run (barrier to the last thread's "
           "end), brisk_hybrid_destroy; malloc: the run. ns per allocation (with its free) "
           "over all threads; medians of %d interleaved trials. Runs measured again because "
           "their threads kept less than 3/4 of the usable CPUs busy (the 2-vCPU VM sometimes "
           "gives them one between them): %u. Harness: the same threads, calls and writes "
           "with no allocator (blocks taken in turn from a buffer per thread): what no "
           "allocator can go below, so malloc's time over it bounds any allocator's "
           "speedup.\n\n",
           ALLOCS_PER_ROUND, rounds, USER_LIVE, reps, g_user_retries);
    printf("| pattern | hybrid ns | malloc/free (%s) ns | speedup | harness ns | malloc / harness "
           "|\n| --- | ---: | ---: | ---: | ---: | ---: |\n", BENCH_MALLOC);
    for (int c = 0; c < USER_COUNTS; c++) {
        double allocs = (double)user_thread_counts[c] * ALLOCS_PER_ROUND * rounds;
        printf("| %d threads | %.2f | %.2f | %.2fx | %.2f | %.2fx |\n", user_thread_counts[c],
               s[c][0] * 1e9 / allocs, s[c][1] * 1e9 / allocs, s[c][1] / s[c][0],
               s[c][2] * 1e9 / allocs, s[c][1] / s[c][2]);
    }
    printf("\n");
    char key[64];
    for (int c = 0; c < USER_COUNTS; c++) {
        double allocs = (double)user_thread_counts[c] * ALLOCS_PER_ROUND * rounds;
        snprintf(key, sizeof key, "hybrid_%dt", user_thread_counts[c]);
        char extra[96];
        snprintf(extra, sizeof extra, "harness_ns=%.3f retries=%u", s[c][2] * 1e9 / allocs,
                 g_user_retries);
        user_report_extra(key, s[c][0], s[c][1], allocs, reps, "allocation", extra);
    }
    printf("\n");
    for (int t = 0; t < MAX_THREADS; t++)
        free(seqs[t].steps);
    return true;
}

/* Runs one sequence kind over every thread count; prints the tables. */
static void experiment(const char *table, const allocator *allocs, int num_allocs,
                       const sequence *seqs, int reps, int rounds)
{
    double ms[NUM_COUNTS][MAX_ALLOCATORS];
    size_t failed[MAX_ALLOCATORS] = {0};
    for (int c = 0; c < NUM_COUNTS; c++) {
        int threads = thread_counts[c];
        double samples[MAX_ALLOCATORS][MAX_REPS];
        for (int a = 0; a < num_allocs; a++) /* warm-up: threads, caches, first faults */
            run_once(&allocs[a], seqs, threads, 1, &failed[a]);
        for (int r = 0; r < reps; r++)
            for (int a = 0; a < num_allocs; a++)
                samples[a][r] = run_once(&allocs[a], seqs, threads, rounds, &failed[a]) * 1e3;
        for (int a = 0; a < num_allocs; a++)
            ms[c][a] = bench_median(samples[a], reps);
        fprintf(stderr, "  %s: %d threads done\n", table, threads);
    }

    printf("#### %s sequence: wall time (ms, median of %d)\n\n| threads |", table, reps);
    for (int a = 0; a < num_allocs; a++)
        printf(" %s |", allocs[a].label);
    printf("\n|---:|");
    for (int a = 0; a < num_allocs; a++)
        printf("---:|");
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        printf("| %d |", thread_counts[c]);
        for (int a = 0; a < num_allocs; a++)
            printf(" %.2f |", ms[c][a]);
        printf("\n");
    }

    printf("\n#### %s sequence: spinlocked baselines, degradation vs glibc malloc "
           "(seed's Table 2: (t / t_malloc − 1) × 100)\n\n| threads |", table);
    for (int a = 0; a < num_allocs; a++)
        if (allocs[a].spinlocked)
            printf(" %s |", allocs[a].label);
    printf("\n|---:|");
    for (int a = 0; a < num_allocs; a++)
        if (allocs[a].spinlocked)
            printf("---:|");
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        printf("| %d |", thread_counts[c]);
        for (int a = 0; a < num_allocs; a++)
            if (allocs[a].spinlocked)
                printf(" %+.1f%% |", (ms[c][a] / ms[c][0] - 1) * 100);
        printf("\n");
    }

    printf("\n#### %s sequence: gain vs glibc malloc (seed's Table 3: (t_malloc / t − 1) × 100)"
           "\n\n| threads |", table);
    for (int a = 1; a < num_allocs; a++)
        if (!allocs[a].spinlocked)
            printf(" %s |", allocs[a].label);
    printf("\n|---:|");
    for (int a = 1; a < num_allocs; a++)
        if (!allocs[a].spinlocked)
            printf("---:|");
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        printf("| %d |", thread_counts[c]);
        for (int a = 1; a < num_allocs; a++)
            if (!allocs[a].spinlocked)
                printf(" %+.1f%% |", (ms[c][0] / ms[c][a] - 1) * 100);
        printf("\n");
    }
    printf("\n");
    for (int a = 0; a < num_allocs; a++)
        if (failed[a] != 0)
            printf("%s: %zu allocations failed (bound reached)\n\n", allocs[a].label, failed[a]);

    for (int c = 0; c < NUM_COUNTS; c++) {
        int n = snprintf(g_kv[g_kv_count], sizeof g_kv[0], "table=%s threads=%d", table,
                         thread_counts[c]);
        for (int a = 0; a < num_allocs && n > 0 && (size_t)n < sizeof g_kv[0]; a++)
            n += snprintf(g_kv[g_kv_count] + n, sizeof g_kv[0] - (size_t)n, " %s_ms=%.3f",
                          allocs[a].name, ms[c][a]);
        g_kv_count++;
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: region_hybrid [--quick] [--reps N] [--rounds R] [--user | --seed]\n");
}

static void create_allocators(void)
{
    brisk_hybrid_config_t config;
    brisk_hybrid_default_config(&config);
    g_hybrid = brisk_hybrid_create(&config);
    config.flags = 0;
    g_hybrid_plain = brisk_hybrid_create(&config);
    g_hybrid_spin = spin_hybrid_create(&config);
    const size_t region = (size_t)64 << 20, max_block = (size_t)1 << 20;
    g_buddy = brisk_buddy_create_ex(region, 16, max_block, 0);
    g_buddy_cached = brisk_buddy_create_ex(region, 16, max_block, BRISK_REGION_THREAD_CACHE);
    g_buddy_spin = spin_buddy_create(region, 16, max_block);
    g_pool = brisk_pool_create_ex(64, 16, 0, 0);
    g_pool_cached = brisk_pool_create_ex(64, 16, 0, BRISK_REGION_THREAD_CACHE);
    /* Unbounded as the brisk pools are: far more objects than the threads hold. */
    g_pool_spin = spin_pool_create(64, (size_t)1 << 20);
    if (!g_hybrid || !g_hybrid_plain || !g_hybrid_spin || !g_buddy || !g_buddy_cached || !g_buddy_spin || !g_pool ||
        !g_pool_cached || !g_pool_spin) {
        fprintf(stderr, "region_hybrid: creating the allocators failed\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int reps = 7, rounds = 5;
    bool quick = false, user = true, seed = true, reps_given = false;
    int status;
    if (user_callgrind_mode(argc, argv, "region_hybrid", user_units, &status))
        return status;
    if (argc >= 2 && strcmp(argv[1], "trials") == 0) {
        status = user_trials(argc, argv);
        if (status == 2)
            fprintf(stderr, "usage: region_hybrid trials hybrid|malloc|floor THREADS N [ROUNDS]\n");
        return status;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--user") == 0) {
            seed = false;
        } else if (strcmp(argv[i], "--seed") == 0) {
            user = false;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)bench_parse_uint("region_hybrid", "--reps", argv[++i]);
            reps_given = true;
            if (reps < 1 || reps > MAX_REPS)
                reps = reps < 1 ? 1 : MAX_REPS;
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = (int)bench_parse_uint("region_hybrid", "--rounds", argv[++i]);
            if (rounds < 1)
                rounds = 1;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (quick) {
        reps = reps > 3 ? 3 : reps;
        rounds = 1;
    }
    if (!user && !seed) {
        usage(stderr);
        return 2;
    }
    bench_check_malloc("region_hybrid");
    printf("### hybrid\n\n");
    if (user && !user_patterns(reps_given || quick ? reps : 5, rounds))
        return 1;
    if (!seed) {
        printf("status=ok\n");
        return 0;
    }
    create_allocators();
    static sequence mixed[MAX_THREADS], fixed[MAX_THREADS];
    for (int t = 0; t < MAX_THREADS; t++) {
        make_sequence(&mixed[t], 1000 + (uint64_t)t, false);
        make_sequence(&fixed[t], 5000 + (uint64_t)t, true);
    }

    printf("#### seed 003's experiment\n\n");
    printf("Per thread: %d allocations and their frees per round, at most %d live, %d round(s) "
           "per run; wall time from the start barrier to the last thread's end. Mixed sizes: "
           "70%% 1–64 B, 25%% 65 B–4 KiB, 5%% 4–64 KiB. Hybrid: buckets 16/32/64 B (65,536 "
           "objects each) + one 64 MiB buddy region (blocks ≤ 1 MiB). Buddy alone: 64 MiB, "
           "blocks 16 B–1 MiB.\n\n",
           ALLOCS_PER_ROUND, LIVE, rounds);
    experiment("mixed", mixed_allocators, NUM_MIXED, mixed, reps, rounds);
    printf("\n");
    experiment("fixed", fixed_allocators, NUM_FIXED, fixed, reps, rounds);
    printf("\n");
    for (int i = 0; i < g_kv_count; i++)
        printf("%s\n", g_kv[i]);
    printf("status=ok\n");
    return 0;
}
