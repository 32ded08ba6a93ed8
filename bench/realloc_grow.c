/*
 * realloc_grow: dynamic arrays and strings growing by appends.
 *
 * usage: realloc_grow [--quick] [rounds [arrays [strings [seed]]]]
 *        defaults 8 256 4096 42 (--quick: 1 round)
 *
 * Each round builds `arrays` dynamic arrays of uint32_t and `strings` strings at
 * the same time, interleaved, the way a parser or a serializer fills many
 * containers at once:
 *  - an array grows by push; when it is full its capacity doubles by realloc
 *    (from 4 elements); each array's final length is drawn log-uniformly from
 *    16 to 65536 elements (64 B to 256 KiB);
 *  - a string grows by appends of 1 to 16 bytes, each a realloc to exactly the
 *    new length plus its NUL, as naive C string building does; each string's
 *    final length is drawn log-uniformly from 8 to 16384 bytes.
 * Every step appends to every container that is not yet complete, so the
 * reallocs of neighbours interleave and growth in place is sometimes possible,
 * sometimes not. At the end of a round every element and byte is checked and
 * everything is freed.
 *
 * Work is fixed; an op is one realloc call. The last line printed is
 * ops_per_sec=<N>.
 */
#include "bench_common.h"

#include <string.h>

typedef struct vec {
    uint32_t *items;
    size_t len;
    size_t cap;
    size_t target;
} vec;

typedef struct str {
    char *text;
    size_t len;
    size_t target;
} str;

static uint64_t reallocs;

static void *grow(void *p, size_t size)
{
    void *q = realloc(p, size);
    if (q == NULL)
        bench_oom("realloc_grow", size);
    reallocs++;
    return q;
}

/* Log-uniform in [lo, hi]: a power-of-two band chosen uniformly, then a value in it. */
static size_t log_uniform(bench_rng *rng, size_t lo, size_t hi)
{
    unsigned bands = 0;
    while ((lo << bands) <= hi)
        bands++;
    size_t band_lo = lo << bench_rng_range(rng, 0, bands - 1);
    size_t band_hi = 2 * band_lo - 1 < hi ? 2 * band_lo - 1 : hi;
    return bench_rng_range(rng, band_lo, band_hi);
}

static uint32_t item_value(size_t array, size_t index)
{
    return (uint32_t)(array * 2654435761u) ^ (uint32_t)index;
}

static char text_byte(size_t string, size_t pos)
{
    return (char)('a' + (string * 7 + pos) % 26);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: realloc_grow [--quick] [rounds [arrays [strings [seed]]]]\n"
            "  rounds   times everything is built, checked, freed   default 8 (--quick 1)\n"
            "  arrays   uint32_t arrays growing by doubling         default 256\n"
            "  strings  strings growing by 1-16 byte appends        default 4096\n"
            "  seed     PRNG seed                                   default 42\n"
            "Prints key=value lines; the last is ops_per_sec (op = one realloc).\n");
}

int main(int argc, char **argv)
{
    uint64_t rounds = 8, seed = 42;
    size_t narrays = 256, nstrings = 4096;

    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 4, usage, &quick, &pos);
    if (quick) {
        rounds = 1;
    }
    if (n > 0)
        rounds = bench_parse_uint("realloc_grow", "rounds", pos[0]);
    if (n > 1)
        narrays = bench_parse_uint("realloc_grow", "arrays", pos[1]);
    if (n > 2)
        nstrings = bench_parse_uint("realloc_grow", "strings", pos[2]);
    if (n > 3)
        seed = bench_parse_uint("realloc_grow", "seed", pos[3]);

    vec *arrays = calloc(narrays ? narrays : 1, sizeof *arrays);
    str *strings = calloc(nstrings ? nstrings : 1, sizeof *strings);
    if (arrays == NULL || strings == NULL)
        bench_oom("realloc_grow", nstrings * sizeof *strings);
    bench_rng rng;
    bench_rng_seed(&rng, seed);
    uint64_t appends = 0, bytes_built = 0;

    double start = bench_now();
    for (uint64_t round = 0; round < rounds; round++) {
        for (size_t a = 0; a < narrays; a++)
            arrays[a] = (vec){ NULL, 0, 0, log_uniform(&rng, 16, 65536) };
        for (size_t s = 0; s < nstrings; s++)
            strings[s] = (str){ NULL, 0, log_uniform(&rng, 8, 16384) };

        for (size_t open = narrays + nstrings; open > 0;) {
            open = 0;
            for (size_t a = 0; a < narrays; a++) {
                vec *v = &arrays[a];
                /* A string gets up to 16 bytes a step; an array 4 elements. */
                for (int k = 0; k < 4 && v->len < v->target; k++) {
                    if (v->len == v->cap) {
                        v->cap = v->cap ? 2 * v->cap : 4;
                        v->items = grow(v->items, v->cap * sizeof *v->items);
                    }
                    v->items[v->len] = item_value(a, v->len);
                    v->len++;
                    appends++;
                }
                open += v->len < v->target;
            }
            for (size_t s = 0; s < nstrings; s++) {
                str *st = &strings[s];
                if (st->len >= st->target)
                    continue;
                size_t add = bench_rng_range(&rng, 1, 16);
                if (add > st->target - st->len)
                    add = st->target - st->len;
                st->text = grow(st->text, st->len + add + 1);
                for (size_t i = 0; i < add; i++)
                    st->text[st->len + i] = text_byte(s, st->len + i);
                st->len += add;
                st->text[st->len] = '\0';
                appends++;
                open += st->len < st->target;
            }
        }

        for (size_t a = 0; a < narrays; a++) {
            vec *v = &arrays[a];
            for (size_t i = 0; i < v->len; i++) {
                if (v->items[i] != item_value(a, i)) {
                    fprintf(stderr, "realloc_grow: array %zu item %zu is wrong\n", a, i);
                    return 1;
                }
            }
            bytes_built += v->len * sizeof *v->items;
            free(v->items);
        }
        for (size_t s = 0; s < nstrings; s++) {
            str *st = &strings[s];
            for (size_t i = 0; i < st->len; i++) {
                if (st->text[i] != text_byte(s, i)) {
                    fprintf(stderr, "realloc_grow: string %zu byte %zu is wrong\n", s, i);
                    return 1;
                }
            }
            if (st->text[st->len] != '\0' || strlen(st->text) != st->len) {
                fprintf(stderr, "realloc_grow: string %zu lost its terminator\n", s);
                return 1;
            }
            bytes_built += st->len;
            free(st->text);
        }
    }
    double elapsed = bench_now() - start;
    free(arrays);
    free(strings);

    printf("workload=realloc_grow rounds=%llu arrays=%zu strings=%zu seed=%llu\n",
           (unsigned long long)rounds, narrays, nstrings, (unsigned long long)seed);
    printf("elapsed_s=%.3f reallocs=%llu appends=%llu built_kib=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)reallocs, (unsigned long long)appends,
           (unsigned long long)(bytes_built >> 10), bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)reallocs / elapsed : 0.0);
    return 0;
}
