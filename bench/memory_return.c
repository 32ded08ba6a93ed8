/*
 * memory_return: does freed memory go back to the system?
 *
 * usage: memory_return [--quick] [total_mib [min_size [max_size [idle_s [seed]]]]]
 *        defaults 1024 16 256 1 42 (--quick: 128 MiB, 0.5 s idle)
 *
 * Mallocs `total_mib` MiB in blocks of random size in [min_size, max_size],
 * writing each, then frees every block, in an order that interleaves all of
 * memory (blocks are dealt at random to 256 lists, freed list by list). Then
 * it sleeps `idle_s` seconds without calling the allocator and reads its
 * resident set; then it does one malloc/free pair, for allocators that give
 * memory back only when they are next called, and reads it again.
 *
 * Prints rss_after_free_kib (at once), rss_after_idle_kib (after the sleep),
 * rss_after_poke_kib (after the extra pair) and the peak. The last line is
 * ops_per_sec=<N> (op = one malloc + its free; the sleep is not timed).
 */
#include "bench_common.h"

#include <string.h>

enum { LISTS = 256 };

/* Each block starts with the link of its list: min_size is at least 16. */
typedef struct node {
    struct node *next;
    size_t size;
} node;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: memory_return [--quick] [total_mib [min_size [max_size [idle_s [seed]]]]]\n"
            "  total_mib  MiB allocated before all is freed   default 1024 (--quick 128)\n"
            "  min_size   smallest block in bytes (>= 16)     default 16\n"
            "  max_size   largest block in bytes              default 256\n"
            "  idle_s     sleep after the frees, seconds      default 1 (--quick 0.5)\n"
            "  seed       PRNG seed                           default 42\n"
            "Prints rss_after_free_kib, rss_after_idle_kib, rss_after_poke_kib, peak_rss_kib;\n"
            "the last line is ops_per_sec (op = one malloc + its free).\n");
}

int main(int argc, char **argv)
{
    uint64_t total_mib = 1024, seed = 42;
    size_t min_size = 16, max_size = 256;
    double idle_s = 1.0;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 5, usage, &quick, &pos);
    if (quick) {
        total_mib = 128;
        idle_s = 0.5;
    }
    if (n > 0)
        total_mib = bench_parse_uint("memory_return", "total_mib", pos[0]);
    if (n > 1)
        min_size = bench_parse_uint("memory_return", "min_size", pos[1]);
    if (n > 2)
        max_size = bench_parse_uint("memory_return", "max_size", pos[2]);
    if (n > 3)
        idle_s = bench_parse_seconds("memory_return", pos[3]);
    if (n > 4)
        seed = bench_parse_uint("memory_return", "seed", pos[4]);
    if (min_size < sizeof(node) || max_size < min_size) {
        fprintf(stderr, "memory_return: need %zu <= min_size <= max_size\n", sizeof(node));
        return 2;
    }

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    node *lists[LISTS] = { 0 };
    uint64_t target = total_mib << 20, allocated = 0, blocks = 0;
    unsigned long rss_before = bench_rss_kib();

    double start = bench_now();
    while (allocated < target) {
        size_t size = bench_rng_range(&rng, min_size, max_size);
        node *b = malloc(size);
        if (b == NULL)
            bench_oom("memory_return", size);
        memset(b, 0x77, size);
        size_t list = (size_t)(bench_rng_next(&rng) % LISTS);
        b->size = size;
        b->next = lists[list];
        lists[list] = b;
        allocated += size;
        blocks++;
    }
    unsigned long rss_full = bench_rss_kib();
    for (size_t l = 0; l < LISTS; l++) {
        for (node *b = lists[l], *next; b != NULL; b = next) {
            next = b->next;
            unsigned char *bytes = (unsigned char *)b;
            /* The link and size cover the first bytes; the rest still holds the fill. */
            if (b->size < min_size || b->size > max_size ||
                (b->size > sizeof *b && bytes[b->size - 1] != 0x77)) {
                fprintf(stderr, "memory_return: block %p was overwritten\n", (void *)b);
                return 1;
            }
            free(b);
        }
    }
    double elapsed = bench_now() - start;
    unsigned long rss_free = bench_rss_kib();

    bench_sleep_until(bench_now() + idle_s);
    unsigned long rss_idle = bench_rss_kib();
    void *poke = malloc(min_size);
    if (poke == NULL)
        bench_oom("memory_return", min_size);
    *(volatile unsigned char *)poke = 1;
    free(poke);
    unsigned long rss_poke = bench_rss_kib();

    printf("workload=memory_return total_mib=%llu sizes=%zu..%zu idle_s=%.2f seed=%llu\n",
           (unsigned long long)total_mib, min_size, max_size, idle_s, (unsigned long long)seed);
    printf("elapsed_s=%.3f blocks=%llu rss_before_kib=%lu rss_full_kib=%lu\n", elapsed,
           (unsigned long long)blocks, rss_before, rss_full);
    printf("rss_after_free_kib=%lu rss_after_idle_kib=%lu rss_after_poke_kib=%lu "
           "peak_rss_kib=%lu\n",
           rss_free, rss_idle, rss_poke, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)blocks / elapsed : 0.0);
    return 0;
}
