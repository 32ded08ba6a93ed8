/*
 * larson: the server workload of Larson & Krishnan (1998).
 *
 * usage: larson [--quick] [seconds [min_size [max_size [chunks [rounds [seed [threads]]]]]]]
 *
 * Each of `threads` lanes owns an array of `chunks` blocks whose sizes are drawn
 * from [min_size, max_size]. The lane's thread repeatedly frees a random slot and
 * mallocs a block of a new random size into it. After `rounds` passes of `chunks`
 * replacements the thread hands the whole array to a successor thread it creates,
 * and exits. So most blocks are freed by a thread other than the one that
 * allocated them, and threads come and go all the time, as in a server that
 * passes work between short-lived worker threads.
 *
 * The run stops after `seconds`; an op is one free plus one malloc. The last line
 * printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

typedef struct larson_config {
    double seconds;
    size_t min_size;
    size_t max_size;
    size_t chunks;
    uint64_t rounds;
    uint64_t seed;
    size_t threads;
} larson_config;

/* One lane is one chain of threads; exactly one thread of it runs at a time. */
typedef struct lane {
    unsigned char **blocks;
    size_t *sizes;
    bench_rng rng;
    uint64_t ops;
    uint64_t generations;
    pthread_t prev; /* the thread that handed the lane over; its successor joins it */
    bool has_prev;
    pthread_t last; /* the lane's final thread; main joins it */
} lane;

static larson_config cfg;
static atomic_bool stop_requested;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static size_t lanes_done;

static unsigned char tag_of(size_t size)
{
    return (unsigned char)(size ^ 0xA5u);
}

/* Writes the first and last byte, so every block is really touched and an
 * allocator that hands out overlapping blocks is caught in check_block. */
static unsigned char *new_block(size_t size)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("larson", size);
    block[0] = tag_of(size);
    block[size - 1] = tag_of(size);
    return block;
}

static void check_block(const unsigned char *block, size_t size)
{
    if (block[0] != tag_of(size) || block[size - 1] != tag_of(size)) {
        fprintf(stderr, "larson: block %p of %zu bytes was overwritten\n", (const void *)block,
                size);
        exit(1);
    }
}

static void finish_lane(lane *ln)
{
    for (size_t i = 0; i < cfg.chunks; i++) {
        check_block(ln->blocks[i], ln->sizes[i]);
        free(ln->blocks[i]);
    }
    free(ln->blocks);
    free(ln->sizes);
    ln->blocks = NULL;
    ln->sizes = NULL;
    ln->last = pthread_self();
    pthread_mutex_lock(&done_lock);
    lanes_done++;
    pthread_cond_signal(&done_cond);
    pthread_mutex_unlock(&done_lock);
}

static void *lane_main(void *arg)
{
    lane *ln = arg;
    if (ln->has_prev)
        pthread_join(ln->prev, NULL);
    ln->generations++;

    uint64_t ops = 0;
    bool stopped = false;
    for (uint64_t pass = 0; pass < cfg.rounds && !stopped; pass++) {
        for (size_t i = 0; i < cfg.chunks; i++) {
            /* A relaxed load every 256 ops keeps the stop check off the profile. */
            if ((i & 255) == 0 && atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
                stopped = true;
                break;
            }
            size_t slot = bench_rng_range(&ln->rng, 0, cfg.chunks - 1);
            check_block(ln->blocks[slot], ln->sizes[slot]);
            free(ln->blocks[slot]);
            size_t size = bench_rng_range(&ln->rng, cfg.min_size, cfg.max_size);
            ln->blocks[slot] = new_block(size);
            ln->sizes[slot] = size;
            ops++;
        }
    }
    ln->ops += ops;

    if (stopped) {
        finish_lane(ln);
        return NULL;
    }
    /* Hand the lane to a new thread; from here on it owns the lane. */
    ln->prev = pthread_self();
    ln->has_prev = true;
    pthread_t next;
    int err = pthread_create(&next, NULL, lane_main, ln);
    if (err != 0) {
        fprintf(stderr, "larson: pthread_create: %s\n", strerror(err));
        exit(1);
    }
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: larson [--quick] [seconds [min_size [max_size [chunks [rounds [seed "
            "[threads]]]]]]]\n"
            "  seconds   run time (may be fractional)        default 5    (--quick 0.5)\n"
            "  min_size  smallest block in bytes (>= 1)       default 8\n"
            "  max_size  largest block in bytes               default 1000\n"
            "  chunks    blocks each thread owns              default 5000 (--quick 1000)\n"
            "  rounds    passes over the blocks before a thread hands them to a successor\n"
            "                                                 default 20\n"
            "  seed      PRNG seed                            default 42\n"
            "  threads   concurrent threads (lanes)           default: online CPUs\n"
            "Prints key=value lines; the last is ops_per_sec (op = one free + one malloc).\n");
}

static void parse_args(int argc, char **argv)
{
    larson_config parsed = { 5.0, 8, 1000, 5000, 20, 42, bench_cpus_at_least(1) };
    const bench_param params[] = {
        { "seconds", .seconds = &parsed.seconds, .quick = 0.5 },
        { "min_size", .size = &parsed.min_size },
        { "max_size", .size = &parsed.max_size },
        { "chunks", .size = &parsed.chunks, .quick = 1000 },
        { "rounds", .u64 = &parsed.rounds },
        { "seed", .u64 = &parsed.seed },
        { "threads", .size = &parsed.threads },
    };
    bench_parse_params("larson", argc, argv, usage, params,
                       (int)(sizeof params / sizeof params[0]));
    cfg = parsed;
    if (cfg.min_size < 1 || cfg.max_size < cfg.min_size || cfg.chunks < 1 || cfg.rounds < 1 ||
        cfg.threads < 1) {
        fprintf(stderr, "larson: need 1 <= min_size <= max_size and chunks, rounds, threads >= 1\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);

    lane *lanes = calloc(cfg.threads, sizeof *lanes);
    if (lanes == NULL)
        bench_oom("larson", cfg.threads * sizeof *lanes);
    /* The main thread fills every array, so the first generation already frees
     * blocks it did not allocate. */
    for (size_t t = 0; t < cfg.threads; t++) {
        lane *ln = &lanes[t];
        ln->blocks = malloc(cfg.chunks * sizeof *ln->blocks);
        ln->sizes = malloc(cfg.chunks * sizeof *ln->sizes);
        if (ln->blocks == NULL || ln->sizes == NULL)
            bench_oom("larson", cfg.chunks * sizeof *ln->blocks);
        bench_rng_seed(&ln->rng, cfg.seed + t);
        for (size_t i = 0; i < cfg.chunks; i++) {
            ln->sizes[i] = bench_rng_range(&ln->rng, cfg.min_size, cfg.max_size);
            ln->blocks[i] = new_block(ln->sizes[i]);
        }
    }

    double start = bench_now();
    for (size_t t = 0; t < cfg.threads; t++) {
        pthread_t tid;
        int err = pthread_create(&tid, NULL, lane_main, &lanes[t]);
        if (err != 0) {
            fprintf(stderr, "larson: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    bench_sleep_until(start + cfg.seconds);
    atomic_store(&stop_requested, true);
    double elapsed = bench_now() - start;

    pthread_mutex_lock(&done_lock);
    while (lanes_done < cfg.threads)
        pthread_cond_wait(&done_cond, &done_lock);
    pthread_mutex_unlock(&done_lock);

    uint64_t ops = 0, generations = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        pthread_join(lanes[t].last, NULL);
        ops += lanes[t].ops;
        generations += lanes[t].generations;
    }
    free(lanes);

    printf("workload=larson threads=%zu sizes=%zu..%zu chunks=%zu rounds=%llu seed=%llu\n",
           cfg.threads, cfg.min_size, cfg.max_size, cfg.chunks, (unsigned long long)cfg.rounds,
           (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f ops=%llu threads_created=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)ops, (unsigned long long)generations, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", (double)ops / elapsed);
    return 0;
}
