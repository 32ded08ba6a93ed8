/*
 * fifo.c — the FIFO allocator (seed 002, after Intersec's mem-fifo):
 * variable-size blocks carved in order from pages; a page comes back when
 * every block carved from it has been freed, so memory freed roughly in the
 * order it was allocated is recycled for the price of a bump and a counter.
 *
 * Single-threaded by design: one thread at a time per fifo, no atomics, no
 * locks. Different fifos may be used by different threads at once.
 *
 * Layout of a page (one _brisk_os_reserve mapping, aligned to the fifo's
 * window: the page size rounded up to a power of two):
 *
 *   [ color ][ page_t ][ hdr|data ][ hdr|data ] ... [ free space, all zero ]
 *   mapping   page      page + AREA  <- used_size -> <- size - used_size ->
 *
 * Finding the page: address & ~(window - 1) is the mapping, and the bits
 * just above the window's alignment choose the header's color, so free
 * computes the page header's address from the block's address alone (see
 * page_of), not from the block header's offset: when frees come in random
 * order that load misses the cache, and the page, its counter and
 * everything after would wait on it. The block header is still read, to
 * check the block, but nothing waits on it. (The measurements behind this
 * and the choices below are in
 * bench/results/published/region-design-measurements.md.)
 *
 * The header sits `color` bytes (0, 64, ..., 960) into its mapping:
 * 4 KiB-aligned headers all fall in one L1 set, which 8 lines fill, and
 * random-order frees then missed L1 on nearly every page header. The
 * color is the window number (address / window) Gray-folded, n ^ n/2: the
 * kernel tends to place successive mappings one window apart, or two
 * (_brisk_os_reserve over-reserves and trims, which leaves a hole a window
 * wide), and either way 16 successive mappings take 16 different colors
 * (the window number alone gave only the even colors). The control block
 * sits 2 KiB into a page of its own, away from them.
 *
 * A block is an 8-byte header and the program's bytes. Spans (header + data)
 * are multiples of 16 and the area starts at AREA = 40 = 8 mod 16, so every
 * pointer handed out is 16-aligned, for at most 8 bytes more padding than
 * the seed's 8-alignment. The header is the seed's, packed into one word
 * (block_t): the offset back to the page, the span in 16-byte units (0:
 * alone on a big page) and a 5-bit state tag (live or freed). Free checks
 * the tag and that the offset leads to the very page the address names,
 * so a pointer that is no fifo block, or is freed twice, aborts with a
 * message. Past the inline free (realloc, the slow path, the exported
 * free for a p that starts a 4 KiB page) p is first looked up in the set
 * of the fifo's pages (their mappings' addresses, see page_set_has), so
 * that a header that is not in a page of the fifo is never read: it may
 * not be mapped.
 *
 * Call tree. brisk_fifo_alloc and brisk_fifo_free are inline in
 * <brisk/fifo.h> (over brisk_fifo_hot_t and brisk_fifo_page_hot_t, the
 * first fields of the fifo and of a page header, in brisk/internal.h) and
 * call the exported brisk_fifo_*_slow_ / brisk_fifo_page_empty_ below for
 * anything else; the library also exports brisk_fifo_alloc and free
 * themselves, over the same inline paths, for callers that do not inline.
 *   brisk_fifo_create   map the control page and the first (current) page
 *   page_map / page_release  a page in and out of the set of pages
 *   brisk_fifo_alloc    (inline) the span fits in current: carve at
 *                       used_size, the header and the counts
 *     brisk_fifo_alloc_slow_  annotated fifos (carve with annotations) and
 *                       spans that do not fit current:
 *       alloc_slow      (noinline) destroyed: abort; absurd size: ENOMEM;
 *                       span > page area: big_alloc (a page of its own);
 *                       current empty: reset it; else the spare or a new
 *                       page (page_new) becomes current
 *   brisk_fifo_free     (inline) page_of, check the header, --used_blocks
 *     brisk_fifo_free_slow_  a check failed (bad_pointer names it), or an
 *                       annotated fifo: the same free with annotations,
 *                       p's page looked up first (owned_page)
 *     brisk_fifo_page_empty_  a page other than current emptied: the page
 *                       policy
 *   brisk_fifo_realloc  p's page looked up, its header checked; fits the
 *                       span: same pointer; last block of its page with
 *                       room: grows in place; else alloc + copy + free
 *   brisk_fifo_destroy  release spare, cache and an empty current; the rest
 *                       goes with the last free, the control page last
 *   _brisk_fifo_validate  (regions/fifo.h; the end of this file) the pages
 *                       kept, block by block, and every page's header (the
 *                       set of pages), against the counters; debug
 *                       builds run it from alloc_slow every 64th time
 *
 * The page policy (the seed's):
 *   - current is never NULL and never let go while the fifo lives. When its
 *     last block is freed nothing happens; when it is found empty and full
 *     at an alloc, it is reset and reused: lazily, as the seed does (a reset
 *     at every emptying would put a memset call on the free path);
 *   - one spare page is kept for the next time current fills up;
 *   - a page that empties while a spare exists replaces current when current
 *     has less than 1/8 of its area free (current would need a page soon
 *     anyway: this avoids dropping a page just before taking one), else the
 *     page is dropped;
 *   - a full current with live blocks is simply left behind: the pool keeps
 *     no list of pages, the last free of a page decides its fate.
 *
 * Where pages come from (page_new / page_drop): the seed found calloc
 * faster than mmap because malloc keeps freed memory for the next request.
 * brisk may not use malloc here, so a fifo keeps the pages it drops in a
 * small cache of its own (at most 1 MiB: 16 pages of 64 KiB, or one page if
 * pages are larger) and unmaps only past that. Cached pages stay committed:
 * decommitting them (madvise) would make every reuse fault its pages back
 * in, which costs more than the memset that zeroes them.
 *
 * Pages and the control page go to the OS layer's mapping cache (os.h)
 * when the fifo lets them go, their used part zeroed, and come back from
 * it when it holds one of the size: a fifo made per task then maps
 * nothing and faults nothing in that its predecessor did. A kept mapping
 * is zero but for its head (CACHE_DIRTY_HEAD bytes), which a taker clears.
 *
 * Zeroing: fresh pages are zero. A page is zeroed (its used part only) when
 * it re-enters service as current, so a page's free space is always zero
 * and alloc never clears memory (clearing each block in alloc instead was
 * slower, and no better on the rings). A live block's bytes past its
 * requested size are zero too (realloc zeroes what a shrink drops), which
 * lets realloc grow a block in place and copy whole spans without
 * clearing. Zeroing is what glibc's malloc does not pay.
 * Other ways of zeroing measured no better: in 4-16 KiB steps just ahead
 * of the carve, CLZERO or non-temporal stores (the lines then come back
 * from memory at the carve).
 *
 * Packing: the block header is the seed's 8 bytes packed into one word by
 * hand (offset, span in units, state); as C bitfields, GCC read and wrote
 * the state byte apart from the rest. The seed's other trick, a 63-bit
 * `occupied` sharing a word with `alive`, bought a cache line there; here
 * `alive` is off the fast path (see destroy) and the bitfield only added
 * masking, so in_use is a plain word.
 *
 * Statistics: allocations counts the successful alloc and realloc calls
 * and bytes_requested the sizes they asked for (a realloc is one
 * allocation of its new size, in place or not); bytes_in_use counts spans
 * (headers and padding included); bytes_held every page mapped and not
 * released, cached ones too, and the control page; system_requests every
 * OS call made for the fifo (each of a reservation's, page releases, a
 * big shrink's decommit). brisk_fifo_stats may run in another thread (a
 * process-wide snapshot): it reads the owner's words without
 * synchronising, see there.
 *
 * Destroy with live blocks: alive = 0 and current points at a static page
 * with no room, so alloc's fast path fails and its slow path aborts; each
 * page is released as it empties, and the last one takes the control page
 * (the inline free touches the fifo no more once brisk_fifo_page_empty_
 * is called).
 *
 * A destroyed fifo, whether its live blocks keep its control block or the
 * mapping cache keeps it (zero but for current, which fifo_release points
 * at that static page again): alive is 0, which no live fifo has, and
 * every call with it but the frees of its live blocks aborts, "not a live
 * fifo (destroyed already?)": alloc (its inline path finds no room, and
 * alloc_slow tests alive), realloc and stats (alive first), and a free of
 * anything once no page is left (nb_pages 0: the inline free finds no
 * page, window_mask 0, and bad_pointer tests both first). None of it
 * costs a live fifo's inline paths anything. The marks are plain
 * stores, read plainly: a fifo is one thread's at a time, and a call
 * after its destroy in another thread comes after it by the program's own
 * ordering.
 *
 * Sanitizers: block headers and free space are ASan-poisoned except while
 * the allocator touches them; alloc unpoisons the bytes asked for, free
 * poisons the block, so a use after free is caught. Valgrind sees every
 * block through MALLOCLIKE/FREELIKE (base/annotate.h). Such a fifo is
 * annotated (hot.annotated: an ASan build, or running under a Valgrind
 * tool that tracks heap blocks, decided at create), which sends every
 * alloc and free of brisk/fifo.h to the slow paths here, where the
 * annotations are.
 */
/* This file defines the exported brisk_fifo_alloc and brisk_fifo_free. */
#define BRISK_FIFO_EXPORTS_
#include <brisk/fifo.h>
#include "base/annotate.h"
#include "base/base.h"
#include "os/os.h"
#include "regions/fifo.h"
#include "regions/registry.h"

#include <errno.h>
#include <string.h>

#define DEFAULT_PAGE_SIZE ((size_t)64 << 10)
/* Normal pages are at most 1 GiB, so offsets and spans fit the header. */
#define MAX_PAGE_SIZE     ((size_t)1 << 30)
/* Pages a fifo keeps for reuse after dropping them: at most this many bytes. */
#define PAGE_CACHE_BYTES  ((size_t)1 << 20)
#define PAGE_CACHE_MAX    16
/* Slots of the set of pages in the control block: up to half as many
 * pages, 4 MiB of the default 64 KiB pages, need no mapping for it. */
#define PAGE_SET_INLINE   128
/* Page headers start 0, 64, ..., 960 bytes into their mappings (colors),
 * chosen by the mapping's address (see page_of). Every mapping is aligned
 * to an OS page at least, so a header's address modulo the smallest page
 * is its color: PAGE_ALIGN_MASK has the bits no color sets. */
#define PAGE_COLOR        64u
#define PAGE_COLORS       16u
#define PAGE_ALIGN_MASK   ((uintptr_t)(BRISK_OS_MIN_PAGE_SIZE - 1) & \
                           ~(uintptr_t)((PAGE_COLORS - 1) * PAGE_COLOR))
/* The control block sits in the middle of its page, away from the colors. */
#define FIFO_COLOR        ((size_t)2048)
/* A fifo's mapping in the OS layer's cache is zero past its first
 * CACHE_DIRTY_HEAD bytes (a page header at any color, the control block
 * up to its inline set of pages: that is zero when the fifo goes, every
 * page having left it, and page_set_room clears it when the set moves to
 * a mapping). */
#define CACHE_DIRTY_HEAD  (FIFO_COLOR + offsetof(brisk_fifo_t, page_set_inline))
/* Big pages (a block of their own) up to this size go to that cache. */
#define BIG_CACHED        ((size_t)1 << 20)
/* The block header's layout is brisk/internal.h's: free's fast path is
 * inline in brisk/fifo.h. A 5-bit state tag says live or freed, so free
 * tells both "not a fifo block" and "freed twice" from one compare. */
#define BLOCK_HEADER      BRISK_FIFO_HEADER_
#define BLOCK_LIVE        BRISK_FIFO_LIVE_
#define BLOCK_FREED       BRISK_FIFO_FREED_
#define PAGE_MAGIC        0x6f6669666b736972ull /* "riskfifo" */
/* A realloc that drops this many bytes or more decommits whole OS pages. */
#define DECOMMIT_THRESHOLD ((size_t)256 << 10)
/* No request this large can be served (user space is 47 bits). */
#define MAX_REQUEST       ((size_t)1 << 47)

/* A block header: one word packed by hand, so that free reads it with one
 * load and retags it with one store (C bitfields made GCC load and store
 * the state byte on its own):
 *   bits  0-31  page offset: (char *)header - (char *)page
 *   bits 32-58  span / 16, header included; 0: alone on a big page
 *   bits 59-63  state: BLOCK_LIVE or BLOCK_FREED */
typedef uint64_t block_t;
#define HEADER_UNITS_SHIFT BRISK_FIFO_UNITS_SHIFT_
#define HEADER_UNITS_MASK  BRISK_FIFO_UNITS_MASK_
#define HEADER_STATE_SHIFT BRISK_FIFO_STATE_SHIFT_

BRISK_INLINE uint32_t header_page_offs(block_t h) { return (uint32_t)h; }
BRISK_INLINE size_t header_units(block_t h) { return (size_t)(h >> HEADER_UNITS_SHIFT) & HEADER_UNITS_MASK; }
BRISK_INLINE uint32_t header_state(block_t h) { return (uint32_t)(h >> HEADER_STATE_SHIFT); }
BRISK_INLINE block_t make_header(size_t page_offs, size_t units, uint32_t state) {
  return (block_t)page_offs | (block_t)units << HEADER_UNITS_SHIFT | (block_t)state << HEADER_STATE_SHIFT;
}

typedef struct page_s {
  /* hot: alloc's and free's fast paths (used_size, used_blocks, size,
   * color, fifo; brisk/internal.h) */
  brisk_fifo_page_hot_t hot;
  /* cold */
  size_t map_size;      /* bytes mapped, this header included */
  uint64_t magic;       /* PAGE_MAGIC, to tell "another fifo" from garbage */
} page_t;

#define AREA sizeof(page_t)
_Static_assert(sizeof(block_t) == BLOCK_HEADER, "a block header is 8 bytes");
_Static_assert(sizeof(page_t) % 16 == 8, "block data must start 16-aligned");
_Static_assert(AREA == BRISK_FIFO_AREA_, "brisk/fifo.h's inline alloc carves after the header");
_Static_assert(offsetof(page_t, hot) == 0, "a page's hot fields are its header's first");

struct brisk_fifo_s {
  /* hot: the fast paths, inline in brisk/fifo.h (brisk/internal.h): current,
   * in_use, window_mask (the window is a power of two >= page_size),
   * bytes_requested, allocations, color_shift, color_mask (see page_of),
   * annotated. in_use and bytes_requested are kept apart: side by side,
   * GCC adds to both with one 16-byte load, which stalls on the 8-byte
   * store to in_use of the free just before (store forwarding).
   * allocations may sit beside bytes_requested: only alloc writes either. */
  brisk_fifo_hot_t hot;
  /* cold: slow paths and stats */
  page_t *spare;
  bool alive;             /* cleared by destroy */
  uint32_t cache_max;     /* pages page_drop may keep */
  uint32_t cached;
  uint32_t slow_allocs;   /* alloc_slow calls (BRISK_DEBUG: every 64th validates) */
  size_t max_span;        /* the most any normal page holds, whatever its color */
  size_t page_size;       /* bytes mapped per normal page */
  size_t nb_pages;        /* pages mapped and not released, cached ones too */
  size_t bytes_held;      /* pages mapped (the control page not included) */
  size_t system_requests; /* OS calls made for this fifo so far */
  brisk_region_entry_t entry;
  page_t *cache[PAGE_CACHE_MAX];
  /* The set of the pages' mappings (see "the set of the fifo's pages"):
   * its slots (page_set_inline, or a mapping of page_set_bytes), how many
   * less one, and log2 of the window, which every mapping is a multiple
   * of. */
  uintptr_t *page_set;
  size_t page_set_mask;
  size_t page_set_bytes;  /* 0 while the slots are page_set_inline */
  uint32_t window_shift;
  uintptr_t page_set_inline[PAGE_SET_INLINE];
};

_Static_assert(offsetof(brisk_fifo_t, hot) == 0, "brisk/fifo.h reads the hot fields at the fifo");

/* What a destroyed fifo's current points at: no room, so alloc goes slow. */
static page_t dead_page;

/* fifo->hot.current as the page it is (its hot fields come first). */
BRISK_INLINE page_t *current_of(const brisk_fifo_t *fifo) { return (page_t *)fifo->hot.current; }

static BRISK_COLD BRISK_NORETURN void fatal(const char *caller, const void *p, const char *why) {
  _brisk_os_fatal_pointer(caller, p, why);
}

/* A call with a destroyed fifo (see the top). */
static BRISK_COLD BRISK_NORETURN void not_live(const char *caller, const brisk_fifo_t *fifo) {
  fatal(caller, fifo, "not a live fifo (destroyed already?)");
}

/*
 * Block headers and the free space of pages are ASan-poisoned except while
 * the allocator itself reads or writes them. Valgrind is told about blocks
 * only (annotate_alloc/free): marking headers as well would put four more
 * client requests, some fifty instructions, on every alloc/free pair.
 */
BRISK_INLINE void asan_open(void *p, size_t n) {
#if BRISK_ASAN
  brisk_annotate_internal(p, n);
#endif
  (void)p;
  (void)n;
}

BRISK_INLINE void asan_close(void *p, size_t n) {
#if BRISK_ASAN
  brisk_annotate_no_access(p, n);
#endif
  (void)p;
  (void)n;
}

BRISK_INLINE block_t *block_of(void *p) { return (block_t *)((char *)p - BLOCK_HEADER); }
BRISK_INLINE void *data_of(block_t *block) { return (char *)block + BLOCK_HEADER; }
BRISK_INLINE char *area_of(page_t *page) { return (char *)page + AREA; }
BRISK_INLINE size_t span_of(size_t size) { return (size + BLOCK_HEADER + 15) & ~(size_t)15; }

/* The span of a big page's one block: the whole page after its header. */
BRISK_INLINE size_t big_span(const page_t *page) { return page->map_size - page->hot.color - AREA; }

/* What a big page's block counts in bytes_in_use: its span rounded up to
 * 16, as every span is (the span itself is 8 mod 16 where the page header
 * is, and a realloc in place may fill it: a model that rounds the size and
 * header up to 16 then counts 8 more). */
BRISK_INLINE size_t big_in_use(const page_t *page) { return (big_span(page) + 15) & ~(size_t)15; }

/* Bytes of a block's span, header included. */
BRISK_INLINE size_t block_span(block_t header, const page_t *page) {
  return header_units(header) != 0 ? header_units(header) * 16 : big_span(page);
}

/*
 * The page header of the mapping that holds p, computed without reading
 * memory: every mapping (normal or big page) is aligned to the window, a
 * power of two at least the page size, and its header sits at the color
 * that the mapping's own address bits choose. Free then reaches the page
 * without waiting for the block header, which in random-order frees is a
 * cache miss (see the file's header).
 */
BRISK_INLINE page_t *page_of(const brisk_fifo_t *fifo, const void *p) {
  uintptr_t base = (uintptr_t)p & fifo->hot.window_mask;
  uintptr_t window_number = base >> fifo->hot.color_shift; /* scaled by PAGE_COLOR */
  return (page_t *)(base + ((window_number ^ (window_number >> 1)) & fifo->hot.color_mask));
}

BRISK_INLINE void write_header(block_t *block, size_t page_offs, size_t span) {
  asan_open(block, BLOCK_HEADER);
  *block = make_header(page_offs, span / 16, BLOCK_LIVE);
  asan_close(block, BLOCK_HEADER);
}

/* ---- the set of the fifo's pages ----
 *
 * brisk_fifo_realloc and the free past the inline path must know that a
 * pointer lies in one of this fifo's pages before they read its block
 * header: the bytes before a pointer that is no fifo block may be
 * unmapped, or no-access. The fifo keeps no list of its pages (see the
 * page policy), so it keeps this set of their mappings' addresses, each a
 * multiple of the window: open addressing, linear probing, never more
 * than half full, in the control block (PAGE_SET_INLINE slots) while the
 * fifo maps few pages, in a mapping of its own past that (doubled when it
 * fills; let go with the control page). page_map adds a page (first
 * making room, which can fail as the page's own mapping can), and
 * page_release removes it, so it holds nb_pages addresses.
 */

BRISK_INLINE size_t set_slot(const brisk_fifo_t *fifo, uintptr_t base) {
  return (size_t)(((base >> fifo->window_shift) * 0x9E3779B97F4A7C15ull) >> 32) &
         fifo->page_set_mask;
}

/* Whether the mapping at base (a multiple of the window) is a page of the
 * fifo. */
BRISK_INLINE bool page_set_has(const brisk_fifo_t *fifo, uintptr_t base) {
  if (base == 0) return false; /* what an empty slot holds */
  for (size_t i = set_slot(fifo, base);; i = (i + 1) & fifo->page_set_mask) {
    uintptr_t at = fifo->page_set[i];
    if (at == base) return true;
    if (at == 0) return false;
  }
}

/* Into a set with room. */
static void page_set_put(brisk_fifo_t *fifo, uintptr_t base) {
  size_t i = set_slot(fifo, base);
  while (fifo->page_set[i] != 0) i = (i + 1) & fifo->page_set_mask;
  fifo->page_set[i] = base;
}

/* Room for one more page, the set at most half full after it: false
 * (errno ENOMEM) when the system refuses a bigger one. */
static bool page_set_room(brisk_fifo_t *fifo) {
  size_t slots = fifo->page_set_mask + 1;
  if (2 * (fifo->nb_pages + 1) <= slots) return true;
  size_t page = _brisk_os_page_size();
  size_t bytes = brisk_align_up(2 * slots * sizeof(uintptr_t), page);
  uintptr_t *bigger = _brisk_os_reserve(bytes, page, 0, &fifo->system_requests);
  if (bigger == NULL) return false;
  uintptr_t *old = fifo->page_set;
  size_t old_bytes = fifo->page_set_bytes;
  fifo->page_set = bigger;
  fifo->page_set_mask = bytes / sizeof(uintptr_t) - 1;
  fifo->page_set_bytes = bytes;
  for (size_t i = 0; i < slots; i++)
    if (old[i] != 0) page_set_put(fifo, old[i]);
  if (old_bytes != 0)
    _brisk_os_release(old, old_bytes, &fifo->system_requests);
  else
    memset(old, 0, slots * sizeof *old); /* the inline slots: see CACHE_DIRTY_HEAD */
  return true;
}

/* Out of the set. Backward shift: each later address of the run moves
 * into the hole when its home slot is not between the hole and where it
 * lies, so that every address stays reachable from its home. */
static void page_set_remove(brisk_fifo_t *fifo, uintptr_t base) {
  uintptr_t *set = fifo->page_set;
  size_t mask = fifo->page_set_mask;
  size_t i = set_slot(fifo, base);
  for (; set[i] != base; i = (i + 1) & mask)
    if (set[i] == 0) return;
  for (size_t j = (i + 1) & mask; set[j] != 0; j = (j + 1) & mask) {
    size_t home = set_slot(fifo, set[j]);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      set[i] = set[j];
      i = j;
    }
  }
  set[i] = 0;
}

/* The page of this fifo that p would be a block of, or NULL when p lies
 * in none (p is not 16-aligned as every block is, the mapping its address
 * names is no page of the fifo, or p falls before the page's first block
 * or past its mapping): then its block header may not even be mapped.
 * Reads nothing at p. */
BRISK_INLINE page_t *owned_page(const brisk_fifo_t *fifo, const void *p) {
  if (((uintptr_t)p & 15) != 0) return NULL;
  uintptr_t base = (uintptr_t)p & fifo->hot.window_mask;
  /* No page lies at 0. That is also every p's base once the fifo went
   * with its last block and its control block waits in the mapping cache,
   * zeroed (a free of that block again): no window, no current page, no
   * set to look in. */
  if (base == 0) return NULL;
  page_t *page = page_of(fifo, p);
  /* The current page, where realloc finds most blocks it grows in place,
   * is the fifo's without a lookup. */
  if (page != current_of(fifo) && !page_set_has(fifo, base)) return NULL;
  if ((const char *)p < area_of(page) + BLOCK_HEADER || (uintptr_t)p - base >= page->map_size)
    return NULL;
  return page;
}

/* ---- pages ---- */

static page_t *page_map(brisk_fifo_t *fifo, size_t map_size, bool big) {
  if (!page_set_room(fifo)) return NULL;
  bool reused;
  char *base = _brisk_os_reserve_cached(BRISK_OS_CACHE_FIFO, map_size, ~fifo->hot.window_mask + 1,
                                        &reused, &fifo->system_requests);
  if (base == NULL) return NULL;
  /* A kept mapping is zero past its head (see page_release). */
  if (reused) memset(base, 0, CACHE_DIRTY_HEAD);
  page_t *page = page_of(fifo, base);
  uint32_t color = (uint32_t)((char *)page - base);
  page->hot.color = color;
  page->hot.size = big ? 0 : (uint32_t)(map_size - color - AREA);
  page->hot.fifo = fifo;
  page->map_size = map_size;
  page->magic = PAGE_MAGIC;
  page_set_put(fifo, (uintptr_t)base);
  fifo->nb_pages++;
  fifo->bytes_held += map_size;
  asan_close(area_of(page), map_size - color - AREA);
  return page;
}

/* A page or the control page to the OS layer's mapping cache, which
 * refuses memory it holds already (kept twice, two later fifos would
 * share it). `caller`: the call the program made. */
static void release_cached(void *base, size_t size, size_t *calls, const char *caller) {
  if (BRISK_UNLIKELY(!_brisk_os_release_cached(BRISK_OS_CACHE_FIFO, base, size, calls)))
    fatal(caller, base, "memory the mapping cache holds already (the fifo was destroyed?)");
}

static void page_release(brisk_fifo_t *fifo, page_t *page, const char *caller) {
  fifo->nb_pages--;
  fifo->bytes_held -= page->map_size;
  char *base = (char *)page - page->hot.color;
  page_set_remove(fifo, (uintptr_t)base);
  /* The whole mapping back to plain memory before the memset below writes
   * it: ASan's poison, and Valgrind's view of the blocks freed in it
   * (brisk_annotate_free left them no-access), which would otherwise also
   * follow the mapping through the cache to the next fifo. */
  brisk_annotate_internal(base, page->map_size);
  /* Into the mapping cache zero past its head, so that the next fifo to
   * take it clears the head alone: the used part is all that is not. A big
   * page over BIG_CACHED goes back to the OS: clearing it would cost more
   * than the faults a fresh one takes. */
  if (page->hot.size == 0 && page->map_size > BIG_CACHED) {
    _brisk_os_release(base, page->map_size, &fifo->system_requests);
    return;
  }
  memset(area_of(page), 0, page->hot.size != 0 ? page->hot.used_size : big_span(page));
  release_cached(base, page->map_size, &fifo->system_requests, caller);
}

/* An empty page back in service: its used part zeroed, used_size 0. */
static void page_reset(page_t *page) {
  char *area = area_of(page);
  brisk_annotate_internal(area, page->hot.used_size);
  memset(area, 0, page->hot.used_size);
  asan_close(area, page->hot.used_size);
  page->hot.used_size = 0;
}

/* A normal page for current: one from the cache, else a fresh mapping. */
static page_t *page_new(brisk_fifo_t *fifo) {
  if (fifo->cached > 0) {
    page_t *page = fifo->cache[--fifo->cached];
    page_reset(page);
    return page;
  }
  return page_map(fifo, fifo->page_size, false);
}

/* An empty normal page the policy lets go (a free emptied it): cached
 * while there is room. */
static void page_drop(brisk_fifo_t *fifo, page_t *page) {
  if (fifo->cached < fifo->cache_max) {
    fifo->cache[fifo->cached++] = page;
  } else {
    page_release(fifo, page, "brisk_fifo_free");
  }
}

/* The control page goes last: after destroy, once no page is left. */
static void fifo_release(brisk_fifo_t *fifo, const char *caller) {
  if (fifo->page_set_bytes != 0) _brisk_os_release(fifo->page_set, fifo->page_set_bytes, NULL);
  /* Zero past the head, as page_release leaves pages: the inline slots of
   * the set of pages are zero already (no page is left). current, in the
   * head, on the page with no room: a call with the destroyed fifo goes
   * out of line (see the top). */
  memset(fifo, 0, offsetof(brisk_fifo_t, page_set_inline));
  fifo->hot.current = &dead_page.hot;
  release_cached((char *)fifo - FIFO_COLOR, _brisk_os_page_size(), NULL, caller);
}

/* ---- alloc ---- */

BRISK_INLINE void *carve(brisk_fifo_t *fifo, page_t *page, size_t span, size_t size) {
  uint32_t offs = page->hot.used_size;
  block_t *block = (block_t *)(area_of(page) + offs);
  write_header(block, AREA + offs, span);
  page->hot.used_size = offs + (uint32_t)span;
  page->hot.used_blocks++;
  fifo->hot.in_use += span;
  fifo->hot.bytes_requested += size;
  fifo->hot.allocations++;
  void *p = data_of(block);
  brisk_annotate_alloc(p, size, true);
  return p;
}

/* A block bigger than a page: a page of its own, sized to fit whatever
 * color its address gives it, never current. */
static void *big_alloc(brisk_fifo_t *fifo, size_t size) {
  size_t map_size =
      brisk_align_up(fifo->hot.color_mask + AREA + span_of(size), _brisk_os_page_size());
  page_t *page = page_map(fifo, map_size, true);
  if (page == NULL) return NULL;
  block_t *block = (block_t *)area_of(page);
  write_header(block, AREA, 0);
  page->hot.used_blocks = 1;
  fifo->hot.in_use += big_in_use(page);
  fifo->hot.bytes_requested += size;
  fifo->hot.allocations++;
  void *p = data_of(block);
  brisk_annotate_alloc(p, size, true);
  return p;
}

static BRISK_NOINLINE void *alloc_slow(brisk_fifo_t *fifo, size_t size) {
  if (BRISK_UNLIKELY(!fifo->alive)) not_live("brisk_fifo_alloc", fifo);
  /* Debug builds check the whole fifo now and then: here, between two of
   * its calls, it is consistent, and every 64th page filled costs a walk of
   * the blocks of at most 18 pages and a read of every page's header. */
  if (BRISK_DEBUG && (++fifo->slow_allocs & 63) == 0) _brisk_fifo_validate(fifo);
  if (size >= MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  size_t span = span_of(size);
  if (span > fifo->max_span) return big_alloc(fifo, size);
  page_t *page = current_of(fifo);
  if (page->hot.used_blocks == 0) {
    page_reset(page);
  } else if (fifo->spare != NULL) {
    page = fifo->spare;
    fifo->spare = NULL;
    page_reset(page);
    fifo->hot.current = &page->hot;
  } else {
    page = page_new(fifo);
    if (page == NULL) return NULL;
    fifo->hot.current = &page->hot;
  }
  return carve(fifo, page, span, size);
}

/* brisk/fifo.h's inline alloc comes here for all it does not do: each
 * alloc of an annotated fifo (which carves with annotations, when the
 * block fits), and every block that does not fit the current page. */
void *brisk_fifo_alloc_slow_(brisk_fifo_t *fifo, size_t size) {
  page_t *page = current_of(fifo);
  size_t span = span_of(size);
  size_t left = page->hot.size - page->hot.used_size;
  /* size > left also catches a span that wrapped around. */
  if (BRISK_UNLIKELY((span > left) | (size > left))) return alloc_slow(fifo, size);
  return carve(fifo, page, span, size);
}

/* ---- free ---- */

/* Whether a header found at `block` is a fifo block's, tagged `state`,
 * leading back to a page header where one can lie. */
BRISK_INLINE bool header_leads_to_page(const void *block, block_t header, uint32_t state) {
  uintptr_t page = (uintptr_t)block - header_page_offs(header);
  return header_state(header) == state && header_page_offs(header) >= AREA &&
         (page & PAGE_ALIGN_MASK) == 0;
}

/* p is no live block of this fifo: say what it is. p in one of this
 * fifo's pages (owned_page): a freed block, or no block. Elsewhere its
 * neighbourhood may be unmapped, so its header, and the page header that
 * leads to, are read only through the OS layer's checked read (where the
 * kernel refuses that call, such a p is just "not a block of a fifo"): a
 * live block of another fifo has both. */
static BRISK_COLD BRISK_NORETURN void bad_pointer(brisk_fifo_t *fifo, void *p, const char *caller) {
  /* Destroyed, and no live block keeps it: no block of it is left to
   * free (and its control block is what fifo_release left). */
  if (!fifo->alive && fifo->nb_pages == 0) not_live(caller, fifo);
  block_t *block = block_of(p);
  page_t *page = owned_page(fifo, p);
  if (page != NULL) {
    asan_open(block, BLOCK_HEADER);
    if (header_leads_to_page(block, *block, BLOCK_FREED) &&
        (char *)block - header_page_offs(*block) == (char *)page)
      fatal(caller, p, strcmp(caller, "brisk_fifo_free") == 0 ? "double free" : "a freed block");
    fatal(caller, p, "not a block of a fifo");
  }
  block_t header;
  uint64_t magic;
  if (((uintptr_t)p & 15) == 0 && _brisk_os_try_read(&header, block, sizeof header) &&
      (header_leads_to_page(block, header, BLOCK_LIVE) ||
       header_leads_to_page(block, header, BLOCK_FREED)) &&
      _brisk_os_try_read(&magic, (char *)block - header_page_offs(header) + offsetof(page_t, magic),
                         sizeof magic) &&
      magic == PAGE_MAGIC)
    fatal(caller, p, "a block of another fifo");
  fatal(caller, p, "not a block of a fifo");
}

/* p's header and page, checked: p is a live block of this fifo. Before
 * its header is read, p must lie in one of the fifo's pages
 * (owned_page): the bytes before a pointer that is no block may be
 * unmapped. */
BRISK_INLINE page_t *checked_page(brisk_fifo_t *fifo, void *p, block_t *header, const char *caller) {
  page_t *page = owned_page(fifo, p);
  if (BRISK_UNLIKELY(page == NULL)) bad_pointer(fifo, p, caller);
  block_t *block = block_of(p);
  asan_open(block, BLOCK_HEADER);
  *header = *block;
  /* A live block's tag and the offset back to the very page its address
   * names. */
  bool plausible = header_state(*header) == BLOCK_LIVE &&
                   (char *)block - header_page_offs(*header) == (char *)page;
  if (BRISK_UNLIKELY(!plausible) || BRISK_UNLIKELY(page->hot.fifo != fifo)) bad_pointer(fifo, p, caller);
  return page;
}

/* A page other than current emptied (free leaves an empty current alone:
 * alloc resets it when it fills up). The inline free comes here too. */
void brisk_fifo_page_empty_(brisk_fifo_t *fifo, brisk_fifo_page_hot_t *page_hot) {
  page_t *page = (page_t *)page_hot;
  if (page->hot.size == 0) { /* a big page */
    fifo->hot.in_use -= big_in_use(page);
    page_release(fifo, page, "brisk_fifo_free");
  } else if (!fifo->alive) {
    page_release(fifo, page, "brisk_fifo_free");
  } else if (fifo->spare == NULL) {
    fifo->spare = page;
  } else {
    page_t *current = current_of(fifo);
    if (current->hot.size - current->hot.used_size < current->hot.size / 8) {
      page_reset(page);
      fifo->hot.current = &page->hot;
      if (current->hot.used_blocks == 0) page_drop(fifo, current);
    } else {
      page_drop(fifo, page);
    }
  }
  if (!fifo->alive && fifo->nb_pages == 0) fifo_release(fifo, "brisk_fifo_free");
}

/* brisk/fifo.h's inline free comes here when a check fails (which names
 * the misuse) and for every free of an annotated fifo: the same checks,
 * with the annotations. */
void brisk_fifo_free_slow_(brisk_fifo_t *fifo, void *p) {
  if (p == NULL) return;
  block_t header;
  page_t *page = checked_page(fifo, p, &header, "brisk_fifo_free");
  block_t *block = block_of(p);
  *block = header ^ (block_t)(BLOCK_LIVE ^ BLOCK_FREED) << HEADER_STATE_SHIFT;
  asan_close(block, BLOCK_HEADER);
  size_t span = header_units(header) * 16; /* 0 for a big block: page_empty counts it */
  brisk_annotate_free(p, block_span(header, page) - BLOCK_HEADER);
  fifo->hot.in_use -= span;
  /* current emptied: nothing to do until it fills up (alloc-then-free
   * lands here every time, so it is worth the compare). */
  if (BRISK_UNLIKELY(--page->hot.used_blocks == 0) && page != current_of(fifo))
    brisk_fifo_page_empty_(fifo, &page->hot);
}

/* The exported functions, for callers that do not inline brisk/fifo.h's,
 * test for a NULL fifo first (brisk/fifo.h: the rule for NULL handles);
 * the exported free also keeps a page-aligned p from the inline path. */
static BRISK_COLD void *no_fifo(void) {
  errno = EINVAL;
  return NULL;
}

void *brisk_fifo_alloc(brisk_fifo_t *fifo, size_t size) {
  if (BRISK_UNLIKELY(fifo == NULL)) return no_fifo();
  return brisk_fifo_alloc_inline_(fifo, size);
}

void brisk_fifo_free(brisk_fifo_t *fifo, void *p) {
  if (BRISK_UNLIKELY(fifo == NULL)) {
    if (p != NULL) fatal("brisk_fifo_free", p, "no fifo (NULL) to free it to");
    return;
  }
  /* The inline path reads the header before p, which for p at the start
   * of a 4 KiB page lies on the page before: for a p that is no block of
   * this fifo (the first block of a buddy allocator or a hybrid, a mapping
   * after a guard page) perhaps unmapped. The slow path finds p's page
   * first. (NULL goes there too, and returns.) Elsewhere the header lies
   * on p's own page. */
  if (BRISK_UNLIKELY(((uintptr_t)p & (BRISK_OS_MIN_PAGE_SIZE - 1)) == 0)) {
    brisk_fifo_free_slow_(fifo, p);
    return;
  }
  brisk_fifo_free_inline_(fifo, p);
}

/* ---- realloc ---- */

/* Zero the n bytes at p that a shrink takes from the program. */
static void zero_dropped(brisk_fifo_t *fifo, char *p, size_t n) {
  brisk_annotate_internal(p, n);
  if (n >= DECOMMIT_THRESHOLD) {
    /* Whole OS pages read back as zero once dropped: RSS falls too. */
    size_t os_page = _brisk_os_page_size();
    char *inner = (char *)brisk_align_up((uintptr_t)p, os_page);
    char *inner_end = (char *)((uintptr_t)(p + n) & ~(uintptr_t)(os_page - 1));
    memset(p, 0, (size_t)(inner - p));
    /* Refused (mlock'ed pages, for one), the pages keep their bytes. */
    if (!_brisk_os_decommit(inner, (size_t)(inner_end - inner), &fifo->system_requests))
      memset(inner, 0, (size_t)(inner_end - inner));
    memset(inner_end, 0, (size_t)(p + n - inner_end));
  } else {
    memset(p, 0, n);
  }
  asan_close(p, n);
}

/* The block's span changes where it stands (the last block of its page). */
static void resize_last(brisk_fifo_t *fifo, page_t *page, block_t *block, size_t span, size_t new_span) {
  page->hot.used_size = page->hot.used_size - (uint32_t)span + (uint32_t)new_span;
  fifo->hot.in_use = fifo->hot.in_use - span + new_span;
  asan_open(block, BLOCK_HEADER);
  *block = make_header(header_page_offs(*block), new_span / 16, BLOCK_LIVE);
  asan_close(block, BLOCK_HEADER);
}

void *brisk_fifo_realloc(brisk_fifo_t *fifo, void *p, size_t new_size) {
  if (BRISK_UNLIKELY(fifo == NULL)) return no_fifo();
  if (BRISK_UNLIKELY(!fifo->alive)) not_live("brisk_fifo_realloc", fifo);
  if (p == NULL) return brisk_fifo_alloc_inline_(fifo, new_size);
  block_t header;
  page_t *page = checked_page(fifo, p, &header, "brisk_fifo_realloc");
  block_t *block = block_of(p);
  asan_close(block, BLOCK_HEADER);
  size_t span = block_span(header, page);
  size_t capacity = span - BLOCK_HEADER;
  bool last = page->hot.size != 0 && (char *)block + span == area_of(page) + page->hot.used_size;
  if (new_size <= capacity) {
    /* Shrinking, or growing within the span. What is dropped is zeroed, so
     * growing again exposes zeros; the last block of its page gives its
     * dropped whole units back to the page, whose free space stays zero. */
    brisk_annotate_free(p, capacity);
    zero_dropped(fifo, (char *)p + new_size, capacity - new_size);
    if (last) resize_last(fifo, page, block, span, span_of(new_size));
  } else if (last && new_size < MAX_REQUEST && span_of(new_size) - span <= page->hot.size - page->hot.used_size) {
    brisk_annotate_free(p, capacity);
    resize_last(fifo, page, block, span, span_of(new_size));
  } else {
    void *q = brisk_fifo_alloc_inline_(fifo, new_size);
    if (q == NULL) return NULL;
    /* Past the size the program asked for, p's bytes are zero: copy all. */
    brisk_annotate_internal(p, capacity);
    memcpy(q, p, capacity);
    brisk_fifo_free_inline_(fifo, p);
    return q;
  }
  fifo->hot.bytes_requested += new_size;
  fifo->hot.allocations++;
  brisk_annotate_alloc(p, new_size, true);
  return p;
}

/* ---- lifetime and stats ---- */

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  brisk_fifo_stats((const brisk_fifo_t *)((const char *)entry - offsetof(brisk_fifo_t, entry)), out);
}

brisk_fifo_t *brisk_fifo_create(size_t page_size) {
  if (page_size == 0) page_size = DEFAULT_PAGE_SIZE;
  if (page_size > MAX_PAGE_SIZE) page_size = MAX_PAGE_SIZE;
  size_t os_page = _brisk_os_page_size();
  page_size = brisk_align_up(page_size, os_page);
  size_t calls = 0;
  bool reused;
  char *control = _brisk_os_reserve_cached(BRISK_OS_CACHE_FIFO, os_page, os_page, &reused, &calls);
  if (control == NULL) return NULL;
  if (reused) memset(control, 0, CACHE_DIRTY_HEAD);
  brisk_fifo_t *fifo = (brisk_fifo_t *)(control + FIFO_COLOR);
  _Static_assert(FIFO_COLOR + sizeof(brisk_fifo_t) <= BRISK_OS_MIN_PAGE_SIZE,
                 "the control block fits its page");
  fifo->system_requests = calls;
  fifo->page_size = page_size;
  fifo->alive = true;
  size_t cache_max = PAGE_CACHE_BYTES / page_size;
  fifo->cache_max = (uint32_t)(cache_max == 0 ? 1 : cache_max > PAGE_CACHE_MAX ? PAGE_CACHE_MAX : cache_max);
  size_t window = os_page;
  while (window < page_size) window <<= 1;
  fifo->hot.window_mask = ~(uintptr_t)(window - 1);
  fifo->window_shift = (uint32_t)__builtin_ctzll(window);
  fifo->page_set = fifo->page_set_inline;
  fifo->page_set_mask = PAGE_SET_INLINE - 1;
  /* Colors: a power of two, at most one per 4 KiB of the page, picked by
   * the window number (see page_of). */
  size_t colors = 1;
  while (colors < PAGE_COLORS && 2 * colors * ((size_t)4 << 10) <= page_size) colors <<= 1;
  fifo->hot.color_mask = (uint32_t)((colors - 1) * PAGE_COLOR);
  fifo->hot.color_shift = (uint32_t)__builtin_ctzll(window) - (uint32_t)__builtin_ctz(PAGE_COLOR);
  fifo->max_span = page_size - AREA - fifo->hot.color_mask;
  page_t *page = page_map(fifo, page_size, false);
  if (page == NULL) {
    fifo_release(fifo, "brisk_fifo_create");
    return NULL;
  }
  fifo->hot.current = &page->hot;
  fifo->hot.annotated = brisk_tools_watch_blocks();
  _brisk_region_register(&fifo->entry, BRISK_REGION_FIFO, registry_stats);
  return fifo;
}

void brisk_fifo_destroy(brisk_fifo_t *fifo) {
  if (fifo == NULL) return;
  /* Before anything is read at the handle: a fifo destroyed already (its
   * control block kept with live blocks, zero in the mapping cache, or back
   * with the system), or a handle of another kind, has no live entry. */
  if (BRISK_UNLIKELY(!_brisk_region_unregister(&fifo->entry, BRISK_REGION_FIFO)))
    not_live("brisk_fifo_destroy", fifo);
  fifo->alive = false;
  if (fifo->spare != NULL) page_release(fifo, fifo->spare, "brisk_fifo_destroy");
  fifo->spare = NULL;
  while (fifo->cached > 0) page_release(fifo, fifo->cache[--fifo->cached], "brisk_fifo_destroy");
  if (current_of(fifo)->hot.used_blocks == 0)
    page_release(fifo, current_of(fifo), "brisk_fifo_destroy");
  fifo->hot.current = &dead_page.hot;
  if (fifo->nb_pages == 0) fifo_release(fifo, "brisk_fifo_destroy");
}

/* One of the owner's words, read from any thread (see brisk_fifo_stats). */
#define OWNER_WORD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/*
 * The owner's thread gets exact numbers. Another thread (a process-wide
 * snapshot, through the registry) reads the owner's words while it may be
 * writing them with plain stores: a racy read by design, kept from
 * ThreadSanitizer as pool.c's racy_link is. Each word is read whole (an
 * aligned word load), so each count is one the owner wrote, but the counts
 * may be a few operations apart; the fifo itself is never written.
 */
BRISK_NO_TSAN void brisk_fifo_stats(const brisk_fifo_t *fifo, brisk_region_stats_t *out) {
  if (fifo == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  if (BRISK_UNLIKELY(!OWNER_WORD(fifo->alive))) not_live("brisk_fifo_stats", fifo);
  out->bytes_requested = OWNER_WORD(fifo->hot.bytes_requested);
  out->bytes_in_use = OWNER_WORD(fifo->hot.in_use);
  /* + the control page, and the set of pages once it needs a mapping */
  out->bytes_held = OWNER_WORD(fifo->bytes_held) + _brisk_os_page_size() +
                    OWNER_WORD(fifo->page_set_bytes);
  out->system_requests = OWNER_WORD(fifo->system_requests);
  out->allocations = OWNER_WORD(fifo->hot.allocations);
}

/* ---- validation (regions/fifo.h) ----
 *
 * The fifo keeps no list of its pages (see the page policy): a page left
 * behind full of live blocks, and a big page, are reachable only through
 * their blocks and the set of pages (their addresses, for free's checks).
 * The set of pages holds nb_pages addresses, each found from its slot,
 * the kept pages' among them, each the mapping of a page of this fifo:
 * its header where the address puts it, with the magic, the owner, the
 * color and the sizes of a normal or a big page; their mappings add up to
 * bytes_held. The blocks walked are those of the pages it keeps, current,
 * spare and cached, and in_use is checked against the others' by a bound:
 * each page neither kept nor released holds a live block of 16 bytes at
 * least. With no such page it must match exactly.
 *
 * Checked, for each page kept: its header where its mapping's address puts
 * it (page_of), in the set of pages, its magic, owner and sizes; its
 * blocks in address order, from the area's start to used_size, each
 * header tagged live or freed, leading back to the page, its span inside
 * the used part; as many live blocks as used_blocks (none for the spare
 * and cached pages); the free space past used_size all zero (the zeroing
 * alloc relies on). For the
 * fifo: the cache within its bounds, no page kept twice, and nb_pages and
 * in_use against the pages and blocks seen.
 */

static BRISK_COLD BRISK_NORETURN void check_failed(const void *p, const char *what) {
  _brisk_os_fatal_pointer("brisk_fifo_validate", p, what);
}

#define CHECK(condition, p, what) \
  do {                            \
    if (BRISK_UNLIKELY(!(condition))) check_failed((p), (what)); \
  } while (0)

/* Headers and free space stay ASan-poisoned while the validator reads them:
 * these two read without ASan's checks (and are kept out of line, so that
 * no checked caller inlines them). */
static BRISK_NO_ASAN BRISK_NOINLINE block_t read_header(const block_t *block) { return *block; }

typedef uint64_t __attribute__((may_alias)) any_word_t;

/* The first non-zero byte of [p, p + n), p 8-aligned; NULL if none. */
static BRISK_NO_ASAN BRISK_NOINLINE const char *first_nonzero(const char *p, size_t n) {
  size_t i = 0;
  while (i + 8 <= n && *(const any_word_t *)(p + i) == 0) i += 8;
  for (; i < n; i++)
    if (p[i] != 0) return p + i;
  return NULL;
}

/* A normal page the fifo keeps; returns the spans of its live blocks. */
static size_t check_page(const brisk_fifo_t *fifo, const page_t *page) {
  CHECK(((uintptr_t)page & PAGE_ALIGN_MASK) == 0 && page_of(fifo, page) == page, page,
        "a page header is not where its mapping's address puts it");
  CHECK(page_set_has(fifo, (uintptr_t)page & fifo->hot.window_mask), page,
        "a page the fifo keeps is not in its set of pages");
  CHECK(page->magic == PAGE_MAGIC, page, "a page header is garbled (its magic)");
  CHECK(page->hot.fifo == fifo, page, "a page of another fifo");
  uintptr_t color = (uintptr_t)page & ~fifo->hot.window_mask;
  CHECK(page->hot.size != 0 && page->map_size == fifo->page_size && page->hot.color == color &&
            page->hot.size == page->map_size - color - AREA,
        page, "a page's sizes disagree with its fifo's");
  CHECK(page->hot.used_size <= page->hot.size && page->hot.used_size % 16 == 0, page,
        "a page's used size is out of range");
  const char *area = (const char *)page + AREA;
  size_t offs = 0, live = 0, live_spans = 0;
  while (offs < page->hot.used_size) {
    const block_t *block = (const block_t *)(area + offs);
    const void *p = (const char *)block + BLOCK_HEADER;
    block_t header = read_header(block);
    uint32_t state = header_state(header);
    CHECK(state == BLOCK_LIVE || state == BLOCK_FREED, p,
          "a block header is garbled (an overflow of the block before?)");
    CHECK(header_page_offs(header) == AREA + offs, p, "a block header does not lead to its page");
    size_t span = header_units(header) * 16;
    CHECK(span != 0 && span <= page->hot.used_size - offs, p,
          "a block's span runs past its page's used part");
    if (state == BLOCK_LIVE) {
      live++;
      live_spans += span;
    }
    offs += span;
  }
  CHECK(live == page->hot.used_blocks, page, "a page's count of live blocks disagrees with its blocks");
  const char *dirty = first_nonzero(area + page->hot.used_size, page->hot.size - page->hot.used_size);
  CHECK(dirty == NULL, dirty, "a page's free space is not zero (a write past its last block?)");
  return live_spans;
}

/* The set of pages holds nb_pages addresses, each where a lookup from its
 * home slot finds it, each a page of this fifo's; their mappings are the
 * bytes held. */
static void check_page_set(const brisk_fifo_t *fifo) {
  size_t slots = fifo->page_set_mask + 1, held = 0, bytes = 0;
  CHECK(brisk_is_power_of_two(slots) && 2 * fifo->nb_pages <= slots &&
            (fifo->page_set_bytes == 0 ? fifo->page_set == fifo->page_set_inline &&
                                             slots == PAGE_SET_INLINE
                                       : slots * sizeof(uintptr_t) == fifo->page_set_bytes),
        fifo, "the fifo's set of pages is garbled");
  for (size_t i = 0; i < slots; i++) {
    uintptr_t base = fifo->page_set[i];
    if (base == 0) continue;
    held++;
    CHECK((base & ~fifo->hot.window_mask) == 0 && page_set_has(fifo, base), (const void *)base,
          "the fifo's set of pages lost a page (a lookup misses it)");
  }
  /* Before any address is followed: one too many may name a mapping gone. */
  CHECK(held == fifo->nb_pages, fifo, "the fifo's set of pages disagrees with its count of pages");
  for (size_t i = 0; i < slots; i++) {
    uintptr_t base = fifo->page_set[i];
    if (base == 0) continue;
    /* Pages left behind are found only here: a header garbled (an
     * overflow out of the mapping before, say) shows. */
    const page_t *page = page_of(fifo, (const void *)base);
    uint32_t color = (uint32_t)((uintptr_t)page - base);
    CHECK(page->magic == PAGE_MAGIC && page->hot.fifo == fifo && page->hot.color == color &&
              (page->hot.size != 0 ? page->map_size == fifo->page_size &&
                                         page->hot.size == page->map_size - color - AREA
                                   : page->map_size > fifo->page_size),
          page, "a page in the fifo's set of pages is garbled (its magic, owner or sizes)");
    bytes += page->map_size;
  }
  CHECK(bytes == fifo->bytes_held, fifo, "the fifo's bytes held disagree with its pages");
  CHECK(fifo->page_set_bytes == 0 ||
            first_nonzero((const char *)fifo->page_set_inline, sizeof fifo->page_set_inline) == NULL,
        fifo, "the fifo's inline set of pages is not zero since the set moved to a mapping");
}

void _brisk_fifo_validate(const brisk_fifo_t *fifo) {
  check_page_set(fifo);
  if (!fifo->alive) {
    /* Destroyed with live blocks: only they hold pages now. */
    CHECK(current_of(fifo) == &dead_page && fifo->spare == NULL && fifo->cached == 0 &&
              fifo->nb_pages != 0,
          fifo, "a destroyed fifo still keeps pages");
    return;
  }
  size_t window = ~fifo->hot.window_mask + 1;
  CHECK(brisk_is_power_of_two(window) && window >= fifo->page_size &&
            fifo->max_span == fifo->page_size - AREA - fifo->hot.color_mask,
        fifo, "the fifo's geometry is garbled");
  CHECK(fifo->cache_max >= 1 && fifo->cache_max <= PAGE_CACHE_MAX &&
            fifo->cached <= fifo->cache_max,
        fifo, "the page cache's count is out of range");
  const page_t *current = current_of(fifo);
  CHECK(current != NULL && current != &dead_page, fifo, "a live fifo has no current page");
  size_t live_spans = check_page(fifo, current);
  size_t kept = 1;
  const page_t *spare = fifo->spare;
  if (spare != NULL) {
    CHECK(spare != current, spare, "a page is kept twice (spare and current)");
    check_page(fifo, spare);
    CHECK(spare->hot.used_blocks == 0, spare, "the spare page holds live blocks");
    kept++;
  }
  for (uint32_t i = 0; i < fifo->cached; i++) {
    const page_t *page = fifo->cache[i];
    CHECK(page != current && page != spare, page, "a page is kept twice (cached and in use)");
    for (uint32_t j = 0; j < i; j++)
      CHECK(fifo->cache[j] != page, page, "a page is kept twice (cached twice)");
    check_page(fifo, page);
    CHECK(page->hot.used_blocks == 0, page, "a cached page holds live blocks");
    kept++;
  }
  CHECK(fifo->nb_pages >= kept, fifo, "the fifo counts fewer pages than it keeps");
  /* Left behind with live blocks, or big: each holds a live block of 16
   * bytes or more (their bytes held: check_page_set). */
  size_t elsewhere = fifo->nb_pages - kept;
  CHECK(elsewhere != 0 ? fifo->hot.in_use >= live_spans + elsewhere * 16 : fifo->hot.in_use == live_spans,
        fifo, "the fifo's bytes in use disagree with its live blocks");
}
