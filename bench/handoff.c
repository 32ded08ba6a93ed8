/*
 * handoff: many threads swap blocks of mixed sizes through shared slots.
 * T threads share an array of 4096 atomic pointers. Each step a thread mallocs
 * a block, writes its first and last byte, atomically exchanges it into a
 * random slot and frees whatever the slot held. That block was put there by
 * whichever thread last chose the slot, so frees are a mix of local ones and
 * remote ones (another thread's block). The share, printed as
 * remote_free_pct, depends on how many threads run at once: with C cores and
 * T >= C threads, the slots are mostly refilled by the C threads on the CPUs
 * in this time slice, so about (C-1)/C of frees are remote. 8 threads on 2
 * cores: about half (48-52% under brisk, mimalloc and tcmalloc; 70-80% under
 * glibc, whose threads block on its arena locks and so switch more often);
 * on 8 cores or more, about 7/8. Other load on the machine lowers it: a thread
 * that runs alone for a time slice soon refills every slot itself (5-40% seen
 * on a busy 2-core machine).
 *
 * usage: handoff [--quick] [threads [steps [seed]]]
 *        defaults 8 threads, 10000000 steps per thread (--quick 2000000), seed 42
 *
 * Sizes: 70% 8..128 B, 25% 129 B..2 KiB, 5% 2 KiB..64 KiB, and 1 in 10000 a
 * 4 MiB block (the allocator's large path, touched at both ends). Work is
 * fixed; an op is one malloc plus one free, and ops_per_sec is all threads'
 * steps over the wall time from starting the threads to the last join (the
 * blocks left in the slots are freed after the clock stops). The last line
 * printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

enum {
    SLOTS = 4096, /* a power of two */
    TAG = 0xA5,
};

/* A block's first byte is TAG, its second the index of the thread that
 * allocated it (mod 256), its last byte TAG too. */
static _Atomic(unsigned char *) slots[SLOTS];

static struct {
    size_t threads;
    uint64_t steps;
    uint64_t seed;
} cfg;

typedef struct worker {
    _Alignas(64) pthread_t tid;
    unsigned index;
    uint64_t frees;        /* blocks taken out of a slot and freed */
    uint64_t remote_frees; /* ... of which another thread had allocated */
    uint64_t large;        /* 4 MiB blocks allocated */
} worker;

static pthread_barrier_t start_line;

static size_t pick_size(bench_rng *rng, uint64_t *large)
{
    uint64_t r = bench_rng_next(rng);
    if (r % 10000 == 0) {
        ++*large;
        return (size_t)4 << 20;
    }
    unsigned pct = (unsigned)((r >> 20) % 100);
    if (pct < 70)
        return bench_rng_range(rng, 8, 128);
    if (pct < 95)
        return bench_rng_range(rng, 129, 2048);
    return bench_rng_range(rng, 2049, 65536);
}

static void release(worker *w, unsigned char *p)
{
    if (p == NULL)
        return;
    if (p[0] != TAG) {
        fprintf(stderr, "handoff: block %p: first byte %u, expected %u\n", (void *)p, p[0], TAG);
        exit(1);
    }
    w->frees++;
    w->remote_frees += p[1] != (unsigned char)w->index;
    free(p);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed * 1000003u + w->index);
    pthread_barrier_wait(&start_line);
    for (uint64_t i = 0; i < cfg.steps; i++) {
        size_t size = pick_size(&rng, &w->large);
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_oom("handoff", size);
        p[0] = TAG;
        p[1] = (unsigned char)w->index;
        p[size - 1] = TAG;
        size_t slot = (size_t)(bench_rng_next(&rng) >> 40) % SLOTS;
        /* acq_rel: the thread that takes p out sees the bytes written above,
         * and this thread sees the writes made to the block it takes out. */
        release(w, atomic_exchange_explicit(&slots[slot], p, memory_order_acq_rel));
    }
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: handoff [--quick] [threads [steps [seed]]]\n"
            "  threads  threads swapping blocks through 4096 slots  default 8\n"
            "  steps    malloc+exchange+free steps per thread        default 10000000 "
            "(--quick 2000000)\n"
            "  seed     PRNG seed                                    default 42\n"
            "Prints key=value lines; the last is ops_per_sec (op = one malloc + one free).\n");
}

int main(int argc, char **argv)
{
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 3, usage, &quick, &pos);
    cfg.threads = 8;
    cfg.steps = quick ? 2000000 : 10000000;
    cfg.seed = 42;
    if (n > 0)
        cfg.threads = bench_parse_uint("handoff", "threads", pos[0]);
    if (n > 1)
        cfg.steps = bench_parse_uint("handoff", "steps", pos[1]);
    if (n > 2)
        cfg.seed = bench_parse_uint("handoff", "seed", pos[2]);
    if (cfg.threads < 1 || cfg.threads > 4096) {
        fprintf(stderr, "handoff: threads must be 1..4096\n");
        return 2;
    }

    worker *workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("handoff", cfg.threads * sizeof *workers);
    /* The main thread waits at the barrier too, so the clock starts when all
     * threads exist and none has begun. */
    pthread_barrier_init(&start_line, NULL, (unsigned)cfg.threads + 1);
    for (size_t t = 0; t < cfg.threads; t++) {
        workers[t].index = (unsigned)t;
        int err = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
        if (err != 0) {
            fprintf(stderr, "handoff: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    double start = bench_now();
    pthread_barrier_wait(&start_line);
    for (size_t t = 0; t < cfg.threads; t++)
        pthread_join(workers[t].tid, NULL);
    double elapsed = bench_now() - start;
    unsigned long peak = bench_peak_rss_kib();

    uint64_t frees = 0, remote = 0, large = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        frees += workers[t].frees;
        remote += workers[t].remote_frees;
        large += workers[t].large;
    }
    /* What is left in the slots, freed by the main thread (index threads: no
     * worker has it, so all of these count as remote, but after the clock). */
    worker main_thread = { .index = (unsigned)cfg.threads };
    for (size_t s = 0; s < SLOTS; s++)
        release(&main_thread, atomic_exchange_explicit(&slots[s], NULL, memory_order_acquire));
    pthread_barrier_destroy(&start_line);
    free(workers);

    uint64_t ops = cfg.threads * cfg.steps;
    printf("workload=handoff threads=%zu steps=%llu slots=%d seed=%llu\n", cfg.threads,
           (unsigned long long)cfg.steps, SLOTS, (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f ops=%llu large_blocks=%llu remote_free_pct=%.1f peak_rss_kib=%lu\n",
           elapsed, (unsigned long long)ops, (unsigned long long)large,
           frees ? 100.0 * (double)remote / (double)frees : 0.0, peak);
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
