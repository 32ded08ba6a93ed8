/*
 * spinlocked.c — seed 003's spinlocked baselines (see spinlocked.h).
 *
 * Memory comes from mmap directly, read-write and faulted in on first
 * touch, as brisk's own pools get theirs; nothing here calls malloc after
 * create. Every field of a pool or a buddy other than its lock is read and
 * written under that lock only, so none of them is atomic; the lock's
 * exchange (acquire) and store (release) order them. A hybrid's own fields
 * are written by create and read-only after.
 */
#define _GNU_SOURCE
#include "spinlocked.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CACHE_LINE 64
#define OBJECT_ALIGN ((size_t)16)
#define MIN_BLOCK ((size_t)16)
#define HYBRID_DEFAULT_MAX_BLOCK ((size_t)1 << 20)

/* ---- The lock ---- */

typedef struct spinlock {
    _Alignas(CACHE_LINE) atomic_int held;
} spinlock;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Test-and-test-and-set: spin on a plain load, exchange when it looks free. */
static inline void lock(spinlock *l)
{
    while (atomic_exchange_explicit(&l->held, 1, memory_order_acquire) != 0)
        while (atomic_load_explicit(&l->held, memory_order_relaxed) != 0)
            cpu_relax();
}

static inline void unlock(spinlock *l)
{
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

static void fatal(const char *caller, const void *p, const char *why)
{
    fprintf(stderr, "spinlocked: %s(%p): %s\n", caller, p, why);
    abort();
}

/* size bytes (a multiple of the page size) aligned to align (a power of
 * two): an over-sized mapping trimmed at both ends. */
static void *map_aligned(size_t size, size_t align)
{
    size_t padded = size + align;
    char *raw = mmap(NULL, padded, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *base = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    if (base != raw)
        munmap(raw, (size_t)(base - raw));
    if (base + size != raw + padded)
        munmap(base + size, (size_t)(raw + padded - (base + size)));
    return base;
}

static size_t round_up(size_t x, size_t align) { return (x + align - 1) & ~(align - 1); }

static size_t round_up_pow2(size_t x)
{
    size_t p = 1;
    while (p < x)
        p <<= 1;
    return p;
}

static unsigned log2_of(size_t pow2) { return (unsigned)__builtin_ctzll(pow2); }

/* Zeroed memory aligned to a cache line (the locks in it are). */
static void *zalloc_aligned(size_t size)
{
    size = round_up(size, CACHE_LINE);
    void *p = aligned_alloc(CACHE_LINE, size);
    if (p != NULL)
        memset(p, 0, size);
    return p;
}

/* ---- The free list ---- */

struct spin_pool {
    spinlock lock;
    void *free;      /* newest free object; each holds the next */
    char *frontier;  /* objects from here on were never handed out */
    char *objects;   /* the first object */
    char *end;       /* of the objects */
    char *base;      /* the mapping */
    size_t mapped;
    size_t stride;
};

spin_pool *spin_pool_create(size_t obj_size, size_t capacity)
{
    size_t stride = round_up(obj_size != 0 ? obj_size : 1, OBJECT_ALIGN);
    if (capacity == 0 || stride > (SIZE_MAX >> 1) / capacity) {
        errno = EINVAL;
        return NULL;
    }
    size_t header = round_up(sizeof(spin_pool), 4096);
    size_t mapped = header + round_up(stride * capacity, 4096);
    char *base = map_aligned(mapped, 4096);
    if (base == NULL)
        return NULL;
    spin_pool *pool = (spin_pool *)base;
    pool->free = NULL;
    pool->frontier = pool->objects = base + header;
    pool->end = base + header + stride * capacity;
    pool->base = base;
    pool->mapped = mapped;
    pool->stride = stride;
    return pool;
}

void *spin_pool_alloc(spin_pool *pool)
{
    lock(&pool->lock);
    void *p = pool->free;
    if (p != NULL) {
        pool->free = *(void **)p;
    } else if (pool->frontier < pool->end) {
        p = pool->frontier;
        pool->frontier += pool->stride;
    }
    unlock(&pool->lock);
    if (p == NULL)
        errno = ENOMEM;
    return p;
}

void spin_pool_free(spin_pool *pool, void *p)
{
    if (p == NULL)
        return;
    lock(&pool->lock);
    *(void **)p = pool->free;
    pool->free = p;
    unlock(&pool->lock);
}

void spin_pool_destroy(spin_pool *pool)
{
    if (pool != NULL)
        munmap(pool->base, pool->mapped);
}

/* The object range [lo, hi) of a pool, for the hybrid's dispatch. */
static void pool_range(const spin_pool *pool, uintptr_t *lo, uintptr_t *hi)
{
    *lo = (uintptr_t)pool->objects;
    *hi = (uintptr_t)pool->end;
}

/* ---- The buddy allocator ----
 *
 * Tree t's node i (heap order: node 1 is the root, i's children are 2i
 * and 2i + 1) at depth d covers max_block >> d bytes; nodes[i] counts the
 * units (min_block blocks) of its subtree that are used. A live block of
 * order k is one node taken whole: its count is 2^k, its ancestors count
 * it, its descendants stay 0.
 */
struct spin_buddy {
    spinlock lock;
    uint32_t *nodes;       /* ntrees x nodes_per_tree counters */
    uint8_t *index;        /* per unit: order + 1 where a live block starts, else 0 */
    char *base;            /* the blocks, aligned to max_block */
    size_t total;          /* bytes of the trees */
    size_t ntrees;
    size_t nodes_per_tree; /* 2^(depth + 1); entry 0 unused */
    size_t cur_tree;       /* where the last search succeeded */
    size_t max_block;
    unsigned min_shift;    /* log2(min_block) */
    unsigned depth;        /* log2(max_block / min_block) */
};

spin_buddy *spin_buddy_create(size_t total, size_t min_block, size_t max_block)
{
    size_t min = round_up_pow2(min_block < MIN_BLOCK ? MIN_BLOCK : min_block);
    size_t max = round_up_pow2(max_block != 0 ? max_block : total);
    if (total == 0 || min > max || log2_of(max) - log2_of(min) > 30) {
        errno = EINVAL;
        return NULL;
    }
    spin_buddy *b = zalloc_aligned(sizeof *b);
    if (b == NULL)
        return NULL;
    b->total = round_up(total, max);
    b->ntrees = b->total / max;
    b->max_block = max;
    b->min_shift = log2_of(min);
    b->depth = log2_of(max) - b->min_shift;
    b->nodes_per_tree = (size_t)2 << b->depth;
    b->nodes = calloc(b->ntrees * b->nodes_per_tree, sizeof(uint32_t));
    b->index = calloc(b->total >> b->min_shift, 1);
    b->base = map_aligned(b->total, max);
    if (b->nodes == NULL || b->index == NULL || b->base == NULL) {
        spin_buddy_destroy(b);
        errno = ENOMEM;
        return NULL;
    }
    return b;
}

/* Below node i of order `order` (its subtree holds 2^order units), take a
 * block of order k: node i itself when order == k. Returns the node taken,
 * or 0. Depth-first, so a free block of the order is always found. */
static size_t tree_take(uint32_t *n, size_t i, unsigned order, unsigned k)
{
    uint32_t units = (uint32_t)1 << k;
    if (order == k) {
        if (n[i] != 0)
            return 0;
        n[i] = units;
        return i;
    }
    if (n[i] + units > (uint32_t)1 << order)
        return 0;
    size_t taken = tree_take(n, 2 * i, order - 1, k);
    if (taken == 0)
        taken = tree_take(n, 2 * i + 1, order - 1, k);
    if (taken != 0)
        n[i] += units;
    return taken;
}

void *spin_buddy_alloc(spin_buddy *b, size_t size)
{
    if (size == 0 || size > b->max_block) {
        errno = size == 0 ? EINVAL : ENOMEM;
        return NULL;
    }
    unsigned k = 0;
    while (((size_t)1 << (b->min_shift + k)) < size)
        k++;
    void *p = NULL;
    lock(&b->lock);
    for (size_t tried = 0, t = b->cur_tree; tried < b->ntrees; tried++, t = (t + 1) % b->ntrees) {
        size_t i = tree_take(b->nodes + t * b->nodes_per_tree, 1, b->depth, k);
        if (i != 0) {
            size_t unit = (t << b->depth) | ((i - ((size_t)1 << (b->depth - k))) << k);
            b->index[unit] = (uint8_t)(k + 1);
            b->cur_tree = t;
            p = b->base + (unit << b->min_shift);
            break;
        }
    }
    unlock(&b->lock);
    if (p == NULL)
        errno = ENOMEM;
    return p;
}

void spin_buddy_free(spin_buddy *b, void *p)
{
    if (p == NULL)
        return;
    size_t offset = (size_t)((char *)p - b->base);
    if (offset >= b->total || (offset & (((size_t)1 << b->min_shift) - 1)) != 0)
        fatal("spin_buddy_free", p, "not a block of this buddy allocator");
    size_t unit = offset >> b->min_shift;
    lock(&b->lock);
    unsigned tag = b->index[unit];
    if (tag == 0) {
        unlock(&b->lock);
        fatal("spin_buddy_free", p, "double free, or not the start of a block");
    }
    b->index[unit] = 0;
    unsigned k = tag - 1;
    uint32_t *n = b->nodes + (unit >> b->depth) * b->nodes_per_tree;
    size_t within = unit & (((size_t)1 << b->depth) - 1);
    size_t i = ((size_t)1 << (b->depth - k)) + (within >> k);
    n[i] = 0;
    for (i >>= 1; i != 0; i >>= 1)
        n[i] -= (uint32_t)1 << k;
    unlock(&b->lock);
}

void spin_buddy_destroy(spin_buddy *b)
{
    if (b == NULL)
        return;
    if (b->base != NULL)
        munmap(b->base, b->total);
    free(b->nodes);
    free(b->index);
    free(b);
}

/* ---- The hybrid ---- */

struct spin_hybrid {
    size_t buckets, regions;
    size_t bucket_size[BRISK_HYBRID_MAX_BUCKETS];
    spin_pool *bucket[BRISK_HYBRID_MAX_BUCKETS];
    spin_buddy *region[BRISK_HYBRID_MAX_REGIONS];
    uintptr_t bucket_lo[BRISK_HYBRID_MAX_BUCKETS], bucket_hi[BRISK_HYBRID_MAX_BUCKETS];
};

/* A region's block sizes, as brisk_hybrid_create chooses them: min_block
 * the smallest power of two above the largest bucket (or the config's),
 * max_block the config's or 1 MiB, at most the region rounded up. */
static spin_buddy *create_region(const brisk_hybrid_config_t *c, size_t largest_bucket,
                                 size_t size)
{
    size_t min = c->region_min_block != 0 ? c->region_min_block
                                          : round_up_pow2(largest_bucket + 1);
    size_t max = c->region_max_block != 0 ? c->region_max_block : HYBRID_DEFAULT_MAX_BLOCK;
    if (max > size)
        max = round_up_pow2(size);
    return spin_buddy_create(size, min, max < min ? min : max);
}

spin_hybrid *spin_hybrid_create(const brisk_hybrid_config_t *config)
{
    brisk_hybrid_config_t defaults;
    if (config == NULL) {
        brisk_hybrid_default_config(&defaults);
        config = &defaults;
    }
    spin_hybrid *h = zalloc_aligned(sizeof *h);
    if (h == NULL)
        return NULL;
    size_t largest = 0;
    for (; h->buckets < BRISK_HYBRID_MAX_BUCKETS && config->bucket_sizes[h->buckets] != 0;
         h->buckets++) {
        size_t i = h->buckets, size = config->bucket_sizes[i];
        if (size % OBJECT_ALIGN != 0 || size <= largest)
            goto invalid;
        h->bucket_size[i] = largest = size;
        h->bucket[i] = spin_pool_create(size, config->bucket_counts[i]);
        if (h->bucket[i] == NULL)
            goto failed;
        pool_range(h->bucket[i], &h->bucket_lo[i], &h->bucket_hi[i]);
    }
    for (; h->regions < BRISK_HYBRID_MAX_REGIONS && config->region_sizes[h->regions] != 0;
         h->regions++) {
        size_t i = h->regions;
        h->region[i] = create_region(config, largest, config->region_sizes[i]);
        if (h->region[i] == NULL)
            goto failed;
    }
    return h;
invalid:
    errno = EINVAL;
failed:
    spin_hybrid_destroy(h);
    return NULL;
}

void *spin_hybrid_alloc(spin_hybrid *h, size_t size)
{
    size_t b = 0;
    while (b < h->buckets && h->bucket_size[b] < size)
        b++;
    if (b < h->buckets) {
        void *p = spin_pool_alloc(h->bucket[b]);
        if (p != NULL)
            return p;
    }
    for (size_t r = 0; r < h->regions; r++) {
        void *p = spin_buddy_alloc(h->region[r], size);
        if (p != NULL)
            return p;
    }
    errno = ENOMEM;
    return NULL;
}

void spin_hybrid_free(spin_hybrid *h, void *p)
{
    if (p == NULL)
        return;
    uintptr_t address = (uintptr_t)p;
    for (size_t b = 0; b < h->buckets; b++) {
        if (address - h->bucket_lo[b] < h->bucket_hi[b] - h->bucket_lo[b]) {
            spin_pool_free(h->bucket[b], p);
            return;
        }
    }
    for (size_t r = 0; r < h->regions; r++) {
        spin_buddy *region = h->region[r];
        if (address - (uintptr_t)region->base < region->total) {
            spin_buddy_free(region, p);
            return;
        }
    }
    fatal("spin_hybrid_free", p, "pointer not from this hybrid");
}

void spin_hybrid_destroy(spin_hybrid *h)
{
    if (h == NULL)
        return;
    for (size_t b = 0; b < BRISK_HYBRID_MAX_BUCKETS; b++)
        spin_pool_destroy(h->bucket[b]);
    for (size_t r = 0; r < BRISK_HYBRID_MAX_REGIONS; r++)
        spin_buddy_destroy(h->region[r]);
    free(h);
}
