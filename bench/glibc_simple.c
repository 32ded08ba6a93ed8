/*
 * glibc_simple: the shape of glibc's bench-malloc-simple, written from its
 * description: one thread allocates a batch of same-sized blocks and then frees
 * the batch in allocation order, over and over, for a grid of sizes and batch
 * lengths.
 *
 * usage: glibc_simple [--quick] [pairs [threaded]]
 *
 * The grid: sizes 16, 32, 64, 128, 256, 512, 1024, 2048, 4096 bytes, times batch
 * lengths 25, 100, 400, 1600 blocks. Each of the 36 cells runs about `pairs`
 * malloc+free pairs (pairs / batch rounds of one batch). Small batches measure
 * the fast path on a warm free list; long ones walk through more memory than
 * stays in a thread cache, so the allocator has to refill and flush.
 *
 * glibc's malloc takes lock-free shortcuts while a process has only one thread;
 * threaded = 1 starts (and joins) a thread before measuring, which turns them off
 * for good, as in a program that once used a thread pool.
 *
 * Under glibc, the cells of 1 KiB and more with 100 blocks or more are mostly
 * heap trimming: freeing the batch leaves more than the trim threshold
 * (128 KiB) free at the top of the heap, which glibc hands back with sbrk and
 * faults in again the next round (GLIBC_TUNABLES=glibc.malloc.trim_threshold=
 * <large> makes them some 50 times faster).
 *
 * Each block gets its first byte written at malloc and read back at free into a
 * checksum (identical under every allocator). Prints each cell's nanoseconds per
 * pair as cell_<size>x<batch>_ns; an op is one malloc or one free over the whole
 * grid. The last line printed is ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <pthread.h>

static const size_t sizes[] = { 16, 32, 64, 128, 256, 512, 1024, 2048, 4096 };
static const size_t batches[] = { 25, 100, 400, 1600 };
enum {
    N_SIZES = sizeof sizes / sizeof sizes[0],
    N_BATCHES = sizeof batches / sizeof batches[0],
    MAX_BATCH = 1600,
};

static void *idle_thread(void *arg)
{
    return arg;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: glibc_simple [--quick] [pairs [threaded]]\n"
            "  pairs     malloc+free pairs per (size, batch) cell  default 1000000 "
            "(--quick 300000)\n"
            "  threaded  1: start a thread first (no single-thread shortcuts)  default 0\n"
            "Cells: sizes 16..4096 B (powers of two) x batches of 25, 100, 400, 1600.\n"
            "Prints key=value lines; the last is ops_per_sec (op = one malloc or one free).\n");
}

int main(int argc, char **argv)
{
    uint64_t pairs = 1000000, threaded = 0;
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 2, usage, &quick, &pos);
    if (quick)
        pairs = 300000;
    if (n > 0)
        pairs = bench_parse_uint("glibc_simple", "pairs", pos[0]);
    if (n > 1)
        threaded = bench_parse_uint("glibc_simple", "threaded", pos[1]);
    if (pairs < 1 || threaded > 1) {
        fprintf(stderr, "glibc_simple: need pairs >= 1 and threaded 0 or 1\n");
        return 2;
    }
    if (threaded) {
        pthread_t tid;
        if (pthread_create(&tid, NULL, idle_thread, NULL) != 0) {
            fprintf(stderr, "glibc_simple: pthread_create failed\n");
            return 1;
        }
        pthread_join(tid, NULL);
    }

    /* On the stack, so that the only heap traffic is the measured blocks. */
    unsigned char *blocks[MAX_BATCH];
    double cell_ns[N_SIZES][N_BATCHES];
    uint64_t ops = 0, checksum = 0;

    double start = bench_now();
    for (size_t si = 0; si < N_SIZES; si++) {
        size_t size = sizes[si];
        for (size_t bi = 0; bi < N_BATCHES; bi++) {
            size_t batch = batches[bi];
            uint64_t rounds = (pairs + batch - 1) / batch;
            double cell_start = bench_now();
            for (uint64_t round = 0; round < rounds; round++) {
                for (size_t i = 0; i < batch; i++) {
                    unsigned char *b = malloc(size);
                    if (b == NULL)
                        bench_oom("glibc_simple", size);
                    b[0] = (unsigned char)(i + round);
                    blocks[i] = b;
                }
                for (size_t i = 0; i < batch; i++) {
                    checksum += blocks[i][0];
                    free(blocks[i]);
                }
            }
            double cell_elapsed = bench_now() - cell_start;
            cell_ns[si][bi] = cell_elapsed * 1e9 / (double)(rounds * batch);
            ops += 2 * rounds * batch;
        }
    }
    double elapsed = bench_now() - start;

    printf("workload=glibc_simple sizes=16..4096 batches=25,100,400,1600 pairs=%llu "
           "threaded=%llu\n",
           (unsigned long long)pairs, (unsigned long long)threaded);
    for (size_t si = 0; si < N_SIZES; si++) {
        for (size_t bi = 0; bi < N_BATCHES; bi++)
            printf("%scell_%zux%zu_ns=%.2f", bi ? " " : "", sizes[si], batches[bi],
                   cell_ns[si][bi]);
        printf("\n");
    }
    printf("elapsed_s=%.3f ops=%llu checksum=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)ops, (unsigned long long)checksum, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
