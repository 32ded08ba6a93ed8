/*
 * address_space: how much address space (VmSize) an allocator takes per
 * thread, which is what a `ulimit -v` (RLIMIT_AS) limits.
 *
 * usage: address_space [--quick] [threads [blocks [mix [seed]]]]
 *        defaults 32 2000 mixed 42 (--quick: 8 threads)
 *
 * Each thread allocates `blocks` blocks and holds them, writing 16 bytes of
 * each (so the resident set stays small: the point is the mappings). `mix`
 * is `small` (16..527 bytes) or `mixed` (80% 16..527 bytes, 17% 1..65 KiB,
 * 3% 64 KiB..1.06 MiB). When every thread holds its blocks, the main thread
 * reads VmSize; the threads' stacks (256 KiB each) are counted in it too.
 *
 * Prints vm_before_kib (before the threads start), vm_held_kib (all blocks
 * held), bytes_held (what the threads asked for) and
 * vm_per_thread_kib = (vm_held - vm_before) / threads.
 */
#include "bench_common.h"

static pthread_barrier_t all_held, may_free;
static size_t blocks_per_thread;
static bool mixed_sizes;
static uint64_t seed;
static _Atomic uint64_t bytes_held;

static size_t next_size(bench_rng *rng)
{
    uint64_t percent = bench_rng_next(rng) % 100;
    if (!mixed_sizes || percent < 80)
        return bench_rng_range(rng, 16, 527);
    if (percent < 97)
        return bench_rng_range(rng, 1024, 1024 + 65536);
    return bench_rng_range(rng, 65536, 65536 + (1 << 20));
}

static void *worker(void *arg)
{
    bench_rng rng;
    bench_rng_seed(&rng, seed + (uintptr_t)arg);
    void **held = malloc(blocks_per_thread * sizeof *held);
    if (held == NULL)
        bench_oom("address_space", blocks_per_thread * sizeof *held);
    uint64_t bytes = 0;
    for (size_t i = 0; i < blocks_per_thread; i++) {
        size_t size = next_size(&rng);
        held[i] = malloc(size);
        if (held[i] == NULL)
            bench_oom("address_space", size);
        memset(held[i], 1, 16);
        bytes += size;
    }
    atomic_fetch_add(&bytes_held, bytes);
    pthread_barrier_wait(&all_held);
    pthread_barrier_wait(&may_free);
    for (size_t i = 0; i < blocks_per_thread; i++)
        free(held[i]);
    free(held);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: address_space [--quick] [threads [blocks [small|mixed [seed]]]]\n"
                 "defaults 32 2000 mixed 42 (--quick: 8 threads)\n");
}

int main(int argc, char **argv)
{
    bool quick;
    char **arg;
    int n = bench_args(argc, argv, 4, usage, &quick, &arg);
    size_t threads = quick ? 8 : 32;
    blocks_per_thread = 2000;
    mixed_sizes = true;
    seed = 42;
    if (n > 0)
        threads = (size_t)bench_parse_uint("address_space", "threads", arg[0]);
    if (n > 1)
        blocks_per_thread = (size_t)bench_parse_uint("address_space", "blocks", arg[1]);
    if (n > 2) {
        if (strcmp(arg[2], "small") != 0 && strcmp(arg[2], "mixed") != 0) {
            usage(stderr);
            return 2;
        }
        mixed_sizes = strcmp(arg[2], "mixed") == 0;
    }
    if (n > 3)
        seed = bench_parse_uint("address_space", "seed", arg[3]);
    if (threads == 0 || threads > 4096) {
        fprintf(stderr, "address_space: threads must be 1 to 4096\n");
        return 2;
    }

    pthread_t *ids = calloc(threads, sizeof *ids);
    if (ids == NULL)
        bench_oom("address_space", threads * sizeof *ids);
    pthread_barrier_init(&all_held, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&may_free, NULL, (unsigned)threads + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    unsigned long before = bench_status_kib("VmSize:");
    for (size_t i = 0; i < threads; i++) {
        int error = pthread_create(&ids[i], &attr, worker, (void *)(uintptr_t)i);
        if (error != 0) {
            fprintf(stderr, "address_space: pthread_create: %s\n", strerror(error));
            return 1;
        }
    }
    pthread_barrier_wait(&all_held);
    unsigned long held = bench_status_kib("VmSize:");
    pthread_barrier_wait(&may_free);
    for (size_t i = 0; i < threads; i++)
        pthread_join(ids[i], NULL);
    printf("threads=%zu\nblocks=%zu\nmix=%s\n", threads, blocks_per_thread,
           mixed_sizes ? "mixed" : "small");
    printf("vm_before_kib=%lu\nvm_held_kib=%lu\nbytes_held=%llu\nvm_per_thread_kib=%lu\n", before,
           held, (unsigned long long)atomic_load(&bytes_held), (held - before) / threads);
    free(ids);
    return 0;
}
