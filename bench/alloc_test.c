/*
 * alloc_test: the shape of the "alloc-test" benchmark, written from its
 * description: independent threads, each running its own deterministic random
 * sequence of mallocs and frees over a private working set; nothing is shared.
 *
 * usage: alloc_test [--quick] [threads [steps [slots [seed]]]]
 *
 * threads = 1 is the single-thread mode; threads = T runs T copies of the same
 * kind of sequence (each from its own seed) side by side, which shows how the
 * allocator scales when threads never touch each other's memory.
 *
 * A step picks a slot of the thread's working set: an empty slot gets a new
 * block, a full one has its block freed. Lifetimes are skewed as in real
 * programs: 7 steps in 8 pick among the first 1/16 of the slots (short-lived
 * objects, churned all the time), 1 in 8 among all slots (long-lived objects).
 * Sizes run from 8 bytes to 4 KiB with a geometric skew towards small blocks:
 * band [8, 16) is the likeliest and each band up has 0.7 of the weight of the
 * one below; 1 block in 512 is larger, 4-64 KiB.
 *
 * Every block carries a 56-bit value at its start and a tag in its last byte;
 * the freeing code checks both and sums the values into a checksum, which is
 * the same under every allocator. An op is one malloc or one free. The last
 * line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

enum { SIZE_TABLE = 8192, MIN_SIZE = 8, MAX_SMALL = 4096 };
#define VALUE_MASK 0x00FFFFFFFFFFFFFFull

typedef struct config {
    size_t threads;
    uint64_t steps;
    size_t slots;
    uint64_t seed;
} config;

typedef struct worker {
    pthread_t tid;
    size_t index;
    uint64_t mallocs;
    uint64_t frees;
    uint64_t checksum;
    char pad[64];
} worker;

/* A live block and its size; the size is kept beside the pointer, because an
 * 8-byte block has no room for it. */
typedef struct slot {
    unsigned char *block;
    size_t size;
} slot;

static config cfg;
static size_t size_table[SIZE_TABLE];
static pthread_barrier_t start_line;

static unsigned char tag_of(uint64_t value, size_t size)
{
    return (unsigned char)(value ^ size ^ 0xC3u);
}

static void fill(slot *s, size_t size, uint64_t value, worker *w)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("alloc_test", size);
    /* The value keeps 56 bits, so that in an 8-byte block the tag can take
     * the (little-endian) top byte. */
    value &= VALUE_MASK;
    memcpy(block, &value, sizeof value); /* size >= 8 */
    block[size - 1] = tag_of(value, size);
    s->block = block;
    s->size = size;
    w->mallocs++;
}

static void empty(slot *s, worker *w)
{
    uint64_t value;
    memcpy(&value, s->block, sizeof value);
    value &= VALUE_MASK;
    if (s->block[s->size - 1] != tag_of(value, s->size)) {
        fprintf(stderr, "alloc_test: block %p of %zu bytes was overwritten\n",
                (void *)s->block, s->size);
        exit(1);
    }
    w->checksum += value;
    w->frees++;
    free(s->block);
    s->block = NULL;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed * 7919u + w->index);
    slot *slots = calloc(cfg.slots, sizeof *slots);
    if (slots == NULL)
        bench_oom("alloc_test", cfg.slots * sizeof *slots);
    size_t hot = cfg.slots / 16 ? cfg.slots / 16 : 1;

    pthread_barrier_wait(&start_line);
    for (uint64_t step = 0; step < cfg.steps; step++) {
        uint64_t r = bench_rng_next(&rng);
        size_t s = (size_t)((r >> 3) % ((r & 7) ? hot : cfg.slots));
        if (slots[s].block != NULL) {
            empty(&slots[s], w);
        } else {
            size_t size;
            if (((r >> 48) & 511) == 0)
                size = bench_rng_range(&rng, MAX_SMALL + 1, 64 << 10);
            else
                size = size_table[(r >> 35) % SIZE_TABLE];
            fill(&slots[s], size, bench_rng_next(&rng), w);
        }
    }
    for (size_t s = 0; s < cfg.slots; s++)
        if (slots[s].block != NULL)
            empty(&slots[s], w);
    free(slots);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: alloc_test [--quick] [threads [steps [slots [seed]]]]\n"
            "  threads  independent threads (1 = single-thread mode)  default 1\n"
            "  steps    mallocs + frees per thread       default 200000000 (--quick 50000000)\n"
            "  slots    working-set slots per thread     default 65536\n"
            "  seed     PRNG seed                        default 42\n"
            "Sizes 8 B..4 KiB, skewed small, 1 in 512 of 4-64 KiB. Prints key=value lines;\n"
            "the last is ops_per_sec (op = one malloc or one free).\n");
}

/* Bands [8, 16), [16, 32), ... [2048, 4096]: band k has weight 0.7^k. */
static void fill_size_table(void)
{
    enum { BANDS = 10 };
    double weight[BANDS], total = 0, w = 1;
    for (int k = 0; k < BANDS; k++, w *= 0.7)
        total += weight[k] = w;
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed ^ 0xA110Cu);
    for (size_t i = 0; i < SIZE_TABLE; i++) {
        double pick = (double)(bench_rng_next(&rng) >> 11) * 0x1p-53 * total;
        int band = 0;
        while (band < BANDS - 1 && pick >= weight[band])
            pick -= weight[band++];
        size_t lo = (size_t)MIN_SIZE << band;
        size_t hi = band == BANDS - 1 ? MAX_SMALL : 2 * lo - 1;
        size_table[i] = bench_rng_range(&rng, lo, hi);
    }
}

int main(int argc, char **argv)
{
    cfg = (config){ 1, 200000000, 65536, 42 };
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 4, usage, &quick, &pos);
    if (quick)
        cfg.steps = 50000000;
    if (n > 0)
        cfg.threads = bench_parse_uint("alloc_test", "threads", pos[0]);
    if (n > 1)
        cfg.steps = bench_parse_uint("alloc_test", "steps", pos[1]);
    if (n > 2)
        cfg.slots = bench_parse_uint("alloc_test", "slots", pos[2]);
    if (n > 3)
        cfg.seed = bench_parse_uint("alloc_test", "seed", pos[3]);
    if (cfg.threads < 1 || cfg.slots < 1) {
        fprintf(stderr, "alloc_test: need threads >= 1 and slots >= 1\n");
        return 2;
    }
    fill_size_table();

    worker *workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("alloc_test", cfg.threads * sizeof *workers);
    pthread_barrier_init(&start_line, NULL, (unsigned)cfg.threads + 1);
    for (size_t t = 0; t < cfg.threads; t++) {
        workers[t].index = t;
        int err = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
        if (err != 0) {
            fprintf(stderr, "alloc_test: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    pthread_barrier_wait(&start_line);
    double start = bench_now();
    uint64_t mallocs = 0, frees = 0, checksum = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        pthread_join(workers[t].tid, NULL);
        mallocs += workers[t].mallocs;
        frees += workers[t].frees;
        checksum += workers[t].checksum;
    }
    double elapsed = bench_now() - start;
    pthread_barrier_destroy(&start_line);
    free(workers);

    printf("workload=alloc_test threads=%zu steps=%llu slots=%zu sizes=8..4096+4..64KiB "
           "seed=%llu\n",
           cfg.threads, (unsigned long long)cfg.steps, cfg.slots, (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f mallocs=%llu checksum=%016llx peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)mallocs, (unsigned long long)checksum, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)(mallocs + frees) / elapsed : 0.0);
    return 0;
}
