/*
 * mstress: rounds of short-lived threads that allocate, share and free blocks
 * of every size class at random (the shape of mimalloc's stress test; this
 * program is written from scratch).
 *
 * usage: mstress [--quick] [threads [rounds [scale [seed [max_size]]]]]
 *        defaults 16 threads, 50 rounds, scale 1200 (--quick: 20 rounds, scale 600), seed 42,
 *        max_size 4 MiB
 *
 * Each round creates `threads` threads and joins them. A thread does
 * scale * 100 iterations; each iteration, at random:
 *   45%  replaces an item of its own local set (256 items; a local free),
 *   35%  exchanges a new item into a random slot of a shared array of 4096
 *        and frees what was there: often another thread's block, or one left
 *        by a thread of an earlier round that has exited,
 *   10%  empties a random shared slot (frees its item),
 *   10%  moves one of its local items into a random shared slot.
 * An item is one block, or 1 time in 10 an array block holding 2..8 blocks.
 * Block sizes are mostly small and log-uniform in 8..1023 B, 1 in 50 is
 * 1..64 KiB, 1 in 5000 is 1..4 MiB. A max_size below 64 KiB leaves out the
 * 1..64 KiB blocks, one below 4 MiB the 1..4 MiB ones (both draws then give
 * a small block instead), so that a run can tell which sizes cost what. Every block carries its size and a hash of
 * size and address in its first 8 bytes and a check byte at its end, checked
 * on free (exit 1 on a mismatch). When a thread ends, a quarter of its local
 * items go to random shared slots and it frees the rest; after each round the
 * main thread frees each shared slot with probability 3/4, so a quarter
 * survive into the next round. The main thread frees everything left at the
 * end.
 *
 * Work is fixed; ops_per_sec is mallocs (array blocks included) per second of
 * wall time over all rounds, thread creation included. The last line printed
 * is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

enum {
    SHARED_SLOTS = 4096, /* a power of two */
    LOCAL_ITEMS = 256,   /* a power of two */
    ARRAY_MIN = 2,
    ARRAY_MAX = 8,
};

static struct {
    size_t threads;
    uint64_t rounds;
    uint64_t scale;
    uint64_t seed;
    size_t max_size;
} cfg;

/* A slot holds an item: a block pointer, with bit 0 set if it is an array
 * block (malloc's alignment leaves bit 0 free). */
typedef uintptr_t item;
static _Atomic item shared[SHARED_SLOTS];

typedef struct worker {
    _Alignas(64) pthread_t tid;
    uint64_t round;
    unsigned index;
    uint64_t mallocs;
} worker;

/* An array block: its header word (size and hash, as every block), its
 * count, its elements, and a spare word that holds the check byte. */
typedef struct array_block {
    uint64_t header;
    uint64_t count;
    unsigned char *elems[];
} array_block;

static uint32_t hash_of(size_t size, const void *p)
{
    uint64_t x = (uint64_t)size * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)p;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(x >> 32);
}

static void *new_block(worker *w, size_t size)
{
    unsigned char *p = malloc(size);
    if (p == NULL)
        bench_oom("mstress", size);
    w->mallocs++;
    uint32_t h = hash_of(size, p);
    uint64_t header = (uint64_t)size | (uint64_t)h << 32;
    memcpy(p, &header, sizeof header);
    if (size > sizeof header)
        p[size - 1] = (unsigned char)h;
    return p;
}

static void free_block(void *block)
{
    unsigned char *p = block;
    uint64_t header;
    memcpy(&header, p, sizeof header);
    size_t size = (size_t)(uint32_t)header;
    uint32_t h = hash_of(size, p);
    if ((uint32_t)(header >> 32) != h || size < sizeof header ||
        (size > sizeof header && p[size - 1] != (unsigned char)h)) {
        fprintf(stderr, "mstress: block %p (size %zu by its header) was overwritten\n",
                (void *)p, size);
        exit(1);
    }
    free(p);
}

/* Mostly small, log-uniform in 8..1023 B; 1 in 50 is 1..64 KiB, 1 in 5000 is 1..4 MiB. */
static size_t pick_size(bench_rng *rng)
{
    uint64_t r = bench_rng_next(rng);
    if (r % 5000 == 0 && cfg.max_size >= ((size_t)4 << 20))
        return bench_rng_range(rng, (size_t)1 << 20, (size_t)4 << 20);
    if ((r >> 16) % 50 == 0 && cfg.max_size >= 65536)
        return bench_rng_range(rng, 1024, 65536);
    unsigned c = (unsigned)((r >> 32) % 7); /* 8..15, 16..31, ..., 512..1023 */
    return bench_rng_range(rng, (size_t)8 << c, ((size_t)16 << c) - 1);
}

static item new_item(worker *w, bench_rng *rng)
{
    if (bench_rng_next(rng) % 10 != 0)
        return (item)new_block(w, pick_size(rng));
    size_t count = bench_rng_range(rng, ARRAY_MIN, ARRAY_MAX);
    /* One spare element at the end keeps the check byte clear of the pointers. */
    array_block *a = new_block(w, sizeof *a + (count + 1) * sizeof a->elems[0]);
    a->count = count;
    for (size_t i = 0; i < count; i++)
        a->elems[i] = new_block(w, pick_size(rng));
    return (item)a | 1;
}

static void free_item(item it)
{
    if (it == 0)
        return;
    if (it & 1) {
        array_block *a = (array_block *)(it & ~(item)1);
        if (a->count < ARRAY_MIN || a->count > ARRAY_MAX) {
            fprintf(stderr, "mstress: array block %p holds %llu elements\n", (void *)a,
                    (unsigned long long)a->count);
            exit(1);
        }
        for (size_t i = 0; i < a->count; i++)
            free_block(a->elems[i]);
        free_block(a);
    } else {
        free_block((void *)it);
    }
}

static size_t random_slot(bench_rng *rng)
{
    return (size_t)(bench_rng_next(rng) >> 40) % SHARED_SLOTS;
}

/* acq_rel: whoever takes an item out sees what was written into it. */
static void put_shared(bench_rng *rng, item it)
{
    free_item(atomic_exchange_explicit(&shared[random_slot(rng)], it, memory_order_acq_rel));
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, (cfg.seed * 1000003u + w->round) * 1009u + w->index);
    item local[LOCAL_ITEMS] = { 0 };
    uint64_t iterations = cfg.scale * 100;
    for (uint64_t i = 0; i < iterations; i++) {
        uint64_t r = bench_rng_next(&rng);
        unsigned pct = (unsigned)(r % 100);
        size_t l = (size_t)(r >> 40) % LOCAL_ITEMS;
        if (pct < 45) {
            free_item(local[l]);
            local[l] = new_item(w, &rng);
        } else if (pct < 80) {
            put_shared(&rng, new_item(w, &rng));
        } else if (pct < 90) {
            free_item(atomic_exchange_explicit(&shared[random_slot(&rng)], 0,
                                               memory_order_acq_rel));
        } else if (local[l] != 0) {
            put_shared(&rng, local[l]);
            local[l] = 0;
        }
    }
    /* A quarter of what the thread holds outlives it in the shared slots. */
    for (size_t l = 0; l < LOCAL_ITEMS; l++) {
        if (local[l] != 0 && bench_rng_next(&rng) % 4 == 0)
            put_shared(&rng, local[l]);
        else
            free_item(local[l]);
    }
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mstress [--quick] [threads [rounds [scale [seed [max_size]]]]]\n"
            "  threads  threads per round                        default 16\n"
            "  rounds   rounds of create, run, join              default 50 (--quick 20)\n"
            "  scale    iterations per thread and round, / 100   default 1200 (--quick 600)\n"
            "  seed     PRNG seed                                default 42\n"
            "  max_size below 65536: no 1..64 KiB blocks; below 4194304: no 1..4 MiB\n"
            "           blocks                                   default 4194304\n"
            "Prints key=value lines; the last is ops_per_sec (op = one malloc).\n");
}

int main(int argc, char **argv)
{
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 5, usage, &quick, &pos);
    cfg.threads = 16;
    cfg.rounds = quick ? 20 : 50;
    cfg.scale = quick ? 600 : 1200;
    cfg.seed = 42;
    cfg.max_size = (size_t)4 << 20;
    if (n > 0)
        cfg.threads = bench_parse_uint("mstress", "threads", pos[0]);
    if (n > 1)
        cfg.rounds = bench_parse_uint("mstress", "rounds", pos[1]);
    if (n > 2)
        cfg.scale = bench_parse_uint("mstress", "scale", pos[2]);
    if (n > 3)
        cfg.seed = bench_parse_uint("mstress", "seed", pos[3]);
    if (n > 4)
        cfg.max_size = bench_parse_uint("mstress", "max_size", pos[4]);
    if (cfg.threads < 1) {
        fprintf(stderr, "mstress: threads must be at least 1\n");
        return 2;
    }

    worker *workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("mstress", cfg.threads * sizeof *workers);
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed);
    uint64_t mallocs = 0, survivors = 0;

    double start = bench_now();
    for (uint64_t round = 0; round < cfg.rounds; round++) {
        for (size_t t = 0; t < cfg.threads; t++) {
            workers[t].round = round;
            workers[t].index = (unsigned)t;
            workers[t].mallocs = 0;
            int err = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
            if (err != 0) {
                fprintf(stderr, "mstress: pthread_create: %s\n", strerror(err));
                return 1;
            }
        }
        for (size_t t = 0; t < cfg.threads; t++) {
            pthread_join(workers[t].tid, NULL);
            mallocs += workers[t].mallocs;
        }
        /* Three quarters of the shared items die with the round; the rest
         * are freed by threads of later rounds (or at the end). */
        for (size_t s = 0; s < SHARED_SLOTS; s++) {
            if (bench_rng_next(&rng) % 4 != 0)
                free_item(atomic_exchange_explicit(&shared[s], 0, memory_order_acquire));
            else
                survivors += atomic_load_explicit(&shared[s], memory_order_relaxed) != 0;
        }
    }
    double elapsed = bench_now() - start;
    unsigned long peak = bench_peak_rss_kib();

    for (size_t s = 0; s < SHARED_SLOTS; s++)
        free_item(atomic_exchange_explicit(&shared[s], 0, memory_order_acquire));
    free(workers);

    printf("workload=mstress threads=%zu rounds=%llu scale=%llu seed=%llu\n", cfg.threads,
           (unsigned long long)cfg.rounds, (unsigned long long)cfg.scale,
           (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f mallocs=%llu survivors_per_round=%.0f peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)mallocs,
           cfg.rounds ? (double)survivors / (double)cfg.rounds : 0.0, peak);
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)mallocs / elapsed : 0.0);
    return 0;
}
