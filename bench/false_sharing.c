/*
 * false_sharing.c: Hoard's two false-sharing benchmarks (Berger et al.,
 * ASPLOS 2000), built twice (bench/CMakeLists.txt):
 *
 *   cache_thrash   active false sharing. Each thread repeatedly mallocs one
 *                  small object, writes every byte of it `repetitions` times,
 *                  and frees it. The threads never share an object, but an
 *                  allocator that carves the objects of different threads out
 *                  of the same cache line (a shared heap handing out
 *                  neighbouring blocks) makes their writes fight over that
 *                  line, and the run slows down by an order of magnitude.
 *   cache_scratch  passive false sharing (FALSE_SHARING_PASSIVE=1). The main
 *                  thread first mallocs one small object per thread, back to
 *                  back, so that they share cache lines, and hands one to
 *                  each thread, which frees it before the same loop. An
 *                  allocator whose thread caches take in the foreign block and
 *                  hand it straight back gives every thread a block on the
 *                  same cache line as its neighbours'; one that returns remote
 *                  frees to their owner does not.
 *
 * usage: cache_thrash|cache_scratch [--quick] [threads [iterations [object_size [repetitions]]]]
 *
 * Work is fixed; an op is one malloc + `repetitions` passes of writes + one free.
 * The last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

#ifndef FALSE_SHARING_PASSIVE
#define FALSE_SHARING_PASSIVE 0
#endif
#if FALSE_SHARING_PASSIVE
#define PROGRAM "cache_scratch"
#else
#define PROGRAM "cache_thrash"
#endif

static struct {
    size_t threads;
    uint64_t iterations;
    size_t object_size;
    uint64_t repetitions;
} cfg;

static pthread_barrier_t start_line;

/* arg: the block the main thread allocated for this thread (passive), or NULL. */
static void *thread_main(void *arg)
{
    uint64_t bad = 0;
    pthread_barrier_wait(&start_line);
    free(arg); /* passive: a remote free */
    for (uint64_t i = 0; i < cfg.iterations; i++) {
        /* Volatile: every write must reach the cache line, none may be merged. */
        volatile unsigned char *obj = malloc(cfg.object_size);
        if (obj == NULL)
            bench_oom(PROGRAM, cfg.object_size);
        for (uint64_t r = 0; r < cfg.repetitions; r++)
            for (size_t k = 0; k < cfg.object_size; k++)
                obj[k] = (unsigned char)(r + k);
        /* Another thread's object overlapping this one would show here. */
        for (size_t k = 0; k < cfg.object_size; k++)
            bad += obj[k] != (unsigned char)(cfg.repetitions - 1 + k);
        free((void *)obj);
    }
    return (void *)(uintptr_t)bad;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROGRAM " [--quick] [threads [iterations [object_size [repetitions]]]]\n"
            "  threads      threads, each with its own objects    default: online CPUs\n"
            "  iterations   malloc/write/free rounds per thread   default 200000 (--quick 10000)\n"
            "  object_size  bytes per object                      default 8\n"
            "  repetitions  write passes over each object         default 1000\n"
            "Prints key=value lines; the last is ops_per_sec (op = malloc + writes + free).\n");
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cfg.threads = cpus > 0 ? (size_t)cpus : 1;
    cfg.iterations = 200000;
    cfg.object_size = 8;
    cfg.repetitions = 1000;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 4, usage, &quick, &pos);
    if (quick) {
        cfg.iterations = 10000;
    }
    if (n > 0)
        cfg.threads = bench_parse_uint(PROGRAM, "threads", pos[0]);
    if (n > 1)
        cfg.iterations = bench_parse_uint(PROGRAM, "iterations", pos[1]);
    if (n > 2)
        cfg.object_size = bench_parse_uint(PROGRAM, "object_size", pos[2]);
    if (n > 3)
        cfg.repetitions = bench_parse_uint(PROGRAM, "repetitions", pos[3]);
    if (cfg.threads < 1 || cfg.object_size < 1 || cfg.repetitions < 1) {
        fprintf(stderr, PROGRAM ": need threads, object_size, repetitions >= 1\n");
        return 2;
    }

    pthread_t *tids = malloc(cfg.threads * sizeof *tids);
    unsigned char **given = calloc(cfg.threads, sizeof *given);
    if (tids == NULL || given == NULL)
        bench_oom(PROGRAM, cfg.threads * sizeof *tids);
    /* Passive: allocated back to back by one thread, so neighbours in memory,
     * very likely sharing cache lines. */
    for (size_t t = 0; FALSE_SHARING_PASSIVE && t < cfg.threads; t++) {
        given[t] = malloc(cfg.object_size);
        if (given[t] == NULL)
            bench_oom(PROGRAM, cfg.object_size);
        memset(given[t], 0x5A, cfg.object_size);
    }
    pthread_barrier_init(&start_line, NULL, (unsigned)cfg.threads + 1);
    for (size_t t = 0; t < cfg.threads; t++) {
        int err = pthread_create(&tids[t], NULL, thread_main, given[t]);
        if (err != 0) {
            fprintf(stderr, PROGRAM ": pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    double start = bench_now();
    pthread_barrier_wait(&start_line);
    uint64_t bad = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        void *ret;
        pthread_join(tids[t], &ret);
        bad += (uint64_t)(uintptr_t)ret;
    }
    double elapsed = bench_now() - start;
    pthread_barrier_destroy(&start_line);
    free(given);
    free(tids);
    if (bad != 0) {
        fprintf(stderr, PROGRAM ": %llu bytes were overwritten by another thread\n",
                (unsigned long long)bad);
        return 1;
    }

    uint64_t ops = (uint64_t)cfg.threads * cfg.iterations;
    printf("workload=" PROGRAM " threads=%zu iterations=%llu object_size=%zu repetitions=%llu\n",
           cfg.threads, (unsigned long long)cfg.iterations, cfg.object_size,
           (unsigned long long)cfg.repetitions);
    printf("elapsed_s=%.3f ops=%llu peak_rss_kib=%lu\n", elapsed, (unsigned long long)ops,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
