/*
 * glibc_thread: the shape of glibc's bench-malloc-thread, written from its
 * description: T threads, each with its own small working set, replace random
 * blocks with blocks of random sizes drawn from a distribution that is mostly
 * small with a long tail.
 *
 * usage: glibc_thread [--quick] [threads [iterations [slots [max_size [seed]]]]]
 *
 * Each thread fills its `slots` slots, then runs `iterations` replacements: pick
 * a random slot, free its block, malloc a new one of a random size. Sizes come
 * from a density falling as 1/size^1.5 between 8 bytes and `max_size`, so about
 * half of the blocks are under 32 bytes and a few are tens of KiB. The threads
 * share nothing but the allocator. (glibc runs for a fixed time; this runs a
 * fixed number of iterations, so the checksum can be compared.)
 *
 * Each block carries a 32-bit value at its start and a tag in its last byte;
 * the free checks both and sums the values into a checksum that is the same
 * under every allocator. An op is one replacement (one free plus one malloc).
 * The last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

enum { SIZE_TABLE = 8192, MIN_SIZE = 8 };

typedef struct config {
    size_t threads;
    uint64_t iterations;
    size_t slots;
    size_t max_size;
    uint64_t seed;
} config;

typedef struct worker {
    pthread_t tid;
    size_t index;
    uint64_t checksum;
    char pad[64];
} worker;

typedef struct slot {
    unsigned char *block;
    size_t size;
} slot;

static config cfg;
static size_t size_table[SIZE_TABLE];
static pthread_barrier_t start_line;

static unsigned char tag_of(uint32_t value, size_t size)
{
    return (unsigned char)(value ^ (value >> 11) ^ size ^ 0x96u);
}

static void fill(slot *s, size_t size, uint32_t value)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("glibc_thread", size);
    memcpy(block, &value, sizeof value);
    block[size - 1] = tag_of(value, size); /* size >= 8: no overlap with the value */
    s->block = block;
    s->size = size;
}

static uint64_t empty(slot *s)
{
    uint32_t value;
    memcpy(&value, s->block, sizeof value);
    if (s->block[s->size - 1] != tag_of(value, s->size)) {
        fprintf(stderr, "glibc_thread: block %p of %zu bytes was overwritten\n",
                (void *)s->block, s->size);
        exit(1);
    }
    free(s->block);
    s->block = NULL;
    return value;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed * 31337u + w->index);
    slot *slots = malloc(cfg.slots * sizeof *slots);
    if (slots == NULL)
        bench_oom("glibc_thread", cfg.slots * sizeof *slots);
    for (size_t i = 0; i < cfg.slots; i++) {
        uint64_t r = bench_rng_next(&rng);
        fill(&slots[i], size_table[r % SIZE_TABLE], (uint32_t)(r >> 32));
    }

    uint64_t checksum = 0;
    pthread_barrier_wait(&start_line);
    for (uint64_t i = 0; i < cfg.iterations; i++) {
        uint64_t r = bench_rng_next(&rng);
        slot *s = &slots[(r >> 13) % cfg.slots];
        checksum += empty(s);
        fill(s, size_table[r % SIZE_TABLE], (uint32_t)(r >> 32));
    }
    for (size_t i = 0; i < cfg.slots; i++)
        checksum += empty(&slots[i]);
    free(slots);
    w->checksum = checksum;
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: glibc_thread [--quick] [threads [iterations [slots [max_size [seed]]]]]\n"
            "  threads     threads                          default max(2, online CPUs)\n"
            "  iterations  replacements per thread          default 200000000 (--quick 40000000)\n"
            "  slots       working-set slots per thread     default 1000\n"
            "  max_size    largest block in bytes (>= 8)    default 32768\n"
            "  seed        PRNG seed                        default 42\n"
            "Sizes: density 1/size^1.5 over [8, max_size]. Prints key=value lines; the\n"
            "last is ops_per_sec (op = one free + one malloc).\n");
}

/* Square root by Newton's method (x >= 1), so that the program needs no libm. */
static double root(double x)
{
    double r = x;
    for (int i = 0; i < 100; i++)
        r = (r + x / r) / 2;
    return r;
}

/* Inverse-transform sampling of p(s) ~ s^-1.5 on [MIN_SIZE, max_size]. */
static void fill_size_table(void)
{
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed ^ 0x7EADu);
    double a = 1 / root((double)MIN_SIZE), b = 1 / root((double)cfg.max_size + 1);
    for (size_t i = 0; i < SIZE_TABLE; i++) {
        double u = (double)(bench_rng_next(&rng) >> 11) * 0x1p-53;
        double x = a - u * (a - b); /* uniform in (b, a] */
        size_t size = (size_t)(1 / (x * x));
        size_table[i] = size < MIN_SIZE ? MIN_SIZE : size > cfg.max_size ? cfg.max_size : size;
    }
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cfg = (config){ cpus > 2 ? (size_t)cpus : 2, 200000000, 1000, 32768, 42 };
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 5, usage, &quick, &pos);
    if (quick)
        cfg.iterations = 40000000;
    if (n > 0)
        cfg.threads = bench_parse_uint("glibc_thread", "threads", pos[0]);
    if (n > 1)
        cfg.iterations = bench_parse_uint("glibc_thread", "iterations", pos[1]);
    if (n > 2)
        cfg.slots = bench_parse_uint("glibc_thread", "slots", pos[2]);
    if (n > 3)
        cfg.max_size = bench_parse_uint("glibc_thread", "max_size", pos[3]);
    if (n > 4)
        cfg.seed = bench_parse_uint("glibc_thread", "seed", pos[4]);
    if (cfg.threads < 1 || cfg.slots < 1 || cfg.max_size < MIN_SIZE) {
        fprintf(stderr, "glibc_thread: need threads, slots >= 1 and max_size >= 8\n");
        return 2;
    }
    fill_size_table();
    size_t small = 0;
    for (size_t i = 0; i < SIZE_TABLE; i++)
        small += size_table[i] <= 256;

    worker *workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("glibc_thread", cfg.threads * sizeof *workers);
    pthread_barrier_init(&start_line, NULL, (unsigned)cfg.threads + 1);
    for (size_t t = 0; t < cfg.threads; t++) {
        workers[t].index = t;
        int err = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
        if (err != 0) {
            fprintf(stderr, "glibc_thread: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    pthread_barrier_wait(&start_line);
    double start = bench_now();
    uint64_t checksum = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        pthread_join(workers[t].tid, NULL);
        checksum += workers[t].checksum;
    }
    double elapsed = bench_now() - start;
    pthread_barrier_destroy(&start_line);
    free(workers);

    uint64_t ops = cfg.iterations * cfg.threads;
    printf("workload=glibc_thread threads=%zu iterations=%llu slots=%zu sizes=8..%zu "
           "small_share_pct=%.1f seed=%llu\n",
           cfg.threads, (unsigned long long)cfg.iterations, cfg.slots, cfg.max_size,
           100.0 * (double)small / SIZE_TABLE, (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f ops=%llu checksum=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)ops, (unsigned long long)checksum, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
