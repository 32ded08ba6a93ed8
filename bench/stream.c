/*
 * stream: a streaming producer -> consumer pipeline, one block at a time.
 * One thread mallocs blocks of 16..256 bytes, writes their first bytes and
 * passes each pointer through a single-producer/single-consumer lock-free
 * ring of 4096 slots to a second thread, which reads a byte and frees it.
 * Both threads run at once, so every free is a remote (cross-thread) free of
 * a block that was allocated moments before: the allocator must carry memory
 * back to the producer's heap at the rate the producer takes it.
 *
 * usage: stream [--quick] [objects [seed]]
 *        defaults 20000000 objects (--quick 2000000), seed 42
 *
 * Unlike xmalloc (pointers in batches of 256 through a locked queue) each
 * pointer travels alone, as in a message-passing program. A thread that finds
 * the ring full (producer) or empty (consumer) spins with a pause instruction
 * and, after a bounded number of spins, calls sched_yield, so that the program
 * also makes progress with more threads than cores. The two threads must
 * really run at once for the shape to hold: on a busy machine where they take
 * turns on one core, each runs in bursts that fill or drain the whole ring and
 * remote frees get much cheaper (glibc on 2 cores: 2.4 M/s when both run at
 * once, 30 M/s pinned to one core). The yield counts tell which happened:
 * both close to objects / 4096 means the threads took turns. Elapsed time runs from
 * starting the threads to the last free; an op is one malloc plus its free.
 * The last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

enum {
    RING_SLOTS = 4096, /* a power of two */
    MIN_SIZE = 16,
    MAX_SIZE = 256,
    SPINS_BEFORE_YIELD = 128,
    CACHE_LINE = 64,
};

/* Each index on its own cache line: the producer writes head, the consumer
 * writes tail, and each keeps a private copy of the other's index so that it
 * reads the shared one only when its copy says the ring is full or empty. */
static struct {
    _Alignas(CACHE_LINE) _Atomic uint64_t head; /* next slot the producer fills */
    _Alignas(CACHE_LINE) _Atomic uint64_t tail; /* next slot the consumer empties */
    _Alignas(CACHE_LINE) unsigned char *slots[RING_SLOTS];
} ring;

static struct {
    uint64_t objects;
    uint64_t seed;
} cfg;

/* How often each side found the ring full/empty and yielded the CPU. */
static uint64_t producer_yields, consumer_yields;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* One round of waiting: pause, and every SPINS_BEFORE_YIELD rounds give the
 * CPU away (the other side may be waiting for this core). */
static inline void backoff(unsigned *spins, uint64_t *yields)
{
    if (++*spins < SPINS_BEFORE_YIELD) {
        cpu_relax();
    } else {
        *spins = 0;
        ++*yields;
        sched_yield();
    }
}

/* The byte the producer writes at the start of object number i. */
static inline unsigned char tag_of(uint64_t i)
{
    return (unsigned char)(i * 0x9Du + 0x5Bu);
}

static void *producer_main(void *arg)
{
    (void)arg;
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed);
    uint64_t head = 0, tail_seen = 0;
    for (uint64_t i = 0; i < cfg.objects; i++) {
        size_t size = bench_rng_range(&rng, MIN_SIZE, MAX_SIZE);
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_oom("stream", size);
        /* The first 16 bytes, as a program fills in a message header. */
        memset(p, 0, 16);
        p[0] = tag_of(i);
        memcpy(p + 8, &i, sizeof i);
        if (head - tail_seen == RING_SLOTS) {
            unsigned spins = 0;
            while (head - (tail_seen = atomic_load_explicit(&ring.tail, memory_order_acquire)) ==
                   RING_SLOTS)
                backoff(&spins, &producer_yields);
        }
        ring.slots[head % RING_SLOTS] = p;
        atomic_store_explicit(&ring.head, ++head, memory_order_release);
    }
    return NULL;
}

static void *consumer_main(void *arg)
{
    (void)arg;
    uint64_t tail = 0, head_seen = 0;
    for (uint64_t i = 0; i < cfg.objects; i++) {
        if (tail == head_seen) {
            unsigned spins = 0;
            while ((head_seen = atomic_load_explicit(&ring.head, memory_order_acquire)) == tail)
                backoff(&spins, &consumer_yields);
        }
        unsigned char *p = ring.slots[tail % RING_SLOTS];
        atomic_store_explicit(&ring.tail, ++tail, memory_order_release);
        if (p[0] != tag_of(i)) {
            fprintf(stderr, "stream: object %llu at %p: first byte %u, expected %u\n",
                    (unsigned long long)i, (void *)p, p[0], tag_of(i));
            exit(1);
        }
        free(p);
    }
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: stream [--quick] [objects [seed]]\n"
            "  objects  blocks passed from producer to consumer  default 20000000 "
            "(--quick 2000000)\n"
            "  seed     PRNG seed for the sizes (16..256 B)      default 42\n"
            "Prints key=value lines; the last is ops_per_sec (op = one malloc + its "
            "remote free).\n");
}

int main(int argc, char **argv)
{
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 2, usage, &quick, &pos);
    cfg.objects = quick ? 2000000 : 20000000;
    cfg.seed = 42;
    if (n > 0)
        cfg.objects = bench_parse_uint("stream", "objects", pos[0]);
    if (n > 1)
        cfg.seed = bench_parse_uint("stream", "seed", pos[1]);

    pthread_t producer, consumer;
    double start = bench_now();
    int err = pthread_create(&consumer, NULL, consumer_main, NULL);
    if (err == 0)
        err = pthread_create(&producer, NULL, producer_main, NULL);
    if (err != 0) {
        fprintf(stderr, "stream: pthread_create: %s\n", strerror(err));
        return 1;
    }
    pthread_join(producer, NULL);
    pthread_join(consumer, NULL);
    double elapsed = bench_now() - start;

    printf("workload=stream objects=%llu sizes=%d..%d ring=%d seed=%llu\n",
           (unsigned long long)cfg.objects, MIN_SIZE, MAX_SIZE, RING_SLOTS,
           (unsigned long long)cfg.seed);
    printf("elapsed_s=%.3f ns_per_object=%.2f producer_yields=%llu consumer_yields=%llu "
           "peak_rss_kib=%lu\n",
           elapsed, cfg.objects ? elapsed * 1e9 / (double)cfg.objects : 0.0,
           (unsigned long long)producer_yields, (unsigned long long)consumer_yields,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)cfg.objects / elapsed : 0.0);
    return 0;
}
