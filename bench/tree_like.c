/*
 * tree_like: pointer-heavy structures built, walked and torn down, in the
 * manner of the barnes and espresso benchmarks (written from that description,
 * not from their code).
 *
 * usage: tree_like [--quick] [steps [nodes [seed]]]
 *
 * Each step
 *   1. builds a binary search tree of `nodes` random keys, inserted in random
 *      order; every node is one malloc with a payload of 0-192 bytes (skewed
 *      small) after its header, and 1 node in 8 also gets a label string grown
 *      by realloc, a few characters per append;
 *   2. builds a quadtree (barnes-like) of nodes / 2 random points: a leaf keeps
 *      its points in a bucket that grows by realloc (1, 2, 4, 8 points) and
 *      splits into four children when it is full; then a post-order pass sums
 *      each cell's mass and centre, and 1 point in 32 walks the tree the way a
 *      Barnes-Hut force computation does (a far cell counts as one body);
 *   3. walks the search tree in order, checking that keys come out sorted and
 *      folding keys, payloads and labels into the checksum;
 *   4. frees both structures in post-order, an order unrelated to the one
 *      their blocks were allocated in.
 * Blocks are 8 bytes to about 250 bytes; most die together at the end of a
 * step, with others allocated in between, so free memory comes back in large
 * scattered batches.
 *
 * The checksum (integer arithmetic only) is the same under every allocator.
 * ops_per_sec counts allocations per second: mallocs plus reallocs.
 */
#include "bench_common.h"

#include <string.h>

enum { MAX_PAYLOAD = 192, LEAF_POINTS = 8, COORD_BITS = 20, MAX_DEPTH = 18 };

static uint64_t n_mallocs, n_reallocs;

static void *xmalloc(size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        bench_oom("tree_like", size);
    n_mallocs++;
    return p;
}

static void *xrealloc(void *old, size_t size)
{
    void *p = realloc(old, size);
    if (p == NULL)
        bench_oom("tree_like", size);
    n_reallocs++;
    return p;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0x100000001B3ull;
}

/* ------------------------------------------------------------ binary search tree */

typedef struct tnode {
    struct tnode *left, *right;
    uint64_t key;
    char *label; /* NULL, or a string grown by realloc */
    uint32_t payload_len;
    unsigned char payload[];
} tnode;

/* A payload length in [0, MAX_PAYLOAD], with small lengths likelier (min of two draws). */
static uint32_t payload_length(bench_rng *rng)
{
    uint64_t r = bench_rng_next(rng);
    uint32_t a = (uint32_t)(r % (MAX_PAYLOAD + 1)), b = (uint32_t)((r >> 32) % (MAX_PAYLOAD + 1));
    return a < b ? a : b;
}

/* Appends the decimal digits of v and a '/' to *label, growing it by realloc. */
static void label_append(char **label, size_t *len, uint64_t v)
{
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%llu/", (unsigned long long)v);
    *label = xrealloc(*label, *len + (size_t)n + 1);
    memcpy(*label + *len, digits, (size_t)n + 1);
    *len += (size_t)n;
}

static tnode *tnode_new(bench_rng *rng, uint64_t key)
{
    uint32_t len = payload_length(rng);
    tnode *t = xmalloc(sizeof *t + len);
    t->left = t->right = NULL;
    t->key = key;
    t->payload_len = len;
    for (uint32_t i = 0; i < len; i++)
        t->payload[i] = (unsigned char)(key >> (8 * (i & 7)));
    t->label = NULL;
    if ((key & 7) == 0) {
        size_t label_len = 0;
        int pieces = 2 + (int)((key >> 3) & 3);
        for (int p = 0; p < pieces; p++)
            label_append(&t->label, &label_len, (key >> (11 * p)) & 0xFFFF);
    }
    return t;
}

static void bst_insert(tnode **root, tnode *t)
{
    tnode **at = root;
    while (*at != NULL)
        at = t->key < (*at)->key ? &(*at)->left : &(*at)->right;
    *at = t;
}

typedef struct walk {
    uint64_t rank;
    uint64_t last_key;
    uint64_t hash;
    size_t depth_max;
} walk;

static void bst_walk(const tnode *t, size_t depth, walk *w)
{
    if (t == NULL)
        return;
    if (depth > w->depth_max)
        w->depth_max = depth;
    bst_walk(t->left, depth + 1, w);
    if (w->rank > 0 && t->key < w->last_key) {
        fprintf(stderr, "tree_like: search tree out of order (corrupted node?)\n");
        exit(1);
    }
    w->last_key = t->key;
    w->rank++;
    uint64_t h = mix(w->hash, t->key * w->rank);
    h = mix(h, t->payload_len);
    if (t->payload_len > 0)
        h = mix(h, t->payload[0] ^ ((uint64_t)t->payload[t->payload_len - 1] << 8));
    if (t->label != NULL)
        for (const char *c = t->label; *c; c++)
            h = h * 31 + (unsigned char)*c;
    w->hash = h;
    bst_walk(t->right, depth + 1, w);
}

static void bst_free(tnode *t)
{
    if (t == NULL)
        return;
    bst_free(t->left);
    bst_free(t->right);
    free(t->label);
    free(t);
}

/* ------------------------------------------------------------ quadtree */

typedef struct point {
    uint32_t x, y;
} point;

typedef struct qnode {
    struct qnode *child[4]; /* all NULL in a leaf */
    point *bucket;          /* a leaf's points; grows by realloc */
    uint32_t count, cap;
    uint32_t x0, y0, size; /* the cell: [x0, x0 + size) x [y0, y0 + size) */
    uint32_t depth;
    uint64_t mass, sum_x, sum_y; /* set by qt_summarize */
} qnode;

static qnode *qnode_new(uint32_t x0, uint32_t y0, uint32_t size, uint32_t depth)
{
    qnode *q = xmalloc(sizeof *q);
    memset(q, 0, sizeof *q);
    q->x0 = x0;
    q->y0 = y0;
    q->size = size;
    q->depth = depth;
    return q;
}

static bool is_leaf(const qnode *q)
{
    return q->child[0] == NULL;
}

static int quadrant(const qnode *q, point p)
{
    uint32_t half = q->size / 2;
    return (p.x >= q->x0 + half) | ((p.y >= q->y0 + half) << 1);
}

static void qt_insert(qnode *q, point p);

static void leaf_add(qnode *q, point p)
{
    if (q->count == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 1;
        q->bucket = xrealloc(q->bucket, q->cap * sizeof *q->bucket);
    }
    q->bucket[q->count++] = p;
}

static void qt_insert(qnode *q, point p)
{
    while (!is_leaf(q))
        q = q->child[quadrant(q, p)];
    if (q->count < LEAF_POINTS || q->depth >= MAX_DEPTH || q->size < 2) {
        leaf_add(q, p);
        return;
    }
    /* Full: split into four children and hand the points down. */
    uint32_t half = q->size / 2;
    for (int i = 0; i < 4; i++)
        q->child[i] = qnode_new(q->x0 + (i & 1 ? half : 0), q->y0 + (i & 2 ? half : 0), half,
                                q->depth + 1);
    point *old = q->bucket;
    uint32_t n = q->count;
    q->bucket = NULL;
    q->count = q->cap = 0;
    for (uint32_t i = 0; i < n; i++)
        qt_insert(q->child[quadrant(q, old[i])], old[i]);
    free(old);
    qt_insert(q->child[quadrant(q, p)], p);
}

static void qt_summarize(qnode *q)
{
    q->mass = q->sum_x = q->sum_y = 0;
    if (is_leaf(q)) {
        for (uint32_t i = 0; i < q->count; i++) {
            q->mass++;
            q->sum_x += q->bucket[i].x;
            q->sum_y += q->bucket[i].y;
        }
        return;
    }
    for (int i = 0; i < 4; i++) {
        qt_summarize(q->child[i]);
        q->mass += q->child[i]->mass;
        q->sum_x += q->child[i]->sum_x;
        q->sum_y += q->child[i]->sum_y;
    }
}

static uint64_t udist(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

/* Barnes-Hut's opening test in integers: a cell of side s whose centre of mass
 * is at Chebyshev distance d from p counts as one body when 2 * s < d. Returns
 * the number of interactions, and folds a weighted distance into *acc. */
static uint64_t qt_interact(const qnode *q, point p, uint64_t *acc)
{
    if (q->mass == 0)
        return 0;
    uint64_t cx = q->sum_x / q->mass, cy = q->sum_y / q->mass;
    uint64_t dx = udist(cx, p.x), dy = udist(cy, p.y);
    uint64_t d = dx > dy ? dx : dy;
    if (2 * (uint64_t)q->size < d) {
        *acc += q->mass * (d >> 8);
        return 1;
    }
    if (is_leaf(q)) {
        for (uint32_t i = 0; i < q->count; i++) {
            uint64_t ex = udist(q->bucket[i].x, p.x), ey = udist(q->bucket[i].y, p.y);
            *acc += (ex > ey ? ex : ey) >> 8;
        }
        return q->count;
    }
    uint64_t n = 0;
    for (int i = 0; i < 4; i++)
        n += qt_interact(q->child[i], p, acc);
    return n;
}

static size_t qt_free(qnode *q)
{
    size_t cells = 1;
    if (!is_leaf(q))
        for (int i = 0; i < 4; i++)
            cells += qt_free(q->child[i]);
    free(q->bucket);
    free(q);
    return cells;
}

/* ------------------------------------------------------------ driver */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tree_like [--quick] [steps [nodes [seed]]]\n"
            "  steps  build/walk/free rounds            default 400 (--quick 80)\n"
            "  nodes  search-tree nodes per round (the quadtree gets nodes / 2 points)\n"
            "                                           default 50000\n"
            "  seed   PRNG seed                         default 42\n"
            "Prints key=value lines and a checksum; the last is ops_per_sec\n"
            "(op = one malloc or realloc).\n");
}

int main(int argc, char **argv)
{
    uint64_t steps = 400, nodes = 50000, seed = 42;
    bool quick;
    char **pos;
    int n = bench_args(argc, argv, 3, usage, &quick, &pos);
    if (quick)
        steps = 80;
    if (n > 0)
        steps = bench_parse_uint("tree_like", "steps", pos[0]);
    if (n > 1)
        nodes = bench_parse_uint("tree_like", "nodes", pos[1]);
    if (n > 2)
        seed = bench_parse_uint("tree_like", "seed", pos[2]);
    if (nodes < 2) {
        fprintf(stderr, "tree_like: need nodes >= 2\n");
        return 2;
    }

    uint64_t checksum = 0x7EE1u, interactions = 0, cells = 0;
    size_t height_max = 0;
    double start = bench_now();
    for (uint64_t step = 0; step < steps; step++) {
        bench_rng rng;
        bench_rng_seed(&rng, seed * 7777u + step);

        tnode *root = NULL;
        for (uint64_t i = 0; i < nodes; i++)
            bst_insert(&root, tnode_new(&rng, bench_rng_next(&rng) >> 16));

        size_t npoints = (size_t)(nodes / 2);
        qnode *qt = qnode_new(0, 0, 1u << COORD_BITS, 0);
        for (size_t i = 0; i < npoints; i++) {
            uint64_t r = bench_rng_next(&rng);
            /* Two clusters and a uniform background, so the tree is uneven. */
            point p = { (uint32_t)(r & ((1u << COORD_BITS) - 1)),
                        (uint32_t)((r >> 20) & ((1u << COORD_BITS) - 1)) };
            if ((r >> 60) < 6) {
                p.x = (p.x >> 4) + ((r >> 63) ? 1u << 17 : 3u << 18);
                p.y = (p.y >> 4) + (1u << 18);
            }
            qt_insert(qt, p);
        }
        qt_summarize(qt);
        if (qt->mass != npoints) {
            fprintf(stderr, "tree_like: quadtree holds %llu points, not %zu\n",
                    (unsigned long long)qt->mass, npoints);
            return 1;
        }
        uint64_t acc = 0;
        bench_rng probe;
        bench_rng_seed(&probe, seed + step);
        for (size_t i = 0; i < npoints / 32; i++) {
            point p = { (uint32_t)bench_rng_range(&probe, 0, (1u << COORD_BITS) - 1),
                        (uint32_t)bench_rng_range(&probe, 0, (1u << COORD_BITS) - 1) };
            interactions += qt_interact(qt, p, &acc);
        }

        walk w = { 0, 0, checksum, 0 };
        bst_walk(root, 1, &w);
        if (w.rank != nodes) {
            fprintf(stderr, "tree_like: walked %llu nodes, built %llu\n",
                    (unsigned long long)w.rank, (unsigned long long)nodes);
            return 1;
        }
        checksum = mix(mix(mix(w.hash, acc), qt->sum_x), qt->sum_y);
        if (w.depth_max > height_max)
            height_max = w.depth_max;

        cells += qt_free(qt);
        bst_free(root);
    }
    double elapsed = bench_now() - start;
    uint64_t allocs = n_mallocs + n_reallocs;

    printf("workload=tree_like steps=%llu nodes=%llu seed=%llu\n", (unsigned long long)steps,
           (unsigned long long)nodes, (unsigned long long)seed);
    printf("height_max=%zu quadtree_cells=%llu interactions=%llu checksum=%016llx\n",
           height_max, (unsigned long long)cells, (unsigned long long)interactions,
           (unsigned long long)checksum);
    printf("elapsed_s=%.3f mallocs=%llu reallocs=%llu peak_rss_kib=%lu\n", elapsed,
           (unsigned long long)n_mallocs, (unsigned long long)n_reallocs, bench_peak_rss_kib());
    printf("ops_per_sec=%.0f\n", elapsed > 0 ? (double)allocs / elapsed : 0.0);
    return 0;
}
