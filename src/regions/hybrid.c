/*
 * hybrid.c — seed 003's bounded hybrid pool: fixed-size buckets (lock-free
 * pools, the seed's SP section) in front of buddy regions (lock-free buddy
 * trees, the GP section), with frees dispatched by address, and (with
 * BRISK_REGION_THREAD_CACHE, the default) a cache per thread in front of
 * both.
 *
 * Layout: one mapping from the OS layer (through its mapping cache, so a
 * hybrid created and destroyed per task takes its predecessor's) holds
 * the first region's blocks, then every bucket's objects, then the
 * buckets' headers, the first region's meta part (counters, index), the
 * brisk_hybrid_t itself, its per-thread slots included, and the inline
 * free's code table, a byte per 16 bytes of the mapping (layout_t has the
 * details). Every bucket is a bounded brisk_pool_t and the first
 * region a brisk_buddy_t, both laid over that memory
 * (_brisk_pool_create_in, _brisk_buddy_create_in); further regions, which
 * serve when the first is full, are buddies over reservations of their
 * own. All of it is read-write from creation (and with
 * BRISK_REGION_PREFAULT / LOCK faulted in and locked by create), so alloc
 * and free make no system call afterwards.
 *
 * Thread caches. A class is a bucket of 16 bytes or more, or one order of
 * the first region (blocks of min_block << k bytes, k < CACHED_ORDERS: 128
 * B to 64 KiB in the default configuration; further regions are not
 * cached). Each thread slot (thread_slot.h)
 * holds, per class, a LIFO list of free blocks linked through their first
 * word, the second word holding the hybrid's key (below), and one word
 * with the room the list has left (at most cap(class) blocks, 32 KiB of
 * them, from 2 to 64 blocks) and the blocks of the class the slot handed
 * out. A cached block is handed out from its section's point of view (a
 * pool's object taken, a buddy block's tree node and index byte set), so
 * the sections see only the caches' refills and flushes:
 *   alloc  (inline, align 0) the size's class from one table (by size up
 *          to 512 B, by power of two above), pop its list, one add for the
 *          room and the count: no atomic, no call; an empty list is
 *          refilled with half a list: a region's in one search of its trees
 *          (a block split where it stands, _brisk_buddy_take_run), a
 *          bucket's in one take from its pool's shards or carve
 *          (_brisk_pool_take_batch);
 *   free   (inline for the buckets' objects and the first region's blocks
 *          alike, with no branch on which) the pointer's granule (its
 *          distance from the mapping's start, rotated right by 4 bits, so
 *          that an address that is no multiple of 16 lands past the
 *          table) gives its class's code in the code table (a byte per 16
 *          bytes of the blocks, GRANULE_SHIFT); push onto the list. Other
 *          pointers, and those whose granule holds 0 (free_other_): the
 *          section by address (the range table: the buckets, largest
 *          first, then the regions), checked, then a bucket's class, or
 *          the section's own free. A full list gives its older half back
 *          to the section first, in one batch (_brisk_pool_give_batch: one
 *          chain; _brisk_buddy_free_batch: one atomic per tree node above
 *          the blocks).
 * Frees check what they can without a shared write: a granule holds a
 * code only while a block of a cached class starts there, handed out or
 * cached (a bucket's object below its marked count, which alloc raises
 * to the pool's carved count before it hands out an object from the
 * pool: mark_objects; a first-region block from when it leaves its buddy
 * until it goes back: set_code), so a pointer inside a block, or to an
 * object never handed out, or to a block back in its buddy, reads 0, and
 * free_other_ finds what is wrong. A block in a cache carries the key in
 * its second word, which alloc clears: a free that finds the key aborts
 * (a double free while the block is still in a thread's cache: the
 * freeing thread's list is walked only to say which). So does a bucket's
 * object back in its pool, which carries the same key there (the pools
 * are created with the hybrid's: pool_internal.h's Keys), whether the
 * caches are on or off; a block back in its region is caught by the
 * buddy's index byte. Buckets of 8 bytes have no room for the key and are
 * not cached; their double free is caught in debug builds only (the
 * pool's live bits). The sections' messages name brisk_hybrid_free.
 *
 * The bound with caches: one thread meets it exactly (a region that
 * cannot serve a request first takes back this thread's cached blocks of
 * every order, which may be what fragments it; a bucket's own list is
 * empty when it is refilled; then a section that cannot serve takes back
 * every list of the slots no thread holds, which threads that exited left
 * there: take_back_exited). Other live threads' caches are theirs: with T
 * threads a request can fail while (T - 1) x the per-thread maximum (the
 * sum of the caps: 415 KiB in the default configuration, 7 KiB of it in
 * the buckets, 192 KiB in the blocks of 32 and 64 KiB) sits in them. The caches are off (every call goes to the
 * sections, which then keep their own caches, as before) when a tool
 * watches blocks (an ASan build, Valgrind), so that it sees each block
 * come and go, and for threads without a slot.
 *
 * Call tree:
 *   brisk_hybrid_create   check the config, plan the mapping (plan_layout),
 *                         take it (a kept one: the hybrid and, unless its
 *                         predecessor left it clean, the region's meta part
 *                         cleared), lay the buckets and the first region
 *                         over it and create the others (not registered:
 *                         registry.h counts them under the hybrid; without
 *                         their own caches), build the size -> bucket and
 *                         size -> class tables, the classes, the range
 *                         table (the code table is zero: fresh, or left so
 *                         by the mapping's last hybrid), register
 * brisk_hybrid_alloc and brisk_hybrid_free are inline in <brisk/hybrid.h>
 * (over brisk_hybrid_hot_t in brisk/internal.h: this struct's first fields,
 * through the threads' entries; the code table at CODES_AT from it; and
 * the thread's slot line, exported) and
 * call the exported brisk_hybrid_*_slow_ / brisk_hybrid_free_other_ below
 * for anything else; the library also exports brisk_hybrid_alloc and free
 * themselves, over the same inline paths, for callers that do not inline.
 *   brisk_hybrid_alloc    (inline path above) or
 *     brisk_hybrid_alloc_slow_  arguments, the thread's slot, then
 *                         the bucket (its class: pop, refill; or the pool;
 *                         objects from the pool get their codes first),
 *                         each region in turn (its order's class: pop,
 *                         refill, take this thread's region caches back and
 *                         refill; or the buddy, and when it has no block,
 *                         this thread's region caches back and the buddy
 *                         again; a first-region block gets its order's
 *                         code); a section that still has no block takes
 *                         back the lists of slots no thread holds and
 *                         tries once more (take_back_exited);
 *                         brisk_malloc if the config
 *                         allows it, else NULL/ENOMEM; errno as it was
 *                         on success
 *   brisk_hybrid_free     granule -> code -> class -> push (inline path
 *                         above), or
 *     brisk_hybrid_free_slow_  code 0: to free_other_; else the thread's
 *                         slot and its entry made ready, the double-free
 *                         check, a full list's flush (free_to_class; no
 *                         slot: to the section)
 *     brisk_hybrid_free_other_  any other pointer: range -> check ->
 *                         a bucket's class -> push (cache_free), a block
 *                         no class caches to its section, pointers outside
 *                         every range (brisk_free with the fallback on,
 *                         else a message and abort)
 *   brisk_hybrid_stats / brisk_hybrid_totals  the per-slot counts summed
 *   brisk_hybrid_destroy  unregister (abort for a handle that is no live
 *                         hybrid); the code table zeroed (clear_codes:
 *                         the buckets' marked objects, and the region's
 *                         whole part while the program holds blocks); a
 *                         region whose blocks were all freed forgets what
 *                         the caches hold (so that its metadata can be
 *                         reused; its tree walk clears the first region's
 *                         cached blocks' codes: forget_code); destroy every
 *                         section (no concurrent calls); the touched
 *                         entries and slow counts zeroed; the mapping to
 *                         the OS layer's cache (released if locked), marked
 *                         with whether the region's meta part and the
 *                         entries are clean
 *
 * Destroyed: destroy leaves the hybrid (which the mapping cache keeps as
 * it is, a second by default) with no range (range_count 0, ranges[0] the
 * sentinel), no bucket to search (largest_bucket 0), no region, no
 * fallback, and, as ever, every thread's lists empty without room and the
 * code table zero, which no live hybrid has (it has a section at least).
 * Every call with it meets that before it reaches a section: the inline
 * alloc finds its list empty, and brisk_hybrid_alloc_slow_ finds no
 * section for the size and ends in no_block (cold); the inline free
 * finds code 0 or no room, and brisk_hybrid_free_other_ finds every
 * address outside, in free_outside, where without the fallback it goes to
 * outside_free (cold). Those, bad_request and the statistics test
 * range_count first and abort, "not a live hybrid pool (destroyed
 * already?)", at no cost to a live hybrid's paths. Plain stores, read
 * plainly: a correct program's calls with a hybrid all happen before its
 * destroy (destroy runs with no call in flight), so only a call after the
 * destroy, or one racing with it (the program's bug), reads them.
 *
 * Threads: every field of brisk_hybrid_t but `fallbacks`, `slow`, `slots`,
 * `touched` (mark_touched: set with a relaxed fetch_or by a slot's first
 * slow path, before it writes its entry or counts; read by statistics and
 * destroy), `entry`, `clean_meta_at` and `clean_slots_at` (destroy's,
 * quiescent) and `bucket_marked` is
 * written by create and only read afterwards (the seed's "read-only
 * acceleration structure"); the hybrid is published to other threads by
 * whatever the program uses to share the pointer. A bucket's marked count
 * is raised by any thread that takes objects from its pool (mark_objects:
 * the objects' codes stored, then a relaxed compare-and-swap, only upward,
 * to the pool's carved count), before it hands them out. A code of the
 * table is stored (relaxed) by the thread that takes its block from its
 * section, or marks its object, before the block is handed out or cached,
 * and cleared by the thread that gives the block back, before its section
 * takes it: the program's ordering of a block's alloc and free, and the
 * section's own atomics between a block's give-back and its next taker,
 * order them for the inline free's relaxed load. `fallbacks`
 * is a relaxed counter bumped on the fallback path. slots[i + 1] and
 * slow[i] belong to the thread holding slot i: its lists, their rooms
 * and its counts are written by that thread alone (rooms and counts as
 * relaxed atomics, a load and a store, so that statistics may read them
 * from any thread; the inline paths of brisk/hybrid.h, compiled into the
 * program, do the same on brisk/internal.h's plain view of them, with
 * __atomic builtins; `ready`, set once when the thread first uses the
 * entry, with release after the rooms, which statistics read after it
 * with acquire); threads without a slot share the last entry of each,
 * whose counts take fetch_add and whose lists stay empty; slots[0] is the entry
 * of a thread with no slot yet, whose lists are empty and have no room. A
 * slot's next holder inherits its lists (thread_slot.h orders the
 * handover). A block moves between threads only through its section,
 * whose atomics order its bytes (pool.c, buddy.c). `entry` is the
 * registry's, under its lock.
 *
 * Statistics: each slot counts, per class, the blocks it handed out, in
 * the word that holds the list's room (a list's length is its cap less its
 * room), and per section the blocks served without a class and the
 * requests the section could not serve. A
 * section's in_use is the bytes of the blocks the program holds: the
 * section's own count, less the bytes in the thread caches; its
 * allocations the blocks it served the program; high_water is the
 * section's own (a bucket: objects ever taken from its store, a region:
 * the most bytes its buddy had handed out; both count blocks that sat in
 * caches). brisk_hybrid_totals: allocations and bytes_requested the
 * successful brisk_hybrid_alloc calls and their sizes (fallbacks
 * included), bytes_in_use the sections' in_use, bytes_held the mapping
 * (the hybrid's own pages, the buckets, the first region) and the further
 * regions' reservations, system_requests every OS call made for them, all
 * at creation.
 */
/* This file defines the exported brisk_hybrid_alloc and brisk_hybrid_free. */
#define BRISK_HYBRID_EXPORTS_
#include <brisk/hybrid.h>
#include "base/annotate.h"
#include "base/base.h"
#include "os/os.h"
#include "regions/buddy.h"
#include "regions/hybrid.h"
#include "regions/pool.h"
#include "regions/registry.h"
#include "regions/thread_slot.h"

#include <brisk/hybrid.h>
#include <brisk/malloc.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MAX_BUCKET_SIZE ((size_t)BRISK_HYBRID_SMALL_MAX_)
#define SIZE_TABLE_ENTRIES (MAX_BUCKET_SIZE / 8 + 1)
/* code_of_size: an entry per size up to MAX_BUCKET_SIZE, then one per
 * power of two: a bigger size reads LARGE_ENTRY(size), the entry of the
 * smallest power of two that holds it (2^(floor(log2(size - 1)) + 1)). */
#define LARGE_BASE (MAX_BUCKET_SIZE + 1)
#define LARGE_ENTRY(size) (LARGE_BASE + 1 + (size_t)brisk_bit_scan_reverse((size) - 1))
#define CLASS_TABLE_ENTRIES (LARGE_BASE + 65) /* LARGE_ENTRY of sizes up to 2^64 - 1 */
_Static_assert(CLASS_TABLE_ENTRIES == BRISK_HYBRID_SIZE_CODES_, "brisk/hybrid.h's size table");
#define MAX_SECTIONS (BRISK_HYBRID_MAX_BUCKETS + BRISK_HYBRID_MAX_REGIONS)
#define NO_BUCKET 0xFF

#define DEFAULT_REGION_SIZE ((size_t)64 << 20)
#define DEFAULT_MAX_BLOCK ((size_t)1 << 20)
#define DEFAULT_BUCKET_COUNT ((size_t)64 << 10)

/* The thread caches' classes: every bucket of 16 bytes or more, and the
 * first CACHED_ORDERS orders of the first region; each class keeps at most
 * CLASS_BYTES of blocks, from CLASS_MIN to CLASS_MAX of them. Class 0 is
 * no class: its list stays empty and has no room, so a size or a block
 * without a class needs no test of its own on the inline paths. */
#define CACHED_ORDERS 10u
#define CLASS_BYTES ((size_t)32 << 10)
#define CLASS_MIN 2u
#define CLASS_MAX 64u
#define NO_CLASS 0u
#define MAX_CLASSES (1 + BRISK_HYBRID_MAX_BUCKETS + CACHED_ORDERS)

/* An address range of one section, for the dispatch of frees that are not
 * the first region's (brisk_hybrid_free_other_), with what it needs to
 * check a pointer of it: one cache line. */
typedef struct section_range_s {
  uintptr_t lo;
  uintptr_t size;  /* hi - lo: one unsigned compare tests lo <= p < hi */
  union {
    struct {       /* a bucket: brisk_pool_geometry_t's fields */
      uint64_t inverse;
      const _Atomic size_t *carved;
      uint32_t shift;
    } pool;
    struct {       /* a region */
      uintptr_t unit_mask;    /* min_block - 1 */
    } buddy;
  } u;
  uint8_t is_bucket; /* 1, 0 for a region, RANGE_OUTSIDE for the sentinel */
  uint8_t index;   /* into buckets[] or regions[] */
  uint8_t code;    /* a bucket's class code (CLASS_CODE); 0: no class */
} BRISK_ALIGNED(BRISK_CACHE_LINE) section_range_t;

#define RANGE_OUTSIDE 2

/* One class of one thread's cache. `word` holds two counts that change
 * together, so that the inline alloc updates both with one add: the room
 * left in the list (cap - its length) in the low ROOM_BITS, and above them
 * the blocks of the class this thread handed out (56 bits: more than 10^16
 * allocations of one class by one thread slot before it wraps).
 * `requested` sums the sizes those allocations asked for; class 0's, the
 * sizes of the allocations served without a class (and the fallbacks'). A
 * class is 32 bytes, aligned to them: the inline alloc's three words lie
 * on one cache line, at fixed offsets from the class's address. */
typedef struct cache_class_s {
  void *head;                /* the newest block; its first word links the next */
  _Atomic size_t word;       /* allocs << ROOM_BITS | room */
  _Atomic size_t requested;  /* sizes asked by the allocations counted in word */
  size_t unused;
} cache_class_t;
#define ROOM_BITS BRISK_HYBRID_ROOM_BITS_
#define ROOM_MASK (((size_t)1 << ROOM_BITS) - 1)
#define ONE_ALLOC ((size_t)1 << ROOM_BITS)
_Static_assert(CLASS_MAX <= ROOM_MASK, "a full list's room fits its bits");

/* One thread's entry (thread_slot.h): what the inline paths touch. Class
 * c's list is CLASS_CODE(c) * 8 bytes into it: the code tables below hold
 * that, so an inline path adds it to the entry's address. Class 0 comes
 * first, so a zeroed table entry is no class. The entries are SLOT_BYTES
 * apart, 16 times a cache line, so that a thread's class is its
 * brisk_thread_slot_line_ times 16 plus its code times 8 away (one index,
 * line x 2 + code, scaled by 8). */
typedef struct hybrid_slot_s {
  cache_class_t classes[MAX_CLASSES];
  /* Nonzero once its holder set every class's room to the class's cap:
   * until then every list is empty and full, as in a fresh mapping. */
  _Atomic size_t ready;
  /* Debug builds: its holder's brisk_hybrid_alloc_slow_ calls; every 64th
   * checks this entry's lists (validate_own_entry). Its holder's alone. */
  size_t slow_allocs;
} hybrid_slot_t;
#define SLOT_BYTES ((size_t)1024)
#define CLASS_CODE(c) ((c) * sizeof(cache_class_t) / 8)
_Static_assert(SLOT_BYTES == 16 * BRISK_CACHE_LINE, "line * 16 is the entry's offset");
_Static_assert(sizeof(hybrid_slot_t) <= SLOT_BYTES, "a slot entry fits its stride");
_Static_assert(sizeof(cache_class_t) == 32, "a class is half a cache line");
_Static_assert(MAX_CLASSES == BRISK_HYBRID_CLASSES_ && ROOM_MASK == BRISK_HYBRID_ROOM_MASK_ &&
                   SLOT_BYTES == BRISK_HYBRID_ENTRY_BYTES_ &&
                   BRISK_THREAD_SLOTS + 2 == BRISK_HYBRID_ENTRIES_,
               "brisk/hybrid.h's entries");
_Static_assert(sizeof(cache_class_t) == sizeof(brisk_hybrid_class_t) &&
                   offsetof(cache_class_t, head) == offsetof(brisk_hybrid_class_t, head) &&
                   offsetof(cache_class_t, word) == offsetof(brisk_hybrid_class_t, word) &&
                   offsetof(cache_class_t, requested) ==
                       offsetof(brisk_hybrid_class_t, requested),
               "brisk/hybrid.h's view of an entry");
_Static_assert(offsetof(hybrid_slot_t, classes) == 0, "code 0 is class 0");
_Static_assert(CLASS_CODE(MAX_CLASSES) <= 255, "a class code fits a byte");

/* One thread's counts of its slow paths. */
typedef struct hybrid_slow_s {
  _Atomic size_t direct_allocs[MAX_SECTIONS]; /* blocks served without a class */
  _Atomic size_t failures[MAX_SECTIONS];      /* requests the section could not serve */
} hybrid_slow_t;

/* slots[]: the entry of line 0 (no slot yet, or none: every list empty
 * and without room, so the inline paths go out of line), then slot i's at
 * i + 1, then the shared entry of threads without a slot (its counts
 * only). */
#define SLOT_NONE 0u
#define SLOT_SHARED (BRISK_THREAD_SLOTS + 1)
/* Words of the touched bitmap: a bit per thread slot and the shared entry. */
#define TOUCHED_WORDS ((BRISK_THREAD_SLOTS + 1 + 63) / 64)
_Static_assert(BRISK_NO_THREAD_SLOT + 1 == SLOT_SHARED, "slot_of(NO_THREAD_SLOT) is the shared entry");

#define SAME_FIELD(a, b, field)                                                          \
  (offsetof(a, field) == offsetof(b, field) && sizeof(((a *)0)->field) == sizeof(((b *)0)->field))

/* The code table: a byte per granule (GRANULE bytes) of the blocks, from
 * the mapping's start to the end of the last bucket's objects, at
 * CODES_AT from the hybrid (layout_t). A granule's byte is the code
 * (CLASS_CODE) of the class of the block that starts there while that
 * block is handed out or cached: a bucket's object below the bucket's
 * `marked` count (mark_objects: before any object of the pool is handed
 * out, every object carved so far), or a first-region block of a cached
 * order (set_code: before the block leaves its buddy, cleared before it
 * goes back); 0 everywhere else. The inline free reads it with no other
 * check: a pointer whose granule reads 0 goes out of line, where the
 * section says what it is. */
#define GRANULE_SHIFT BRISK_HYBRID_GRANULE_SHIFT_
#define GRANULE ((size_t)1 << GRANULE_SHIFT)
#define CODES_AT BRISK_HYBRID_CODES_AT_

struct brisk_hybrid_s {
  /* First, what the inline paths of brisk/hybrid.h read and write, laid
   * out as brisk_hybrid_hot_t (asserted below): the key, where the code
   * table's granules start and how many it has, the size table
   * (read-only after create), then the threads' entries. */
  uintptr_t key;          /* a cached block's second word (never 0) */
  uintptr_t base;         /* the mapping's start: the first region's base */
  size_t granules;        /* the blocks' span / GRANULE: the code table's size */
  /* size (LARGE_ENTRY above MAX_BUCKET_SIZE) -> the class code of an
   * align-0 request of that size (the inline alloc's table; 0, class 0,
   * without caches, for size 0 and for sizes no class holds). */
  uint8_t code_of_size[CLASS_TABLE_ENTRIES];
  /* The registry's (under its lock). */
  brisk_region_entry_t entry;
  /* Per thread slot (SLOT_NONE, slot i at i + 1, SLOT_SHARED): its lists
   * and counts, SLOT_BYTES apart. */
  BRISK_ALIGNED(SLOT_BYTES) unsigned char slots[BRISK_THREAD_SLOTS + 2][SLOT_BYTES];
  /* The rest: read-only after create, but for the fields the Threads
   * paragraph above names. */
  size_t bucket_count;
  size_t region_count;
  size_t range_count;
  size_t largest_bucket;  /* bytes; 0 when there is no bucket */
  /* (size + 7) / 8 -> the smallest bucket that holds size, or NO_BUCKET. */
  uint8_t bucket_for_size[SIZE_TABLE_ENTRIES];
  /* Buckets, largest first (what most frees past the first region meet:
   * the biggest bucket takes the most sizes), then the regions, then a
   * sentinel that holds every address. */
  section_range_t ranges[MAX_SECTIONS + 1];
  size_t bucket_align[BRISK_HYBRID_MAX_BUCKETS]; /* alignment every object has */
  brisk_pool_t *buckets[BRISK_HYBRID_MAX_BUCKETS];
  size_t bucket_sizes[BRISK_HYBRID_MAX_BUCKETS];
  /* Bytes from one object to the next: the size rounded up to the
   * bucket's alignment (16 for a size of 128 or more: 136 B objects lie
   * 144 B apart). */
  size_t bucket_stride[BRISK_HYBRID_MAX_BUCKETS];
  uint8_t bucket_class[BRISK_HYBRID_MAX_BUCKETS]; /* NO_CLASS: not cached */
  const _Atomic size_t *bucket_carved[BRISK_HYBRID_MAX_BUCKETS]; /* its pool's */
  uintptr_t bucket_objects[BRISK_HYBRID_MAX_BUCKETS];            /* its first object */
  /* Objects of bucket b whose granules hold its class's code: raised (only
   * upward, relaxed) to the pool's carved count by mark_objects. */
  _Atomic size_t bucket_marked[BRISK_HYBRID_MAX_BUCKETS];
  brisk_buddy_t *regions[BRISK_HYBRID_MAX_REGIONS];
  uint8_t region_class[BRISK_HYBRID_MAX_REGIONS]; /* order 0's class; NO_CLASS: not cached */
  uint32_t cached_orders;  /* orders of the first region that have classes */
  uint32_t min_shift;      /* log2 of the regions' min_block */
  size_t class_count;      /* class 0 included */
  size_t class_cap[MAX_CLASSES];      /* 0 for class 0 */
  size_t class_block[MAX_CLASSES];    /* bytes of a class's blocks */
  uint8_t class_section[MAX_CLASSES]; /* the section a class's blocks come from */
  bool cached;             /* thread caches in use */
  bool fallback_to_malloc;
  /* The mapping: its size, its parts, and the OS calls made for it (the
   * sections count theirs). */
  size_t mapping_size;
  size_t system_requests;
  size_t meta_at, meta_size; /* the first region's meta part */
  bool locked;             /* BRISK_REGION_LOCK: never to the mapping cache */
  /* Set by destroy, read by the next create that takes the mapping from
   * the cache: meta_at when the first region's meta part is zero past its
   * header again, else SIZE_MAX; and the hybrid's own address when its
   * slots' entries and slow counts are zero again (destroy cleared the
   * touched ones), else 0. */
  size_t clean_meta_at;
  uintptr_t clean_slots_at;
  /* Written on the fallback path only. */
  _Atomic size_t fallbacks;
  /* Bit i: thread slot i (BRISK_NO_THREAD_SLOT: the shared entry) wrote
   * its entry or its slow counts (mark_touched, in its first slow path;
   * relaxed, only ever set). Statistics and destroy visit those entries
   * only. */
  _Atomic uint64_t touched[TOUCHED_WORDS];
  /* Last: create leaves it as destroy left it (see clean_slots_at). */
  hybrid_slow_t slow[BRISK_THREAD_SLOTS + 1]; /* by slot; the last: threads without one */
};
_Static_assert(SAME_FIELD(brisk_hybrid_t, brisk_hybrid_hot_t, key) &&
                   SAME_FIELD(brisk_hybrid_t, brisk_hybrid_hot_t, base) &&
                   SAME_FIELD(brisk_hybrid_t, brisk_hybrid_hot_t, granules) &&
                   SAME_FIELD(brisk_hybrid_t, brisk_hybrid_hot_t, code_of_size) &&
                   offsetof(brisk_hybrid_t, slots) == offsetof(brisk_hybrid_hot_t, entries) &&
                   sizeof(((brisk_hybrid_t *)0)->slots) ==
                       sizeof(((brisk_hybrid_hot_t *)0)->entries),
               "brisk/hybrid.h's view of the hybrid");
_Static_assert(sizeof(brisk_hybrid_t) <= CODES_AT && CODES_AT % 65536 == 0,
               "the code table lies past the hybrid, at a page boundary");

_Static_assert(MAX_CLASSES <= 255 && MAX_SECTIONS <= 255, "classes and sections fit a byte");

void brisk_hybrid_default_config(brisk_hybrid_config_t *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  static const size_t sizes[] = {16, 32, 64};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    out->bucket_sizes[i] = sizes[i];
    out->bucket_counts[i] = DEFAULT_BUCKET_COUNT;
  }
  out->region_sizes[0] = DEFAULT_REGION_SIZE;
  out->region_min_block = 0;
  out->region_max_block = DEFAULT_MAX_BLOCK;
  out->flags = BRISK_REGION_THREAD_CACHE;
  out->fallback_to_malloc = 0;
}

/* The alignment brisk_malloc gives a block of this size (brisk/malloc.h): 16 when
 * the size is a multiple of 16 or at least 128, else 8. A bucket's objects
 * get that of the bucket size, and an align-0 request needs that of its own
 * size, so a 16-byte request never lands 8-aligned in a 24-byte bucket. */
static size_t natural_align(size_t size) { return size % 16 == 0 || size >= 128 ? 16 : 8; }

static bool config_is_valid(const brisk_hybrid_config_t *c, size_t *bucket_count,
                            size_t *region_count) {
  size_t buckets = 0;
  while (buckets < BRISK_HYBRID_MAX_BUCKETS && c->bucket_sizes[buckets] != 0) {
    size_t size = c->bucket_sizes[buckets];
    if (size < 8 || size > MAX_BUCKET_SIZE || size % 8 != 0 || c->bucket_counts[buckets] == 0)
      return false;
    if (buckets > 0 && size <= c->bucket_sizes[buckets - 1]) return false;
    buckets++;
  }
  size_t regions = 0;
  while (regions < BRISK_HYBRID_MAX_REGIONS && c->region_sizes[regions] != 0) regions++;
  if (buckets + regions == 0) return false;
  if (c->region_min_block != 0 && !brisk_is_power_of_two(c->region_min_block)) return false;
  if (c->region_max_block != 0 && !brisk_is_power_of_two(c->region_max_block)) return false;
  if (c->region_min_block != 0 && c->region_max_block != 0 &&
      c->region_min_block > c->region_max_block)
    return false;
  const unsigned known = BRISK_REGION_PREFAULT | BRISK_REGION_LOCK | BRISK_REGION_THREAD_CACHE;
  if ((c->flags & ~known) != 0) return false;
  *bucket_count = buckets;
  *region_count = regions;
  return true;
}

static size_t region_min_block_for(const brisk_hybrid_config_t *c, size_t bucket_count) {
  if (c->region_min_block != 0) return c->region_min_block;
  size_t above = bucket_count ? c->bucket_sizes[bucket_count - 1] + 1 : 16;
  size_t min_block = 16;
  while (min_block < above) min_block <<= 1;
  return min_block;
}

static section_range_t *add_range(brisk_hybrid_t *h, uintptr_t lo, uintptr_t hi, bool is_bucket,
                                  size_t index) {
  section_range_t *r = &h->ranges[h->range_count++];
  r->lo = lo;
  r->size = hi - lo;
  r->is_bucket = is_bucket;
  r->index = (uint8_t)index;
  r->code = CLASS_CODE(NO_CLASS);
  return r;
}

/* Buckets largest first, then regions (see `ranges`), then the sentinel. */
static void order_ranges(brisk_hybrid_t *h) {
  section_range_t sorted[MAX_SECTIONS + 1];
  size_t n = 0;
  for (size_t i = h->range_count; i-- > 0;)
    if (h->ranges[i].is_bucket) sorted[n++] = h->ranges[i];
  for (size_t i = 0; i < h->range_count; i++)
    if (!h->ranges[i].is_bucket) sorted[n++] = h->ranges[i];
  memcpy(h->ranges, sorted, n * sizeof sorted[0]);
  memset(&h->ranges[n], 0, sizeof h->ranges[n]);
  h->ranges[n].size = UINTPTR_MAX;
  h->ranges[n].is_bucket = RANGE_OUTSIDE;
}

static void registry_stats(const brisk_region_entry_t *entry, brisk_region_stats_t *out) {
  const char *hybrid = (const char *)entry - offsetof(brisk_hybrid_t, entry);
  brisk_hybrid_totals((const brisk_hybrid_t *)hybrid, out);
}

/* Destroy every section (no concurrent calls). Returns an upper bound of
 * the mapping's bytes in RAM (the hybrid's own pages, the buckets' carved
 * objects and headers, the first region's trees that served); *meta_clean:
 * whether the first region's meta part is zero past its header again. */
static size_t destroy_sections(brisk_hybrid_t *h, bool *meta_clean) {
  size_t resident = h->mapping_size - h->meta_at - h->meta_size; /* the hybrid's own pages */
  *meta_clean = true;
  for (size_t i = 0; i < BRISK_HYBRID_MAX_BUCKETS; i++) {
    if (h->buckets[i] == NULL) continue;
    resident += _brisk_pool_resident(h->buckets[i]);
    _brisk_pool_destroy_unregistered(h->buckets[i]);
  }
  if (h->regions[0] != NULL) {
    size_t region_resident;
    *meta_clean = _brisk_buddy_destroy_in(h->regions[0], &region_resident);
    resident += region_resident;
  }
  for (size_t i = 1; i < BRISK_HYBRID_MAX_REGIONS; i++)
    if (h->regions[i] != NULL) _brisk_buddy_destroy_unregistered(h->regions[i]);
  return resident;
}

/* ---- Slots ---- */

/* The entry of the thread whose brisk_thread_slot_line_ is line: (slot +
 * 1) * 64, or 0 (the entry of no slot). */
BRISK_INLINE hybrid_slot_t *slot_at(brisk_hybrid_t *h, uint32_t line) {
  /* From the start of the whole array: entries past the first row are
   * reached by byte offset, not by indexing slots[0] past its end. */
  unsigned char *entries = (unsigned char *)h->slots;
  return (hybrid_slot_t *)(entries + (size_t)line * (SLOT_BYTES / BRISK_CACHE_LINE));
}

/* Slot i's entry (thread_slot.h's numbers), or the shared one for
 * BRISK_NO_THREAD_SLOT. */
BRISK_INLINE hybrid_slot_t *slot_of(brisk_hybrid_t *h, uint32_t slot) {
  return (hybrid_slot_t *)h->slots[slot + 1];
}

/* Add v to a count of slot `slot`: its holder alone writes it (load +
 * store), unless it is the shared entry of threads without a slot. */
BRISK_INLINE void count(_Atomic size_t *c, size_t v, uint32_t slot) {
  if (BRISK_UNLIKELY(slot == BRISK_NO_THREAD_SLOT))
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
  else
    brisk_owner_add(c, v);
}

/* The class whose code (CLASS_CODE) is `code` in entry e. */
BRISK_INLINE cache_class_t *class_at(hybrid_slot_t *e, size_t code) {
  return (cache_class_t *)((unsigned char *)e + code * 8);
}

BRISK_INLINE size_t room_of(const cache_class_t *k) {
  return atomic_load_explicit(&k->word, memory_order_relaxed) & ROOM_MASK;
}

/* Blocks in list k of class c, as its room word counts them. */
BRISK_INLINE size_t listed_blocks(const brisk_hybrid_t *h, const cache_class_t *k, size_t c) {
  return h->class_cap[c] - room_of(k);
}

/* Blocks in class c's list of entry e, from any thread: none before the
 * entry is ready (acquire: its holder's rooms, set before, are seen). */
static size_t list_length(const brisk_hybrid_t *h, hybrid_slot_t *e, size_t c) {
  if (atomic_load_explicit(&e->ready, memory_order_acquire) == 0) return 0;
  return listed_blocks(h, &e->classes[c], c);
}

/* Slot `slot` (a thread slot, or BRISK_NO_THREAD_SLOT) is about to write
 * its entry or slow counts: its touched bit, set once (relaxed: read by
 * statistics, which may be a moment behind, and by destroy, quiescent). */
BRISK_INLINE void mark_touched(brisk_hybrid_t *h, uint32_t slot) {
  _Atomic uint64_t *word = &h->touched[slot / 64];
  uint64_t bit = (uint64_t)1 << (slot % 64);
  if (BRISK_UNLIKELY((atomic_load_explicit(word, memory_order_relaxed) & bit) == 0))
    atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
}

/* The first touched slot at or after `from` (BRISK_NO_THREAD_SLOT, the
 * shared entry, comes last), or TOUCHED_END: visit them with
 *   for (i = next_touched(h, 0); i != TOUCHED_END; i = next_touched(h, i + 1)) */
#define TOUCHED_END (BRISK_NO_THREAD_SLOT + 1)
static uint32_t next_touched(const brisk_hybrid_t *h, uint32_t from) {
  brisk_hybrid_t *m = (brisk_hybrid_t *)h;
  for (uint32_t w = from / 64; w < TOUCHED_WORDS && from < TOUCHED_END; w++) {
    uint64_t bits = atomic_load_explicit(&m->touched[w], memory_order_relaxed);
    if (w == from / 64) bits &= ~(uint64_t)0 << (from % 64);
    if (bits != 0) return w * 64 + (uint32_t)brisk_count_trailing_zeros(bits);
  }
  return TOUCHED_END;
}

/* The calling thread's entry (it holds `slot`), its rooms set on its first
 * use in this hybrid: every list empty, with room for its class's cap. */
static hybrid_slot_t *ready_entry(brisk_hybrid_t *h, uint32_t slot) {
  hybrid_slot_t *e = slot_of(h, slot);
  if (BRISK_UNLIKELY(atomic_load_explicit(&e->ready, memory_order_relaxed) == 0)) {
    mark_touched(h, slot);
    for (size_t c = 1; c < h->class_count; c++)
      atomic_store_explicit(&e->classes[c].word, h->class_cap[c], memory_order_relaxed);
    /* Release: a statistics reader that sees ready sees the rooms. */
    atomic_store_explicit(&e->ready, 1, memory_order_release);
  }
  return e;
}

/* ---- Classes (create, with caches on) ---- */

/* A new class of blocks of `block` bytes from section `section`. */
static uint8_t add_class(brisk_hybrid_t *h, size_t block, size_t section) {
  size_t c = h->class_count++;
  size_t cap = CLASS_BYTES / block;
  h->class_cap[c] = cap < CLASS_MIN ? CLASS_MIN : cap > CLASS_MAX ? CLASS_MAX : cap;
  h->class_block[c] = block;
  h->class_section[c] = (uint8_t)section;
  return (uint8_t)c;
}

/* The order of the region block that serves `need` bytes (need >= 1). */
static inline uint32_t order_for(const brisk_hybrid_t *h, size_t need) {
  size_t min_block = (size_t)1 << h->min_shift;
  return need <= min_block ? 0
                           : (uint32_t)(brisk_bit_scan_reverse(need - 1) + 1 - h->min_shift);
}

static void build_classes(brisk_hybrid_t *h) {
  h->class_count = 1; /* class 0: none (cap 0) */
  for (size_t b = 0; b < h->bucket_count; b++)
    h->bucket_class[b] = h->bucket_sizes[b] >= 16 ? add_class(h, h->bucket_sizes[b], b) : NO_CLASS;
  /* The first region's orders: the others serve when it is full. */
  h->cached_orders = 0;
  if (h->region_count != 0) {
    brisk_buddy_geometry_t g;
    _brisk_buddy_geometry(h->regions[0], &g);
    h->cached_orders = g.orders < CACHED_ORDERS ? g.orders : CACHED_ORDERS;
    h->region_class[0] = (uint8_t)h->class_count;
    for (uint32_t k = 0; k < h->cached_orders; k++)
      add_class(h, (size_t)1 << (h->min_shift + k), h->bucket_count);
  }
  for (size_t r = 0; r < h->range_count; r++)
    if (h->ranges[r].is_bucket)
      h->ranges[r].code = (uint8_t)CLASS_CODE(h->bucket_class[h->ranges[r].index]);
  /* The class of an align-0 request: its bucket when the bucket's objects
   * have the alignment the size needs, else the region's order. */
  for (size_t size = 1; size < LARGE_BASE; size++) {
    size_t need = natural_align(size);
    uint8_t c = NO_CLASS;
    uint8_t b = h->bucket_for_size[(size + 7) / 8];
    if (size <= h->largest_bucket && b != NO_BUCKET && need <= h->bucket_align[b]) {
      c = h->bucket_class[b];
    } else if (h->region_count != 0) {
      uint32_t k = order_for(h, size);
      if (k < h->cached_orders) c = (uint8_t)(h->region_class[0] + k);
    }
    h->code_of_size[size] = (uint8_t)CLASS_CODE(c);
  }
  /* Above: a power of two's order, which every size it holds needs (a
   * region block is aligned to its size, at least 16). */
  for (uint32_t bits = 10; bits < 64 && h->region_count != 0; bits++) {
    uint32_t k = order_for(h, (size_t)1 << bits);
    if (k < h->cached_orders)
      h->code_of_size[LARGE_BASE + bits] = (uint8_t)CLASS_CODE(h->region_class[0] + k);
  }
}

/* Region i's max_block: the config's (1 MiB by default), or for a small
 * region the region rounded up to a power of two (one tree), at least
 * min_block. */
static size_t region_max_block_for(const brisk_hybrid_config_t *c, size_t i, size_t min_block) {
  size_t max_block = c->region_max_block ? c->region_max_block : DEFAULT_MAX_BLOCK;
  size_t size = c->region_sizes[i];
  if (max_block > size) {
    max_block = 1;
    while (max_block < size) max_block <<= 1;
  }
  return max_block < min_block ? min_block : max_block;
}

/*
 * The hybrid's one mapping, from its start (aligned to the first region's
 * max_block):
 *   [ first region's blocks ][ bucket 0's objects ][ bucket 1's ] ...
 *   [ the buckets' headers ][ the first region's meta part ]
 *   [ brisk_hybrid_t, CODES_AT bytes ][ the code table ]
 * Each bucket's objects start at a page boundary. The code table has a
 * byte per granule of the mapping (more than the blocks need: the size of
 * the table is a function of the mapping's alone), so that the hybrid
 * lies at the same offset in every mapping of one size, where the next
 * create that takes the mapping from the cache finds what its predecessor
 * left (clean_meta_at), and so does the table, which every destroy leaves
 * zero.
 */
typedef struct layout_s {
  size_t region_size, meta_size;     /* the first region's parts; 0 without one */
  size_t align;                      /* the mapping's: the region's max_block */
  size_t objects_at[BRISK_HYBRID_MAX_BUCKETS];
  size_t objects_size[BRISK_HYBRID_MAX_BUCKETS];
  size_t header_at[BRISK_HYBRID_MAX_BUCKETS];
  size_t header_size[BRISK_HYBRID_MAX_BUCKETS];
  size_t span;                       /* the blocks': the end of the last section */
  size_t meta_at, self_at, total;
} layout_t;

/* The code table's bytes in a mapping of `total` bytes. */
static size_t codes_size_for(size_t total, size_t page) {
  return brisk_align_up(total >> GRANULE_SHIFT, page);
}

/* 0, or the errno create fails with (a section's arguments). */
static int plan_layout(const brisk_hybrid_config_t *c, size_t buckets, size_t regions,
                       size_t min_block, layout_t *out) {
  layout_t l;
  memset(&l, 0, sizeof l);
  size_t page = _brisk_os_page_size();
  l.align = page;
  if (regions != 0) {
    size_t max_block = region_max_block_for(c, 0, min_block);
    int error = _brisk_buddy_footprint(c->region_sizes[0], min_block, max_block, &l.region_size,
                                       &l.meta_size);
    if (error != 0) return error;
    while (l.align < max_block) l.align <<= 1;
  }
  size_t at = l.region_size;
  for (size_t b = 0; b < buckets; b++) {
    int error = _brisk_pool_footprint(c->bucket_sizes[b], natural_align(c->bucket_sizes[b]),
                                      c->bucket_counts[b], &l.header_size[b], &l.objects_size[b]);
    if (error != 0) return error;
    at = brisk_align_up(at, page);
    l.objects_at[b] = at;
    at += l.objects_size[b];
  }
  l.span = at;
  at = brisk_align_up(at, page);
  for (size_t b = 0; b < buckets; b++) {
    l.header_at[b] = at;
    at += l.header_size[b];
  }
  l.meta_at = at;
  l.self_at = brisk_align_up(at + l.meta_size, page);
  /* The smallest total that holds the hybrid and a table for itself: the
   * table's size only grows with the total, so this climbs to it. */
  size_t head = l.self_at + CODES_AT;
  l.total = head;
  while (head + codes_size_for(l.total, page) != l.total)
    l.total = head + codes_size_for(l.total, page);
  *out = l;
  return 0;
}

/* The code table (layout_t), and the byte of the granule at p. */
BRISK_INLINE _Atomic uint8_t *codes_of(const brisk_hybrid_t *h) {
  return (_Atomic uint8_t *)((uintptr_t)h + CODES_AT);
}
BRISK_INLINE _Atomic uint8_t *code_at(const brisk_hybrid_t *h, const void *p) {
  return &codes_of(h)[((uintptr_t)p - h->base) >> GRANULE_SHIFT];
}

/* The first region's block p, of order k, leaves its buddy (code: its
 * class's) or goes back (0, before the buddy takes it: its next taker's
 * code must not be overwritten). Relaxed: the block's handover orders
 * the code for the thread that frees it (the program's own ordering, or
 * the buddy's release and acquire). */
BRISK_INLINE void set_code(brisk_hybrid_t *h, const void *p, size_t code) {
  atomic_store_explicit(code_at(h, p), (uint8_t)code, memory_order_relaxed);
}

/* The code of the first region's blocks of order k: their class's, or 0
 * for an order without one (and without caches). */
BRISK_INLINE size_t region_code(const brisk_hybrid_t *h, uint32_t k) {
  return h->cached && h->region_class[0] != NO_CLASS && k < h->cached_orders
             ? CLASS_CODE(h->region_class[0] + k)
             : CLASS_CODE(NO_CLASS);
}

/* Bucket b's objects carved so far get its class's code, before the
 * calling thread hands out an object it took from the pool: a free of
 * that object, which comes after (the program orders it), then finds the
 * code, or (another thread's marking not seen yet) a 0 that sends it out
 * of line, where the pool's carved count takes it. Objects that are no
 * multiple of GRANULE from the mapping's start (an 8-aligned bucket's
 * every other one) have no granule of their own: their frees go out of
 * line. Concurrent markings store the same bytes; `marked` only grows
 * (compare-and-swap), relaxed like the carved count it copies
 * (pool_internal.h, `carved`). */
static void mark_objects(brisk_hybrid_t *h, size_t b) {
  if (h->bucket_class[b] == NO_CLASS) return;
  size_t carved = atomic_load_explicit(h->bucket_carved[b], memory_order_relaxed);
  size_t seen = atomic_load_explicit(&h->bucket_marked[b], memory_order_relaxed);
  if (seen >= carved) return;
  size_t code = CLASS_CODE(h->bucket_class[b]), stride = h->bucket_stride[b];
  for (uintptr_t p = h->bucket_objects[b] + seen * stride,
                 end = h->bucket_objects[b] + carved * stride;
       p < end; p += stride)
    if ((p & (GRANULE - 1)) == 0) set_code(h, (const void *)p, code);
  while (seen < carved && !atomic_compare_exchange_weak_explicit(&h->bucket_marked[b], &seen,
                                                                 carved, memory_order_relaxed,
                                                                 memory_order_relaxed)) {
  }
}

brisk_hybrid_t *brisk_hybrid_create(const brisk_hybrid_config_t *config) {
  brisk_hybrid_config_t defaults;
  if (config == NULL) {
    brisk_hybrid_default_config(&defaults);
    config = &defaults;
  }
  size_t bucket_count, region_count;
  if (!config_is_valid(config, &bucket_count, &region_count)) {
    errno = EINVAL;
    return NULL;
  }
  size_t min_block = region_min_block_for(config, bucket_count);
  layout_t l;
  int error = plan_layout(config, bucket_count, region_count, min_block, &l);
  if (error != 0) {
    errno = error;
    return NULL;
  }
  size_t calls = 0;
  bool reused;
  uint8_t *map = _brisk_os_reserve_cached(BRISK_OS_CACHE_HYBRID, l.total, l.align,
                                          &reused, &calls);
  if (map == NULL) return NULL;
  brisk_hybrid_t *h = (brisk_hybrid_t *)(map + l.self_at);
  if (reused) {
    /* A kept mapping holds its last hybrid's bytes: this one starts
     * zero (every pointer NULL, every list empty, every count 0, every
     * table entry NO_CLASS), and so does the first region's meta part
     * past its header, unless the last hybrid left it so at this place;
     * the entries and slow counts too, unless the last hybrid at this
     * address left them zero. The code table is zero: every destroy
     * leaves it so. Both words are safe to trust: only destroy puts a
     * hybrid's mapping in the cache (writing them), a take matches the
     * size exactly, and a size fixes self_at (plan_layout), so h is the
     * last hybrid's own; with meta_size a page multiple below self_at, the
     * same meta_at means the same meta_size. */
    bool meta_clean = h->clean_meta_at == l.meta_at;
    if (h->clean_slots_at == (uintptr_t)h && meta_clean) {
      memset(h, 0, offsetof(brisk_hybrid_t, slots));
      size_t rest = offsetof(brisk_hybrid_t, slots) + sizeof h->slots;
      memset((unsigned char *)h + rest, 0, offsetof(brisk_hybrid_t, slow) - rest);
    } else {
      memset(h, 0, sizeof *h);
    }
    if (!meta_clean) memset(map + l.meta_at, 0, l.meta_size);
#if BRISK_DEBUG
    /* Debug builds: what the last destroy promised (entries and slow
     * counts zero) holds. */
    for (size_t at = offsetof(brisk_hybrid_t, slots); at < sizeof *h; at++)
      if (((const unsigned char *)h)[at] != 0)
        _brisk_os_fatal_pointer("brisk_hybrid_create", h, "a kept hybrid's slots are not zero");
#endif
  }
  h->base = (uintptr_t)map;
  h->granules = l.span >> GRANULE_SHIFT;
  h->mapping_size = l.total;
  h->system_requests = calls;
  h->meta_at = l.meta_at;
  h->meta_size = l.meta_size;
  h->bucket_count = bucket_count;
  h->region_count = region_count;
  h->fallback_to_malloc = config->fallback_to_malloc != 0;
  h->locked = (config->flags & BRISK_REGION_LOCK) != 0;
  /* The hybrid's caches, when asked for, replace the sections' own (they
   * keep theirs while a tool watches blocks). */
  h->cached = (config->flags & BRISK_REGION_THREAD_CACHE) != 0 && !brisk_tools_watch_blocks();
  unsigned flags = config->flags;
  if (h->cached) flags &= ~(unsigned)BRISK_REGION_THREAD_CACHE;
  /* A key no other hybrid or pool has had: a kept mapping holds the last
   * hybrid's cached blocks, keys and all. */
  h->key = _brisk_pool_new_key();

  for (size_t i = 0; i < bucket_count; i++) {
    size_t size = config->bucket_sizes[i];
    h->bucket_sizes[i] = size;
    h->bucket_align[i] = natural_align(size);
    /* The hybrid's key: a bucket object free in its pool carries the key
     * the caches' blocks carry (pool_internal.h's Keys), so that a free of
     * either finds it. */
    h->buckets[i] = _brisk_pool_create_in(map + l.header_at[i], map + l.objects_at[i], size,
                                          h->bucket_align[i], config->bucket_counts[i], flags,
                                          h->key);
    if (h->buckets[i] == NULL) goto fail;
    h->bucket_stride[i] = _brisk_pool_object_size(h->buckets[i]);
    brisk_pool_geometry_t g;
    _brisk_pool_geometry(h->buckets[i], &g);
    h->bucket_carved[i] = g.carved;
    h->bucket_objects[i] = g.objects;
    uintptr_t lo, hi;
    _brisk_pool_range(h->buckets[i], &lo, &hi);
    section_range_t *range = add_range(h, lo, hi, true, i);
    /* brisk_pool_geometry_index from the range's start: its objects'. */
    range->u.pool.inverse = g.inverse;
    range->u.pool.carved = g.carved;
    range->u.pool.shift = g.shift;
  }
  h->largest_bucket = bucket_count ? config->bucket_sizes[bucket_count - 1] : 0;
  for (size_t slot = 0, b = 0; slot < SIZE_TABLE_ENTRIES; slot++) {
    while (b < bucket_count && h->bucket_sizes[b] < slot * 8) b++;
    h->bucket_for_size[slot] = b < bucket_count ? (uint8_t)b : NO_BUCKET;
  }

  for (size_t i = 0; i < region_count; i++) {
    size_t max_block = region_max_block_for(config, i, min_block);
    size_t size = config->region_sizes[i];
    /* The first region lies in the mapping; the others, which serve when
     * it is full, in their own. */
    h->regions[i] = i == 0 ? _brisk_buddy_create_in(map, map + l.meta_at, size, min_block,
                                                    max_block, flags)
                           : _brisk_buddy_create(size, min_block, max_block, flags, false);
    if (h->regions[i] == NULL) goto fail;
    brisk_buddy_geometry_t g;
    _brisk_buddy_geometry(h->regions[i], &g);
    /* The buddy's own rounding (at least 16): every region's is the same. */
    h->min_shift = g.min_shift;
    uintptr_t lo, hi;
    _brisk_buddy_range(h->regions[i], &lo, &hi);
    section_range_t *range = add_range(h, lo, hi, false, i);
    range->u.buddy.unit_mask = ((uintptr_t)1 << g.min_shift) - 1;
  }
  order_ranges(h);
  if (h->cached) build_classes(h);
  /* PREFAULT / LOCK: as the sections do theirs, the hybrid's own pages (the
   * threads' entries and slow-path counts, which a thread's first calls
   * write) and the code table's part that frees read. */
  if ((config->flags & (BRISK_REGION_PREFAULT | BRISK_REGION_LOCK)) != 0) {
    bool lock = (config->flags & BRISK_REGION_LOCK) != 0;
    size_t page = _brisk_os_page_size();
    if (!_brisk_os_make_resident(h, brisk_align_up(sizeof *h, page), lock, &h->system_requests) ||
        (h->cached && !_brisk_os_make_resident(codes_of(h), brisk_align_up(h->granules, page),
                                               lock, &h->system_requests)))
      goto fail;
  }
  _brisk_region_register(&h->entry, BRISK_REGION_HYBRID, registry_stats);
  return h;

fail:;
  /* The section's own error (ENOMEM, or mlock's EPERM/EAGAIN) survives the
   * cleanup. */
  int saved_errno = errno;
  bool meta_clean;
  (void)destroy_sections(h, &meta_clean);
  _brisk_os_release(map, l.total, NULL);
  errno = saved_errno ? saved_errno : ENOMEM;
  return NULL;
}

/* ---- The thread caches ---- */

/* Push p onto list k, which has room: a cached block's first two words
 * are the next block and the key. */
BRISK_INLINE void push(brisk_hybrid_t *h, cache_class_t *k, void *p) {
  void **words = p;
  void *next = k->head;
  /* The head's store between the block's two (it may alias them, as far
   * as the compiler knows) keeps GCC from building a vector of the two
   * words: two plain stores, two instructions fewer. */
  words[1] = (void *)h->key;
  k->head = p;
  words[0] = next;
  brisk_owner_add(&k->word, (size_t)-1); /* room - 1: never below 0 here */
}

/* Pop the head p of a non-empty list, handing it out: the key cleared (the
 * program's bytes never look cached), the room back and the allocation
 * counted in one add. */
BRISK_INLINE void *pop(cache_class_t *k, void *p) {
  void **words = p;
  k->head = words[0];
  words[1] = NULL;
  brisk_owner_add(&k->word, ONE_ALLOC + 1);
  return p;
}

/* A block of a class handed out without a pop (a refill's first block,
 * or one from its section directly), its key word cleared as pop clears
 * it: a live block must never look cached (cached_double_free). */
BRISK_INLINE void *clear_key(void *p) {
  ((void **)p)[1] = NULL;
  return p;
}

/* Block p goes back to section s (a first-region block's code cleared
 * first). */
static void section_free(brisk_hybrid_t *h, size_t s, void *p) {
  if (s < h->bucket_count) {
    _brisk_pool_free_as(h->buckets[s], p, "brisk_hybrid_free");
    return;
  }
  if (s == h->bucket_count && h->cached) set_code(h, p, CLASS_CODE(NO_CLASS));
  _brisk_buddy_free_as(h->regions[s - h->bucket_count], p, "brisk_hybrid_free");
}

/* Blocks of class c go back to its section together: a bucket's as one
 * chain onto its pool (one CAS), a first-region block's code cleared
 * first and the region's tree counters updated once per node for all of
 * them (_brisk_buddy_free_batch). The section's checks name `caller`, the
 * call the program made (brisk_hybrid_free, or brisk_hybrid_alloc that
 * gives the thread's cached blocks back to a region). */
static void section_free_batch(brisk_hybrid_t *h, size_t c, void *const *blocks, size_t n,
                               const char *caller) {
  size_t s = h->class_section[c];
  if (s < h->bucket_count) {
    _brisk_pool_give_batch(h->buckets[s], blocks, n, caller);
    return;
  }
  if (s == h->bucket_count && h->cached)
    for (size_t i = 0; i < n; i++) set_code(h, blocks[i], CLASS_CODE(NO_CLASS));
  _brisk_buddy_free_batch(h->regions[s - h->bucket_count], blocks, n, caller);
}

/* A thread's list of class c is not as long as its room word says: a
 * link was overwritten (a write after free), or a block freed twice with
 * its key cleared in between links to itself. `block` is the block whose
 * link ends the list too early or runs past its count. */
static BRISK_COLD BRISK_NORETURN void broken_list(const void *block, const char *caller) {
  _brisk_os_fatal_pointer(caller, block,
                          "a cached block's link was overwritten (write after free, or a block "
                          "freed twice?)");
}

/* A block met in a thread's list without the key every cached block
 * carries: its second word was written after it was freed, or a link was
 * overwritten with the address of a block that is not cached (a live one,
 * which the batch below would otherwise give back while it is in use). */
static BRISK_COLD BRISK_NORETURN void lost_key(const void *block, const char *caller) {
  _brisk_os_fatal_pointer(caller, block,
                          "a block in a thread's cache lost its key (a write after free, or a "
                          "link overwritten with a block that is not cached)");
}

/* Class c's list, walked from p: the block after p (its link), checked
 * for the key. */
BRISK_INLINE void *next_listed(const brisk_hybrid_t *h, void *p, const char *caller) {
  if (((void **)p)[1] != (void *)h->key) lost_key(p, caller);
  return ((void **)p)[0];
}

/* The blocks after the first `keep` of class c's list go back, in one
 * batch (a list holds at most CLASS_MAX). The walk takes exactly the
 * blocks the room word counts, each must carry the key, and the last must
 * end the list: a list a write after free lengthened, closed into a loop
 * or led to a live block aborts here instead of running past `batch`,
 * forever, or giving back memory in use. */
static void trim_list(brisk_hybrid_t *h, cache_class_t *k, size_t c, size_t keep,
                      const char *caller) {
  size_t n = listed_blocks(h, k, c);
  if (keep >= n) return;
  void **cut = NULL, *p = k->head;
  for (size_t i = 0; i < keep; i++) {
    if (p == NULL) broken_list(cut, caller);
    cut = p;
    p = next_listed(h, cut, caller);
  }
  if (cut == NULL)
    k->head = NULL;
  else
    cut[0] = NULL;
  size_t word = atomic_load_explicit(&k->word, memory_order_relaxed);
  atomic_store_explicit(&k->word, (word & ~ROOM_MASK) | (h->class_cap[c] - keep),
                        memory_order_relaxed);
  void *batch[CLASS_MAX];
  size_t count = n - keep;
  for (size_t i = 0; i < count; i++) {
    if (p == NULL) broken_list(i > 0 ? batch[i - 1] : cut, caller);
    void *next = next_listed(h, p, caller);
    ((void **)p)[1] = NULL;
    batch[i] = p;
    p = next;
  }
  if (p != NULL) broken_list(batch[count - 1], caller);
  section_free_batch(h, c, batch, count, caller);
}

/*
 * Class c's list is empty: half a list of blocks from its section, the
 * first for the caller (counted), the others into the list. NULL when the
 * section has none.
 */
static void *refill(brisk_hybrid_t *h, hybrid_slot_t *e, size_t c, size_t size) {
  cache_class_t *k = &e->classes[c];
  size_t s = h->class_section[c];
  size_t want = h->class_cap[c] / 2;
  void *first = NULL;
  if (s < h->bucket_count) {
    /* A bucket: the half list in one take from its pool. */
    void *batch[CLASS_MAX / 2];
    size_t got = _brisk_pool_take_batch(h->buckets[s], want, batch);
    if (got == 0) return NULL;
    for (size_t i = got; i-- > 1;) push(h, k, batch[i]);
    first = batch[0];
    mark_objects(h, s);
  } else {
    /* A region: the half list in one search, as one split block. */
    brisk_buddy_t *region = h->regions[s - h->bucket_count];
    void *run[CLASS_MAX / 2];
    uint32_t order = (uint32_t)brisk_bit_scan_reverse(h->class_block[c]) - h->min_shift;
    uint32_t j = (uint32_t)brisk_bit_scan_reverse(want);
    size_t got = _brisk_buddy_take_run(region, order, j, run);
    for (size_t i = got; i-- > 1;) {
      set_code(h, run[i], CLASS_CODE(c));
      push(h, k, run[i]);
    }
    if (got != 0) {
      first = run[0];
      set_code(h, first, CLASS_CODE(c));
    }
    /* No free block of the run's size: blocks one at a time. */
    for (got = first != NULL ? want : 0; got < want; got++) {
      void *p = brisk_buddy_alloc(region, h->class_block[c], 0);
      if (p == NULL) break;
      set_code(h, p, CLASS_CODE(c));
      if (first == NULL)
        first = p;
      else
        push(h, k, p);
    }
    if (first == NULL) return NULL;
  }
  brisk_owner_add(&k->word, ONE_ALLOC);
  brisk_owner_add(&k->requested, size);
  return clear_key(first);
}

/* A block of class c for the calling thread (entry e): its list, else a
 * refill. */
static void *class_take(brisk_hybrid_t *h, hybrid_slot_t *e, size_t c, size_t size) {
  cache_class_t *k = &e->classes[c];
  void *p = k->head;
  if (p != NULL) {
    pop(k, p);
    brisk_owner_add(&k->requested, size);
    return p;
  }
  return refill(h, e, c, size);
}

/* _brisk_thread_slots_take_back's call for a slot no thread holds: every
 * list of its entry back to its section (an entry never made ready holds
 * none). The caller holds the slot, so the entry is its alone meanwhile. */
static size_t entry_take_back(void *context, uint32_t slot) {
  brisk_hybrid_t *h = context;
  hybrid_slot_t *e = slot_of(h, slot);
  if (atomic_load_explicit(&e->ready, memory_order_relaxed) == 0) return 0;
  size_t blocks = 0;
  for (size_t c = 1; c < h->class_count; c++) {
    blocks += listed_blocks(h, &e->classes[c], c);
    trim_list(h, &e->classes[c], c, 0, "brisk_hybrid_alloc");
  }
  return blocks;
}

/* A section could not serve a request: the lists that threads left in
 * their slots at exit go back to their sections (thread_slot.h); whether
 * any block did. */
static bool take_back_exited(brisk_hybrid_t *h) {
  return h->cached && _brisk_thread_slots_take_back(entry_take_back, h) != 0;
}

/* The calling thread's cached blocks of region r all go back to it. */
static void flush_region(brisk_hybrid_t *h, hybrid_slot_t *e, size_t r) {
  for (size_t k = 0; k < h->cached_orders; k++) {
    size_t c = h->region_class[r] + k;
    trim_list(h, &e->classes[c], c, 0, "brisk_hybrid_alloc");
  }
}

/* ---- Allocation past the inline path ---- */

/* A block from section s, not through a class. */
BRISK_INLINE void *count_direct(brisk_hybrid_t *h, uint32_t slot, size_t s, void *p, size_t size) {
  count(&h->slow[slot].direct_allocs[s], 1, slot);
  count(&slot_of(h, slot)->classes[NO_CLASS].requested, size, slot);
  return p;
}

static void *from_bucket(brisk_hybrid_t *h, uint32_t slot, size_t b, size_t size) {
  if (slot != BRISK_NO_THREAD_SLOT && h->bucket_class[b] != NO_CLASS) {
    hybrid_slot_t *e = ready_entry(h, slot);
    void *p = class_take(h, e, h->bucket_class[b], size);
    if (p == NULL && take_back_exited(h)) p = class_take(h, e, h->bucket_class[b], size);
    return p;
  }
  void *p = brisk_pool_alloc(h->buckets[b]);
  if (p == NULL && take_back_exited(h)) p = brisk_pool_alloc(h->buckets[b]);
  if (p == NULL) return NULL;
  mark_objects(h, b);
  if (h->bucket_class[b] != NO_CLASS) clear_key(p);
  return count_direct(h, slot, b, p, size);
}

static void *from_region(brisk_hybrid_t *h, uint32_t slot, size_t r, size_t size, size_t need) {
  uint32_t k = order_for(h, size > need ? size : need);
  if (slot != BRISK_NO_THREAD_SLOT && h->region_class[r] != NO_CLASS && k < h->cached_orders) {
    hybrid_slot_t *e = ready_entry(h, slot);
    size_t c = h->region_class[r] + k;
    void *p = class_take(h, e, c, size);
    if (p != NULL) return p;
    /* This thread's own cached blocks may be what the region lacks, then
     * those that exited threads left. */
    flush_region(h, e, r);
    p = refill(h, e, c, size);
    if (p == NULL && take_back_exited(h)) p = refill(h, e, c, size);
    return p;
  }
  void *p = brisk_buddy_alloc(h->regions[r], size, need);
  if (p == NULL && slot != BRISK_NO_THREAD_SLOT && h->region_class[r] != NO_CLASS) {
    /* A block no class holds (an order past the cached ones): this
     * thread's own cached blocks may be what keeps the region from having
     * one, as for a class's refill above. An entry not ready holds none. */
    hybrid_slot_t *e = slot_of(h, slot);
    if (atomic_load_explicit(&e->ready, memory_order_relaxed) != 0) {
      flush_region(h, e, r);
      p = brisk_buddy_alloc(h->regions[r], size, need);
    }
  }
  if (p == NULL && take_back_exited(h)) p = brisk_buddy_alloc(h->regions[r], size, need);
  if (p == NULL) return NULL;
  /* A block of a cached order, handed out without its class (no slot, an
   * alignment): its free may cache it all the same. */
  if (r == 0 && region_code(h, k) != CLASS_CODE(NO_CLASS)) {
    set_code(h, p, region_code(h, k));
    clear_key(p);
  }
  return count_direct(h, slot, h->bucket_count + r, p, size);
}

static void validate_own_entry(brisk_hybrid_t *h, uint32_t slot);

/* A destroyed hybrid (see Destroyed at the top). */
BRISK_INLINE bool destroyed(const brisk_hybrid_t *h) { return h->range_count == 0; }

static BRISK_COLD BRISK_NORETURN void not_live(const char *caller, const brisk_hybrid_t *h) {
  _brisk_os_fatal_pointer(caller, h, "not a live hybrid pool (destroyed already?)");
}

BRISK_INLINE void check_live(const char *caller, const brisk_hybrid_t *h) {
  if (BRISK_UNLIKELY(destroyed(h))) not_live(caller, h);
}

/* Size 0 or an alignment that is not a power of two. */
static BRISK_COLD void *bad_request(const brisk_hybrid_t *h) {
  check_live("brisk_hybrid_alloc", h);
  errno = EINVAL;
  return NULL;
}

/* No section (nor the fallback) has a block: every request to a
 * destroyed hybrid ends here. */
static BRISK_COLD void *no_block(const brisk_hybrid_t *h) {
  check_live("brisk_hybrid_alloc", h);
  errno = ENOMEM;
  return NULL;
}

/* brisk_hybrid_alloc_slow_'s search, for a valid request: the bucket,
 * the regions in turn, the fallback. */
static void *alloc_search(brisk_hybrid_t *h, size_t size, size_t align) {
  uint32_t slot = brisk_thread_slot();
  mark_touched(h, slot);
  /* Debug builds: this thread's lists checked every 64th time (the other
   * threads' and the sections need a quiet point). */
  if (BRISK_DEBUG && slot != BRISK_NO_THREAD_SLOT && (++slot_of(h, slot)->slow_allocs & 63) == 0)
    validate_own_entry(h, slot);
  hybrid_slow_t *counts = &h->slow[slot];
  /* align 0: what malloc would give an object of this size. */
  size_t need = align != 0 ? align : natural_align(size);
  if (size <= h->largest_bucket) {
    size_t b = h->bucket_for_size[(size + 7) / 8];
    if (need <= h->bucket_align[b]) {
      void *p = from_bucket(h, slot, b, size);
      if (p != NULL) return p;
      count(&counts->failures[b], 1, slot);
    }
  }
  size_t want = size > need ? size : need;
  for (size_t r = 0; r < h->region_count; r++) {
    if (want <= _brisk_buddy_max_block(h->regions[r])) {
      void *p = from_region(h, slot, r, size, need);
      if (p != NULL) return p;
    }
    count(&counts->failures[h->bucket_count + r], 1, slot);
  }
  if (h->fallback_to_malloc) {
    void *p = align <= natural_align(size) ? brisk_malloc(size) : brisk_aligned_alloc(align, size);
    if (p == NULL) return NULL;
    atomic_fetch_add_explicit(&h->fallbacks, 1, memory_order_relaxed);
    count(&slot_of(h, slot)->classes[NO_CLASS].requested, size, slot);
    return p;
  }
  return no_block(h);
}

void *brisk_hybrid_alloc_slow_(brisk_hybrid_t *h, size_t size, size_t align) {
  if (size == 0 || (align & (align - 1)) != 0) return bad_request(h);
  /* A section that cannot serve sets errno (ENOMEM) before another one
   * does: a request served leaves errno as the caller had it. */
  int saved_errno = errno;
  void *p = alloc_search(h, size, align);
  if (p != NULL) errno = saved_errno;
  return p;
}

/* The exported brisk_hybrid_alloc: brisk/hybrid.h's inline path, after
 * the NULL handle's test that the inline path leaves out. */
void *brisk_hybrid_alloc(brisk_hybrid_t *h, size_t size, size_t align) {
  if (BRISK_UNLIKELY(h == NULL)) {
    errno = EINVAL;
    return NULL;
  }
  return brisk_hybrid_alloc_inline_(h, size, align);
}

/* ---- Free ---- */

static BRISK_COLD BRISK_NORETURN void bad_free(const void *p, const char *why) {
  _brisk_os_fatal_pointer("brisk_hybrid_free", p, why);
}

/* The block at p, of class c, carries the key: it waits in a thread's
 * list, since every block of a class is handed out with that word cleared
 * (pop, clear_key) and goes back to its section with it cleared
 * (trim_list), or, a bucket's object, in its pool, which keeps the same
 * key in free objects. In the calling thread's own list of its class (k;
 * NULL for a thread with no slot, which has none), or elsewhere; a double
 * free either way, which pushing it would turn into a block handed out to
 * two threads, or the free of a block never handed out that waits there
 * (a refill's neighbours of the block handed out). The program's own data
 * equals the key only by a 2^-63 chance. */
static BRISK_COLD BRISK_NORETURN void cached_double_free(const brisk_hybrid_t *h,
                                                         const cache_class_t *k, size_t c,
                                                         const void *p) {
  /* At most the blocks the room word counts: a looped list ends too. */
  size_t listed = k != NULL ? listed_blocks(h, k, c) : 0;
  const void *q = k != NULL ? k->head : NULL;
  for (; q != NULL && listed > 0; q = ((void *const *)q)[0], listed--)
    if (q == p)
      bad_free(p, "double free, or a block never handed out (it waits in this thread's cache)");
  if (h->class_section[c] < h->bucket_count)
    bad_free(p, "double free, or a block never handed out (it waits in another thread's cache "
                "or in its bucket)");
  bad_free(p, "double free, or a block never handed out (it waits in another thread's cache)");
}

/* Block p of class c (not class 0), which the calling thread's list did
 * not take inline: the key seen, no room (the list full, the entry not
 * ready, or no slot yet), or no slot to be had (then to its section). */
static void free_to_class(brisk_hybrid_t *h, void *p, size_t c) {
  uint32_t slot = brisk_thread_slot();
  bool carries_key = ((void **)p)[1] == (void *)h->key;
  if (slot != BRISK_NO_THREAD_SLOT) {
    hybrid_slot_t *e = ready_entry(h, slot);
    cache_class_t *k = &e->classes[c];
    if (carries_key) cached_double_free(h, k, c, p);
    if (room_of(k) == 0) trim_list(h, k, c, h->class_cap[c] / 2, "brisk_hybrid_free");
    push(h, k, p);
    return;
  }
  if (carries_key) cached_double_free(h, NULL, c, p);
  section_free(h, h->class_section[c], p);
}

/* Block p, whose granule's code is `code`, past the inline free: code 0
 * (no block of a cached class starts at p) goes to the section by
 * address, any other to its class. */
void brisk_hybrid_free_slow_(brisk_hybrid_t *h, void *p, size_t code) {
  size_t c = code * 8 / sizeof(cache_class_t);
  if (c == NO_CLASS) {
    brisk_hybrid_free_other_(h, p);
    return;
  }
  free_to_class(h, p, c);
}

/* Bucket object p, checked, goes to the calling thread's list of the
 * class whose code is `code` (not 0), inline when the list has room and
 * the object does not carry the key. The entry of line 0 and one not yet
 * ready have no room: they go out of line before the object is read (with
 * the caches off it may be poisoned). */
BRISK_INLINE void cache_free(brisk_hybrid_t *h, void *p, size_t code) {
  cache_class_t *k = class_at(slot_at(h, brisk_thread_slot_line_), code);
  if (BRISK_UNLIKELY(room_of(k) == 0 || ((void **)p)[1] == (void *)h->key))
    return free_to_class(h, p, code * 8 / sizeof(cache_class_t));
  push(h, k, p);
}

/* A pointer outside every section, without the fallback: any pointer
 * freed to a destroyed hybrid (see Destroyed at the top). */
static BRISK_COLD BRISK_NORETURN void outside_free(const brisk_hybrid_t *h, const void *p) {
  check_live("brisk_hybrid_free", h);
  bad_free(p, "pointer not from this hybrid pool");
}

static BRISK_NOINLINE void free_outside(brisk_hybrid_t *h, void *p) {
  if (p == NULL) return;
  if (!h->fallback_to_malloc) outside_free(h, p);
  brisk_free(p);
}

/* A pointer whose granule has no code (or that has no granule): the
 * section by address (the range table), checked (a bucket's object that
 * was handed out, a region block's start), then a bucket's class, or the
 * bucket or region itself (a bucket without a class, a first-region block
 * of an order no class caches, a further region's block). */
void brisk_hybrid_free_other_(brisk_hybrid_t *h, void *p) {
  uintptr_t address = (uintptr_t)p;
  const section_range_t *r = h->ranges;
  while (address - r->lo >= r->size) r++; /* the sentinel stops it */
  uintptr_t offset = address - r->lo;
  if (r->is_bucket == RANGE_OUTSIDE) return free_outside(h, p); /* NULL too */
  if (r->is_bucket) {
    /* brisk_pool_geometry_index: the object's index, or past carved. */
    uint32_t shift = r->u.pool.shift;
    uint64_t rotated = (offset >> shift) | (offset << ((64 - shift) & 63));
    if (BRISK_UNLIKELY(rotated * r->u.pool.inverse >=
                       atomic_load_explicit(r->u.pool.carved, memory_order_relaxed)))
      bad_free(p, "not an object of this hybrid's bucket (or never handed out)");
    if (r->code != CLASS_CODE(NO_CLASS)) return cache_free(h, p, r->code);
    /* Its pool checks the key (a double free) in the program's name. */
    _brisk_pool_free_as(h->buckets[r->index], p, "brisk_hybrid_free");
    return;
  }
  if ((offset & r->u.buddy.unit_mask) != 0) bad_free(p, "not the start of a block");
  /* Its buddy tells a pointer inside a block from one to a free block. */
  _brisk_buddy_free_as(h->regions[r->index], p, "brisk_hybrid_free");
}

/* The exported brisk_hybrid_free: brisk/hybrid.h's inline path, after the
 * NULL handle's test. */
void brisk_hybrid_free(brisk_hybrid_t *h, void *p) {
  if (BRISK_UNLIKELY(h == NULL)) {
    if (p != NULL) bad_free(p, "the hybrid is NULL");
    return;
  }
  brisk_hybrid_free_inline_(h, p);
}

/* ---- Statistics ---- */

/* Section s: the bytes of the blocks the program holds (the section's own
 * count, less the blocks the thread caches hold), the blocks it served the
 * program, and the requests it could not serve. */
static void section_counts(const brisk_hybrid_t *h, size_t s, size_t *in_use,
                           size_t *allocations, size_t *failures) {
  brisk_hybrid_t *m = (brisk_hybrid_t *)h;
  size_t held;
  if (s < h->bucket_count) {
    brisk_pool_counters_t c;
    _brisk_pool_counters(h->buckets[s], &c);
    held = c.in_use * h->bucket_sizes[s];
  } else {
    brisk_buddy_counters_t c;
    _brisk_buddy_counters(h->regions[s - h->bucket_count], &c);
    held = c.in_use;
  }
  size_t cached = 0, served = 0, failed = 0;
  /* The slots that wrote anything (the others' words are all 0). */
  for (uint32_t i = next_touched(h, 0); i != TOUCHED_END; i = next_touched(h, i + 1)) {
    hybrid_slot_t *e = slot_of(m, i);
    served += atomic_load_explicit(&m->slow[i].direct_allocs[s], memory_order_relaxed);
    failed += atomic_load_explicit(&m->slow[i].failures[s], memory_order_relaxed);
    for (size_t c = 1; c < h->class_count; c++) {
      if (h->class_section[c] != s) continue;
      served += atomic_load_explicit(&e->classes[c].word, memory_order_relaxed) >> ROOM_BITS;
      cached += list_length(h, e, c) * h->class_block[c];
    }
  }
  /* Read while threads run, the two counts can be a moment apart. */
  *in_use = held > cached ? held - cached : 0;
  *allocations = served;
  *failures = failed;
}

size_t brisk_hybrid_stats(const brisk_hybrid_t *h, brisk_hybrid_section_stats_t *out, size_t max,
                          size_t *fallbacks) {
  if (h == NULL) {
    if (fallbacks != NULL) *fallbacks = 0;
    errno = EINVAL;
    return 0;
  }
  check_live("brisk_hybrid_stats", h);
  brisk_hybrid_t *m = (brisk_hybrid_t *)h;
  size_t n = 0;
  for (size_t i = 0; i < h->bucket_count; i++, n++) {
    if (n >= max || out == NULL) continue;
    brisk_pool_counters_t c;
    _brisk_pool_counters(h->buckets[i], &c);
    uintptr_t lo, hi;
    _brisk_pool_range(h->buckets[i], &lo, &hi);
    size_t size = h->bucket_sizes[i];
    out[n] = (brisk_hybrid_section_stats_t){
        .block_size = size,
        .bytes_reserved = hi - lo,
        .high_water = c.high_water * size,
    };
    section_counts(h, i, &out[n].in_use, &out[n].allocations, &out[n].failures);
  }
  for (size_t i = 0; i < h->region_count; i++, n++) {
    if (n >= max || out == NULL) continue;
    brisk_buddy_counters_t c;
    _brisk_buddy_counters(h->regions[i], &c);
    uintptr_t lo, hi;
    _brisk_buddy_range(h->regions[i], &lo, &hi);
    out[n] = (brisk_hybrid_section_stats_t){
        .block_size = 0,
        .bytes_reserved = hi - lo,
        .high_water = c.high_water,
    };
    section_counts(h, h->bucket_count + i, &out[n].in_use, &out[n].allocations,
                   &out[n].failures);
  }
  if (fallbacks != NULL) *fallbacks = atomic_load_explicit(&m->fallbacks, memory_order_relaxed);
  return n;
}

void brisk_hybrid_totals(const brisk_hybrid_t *h, brisk_region_stats_t *out) {
  if (h == NULL) {
    memset(out, 0, sizeof *out);
    errno = EINVAL;
    return;
  }
  check_live("brisk_hybrid_totals", h);
  brisk_hybrid_t *m = (brisk_hybrid_t *)h;
  brisk_region_stats_t total = {
      .bytes_held = h->mapping_size,
      .system_requests = h->system_requests,
      .allocations = atomic_load_explicit(&m->fallbacks, memory_order_relaxed),
  };
  for (uint32_t i = next_touched(h, 0); i != TOUCHED_END; i = next_touched(h, i + 1))
    for (size_t c = 0; c < MAX_CLASSES; c++)
      total.bytes_requested +=
          atomic_load_explicit(&slot_of(m, i)->classes[c].requested, memory_order_relaxed);
  for (size_t s = 0; s < h->bucket_count + h->region_count; s++) {
    size_t in_use, allocations, failures;
    section_counts(h, s, &in_use, &allocations, &failures);
    total.bytes_in_use += in_use;
    total.allocations += allocations;
  }
  /* The mapping holds the buckets and the first region; the others hold
   * their own. */
  brisk_region_stats_t section;
  for (size_t i = 0; i < h->bucket_count; i++) {
    brisk_pool_stats(h->buckets[i], &section);
    total.system_requests += section.system_requests;
  }
  for (size_t i = 0; i < h->region_count; i++) {
    brisk_buddy_stats(h->regions[i], &section);
    if (i != 0) total.bytes_held += section.bytes_held;
    total.system_requests += section.system_requests;
  }
  *out = total;
}

/* ---- Destruction ---- */

/* Destroy (caches on, the mapping going to the cache): the code table
 * zero again for the next hybrid. The buckets' codes lie below their
 * marked counts; the first region's are its cached blocks' when the
 * program holds none of its blocks (cleared by forget_code as its buddy
 * forgets them), else anywhere in its part of the table
 * (`region_too`). */
static void clear_codes(brisk_hybrid_t *h, bool region_too) {
  uint8_t *codes = (uint8_t *)codes_of(h);
  for (size_t b = 0; b < h->bucket_count; b++) {
    size_t marked = atomic_load_explicit(&h->bucket_marked[b], memory_order_relaxed);
    size_t from = (h->bucket_objects[b] - h->base) >> GRANULE_SHIFT;
    memset(codes + from, 0, (marked * h->bucket_stride[b] + GRANULE - 1) >> GRANULE_SHIFT);
  }
  if (!region_too || h->region_count == 0 || h->region_class[0] == NO_CLASS) return;
  /* Zero pages from the OS layer where whole pages are (a memset would
   * fault in the ones no block ever marked), the edges by hand. */
  brisk_buddy_geometry_t g;
  _brisk_buddy_geometry(h->regions[0], &g);
  uint8_t *from = codes + ((g.base - h->base) >> GRANULE_SHIFT);
  uint8_t *to = from + (g.total >> GRANULE_SHIFT);
  size_t page = _brisk_os_page_size();
  uint8_t *lo = (uint8_t *)brisk_align_up((uintptr_t)from, page);
  uint8_t *hi = (uint8_t *)((uintptr_t)to & ~(uintptr_t)(page - 1));
  if (hi <= lo || !_brisk_os_decommit(lo, (size_t)(hi - lo), NULL)) lo = hi = to;
  memset(from, 0, (size_t)(lo - from));
  memset(hi, 0, (size_t)(to - hi));
}

/* _brisk_buddy_forget_blocks' visit of each block the first region
 * forgets (the thread caches' blocks): its code cleared. */
static void forget_code(void *hybrid, void *p) {
  set_code(hybrid, p, CLASS_CODE(NO_CLASS));
}

void brisk_hybrid_destroy(brisk_hybrid_t *h) {
  if (h == NULL) return;
  /* A hybrid destroyed already (its mapping in the mapping cache, as
   * destroy left it, or back with the system) or another kind's handle
   * has no live entry: destroying it would give the cache the mapping
   * twice, or one that is no hybrid's. */
  if (BRISK_UNLIKELY(!_brisk_region_unregister(&h->entry, BRISK_REGION_HYBRID)))
    not_live("brisk_hybrid_destroy", h);
  /* A region whose blocks the program all gave back holds only cached
   * ones, which go with the hybrid: it forgets them, so that its metadata
   * is clean for the mapping cache. */
  if (h->cached) {
    for (size_t r = 0; r < h->region_count; r++) {
      size_t in_use, allocations, failures;
      section_counts(h, h->bucket_count + r, &in_use, &allocations, &failures);
      bool codes = r == 0 && !h->locked;
      if (codes) clear_codes(h, in_use != 0);
      if (in_use == 0)
        _brisk_buddy_forget_blocks(h->regions[r], codes ? forget_code : NULL, h);
    }
    if (h->region_count == 0 && !h->locked) clear_codes(h, false);
  }
  bool meta_clean;
  size_t resident = destroy_sections(h, &meta_clean);
  h->clean_meta_at = meta_clean ? h->meta_at : SIZE_MAX;
  /* The entries and slow counts that threads wrote, back to zero, so that
   * the next create from the mapping cache clears only the rest of the
   * hybrid (its 130 KiB of entries stay as they are). */
  for (uint32_t i = next_touched(h, 0); i != TOUCHED_END; i = next_touched(h, i + 1)) {
    memset(slot_of(h, i), 0, sizeof(hybrid_slot_t));
    memset(&h->slow[i], 0, sizeof h->slow[i]);
  }
  h->clean_slots_at = (uintptr_t)h;
  void *map = (void *)h->base;
  size_t size = h->mapping_size;
  /* Destroyed (see the top): every later call finds no section. */
  h->largest_bucket = 0;
  h->region_count = 0;
  h->fallback_to_malloc = false;
  h->range_count = 0;
  memset(&h->ranges[0], 0, sizeof h->ranges[0]);
  h->ranges[0].size = UINTPTR_MAX;
  h->ranges[0].is_bucket = RANGE_OUTSIDE;
  /* To the OS layer's cache, for the next hybrid of this size; not
   * mlock'ed memory, which would stay locked after its hybrid is gone. */
  if (h->locked)
    _brisk_os_release(map, size, NULL);
  else if (BRISK_UNLIKELY(!_brisk_os_cache_put(BRISK_OS_CACHE_HYBRID, map, size, size,
                                               resident < size ? resident : size, NULL)))
    /* The cache holds the mapping already (a hybrid garbled to name a
     * destroyed one's): kept twice, two later hybrids would share it. */
    _brisk_os_fatal_pointer("brisk_hybrid_destroy", h,
                            "its memory is in the mapping cache already");
}

/* ---- Validation ---- */

/*
 * _brisk_hybrid_validate (regions/hybrid.h), at a quiet point:
 *   entries   the entry of no slot (line 0) and the shared one hold no
 *             list, no room and no class count (the inline paths rely on
 *             line 0's rooms being 0), nor does any class an entry does
 *             not use (class 0, those past class_count, every class of an
 *             entry not yet ready); in a ready entry each class's room is
 *             at most its cap and its list is cap - room blocks long
 *   blocks    each cached block lies in its class's section and was handed
 *             out there: a bucket's object below the pool's carved count
 *             (brisk_pool_geometry_index: an object's start), the first
 *             region's block aligned to the class's size whose index byte
 *             is the class's order + 1; it carries the key in its second
 *             word; and it is met once over every list of every entry
 *   codes     each bucket's marked count is at most its pool's carved
 *             count, and every code in the table (the inline free trusts
 *             it) is that of the class of a block that starts at its
 *             granule: an object of a bucket below its marked count, or a
 *             first-region block whose index byte is its order + 1, of a
 *             cached order; a cached block that starts on a granule
 *             finds its class's code there
 *   counts    a section has handed out at least the blocks the caches hold
 *             (its in_use: the statistics' in_use is the difference) and
 *             served at least the blocks the slots counted as served
 *             without a class (direct_allocs, one section call each)
 *   sections  every bucket's pool (_brisk_pool_validate, its class's lists
 *             named as local caches) and every region's buddy
 *             (brisk_buddy_validate, which prints its own line first)
 * A block met is marked by its second word turned from the key into the
 * key with bit 1 flipped (the key is odd and never 0, so the mark is
 * neither the key nor NULL): a block met again is cached twice, with no
 * memory beyond the blocks themselves; the marks are undone at the end.
 * Debug builds run the entries' and blocks' checks on the calling thread's
 * own entry from brisk_hybrid_alloc_slow_ every 64th time: its lists and blocks are that
 * thread's alone, and the sections' bytes it reads (a carved count, index
 * bytes of blocks it holds) are atomics that hold still for its blocks.
 */

typedef struct hybrid_check_s {
  const brisk_hybrid_t *h;
  uintptr_t mark;                    /* a met block's second word */
  brisk_pool_geometry_t pools[BRISK_HYBRID_MAX_BUCKETS];
  brisk_buddy_geometry_t region;     /* the first region's, with classes */
  size_t cached[MAX_SECTIONS];       /* bytes of the blocks in the lists, per section */
} hybrid_check_t;

static BRISK_COLD BRISK_NORETURN void validate_failed(const void *p, const char *what,
                                                      const char *where, size_t n) {
  char why[200];
  if (where != NULL)
    snprintf(why, sizeof why, "%s (%s %zu)", what, where, n);
  else
    snprintf(why, sizeof why, "%s", what);
  _brisk_os_fatal_pointer("brisk_hybrid_validate", p, why);
}

#define VCHECK(condition, p, what, where, n)                                \
  do {                                                                      \
    if (BRISK_UNLIKELY(!(condition))) validate_failed((p), (what), (where), (n)); \
  } while (0)

static void check_init(hybrid_check_t *v, const brisk_hybrid_t *h) {
  memset(v, 0, sizeof *v);
  v->h = h;
  v->mark = h->key ^ 2;
  for (size_t b = 0; b < h->bucket_count; b++) _brisk_pool_geometry(h->buckets[b], &v->pools[b]);
  if (h->region_count != 0) _brisk_buddy_geometry(h->regions[0], &v->region);
}

/* Block p in class c's list (of the entry `where` n): in its section,
 * handed out there, with the key, met for the first time; then marked. */
static void check_cached_block(hybrid_check_t *v, void *p, size_t c, const char *where,
                               size_t n) {
  const brisk_hybrid_t *h = v->h;
  size_t s = h->class_section[c];
  if (s < h->bucket_count) {
    const brisk_pool_geometry_t *g = &v->pools[s];
    VCHECK(brisk_pool_geometry_index(g, p) < atomic_load_explicit(g->carved, memory_order_relaxed),
           p, "a cached block is no object of its class's bucket that was handed out", where, n);
  } else {
    const brisk_buddy_geometry_t *g = &v->region;
    uintptr_t offset = (uintptr_t)p - g->base;
    VCHECK(offset < g->total && (offset & (h->class_block[c] - 1)) == 0, p,
           "a cached block is no block start of its class's size in the first region", where, n);
    uint8_t tag = atomic_load_explicit(&((const _Atomic uint8_t *)g->index)[offset >> g->min_shift],
                                       memory_order_relaxed);
    VCHECK(tag == c - h->region_class[0] + 1, p,
           "a cached block's index byte is not its class's order + 1 (freed, or another order)",
           where, n);
  }
  /* A block off the granules (every other object of an 8-aligned bucket)
   * has no code: its free finds its section by address. */
  if ((((uintptr_t)p - h->base) & (GRANULE - 1)) == 0)
    VCHECK(atomic_load_explicit(code_at(h, p), memory_order_relaxed) == CLASS_CODE(c), p,
           "a cached block's granule does not hold its class's code", where, n);
  void **words = p;
  VCHECK((uintptr_t)words[1] != v->mark, p, "a block is cached twice", where, n);
  VCHECK((uintptr_t)words[1] == h->key, p,
         "a cached block does not carry the key (written after its free?)", where, n);
  words[1] = (void *)v->mark;
}

/* Entry e (`where` n): `may_hold` says whether it may hold lists (a
 * slot's; not line 0's or the shared one). Its blocks are checked and
 * marked, and counted per section. */
static void check_entry(hybrid_check_t *v, hybrid_slot_t *e, bool may_hold, const char *where,
                        size_t n) {
  const brisk_hybrid_t *h = v->h;
  bool ready = atomic_load_explicit(&e->ready, memory_order_relaxed) != 0;
  VCHECK(may_hold || !ready, e, "an entry that never caches is marked ready", where, n);
  for (size_t c = 0; c < MAX_CLASSES; c++) {
    cache_class_t *k = &e->classes[c];
    size_t word = atomic_load_explicit(&k->word, memory_order_relaxed);
    if (!ready || c == NO_CLASS || c >= h->class_count) {
      VCHECK(k->head == NULL, e, "a list where no class caches (class 0, no such class, an "
                                 "entry not in use)", where, n);
      VCHECK(word == 0, e, "room or a count where no class caches (class 0, no such class, an "
                           "entry not in use)", where, n);
      /* Class 0 counts the sizes of allocations served without a class. */
      VCHECK(c == NO_CLASS ||
                 atomic_load_explicit(&k->requested, memory_order_relaxed) == 0,
             e, "requested bytes where no class caches (no such class, an entry not in use)",
             where, n);
      continue;
    }
    size_t room = word & ROOM_MASK, cap = h->class_cap[c];
    VCHECK(room <= cap, e, "a list's room is above its class's cap", where, n);
    size_t length = 0;
    for (void *p = k->head; p != NULL; p = ((void **)p)[0]) {
      VCHECK(length < cap - room, p, "a list holds more blocks than its room says", where, n);
      check_cached_block(v, p, c, where, n);
      length++;
    }
    VCHECK(length == cap - room, e, "a list holds fewer blocks than its room says", where, n);
    v->cached[h->class_section[c]] += length * h->class_block[c];
  }
}

/* The marks of entry e's blocks (checked: its lists are sound) undone. */
static void unmark_entry(const hybrid_check_t *v, hybrid_slot_t *e) {
  if (atomic_load_explicit(&e->ready, memory_order_relaxed) == 0) return;
  for (size_t c = 1; c < v->h->class_count; c++)
    for (void *p = e->classes[c].head; p != NULL; p = ((void **)p)[0])
      ((void **)p)[1] = (void *)v->h->key;
}

/* Bucket b's pool, its class's lists (checked above) named to it as local
 * caches, which they are in its terms (objects handed out, linked by
 * their first 8 bytes): it also finds an object both cached and free in
 * the pool, and in debug builds a cached object whose live bit is clear. */
static void validate_bucket(const brisk_hybrid_t *h, size_t b) {
  brisk_pool_local_t lists[BRISK_THREAD_SLOTS];
  const brisk_pool_local_t *named[BRISK_THREAD_SLOTS];
  size_t n = 0, c = h->bucket_class[b];
  brisk_pool_geometry_t g;
  _brisk_pool_geometry(h->buckets[b], &g);
  for (uint32_t i = 1; c != NO_CLASS && i <= BRISK_THREAD_SLOTS; i++) {
    hybrid_slot_t *e = (hybrid_slot_t *)h->slots[i];
    size_t length = list_length(h, e, c);
    if (length == 0) continue;
    lists[n] = (brisk_pool_local_t){.head = e->classes[c].head,
                                    .count = (unsigned)length,
                                    .max = (unsigned)h->class_cap[c],
                                    .lo = g.objects,
                                    .span = 0,
                                    .pool = h->buckets[b]};
    named[n] = &lists[n];
    n++;
  }
  _brisk_pool_validate(h->buckets[b], named, n);
}

/* The code at granule g (its address p) is nonzero: it must be the class's
 * of a block that starts there. */
static void check_code(const hybrid_check_t *v, size_t g, size_t code) {
  const brisk_hybrid_t *h = v->h;
  uintptr_t p = h->base + (g << GRANULE_SHIFT);
  VCHECK(g < h->granules, (void *)p, "a code past the blocks", "granule", g);
  if (h->region_count != 0 && p - v->region.base < v->region.total) {
    uintptr_t offset = p - v->region.base;
    size_t unit = offset >> v->region.min_shift;
    uint8_t tag = (offset & (((uintptr_t)1 << v->region.min_shift) - 1)) != 0
                      ? 0
                      : atomic_load_explicit(&((const _Atomic uint8_t *)v->region.index)[unit],
                                             memory_order_relaxed);
    VCHECK(tag != 0 && code == region_code(h, (uint32_t)tag - 1), (void *)p,
           "a code where no block of its class starts (first region)", "granule", g);
    return;
  }
  for (size_t b = 0; b < h->bucket_count; b++) {
    uintptr_t lo, hi;
    _brisk_pool_range(h->buckets[b], &lo, &hi);
    if (p - lo >= hi - lo) continue;
    size_t marked = atomic_load_explicit(&h->bucket_marked[b], memory_order_relaxed);
    VCHECK(h->bucket_class[b] != NO_CLASS && code == CLASS_CODE(h->bucket_class[b]) &&
               brisk_pool_geometry_index(&v->pools[b], (const void *)p) < marked,
           (void *)p, "a code marks no object of its bucket that was handed out", "bucket", b);
    return;
  }
  validate_failed((void *)p, "a code outside every section", "granule", g);
}

/* The code table: every bucket's marked count, then every nonzero byte
 * (read eight at a time: at a quiet point, plainly). */
static void check_codes(const hybrid_check_t *v) {
  const brisk_hybrid_t *h = v->h;
  for (size_t b = 0; b < h->bucket_count; b++)
    VCHECK(atomic_load_explicit(&h->bucket_marked[b], memory_order_relaxed) <=
               atomic_load_explicit(h->bucket_carved[b], memory_order_relaxed),
           h, "a bucket's marked count is past its pool's carved count", "bucket", b);
  const uint8_t *codes = (const uint8_t *)codes_of(h);
  size_t size = h->base + h->mapping_size - (uintptr_t)codes;
  for (size_t at = 0; at < size; at += 8) {
    uint64_t word;
    memcpy(&word, codes + at, 8);
    if (word == 0) continue;
    for (size_t i = 0; i < 8; i++)
      if (codes[at + i] != 0) check_code(v, at + i, codes[at + i]);
  }
}

/* Entry i of slots[] in a message: line 0's, slot i - 1's, the shared one. */
static const char *entry_name(uint32_t i) {
  return i == 0 ? "entry of no slot" : i == SLOT_SHARED ? "shared entry" : "entry of slot";
}

void _brisk_hybrid_validate(const brisk_hybrid_t *hybrid) {
  brisk_hybrid_t *h = (brisk_hybrid_t *)hybrid; /* the marks, undone before the return */
  hybrid_check_t v;
  check_init(&v, h);
  for (size_t c = 1; c < h->class_count; c++)
    VCHECK(h->class_cap[c] >= CLASS_MIN && h->class_cap[c] <= CLASS_MAX &&
               h->class_section[c] < h->bucket_count + (h->region_count != 0 ? 1 : 0),
           h, "a class's cap or section is out of range", "class", c);
  for (uint32_t i = 0; i <= SLOT_SHARED; i++) {
    hybrid_slot_t *e = (hybrid_slot_t *)h->slots[i];
    bool a_slot = i != SLOT_NONE && i != SLOT_SHARED;
    check_entry(&v, e, a_slot, entry_name(i), a_slot ? i - 1 : 0);
    if (i == SLOT_NONE)
      VCHECK(atomic_load_explicit(&e->classes[NO_CLASS].requested, memory_order_relaxed) == 0, e,
             "the entry of no slot counted an allocation", NULL, 0);
  }
  for (uint32_t i = 0; i <= SLOT_SHARED; i++) unmark_entry(&v, (hybrid_slot_t *)h->slots[i]);

  for (size_t s = 0; s < h->bucket_count + h->region_count; s++) {
    size_t direct = 0;
    for (uint32_t i = 0; i <= BRISK_THREAD_SLOTS; i++)
      direct += atomic_load_explicit(&h->slow[i].direct_allocs[s], memory_order_relaxed);
    size_t handed_out, served; /* bytes in blocks handed out; blocks served */
    if (s < h->bucket_count) {
      brisk_pool_counters_t c;
      _brisk_pool_counters(h->buckets[s], &c);
      handed_out = c.in_use * h->bucket_sizes[s];
      served = c.allocations;
    } else {
      brisk_buddy_counters_t c;
      _brisk_buddy_counters(h->regions[s - h->bucket_count], &c);
      handed_out = c.in_use;
      served = c.allocations;
    }
    VCHECK(v.cached[s] <= handed_out, h,
           "the thread caches hold more of a section than it has handed out", "section", s);
    VCHECK(direct <= served, h,
           "the slots counted more blocks served without a class than the section served",
           "section", s);
  }
  check_codes(&v);
  for (size_t b = 0; b < h->bucket_count; b++) validate_bucket(h, b);
  for (size_t r = 0; r < h->region_count; r++)
    VCHECK(brisk_buddy_validate(h->regions[r], NULL) == 1, h->regions[r],
           "a region's buddy does not validate (the line above)", "region", r);
}

/* Debug builds, from brisk_hybrid_alloc_slow_: the calling thread's own entry (slot). */
static void validate_own_entry(brisk_hybrid_t *h, uint32_t slot) {
  hybrid_check_t v;
  check_init(&v, h);
  hybrid_slot_t *e = slot_of(h, slot);
  check_entry(&v, e, true, "entry of slot", slot);
  unmark_entry(&v, e);
}

_Atomic size_t *_brisk_hybrid_class_word(brisk_hybrid_t *h, size_t size) {
  uint32_t slot = brisk_thread_slot();
  size_t entry = size <= MAX_BUCKET_SIZE ? size : LARGE_ENTRY(size);
  size_t code = h->code_of_size[entry];
  if (slot == BRISK_NO_THREAD_SLOT || code == CLASS_CODE(NO_CLASS)) return NULL;
  hybrid_slot_t *e = slot_of(h, slot);
  if (atomic_load_explicit(&e->ready, memory_order_relaxed) == 0) return NULL;
  return &class_at(e, code)->word;
}

_Atomic uint8_t *_brisk_hybrid_code(brisk_hybrid_t *h, const void *p) {
  uintptr_t offset = (uintptr_t)p - h->base;
  if ((offset >> GRANULE_SHIFT) >= h->granules) return NULL;
  return code_at(h, p);
}
