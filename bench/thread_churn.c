/*
 * thread_churn: thousands of short-lived threads that allocate, hand some
 * blocks on to the next thread, and exit.
 *
 * usage: thread_churn [--quick] [threads [lanes [ops [handoff [seed]]]]]
 *        defaults 20000 <online CPUs> 1000 64 42 (--quick: 3000 threads)
 *
 * `lanes` chains of threads run at once; `threads` threads are created in all.
 * A thread joins its predecessor, then does `ops` mallocs of 16..512 bytes in
 * batches of 32, writing each block and freeing each batch itself, and
 * replaces each of the `handoff` blocks it was given (allocated by its
 * predecessor, which has exited) with a block of its own. Then it starts its
 * successor with those blocks and exits. So every thread's heap is set up and
 * torn down, and blocks outlive the thread that allocated them.
 *
 * Work is fixed; an op is one malloc + its free. The last line printed is
 * ops_per_sec=<N>; threads_per_sec is printed too.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

enum { BATCH = 32 };

static struct {
    uint64_t threads;
    size_t lanes;
    uint64_t ops;
    size_t handoff;
    uint64_t seed;
} cfg;

typedef struct lane {
    unsigned char **blocks; /* handoff blocks */
    size_t *sizes;
    bench_rng rng;
    uint64_t left; /* threads this lane still has to create */
    uint64_t ops;
    pthread_t prev;
    int has_prev;
    pthread_t last;
} lane;

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static size_t lanes_done;

static unsigned char tag_of(size_t size)
{
    return (unsigned char)(size ^ 0x96u);
}

static unsigned char *new_block(size_t size)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("thread_churn", size);
    block[0] = tag_of(size);
    block[size - 1] = tag_of(size);
    return block;
}

static void check_block(const unsigned char *block, size_t size)
{
    if (block[0] != tag_of(size) || block[size - 1] != tag_of(size)) {
        fprintf(stderr, "thread_churn: block %p of %zu bytes was overwritten\n",
                (const void *)block, size);
        exit(1);
    }
}

static void *churn_main(void *arg)
{
    lane *ln = arg;
    if (ln->has_prev)
        pthread_join(ln->prev, NULL);

    unsigned char *batch[BATCH];
    size_t sizes[BATCH];
    for (uint64_t done = 0; done < cfg.ops;) {
        size_t n = cfg.ops - done < BATCH ? (size_t)(cfg.ops - done) : BATCH;
        for (size_t i = 0; i < n; i++) {
            sizes[i] = bench_rng_range(&ln->rng, 16, 512);
            batch[i] = new_block(sizes[i]);
        }
        for (size_t i = 0; i < n; i++) {
            check_block(batch[i], sizes[i]);
            free(batch[i]);
        }
        done += n;
    }
    for (size_t i = 0; i < cfg.handoff; i++) {
        check_block(ln->blocks[i], ln->sizes[i]);
        free(ln->blocks[i]);
        ln->sizes[i] = bench_rng_range(&ln->rng, 16, 512);
        ln->blocks[i] = new_block(ln->sizes[i]);
    }
    ln->ops += cfg.ops + cfg.handoff;

    if (--ln->left == 0) {
        ln->last = pthread_self();
        pthread_mutex_lock(&done_lock);
        lanes_done++;
        pthread_cond_signal(&done_cond);
        pthread_mutex_unlock(&done_lock);
        return NULL;
    }
    ln->prev = pthread_self();
    ln->has_prev = 1;
    pthread_t next;
    int err = pthread_create(&next, NULL, churn_main, ln);
    if (err != 0) {
        fprintf(stderr, "thread_churn: pthread_create: %s\n", strerror(err));
        exit(1);
    }
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: thread_churn [--quick] [threads [lanes [ops [handoff [seed]]]]]\n"
            "  threads  threads created in all               default 20000 (--quick 3000)\n"
            "  lanes    chains of threads running at once    default: online CPUs\n"
            "  ops      malloc+free pairs per thread          default 1000\n"
            "  handoff  blocks handed to the next thread      default 64\n"
            "  seed     PRNG seed                             default 42\n"
            "Prints key=value lines; the last is ops_per_sec (op = one malloc + its free).\n");
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cfg.threads = 20000;
    cfg.lanes = cpus > 0 ? (size_t)cpus : 1;
    cfg.ops = 1000;
    cfg.handoff = 64;
    cfg.seed = 42;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 5, usage, &quick, &pos);
    if (quick) {
        cfg.threads = 3000;
    }
    if (n > 0)
        cfg.threads = bench_parse_uint("thread_churn", "threads", pos[0]);
    if (n > 1)
        cfg.lanes = bench_parse_uint("thread_churn", "lanes", pos[1]);
    if (n > 2)
        cfg.ops = bench_parse_uint("thread_churn", "ops", pos[2]);
    if (n > 3)
        cfg.handoff = bench_parse_uint("thread_churn", "handoff", pos[3]);
    if (n > 4)
        cfg.seed = bench_parse_uint("thread_churn", "seed", pos[4]);
    if (cfg.lanes < 1 || cfg.threads < cfg.lanes) {
        fprintf(stderr, "thread_churn: need 1 <= lanes <= threads\n");
        return 2;
    }

    lane *lanes = calloc(cfg.lanes, sizeof *lanes);
    if (lanes == NULL)
        bench_oom("thread_churn", cfg.lanes * sizeof *lanes);
    for (size_t l = 0; l < cfg.lanes; l++) {
        lane *ln = &lanes[l];
        ln->blocks = malloc((cfg.handoff ? cfg.handoff : 1) * sizeof *ln->blocks);
        ln->sizes = malloc((cfg.handoff ? cfg.handoff : 1) * sizeof *ln->sizes);
        if (ln->blocks == NULL || ln->sizes == NULL)
            bench_oom("thread_churn", cfg.handoff * sizeof *ln->blocks);
        bench_rng_seed(&ln->rng, cfg.seed + l);
        /* Threads are shared out evenly; the first lanes take the remainder. */
        ln->left = cfg.threads / cfg.lanes + (l < cfg.threads % cfg.lanes);
        for (size_t i = 0; i < cfg.handoff; i++) {
            ln->sizes[i] = bench_rng_range(&ln->rng, 16, 512);
            ln->blocks[i] = new_block(ln->sizes[i]);
        }
    }

    double start = bench_now();
    for (size_t l = 0; l < cfg.lanes; l++) {
        pthread_t tid;
        int err = pthread_create(&tid, NULL, churn_main, &lanes[l]);
        if (err != 0) {
            fprintf(stderr, "thread_churn: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    pthread_mutex_lock(&done_lock);
    while (lanes_done < cfg.lanes)
        pthread_cond_wait(&done_cond, &done_lock);
    pthread_mutex_unlock(&done_lock);
    uint64_t ops = 0;
    for (size_t l = 0; l < cfg.lanes; l++) {
        pthread_join(lanes[l].last, NULL);
        ops += lanes[l].ops;
    }
    double elapsed = bench_now() - start;

    for (size_t l = 0; l < cfg.lanes; l++) {
        for (size_t i = 0; i < cfg.handoff; i++) {
            check_block(lanes[l].blocks[i], lanes[l].sizes[i]);
            free(lanes[l].blocks[i]);
        }
        free(lanes[l].blocks);
        free(lanes[l].sizes);
    }
    free(lanes);

    printf("workload=thread_churn threads=%llu lanes=%zu ops=%llu handoff=%zu seed=%llu\n",
           (unsigned long long)cfg.threads, cfg.lanes, (unsigned long long)cfg.ops, cfg.handoff,
           (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f total_ops=%llu threads_per_sec=%.0f peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)ops, elapsed > 0 ? (double)cfg.threads / elapsed : 0.0,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
