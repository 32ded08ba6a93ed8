/*
 * cfrac_like: arbitrary-precision arithmetic in the style of the cfrac
 * benchmark (continued-fraction factoring), written from scratch: a small
 * bignum library whose every result, and every scratch number inside a
 * division, is a fresh malloc'd limb array freed soon after. That makes
 * millions of short-lived blocks of 8 to about 80 bytes, allocated and freed
 * in nearly LIFO order by one thread.
 *
 * usage: cfrac_like [--quick] [numbers [cf_steps [seed]]]
 *
 * For each of `numbers` composites N (about 220 bits: a 26-bit prime times four
 * 48-bit primes, all drawn from the seed), the program
 *   1. expands sqrt(N) as a continued fraction for `cf_steps` terms, the inner
 *      loop of CFRAC: m' = d*a - m, d' = (N - m'^2) / d, a' = (a0 + m') / d',
 *      and the convergent numerators A_k = a_k * A_(k-1) + A_(k-2) mod N. Each
 *      Q = d' is tested for smoothness by trial division over a factor base
 *      (primes p < 600 with (N/p) = 1), as CFRAC does to collect relations
 *      (Q is some 110 bits here, so fully smooth ones are rare: trial_hits
 *      counts the primes divided out, each division a new number);
 *   2. checks every step: the division for d' must be exact and
 *      A_(k-1)^2 mod N must equal (-1)^k d' mod N;
 *   3. factors N by Pollard's rho (x -> x^2 + c mod N, differences multiplied
 *      together and a gcd with N every 32 steps) and checks the factor.
 * A checksum over the factors found, the smooth Qs and each N's last
 * convergent is printed: it is the same under every allocator. ops_per_sec is
 * bignum allocations per second (each is freed again: an op is one malloc and
 * its free).
 */
#include "bench_common.h"

#include <string.h>

typedef uint32_t limb;

/* A natural number: len little-endian limbs, the top one non-zero; 0 has len 0. */
typedef struct bn {
    uint32_t len;
    uint32_t unused; /* keeps d 8-byte aligned; the header is 8 bytes */
    limb d[];
} bn;

static uint64_t n_allocs, n_frees;

static bn *bn_alloc(size_t len)
{
    size_t bytes = sizeof(bn) + len * sizeof(limb);
    bn *x = malloc(bytes);
    if (x == NULL)
        bench_oom("cfrac_like", bytes);
    n_allocs++;
    x->len = (uint32_t)len;
    x->unused = 0;
    return x;
}

static void bn_free(bn *x)
{
    n_frees++;
    free(x);
}

static bn *bn_norm(bn *x)
{
    while (x->len > 0 && x->d[x->len - 1] == 0)
        x->len--;
    return x;
}

static bn *bn_from_u64(uint64_t v)
{
    bn *x = bn_alloc(2);
    x->d[0] = (limb)v;
    x->d[1] = (limb)(v >> 32);
    return bn_norm(x);
}

static bn *bn_copy(const bn *a)
{
    bn *x = bn_alloc(a->len);
    memcpy(x->d, a->d, a->len * sizeof(limb));
    return x;
}

static int bn_cmp(const bn *a, const bn *b)
{
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    for (size_t i = a->len; i-- > 0;)
        if (a->d[i] != b->d[i])
            return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}

static bool bn_is_u32(const bn *a, limb v)
{
    return v == 0 ? a->len == 0 : a->len == 1 && a->d[0] == v;
}

static bn *bn_add(const bn *a, const bn *b)
{
    if (a->len < b->len) {
        const bn *t = a;
        a = b;
        b = t;
    }
    bn *r = bn_alloc(a->len + 1);
    uint64_t carry = 0;
    for (size_t i = 0; i < a->len; i++) {
        carry += (uint64_t)a->d[i] + (i < b->len ? b->d[i] : 0);
        r->d[i] = (limb)carry;
        carry >>= 32;
    }
    r->d[a->len] = (limb)carry;
    return bn_norm(r);
}

/* a - b for a >= b. */
static bn *bn_sub(const bn *a, const bn *b)
{
    bn *r = bn_alloc(a->len);
    uint64_t borrow = 0;
    for (size_t i = 0; i < a->len; i++) {
        uint64_t t = (uint64_t)a->d[i] - (i < b->len ? b->d[i] : 0) - borrow;
        r->d[i] = (limb)t;
        borrow = (t >> 32) & 1;
    }
    if (borrow) {
        fprintf(stderr, "cfrac_like: bn_sub underflow\n");
        exit(1);
    }
    return bn_norm(r);
}

/* |a - b| */
static bn *bn_absdiff(const bn *a, const bn *b)
{
    return bn_cmp(a, b) >= 0 ? bn_sub(a, b) : bn_sub(b, a);
}

static bn *bn_mul(const bn *a, const bn *b)
{
    if (a->len == 0 || b->len == 0)
        return bn_alloc(0);
    bn *r = bn_alloc(a->len + b->len);
    memset(r->d, 0, r->len * sizeof(limb));
    for (size_t i = 0; i < a->len; i++) {
        uint64_t carry = 0;
        for (size_t j = 0; j < b->len; j++) {
            carry += (uint64_t)a->d[i] * b->d[j] + r->d[i + j];
            r->d[i + j] = (limb)carry;
            carry >>= 32;
        }
        r->d[i + b->len] = (limb)carry;
    }
    return bn_norm(r);
}

/* a / v, with the remainder in *rem (v != 0). */
static bn *bn_div_small(const bn *a, limb v, limb *rem)
{
    bn *q = bn_alloc(a->len);
    uint64_t r = 0;
    for (size_t i = a->len; i-- > 0;) {
        uint64_t cur = (r << 32) | a->d[i];
        q->d[i] = (limb)(cur / v);
        r = cur % v;
    }
    *rem = (limb)r;
    return bn_norm(q);
}

/* a mod v, without allocating. */
static limb bn_mod_small(const bn *a, limb v)
{
    uint64_t r = 0;
    for (size_t i = a->len; i-- > 0;)
        r = ((r << 32) | a->d[i]) % v;
    return (limb)r;
}

/*
 * Long division (Knuth's algorithm D): *q = a / b, *r = a mod b, b != 0. The
 * normalized copies of a and b are scratch numbers of their own, as in a
 * library that builds every intermediate value on the heap.
 */
static void bn_divmod(const bn *a, const bn *b, bn **q, bn **r)
{
    if (b->len == 0) {
        fprintf(stderr, "cfrac_like: division by zero\n");
        exit(1);
    }
    if (bn_cmp(a, b) < 0) {
        *q = bn_alloc(0);
        *r = bn_copy(a);
        return;
    }
    if (b->len == 1) {
        limb rem;
        *q = bn_div_small(a, b->d[0], &rem);
        *r = bn_from_u64(rem);
        return;
    }
    size_t m = a->len, n = b->len;
    unsigned s = (unsigned)__builtin_clz(b->d[n - 1]); /* shift that sets b's top bit */
    bn *vn = bn_alloc(n), *un = bn_alloc(m + 1);
    for (size_t i = n; i-- > 0;)
        vn->d[i] = (limb)((((uint64_t)b->d[i] << 32) | (i ? b->d[i - 1] : 0)) >> (32 - s));
    un->d[m] = (limb)((uint64_t)a->d[m - 1] >> (32 - s));
    for (size_t i = m; i-- > 0;)
        un->d[i] = (limb)((((uint64_t)a->d[i] << 32) | (i ? a->d[i - 1] : 0)) >> (32 - s));

    bn *quot = bn_alloc(m - n + 1);
    const uint64_t base = (uint64_t)1 << 32;
    const uint64_t top = vn->d[n - 1], next = vn->d[n - 2];
    for (size_t j = m - n + 1; j-- > 0;) {
        /* Estimate the quotient digit from the top two limbs, then correct it. */
        uint64_t num = ((uint64_t)un->d[j + n] << 32) | un->d[j + n - 1];
        uint64_t qhat = num / top, rhat = num % top;
        while (qhat >= base || qhat * next > ((rhat << 32) | un->d[j + n - 2])) {
            qhat--;
            rhat += top;
            if (rhat >= base)
                break;
        }
        /* un[j .. j+n] -= qhat * vn */
        uint64_t carry = 0, borrow = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t p = qhat * vn->d[i] + carry;
            carry = p >> 32;
            uint64_t t = (uint64_t)un->d[i + j] - (limb)p - borrow;
            un->d[i + j] = (limb)t;
            borrow = (t >> 32) & 1;
        }
        uint64_t t = (uint64_t)un->d[j + n] - carry - borrow;
        un->d[j + n] = (limb)t;
        if ((t >> 32) != 0) { /* went negative: qhat was one too big, add vn back */
            qhat--;
            uint64_t c = 0;
            for (size_t i = 0; i < n; i++) {
                c += (uint64_t)un->d[i + j] + vn->d[i];
                un->d[i + j] = (limb)c;
                c >>= 32;
            }
            un->d[j + n] += (limb)c;
        }
        quot->d[j] = (limb)qhat;
    }
    bn *rem = bn_alloc(n);
    for (size_t i = 0; i < n; i++)
        rem->d[i] = (limb)((((uint64_t)un->d[i + 1] << 32) | un->d[i]) >> s);
    bn_free(un);
    bn_free(vn);
    *q = bn_norm(quot);
    *r = bn_norm(rem);
}

static bn *bn_div(const bn *a, const bn *b)
{
    bn *q, *r;
    bn_divmod(a, b, &q, &r);
    bn_free(r);
    return q;
}

static bn *bn_mod(const bn *a, const bn *b)
{
    bn *q, *r;
    bn_divmod(a, b, &q, &r);
    bn_free(q);
    return r;
}

static bn *bn_shr1(const bn *a)
{
    bn *r = bn_alloc(a->len);
    for (size_t i = 0; i < a->len; i++)
        r->d[i] = (a->d[i] >> 1) | (i + 1 < a->len ? a->d[i + 1] << 31 : 0);
    return bn_norm(r);
}

static size_t bn_bits(const bn *a)
{
    return a->len ? 32 * a->len - (size_t)__builtin_clz(a->d[a->len - 1]) : 0;
}

/* floor(sqrt(n)) by Newton's iteration from a power of two above the root. */
static bn *bn_isqrt(const bn *n)
{
    size_t k = (bn_bits(n) + 1) / 2;
    bn *x = bn_alloc(k / 32 + 1);
    memset(x->d, 0, x->len * sizeof(limb));
    x->d[k / 32] = (limb)1 << (k % 32);
    if (n->len == 0)
        return bn_norm(x);
    for (;;) {
        bn *q = bn_div(n, x);
        bn *s = bn_add(x, q);
        bn *y = bn_shr1(s);
        bn_free(q);
        bn_free(s);
        if (bn_cmp(y, x) >= 0) {
            bn_free(y);
            return x;
        }
        bn_free(x);
        x = y;
    }
}

static bn *bn_gcd(const bn *a, const bn *b)
{
    bn *x = bn_copy(a), *y = bn_copy(b);
    while (y->len != 0) {
        bn *r = bn_mod(x, y);
        bn_free(x);
        x = y;
        y = r;
    }
    bn_free(y);
    return x;
}

/* (a * b + c) mod n */
static bn *bn_muladd_mod(const bn *a, const bn *b, const bn *c, const bn *n)
{
    bn *p = bn_mul(a, b);
    bn *s = bn_add(p, c);
    bn *r = bn_mod(s, n);
    bn_free(p);
    bn_free(s);
    return r;
}

static uint64_t hash_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0x100000001B3ull;
}

static uint64_t hash_bn(uint64_t h, const bn *a)
{
    h = hash_mix(h, a->len);
    for (size_t i = 0; i < a->len; i++)
        h = hash_mix(h, a->d[i]);
    return h;
}

/* ------------------------------------------------------------ machine-word number theory */

static uint64_t mulmod64(uint64_t a, uint64_t b, uint64_t m)
{
    return (uint64_t)((unsigned __int128)a * b % m);
}

static uint64_t powmod64(uint64_t b, uint64_t e, uint64_t m)
{
    uint64_t r = 1 % m;
    for (b %= m; e; e >>= 1, b = mulmod64(b, b, m))
        if (e & 1)
            r = mulmod64(r, b, m);
    return r;
}

/* Miller-Rabin with the first 12 prime bases: exact below 2^64. */
static bool is_prime64(uint64_t n)
{
    static const uint64_t bases[] = { 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37 };
    if (n < 2)
        return false;
    for (size_t i = 0; i < 12; i++)
        if (n % bases[i] == 0)
            return n == bases[i];
    uint64_t d = n - 1;
    int s = 0;
    while ((d & 1) == 0) {
        d >>= 1;
        s++;
    }
    for (size_t i = 0; i < 12; i++) {
        uint64_t x = powmod64(bases[i], d, n);
        if (x == 1 || x == n - 1)
            continue;
        bool composite = true;
        for (int k = 1; k < s && composite; k++) {
            x = mulmod64(x, x, n);
            composite = x != n - 1;
        }
        if (composite)
            return false;
    }
    return true;
}

/* A random prime of exactly `bits` bits (bits <= 63). */
static uint64_t random_prime(bench_rng *rng, unsigned bits)
{
    uint64_t lo = (uint64_t)1 << (bits - 1);
    uint64_t p = (lo + (bench_rng_next(rng) & (lo - 1))) | 1;
    while (!is_prime64(p))
        p = p + 2 >= 2 * lo ? lo + 1 : p + 2;
    return p;
}

/* ------------------------------------------------------------ the workload */

enum { BASE_LIMIT = 600, MAX_BASE = 128 };

typedef struct stats {
    uint64_t smooth;  /* Q fully factored over the factor base */
    uint64_t hits;    /* factor-base primes divided out of the Qs, with multiplicity */
    uint64_t checksum;
} stats;

static void fail(const char *what, uint64_t index)
{
    fprintf(stderr, "cfrac_like: number %llu: %s\n", (unsigned long long)index, what);
    exit(1);
}

/* Trial-divides q over the factor base; returns what is left (a new number). */
static bn *strip_base(const bn *q, const limb *base, size_t base_len, uint64_t *hits)
{
    bn *left = bn_copy(q);
    for (size_t i = 0; i < base_len && !bn_is_u32(left, 1); i++) {
        while (bn_mod_small(left, base[i]) == 0) {
            limb rem;
            bn *next = bn_div_small(left, base[i], &rem);
            bn_free(left);
            left = next;
            ++*hits;
        }
    }
    return left;
}

/* The continued fraction of sqrt(n), cf_steps terms, checked as it goes. */
static void expand(const bn *n, uint64_t cf_steps, uint64_t index, stats *st)
{
    /* Factor base: 2 and the odd primes p < BASE_LIMIT with (n/p) = 1. */
    limb base[MAX_BASE];
    size_t base_len = 0;
    for (limb p = 2; p < BASE_LIMIT && base_len < MAX_BASE; p++) {
        bool prime = true;
        for (limb f = 2; f * f <= p && prime; f++)
            prime = p % f != 0;
        if (prime && (p == 2 || powmod64(bn_mod_small(n, p), (p - 1) / 2, p) == 1))
            base[base_len++] = p;
    }

    bn *a0 = bn_isqrt(n);
    bn *m = bn_alloc(0), *d = bn_from_u64(1), *a = bn_copy(a0);
    bn *a_prev = bn_from_u64(1), *a_cur = bn_mod(a0, n); /* A_(k-2), A_(k-1) */
    for (uint64_t k = 1; k <= cf_steps; k++) {
        /* m' = d*a - m;  d' = (n - m'^2) / d, exactly;  a' = (a0 + m') / d' */
        bn *da = bn_mul(d, a);
        bn *m1 = bn_sub(da, m);
        bn *sq = bn_mul(m1, m1);
        bn *num = bn_sub(n, sq);
        bn *d1, *rem;
        bn_divmod(num, d, &d1, &rem);
        if (rem->len != 0 || d1->len == 0)
            fail("d' = (N - m'^2) / d is not exact", index);
        bn *sum = bn_add(a0, m1);
        bn *a1 = bn_div(sum, d1);

        /* A_(k-1)^2 = (-1)^k d' (mod n) */
        bn *square = bn_mul(a_cur, a_cur);
        bn *lhs = bn_mod(square, n);
        bn *rhs = (k & 1) ? bn_sub(n, d1) : bn_copy(d1);
        if (bn_cmp(lhs, rhs) != 0)
            fail("A_(k-1)^2 != (-1)^k Q_k (mod N)", index);

        /* Is Q = d' smooth over the factor base? */
        bn *left = strip_base(d1, base, base_len, &st->hits);
        if (bn_is_u32(left, 1)) {
            st->smooth++;
            st->checksum = hash_mix(st->checksum, k);
        }

        /* A_k = a' * A_(k-1) + A_(k-2) mod n */
        bn *a_next = bn_muladd_mod(a1, a_cur, a_prev, n);

        bn_free(da);
        bn_free(sq);
        bn_free(num);
        bn_free(rem);
        bn_free(sum);
        bn_free(square);
        bn_free(lhs);
        bn_free(rhs);
        bn_free(left);
        bn_free(m);
        bn_free(d);
        bn_free(a);
        bn_free(a_prev);
        m = m1;
        d = d1;
        a = a1;
        a_prev = a_cur;
        a_cur = a_next;
    }
    st->checksum = hash_bn(st->checksum, a_cur);
    st->checksum = hash_bn(st->checksum, d);
    bn_free(a0);
    bn_free(m);
    bn_free(d);
    bn_free(a);
    bn_free(a_prev);
    bn_free(a_cur);
}

/* x -> x^2 + c mod n */
static bn *rho_step(bn *x, const bn *c, const bn *n)
{
    bn *y = bn_muladd_mod(x, x, c, n);
    bn_free(x);
    return y;
}

/* A non-trivial factor of n by Pollard's rho (Floyd's cycle finding). */
static bn *rho_factor(const bn *n, uint64_t index)
{
    for (uint64_t c = 1; c < 64; c++) {
        bn *cc = bn_from_u64(c);
        bn *x = bn_from_u64(2), *y = bn_from_u64(2), *acc = bn_from_u64(1);
        bn *found = NULL;
        for (uint64_t i = 1; i <= (1u << 22) && found == NULL; i++) {
            x = rho_step(x, cc, n);
            y = rho_step(rho_step(y, cc, n), cc, n);
            bn *diff = bn_absdiff(x, y);
            bn *product = bn_mul(acc, diff);
            bn *next = bn_mod(product, n);
            bn_free(diff);
            bn_free(product);
            bn_free(acc);
            acc = next;
            if (i % 32 == 0) {
                bn *g = bn_gcd(acc, n);
                if (bn_is_u32(g, 1))
                    bn_free(g);
                else if (bn_cmp(g, n) == 0 || g->len == 0) {
                    bn_free(g);
                    break; /* a cycle in every factor at once: try another c */
                } else
                    found = g;
            }
        }
        bn_free(cc);
        bn_free(x);
        bn_free(y);
        bn_free(acc);
        if (found != NULL) {
            bn *q, *r;
            bn_divmod(n, found, &q, &r);
            bool ok = r->len == 0 && !bn_is_u32(q, 1);
            bn_free(q);
            bn_free(r);
            if (!ok)
                fail("rho's factor does not divide N", index);
            return found;
        }
    }
    fail("rho found no factor", index);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cfrac_like [--quick] [numbers [cf_steps [seed]]]\n"
            "  numbers   composites N to work on          default 48 (--quick 12)\n"
            "  cf_steps  continued-fraction terms per N   default 100000\n"
            "  seed      PRNG seed                        default 42\n"
            "Prints key=value lines and a checksum; the last is ops_per_sec\n"
            "(op = one bignum malloc, freed again).\n");
}

int main(int argc, char **argv)
{
    uint64_t numbers = 48, cf_steps = 100000, seed = 42;
    bool quick;
    char **pos;
    int n_args = bench_args(argc, argv, 3, usage, &quick, &pos);
    if (quick)
        numbers = 12;
    if (n_args > 0)
        numbers = bench_parse_uint("cfrac_like", "numbers", pos[0]);
    if (n_args > 1)
        cf_steps = bench_parse_uint("cfrac_like", "cf_steps", pos[1]);
    if (n_args > 2)
        seed = bench_parse_uint("cfrac_like", "seed", pos[2]);

    stats st = { 0, 0, 0xCF4AC0DEull };
    uint64_t factor_bits = 0;
    double start = bench_now();
    for (uint64_t i = 0; i < numbers; i++) {
        bench_rng rng;
        bench_rng_seed(&rng, seed * 1000u + i);
        /* N = p * q1 * q2 * q3 * q4: rho finds the 26-bit p in some 10^4 steps. */
        bn *n = bn_from_u64(random_prime(&rng, 26));
        for (int k = 0; k < 4; k++) {
            bn *q = bn_from_u64(random_prime(&rng, 48));
            bn *t = bn_mul(n, q);
            bn_free(n);
            bn_free(q);
            n = t;
        }
        expand(n, cf_steps, i, &st);
        bn *f = rho_factor(n, i);
        factor_bits += bn_bits(f);
        st.checksum = hash_bn(st.checksum, f);
        bn_free(f);
        bn_free(n);
    }
    double elapsed = bench_now() - start;
    if (n_allocs != n_frees) {
        fprintf(stderr, "cfrac_like: %llu allocations but %llu frees\n",
                (unsigned long long)n_allocs, (unsigned long long)n_frees);
        return 1;
    }

    printf("workload=cfrac_like numbers=%llu cf_steps=%llu seed=%llu\n",
           (unsigned long long)numbers, (unsigned long long)cf_steps, (unsigned long long)seed);
    printf("smooth=%llu trial_hits=%llu factor_bits=%llu checksum=%016llx\n",
           (unsigned long long)st.smooth, (unsigned long long)st.hits,
           (unsigned long long)factor_bits, (unsigned long long)st.checksum);
    printf("elapsed_s=%.3f allocs=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)n_allocs, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)n_allocs / elapsed : 0.0);
    return 0;
}
