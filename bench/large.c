/*
 * large: reuse of multi-MiB blocks. Keeps a window of `live` blocks; each op frees
 * the oldest and mallocs a new one of random size in [min_mib, max_mib] MiB, then
 * writes one byte in every page of it. An allocator that unmaps large blocks at
 * once pays a page fault (and the kernel's zeroing) for every page every time;
 * one that caches them pays only for the pages it has not touched before.
 *
 * usage: large [--quick] [iterations [min_mib [max_mib [live [seed]]]]]
 *        defaults 2000 2 8 4 42 (--quick: 200 iterations)
 *
 * The last line printed is ops_per_sec=<N> (op = one malloc + one free).
 */
#include "bench_common.h"

#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: large [--quick] [iterations [min_mib [max_mib [live [seed]]]]]\n"
            "  iterations  malloc+free pairs                 default 2000 (--quick 200)\n"
            "  min_mib     smallest block in MiB (>= 1)      default 2\n"
            "  max_mib     largest block in MiB              default 8\n"
            "  live        blocks alive at once              default 4\n"
            "  seed        PRNG seed                         default 42\n");
}

int main(int argc, char **argv)
{
    uint64_t iterations = 2000, seed = 42;
    size_t min_mib = 2, max_mib = 8, live = 4;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 5, usage, &quick, &pos);
    if (quick) {
        iterations = 200;
    }
    if (n > 0)
        iterations = bench_parse_uint("large", "iterations", pos[0]);
    if (n > 1)
        min_mib = bench_parse_uint("large", "min_mib", pos[1]);
    if (n > 2)
        max_mib = bench_parse_uint("large", "max_mib", pos[2]);
    if (n > 3)
        live = bench_parse_uint("large", "live", pos[3]);
    if (n > 4)
        seed = bench_parse_uint("large", "seed", pos[4]);
    if (min_mib < 1 || max_mib < min_mib || live < 1) {
        fprintf(stderr, "large: need 1 <= min_mib <= max_mib and live >= 1\n");
        return 2;
    }

    long page_size = sysconf(_SC_PAGESIZE);
    size_t page = page_size > 0 ? (size_t)page_size : 4096;
    unsigned char **window = calloc(live, sizeof *window);
    if (window == NULL)
        bench_oom("large", live * sizeof *window);
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    uint64_t touched_pages = 0;

    double start = bench_now();
    for (uint64_t i = 0; i < iterations; i++) {
        size_t slot = (size_t)(i % live);
        free(window[slot]);
        size_t size = bench_rng_range(&rng, min_mib << 20, max_mib << 20);
        unsigned char *block = malloc(size);
        if (block == NULL)
            bench_oom("large", size);
        /* Volatile stores: the writes are the point, they must not be elided. */
        volatile unsigned char *v = block;
        for (size_t off = 0; off < size; off += page)
            v[off] = (unsigned char)off;
        v[size - 1] = 1;
        touched_pages += (size + page - 1) / page;
        window[slot] = block;
    }
    double elapsed = bench_now() - start;

    for (size_t i = 0; i < live; i++)
        free(window[i]);
    free(window);

    printf("workload=large sizes=%zu..%zuMiB live=%zu iterations=%llu\n", min_mib, max_mib, live,
           (unsigned long long)iterations);
    printf("elapsed_s=%.3f pages_touched=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)touched_pages, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)iterations / elapsed : 0.0);
    return 0;
}
