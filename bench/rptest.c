/*
 * rptest: the shape of rpmalloc's benchmark loop, written from its description.
 *
 * usage: rptest [--quick] [threads [steps [slots [max_size [handoff [batch [seed]]]]]]]
 *
 * Each of `threads` threads owns a working set of `slots` slots. A step picks a
 * random slot: an empty slot gets a new block, a full one has its block freed,
 * so the working set hovers around half full and blocks die in random order.
 * Sizes run from 16 bytes to `max_size`, skewed small: a power-of-two band is
 * chosen with weights falling linearly from the smallest band to the largest,
 * then a size uniform in it.
 *
 * Every `handoff` steps a thread takes up to `batch` live blocks out of its
 * working set (from a cursor that walks the slots) and pushes them, in one
 * malloc'd message, onto the inbox of the next thread, a mutex-guarded list;
 * then it frees whatever its own inbox holds. So a steady fraction of the
 * blocks is freed by a thread other than the one that allocated them. An inbox
 * holds at most 256 messages: a sender that finds it full waits (draining its
 * own inbox and sleeping 20 us at a time) until there is room, and a thread
 * that is done with its steps keeps draining until every thread is done. So
 * every batch crosses threads whatever the scheduling, and the memory in flight
 * stays bounded (without the bound, a thread left behind under glibc let over
 * 1 GiB pile up). `stalls` counts the waits; it depends on scheduling.
 *
 * Every block carries a 64-bit value from its allocating thread's generator,
 * its size, and a tag in its last byte; whoever frees a block checks it and adds
 * the value to a checksum. The set of blocks does not depend on scheduling, so
 * the checksum is the same under every allocator. Wall time runs from the start
 * line to the last free; an op is one block malloc or one block free (the
 * hand-off messages are not counted). The last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

enum { SIZE_TABLE = 4096, MIN_SIZE = 16, INBOX_MAX = 256 };

typedef struct config {
    size_t threads;
    uint64_t steps;
    size_t slots;
    size_t max_size;
    uint64_t handoff;
    size_t batch;
    uint64_t seed;
} config;

/* A hand-off message: head.count blocks for the receiving thread to free. */
typedef struct message {
    bench_message head;
    unsigned char *blocks[];
} message;

typedef struct worker {
    bench_relay_worker relay; /* its inbox is drained newest message first */
    uint64_t mallocs;
    uint64_t handed_off; /* batches pushed to the next thread */
    uint64_t frees;
    uint64_t checksum;
    char pad[64]; /* keeps neighbouring workers' counters off one cache line */
} worker;

static config cfg;
static size_t size_table[SIZE_TABLE];
static worker *workers;

static unsigned char tag_of(uint64_t value)
{
    return (unsigned char)(value ^ (value >> 29) ^ 0x5Au);
}

/* Block layout: [0, 8) the value, [8, 12) the size, [size - 1] the tag. */
static unsigned char *new_block(worker *w, size_t size, uint64_t value)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("rptest", size);
    uint32_t size32 = (uint32_t)size;
    memcpy(block, &value, sizeof value);
    memcpy(block + 8, &size32, sizeof size32);
    block[size - 1] = tag_of(value);
    w->mallocs++;
    return block;
}

static void release_block(worker *w, unsigned char *block)
{
    uint64_t value;
    uint32_t size;
    memcpy(&value, block, sizeof value);
    memcpy(&size, block + 8, sizeof size);
    if (size < MIN_SIZE || size > cfg.max_size || block[size - 1] != tag_of(value)) {
        fprintf(stderr, "rptest: block %p was overwritten\n", (void *)block);
        exit(1);
    }
    w->checksum += value;
    w->frees++;
    free(block);
}

/* Frees every block in self's inbox, and the messages. */
static void drain_inbox(bench_relay_worker *self)
{
    worker *w = (worker *)self;
    message *m = (message *)bench_relay_take(self, false);
    while (m != NULL) {
        message *next = (message *)m->head.next;
        for (size_t i = 0; i < m->head.count; i++)
            release_block(w, m->blocks[i]);
        free(m);
        m = next;
    }
}

static bench_relay relay = { .inbox_max = INBOX_MAX, .drain = drain_inbox };

/* Moves up to cfg.batch live blocks, found from *cursor on, to `to`'s inbox;
 * while that inbox is full, drains its own and waits. */
static void hand_off(worker *from, unsigned char **slots, size_t *cursor, worker *to)
{
    message *m = malloc(sizeof *m + cfg.batch * sizeof m->blocks[0]);
    if (m == NULL)
        bench_oom("rptest", sizeof *m + cfg.batch * sizeof m->blocks[0]);
    m->head.count = 0;
    /* Look at no more than 2 * batch slots: about half of them are full. */
    for (size_t seen = 0; seen < 2 * cfg.batch && m->head.count < cfg.batch; seen++) {
        size_t s = *cursor;
        *cursor = s + 1 == cfg.slots ? 0 : s + 1;
        if (slots[s] != NULL) {
            m->blocks[m->head.count++] = slots[s];
            slots[s] = NULL;
        }
    }
    if (m->head.count == 0) {
        free(m);
        return;
    }
    bench_relay_send(&relay, &from->relay, &to->relay, &m->head);
    from->handed_off++;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    worker *next = &workers[(w->relay.thread.index + 1) % cfg.threads];
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed * 1000003u + w->relay.thread.index);
    unsigned char **slots = calloc(cfg.slots, sizeof *slots);
    if (slots == NULL)
        bench_oom("rptest", cfg.slots * sizeof *slots);
    size_t cursor = 0;

    pthread_barrier_wait(&relay.start_line);
    for (uint64_t step = 1; step <= cfg.steps; step++) {
        uint64_t r = bench_rng_next(&rng);
        size_t s = (size_t)(r % cfg.slots);
        if (slots[s] != NULL) {
            release_block(w, slots[s]);
            slots[s] = NULL;
        } else {
            size_t size = size_table[(r >> 40) % SIZE_TABLE];
            slots[s] = new_block(w, size, bench_rng_next(&rng));
        }
        if (step % cfg.handoff == 0) {
            if (cfg.threads > 1)
                hand_off(w, slots, &cursor, next);
            drain_inbox(&w->relay);
        }
    }
    for (size_t s = 0; s < cfg.slots; s++)
        if (slots[s] != NULL)
            release_block(w, slots[s]);
    free(slots);
    bench_relay_finish(&relay, &w->relay);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: rptest [--quick] [threads [steps [slots [max_size [handoff [batch "
            "[seed]]]]]]]\n"
            "  threads   worker threads                     default max(2, online CPUs)\n"
            "  steps     slot operations per thread          default 40000000 (--quick 10000000)\n"
            "  slots     working-set slots per thread        default 8192\n"
            "  max_size  largest block in bytes (>= 16)      default 16384\n"
            "  handoff   steps between cross-thread hand-offs default 256\n"
            "  batch     most blocks per hand-off            default 32\n"
            "  seed      PRNG seed                           default 42\n"
            "Sizes 16..max_size, skewed small. Prints key=value lines; the last is\n"
            "ops_per_sec (op = one block malloc or one block free).\n");
}

static void parse_args(int argc, char **argv)
{
    config parsed = { bench_cpus_at_least(2), 40000000, 8192, 16384, 256, 32, 42 };
    const bench_param params[] = {
        { "threads", .size = &parsed.threads },
        { "steps", .u64 = &parsed.steps, .quick = 10000000 },
        { "slots", .size = &parsed.slots },
        { "max_size", .size = &parsed.max_size },
        { "handoff", .u64 = &parsed.handoff },
        { "batch", .size = &parsed.batch },
        { "seed", .u64 = &parsed.seed },
    };
    bench_parse_params("rptest", argc, argv, usage, params,
                       (int)(sizeof params / sizeof params[0]));
    cfg = parsed;
    if (cfg.threads < 1 || cfg.slots < 1 || cfg.max_size < MIN_SIZE ||
        cfg.max_size > UINT32_MAX || cfg.handoff < 1 || cfg.batch < 1) {
        fprintf(stderr, "rptest: need threads, slots, handoff, batch >= 1 and "
                        "16 <= max_size < 4 GiB\n");
        exit(2);
    }
}

/* Bands [16, 32), [32, 64), ... up to max_size; band k of B has weight B - k. */
static void fill_size_table(void)
{
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed ^ 0x5151u);
    size_t bands = 0;
    while (((size_t)MIN_SIZE << bands) <= cfg.max_size)
        bands++;
    size_t total_weight = bands * (bands + 1) / 2;
    for (size_t i = 0; i < SIZE_TABLE; i++) {
        size_t pick = bench_rng_range(&rng, 0, total_weight - 1), band = 0;
        while (pick >= bands - band) {
            pick -= bands - band;
            band++;
        }
        size_t lo = (size_t)MIN_SIZE << band;
        size_t hi = 2 * lo - 1 < cfg.max_size ? 2 * lo - 1 : cfg.max_size;
        size_table[i] = bench_rng_range(&rng, lo, hi);
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    fill_size_table();

    workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("rptest", cfg.threads * sizeof *workers);
    double elapsed =
        bench_relay_run("rptest", &relay, workers, sizeof *workers, cfg.threads, worker_main);

    uint64_t mallocs = 0, frees = 0, checksum = 0, handed_off = 0, stalls = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        handed_off += workers[t].handed_off;
        stalls += workers[t].relay.stalls;
        mallocs += workers[t].mallocs;
        frees += workers[t].frees;
        checksum += workers[t].checksum;
    }
    free(workers);
    bench_check_all_freed("rptest", mallocs, frees);

    printf("workload=rptest threads=%zu steps=%llu slots=%zu sizes=16..%zu handoff=%llu "
           "batch=%zu seed=%llu\n",
           cfg.threads, (unsigned long long)cfg.steps, cfg.slots, cfg.max_size,
           (unsigned long long)cfg.handoff, cfg.batch, (unsigned long long)cfg.seed);
    printf("handed_off=%llu stalls=%llu\n", (unsigned long long)handed_off,
           (unsigned long long)stalls);
    printf("elapsed_s=%.3f mallocs=%llu checksum=%016llx peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)mallocs, (unsigned long long)checksum, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)(mallocs + frees) / elapsed : 0.0);
    return 0;
}
