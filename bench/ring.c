/*
 * ring: the fast path with a little history. One thread keeps a ring of 64
 * live blocks; each step frees the oldest block and mallocs a new one in its
 * place, then writes one byte of it (its last). Unlike pairs (malloc then free
 * of the same block at once), the block freed is not the one just allocated:
 * each free returns a block allocated 64 steps earlier, so free lists are
 * really pushed and popped, as in a program with a small working set.
 *
 * usage: ring [--quick] [steps [mode]]
 *        default 1000000000 steps (--quick 200000000), mode mix
 *   mix       sizes at random in 16..128 B (the default)
 *   <bytes>   every block of that size, so one size class is measured alone
 *   baseline  the same loop over the mix sizes, but blocks come from a static
 *             array and nothing is freed: the loop's own cost, to subtract
 *
 * The sizes come from a table of 4096 entries filled (from a fixed seed)
 * before the clock starts, so a step costs the loop only a few instructions
 * and the program is deterministic: bench/run.py --callgrind runs each mode
 * under callgrind at two step counts and divides the difference in
 * instructions by the difference in steps, and subtracts baseline's count to
 * get the allocator's instructions per free+malloc pair. The last line printed
 * is ops_per_sec=<N> (op = one step: a free and a malloc); ns_per_step too.
 *
 * ring_new is this program built with RING_OPERATOR_NEW: each step calls C++'s
 * sized operator delete(void *, size_t) and operator new(size_t) instead,
 * which is what `delete p` and `new T` of a complete type compile to (g++,
 * C++14 on). It links libstdc++, whose operators call malloc and free; an
 * allocator preloaded with operators of its own replaces them. Its baseline
 * also reads the size each step's delete is given.
 */
#include "bench_common.h"

#include <string.h>

enum {
    RING = 64,    /* live blocks, a power of two */
    TABLE = 4096, /* pre-drawn sizes, a power of two */
    MIX_MIN = 16,
    MIX_MAX = 128,
};

#ifdef RING_OPERATOR_NEW
/* The operators by their mangled names (LP64: size_t is unsigned long). */
void *ring_operator_new(size_t size) __asm__("_Znwm");
void ring_operator_delete(void *p, size_t size) __asm__("_ZdlPvm");
/* The size of the block a step frees: the one allocated RING steps before
 * (the initial blocks take the sizes of steps -RING .. -1). */
#define RING_FREED_SIZE(step) sizes[((step) - RING) & (TABLE - 1)]
static volatile uint32_t sink_size;
#endif

static uint32_t sizes[TABLE];
static unsigned char *live[RING];
/* baseline's blocks: one per ring position, as large as the largest mix size. */
static _Alignas(16) unsigned char static_blocks[RING][MIX_MAX];
/* baseline publishes the block it would free here, where the real loop calls free. */
static void *volatile sink;

/* The measured loop; baseline is a constant at each call, so the compiler
 * makes two loops that differ only in where blocks come from and go to. */
static inline __attribute__((always_inline)) void run_steps(uint64_t steps, bool baseline)
{
    for (uint64_t i = 0; i < steps; i++) {
        size_t slot = (size_t)i & (RING - 1);
        size_t size = sizes[i & (TABLE - 1)];
        unsigned char *p;
        if (baseline) {
            sink = live[slot];
#ifdef RING_OPERATOR_NEW
            sink_size = RING_FREED_SIZE(i);
#endif
            p = static_blocks[slot];
        } else {
#ifdef RING_OPERATOR_NEW
            ring_operator_delete(live[slot], RING_FREED_SIZE(i));
            p = ring_operator_new(size); /* throws rather than return NULL */
#else
            free(live[slot]);
            p = malloc(size);
            if (p == NULL)
                bench_oom("ring", size);
#endif
        }
        p[size - 1] = (unsigned char)i;
        live[slot] = p;
    }
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ring [--quick] [steps [mix|<bytes>|baseline]]\n"
            "  steps  free-oldest + malloc steps over a ring of 64 blocks  default 1000000000 "
            "(--quick 200000000)\n"
            "  mode   mix (16..128 B at random), one size in bytes, or baseline (no malloc)\n"
            "Prints key=value lines; the last is ops_per_sec (op = one step).\n");
}

int main(int argc, char **argv)
{
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 2, usage, &quick, &pos);
    uint64_t steps = quick ? 200000000 : 1000000000;
    const char *mode = "mix";
    size_t one_size = 0;
    if (n > 0)
        steps = bench_parse_uint("ring", "steps", pos[0]);
    if (n > 1)
        mode = pos[1];
    bool baseline = strcmp(mode, "baseline") == 0;
    if (!baseline && strcmp(mode, "mix") != 0) {
        one_size = bench_parse_uint("ring", "mode (mix, baseline or a size in bytes)", mode);
        if (one_size < 1 || one_size > UINT32_MAX) {
            fprintf(stderr, "ring: a size must be 1..%u bytes\n", UINT32_MAX);
            return 2;
        }
    }

    bench_rng rng;
    bench_rng_seed(&rng, 42);
    for (size_t i = 0; i < TABLE; i++)
        sizes[i] = one_size ? (uint32_t)one_size : (uint32_t)bench_rng_range(&rng, MIX_MIN,
                                                                            MIX_MAX);
    for (size_t slot = 0; slot < RING; slot++) {
#ifdef RING_OPERATOR_NEW
        live[slot] = baseline ? static_blocks[slot]
                              : ring_operator_new(RING_FREED_SIZE((uint64_t)slot));
#else
        live[slot] = baseline ? static_blocks[slot] : malloc(sizes[slot]);
#endif
        if (live[slot] == NULL)
            bench_oom("ring", sizes[slot]);
        live[slot][0] = 0;
    }

    double start = bench_now();
    if (baseline)
        run_steps(steps, true);
    else
        run_steps(steps, false);
    double elapsed = bench_now() - start;

    if (!baseline)
        for (size_t slot = 0; slot < RING; slot++) {
#ifdef RING_OPERATOR_NEW
            /* The step that filled the slot last. */
            uint64_t filled = steps - RING + ((slot - steps) & (RING - 1));
            ring_operator_delete(live[slot], RING_FREED_SIZE(filled + RING));
#else
            free(live[slot]);
#endif
        }

    printf("workload=ring mode=%s steps=%llu ring=%d\n", mode, (unsigned long long)steps, RING);
    printf("elapsed_s=%.3f ns_per_step=%.2f peak_rss_kib=%lu\n", elapsed,
           steps ? elapsed * 1e9 / (double)steps : 0.0, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)steps / elapsed : 0.0);
    return 0;
}
