/*
 * mleak: a long-running program that leaks, the shape of the classic leaking
 * allocator benchmark, written from its description: a churning working set
 * while a small fraction of the blocks is never freed, so the live heap grows
 * slowly for the whole run.
 *
 * usage: mleak [--quick] [threads [steps [window [leak_every [phase [seed]]]]]]
 *        defaults max(2, online CPUs) threads, 10000000 steps, window 20000,
 *        leak_every 100, phase 200000, seed 42
 *        (--quick: 1000000 steps, window 4000, phase 40000)
 *
 * Each of `threads` threads fills a working set of `window` blocks, then runs
 * `steps` steps; a step picks a random slot, retires its block and mallocs a
 * new one into it, so a block lives `window` steps on average. A retired block
 * is freed, except 1 in `leak_every` (0: none), which is leaked: never freed.
 * The threads share nothing but the allocator.
 *
 * Sizes: 1 block in 32 is medium, 1-32 KiB (log-uniform); the others are small,
 * 16-1023 B. The small sizes drift: the run is cut into phases of `phase`
 * steps, and 7 small blocks in 8 of phase k fall in the band [16 << b, 32 << b)
 * with b = k mod 6 (the 8th anywhere in 16-1023 B). So the blocks leaked in one
 * phase sit in memory that the next phase's sizes do not fill: with the
 * defaults, a phase leaks phase / leak_every blocks against a working set of
 * `window`, about one leaked block for every ten the phase's memory held. An
 * allocator that gives each size its own pages can keep those pages, nine
 * tenths empty, for the leaked blocks in them; one that reuses free space for
 * any size can hold little more than the live bytes.
 *
 * The leaked blocks are kept reachable on a list linked through the blocks
 * themselves (each leaked block's first 8 bytes point to the one leaked before
 * it). The allocator sees exactly what a true leak shows it, a block that is
 * never freed, and the program allocates nothing for the list; at the end it
 * walks the list, so a leaked block that the allocator handed out again is
 * caught, and leak checkers do not report the program.
 *
 * Every block carries a 64-bit value from its thread's generator and its size
 * in its first 12 bytes and a tag in its last byte, and one byte per 4 KiB
 * page is written, so every page of it is resident; a block is checked when it
 * is retired (exit 1 if it was overwritten) and its value added to the
 * checksum, which is the same under every allocator. At the end each thread
 * frees its working set; the leaked blocks stay until the process exits.
 *
 * Prints, besides the arguments:
 *   leaked_blocks, leaked_kib   the blocks leaked and their requested bytes
 *   peak_live_kib   requested bytes live at once (working set + leaked) at
 *                   their highest, summed over the threads' own peaks (exact
 *                   for one thread, an upper bound for several)
 *   rss_end_kib     VmRSS after every thread freed its working set: what the
 *                   allocator holds for the leaked blocks alone
 *   peak_rss_kib    VmHWM; rss_per_live = peak_rss_kib / peak_live_kib
 *   ops             mallocs and frees in the timed part (the steps and the
 *                   frees of the working sets; filling the working sets is
 *                   not timed); the last line is ops_per_sec=<N>, op = one
 *                   malloc or one free.
 */
#include "bench_common.h"

#include <pthread.h>
#include <string.h>

enum { MIN_SIZE = 16, SMALL_BANDS = 6, MEDIUM_MIN = 1024, MEDIUM_BANDS = 5, PAGE = 4096 };

typedef struct config {
    size_t threads;
    uint64_t steps;
    size_t window;
    uint64_t leak_every;
    uint64_t phase;
    uint64_t seed;
} config;

typedef struct worker {
    bench_thread thread;
    unsigned char *leaked; /* the last block leaked; each links to the one before */
    uint64_t leaked_blocks;
    uint64_t leaked_bytes;
    uint64_t peak_live; /* requested bytes: working set + leaked */
    uint64_t mallocs;   /* timed ones */
    uint64_t frees;
    uint64_t checksum;
    char pad[64]; /* keeps neighbouring workers' counters off one cache line */
} worker;

static config cfg;
static worker *workers; /* never freed: the leaked blocks stay reachable through it */
static pthread_barrier_t start_line;

static unsigned char tag_of(uint64_t value)
{
    return (unsigned char)(value ^ (value >> 23) ^ 0x3Cu);
}

/* A leaked block's tag: its value is gone (the link took its place). */
static unsigned char leak_tag_of(uint32_t size)
{
    return (unsigned char)(size * 131u + 0xA5u);
}

/* A size in [lo << band, (2 * lo << band) - 1], capped at hi. */
static size_t in_band(bench_rng *rng, size_t lo, size_t band, size_t hi)
{
    size_t band_lo = lo << band;
    size_t band_hi = 2 * band_lo - 1 < hi ? 2 * band_lo - 1 : hi;
    return bench_rng_range(rng, band_lo, band_hi);
}

static size_t next_size(bench_rng *rng, uint64_t phase)
{
    uint64_t r = bench_rng_next(rng);
    if ((r & 31) == 0)
        return in_band(rng, MEDIUM_MIN, (size_t)((r >> 8) % MEDIUM_BANDS), 32767);
    if (((r >> 5) & 7) != 0)
        return in_band(rng, MIN_SIZE, (size_t)(phase % SMALL_BANDS), 1023);
    return in_band(rng, MIN_SIZE, (size_t)((r >> 8) % SMALL_BANDS), 1023);
}

/* Block layout: [0, 8) the value (a leaked block: the link), [8, 12) the size,
 * [size - 1] the tag; one byte written at each 4 KiB offset past the header. */
static unsigned char *new_block(size_t size, uint64_t value)
{
    unsigned char *block = malloc(size);
    if (block == NULL)
        bench_oom("mleak", size);
    uint32_t size32 = (uint32_t)size;
    memcpy(block, &value, sizeof value);
    memcpy(block + 8, &size32, sizeof size32);
    for (size_t off = PAGE; off < size - 1; off += PAGE)
        block[off] = (unsigned char)off;
    block[size - 1] = tag_of(value);
    return block;
}

static void overwritten(const unsigned char *block)
{
    fprintf(stderr, "mleak: block %p was overwritten\n", (const void *)block);
    exit(1);
}

/* Checks a live block; returns its size and adds its value to *checksum. */
static size_t check_block(const unsigned char *block, uint64_t *checksum)
{
    uint64_t value;
    uint32_t size;
    memcpy(&value, block, sizeof value);
    memcpy(&size, block + 8, sizeof size);
    if (size < MIN_SIZE || size > 32767 || block[size - 1] != tag_of(value))
        overwritten(block);
    *checksum += value;
    return size;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench_rng rng;
    bench_rng_seed(&rng, cfg.seed * 7919u + w->thread.index);
    unsigned char **slots = malloc(cfg.window * sizeof *slots);
    if (slots == NULL)
        bench_oom("mleak", cfg.window * sizeof *slots);
    uint64_t live = 0, checksum = 0;
    for (size_t i = 0; i < cfg.window; i++) {
        size_t size = next_size(&rng, 0);
        slots[i] = new_block(size, bench_rng_next(&rng));
        live += size;
    }
    uint64_t peak = live, frees = 0;

    pthread_barrier_wait(&start_line);
    for (uint64_t step = 0; step < cfg.steps; step++) {
        uint64_t r = bench_rng_next(&rng);
        unsigned char **slot = &slots[(r >> 32) % cfg.window];
        size_t old = check_block(*slot, &checksum);
        if (cfg.leak_every != 0 && (uint32_t)r % cfg.leak_every == 0) {
            /* Leaked: still counted live, linked in place of its value. */
            memcpy(*slot, &w->leaked, sizeof w->leaked);
            (*slot)[old - 1] = leak_tag_of((uint32_t)old);
            w->leaked = *slot;
            w->leaked_blocks++;
            w->leaked_bytes += old;
        } else {
            free(*slot);
            frees++;
            live -= old;
        }
        size_t size = next_size(&rng, step / cfg.phase);
        *slot = new_block(size, bench_rng_next(&rng));
        live += size;
        if (live > peak)
            peak = live;
    }
    for (size_t i = 0; i < cfg.window; i++) {
        check_block(slots[i], &checksum);
        free(slots[i]);
        frees++;
    }
    free(slots);
    w->peak_live = peak;
    w->mallocs = cfg.steps;
    w->frees = frees;
    w->checksum = checksum;
    return NULL;
}

/* Walks w's leaked blocks; returns how many bytes they hold. */
static uint64_t walk_leaked(const worker *w)
{
    uint64_t blocks = 0, bytes = 0;
    for (const unsigned char *block = w->leaked; block != NULL; blocks++) {
        uint32_t size;
        memcpy(&size, block + 8, sizeof size);
        if (size < MIN_SIZE || size > 32767 || block[size - 1] != leak_tag_of(size) ||
            blocks == w->leaked_blocks)
            overwritten(block);
        bytes += size;
        memcpy(&block, block, sizeof block);
    }
    if (blocks != w->leaked_blocks) {
        fprintf(stderr, "mleak: thread %zu leaked %llu blocks but its list holds %llu\n",
                w->thread.index, (unsigned long long)w->leaked_blocks, (unsigned long long)blocks);
        exit(1);
    }
    return bytes;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mleak [--quick] [threads [steps [window [leak_every [phase [seed]]]]]]\n"
            "  threads     threads (a working set each)      default max(2, online CPUs)\n"
            "  steps       block replacements per thread     default 10000000 (--quick 1000000)\n"
            "  window      working-set blocks per thread     default 20000 (--quick 4000)\n"
            "  leak_every  1 retired block in leak_every is leaked, never freed (0: none)\n"
            "                                                default 100\n"
            "  phase       steps per phase of the small sizes' drift\n"
            "                                                default 200000 (--quick 40000)\n"
            "  seed        PRNG seed                         default 42\n"
            "Sizes 16-1023 B drifting by phase, 1 in 32 of 1-32 KiB. Prints key=value lines\n"
            "(leaked_kib, peak_live_kib, rss_end_kib, peak_rss_kib, rss_per_live); the last\n"
            "is ops_per_sec (op = one malloc or one free).\n");
}

static void parse_args(int argc, char **argv)
{
    config parsed = { bench_cpus_at_least(2), 10000000, 20000, 100, 200000, 42 };
    const bench_param params[] = {
        { "threads", .size = &parsed.threads },
        { "steps", .u64 = &parsed.steps, .quick = 1000000 },
        { "window", .size = &parsed.window, .quick = 4000 },
        { "leak_every", .u64 = &parsed.leak_every },
        { "phase", .u64 = &parsed.phase, .quick = 40000 },
        { "seed", .u64 = &parsed.seed },
    };
    bench_parse_params("mleak", argc, argv, usage, params,
                       (int)(sizeof params / sizeof params[0]));
    cfg = parsed;
    if (cfg.threads < 1 || cfg.window < 1 || cfg.phase < 1 || cfg.leak_every > UINT32_MAX) {
        fprintf(stderr, "mleak: need threads, window, phase >= 1 and leak_every < 2^32\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);

    workers = calloc(cfg.threads, sizeof *workers);
    if (workers == NULL)
        bench_oom("mleak", cfg.threads * sizeof *workers);
    double elapsed =
        bench_run_threads("mleak", workers, sizeof *workers, cfg.threads, worker_main, &start_line);
    /* Only the leaked blocks are live now (and workers). */
    unsigned long rss_end = bench_rss_kib();

    uint64_t ops = 0, checksum = 0, leaked_blocks = 0, leaked_bytes = 0, peak_live = 0;
    for (size_t t = 0; t < cfg.threads; t++) {
        const worker *w = &workers[t];
        uint64_t bytes = walk_leaked(w);
        if (bytes != w->leaked_bytes) {
            fprintf(stderr, "mleak: thread %zu leaked %llu bytes but its list holds %llu\n",
                    w->thread.index, (unsigned long long)w->leaked_bytes,
                    (unsigned long long)bytes);
            return 1;
        }
        ops += w->mallocs + w->frees;
        checksum += w->checksum;
        leaked_blocks += w->leaked_blocks;
        leaked_bytes += bytes;
        peak_live += w->peak_live;
    }
    unsigned long peak_rss = bench_peak_rss_kib();

    printf("workload=mleak threads=%zu steps=%llu window=%zu leak_every=%llu phase=%llu "
           "seed=%llu\n",
           cfg.threads, (unsigned long long)cfg.steps, cfg.window,
           (unsigned long long)cfg.leak_every, (unsigned long long)cfg.phase,
           (unsigned long long)cfg.seed);
    printf("leaked_blocks=%llu leaked_kib=%llu peak_live_kib=%llu rss_end_kib=%lu\n",
           (unsigned long long)leaked_blocks, (unsigned long long)(leaked_bytes >> 10),
           (unsigned long long)(peak_live >> 10), rss_end);
    printf("elapsed_s=%.3f ops=%llu checksum=%016llx peak_rss_kib=%lu rss_per_live=%.2f\n",
           elapsed, (unsigned long long)ops, (unsigned long long)checksum, peak_rss,
           peak_live >= 1024 ? (double)peak_rss / (double)(peak_live >> 10) : 0.0);
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    return 0;
}
