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
#include <stdatomic.h>
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

/* A workload that frees every block it allocates checks the two counts at the end. */
static inline void bench_check_all_freed(const char *prog, uint64_t mallocs, uint64_t frees)
{
    if (mallocs != frees) {
        fprintf(stderr, "%s: %llu mallocs but %llu frees\n", prog, (unsigned long long)mallocs,
                (unsigned long long)frees);
        exit(1);
    }
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
    /* A bound of a day also refuses inf, which would run forever. */
    if (errno != 0 || end == text || *end != '\0' || !(value > 0) || !(value <= 86400)) {
        fprintf(stderr, "%s: seconds must be a positive number up to 86400, got '%s'\n", prog,
                text);
        exit(2);
    }
    return value;
}

/* The default number of threads: the online CPUs, at least `least`. */
static inline size_t bench_cpus_at_least(size_t least)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > (long)least ? (size_t)cpus : least;
}

/*
 * A positional argument of a workload's command line: its name, for the
 * message about a bad value, and the variable it sets, which holds its
 * default: a size_t (size) or a uint64_t (u64), parsed by bench_parse_uint,
 * or a double (seconds), parsed by bench_parse_seconds; exactly one of the
 * three. quick is the value --quick gives the variable, 0 where --quick
 * leaves the default. Point them at a local copy of the program's
 * configuration and copy that into the static one afterwards: a static whose
 * address was taken may change in any call as far as the compiler knows, so
 * the workers' loops would load its fields again after every malloc and free
 * (mleak's loop ran 2 instructions a step more).
 */
typedef struct bench_param {
    const char *name;
    size_t *size;
    uint64_t *u64;
    double *seconds;
    double quick;
} bench_param;

/*
 * The command line of bench_args with at most `count` positional arguments,
 * params[i] the i-th: --quick sets the quick values, then each positional
 * argument given sets its variable. A bad value exits 2 (the first, in order).
 */
static inline void bench_parse_params(const char *prog, int argc, char **argv,
                                      void (*usage)(FILE *), const bench_param *params,
                                      int count)
{
    bool quick;
    char **pos;
    int given = bench_args(argc, argv, count, usage, &quick, &pos);
    for (int i = 0; i < count; i++) {
        const bench_param *p = &params[i];
        if (i >= given && !(quick && p->quick != 0))
            continue;
        if (p->seconds != NULL) {
            *p->seconds = i < given ? bench_parse_seconds(prog, pos[i]) : p->quick;
            continue;
        }
        unsigned long long value = i < given ? bench_parse_uint(prog, p->name, pos[i])
                                             : (unsigned long long)p->quick;
        if (p->size != NULL)
            *p->size = (size_t)value;
        else
            *p->u64 = value;
    }
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

/*
 * A relay: workers in a ring, each handing messages to the next (the last to
 * the first, a lone worker to itself). Each worker has an inbox, a
 * mutex-guarded list that the previous worker pushes messages onto and that
 * the worker itself drains. An inbox holds at most inbox_max messages: a
 * sender that finds it full drains its own inbox, sleeps 20 us and tries again
 * (draining first means workers waiting on each other around the ring always
 * make room for one another), so the memory in flight stays bounded. A worker
 * done with its own work keeps draining its inbox until every worker is done,
 * so every message is received whatever the scheduling.
 *
 * What a message carries and in which order a drain frees it is the program's:
 * its message struct begins with a bench_message and goes on with the payload,
 * its worker struct begins with a bench_relay_worker, and its drain function
 * takes the inbox's messages with bench_relay_take and frees them.
 */
typedef struct bench_message {
    struct bench_message *next;
    size_t count; /* entries in the payload */
} bench_message;

typedef struct bench_relay_worker {
    bench_thread thread;
    pthread_mutex_t inbox_lock;
    bench_message *inbox; /* newest first */
    size_t inbox_len;
    uint64_t stalls; /* 20 us waits: for room in the next inbox, or, when done, for the others */
} bench_relay_worker;

typedef struct bench_relay {
    size_t inbox_max;
    void (*drain)(bench_relay_worker *self); /* the program's: frees all that self's inbox holds */
    atomic_size_t running;                   /* workers not yet done with their own work */
    pthread_barrier_t start_line;            /* where the workers wait once set up */
} bench_relay;

static inline bench_relay_worker *bench_relay_worker_at(void *workers, size_t size,
                                                         size_t index)
{
    return (bench_relay_worker *)bench_thread_at(workers, size, index);
}

/* Empties self's inbox; returns its messages, oldest first or newest first. */
static inline bench_message *bench_relay_take(bench_relay_worker *self, bool oldest_first)
{
    pthread_mutex_lock(&self->inbox_lock);
    bench_message *m = self->inbox;
    self->inbox = NULL;
    self->inbox_len = 0;
    pthread_mutex_unlock(&self->inbox_lock);
    if (!oldest_first)
        return m;
    bench_message *oldest = NULL;
    while (m != NULL) {
        bench_message *next = m->next;
        m->next = oldest;
        oldest = m;
        m = next;
    }
    return oldest;
}

static inline void bench_relay_pause(bench_relay_worker *self)
{
    struct timespec ts = { 0, 20000 };
    nanosleep(&ts, NULL);
    self->stalls++;
}

/* Pushes m onto to's inbox; while that inbox is full, drains from's own and waits. */
static inline void bench_relay_send(bench_relay *relay, bench_relay_worker *from,
                                    bench_relay_worker *to, bench_message *m)
{
    for (;;) {
        pthread_mutex_lock(&to->inbox_lock);
        bool room = to->inbox_len < relay->inbox_max;
        if (room) {
            m->next = to->inbox;
            to->inbox = m;
            to->inbox_len++;
        }
        pthread_mutex_unlock(&to->inbox_lock);
        if (room)
            return;
        relay->drain(from);
        bench_relay_pause(from);
    }
}

/*
 * A worker's last call, after its last send: drains its inbox until every
 * worker is done. Every send comes before its sender's decrement, so once
 * running is 0 nothing more arrives and the last drain leaves the inbox empty.
 */
static inline void bench_relay_finish(bench_relay *relay, bench_relay_worker *self)
{
    atomic_fetch_sub(&relay->running, 1);
    while (atomic_load(&relay->running) > 0) {
        relay->drain(self);
        bench_relay_pause(self);
    }
    relay->drain(self);
}

/*
 * bench_run_threads for a relay's workers: sets up their inboxes, runs them,
 * and checks that every inbox was left empty (exit 1 if not). Returns the
 * seconds from the start line to the last join.
 */
static inline double bench_relay_run(const char *prog, bench_relay *relay, void *workers,
                                     size_t size, size_t threads, void *(*worker_main)(void *))
{
    atomic_store(&relay->running, threads);
    for (size_t t = 0; t < threads; t++)
        pthread_mutex_init(&bench_relay_worker_at(workers, size, t)->inbox_lock, NULL);
    double elapsed =
        bench_run_threads(prog, workers, size, threads, worker_main, &relay->start_line);
    for (size_t t = 0; t < threads; t++) {
        bench_relay_worker *w = bench_relay_worker_at(workers, size, t);
        if (w->inbox != NULL) {
            fprintf(stderr, "%s: thread %zu exited with blocks in its inbox\n", prog, t);
            exit(1);
        }
        pthread_mutex_destroy(&w->inbox_lock);
    }
    return elapsed;
}

#endif
