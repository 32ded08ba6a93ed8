/*
 * Helpers shared by the benchmark programs. The programs use only malloc, free
 * and realloc from the C library, so that any allocator can be measured by
 * LD_PRELOAD on the same binary; nothing here allocates.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_rng {
    uint64_t state;
} bench_rng;

/* splitmix64: spreads a small seed over all 64 bits, so seeds 1, 2, 3 give unrelated streams. */
static inline uint64_t bench_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void bench_rng_seed(bench_rng *rng, uint64_t seed)
{
    rng->state = bench_splitmix64(&seed);
    if (rng->state == 0)
        rng->state = 1; /* xorshift must not start at zero */
}

/* xorshift64*: a few instructions per number, enough for choosing sizes and slots. */
static inline uint64_t bench_rng_next(bench_rng *rng)
{
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]; the modulo bias is irrelevant for a benchmark. */
static inline size_t bench_rng_range(bench_rng *rng, size_t lo, size_t hi)
{
    return lo + (size_t)(bench_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

static inline int bench_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (n > 0); sorts v in place. */
static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bench_compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A clock's reading in seconds (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID...). */
static inline double bench_clock_seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double bench_now(void)
{
    return bench_clock_seconds(CLOCK_MONOTONIC);
}

static inline void bench_sleep_until(double deadline)
{
    for (double left = deadline - bench_now(); left > 0; left = deadline - bench_now()) {
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

static inline void bench_oom(const char *prog, size_t size)
{
    fprintf(stderr, "%s: malloc(%zu) returned NULL\n", prog, size);
    exit(1);
}

/*
 * A "Key:   <n> kB" line of /proc/self/status in KiB (VmHWM, VmRSS, ...), 0 if
 * unknown. read(2) into a stack buffer, so that measuring does not allocate.
 */
static inline unsigned long bench_status_kib(const char *key)
{
    char buf[8192];
    size_t len = 0;
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0)
        return 0;
    for (ssize_t n; len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0;)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    const char *line = strstr(buf, key);
    return line ? strtoul(line + strlen(key), NULL, 10) : 0;
}

/*
 * Peak resident set of this process image in KiB (VmHWM), 0 if unknown.
 * run.py prefers it to wait4's ru_maxrss: Linux folds the high-water mark of the
 * pre-exec image (a copy of the forking Python process) into ru_maxrss, which
 * puts a floor of tens of MiB under every number.
 */
static inline unsigned long bench_peak_rss_kib(void)
{
    return bench_status_kib("VmHWM:");
}

/* Current resident set in KiB (VmRSS), 0 if unknown. */
static inline unsigned long bench_rss_kib(void)
{
    return bench_status_kib("VmRSS:");
}

/*
 * The command line every workload takes: `--help` (or -h), or `[--quick]`
 * followed by at most max_positional plain arguments. --help prints usage
 * to stdout and exits 0; too many arguments, or an option among them,
 * prints usage to stderr and exits 2. Returns how many positional arguments
 * there are and points *positional at the first.
 */
static inline int bench_args(int argc, char **argv, int max_positional, void (*usage)(FILE *),
                             bool *quick, char ***positional)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        exit(0);
    }
    *quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int first = *quick ? 2 : 1;
    int n = argc - first;
    *positional = argv + first;
    if (n > max_positional || (n > 0 && (*positional)[0][0] == '-')) {
        usage(stderr);
        exit(2);
    }
    return n;
}

static inline unsigned long long bench_parse_uint(const char *prog, const char *what,
                                                  const char *text)
{
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
        fprintf(stderr, "%s: %s must be a non-negative integer, got '%s'\n", prog, what, text);
        exit(2);
    }
    return value;
}

static inline double bench_parse_seconds(const char *prog, const char *text)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(value > 0)) {
        fprintf(stderr, "%s: seconds must be a positive number, got '%s'\n", prog, text);
        exit(2);
    }
    return value;
}

/*
 * Worker threads that start together. A program's worker struct begins with a
 * bench_thread, and its workers lie in one array of `size`-byte structs. Each
 * worker sets itself up, then waits at the start line; the time measured runs
 * from the moment every worker (and the main thread) is there to the last join,
 * so the set-up is not timed.
 */
typedef struct bench_thread {
    pthread_t tid;
    size_t index; /* in the array */
} bench_thread;

static inline bench_thread *bench_thread_at(void *workers, size_t size, size_t index)
{
    return (bench_thread *)((char *)workers + index * size);
}

/*
 * Numbers the workers, runs worker_main(&worker) on a thread each, and returns
 * the seconds from the start line to the last join. start_line is the
 * program's: its workers wait on it with pthread_barrier_wait. A thread that
 * cannot be created is fatal (exit 1).
 */
static inline double bench_run_threads(const char *prog, void *workers, size_t size,
                                       size_t threads, void *(*worker_main)(void *),
                                       pthread_barrier_t *start_line)
{
    pthread_barrier_init(start_line, NULL, (unsigned)threads + 1);
    for (size_t t = 0; t < threads; t++) {
        bench_thread *thread = bench_thread_at(workers, size, t);
        thread->index = t;
        int err = pthread_create(&thread->tid, NULL, worker_main, thread);
        if (err != 0) {
            fprintf(stderr, "%s: pthread_create: %s\n", prog, strerror(err));
            exit(1);
        }
    }
    pthread_barrier_wait(start_line);
    double start = bench_now();
    for (size_t t = 0; t < threads; t++)
        pthread_join(bench_thread_at(workers, size, t)->tid, NULL);
    double elapsed = bench_now() - start;
    pthread_barrier_destroy(start_line);
    return elapsed;
}

#endif
