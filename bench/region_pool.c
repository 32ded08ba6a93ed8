/*
 * region_pool — the fixed-size pool's two experiments, and a callgrind mode.
 *
 * (a) Seed 000: T threads each repeatedly take an object from a pool
 *     sharded over S stacks and give it back (two stack claims per
 *     take+return). How a thread claims a stack is what is compared:
 *       A "scan"   one spinlock per stack (an atomic bool), tried in turn
 *                  with compare_exchange until one is acquired (the seed's
 *                  "before": up to S failed CASes per claim);
 *       B "bitmap" one atomic 64-bit bitmap of free stacks: ctz picks one,
 *                  one CAS claims it, fetch_or gives it back (the "after").
 *     A thread that finds no stack free yields the CPU (both versions: with
 *     more threads than cores a preempted holder would otherwise stall the
 *     spinners for a whole time slice). Both are written here: they are the
 *     experiment, not library code.
 *
 * (b) brisk_pool (lock-free shards; with BRISK_REGION_THREAD_CACHE; a
 *     brisk_pool_local_t per thread over the THREAD_CACHE pool,
 *     "pool+local"), the spinlocked free list of spinlocked.h ("pool
 *     spinlock", seed 003's baseline) against brisk_malloc/brisk_free and the C
 *     library's malloc/free, 64-byte objects: each of T threads keeps a
 *     window of 16 live objects and replaces the oldest (free, then alloc)
 *     M times; one shared pool for all threads.
 *
 * Time per operation is wall time from the first thread's start to the last
 * one's end (each reads the clock after a barrier) divided by T x M: with
 * more threads than cores it is the inverse of the throughput. Every point
 * is the median of 5 runs (variants interleaved) after one warm-up run.
 *
 * Usage: region_pool [--quick] [--reps N] [--ops M]
 *        region_pool callgrind-pool N | callgrind-pool-cache N |
 *                    callgrind-pool-spin N | callgrind-pool-local N |
 *                    callgrind-malloc N
 *   The callgrind modes do N single-thread alloc+free pairs of 64 bytes and
 *   nothing else, for valgrind --tool=callgrind: instructions per pair =
 *   (Ir(N=200000) - Ir(N=1000)) / 199000.
 * Output: "### pool", Markdown tables, key=value lines, status=ok.
 */
#define _GNU_SOURCE
#include <brisk.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "bench_common.h"
#include "spinlocked.h"

#define MAX_THREADS 16
#define MAX_REPS 64
#define OBJ_SIZE 64
#define WINDOW 16
#define MAX_STACKS 16
#define OBJECTS_PER_STACK 256

static const int thread_counts[] = {1, 2, 4, 8, 16};
#define NUM_COUNTS ((int)(sizeof thread_counts / sizeof thread_counts[0]))
static const int stack_counts[] = {8, 16};
#define NUM_STACK_COUNTS ((int)(sizeof stack_counts / sizeof stack_counts[0]))

static inline void escape(void *p) { __asm__ __volatile__("" : : "r"(p) : "memory"); }

/* ---- (a) The sharded stacks of seed 000 ---- */

typedef struct stack {
    _Alignas(64) _Atomic bool locked; /* version A's lock */
    int count;
    void *objects[OBJECTS_PER_STACK * 2];
} stack;

static stack g_stacks[MAX_STACKS];
static int g_num_stacks;
static _Alignas(64) _Atomic uint64_t g_free_stacks; /* version B: bit set = stack free */

enum claim_kind { CLAIM_SCAN, CLAIM_BITMAP, NUM_CLAIMS };

/* Version A: CAS each stack's lock in turn, from `start` (0, or past a
 * stack just found empty or full), until one is acquired. */
static inline int claim_scan(int start)
{
    for (;;) {
        for (int k = 0; k < g_num_stacks; k++) {
            int i = start + k < g_num_stacks ? start + k : start + k - g_num_stacks;
            bool expected = false;
            if (atomic_compare_exchange_strong_explicit(&g_stacks[i].locked, &expected, true,
                                                        memory_order_acquire,
                                                        memory_order_relaxed))
                return i;
        }
        sched_yield();
    }
}

static inline void unclaim_scan(int i)
{
    atomic_store_explicit(&g_stacks[i].locked, false, memory_order_release);
}

/* Version B: ctz over the bitmap of free stacks (rotated by `start`, as A
 * starts its scan there), one CAS to take the bit. */
static inline int claim_bitmap(int start)
{
    uint64_t bits = atomic_load_explicit(&g_free_stacks, memory_order_relaxed);
    int n = g_num_stacks;
    uint64_t all = n == 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
    for (;;) {
        if (bits == 0) {
            sched_yield();
            bits = atomic_load_explicit(&g_free_stacks, memory_order_relaxed);
            continue;
        }
        uint64_t rotated = start == 0 ? bits : ((bits >> start) | (bits << (n - start))) & all;
        int i = __builtin_ctzll(rotated) + start;
        if (i >= n)
            i -= n;
        if (atomic_compare_exchange_weak_explicit(&g_free_stacks, &bits,
                                                  bits & ~((uint64_t)1 << i),
                                                  memory_order_acquire, memory_order_relaxed))
            return i;
    }
}

static inline void unclaim_bitmap(int i)
{
    atomic_fetch_or_explicit(&g_free_stacks, (uint64_t)1 << i, memory_order_release);
}

static void stacks_reset(int num_stacks, char *objects)
{
    g_num_stacks = num_stacks;
    for (int s = 0; s < num_stacks; s++) {
        atomic_store(&g_stacks[s].locked, false);
        g_stacks[s].count = OBJECTS_PER_STACK;
        for (int i = 0; i < OBJECTS_PER_STACK; i++)
            g_stacks[s].objects[i] = objects + ((size_t)s * OBJECTS_PER_STACK + i) * OBJ_SIZE;
    }
    atomic_store(&g_free_stacks, num_stacks == 64 ? ~(uint64_t)0 : ((uint64_t)1 << num_stacks) - 1);
}

/* Take one object (from a non-empty stack) and give it back (to whichever
 * stack is claimed then). An empty stack (for a take) or a full one (for a
 * return) is let go and the next claim starts past it. */
#define DEFINE_STACK_LOOP(NAME, CLAIM, UNCLAIM)                                      \
    static size_t NAME(size_t ops)                                                   \
    {                                                                                \
        size_t checksum = 0;                                                         \
        for (size_t n = 0; n < ops; n++) {                                           \
            void *p = NULL;                                                          \
            for (int start = 0; p == NULL;) {                                        \
                int s = CLAIM(start);                                                \
                if (g_stacks[s].count > 0)                                           \
                    p = g_stacks[s].objects[--g_stacks[s].count];                    \
                UNCLAIM(s);                                                          \
                start = s + 1 < g_num_stacks ? s + 1 : 0;                            \
            }                                                                        \
            *(volatile size_t *)p = n;                                               \
            checksum += *(volatile size_t *)p;                                       \
            for (int start = 0, back = 0; !back;) {                                  \
                int s = CLAIM(start);                                                \
                if (g_stacks[s].count < 2 * OBJECTS_PER_STACK) {                     \
                    g_stacks[s].objects[g_stacks[s].count++] = p;                    \
                    back = 1;                                                        \
                }                                                                    \
                UNCLAIM(s);                                                          \
                start = s + 1 < g_num_stacks ? s + 1 : 0;                            \
            }                                                                        \
        }                                                                            \
        return checksum;                                                             \
    }

DEFINE_STACK_LOOP(stack_loop_scan, claim_scan, unclaim_scan)
DEFINE_STACK_LOOP(stack_loop_bitmap, claim_bitmap, unclaim_bitmap)

/* ---- (b) Pools and mallocs, a window of live objects per thread ---- */

enum alloc_kind { K_POOL, K_POOL_CACHE, K_POOL_SPIN, K_POOL_LOCAL, K_BRISK, K_MALLOC, NUM_KINDS };
static const char *const kind_names[NUM_KINDS] = {"pool", "pool+cache", "pool spinlock",
                                                  "pool+local", "brisk_malloc", "malloc"};
static const char *const kind_keys[NUM_KINDS] = {"pool", "pool_cache", "pool_spin", "pool_local",
                                                 "brisk", "malloc"};
static brisk_pool_t *g_pools[2];
static spin_pool *g_spin_pool;

/* One copy of the loop per allocator, so that none pays for an indirect call. */
#define DEFINE_WINDOW_LOOP(NAME, ALLOC, FREE)                                        \
    static bool NAME(brisk_pool_t *pool, size_t ops)                                 \
    {                                                                                \
        void *window[WINDOW];                                                        \
        (void)pool;                                                                  \
        for (int i = 0; i < WINDOW; i++)                                             \
            if ((window[i] = ALLOC) == NULL)                                         \
                return false;                                                        \
        for (size_t n = 0; n < ops; n++) {                                           \
            size_t i = n % WINDOW;                                                   \
            FREE(window[i]);                                                         \
            void *p = ALLOC;                                                         \
            if (p == NULL)                                                           \
                return false;                                                        \
            *(volatile char *)p = (char)n;                                           \
            window[i] = p;                                                           \
        }                                                                            \
        for (int i = 0; i < WINDOW; i++)                                             \
            FREE(window[i]);                                                         \
        return true;                                                                 \
    }

#define POOL_FREE(p) brisk_pool_free(pool, (p))
static bool window_local_loop(brisk_pool_local_t *l, size_t ops)
{
    void *window[WINDOW];
    for (int i = 0; i < WINDOW; i++)
        if ((window[i] = brisk_pool_local_alloc(l)) == NULL)
            return false;
    for (size_t n = 0; n < ops; n++) {
        size_t i = n % WINDOW;
        brisk_pool_local_free(l, window[i]);
        void *p = brisk_pool_local_alloc(l);
        if (p == NULL)
            return false;
        *(volatile char *)p = (char)n;
        window[i] = p;
    }
    for (int i = 0; i < WINDOW; i++)
        brisk_pool_local_free(l, window[i]);
    return true;
}
DEFINE_WINDOW_LOOP(window_pool, brisk_pool_alloc(pool), POOL_FREE)
/* pool+local: each thread its own brisk_pool_local_t over the cached pool. */
static bool window_local(brisk_pool_t *pool, size_t ops)
{
    brisk_pool_local_t local;
    brisk_pool_local_init(&local, pool, 0);
    bool ok = window_local_loop(&local, ops);
    brisk_pool_local_flush(&local);
    return ok;
}
#define SPIN_FREE(p) spin_pool_free(g_spin_pool, (p))
DEFINE_WINDOW_LOOP(window_spin, spin_pool_alloc(g_spin_pool), SPIN_FREE)
DEFINE_WINDOW_LOOP(window_brisk, brisk_malloc(OBJ_SIZE), brisk_free)
DEFINE_WINDOW_LOOP(window_malloc, malloc(OBJ_SIZE), free)

/* ---- Running threads ---- */

typedef struct worker {
    pthread_t thread;
    int experiment; /* 0: stacks (claim kind), 1: window (alloc kind) */
    int kind;
    size_t ops;
    bool ok;
    double start, end;
} worker;

static pthread_barrier_t g_start;

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&g_start);
    w->start = bench_now();
    w->ok = true;
    if (w->experiment == 0) {
        size_t sum = w->kind == CLAIM_SCAN ? stack_loop_scan(w->ops) : stack_loop_bitmap(w->ops);
        escape(&sum);
    } else {
        switch (w->kind) {
        case K_POOL:
        case K_POOL_CACHE:
            w->ok = window_pool(g_pools[w->kind - K_POOL], w->ops);
            break;
        case K_POOL_SPIN:
            w->ok = window_spin(NULL, w->ops);
            break;
        case K_POOL_LOCAL:
            w->ok = window_local(g_pools[K_POOL_CACHE], w->ops);
            break;
        case K_BRISK:
            w->ok = window_brisk(NULL, w->ops);
            break;
        default:
            w->ok = window_malloc(NULL, w->ops);
            break;
        }
    }
    w->end = bench_now();
    return NULL;
}

/* One timed run: ns per operation, or a negative value on failure. */
static double run_once(int experiment, int kind, int threads, size_t ops)
{
    worker workers[MAX_THREADS];
    if (pthread_barrier_init(&g_start, NULL, (unsigned)threads + 1) != 0)
        return -1;
    for (int t = 0; t < threads; t++) {
        workers[t] = (worker){.experiment = experiment, .kind = kind, .ops = ops};
        if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0)
            return -1;
    }
    pthread_barrier_wait(&g_start);
    for (int t = 0; t < threads; t++)
        pthread_join(workers[t].thread, NULL);
    pthread_barrier_destroy(&g_start);
    double first = workers[0].start, last = workers[0].end;
    bool ok = true;
    for (int t = 0; t < threads; t++) {
        if (workers[t].start < first)
            first = workers[t].start;
        if (workers[t].end > last)
            last = workers[t].end;
        ok = ok && workers[t].ok;
    }
    if (!ok) {
        fprintf(stderr, "region_pool: an allocation failed (%d threads)\n", threads);
        return -1;
    }
    return (last - first) * 1e9 / ((double)threads * (double)ops);
}

/* ---- callgrind modes ---- */

static int callgrind_mode(const char *mode, size_t n)
{
    if (strcmp(mode, "callgrind-malloc") == 0) {
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_malloc(OBJ_SIZE);
            escape(p);
            brisk_free(p);
        }
        return 0;
    }
    if (strcmp(mode, "callgrind-pool-spin") == 0) {
        spin_pool *spin = spin_pool_create(OBJ_SIZE, 1024);
        if (spin == NULL) {
            perror("region_pool: spin_pool_create");
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            void *p = spin_pool_alloc(spin);
            escape(p);
            spin_pool_free(spin, p);
        }
        spin_pool_destroy(spin);
        return 0;
    }
    unsigned flags;
    if (strcmp(mode, "callgrind-pool") == 0)
        flags = 0;
    else if (strcmp(mode, "callgrind-pool-cache") == 0)
        flags = BRISK_REGION_THREAD_CACHE;
    else if (strcmp(mode, "callgrind-pool-local") == 0)
        flags = BRISK_REGION_THREAD_CACHE;
    else
        return 2;
    brisk_pool_t *pool = brisk_pool_create_ex(OBJ_SIZE, 0, 0, flags);
    if (pool == NULL) {
        perror("region_pool: brisk_pool_create_ex");
        return 1;
    }
    if (strcmp(mode, "callgrind-pool-local") == 0) {
        brisk_pool_local_t local;
        brisk_pool_local_init(&local, pool, 0);
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_pool_local_alloc(&local);
            escape(p);
            brisk_pool_local_free(&local, p);
        }
        brisk_pool_local_flush(&local);
    } else {
        for (size_t i = 0; i < n; i++) {
            void *p = brisk_pool_alloc(pool);
            escape(p);
            brisk_pool_free(pool, p);
        }
    }
    brisk_pool_destroy(pool);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: region_pool [--quick] [--reps N] [--ops M]\n"
                    "       region_pool callgrind-pool|callgrind-pool-cache|callgrind-pool-spin|"
                    "callgrind-pool-local|callgrind-malloc N\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strncmp(argv[1], "callgrind-", 10) == 0) {
        int rc = callgrind_mode(argv[1], (size_t)bench_parse_uint("region_pool", "N", argv[2]));
        if (rc == 2)
            usage();
        return rc;
    }
    size_t ops = 400000; /* per thread and run */
    int reps = 5;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)bench_parse_uint("region_pool", "--reps", argv[++i]);
        } else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
            ops = (size_t)bench_parse_uint("region_pool", "--ops", argv[++i]);
        } else {
            usage();
        }
    }
    if (quick)
        ops = 20000;
    if (reps < 1 || reps > MAX_REPS || ops == 0)
        usage();

#ifdef M_TRIM_THRESHOLD
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    char *objects = malloc((size_t)MAX_STACKS * OBJECTS_PER_STACK * OBJ_SIZE);
    g_pools[0] = brisk_pool_create_ex(OBJ_SIZE, 0, 0, 0);
    g_pools[1] = brisk_pool_create_ex(OBJ_SIZE, 0, 0, BRISK_REGION_THREAD_CACHE);
    /* Unbounded as the brisk pools are: far more objects than the threads hold. */
    g_spin_pool = spin_pool_create(OBJ_SIZE, (size_t)1 << 20);
    if (objects == NULL || g_pools[0] == NULL || g_pools[1] == NULL || g_spin_pool == NULL) {
        fprintf(stderr, "region_pool: out of memory\n");
        return 1;
    }
    memset(objects, 0, (size_t)MAX_STACKS * OBJECTS_PER_STACK * OBJ_SIZE);

    /* (a) */
    double claims[NUM_STACK_COUNTS][NUM_COUNTS][NUM_CLAIMS];
    for (int sc = 0; sc < NUM_STACK_COUNTS; sc++) {
        for (int c = 0; c < NUM_COUNTS; c++) {
            double samples[NUM_CLAIMS][MAX_REPS];
            for (int r = -1; r < reps; r++) {
                for (int k = 0; k < NUM_CLAIMS; k++) {
                    stacks_reset(stack_counts[sc], objects);
                    double ns = run_once(0, k, thread_counts[c], ops);
                    if (ns < 0)
                        return 1;
                    if (r >= 0)
                        samples[k][r] = ns;
                }
            }
            for (int k = 0; k < NUM_CLAIMS; k++)
                claims[sc][c][k] = bench_median(samples[k], reps);
        }
    }

    /* (b) */
    double pairs[NUM_COUNTS][NUM_KINDS];
    for (int c = 0; c < NUM_COUNTS; c++) {
        double samples[NUM_KINDS][MAX_REPS];
        for (int r = -1; r < reps; r++) {
            for (int k = 0; k < NUM_KINDS; k++) {
                double ns = run_once(1, k, thread_counts[c], ops);
                if (ns < 0)
                    return 1;
                if (r >= 0)
                    samples[k][r] = ns;
            }
        }
        for (int k = 0; k < NUM_KINDS; k++)
            pairs[c][k] = bench_median(samples[k], reps);
    }

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("### pool\n\n");
    printf("Seed 000's experiment: T threads each take an object from a pool sharded over S "
           "stacks and give it back, %zu times; a stack is claimed by scanning per-stack "
           "spinlocks with compare_exchange (A) or by ctz over one atomic bitmap of free stacks "
           "(B). ns per take+return = wall time / (T x %zu); median of %d runs after a warm-up. "
           "%ld CPUs online: numbers on a shared machine are noisy.\n\n",
           ops, ops, reps, cpus);
    printf("| threads |");
    for (int sc = 0; sc < NUM_STACK_COUNTS; sc++)
        printf(" S=%d scan (A) | S=%d bitmap (B) | S=%d A/B |", stack_counts[sc],
               stack_counts[sc], stack_counts[sc]);
    printf("\n| ---: |");
    for (int sc = 0; sc < NUM_STACK_COUNTS; sc++)
        printf(" ---: | ---: | ---: |");
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        printf("| %d |", thread_counts[c]);
        for (int sc = 0; sc < NUM_STACK_COUNTS; sc++) {
            double a = claims[sc][c][CLAIM_SCAN], b = claims[sc][c][CLAIM_BITMAP];
            printf(" %.1f | %.1f | %.2fx |", a, b, a / b);
        }
        printf("\n");
    }
    printf("\nbrisk_pool against malloc: T threads each keep %d live %d-byte objects and "
           "replace the oldest (free, then alloc) %zu times; one shared pool (capacity 0). "
           "ns per alloc+free pair; median of %d runs, allocators interleaved, after a "
           "warm-up.\n\n",
           WINDOW, OBJ_SIZE, ops, reps);
    printf("| threads |");
    for (int k = 0; k < NUM_KINDS; k++)
        printf(" %s |", kind_names[k]);
    printf(" brisk_malloc / pool |\n| ---: |");
    for (int k = 0; k <= NUM_KINDS; k++)
        printf(" ---: |");
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        printf("| %d |", thread_counts[c]);
        for (int k = 0; k < NUM_KINDS; k++)
            printf(" %.1f |", pairs[c][k]);
        printf(" %.2fx |\n", pairs[c][K_BRISK] / pairs[c][K_POOL]);
    }
    printf("\n");
    for (int c = 0; c < NUM_COUNTS; c++) {
        int t = thread_counts[c];
        for (int sc = 0; sc < NUM_STACK_COUNTS; sc++)
            printf("stacks%d_scan_ns_%dt=%.2f\nstacks%d_bitmap_ns_%dt=%.2f\n", stack_counts[sc], t,
                   claims[sc][c][CLAIM_SCAN], stack_counts[sc], t, claims[sc][c][CLAIM_BITMAP]);
        for (int k = 0; k < NUM_KINDS; k++)
            printf("%s_ns_%dt=%.2f\n", kind_keys[k], t, pairs[c][k]);
    }
    for (int k = 0; k < 2; k++)
        brisk_pool_destroy(g_pools[k]);
    spin_pool_destroy(g_spin_pool);
    free(objects);
    printf("status=ok\n");
    return 0;
}
