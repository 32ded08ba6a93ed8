/*
 * xmalloc: producer/consumer allocation. Producer threads only malloc, consumer
 * threads only free, so every free is a remote free: the allocator must return
 * memory to the heap of a thread that keeps allocating while another keeps freeing.
 *
 * usage: xmalloc [--quick] [-p producers] [-c consumers] [-n objects]
 *                [-s min_size] [-S max_size] [-b batch]
 *
 * Pointers travel in batches of `batch`, so the queue costs little next to the
 * allocator. A fixed set of batch buffers circulates between an "empty" and a
 * "full" queue, which bounds how much memory is in flight. Elapsed time runs from
 * starting the threads to the last free; an op is one malloc plus its free. The
 * last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

enum { BATCHES_PER_THREAD = 4 };

typedef struct batch {
    size_t count;
    void *ptrs[]; /* cfg.batch slots */
} batch;

/* A FIFO of batch pointers. Its capacity covers every batch that exists, so
 * push never waits; pop waits while the queue is empty. */
typedef struct batch_queue {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    batch **ring;
    size_t capacity;
    size_t head;
    size_t length;
} batch_queue;

typedef struct producer {
    uint64_t objects;
    uint64_t seed;
} producer;

static struct {
    size_t producers;
    size_t consumers;
    uint64_t objects;
    size_t min_size;
    size_t max_size;
    size_t batch;
} cfg = { 1, 1, 20000000, 16, 128, 256 };

static batch_queue empty_batches;
static batch_queue full_batches;

static void queue_init(batch_queue *q, size_t capacity)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->nonempty, NULL);
    q->ring = malloc(capacity * sizeof *q->ring);
    if (q->ring == NULL)
        bench_oom("xmalloc", capacity * sizeof *q->ring);
    q->capacity = capacity;
    q->head = 0;
    q->length = 0;
}

static void queue_destroy(batch_queue *q)
{
    free(q->ring);
    pthread_cond_destroy(&q->nonempty);
    pthread_mutex_destroy(&q->lock);
}

static void queue_push(batch_queue *q, batch *b)
{
    pthread_mutex_lock(&q->lock);
    q->ring[(q->head + q->length) % q->capacity] = b;
    q->length++;
    pthread_cond_signal(&q->nonempty);
    pthread_mutex_unlock(&q->lock);
}

static batch *queue_pop(batch_queue *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->length == 0)
        pthread_cond_wait(&q->nonempty, &q->lock);
    batch *b = q->ring[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->length--;
    pthread_mutex_unlock(&q->lock);
    return b;
}

static void *producer_main(void *arg)
{
    producer *pr = arg;
    bench_rng rng;
    bench_rng_seed(&rng, pr->seed);
    for (uint64_t left = pr->objects; left > 0;) {
        batch *b = queue_pop(&empty_batches);
        size_t n = left < cfg.batch ? (size_t)left : cfg.batch;
        for (size_t i = 0; i < n; i++) {
            size_t size = bench_rng_range(&rng, cfg.min_size, cfg.max_size);
            unsigned char *p = malloc(size);
            if (p == NULL)
                bench_oom("xmalloc", size);
            p[0] = (unsigned char)i;
            b->ptrs[i] = p;
        }
        b->count = n;
        queue_push(&full_batches, b);
        left -= n;
    }
    return NULL;
}

/* A NULL batch tells a consumer that the producers are done. */
static void *consumer_main(void *arg)
{
    (void)arg;
    for (batch *b = queue_pop(&full_batches); b != NULL; b = queue_pop(&full_batches)) {
        for (size_t i = 0; i < b->count; i++)
            free(b->ptrs[i]);
        queue_push(&empty_batches, b);
    }
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: xmalloc [--quick] [-p producers] [-c consumers] [-n objects]\n"
            "               [-s min_size] [-S max_size] [-b batch]\n"
            "  -p, --producers N  threads that only malloc     default 1\n"
            "  -c, --consumers N  threads that only free       default 1\n"
            "  -n, --objects N    objects in total             default 20000000 (--quick 1000000)\n"
            "  -s, --min-size N   smallest object in bytes     default 16\n"
            "  -S, --max-size N   largest object in bytes      default 128\n"
            "  -b, --batch N      pointers per queue transfer  default 256\n"
            "Prints key=value lines; the last is ops_per_sec (op = one malloc + one free).\n");
}

static void parse_args(int argc, char **argv)
{
    static const struct option options[] = {
        { "producers", required_argument, NULL, 'p' },
        { "consumers", required_argument, NULL, 'c' },
        { "objects", required_argument, NULL, 'n' },
        { "min-size", required_argument, NULL, 's' },
        { "max-size", required_argument, NULL, 'S' },
        { "batch", required_argument, NULL, 'b' },
        { "quick", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool objects_given = false, quick = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "p:c:n:s:S:b:h", options, NULL)) != -1) {
        switch (opt) {
        case 'p': cfg.producers = bench_parse_uint("xmalloc", "producers", optarg); break;
        case 'c': cfg.consumers = bench_parse_uint("xmalloc", "consumers", optarg); break;
        case 'n':
            cfg.objects = bench_parse_uint("xmalloc", "objects", optarg);
            objects_given = true;
            break;
        case 's': cfg.min_size = bench_parse_uint("xmalloc", "min-size", optarg); break;
        case 'S': cfg.max_size = bench_parse_uint("xmalloc", "max-size", optarg); break;
        case 'b': cfg.batch = bench_parse_uint("xmalloc", "batch", optarg); break;
        case 'q': quick = true; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind != argc) {
        usage(stderr);
        exit(2);
    }
    if (quick && !objects_given)
        cfg.objects = 1000000;
    if (cfg.producers < 1 || cfg.consumers < 1 || cfg.batch < 1 || cfg.min_size < 1 ||
        cfg.max_size < cfg.min_size) {
        fprintf(stderr, "xmalloc: need producers, consumers, batch >= 1 and "
                        "1 <= min-size <= max-size\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);

    size_t batches = BATCHES_PER_THREAD * (cfg.producers + cfg.consumers);
    queue_init(&empty_batches, batches);
    queue_init(&full_batches, batches + cfg.consumers); /* room for the NULL markers */
    for (size_t i = 0; i < batches; i++) {
        batch *b = malloc(sizeof *b + cfg.batch * sizeof b->ptrs[0]);
        if (b == NULL)
            bench_oom("xmalloc", sizeof *b + cfg.batch * sizeof b->ptrs[0]);
        queue_push(&empty_batches, b);
    }

    producer *producers = calloc(cfg.producers, sizeof *producers);
    pthread_t *threads = calloc(cfg.producers + cfg.consumers, sizeof *threads);
    if (producers == NULL || threads == NULL)
        bench_oom("xmalloc", (cfg.producers + cfg.consumers) * sizeof *threads);
    for (size_t i = 0; i < cfg.producers; i++) {
        producers[i].objects = cfg.objects / cfg.producers + (i < cfg.objects % cfg.producers);
        producers[i].seed = 42 + i;
    }

    double start = bench_now();
    for (size_t i = 0; i < cfg.producers + cfg.consumers; i++) {
        int err = i < cfg.producers
                      ? pthread_create(&threads[i], NULL, producer_main, &producers[i])
                      : pthread_create(&threads[i], NULL, consumer_main, NULL);
        if (err != 0) {
            fprintf(stderr, "xmalloc: pthread_create: %s\n", strerror(err));
            return 1;
        }
    }
    for (size_t i = 0; i < cfg.producers; i++)
        pthread_join(threads[i], NULL);
    for (size_t i = 0; i < cfg.consumers; i++)
        queue_push(&full_batches, NULL);
    for (size_t i = cfg.producers; i < cfg.producers + cfg.consumers; i++)
        pthread_join(threads[i], NULL);
    double elapsed = bench_now() - start;

    for (size_t i = 0; i < batches; i++)
        free(queue_pop(&empty_batches));
    queue_destroy(&empty_batches);
    queue_destroy(&full_batches);
    free(producers);
    free(threads);

    printf("workload=xmalloc producers=%zu consumers=%zu sizes=%zu..%zu batch=%zu\n",
           cfg.producers, cfg.consumers, cfg.min_size, cfg.max_size, cfg.batch);
    printf("elapsed_s=%.3f ops=%llu peak_rss_kib=%lu\n", elapsed, (unsigned long long)cfg.objects,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", (double)cfg.objects / elapsed);
    return 0;
}
