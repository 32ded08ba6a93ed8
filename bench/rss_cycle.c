/*
 * rss_cycle: a long-running program whose memory use rises and falls, with its
 * resident set sampled over time.
 *
 * usage: rss_cycle [--quick] [cycles [peak_mib [keep_pct [pause_ms [interval_ms [seed]]]]]]
 *        defaults 8 256 10 200 20 42 (--quick: 4 cycles of 64 MiB, 50 ms pauses)
 *
 * Each cycle mallocs blocks until `peak_mib` MiB are live (sizes log-uniform in
 * 16..4096 bytes, and 1 block in 64 of 8..256 KiB; one byte written per page),
 * then frees all but a random `keep_pct` percent of the live blocks (old
 * survivors die too, at the same rate), and pauses `pause_ms` without calling
 * the allocator: a trough. The survivors are scattered over all of memory, so an
 * allocator can return only the pages that are wholly free. A thread samples
 * VmRSS every `interval_ms`.
 *
 * Prints rss_interval_ms=<ms> and rss_samples_kib=<a,b,c,...> (one sample per
 * interval from the start), mean_rss_kib (mean of the samples), trough_rss_kib
 * (at the end of the last pause) and the peak. The last line is ops_per_sec=<N>
 * (op = one malloc + its free; pauses are not timed).
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

enum { MAX_SAMPLES = 1 << 16 };

static unsigned long samples[MAX_SAMPLES];
static atomic_size_t sample_count;
static atomic_bool sampling_done;
static double interval_s;

/* Samples on a fixed grid of times, so that a late wake-up does not shift the rest. */
static void *sampler_main(void *arg)
{
    double start = *(const double *)arg;
    for (size_t i = 0; i < MAX_SAMPLES && !atomic_load(&sampling_done); i++) {
        bench_sleep_until(start + (double)i * interval_s);
        samples[i] = bench_rss_kib();
        atomic_store(&sample_count, i + 1);
    }
    return NULL;
}

typedef struct block {
    unsigned char *p;
    size_t size;
} block;

static size_t next_size(bench_rng *rng)
{
    uint64_t r = bench_rng_next(rng);
    size_t lo, hi;
    if ((r & 63) == 0) {
        lo = 8 << 10;
        hi = 256 << 10;
    } else {
        lo = 16;
        hi = 4096;
    }
    unsigned bands = 0;
    while ((lo << bands) <= hi)
        bands++;
    size_t band_lo = lo << bench_rng_range(rng, 0, bands - 1);
    size_t band_hi = 2 * band_lo - 1 < hi ? 2 * band_lo - 1 : hi;
    return bench_rng_range(rng, band_lo, band_hi);
}

static unsigned char tag_of(size_t size)
{
    return (unsigned char)(size * 31u + 7u);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: rss_cycle [--quick] [cycles [peak_mib [keep_pct [pause_ms [interval_ms "
            "[seed]]]]]]\n"
            "  cycles       peaks (each followed by a trough)    default 8 (--quick 4)\n"
            "  peak_mib     live MiB at each peak                default 256 (--quick 64)\n"
            "  keep_pct     percent of live blocks kept at a trough  default 10\n"
            "  pause_ms     idle time at each trough             default 200 (--quick 50)\n"
            "  interval_ms  RSS sampling interval                default 20\n"
            "  seed         PRNG seed                            default 42\n"
            "Prints rss_interval_ms, rss_samples_kib=a,b,..., mean_rss_kib, trough_rss_kib,\n"
            "peak_rss_kib; the last line is ops_per_sec (op = one malloc + its free).\n");
}

int main(int argc, char **argv)
{
    uint64_t cycles = 8, peak_mib = 256, keep_pct = 10, pause_ms = 200, interval_ms = 20,
             seed = 42;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 6, usage, &quick, &pos);
    if (quick) {
        cycles = 4;
        peak_mib = 64;
        pause_ms = 50;
    }
    if (n > 0)
        cycles = bench_parse_uint("rss_cycle", "cycles", pos[0]);
    if (n > 1)
        peak_mib = bench_parse_uint("rss_cycle", "peak_mib", pos[1]);
    if (n > 2)
        keep_pct = bench_parse_uint("rss_cycle", "keep_pct", pos[2]);
    if (n > 3)
        pause_ms = bench_parse_uint("rss_cycle", "pause_ms", pos[3]);
    if (n > 4)
        interval_ms = bench_parse_uint("rss_cycle", "interval_ms", pos[4]);
    if (n > 5)
        seed = bench_parse_uint("rss_cycle", "seed", pos[5]);
    if (peak_mib < 1 || keep_pct > 100 || interval_ms < 1) {
        fprintf(stderr, "rss_cycle: need peak_mib >= 1, keep_pct <= 100, interval_ms >= 1\n");
        return 2;
    }

    long page_size = sysconf(_SC_PAGESIZE);
    size_t page = page_size > 0 ? (size_t)page_size : 4096;
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    size_t capacity = 1024, live = 0;
    block *blocks = malloc(capacity * sizeof *blocks);
    if (blocks == NULL)
        bench_oom("rss_cycle", capacity * sizeof *blocks);
    uint64_t peak_bytes = peak_mib << 20, live_bytes = 0, ops = 0;
    double busy = 0;
    unsigned long trough = 0;

    interval_s = (double)interval_ms / 1000.0;
    double start = bench_now();
    pthread_t sampler;
    int err = pthread_create(&sampler, NULL, sampler_main, &start);
    if (err != 0) {
        fprintf(stderr, "rss_cycle: pthread_create: %s\n", strerror(err));
        return 1;
    }

    for (uint64_t c = 0; c < cycles; c++) {
        double phase = bench_now();
        while (live_bytes < peak_bytes) {
            if (live == capacity) {
                capacity *= 2;
                block *grown = realloc(blocks, capacity * sizeof *blocks);
                if (grown == NULL)
                    bench_oom("rss_cycle", capacity * sizeof *blocks);
                blocks = grown;
            }
            size_t size = next_size(&rng);
            unsigned char *p = malloc(size);
            if (p == NULL)
                bench_oom("rss_cycle", size);
            for (size_t off = 0; off < size; off += page)
                p[off] = tag_of(size);
            p[size - 1] = tag_of(size);
            blocks[live++] = (block){ p, size };
            live_bytes += size;
            ops++;
        }
        /* Keep a random keep_pct percent, compacting the survivors to the front. */
        size_t kept = 0;
        for (size_t i = 0; i < live; i++) {
            block b = blocks[i];
            if (b.p[0] != tag_of(b.size) || b.p[b.size - 1] != tag_of(b.size)) {
                fprintf(stderr, "rss_cycle: block %p of %zu bytes was overwritten\n",
                        (void *)b.p, b.size);
                return 1;
            }
            if (bench_rng_next(&rng) % 100 < keep_pct) {
                blocks[kept++] = b;
            } else {
                free(b.p);
                live_bytes -= b.size;
            }
        }
        live = kept;
        busy += bench_now() - phase;
        bench_sleep_until(bench_now() + (double)pause_ms / 1000.0);
        trough = bench_rss_kib();
    }
    double phase = bench_now();
    for (size_t i = 0; i < live; i++)
        free(blocks[i].p);
    free(blocks);
    busy += bench_now() - phase;
    /* One more sample after the end, then stop the sampler. */
    bench_sleep_until(bench_now() + interval_s);
    atomic_store(&sampling_done, true);
    pthread_join(sampler, NULL);

    size_t count = atomic_load(&sample_count);
    double sum = 0;
    for (size_t i = 0; i < count; i++)
        sum += (double)samples[i];
    printf("workload=rss_cycle cycles=%llu peak_mib=%llu keep_pct=%llu pause_ms=%llu seed=%llu\n",
           (unsigned long long)cycles, (unsigned long long)peak_mib,
           (unsigned long long)keep_pct, (unsigned long long)pause_ms,
           (unsigned long long)seed);
    printf("rss_interval_ms=%llu rss_samples_kib=", (unsigned long long)interval_ms);
    for (size_t i = 0; i < count; i++)
        printf(i ? ",%lu" : "%lu", samples[i]);
    printf("\n");
    printf("elapsed_s=%.3f busy_s=%.3f ops=%llu samples=%zu mean_rss_kib=%.0f trough_rss_kib=%lu "
           "peak_rss_kib=%lu\n",
           bench_now() - start, busy, (unsigned long long)ops, count,
           count ? sum / (double)count : 0.0, trough, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", busy > 0 ? (double)ops / busy : 0.0);
    return 0;
}
