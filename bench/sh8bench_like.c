/*
 * sh8bench_like: the shape of sh8bench, written from its description: threads
 * allocate batches of blocks whose sizes cycle through a wide range, free them
 * in orders unlike the one they were allocated in, and pass part of each batch
 * to another thread to free.
 *
 * usage: sh8bench_like [--quick] [threads [rounds [batch [max_size [pass_every [seed]]]]]]
 *        defaults max(2, online CPUs) threads, 10000 rounds, batch 2000,
 *        max_size 16384, pass_every 4, seed 42 (--quick: 1000 rounds)
 *
 * Sizes come from a cycle of 1024 sizes, log-uniform over [1, max_size] and
 * sorted: a sawtooth from 1 byte up to max_size that wraps around. Block i of a
 * batch takes the cycle's entry (start + i) mod 1024, where start moves on by
 * 389 at each round and differs by 97 between threads, so every thread walks
 * the whole range in every round from a different point.
 *
 * Each round, each of `threads` threads
 *   1. mallocs `batch` blocks;
 *   2. passes every `pass_every`-th block (0: none), in one malloc'd message,
 *      to the next thread (the last to the first), whose inbox is a
 *      mutex-guarded list; a sender that finds 8 messages there waits (draining
 *      its own inbox and sleeping 20 us at a time) until there is room, so the
 *      memory in flight stays bounded;
 *   3. frees the blocks it kept: those at odd indices from the last to the
 *      first (reverse order), then those at even indices from both ends
 *      inwards, alternately (interleaved: first, last, second, second to
 *      last, ...);
 *   4. frees every block in its inbox (the previous thread's), in the order
 *      they were allocated: cross-thread frees.
 * A thread that is done with its rounds keeps draining its inbox until every
 * thread is done. With one thread the passed blocks come back to itself.
 * `stalls` counts the 20 us waits; it depends on scheduling.
 *
 * Every block has a tag of its size in its first and last byte, checked when
 * it is freed (exit 1 if it was overwritten); the checksum sums the sizes
 * freed and is the same under every allocator. Wall time runs from the start
 * line to the last free. An op is one block malloc or one block free (the
 * messages are not counted); mallocs must equal frees. The last line printed
 * is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>

enum { CYCLE = 1024, START_STEP = 389, THREAD_STEP = 97, INBOX_MAX = 8 };

typedef struct config {
    size_t threads;
    uint64_t rounds;
    size_t batch;
    size_t max_size;
    size_t pass_every;
    uint64_t seed;
} config;

typedef struct item {
    unsigned char *block;
    size_t size;
} item;

/* A message: head.count blocks for the receiving thread to free. */
typedef struct message {
    bench_message head;
    item items[];
} message;

typedef struct worker {
    bench_relay_worker relay; /* its inbox is drained oldest message first */
    uint64_t mallocs;
    uint64_t frees;
    uint64_t passed; /* blocks sent to the next thread */
    uint64_t checksum;
    char pad[64]; /* keeps neighbouring workers' counters off one cache line */
} worker;

static config cfg;
static size_t size_cycle[CYCLE];
static worker *workers;

static unsigned char tag_of(size_t size)
{
    return (unsigned char)(size * 37u + 0x5Bu);
}

static unsigned char *new_block(worker *w, size_t size)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("sh8bench_like", size);
    block[0] = tag_of(size);
    block[size - 1] = tag_of(size);
    w->mallocs++;
    return block;
}

static void release(worker *w, item it)
{
    if (it.block[0] != tag_of(it.size) || it.block[it.size - 1] != tag_of(it.size)) {
        fprintf(stderr, "sh8bench_like: block %p of %zu bytes was overwritten\n",
                (void *)it.block, it.size);
        exit(1);
    }
    free(it.block);
    w->checksum += it.size;
    w->frees++;
}

/* Frees every block in self's inbox, oldest message first, and the messages. */
static void drain_inbox(bench_relay_worker *self)
{
    worker *w = (worker *)self;
    message *m = (message *)bench_relay_take(self, true);
    while (m != NULL) {
        message *next = (message *)m->head.next;
        for (size_t i = 0; i < m->head.count; i++)
            release(w, m->items[i]);
        free(m);
        m = next;
    }
}

static bench_relay relay = { .inbox_max = INBOX_MAX, .drain = drain_inbox };

static bool passed(size_t i)
{
    return cfg.pass_every != 0 && i % cfg.pass_every == cfg.pass_every - 1;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    worker *next = &workers[(w->relay.thread.index + 1) % cfg.threads];
    item *items = malloc(cfg.batch * sizeof *items);
    if (items == NULL)
        bench_oom("sh8bench_like", cfg.batch * sizeof *items);
    size_t per_message = cfg.pass_every != 0 ? cfg.batch / cfg.pass_every : 0;
    size_t start = (w->relay.thread.index * THREAD_STEP) % CYCLE;

    pthread_barrier_wait(&relay.start_line);
    for (uint64_t round = 0; round < cfg.rounds; round++) {
        for (size_t i = 0; i < cfg.batch; i++) {
            size_t size = size_cycle[(start + i) % CYCLE];
            items[i] = (item){ new_block(w, size), size };
        }
        start = (start + START_STEP) % CYCLE;

        if (per_message > 0) {
            message *m = malloc(sizeof *m + per_message * sizeof m->items[0]);
            if (m == NULL)
                bench_oom("sh8bench_like", sizeof *m + per_message * sizeof m->items[0]);
            m->head.count = 0;
            for (size_t i = 0; i < cfg.batch; i++)
                if (passed(i))
                    m->items[m->head.count++] = items[i];
            /* Counted before the send: from then on the receiver may free m. */
            w->passed += m->head.count;
            bench_relay_send(&relay, &w->relay, &next->relay, &m->head);
        }

        /* Reverse: the odd indices, last first. */
        for (size_t i = cfg.batch; i-- > 0;)
            if (i % 2 == 1 && !passed(i))
                release(w, items[i]);
        /* Interleaved: the even indices from both ends inwards. */
        if (cfg.batch > 0) {
            size_t lo = 0, hi = (cfg.batch - 1) & ~(size_t)1;
            for (bool front = true; lo <= hi; front = !front) {
                size_t i = front ? lo : hi;
                if (!passed(i))
                    release(w, items[i]);
                if (front)
                    lo += 2;
                else if (hi < 2)
                    break;
                else
                    hi -= 2;
            }
        }
        drain_inbox(&w->relay);
    }
    free(items);
    bench_relay_finish(&relay, &w->relay);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sh8bench_like [--quick] [threads [rounds [batch [max_size [pass_every "
            "[seed]]]]]]\n"
            "  threads     threads in a ring                 default max(2, online CPUs)\n"
            "  rounds      batches per thread                default 10000 (--quick 1000)\n"
            "  batch       blocks per batch                  default 2000\n"
            "  max_size    largest block in bytes (>= 1)     default 16384\n"
            "  pass_every  every pass_every-th block of a batch is freed by the next thread\n"
            "              (0: none)                         default 4\n"
            "  seed        PRNG seed (the size cycle)        default 42\n"
            "Sizes cycle through 1..max_size, log-uniform. Prints key=value lines; the last\n"
            "is ops_per_sec (op = one block malloc or one block free).\n");
}

static void parse_args(int argc, char **argv)
{
    config parsed = { bench_cpus_at_least(2), 10000, 2000, 16384, 4, 42 };
    const bench_param params[] = {
        { "threads", .size = &parsed.threads },
        { "rounds", .u64 = &parsed.rounds, .quick = 1000 },
        { "batch", .size = &parsed.batch },
        { "max_size", .size = &parsed.max_size },
        { "pass_every", .size = &parsed.pass_every },
        { "seed", .u64 = &parsed.seed },
    };
    bench_parse_params("sh8bench_like", argc, argv, usage, params,
                       (int)(sizeof params / sizeof params[0]));
    cfg = parsed;
    if (cfg.threads < 1 || cfg.batch < 1 || cfg.max_size < 1) {
        fprintf(stderr, "sh8bench_like: need threads, batch, max_size >= 1\n");
        exit(2);
    }
}

static int compare_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* Log-uniform: a power-of-two band [1, 2), [2, 4), ... chosen uniformly, then a
 * size uniform in it (capped at max_size); sorted into a rising sawtooth. */
static void fill_size_cycle(void)
{
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed ^ 0x58B3u);
    size_t bands = 0;
    while (((size_t)1 << bands) <= cfg.max_size)
        bands++;
    for (size_t i = 0; i < CYCLE; i++) {
        size_t lo = (size_t)1 << bench_rng_range(&rng, 0, bands - 1);
        size_t hi = 2 * lo - 1 < cfg.max_size ? 2 * lo - 1 : cfg.max_size;
        size_cycle[i] = bench_rng_range(&rng, lo, hi);
    }
    qsort(size_cycle, CYCLE, sizeof size_cycle[0], compare_size);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    fill_size_cycle();

    workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("sh8bench_like", cfg.threads * sizeof *workers);
    double elapsed = bench_relay_run("sh8bench_like", &relay, workers, sizeof *workers,
                                     cfg.threads, worker_main);

    uint64_t mallocs = 0, frees = 0, passed_blocks = 0, stalls = 0, checksum = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        mallocs += workers[t].mallocs;
        frees += workers[t].frees;
        passed_blocks += workers[t].passed;
        stalls += workers[t].relay.stalls;
        checksum += workers[t].checksum;
    }
    free(workers);
    bench_check_all_freed("sh8bench_like", mallocs, frees);

    printf("workload=sh8bench_like threads=%zu rounds=%llu batch=%zu sizes=1..%zu "
           "pass_every=%zu seed=%llu\n",
           cfg.threads, (unsigned long long)cfg.rounds, cfg.batch, cfg.max_size,
           cfg.pass_every, (unsigned long long)cfg.seed);
    printf("passed_blocks=%llu stalls=%llu\n", (unsigned long long)passed_blocks,
           (unsigned long long)stalls);
    printf("elapsed_s=%.3f ops=%llu checksum=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)(mallocs + frees), (unsigned long long)checksum,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)(mallocs + frees) / elapsed : 0.0);
    return 0;
}
