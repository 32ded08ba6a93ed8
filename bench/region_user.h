/*
 * region_user.h — the half of each region benchmark that measures a region
 * allocator the way a program uses it (issue 11), against the malloc the
 * program was linked with:
 *
 *   - every block is written once, whole, after it is handed out (memset),
 *     as a program fills what it asked for;
 *   - every trial creates the region allocator and destroys it (for malloc:
 *     every block is freed), and both are inside the timed part;
 *   - trials of the region allocator and of malloc alternate, in an order
 *     that turns every round, and each is reported as the median of its
 *     trials (5 by default) after one untimed warm-up trial of each.
 *
 * Each program is built twice from the same source (bench/CMakeLists.txt):
 * region_X links brisk's core alone, so `malloc` is glibc's; region_X_brisk
 * links libbrisk.a, whose malloc replaces glibc's (the link decides which
 * malloc a program gets). BENCH_MALLOC names it; bench_check_malloc makes
 * sure the binary got the malloc it is named for. run.py runs both and puts
 * the two ratios side by side.
 *
 * Instruction counts: `region_X callgrind KIND N` runs N units of the
 * user's pattern for KIND (the region allocator's name, "malloc", or
 * "floor": the same loop and writes with no allocator) and nothing else,
 * for valgrind --tool=callgrind; run.py --callgrind takes two N and
 * divides the difference.
 *
 * Output, one line per pattern, after the program's Markdown:
 *   user=PATTERN malloc=glibc|brisk region_ns=R baseline_ns=B ratio=B/R
 *        reps=N unit=WHAT
 * (ns per unit of work, medians; ratio > 1: the region allocator is faster).
 */
#ifndef BENCH_REGION_USER_H
#define BENCH_REGION_USER_H

/* dladdr: the including program defines _GNU_SOURCE before its first include. */
#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before the first #include to use region_user.h"
#endif

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#ifndef BENCH_MALLOC
#define BENCH_MALLOC "glibc"
#endif

#define USER_MAX_REPS 64
#define USER_MAX_KINDS 4

/* Writes every byte of a block once; the empty asm with a memory clobber
 * keeps the compiler from dropping the stores to a block that is freed, or
 * popped, without being read. */
static inline void user_write(void *p, size_t size, unsigned value)
{
    memset(p, (int)(value & 0xFF), size);
    __asm__ __volatile__("" : : "r"(p) : "memory");
}

/* The malloc this binary calls is the one BENCH_MALLOC names: glibc's lives
 * in libc.so, brisk's (libbrisk.a) in the executable. Exits if not. */
static inline void bench_check_malloc(const char *prog)
{
    Dl_info info;
    void *(*volatile m)(size_t) = malloc;
    bool in_libc = dladdr((void *)m, &info) != 0 && info.dli_fname != NULL &&
                   strstr(info.dli_fname, "libc.so") != NULL;
    bool want_libc = strcmp(BENCH_MALLOC, "glibc") == 0;
    if (in_libc != want_libc) {
        fprintf(stderr, "%s: built for %s's malloc, but malloc comes from %s\n", prog,
                BENCH_MALLOC, info.dli_fname ? info.dli_fname : "?");
        exit(1);
    }
}

/* One trial of kind k (0: the region allocator, 1: malloc; more kinds are
 * further region variants): seconds, or a negative value on failure. */
typedef double (*user_trial_fn)(void *ctx, int kind);

/*
 * reps interleaved trials of each of the `kinds` kinds after one warm-up
 * each; round r runs kind (r + j) % kinds as its j-th, so no kind always
 * follows the same one. medians[k]: seconds. False when a trial failed.
 */
static inline bool user_measure(user_trial_fn trial, void *ctx, int kinds, int reps,
                                double *medians)
{
    double samples[USER_MAX_KINDS][USER_MAX_REPS];
    if (kinds > USER_MAX_KINDS || reps < 1 || reps > USER_MAX_REPS)
        return false;
    for (int k = 0; k < kinds; k++)
        if (trial(ctx, k) < 0)
            return false;
    for (int r = 0; r < reps; r++) {
        for (int j = 0; j < kinds; j++) {
            int k = (r + j) % kinds;
            double s = trial(ctx, k);
            if (s < 0)
                return false;
            samples[k][r] = s;
        }
    }
    for (int k = 0; k < kinds; k++)
        medians[k] = bench_median(samples[k], (size_t)reps);
    return true;
}

/* The key=value line of one pattern (see the top); units: work per trial;
 * extra: more key=value tokens for the line, or "". */
static inline void user_report_extra(const char *pattern, double region_s, double baseline_s,
                                     double units, int reps, const char *unit, const char *extra)
{
    printf("user=%s malloc=%s region_ns=%.3f baseline_ns=%.3f ratio=%.3f reps=%d unit=%s%s%s\n",
           pattern, BENCH_MALLOC, region_s * 1e9 / units, baseline_s * 1e9 / units,
           baseline_s / region_s, reps, unit, extra[0] ? " " : "", extra);
}

static inline void user_report(const char *pattern, double region_s, double baseline_s,
                               double units, int reps, const char *unit)
{
    user_report_extra(pattern, region_s, baseline_s, units, reps, unit, "");
}

/* A Markdown row of the same, for the program's own table. */
static inline void user_row(const char *what, double region_s, double baseline_s, double units)
{
    printf("| %s | %.2f | %.2f | %.2fx |\n", what, region_s * 1e9 / units,
           baseline_s * 1e9 / units, baseline_s / region_s);
}

static inline void user_table_head(const char *region, const char *baseline)
{
    printf("| pattern | %s ns | %s (%s) ns | speedup |\n| --- | ---: | ---: | ---: |\n", region,
           baseline, BENCH_MALLOC);
}

/* main's first lines: `prog callgrind KIND N` runs units(KIND, N) and
 * exits; false when argv is anything else. */
static inline bool user_callgrind_mode(int argc, char **argv, const char *prog,
                                       int (*units)(const char *kind, size_t n), int *status)
{
    if (argc != 4 || strcmp(argv[1], "callgrind") != 0)
        return false;
    size_t n = (size_t)bench_parse_uint(prog, "N", argv[3]);
    *status = units(argv[2], n);
    if (*status == 2)
        fprintf(stderr, "%s: no callgrind kind '%s'\n", prog, argv[2]);
    return true;
}

#endif
