/*
 * buddy.c — a lock-free buddy allocator (seed 003's GP section, after
 * Marotta et al. 2018, "A Non-blocking Buddy System"): power-of-two blocks
 * from min_block to max_block, found top-down in a tree of counters.
 *
 * Layout: two reservations from the OS layer, no malloc anywhere.
 *
 *   region  [ tree 0: max_block bytes ][ tree 1 ] ... [ tree ntrees-1 ]
 *           aligned to max_block, so a block of size S (a power of two) at
 *           offset o with o % S == 0 is aligned to S in memory too.
 *   meta    [ brisk_buddy_t + per-thread slots ][ node counters ][ index ]
 *
 * The trees. Each tree is an implicit binary tree in heap order (node 1 is
 * the root, node i has children 2i and 2i+1; entry 0 is unused). A node at
 * depth d covers max_block >> d bytes; the leaves are min_block blocks
 * ("units"). A block of order k is 2^k units and is one node at depth
 * D - k (D = log2(max_block / min_block)). Every node holds one atomic
 * uint32: the number of units of its subtree that are used, i.e. held by a
 * live block or reserved by an allocation in progress that will end below
 * it. A node's "full" value is its size in units. (The lead's sketch counts
 * free units; counting used ones is the same algorithm mirrored, and lets
 * fresh zero pages from the kernel be the initial state, so metadata is
 * never written at create and only the parts in use become resident.)
 *
 * Allocation of order k, top-down from a root (no bottom-up climb):
 *   - at each node above depth D - k: reserve s = 2^k units with a CAS loop
 *     "used u -> u + s, only if u + s <= full"; when it fails the subtree
 *     cannot host the block and the search goes to the sibling;
 *   - at depth D - k: take the node with the CAS "used == 0 -> full";
 *   - a node both of whose children failed gives its reservation back
 *     (fetch_sub s) and the search returns to its parent's other child.
 * This is the seed's choice over Marotta's: Marotta marks a leaf-level node
 * and climbs to the root, rolling the half-marked chain back when it meets
 * a conflict; here nothing another thread could see as allocated is ever
 * undone — a failed subtree only redirects the search (the seed's "no
 * rollback of a misallocation"); reservations given back were never an
 * allocation. Single-threaded the search is complete (a depth-first search
 * of every subtree with room): if a free block of the order exists it is
 * found, so exhaustion is exact. With other threads in flight a search may
 * fail while a block is free (their reservations look like use for a
 * moment): exhaustion under concurrency is approximate, never unsafe.
 *
 * Free of a block of order k at node T: store 0 into T (release), then
 * fetch_sub s on every ancestor, bottom-up (release). Coalescing is
 * implicit: a node whose count is back to 0 is whole again and can be
 * taken as one block.
 *
 * Why two live blocks never overlap. Two overlapping blocks are the same
 * node or an ancestor/descendant pair. Same node: its own counter arbitrates
 * (one "0 -> full" CAS wins). Ancestor A and descendant T: an allocation of
 * T holds a reservation on A from before it takes T until its free has
 * walked past A, so A's count is nonzero and "0 -> full" on A fails all that
 * time; and once A is taken whole its count is full, so no reservation
 * through A (which needs u + s <= full, s >= 1) succeeds until A is freed.
 * While A is taken nobody else writes A's counter (every RMW on it fails
 * and nobody holds a reservation on it), which is why free may use a plain
 * store of 0 there. The descendants of a taken node keep the counts they
 * had when it was taken, all 0, and are unreachable until it is freed.
 *
 * The allocation index: one atomic byte per unit of the region, k + 1 at
 * the unit where a live block of order k starts, 0 elsewhere. It is how
 * free finds the order (hence the node) from the user's pointer. The seed's
 * index stores (pointer, alignment) pairs because its blocks are only 8-
 * aligned and an aligned request is served inside a block; here blocks are
 * aligned to their own size, so the pointer the user got is the block's
 * start and one byte per unit is enough. free exchanges the byte to 0: 0
 * already means a double free or a pointer that is not a block's start
 * (message, abort); two racing frees of one block cannot both win.
 *
 * Call tree:
 *   brisk_buddy_create(_ex)  check and round the sizes, reserve the region
 *                            (aligned to max_block) and the metadata, place
 *                            each thread slot's home tree; PREFAULT / LOCK
 *                            fault in and mlock both; register (registry.h;
 *                            a hybrid's regions, made by _brisk_buddy_create,
 *                            do not)
 *   _brisk_buddy_create_in   the same over memory its creator gives (the
 *                            hybrid's first region): no reservation, no
 *                            system call but PREFAULT/LOCK's;
 *                            _brisk_buddy_destroy_in leaves it to the
 *                            creator, saying whether it is clean
 *   brisk_buddy_alloc        check size/align → order k; thread cache hit
 *                            (THREAD_CACHE, small orders) → hand_out; else
 *   alloc_generic            (out of line)
 *     alloc_tree               each tree in turn from the slot's current
 *       tree_take                the top-down search above
 *     alloc_slow               (cold) every tree failed: flush this thread's
 *                              cache into the trees and retry once, then
 *                              the caches of slots no thread holds
 *                              (slot_take_back) and retry; ENOMEM
 *     hand_out                 index byte, counters, ASan/Valgrind
 *   brisk_buddy_free         range and unit checks, exchange the index byte,
 *                            counters; push on the thread cache, or
 *     release_block            tree_release: store 0, fetch_sub ancestors
 *   _brisk_buddy_take_run    a cache in front refills: one block split in place
 *   _brisk_buddy_free_batch  ... and gives back: the checks of free, then the
 *                            blocks' nodes 0 and one fetch_sub per distinct
 *                            ancestor, level by level
 *   _brisk_buddy_forget_blocks  (quiescent) what such a cache held, gone with
 *                            it: the nodes in use walked back to 0
 *   brisk_buddy_trim         (quiescent) every slot's cache back to the trees
 *   brisk_buddy_validate     (quiescent) recompute the trees, compare with
 *                            the index
 *   brisk_buddy_stats / _brisk_buddy_counters / _brisk_buddy_range
 *   brisk_buddy_destroy      unregister (abort for a handle that is no live
 *                            buddy), flush the caches, both reservations
 *                            to the OS layer's mapping cache (the meta one
 *                            only when every tree is free: it is then zero
 *                            past the header, which a reuse clears);
 *                            _brisk_buddy_destroy_unregistered: the same
 *                            for a hybrid's further regions
 *
 * Statistics: allocations and bytes_requested (the sizes asked, before
 * rounding) are counted per thread slot; bytes_in_use is block sizes;
 * bytes_held both reservations; system_requests every OS call made at
 * creation (each of a reservation's, prefaults, mlocks), the only time a
 * buddy allocator calls the OS.
 *
 * Who touches what, and with what memory order:
 *   node counters  every allocating/freeing thread. Reserve CAS and take
 *                  CAS: acquire on success, so whatever the block's previous
 *                  users wrote (published by their frees) happens before the
 *                  new owner's use; free's store and fetch_subs: release.
 *                  A reservation given back: relaxed (it publishes nothing;
 *                  as an RMW it keeps the release sequences intact). A taker
 *                  of A whose previous users held descendants of A reads the
 *                  value their release fetch_subs on A wrote; a taker of a
 *                  descendant of a block freed whole first reserved through
 *                  that block's node, reading its release store.
 *   index bytes    the block's allocator stores k + 1 after its take
 *                  (relaxed), its freer exchanges it to 0 (relaxed) before
 *                  its tree release: the next taker's acquire orders the
 *                  exchange before its own store. Handing the pointer from
 *                  allocator to freer is the program's own synchronisation.
 *                  Validate, quiescent, marks cached blocks with 0x80 and
 *                  clears the marks before it returns.
 *   slots[i]       per-thread entries (thread_slot.h): only slot i's holder
 *                  writes them. The counters in it are atomics written with
 *                  a relaxed load + store (no RMW) so that stats may read
 *                  them from any thread; the cache and cur_tree are plain
 *                  (trim and validate read them quiescent only). Threads
 *                  beyond BRISK_THREAD_SLOTS share slots[BRISK_THREAD_SLOTS]:
 *                  fetch_add on its counters, no cache, no cur_tree update.
 *   in_use         the flushed part of the bytes in use: a slot adds its
 *                  pending delta with one relaxed fetch_add when it reaches
 *                  ±FLUSH_BYTES (seed 004: batched accounting). Read
 *                  (relaxed) by every allocation for the high-water check.
 *   high_water     CAS-max (relaxed) when an allocation sees in_use plus its
 *                  own pending delta above it: exact with one thread, within
 *                  FLUSH_BYTES per other active thread otherwise. Written
 *                  only while the peak rises, so its line stays shared.
 *   used[t]        1 once tree t has served a block: a relaxed load, and a
 *                  store only when it was 0 (the line stays shared);
 *                  destroy (quiescent) reads and clears it, for its
 *                  estimate of the memory the buddy made resident.
 *   everything else  written by create, read-only after.
 *
 * Spreading threads: slot i starts at tree (i * stride) % ntrees, stride
 * an odd number near 2/3 of ntrees and coprime to it (so homes are distinct
 * and far apart), scans the trees in turn and remembers the last tree that
 * served it. Slots that share a home tree (more slots than trees) prefer
 * different children at the top PREF_LEVELS levels (the bits of
 * slot / ntrees), so they descend into different subtrees; below that, and
 * for a lone thread, the left child first (address-ordered first fit, which
 * keeps fragmentation low). Many trees spread threads far better than the
 * preferences do (bench/results/published/region-design-measurements.md
 * has the numbers).
 *
 * Worst case: counts say how much is free below a node, not whether an
 * aligned block of the order is. With every other unit free, a request of
 * two units reserves and gives back through every node above the last two
 * levels of every tree before it fails: time linear in the region's size.
 * Marotta's scan of the target level is no better.
 *
 * Thread cache (BRISK_REGION_THREAD_CACHE): for orders below CACHE_ORDERS
 * (blocks up to 512 × min_block), up to cache_depth(k) freed blocks per
 * order (8 up to 64 × min_block, 2 above) wait in the freeing thread's
 * slot. A cached block stays allocated in its tree (counters unchanged)
 * but its index byte is cleared on free and set again when the cache hands
 * it out, so a double free is still caught. A tree search that fails
 * flushes the calling thread's own cache and retries once, then takes back
 * the caches of slots no thread holds (threads that exited left them:
 * thread_slot.h) and retries again; other live threads' caches may hold
 * blocks a bounded allocator then lacks (at most cache_depth(k) blocks per
 * cached order per thread) until brisk_buddy_trim. The bigger orders serve
 * the hybrid's region (min_block 128 B: blocks of 16-64 KiB, which
 * otherwise walk 4-6 levels of counters per alloc and per free). A hit
 * costs no tree walk.
 *
 * Arguments: create rounds min_block and max_block (0: total, or 2^31 x
 * min_block if that is less) up to powers of two, each at least 16, and
 * total up to a multiple of max_block; EINVAL for total 0, min_block >
 * total, min_block > max_block (the sizes as given), max_block above total
 * rounded up to a power of two (at least 16), more than 2^31 units per
 * tree (a max_block given), or an unknown flag, whatever the sizes; then
 * ENOMEM for a total above 64 TiB, or memory the system refuses. alloc:
 * size 0 or an alignment that is not a power of two is EINVAL (align 0
 * means 16); a size or an alignment above max_block is ENOMEM (no block
 * fits) and counts as a failure.
 *
 * Destroyed: destroy leaves the header (which the mapping cache keeps as
 * it is, a second by default, when every block was freed) with max_block
 * and total 0, which no live buddy has (min_block is at least 16). Every
 * allocation is then too large (alloc_refused, cold) and every pointer
 * freed lies outside the trees (not_in_trees, cold); both test max_block
 * first and abort, "not a live buddy allocator (destroyed already?)", as
 * trim, stats and validate do, at no cost to a live buddy's alloc and
 * free. The stores are plain, and so are the loads: a correct program's
 * calls with a buddy all happen before its destroy (destroy runs with no
 * call in flight), so only a call after the destroy, or one racing with
 * it (the program's bug), reads them.
 *
 * Tools: the region is no-access for ASan/Valgrind until a block is handed
 * out (the requested size); free poisons the whole block before it
 * reaches a cache or a tree. For Valgrind the buddy is a mempool
 * (annotate.h) whose handle is its header, so destroy takes every block
 * with it: a block still live then would otherwise overlap the one
 * handed out at its address by the next allocator on that memory.
 */
#include "regions/buddy.h"

#include "base/annotate.h"
#include "base/base.h"
#include "os/os.h"
#include "regions/registry.h"
#include "regions/thread_slot.h"

#include <brisk/buddy.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MIN_BLOCK_FLOOR ((size_t)16)
/* 64 TiB: keeps every size computation far from wrapping around. */
#define MAX_TOTAL ((size_t)1 << 46)
/* Units per tree at most 2^31, so a root's count fits a uint32 and a depth
 * indexes a 32-bit preference mask. */
#define MAX_DEPTH 31u
#define CACHE_ORDERS 10u
#define CACHE_DEPTH 8u
/* Orders from here on (blocks of 128 x min_block and up) keep fewer. */
#define CACHE_BIG_ORDER 7u
#define CACHE_BIG_DEPTH 2u
#define PREF_LEVELS 3u
#define FLUSH_BYTES ((size_t)64 << 10)
#define KNOWN_FLAGS (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK | BRISK_REGION_THREAD_CACHE)
#define CACHE_MARK 0x80u

/* Blocks of order k a thread's cache keeps: few of the big ones, so that
 * caches bound what they hold (per thread 8 blocks of each order up to
 * 64 x min_block, 2 of each up to 512 x min_block). */
static inline uint32_t cache_depth(uint32_t k) {
  return k < CACHE_BIG_ORDER ? CACHE_DEPTH : CACHE_BIG_DEPTH;
}

/* One thread's entry (see thread_slot.h). */
typedef struct slot_s {
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t pending; /* in_use delta, mod 2^64 */
  _Atomic size_t requested;
  _Atomic size_t allocations;
  _Atomic size_t failures;
  size_t cur_tree; /* where the last search succeeded */
  uint32_t pref;   /* bit d: the child tried first at depth d */
  uint8_t cached[CACHE_ORDERS];
  void *cache[CACHE_ORDERS][CACHE_DEPTH];
} slot_t;

struct brisk_buddy_s {
  /* Written by create, read-only after. */
  uint8_t *base;          /* the region, aligned to max_block */
  size_t total;           /* bytes of the trees: ntrees * max_block */
  size_t region_size;     /* the region's reservation (total, page-rounded) */
  _Atomic uint32_t *nodes; /* ntrees * nodes_per_tree counters */
  _Atomic uint8_t *index; /* total / min_block bytes */
  _Atomic uint8_t *used;  /* ntrees bytes: 1 once a tree has served a block */
  size_t meta_size;       /* this reservation: header, nodes, index */
  size_t ntrees;
  size_t nodes_per_tree;  /* 2^(depth + 1) */
  size_t min_block;
  size_t max_block;
  uint32_t min_shift;
  uint32_t depth;         /* D: log2(max_block / min_block) */
  uint32_t cache_orders;  /* 0 without a thread cache */
  bool memory_locked;     /* BRISK_REGION_LOCK: never to the mapping cache */
  bool external;          /* _brisk_buddy_create_in: both parts are its creator's */
  size_t system_requests; /* OS calls made for it (all at creation) */
  brisk_region_entry_t entry; /* registry.h; unused when not registered */
  /* Written rarely, read by every allocation. */
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t in_use;
  BRISK_ALIGNED(BRISK_CACHE_LINE) _Atomic size_t high_water;
  slot_t slots[BRISK_THREAD_SLOTS + 1]; /* the last: threads without a slot */
};


/* ---- Messages ---- */

static BRISK_COLD BRISK_NORETURN void fatal(const char *caller, const void *p, const char *why) {
  _brisk_os_fatal_pointer(caller, p, why);
}

/* A destroyed buddy (see Destroyed at the top). */
BRISK_INLINE bool destroyed(const brisk_buddy_t *b) { return b->max_block == 0; }

static BRISK_COLD BRISK_NORETURN void not_live(const char *caller, const brisk_buddy_t *b) {
  fatal(caller, b, "not a live buddy allocator (destroyed already?)");
}

BRISK_INLINE void check_live(const char *caller, const brisk_buddy_t *b) {
  if (BRISK_UNLIKELY(destroyed(b))) not_live(caller, b);
}

/* A free of p, which lies outside the trees: no block of this buddy, or
 * any pointer given to a destroyed one (total 0). */
static BRISK_COLD BRISK_NORETURN void not_in_trees(const brisk_buddy_t *b, const void *p,
                                                   const char *caller) {
  check_live(caller, b);
  fatal(caller, p, "not a block of this buddy allocator");
}

/* A free of p, at the start of unit `unit`, found its index byte 0: no
 * live block starts there. Inside one (a block of order k >= 1 whose
 * start, unit rounded down to 2^k, holds k + 1 or more), or not: then the
 * unit lies in free memory, freed before or never handed out. The index
 * bytes read may be moving (other threads' allocations and frees): a
 * message, not a promise. */
static BRISK_COLD BRISK_NORETURN void not_a_live_block(const brisk_buddy_t *b, const void *p,
                                                      size_t unit, const char *caller) {
  for (uint32_t k = 1; k <= b->depth; k++) {
    size_t start = unit & ~(((size_t)1 << k) - 1);
    uint8_t tag = atomic_load_explicit(&b->index[start], memory_order_relaxed);
    if (tag != 0 && start + ((size_t)1 << (tag - 1)) > unit)
      fatal(caller, p, "not the start of a block");
  }
  fatal(caller, p, "double free, or a block never handed out");
}

/* ---- Tree operations ---- */

BRISK_INLINE bool reserve(_Atomic uint32_t *node, uint32_t s, uint32_t room) {
  uint32_t used = atomic_load_explicit(node, memory_order_relaxed);
  do {
    if (used > room) return false; /* room = full - s */
  } while (!atomic_compare_exchange_weak_explicit(node, &used, used + s, memory_order_acquire,
                                                  memory_order_relaxed));
  return true;
}

BRISK_INLINE bool take(_Atomic uint32_t *node, uint32_t full) {
  uint32_t used = atomic_load_explicit(node, memory_order_relaxed);
  if (used != 0) return false;
  return atomic_compare_exchange_strong_explicit(node, &used, full, memory_order_acquire,
                                                 memory_order_relaxed);
}

BRISK_INLINE void give_back(_Atomic uint32_t *node, uint32_t s) {
  atomic_fetch_sub_explicit(node, s, memory_order_relaxed);
}

/* Either child of node c (at depth target - 1) free: worth reserving c. A
 * hint only (two loads on one line); the take CAS decides. */
BRISK_INLINE bool has_free_child(_Atomic uint32_t *n, size_t c) {
  return atomic_load_explicit(&n[2 * c], memory_order_relaxed) == 0 ||
         atomic_load_explicit(&n[2 * c + 1], memory_order_relaxed) == 0;
}

/*
 * The top-down search of one tree (counters n) for a block of order k.
 * Returns the node taken, or 0. Iterative: the path is implicit in the heap
 * numbering, and whether child c was the first choice at its parent's depth
 * tells whether its sibling is still to try.
 */
BRISK_INLINE size_t tree_take(_Atomic uint32_t *n, uint32_t depth, uint32_t k, uint32_t pref) {
  const uint32_t s = (uint32_t)1 << k;
  const uint32_t target = depth - k;
  if (target == 0) return take(&n[1], s) ? 1 : 0;
  if (!reserve(&n[1], s, ((uint32_t)1 << depth) - s)) return 0;
  size_t i = 1;
  uint32_t d = 0; /* depth of i, which this search holds a reservation on */
  size_t c = 2 + (pref & 1);
  for (;;) {
    const uint32_t cd = d + 1;
    bool ok;
    if (cd == target)
      ok = take(&n[c], s);
    else
      ok = (cd + 1 != target || has_free_child(n, c)) &&
           reserve(&n[c], s, ((uint32_t)1 << (depth - cd)) - s);
    if (ok) {
      if (cd == target) return c;
      i = c;
      d = cd;
      c = 2 * i + ((pref >> d) & 1);
      continue;
    }
    /* c failed. Was it i's second choice? Then i is spent: give its
     * reservation back and go up, as long as that keeps being so. */
    while ((c & 1) != ((pref >> d) & 1)) {
      give_back(&n[i], s);
      if (i == 1) return 0;
      c = i;
      i >>= 1;
      d--;
    }
    c ^= 1;
  }
}

/* Free node i (order k) of a tree: store 0, then the ancestors bottom-up. */
BRISK_INLINE void tree_release(_Atomic uint32_t *n, size_t i, uint32_t k) {
  const uint32_t s = (uint32_t)1 << k;
  atomic_store_explicit(&n[i], 0, memory_order_release);
  for (i >>= 1; i != 0; i >>= 1) atomic_fetch_sub_explicit(&n[i], s, memory_order_release);
}

/* ---- Blocks, nodes and units ---- */

static inline _Atomic uint32_t *tree_nodes(const brisk_buddy_t *b, size_t tree) {
  return b->nodes + tree * b->nodes_per_tree;
}

/* The first unit of node i (order k) of a tree. */
static inline size_t node_unit(const brisk_buddy_t *b, size_t tree, size_t i, uint32_t k) {
  size_t level_first = (size_t)1 << (b->depth - k);
  return (tree << b->depth) | ((i - level_first) << k);
}

static inline void *unit_address(const brisk_buddy_t *b, size_t unit) {
  return b->base + (unit << b->min_shift);
}

static inline size_t address_unit(const brisk_buddy_t *b, const void *p) {
  return (size_t)((const uint8_t *)p - b->base) >> b->min_shift;
}

/* Give a block (index byte already cleared) back to its tree. */
static BRISK_NOINLINE void release_block(brisk_buddy_t *b, size_t unit, uint32_t k) {
  size_t tree = unit >> b->depth;
  size_t within = unit & (((size_t)1 << b->depth) - 1);
  size_t i = ((size_t)1 << (b->depth - k)) + (within >> k);
  tree_release(tree_nodes(b, tree), i, k);
}

/* Every tree in turn from the slot's current one; NULL when none has room. */
static inline void *alloc_tree(brisk_buddy_t *b, slot_t *e, bool shared, uint32_t k) {
  size_t tree = e->cur_tree;
  for (size_t tried = 0; tried < b->ntrees; tried++) {
    size_t i = tree_take(tree_nodes(b, tree), b->depth, k, e->pref);
    if (i != 0) {
      if (!shared) e->cur_tree = tree;
      /* Read-mostly: stored once per tree (destroy's estimate of what the
       * buddy made resident). */
      if (BRISK_UNLIKELY(!atomic_load_explicit(&b->used[tree], memory_order_relaxed)))
        atomic_store_explicit(&b->used[tree], 1, memory_order_relaxed);
      return unit_address(b, node_unit(b, tree, i, k));
    }
    if (++tree == b->ntrees) tree = 0;
  }
  return NULL;
}

/* ---- Counters ---- */

/* Add v to a counter of slot e: only its holder writes it (load + store),
 * unless e is the shared entry of threads without a slot. */
BRISK_INLINE void count(_Atomic size_t *c, size_t v, bool shared) {
  if (BRISK_UNLIKELY(shared))
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
  else
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static BRISK_NOINLINE void raise_high_water(brisk_buddy_t *b, size_t now) {
  size_t seen = atomic_load_explicit(&b->high_water, memory_order_relaxed);
  while (seen < now && !atomic_compare_exchange_weak_explicit(&b->high_water, &seen, now,
                                                             memory_order_relaxed,
                                                             memory_order_relaxed)) {
  }
}

/* Bytes in use change by delta (mod 2^64); returns this thread's pending
 * part (the flushed part is in b->in_use). */
BRISK_INLINE size_t account_bytes(brisk_buddy_t *b, slot_t *e, bool shared, size_t delta) {
  if (BRISK_UNLIKELY(shared)) {
    atomic_fetch_add_explicit(&b->in_use, delta, memory_order_relaxed);
    return 0;
  }
  size_t pending = atomic_load_explicit(&e->pending, memory_order_relaxed) + delta;
  if (BRISK_UNLIKELY((intptr_t)pending >= (intptr_t)FLUSH_BYTES ||
                     (intptr_t)pending <= -(intptr_t)FLUSH_BYTES)) {
    atomic_fetch_add_explicit(&b->in_use, pending, memory_order_relaxed);
    pending = 0;
  }
  atomic_store_explicit(&e->pending, pending, memory_order_relaxed);
  return pending;
}

/* ---- Allocation ---- */

/* The block at p (order k) goes to the program. */
BRISK_INLINE void *hand_out(brisk_buddy_t *b, slot_t *e, bool shared, void *p, uint32_t k,
                            size_t size) {
  atomic_store_explicit(&b->index[address_unit(b, p)], (uint8_t)(k + 1), memory_order_relaxed);
  count(&e->allocations, 1, shared);
  count(&e->requested, size, shared);
  size_t pending = account_bytes(b, e, shared, b->min_block << k);
  /* This thread's view of the bytes in use: signed, since the flushed part
   * can be below zero while other threads hold positive pending deltas. */
  intptr_t now = (intptr_t)(atomic_load_explicit(&b->in_use, memory_order_relaxed) + pending);
  if (BRISK_UNLIKELY(now > (intptr_t)atomic_load_explicit(&b->high_water, memory_order_relaxed)))
    raise_high_water(b, (size_t)now);
  return brisk_annotate_mempool_alloc(b, p, size);
}

/* Give every block in slot e's cache back to the trees. */
static void flush_slot(brisk_buddy_t *b, slot_t *e) {
  for (uint32_t k = 0; k < CACHE_ORDERS; k++) {
    for (uint32_t j = 0; j < e->cached[k]; j++)
      release_block(b, address_unit(b, e->cache[k][j]), k);
    e->cached[k] = 0;
  }
}

static bool cache_is_empty(const slot_t *e) {
  for (uint32_t k = 0; k < CACHE_ORDERS; k++)
    if (e->cached[k] != 0) return false;
  return true;
}

/* _brisk_thread_slots_take_back's call for a slot no thread holds (the
 * caller holds it meanwhile): its cache back to the trees. */
static size_t slot_take_back(void *context, uint32_t slot) {
  brisk_buddy_t *b = context;
  slot_t *e = &b->slots[slot];
  size_t blocks = 0;
  for (uint32_t k = 0; k < CACHE_ORDERS; k++) blocks += e->cached[k];
  flush_slot(b, e);
  return blocks;
}

static BRISK_COLD void *alloc_slow(brisk_buddy_t *b, slot_t *e, bool shared, uint32_t k,
                                   size_t size) {
  if (!shared && b->cache_orders != 0 && !cache_is_empty(e)) {
    flush_slot(b, e);
    void *p = alloc_tree(b, e, shared, k);
    if (p != NULL) return hand_out(b, e, shared, p, k, size);
  }
  /* Then the caches that threads left in their slots at exit. */
  if (b->cache_orders != 0 && _brisk_thread_slots_take_back(slot_take_back, b) != 0) {
    void *p = alloc_tree(b, e, shared, k);
    if (p != NULL) return hand_out(b, e, shared, p, k, size);
  }
  count(&e->failures, 1, shared);
  errno = ENOMEM;
  return NULL;
}

/* Out of line, so that a cache hit pays for no tree-walk registers. */
static BRISK_NOINLINE void *alloc_generic(brisk_buddy_t *b, slot_t *e, bool shared, uint32_t k,
                                          size_t size) {
  void *p = alloc_tree(b, e, shared, k);
  if (BRISK_UNLIKELY(p == NULL)) return alloc_slow(b, e, shared, k, size);
  return hand_out(b, e, shared, p, k, size);
}

/*
 * A run of 2^j blocks of order k for a cache in front (the hybrid's): one
 * block of order k + j taken by the usual search, then split where it
 * stands: every node of its subtree down to order k set full (each counts
 * the units below it, all used) and every order-k block's index byte set,
 * so that each block is freed alone like any other. Nobody else reads or
 * writes that subtree meanwhile: the block's node is full, so no search
 * reserves through it (buddy.c's overlap argument), and the blocks' frees
 * publish these stores with their release (tree_release). Returns how many
 * blocks (2^j, or 0 when no block of order k + j is free).
 */
size_t _brisk_buddy_take_run(brisk_buddy_t *b, uint32_t k, uint32_t j, void **out) {
  if (k + j > b->depth) return 0;
  uint32_t id = brisk_thread_slot();
  slot_t *e = &b->slots[id];
  bool shared = id == BRISK_NO_THREAD_SLOT;
  size_t tree = e->cur_tree;
  size_t node = 0;
  _Atomic uint32_t *n = NULL;
  for (size_t tried = 0; tried < b->ntrees; tried++) {
    n = tree_nodes(b, tree);
    node = tree_take(n, b->depth, k + j, e->pref);
    if (node != 0) break;
    if (++tree == b->ntrees) tree = 0;
  }
  if (node == 0) return 0;
  if (!shared) e->cur_tree = tree;
  if (!atomic_load_explicit(&b->used[tree], memory_order_relaxed))
    atomic_store_explicit(&b->used[tree], 1, memory_order_relaxed);
  /* Levels below the run's node: order m nodes are full (2^m units). */
  for (uint32_t m = k + j; m-- > k;) {
    size_t first = node << (k + j - m), count = (size_t)1 << (k + j - m);
    for (size_t i = 0; i < count; i++)
      atomic_store_explicit(&n[first + i], (uint32_t)1 << m, memory_order_relaxed);
  }
  size_t blocks = (size_t)1 << j, bytes = b->min_block << k;
  uint8_t *p = unit_address(b, node_unit(b, tree, node, k + j));
  for (size_t i = 0; i < blocks; i++) {
    out[i] = p + i * bytes;
    atomic_store_explicit(&b->index[address_unit(b, out[i])], (uint8_t)(k + 1),
                          memory_order_relaxed);
    brisk_annotate_mempool_alloc(b, out[i], bytes);
  }
  count(&e->allocations, blocks, shared);
  count(&e->requested, blocks * bytes, shared);
  size_t pending = account_bytes(b, e, shared, blocks * bytes);
  intptr_t now = (intptr_t)(atomic_load_explicit(&b->in_use, memory_order_relaxed) + pending);
  if (now > (intptr_t)atomic_load_explicit(&b->high_water, memory_order_relaxed))
    raise_high_water(b, (size_t)now);
  return blocks;
}

static BRISK_COLD void *alloc_refused(brisk_buddy_t *b, size_t size, size_t align) {
  /* Every request to a destroyed buddy: its max_block is 0. */
  check_live("brisk_buddy_alloc", b);
  if (size == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  /* size or align above max_block: no block fits, a failure like any ENOMEM. */
  uint32_t id = brisk_thread_slot();
  count(&b->slots[id].failures, 1, id == BRISK_NO_THREAD_SLOT);
  errno = ENOMEM;
  return NULL;
}

static BRISK_COLD void *no_buddy(void) {
  errno = EINVAL;
  return NULL;
}

void *brisk_buddy_alloc(brisk_buddy_t *b, size_t size, size_t align) {
  if (BRISK_UNLIKELY(b == NULL)) return no_buddy();
  if (BRISK_UNLIKELY(size - 1 >= b->max_block || align > b->max_block ||
                     (align & (align - 1)) != 0))
    return alloc_refused(b, size, align);
  size_t need = size > align ? size : align; /* align 0: 16, and min_block >= 16 */
  uint32_t k = need <= b->min_block
                   ? 0
                   : (uint32_t)(brisk_bit_scan_reverse(need - 1) + 1 - b->min_shift);
  uint32_t id = brisk_thread_slot();
  slot_t *e = &b->slots[id];
  bool shared = id == BRISK_NO_THREAD_SLOT;
  /* The shared entry's cache stays empty (free never fills it). */
  if (k < b->cache_orders && e->cached[k] != 0)
    return hand_out(b, e, shared, e->cache[k][--e->cached[k]], k, size);
  return alloc_generic(b, e, shared, k, size);
}

/* ---- Free ---- */

/* brisk_buddy_free's body, its messages naming `caller` (a constant in
 * each copy): brisk_buddy_free and _brisk_buddy_free_as. */
BRISK_INLINE void free_block(brisk_buddy_t *b, void *p, const char *caller) {
  if (p == NULL) return;
  if (BRISK_UNLIKELY(b == NULL)) fatal(caller, p, "no buddy allocator (NULL) to free it to");
  uintptr_t offset = (uintptr_t)p - (uintptr_t)b->base;
  if (BRISK_UNLIKELY(offset >= b->total)) not_in_trees(b, p, caller);
  if (BRISK_UNLIKELY((offset & (b->min_block - 1)) != 0))
    fatal(caller, p, "not the start of a block");
  size_t unit = offset >> b->min_shift;
  uint8_t tag = atomic_exchange_explicit(&b->index[unit], 0, memory_order_relaxed);
  if (BRISK_UNLIKELY(tag == 0)) not_a_live_block(b, p, unit, caller);
  uint32_t k = (uint32_t)tag - 1;
  size_t bytes = b->min_block << k;
  brisk_annotate_mempool_free(b, p, bytes, 0);
  uint32_t id = brisk_thread_slot();
  slot_t *e = &b->slots[id];
  bool shared = id == BRISK_NO_THREAD_SLOT;
  account_bytes(b, e, shared, (size_t)0 - bytes);
  if (k < b->cache_orders && !shared && e->cached[k] < cache_depth(k)) {
    e->cache[k][e->cached[k]++] = p;
    return;
  }
  release_block(b, unit, k);
}

void brisk_buddy_free(brisk_buddy_t *b, void *p) { free_block(b, p, "brisk_buddy_free"); }

void _brisk_buddy_free_as(brisk_buddy_t *b, void *p, const char *caller) {
  free_block(b, p, caller);
}

/*
 * Blocks of one order handed out by this buddy, given back together (a
 * cache in front gives back half a list: the hybrid's): each checked and
 * its index byte exchanged to 0 as brisk_buddy_free does, then the trees
 * released level by level: the blocks' nodes stored 0, then at each level
 * above one fetch_sub per distinct ancestor with the units of all its
 * blocks, sorted so that equal ancestors are neighbours. Every ancestor
 * still goes down after every node of the batch below it (bottom-up, as
 * tree_release), only later than a free of its own would take it: in
 * between the trees count the blocks as used, a state the blocks had.
 * Blocks of mixed orders, or a buddy with its own cache, take
 * brisk_buddy_free one by one.
 */
#define FREE_BATCH 64u

void _brisk_buddy_free_batch(brisk_buddy_t *b, void *const *blocks, size_t n,
                             const char *caller) {
  if (n == 0) return;
  uint32_t k = 0;
  bool one_order = b->cache_orders == 0;
  for (size_t i = 0; i < n && one_order; i++) {
    uintptr_t offset = (uintptr_t)blocks[i] - (uintptr_t)b->base;
    uint8_t tag = offset < b->total && (offset & (b->min_block - 1)) == 0
                      ? atomic_load_explicit(&b->index[offset >> b->min_shift],
                                             memory_order_relaxed)
                      : 0;
    if (i == 0) k = (uint32_t)tag - 1;
    one_order = tag != 0 && (uint32_t)tag - 1 == k;
  }
  if (!one_order) {
    for (size_t i = 0; i < n; i++) free_block(b, blocks[i], caller);
    return;
  }
  /* A node's place in b->nodes: its tree's nodes_per_tree (a power of
   * two) times the tree, plus its heap index; its parent keeps the tree
   * part and halves the index. */
  const size_t index_mask = b->nodes_per_tree - 1;
  for (size_t done = 0; done < n; done += FREE_BATCH) {
    size_t m = n - done < FREE_BATCH ? n - done : FREE_BATCH;
    size_t at[FREE_BATCH];
    uint32_t units[FREE_BATCH];
    for (size_t i = 0; i < m; i++) {
      void *p = blocks[done + i];
      size_t unit = address_unit(b, p);
      /* The tag was k + 1 above; a racing free of the same block finds 0. */
      uint8_t tag = atomic_exchange_explicit(&b->index[unit], 0, memory_order_relaxed);
      if (BRISK_UNLIKELY(tag != k + 1))
        fatal(caller, p, "double free, or not the start of a block");
      brisk_annotate_mempool_free(b, p, b->min_block << k, 0);
      size_t node = (unit >> b->depth) * b->nodes_per_tree + ((size_t)1 << (b->depth - k)) +
                    ((unit & (((size_t)1 << b->depth) - 1)) >> k);
      /* Insertion sort: batches are short. */
      size_t j = i;
      for (; j > 0 && at[j - 1] > node; j--) at[j] = at[j - 1];
      at[j] = node;
      units[i] = (uint32_t)1 << k;
    }
    /* The blocks' own nodes (release: what this thread wrote in them
     * happens before their next taker's acquire), then the ancestors. */
    for (size_t i = 0; i < m; i++)
      atomic_store_explicit(&b->nodes[at[i]], 0, memory_order_release);
    while ((at[0] & index_mask) > 1) {
      size_t w = 0;
      for (size_t i = 0; i < m; i++) {
        size_t parent = (at[i] & ~index_mask) | ((at[i] & index_mask) >> 1);
        if (w > 0 && at[w - 1] == parent) {
          units[w - 1] += units[i];
        } else {
          at[w] = parent;
          units[w] = units[i];
          w++;
        }
      }
      m = w;
      for (size_t i = 0; i < m; i++)
        atomic_fetch_sub_explicit(&b->nodes[at[i]], units[i], memory_order_release);
    }
  }
  uint32_t id = brisk_thread_slot();
  account_bytes(b, &b->slots[id], id == BRISK_NO_THREAD_SLOT, (size_t)0 - n * (b->min_block << k));
}

void brisk_buddy_trim(brisk_buddy_t *b) {
  if (b == NULL) return;
  check_live("brisk_buddy_trim", b);
  if (b->cache_orders == 0) return;
  for (uint32_t i = 0; i < BRISK_THREAD_SLOTS; i++) flush_slot(b, &b->slots[i]);
}

/* ---- Creation ---- */

static size_t gcd(size_t a, size_t b) {
  while (b != 0) {
    size_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Home tree and child preferences of every slot (see "Spreading threads"). */
static void place_slots(brisk_buddy_t *b) {
  size_t n = b->ntrees;
  size_t stride = (n - n / 3) | 1;
  while (n > 1 && gcd(stride, n) != 1) stride += 2;
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    slot_t *e = &b->slots[i];
    e->cur_tree = i == BRISK_THREAD_SLOTS ? 0 : (size_t)(((uint64_t)i * stride) % n);
    e->pref = i == BRISK_THREAD_SLOTS ? 0 : (uint32_t)((i / n) & ((1u << PREF_LEVELS) - 1));
  }
}

/* PREFAULT / LOCK: fault in (and lock) a range now, counting the calls. */
static bool make_resident(brisk_buddy_t *b, void *p, size_t size, unsigned flags) {
  return _brisk_os_make_resident(p, size, (flags & BRISK_REGION_LOCK) != 0, &b->system_requests);
}

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  brisk_buddy_stats((const brisk_buddy_t *)((const char *)entry - offsetof(brisk_buddy_t, entry)),
                    out);
}

brisk_buddy_t *brisk_buddy_create(size_t total, size_t min_block) {
  return _brisk_buddy_create(total, min_block, 0, 0, true);
}

brisk_buddy_t *brisk_buddy_create_ex(size_t total, size_t min_block, size_t max_block,
                                     unsigned flags) {
  return _brisk_buddy_create(total, min_block, max_block, flags, true);
}

/* A buddy's geometry from create's arguments, and its two mappings'
 * sizes. */
typedef struct shape_s {
  size_t total, min, max, ntrees, units, nodes_per_tree, header, nodes_bytes;
  size_t meta_size, region_size;
  uint32_t min_shift, depth;
} shape_t;

/* ceil(log2(x)) for x >= 1: 0 to 64, so that no rounding can wrap. */
static uint32_t log2_ceil(size_t x) {
  return x <= 1 ? 0 : (uint32_t)brisk_bit_scan_reverse(x - 1) + 1;
}

/*
 * 0, or the errno create fails with. The shape is checked on the
 * arguments' logarithms, before anything is rounded, so that a total of
 * any size meets the same rules: EINVAL for a shape no buddy can have
 * (whatever the memory), then ENOMEM for a total above MAX_TOTAL, a size
 * no reservation is let grow to.
 */
static int buddy_shape(size_t total, size_t min_block, size_t max_block, unsigned flags,
                       shape_t *out) {
  /* The sizes as the caller gave them are compared; below the smallest
   * block each rounds up to it (total 8, min_block 8: one block of 16). */
  if (total == 0 || min_block > total || (max_block != 0 && min_block > max_block) ||
      (flags & ~KNOWN_FLAGS) != 0)
    return EINVAL;
  uint32_t min_log = log2_ceil(min_block < MIN_BLOCK_FLOOR ? MIN_BLOCK_FLOOR : min_block);
  uint32_t total_log = log2_ceil(total);
  if (total_log < min_log) total_log = min_log;
  /* max_block 0: blocks up to total, as many units per tree as a tree
   * can count; a larger total is a row of such trees. */
  uint32_t max_log = max_block != 0 ? log2_ceil(max_block)
                     : total_log > min_log + MAX_DEPTH ? min_log + MAX_DEPTH
                                                       : total_log;
  if (max_log < min_log) max_log = min_log;
  /* max_block may pass total only by the rounding of total itself. */
  if (min_log > max_log || max_log > total_log || max_log - min_log > MAX_DEPTH) return EINVAL;
  if (total > MAX_TOTAL) return ENOMEM;
  size_t min = (size_t)1 << min_log, max = (size_t)1 << max_log;
  shape_t g;
  g.min = min;
  g.max = max;
  g.min_shift = (uint32_t)brisk_bit_scan_reverse(min);
  g.depth = (uint32_t)brisk_bit_scan_reverse(max) - g.min_shift;
  g.total = brisk_align_up(total, max);
  g.ntrees = g.total / max;
  size_t page = _brisk_os_page_size();
  g.units = g.total >> g.min_shift;
  g.nodes_per_tree = (size_t)2 << g.depth;
  g.header = brisk_align_up(sizeof(brisk_buddy_t), BRISK_CACHE_LINE);
  g.nodes_bytes = g.ntrees * g.nodes_per_tree * sizeof(uint32_t); /* 8 bytes per unit */
  g.meta_size = brisk_align_up(g.header + g.nodes_bytes + g.units + g.ntrees, page);
  g.region_size = brisk_align_up(g.total, page);
  *out = g;
  return 0;
}

/* Fill in the header at meta (zero: fresh or cleared; the rest of meta
 * zero too) for the region at base. */
static brisk_buddy_t *init_buddy(uint8_t *meta, uint8_t *base, const shape_t *g, unsigned flags,
                                 size_t calls) {
  brisk_buddy_t *b = (brisk_buddy_t *)meta;
  b->base = base;
  b->total = g->total;
  b->region_size = g->region_size;
  b->nodes = (_Atomic uint32_t *)(meta + g->header);
  b->index = (_Atomic uint8_t *)(meta + g->header + g->nodes_bytes);
  b->used = (_Atomic uint8_t *)(meta + g->header + g->nodes_bytes + g->units);
  b->meta_size = g->meta_size;
  b->ntrees = g->ntrees;
  b->nodes_per_tree = g->nodes_per_tree;
  b->min_block = g->min;
  b->max_block = g->max;
  b->min_shift = g->min_shift;
  b->depth = g->depth;
  b->cache_orders = 0;
  b->memory_locked = (flags & BRISK_REGION_LOCK) != 0;
  if ((flags & BRISK_REGION_THREAD_CACHE) != 0)
    b->cache_orders = g->depth + 1 < CACHE_ORDERS ? g->depth + 1 : CACHE_ORDERS;
  b->system_requests = calls; /* make_resident adds its own */
  atomic_init(&b->in_use, 0);
  atomic_init(&b->high_water, 0);
  place_slots(b);
  return b;
}

brisk_buddy_t *_brisk_buddy_create(size_t total, size_t min_block, size_t max_block,
                                   unsigned flags, bool registered) {
  shape_t g;
  int shape_error = buddy_shape(total, min_block, max_block, flags, &g);
  if (shape_error != 0) {
    errno = shape_error;
    return NULL;
  }
  _brisk_thread_slots_init(); /* here, not in a first allocation */
  size_t page = _brisk_os_page_size();
  size_t calls = 0;
  bool meta_reused, region_reused;
  uint8_t *meta = _brisk_os_reserve_cached(BRISK_OS_CACHE_BUDDY_META, g.meta_size, page,
                                           &meta_reused, &calls);
  if (meta == NULL) return NULL;
  uint8_t *base = _brisk_os_reserve_cached(BRISK_OS_CACHE_BUDDY_REGION, g.region_size, g.max,
                                           &region_reused, &calls);
  if (base == NULL) {
    _brisk_os_release(meta, g.meta_size, NULL);
    errno = ENOMEM;
    return NULL;
  }
  /* Fresh pages read as zero: every counter 0 (all free), every index byte
   * 0, every slot empty. A cached meta mapping is zero past the header
   * (see brisk_buddy_destroy), which is cleared here. */
  if (meta_reused) memset(meta, 0, g.header);
  brisk_buddy_t *b = init_buddy(meta, base, &g, flags, calls);
  if ((flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) != 0 &&
      (!make_resident(b, meta, g.meta_size, flags) ||
       !make_resident(b, base, g.region_size, flags))) {
    int saved = errno;
    _brisk_os_release(base, g.region_size, NULL);
    _brisk_os_release(meta, g.meta_size, NULL);
    errno = saved != 0 ? saved : ENOMEM;
    return NULL;
  }
  brisk_annotate_mempool_create(b);
  brisk_annotate_no_access(base, g.region_size);
  if (registered) _brisk_region_register(&b->entry, BRISK_REGION_BUDDY, registry_stats);
  return b;
}

int _brisk_buddy_footprint(size_t total, size_t min_block, size_t max_block, size_t *region_size,
                           size_t *meta_size) {
  shape_t g;
  int error = buddy_shape(total, min_block, max_block, 0, &g);
  if (error != 0) return error;
  *region_size = g.region_size;
  *meta_size = g.meta_size;
  return 0;
}

brisk_buddy_t *_brisk_buddy_create_in(void *region, void *meta, size_t total, size_t min_block,
                                      size_t max_block, unsigned flags) {
  shape_t g;
  int shape_error = buddy_shape(total, min_block, max_block, flags, &g);
  if (shape_error != 0) {
    errno = shape_error;
    return NULL;
  }
  _brisk_thread_slots_init(); /* here, not in a first allocation */
  /* Zero past the header (the creator's promise): the header is cleared,
   * but for the slots' caches (90 KiB), which are read only below their
   * counts, cleared with the rest of each slot's first line. */
  brisk_buddy_t *b = (brisk_buddy_t *)meta;
  memset(meta, 0, offsetof(brisk_buddy_t, slots));
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++)
    memset(&b->slots[i], 0, offsetof(slot_t, cache));
  b = init_buddy(meta, region, &g, flags, 0);
  b->external = true;
  if ((flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) != 0) {
    /* errno 0 to learn whether the refusal set one; put back on success. */
    int saved_errno = errno;
    errno = 0;
    if (!make_resident(b, meta, g.meta_size, flags) ||
        !make_resident(b, region, g.region_size, flags)) {
      if (errno == 0) errno = ENOMEM;
      return NULL;
    }
    errno = saved_errno;
  }
  brisk_annotate_mempool_create(b);
  brisk_annotate_no_access(region, g.region_size);
  return b;
}

/* Quiescent: every tree one free root. Then every counter is 0 (a count
 * is the units of the live blocks below it) and every index byte too. */
static bool trees_all_free(const brisk_buddy_t *b) {
  for (size_t t = 0; t < b->ntrees; t++)
    if (atomic_load_explicit(&tree_nodes(b, t)[1], memory_order_relaxed) != 0) return false;
  return true;
}

/* Quiescent, at destroy: the caches back to the trees, `used` cleared;
 * whether every tree is free (then the meta part is zero past the
 * header), and upper bounds of the bytes of each part in RAM: at most the
 * trees that ever served a block, their counters and index bytes. */
static bool quiesce(brisk_buddy_t *b, size_t *region_resident, size_t *meta_resident) {
  brisk_buddy_trim(b);
  bool clean = trees_all_free(b);
  size_t used = 0;
  for (size_t t = 0; t < b->ntrees; t++)
    used += atomic_load_explicit(&b->used[t], memory_order_relaxed);
  memset((void *)b->used, 0, b->ntrees);
  size_t page = _brisk_os_page_size();
  size_t meta_per_tree = b->nodes_per_tree * sizeof(uint32_t) + ((size_t)1 << b->depth);
  size_t region = used * b->max_block;
  size_t meta = brisk_align_up(sizeof(brisk_buddy_t), page) + used * meta_per_tree +
                2 * page * (used != 0);
  *region_resident = region < b->region_size ? region : b->region_size;
  *meta_resident = meta < b->meta_size ? meta : b->meta_size;
  return clean;
}

/* The header left destroyed (see Destroyed at the top). */
static void leave_destroyed(brisk_buddy_t *b) {
  b->max_block = 0;
  b->total = 0;
}

bool _brisk_buddy_destroy_in(brisk_buddy_t *b, size_t *resident) {
  /* Every block goes, and our poisoning with it, so whatever is laid here
   * next starts clean. */
  brisk_annotate_mempool_release(b, b->base, b->region_size);
  size_t region_resident, meta_resident;
  bool clean = quiesce(b, &region_resident, &meta_resident);
  *resident = region_resident + meta_resident;
  leave_destroyed(b);
  return clean;
}

/* A buddy no longer (or never) registered: both mappings to the mapping
 * cache or back to the system, or left to its creator. */
static void buddy_destroy(brisk_buddy_t *b) {
  if (b->external) {
    size_t resident;
    (void)_brisk_buddy_destroy_in(b, &resident);
    return;
  }
  /* Every block goes, and our poisoning with it, so whatever is mapped
   * here next starts clean. */
  brisk_annotate_mempool_release(b, b->base, b->region_size);
  /* Both mappings to the OS layer's cache: the region as it is; the meta
   * mapping only when, the caches flushed, every tree is free, so that
   * it is zero past its header (what create relies on). What they hold in
   * RAM is at most the trees that ever served a block, and their
   * counters and index bytes. */
  if (b->memory_locked) {
    /* mlock'ed memory kept in the cache would stay locked (and count
     * against RLIMIT_MEMLOCK) after its allocator is gone. */
    leave_destroyed(b);
    _brisk_os_release(b->base, b->region_size, NULL);
    _brisk_os_release(b, b->meta_size, NULL);
    return;
  }
  size_t region_resident, meta_resident;
  bool clean = quiesce(b, &region_resident, &meta_resident);
  leave_destroyed(b);
  /* Refused where the cache holds a mapping already (a header garbled to
   * name a destroyed buddy's): kept twice, two later buddies would share
   * it. The meta mapping, with the header, last. */
  if (BRISK_UNLIKELY(!_brisk_os_cache_put(BRISK_OS_CACHE_BUDDY_REGION, b->base, b->region_size,
                                          b->region_size, region_resident, NULL)))
    fatal("brisk_buddy_destroy", b, "its memory is in the mapping cache already");
  if (!clean)
    _brisk_os_release(b, b->meta_size, NULL);
  else if (BRISK_UNLIKELY(!_brisk_os_cache_put(BRISK_OS_CACHE_BUDDY_META, b, b->meta_size,
                                               b->meta_size, meta_resident, NULL)))
    fatal("brisk_buddy_destroy", b, "its memory is in the mapping cache already");
}

void brisk_buddy_destroy(brisk_buddy_t *b) {
  if (b == NULL) return;
  /* A buddy destroyed already (its meta mapping in the mapping cache, the
   * header as destroy left it, or back with the system), a hybrid's
   * region or another kind's handle has no live entry: destroying it
   * would give the cache its mappings twice, or ones that are no
   * buddy's. */
  if (BRISK_UNLIKELY(!_brisk_region_unregister(&b->entry, BRISK_REGION_BUDDY)))
    not_live("brisk_buddy_destroy", b);
  buddy_destroy(b);
}

void _brisk_buddy_destroy_unregistered(brisk_buddy_t *b) { buddy_destroy(b); }

/* ---- Statistics ---- */

static size_t sum_slots(const brisk_buddy_t *b, size_t offset) {
  size_t sum = 0;
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++) {
    _Atomic size_t *c = (_Atomic size_t *)((uint8_t *)&b->slots[i] + offset);
    sum += atomic_load_explicit(c, memory_order_relaxed);
  }
  return sum;
}

static size_t bytes_in_use(const brisk_buddy_t *b) {
  brisk_buddy_t *m = (brisk_buddy_t *)b;
  size_t sum = atomic_load_explicit(&m->in_use, memory_order_relaxed) +
               sum_slots(b, offsetof(slot_t, pending));
  return (intptr_t)sum < 0 ? 0 : sum; /* a racing read can see a free before its alloc */
}

void _brisk_buddy_counters(const brisk_buddy_t *b, brisk_buddy_counters_t *out) {
  brisk_buddy_t *m = (brisk_buddy_t *)b;
  out->in_use = bytes_in_use(b);
  out->high_water = atomic_load_explicit(&m->high_water, memory_order_relaxed);
  if (out->high_water < out->in_use) out->high_water = out->in_use;
  /* The peak an allocation saw may count other threads' frees not yet
   * flushed as still in use (the header's high_water): never more than the
   * trees hold, though. */
  if (out->high_water > b->total) out->high_water = b->total;
  out->allocations = sum_slots(b, offsetof(slot_t, allocations));
  out->failures = sum_slots(b, offsetof(slot_t, failures));
}

void brisk_buddy_stats(const brisk_buddy_t *b, brisk_region_stats_t *out) {
  if (b == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  check_live("brisk_buddy_stats", b);
  out->bytes_requested = sum_slots(b, offsetof(slot_t, requested));
  out->bytes_in_use = bytes_in_use(b);
  out->bytes_held = b->region_size + b->meta_size;
  out->system_requests = b->system_requests;
  out->allocations = sum_slots(b, offsetof(slot_t, allocations));
}

void _brisk_buddy_range(const brisk_buddy_t *b, uintptr_t *lo, uintptr_t *hi) {
  *lo = (uintptr_t)b->base;
  *hi = (uintptr_t)b->base + b->total;
}

size_t _brisk_buddy_min_block(const brisk_buddy_t *b) { return b->min_block; }

size_t _brisk_buddy_max_block(const brisk_buddy_t *b) { return b->max_block; }

void _brisk_buddy_geometry(const brisk_buddy_t *b, brisk_buddy_geometry_t *out) {
  out->base = (uintptr_t)b->base;
  out->total = b->total;
  out->min_shift = b->min_shift;
  out->orders = b->depth + 1;
  out->index = (const void *)b->index;
}

/* Quiescent: node i (order k) of tree n and everything below it back to
 * 0, with the index bytes of the blocks found there (each shown to
 * visit). A node whose count is 0 has all its descendants at 0 (a count
 * is the units used below it), so only the nodes in use are visited. A
 * block is a node whose count is full while both children count 0 (taken
 * whole; a node split by _brisk_buddy_take_run has full children) or a
 * leaf. */
typedef struct forget_s {
  brisk_buddy_t *b;
  void (*visit)(void *ctx, void *block);
  void *ctx;
} forget_t;

static void forget_subtree(const forget_t *f, size_t tree, size_t i, uint32_t k) {
  brisk_buddy_t *b = f->b;
  _Atomic uint32_t *n = tree_nodes(b, tree);
  uint32_t used = atomic_load_explicit(&n[i], memory_order_relaxed);
  if (used == 0) return;
  atomic_store_explicit(&n[i], 0, memory_order_relaxed);
  if (k == 0 || (used == (uint32_t)1 << k &&
                 atomic_load_explicit(&n[2 * i], memory_order_relaxed) == 0 &&
                 atomic_load_explicit(&n[2 * i + 1], memory_order_relaxed) == 0)) {
    size_t unit = node_unit(b, tree, i, k);
    atomic_store_explicit(&b->index[unit], 0, memory_order_relaxed);
    if (f->visit != NULL) f->visit(f->ctx, unit_address(b, unit));
    return;
  }
  forget_subtree(f, tree, 2 * i, k - 1);
  forget_subtree(f, tree, 2 * i + 1, k - 1);
}

void _brisk_buddy_forget_blocks(brisk_buddy_t *b, void (*visit)(void *ctx, void *block),
                                void *ctx) {
  brisk_buddy_trim(b);
  forget_t f = {b, visit, ctx};
  for (size_t t = 0; t < b->ntrees; t++) forget_subtree(&f, t, 1, b->depth);
#if BRISK_DEBUG
  /* Debug builds: every counter and index byte is 0 again (what the next
   * _brisk_buddy_create_in over this memory relies on). */
  for (size_t i = 0; i < b->ntrees * b->nodes_per_tree; i++)
    if (atomic_load_explicit(&b->nodes[i], memory_order_relaxed) != 0)
      fatal("brisk_buddy_free", b->base, "forget_blocks left a tree counter set");
  for (size_t u = 0; u < (b->total >> b->min_shift); u++)
    if (atomic_load_explicit(&b->index[u], memory_order_relaxed) != 0)
      fatal("brisk_buddy_free", unit_address(b, u), "forget_blocks left an index byte set");
#endif
  /* The blocks' bytes went with them. */
  for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++)
    atomic_store_explicit(&b->slots[i].pending, 0, memory_order_relaxed);
  atomic_store_explicit(&b->in_use, 0, memory_order_relaxed);
}

/* ---- Validation (quiescent) ---- */

typedef struct check_s {
  brisk_buddy_t *b;
  size_t tree;
  _Atomic uint32_t *n;
  size_t live_bytes; /* blocks handed out (index byte without CACHE_MARK) */
  bool failed;
} check_t;

static bool report(check_t *c, const char *what, size_t node, size_t unit, size_t value) {
  if (!c->failed) {
    char line[256];
    snprintf(line, sizeof line,
             "brisk: brisk_buddy_validate: %s (tree %zu, node %zu, unit %zu, value %zu)\n", what,
             c->tree, node, unit, value);
    _brisk_os_write_warning(line);
  }
  c->failed = true;
  return false;
}

static uint8_t index_at(const check_t *c, size_t unit) {
  return atomic_load_explicit(&c->b->index[unit], memory_order_relaxed);
}

/* Below a node taken whole: every counter 0, no block starts. */
static bool check_shadowed(check_t *c, size_t i, uint32_t k, size_t unit) {
  for (uint32_t l = 1; l <= k; l++)
    for (size_t j = i << l; j < (i + 1) << l; j++)
      if (atomic_load_explicit(&c->n[j], memory_order_relaxed) != 0)
        return report(c, "counter below a block taken whole is not 0", j, unit, 0);
  for (size_t u = unit + 1; u < unit + ((size_t)1 << k); u++)
    if (index_at(c, u) != 0) return report(c, "a block starts inside another", i, u, index_at(c, u));
  return true;
}

/* Node i of order k: consistent? Its used count is what the children say. */
static bool check_node(check_t *c, size_t i, uint32_t k) {
  size_t unit = node_unit(c->b, c->tree, i, k);
  uint32_t used = atomic_load_explicit(&c->n[i], memory_order_relaxed);
  uint32_t full = (uint32_t)1 << k;
  uint8_t tag = index_at(c, unit);
  if ((tag & ~CACHE_MARK) == k + 1) {
    if (used != full) return report(c, "a live block's node is not full", i, unit, used);
    if ((tag & CACHE_MARK) == 0) c->live_bytes += c->b->min_block << k;
    return check_shadowed(c, i, k, unit);
  }
  if (k == 0) {
    if (tag != 0) return report(c, "index byte names no block of this tree", i, unit, tag);
    if (used != 0) return report(c, "a unit is used by no block", i, unit, used);
    return true;
  }
  if (!check_node(c, 2 * i, k - 1) || !check_node(c, 2 * i + 1, k - 1)) return false;
  uint32_t children = atomic_load_explicit(&c->n[2 * i], memory_order_relaxed) +
                      atomic_load_explicit(&c->n[2 * i + 1], memory_order_relaxed);
  if (used != children) return report(c, "count differs from its children's sum", i, unit, used);
  return true;
}

/* Mark (or unmark) the cached blocks' index bytes; false on a bad cache. */
static bool mark_cached(check_t *c, bool mark) {
  brisk_buddy_t *b = c->b;
  for (uint32_t s = 0; s < BRISK_THREAD_SLOTS; s++) {
    slot_t *e = &b->slots[s];
    for (uint32_t k = 0; k < CACHE_ORDERS; k++) {
      for (uint32_t j = 0; j < e->cached[k]; j++) {
        void *p = e->cache[k][j];
        size_t offset = (size_t)((uint8_t *)p - b->base);
        if (offset >= b->total || (offset & ((b->min_block << k) - 1)) != 0) {
          if (mark) report(c, "a cached pointer is no block", s, offset, k);
          continue;
        }
        _Atomic uint8_t *tag = &b->index[offset >> b->min_shift];
        if (!mark) {
          if (atomic_load_explicit(tag, memory_order_relaxed) == (CACHE_MARK | (k + 1)))
            atomic_store_explicit(tag, 0, memory_order_relaxed);
          continue;
        }
        if (atomic_load_explicit(tag, memory_order_relaxed) != 0) {
          report(c, "a cached block is live or cached twice", s, offset >> b->min_shift,
                 atomic_load_explicit(tag, memory_order_relaxed));
          continue;
        }
        atomic_store_explicit(tag, (uint8_t)(CACHE_MARK | (k + 1)), memory_order_relaxed);
      }
    }
  }
  return !c->failed;
}

int brisk_buddy_validate(brisk_buddy_t *b, int *all_free) {
  if (b == NULL) {
    if (all_free != NULL) *all_free = 0;
    errno = EINVAL;
    return 0;
  }
  check_live("brisk_buddy_validate", b);
  check_t c = {.b = b, .tree = 0, .n = NULL, .live_bytes = 0, .failed = false};
  int roots_free = 1;
  if (mark_cached(&c, true)) {
    for (size_t t = 0; t < b->ntrees && !c.failed; t++) {
      c.tree = t;
      c.n = tree_nodes(b, t);
      check_node(&c, 1, b->depth);
      if (atomic_load_explicit(&c.n[1], memory_order_relaxed) != 0) roots_free = 0;
    }
  }
  mark_cached(&c, false);
  if (!c.failed && c.live_bytes != bytes_in_use(b)) {
    c.tree = 0;
    report(&c, "live blocks' bytes differ from the in-use counter", 0, 0, c.live_bytes);
  }
  if (all_free != NULL) *all_free = !c.failed && roots_free;
  return c.failed ? 0 : 1;
}
