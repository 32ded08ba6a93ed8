/*
 * pairs: the fast path alone. One thread mallocs and at once frees blocks.
 *
 * usage: pairs [--quick] [iterations [mode]]
 *        default 50000000 (--quick 2000000), mode "mix"
 *   mix      malloc+free, sizes cycling through 16, 32, ..., 128 bytes
 *   <bytes>  malloc+free of one size (a size class's fast path)
 *   calloc   calloc+free, sizes as in mix
 *   realloc  malloc(16), realloc to 100, realloc to 200, free: a small
 *            growing buffer (three allocator calls and a free per iteration)
 *
 * bench/run.py --callgrind runs each mode under callgrind twice, with a large
 * and a small count, and divides the difference in instructions by the
 * difference in iterations. The last line printed is ops_per_sec=<N>;
 * ns_per_pair is printed too.
 */
#include "bench_common.h"

#include <string.h>

/* Where each block's address is published, so the compiler cannot drop the
 * malloc/free pair as unused. */
static void *volatile sink;

enum mode { MODE_MIX, MODE_ONE_SIZE, MODE_CALLOC, MODE_REALLOC };

int main(int argc, char **argv)
{
    static const size_t sizes[8] = { 16, 32, 48, 64, 80, 96, 112, 128 };
    uint64_t iterations = 50000000;
    enum mode mode = MODE_MIX;
    size_t one_size = 0;
    const char *mode_name = "mix";

    int first = 1;
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: pairs [--quick] [iterations [mix|<bytes>|calloc|realloc]]\n"
               "  default 50000000 iterations (--quick 2000000), mode mix\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--quick") == 0) {
        iterations = 2000000;
        first = 2;
    }
    if (argc - first > 2) {
        fprintf(stderr, "usage: pairs [--quick] [iterations [mix|<bytes>|calloc|realloc]]\n");
        return 2;
    }
    if (argc - first >= 1)
        iterations = bench_parse_uint("pairs", "iterations", argv[first]);
    if (argc - first == 2) {
        mode_name = argv[first + 1];
        if (strcmp(mode_name, "calloc") == 0) {
            mode = MODE_CALLOC;
        } else if (strcmp(mode_name, "realloc") == 0) {
            mode = MODE_REALLOC;
        } else if (strcmp(mode_name, "mix") != 0) {
            mode = MODE_ONE_SIZE;
            one_size = bench_parse_uint("pairs", "mode (a size in bytes)", mode_name);
        }
    }

    double start = bench_now();
    for (uint64_t i = 0; i < iterations; i++) {
        size_t size = mode == MODE_ONE_SIZE ? one_size : sizes[i & 7];
        unsigned char *p;
        switch (mode) {
        case MODE_CALLOC:
            p = calloc(1, size);
            break;
        case MODE_REALLOC:
            p = malloc(16);
            if (p != NULL)
                p = realloc(p, 100);
            if (p != NULL)
                p = realloc(p, 200);
            size = 200;
            break;
        default:
            p = malloc(size);
            break;
        }
        if (p == NULL)
            bench_oom("pairs", size);
        *(volatile unsigned char *)p = (unsigned char)i;
        sink = p;
        free(p);
    }
    double elapsed = bench_now() - start;

    printf("workload=pairs mode=%s iterations=%llu\n", mode_name, (unsigned long long)iterations);
    printf("elapsed_s=%.3f ns_per_pair=%.2f peak_rss_kib=%lu\n", elapsed,
           iterations ? elapsed * 1e9 / (double)iterations : 0.0, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)iterations / elapsed : 0.0);
    return 0;
}
