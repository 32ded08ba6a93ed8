/*
 * mixed: one thread, mixed sizes, a random live set (in the style of glibc's
 * malloc benchmarks).
 *
 * usage: mixed [--quick] [iterations [live [max_size [seed]]]]
 *        defaults 10000000 10000 32768 42 (--quick: 1000000 iterations)
 *
 * A window of `live` slots starts full. Each op picks a random slot, checks and
 * frees its block, and mallocs a new one there. Sizes follow a 1/size density
 * between 8 bytes and `max_size` (log-uniform in power-of-two bands, so most
 * blocks are small and a few are large), and one op in 256 asks for a block
 * between 64 KiB and 512 KiB instead. Each new block gets its first and last
 * bytes written. Blocks die in random order, so free memory is fragmented, as
 * in a long-running program.
 *
 * The last line printed is ops_per_sec=<N> (op = one free + one malloc).
 */
#include "bench_common.h"

#include <string.h>

enum { SIZE_TABLE = 4096 };

static size_t size_table[SIZE_TABLE];

static unsigned char tag_of(size_t size)
{
    return (unsigned char)(size ^ 0x3Cu);
}

static unsigned char *new_block(size_t size)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("mixed", size);
    block[0] = tag_of(size);
    block[size - 1] = tag_of(size);
    return block;
}

static void check_block(const unsigned char *block, size_t size)
{
    if (block[0] != tag_of(size) || block[size - 1] != tag_of(size)) {
        fprintf(stderr, "mixed: block %p of %zu bytes was overwritten\n", (const void *)block,
                size);
        exit(1);
    }
}

static size_t next_size(bench_rng *rng)
{
    uint64_t r = bench_rng_next(rng);
    if ((r & 255) == 0)
        return bench_rng_range(rng, 64 << 10, 512 << 10);
    return size_table[(r >> 8) % SIZE_TABLE];
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mixed [--quick] [iterations [live [max_size [seed]]]]\n"
            "  iterations  free+malloc replacements          default 10000000 (--quick 1000000)\n"
            "  live        blocks alive at once              default 10000\n"
            "  max_size    largest common size in bytes      default 32768\n"
            "  seed        PRNG seed                         default 42\n"
            "Sizes: 1/size density over [8, max_size]; 1 in 256 is 64-512 KiB.\n");
}

int main(int argc, char **argv)
{
    uint64_t iterations = 10000000, seed = 42;
    size_t live = 10000, max_size = 32768;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 4, usage, &quick, &pos);
    if (quick) {
        iterations = 1000000;
    }
    if (n > 0)
        iterations = bench_parse_uint("mixed", "iterations", pos[0]);
    if (n > 1)
        live = bench_parse_uint("mixed", "live", pos[1]);
    if (n > 2)
        max_size = bench_parse_uint("mixed", "max_size", pos[2]);
    if (n > 3)
        seed = bench_parse_uint("mixed", "seed", pos[3]);
    if (live < 1 || max_size < 8) {
        fprintf(stderr, "mixed: need live >= 1 and max_size >= 8\n");
        return 2;
    }

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    /* A 1/size density, piecewise: a power-of-two band [2^k, 2^(k+1)) chosen
     * uniformly among those from 8 up to max_size, then a size uniform in it. */
    unsigned bands = 0;
    while (((size_t)8 << bands) <= max_size)
        bands++;
    for (size_t i = 0; i < SIZE_TABLE; i++) {
        size_t lo = (size_t)8 << bench_rng_range(&rng, 0, bands - 1);
        size_t hi = 2 * lo - 1 < max_size ? 2 * lo - 1 : max_size;
        size_table[i] = bench_rng_range(&rng, lo, hi);
    }

    unsigned char **blocks = malloc(live * sizeof *blocks);
    size_t *sizes = malloc(live * sizeof *sizes);
    if (blocks == NULL || sizes == NULL)
        bench_oom("mixed", live * sizeof *blocks);
    for (size_t i = 0; i < live; i++) {
        sizes[i] = next_size(&rng);
        blocks[i] = new_block(sizes[i]);
    }

    double start = bench_now();
    for (uint64_t i = 0; i < iterations; i++) {
        size_t slot = (size_t)(bench_rng_next(&rng) % live);
        check_block(blocks[slot], sizes[slot]);
        free(blocks[slot]);
        sizes[slot] = next_size(&rng);
        blocks[slot] = new_block(sizes[slot]);
    }
    double elapsed = bench_now() - start;

    size_t live_bytes = 0;
    for (size_t i = 0; i < live; i++) {
        check_block(blocks[i], sizes[i]);
        live_bytes += sizes[i];
        free(blocks[i]);
    }
    free(blocks);
    free(sizes);

    printf("workload=mixed sizes=8..%zu+64..512KiB live=%zu iterations=%llu seed=%llu\n",
           max_size, live, (unsigned long long)iterations, (unsigned long long)seed);
    printf("elapsed_s=%.3f final_live_kib=%zu peak_rss_kib=%lu\n", elapsed, live_bytes >> 10,
           bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)iterations / elapsed : 0.0);
    return 0;
}
