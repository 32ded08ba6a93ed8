/*
 * pairs: the fast path alone. One thread mallocs and at once frees blocks whose
 * sizes cycle through 16, 32, ..., 128 bytes.
 *
 * usage: pairs [--quick] [iterations]     default 50000000 (--quick 2000000)
 *
 * bench/run.py --callgrind runs this under callgrind twice, with a large and a
 * small count, and divides the difference in instructions by the difference in
 * pairs. The last line printed is ops_per_sec=<N>; ns_per_pair is printed too.
 */
#include "bench_common.h"

#include <string.h>

/* Where each block's address is published, so the compiler cannot drop the
 * malloc/free pair as unused. */
static void *volatile sink;

int main(int argc, char **argv)
{
    static const size_t sizes[8] = { 16, 32, 48, 64, 80, 96, 112, 128 };
    uint64_t iterations = 50000000;

    int first = 1;
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: pairs [--quick] [iterations]   default 50000000 (--quick 2000000)\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        iterations = 2000000;
        first = 2;
    }
    if (argc - first > 1) {
        fprintf(stderr, "usage: pairs [--quick] [iterations]\n");
        return 2;
    }
    if (argc - first == 1)
        iterations = bench_parse_uint("pairs", "iterations", argv[first]);

    double start = bench_now();
    for (uint64_t i = 0; i < iterations; i++) {
        size_t size = sizes[i & 7];
        unsigned char *p = malloc(size);
        if (p == NULL)
            bench_oom("pairs", size);
        *(volatile unsigned char *)p = (unsigned char)i;
        sink = p;
        free(p);
    }
    double elapsed = bench_now() - start;

    printf("workload=pairs sizes=16..128 iterations=%llu\n", (unsigned long long)iterations);
    printf("elapsed_s=%.3f ns_per_pair=%.2f peak_rss_kib=%lu\n", elapsed,
           iterations ? elapsed * 1e9 / (double)iterations : 0.0, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)iterations / elapsed : 0.0);
    return 0;
}
