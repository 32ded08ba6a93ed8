/*
 * cache_thrash: active false sharing (Berger et al., Hoard, ASPLOS 2000).
 *
 * usage: cache_thrash [--quick] [threads [iterations [object_size [repetitions]]]]
 *
 * Each thread repeatedly mallocs one small object, writes every byte of it
 * `repetitions` times, and frees it. The threads never share an object, but an
 * allocator that carves the objects of different threads out of the same cache
 * line (a shared heap handing out neighbouring blocks) makes their writes fight
 * over that line, and the run slows down by an order of magnitude. An allocator
 * that gives each thread its own memory runs at the speed of the writes.
 *
 * Work is fixed; an op is one malloc + `repetitions` passes of writes + one free.
 * The last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

static struct {
    size_t threads;
    uint64_t iterations;
    size_t object_size;
    uint64_t repetitions;
} cfg;

static pthread_barrier_t start_line;

static void *thrash_main(void *arg)
{
    (void)arg;
    uint64_t bad = 0;
    pthread_barrier_wait(&start_line);
    for (uint64_t i = 0; i < cfg.iterations; i++) {
        /* Volatile: every write must reach the cache line, none may be merged. */
        volatile unsigned char *obj = malloc(cfg.object_size);
        if (obj == NULL)
            bench_oom("cache_thrash", cfg.object_size);
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
            "usage: cache_thrash [--quick] [threads [iterations [object_size [repetitions]]]]\n"
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
        cfg.threads = bench_parse_uint("cache_thrash", "threads", pos[0]);
    if (n > 1)
        cfg.iterations = bench_parse_uint("cache_thrash", "iterations", pos[1]);
    if (n > 2)
        cfg.object_size = bench_parse_uint("cache_thrash", "object_size", pos[2]);
    if (n > 3)
        cfg.repetitions = bench_parse_uint("cache_thrash", "repetitions", pos[3]);
    if (cfg.threads < 1 || cfg.object_size < 1 || cfg.repetitions < 1) {
        fprintf(stderr, "cache_thrash: need threads, object_size, repetitions >= 1\n");
        return 2;
    }

    pthread_t *tids = malloc(cfg.threads * sizeof *tids);
    if (tids == NULL)
        bench_oom("cache_thrash", cfg.threads * sizeof *tids);
    pthread_barrier_init(&start_line, NULL, (unsigned)cfg.threads + 1);
    for (size_t t = 0; t < cfg.threads; t++) {
        int err = pthread_create(&tids[t], NULL, thrash_main, NULL);
        if (err != 0) {
            fprintf(stderr, "cache_thrash: pthread_create: %s\n", strerror(err));
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
    free(tids);
    if (bad != 0) {
        fprintf(stderr, "cache_thrash: %llu bytes were overwritten by another thread\n",
                (unsigned long long)bad);
        return 1;
    }

    uint64_t ops = (uint64_t)cfg.threads * cfg.iterations;
    printf("workload=cache_thrash threads=%zu iterations=%llu object_size=%zu repetitions=%llu\n",
           cfg.threads, (unsigned long long)cfg.iterations, cfg.object_size,
           (unsigned long long)cfg.repetitions);
    printf("elapsed_s=%.3f ops=%llu peak_rss_kib=%lu\n", elapsed, (unsigned long long)ops,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
