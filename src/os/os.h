/*
 * os.h — the OS contract. The only layer that maps, unmaps or advises memory,
 * or talks to the kernel for time and error output. One implementation file
 * per OS (os_linux.c); no platform #if outside os/.
 *
 * Vocabulary:
 *   reserve   — take address space. brisk reserves read-write and lets the
 *               kernel back pages on first touch, so "commit" is implicit,
 *               except for segments of pages under the kernel's strict
 *               accounting (_brisk_os_reserve_pages).
 *   decommit  — give the physical pages back (RSS falls); the range stays
 *               reserved and reads back as zero when touched again.
 *   release   — return the address space itself.
 *
 * Counting: every function below that may make a system call takes a last
 * argument `calls`. Unless it is NULL, the function adds to *calls how
 * many system calls it made, refused ones included: a reservation makes
 * one to five (an mmap at a hint, and an munmap when the kernel placed it
 * elsewhere; failing that, an over-sized mmap and up to two trimming
 * munmaps), an uncommit two (madvise and mprotect), the others one, and
 * none for size 0. The region allocators keep their own count of system
 * calls this way (brisk_region_stats_t.system_requests); the general
 * allocator passes NULL.
 *
 * errno: a function that can fail sets it (ENOMEM) when it does. Those that
 * report no failure (uncommit, release, advise_huge_pages) and decommit
 * leave errno as it was, refused or not: free() makes only these calls,
 * and POSIX has free leave errno alone.
 */
#ifndef BRISK_OS_H
#define BRISK_OS_H

#include "base/base.h"

/*
 * The OS page size, read from the system at the first call and kept (4 KiB
 * on x86-64; 4, 16 or 64 KiB on arm64). brisk runs with any power of two
 * from BRISK_OS_MIN_PAGE_SIZE to BRISK_OS_MAX_PAGE_SIZE and stops with a
 * message on any other: what needs a page size at compile time uses these
 * bounds (a fifo's control block fits the smallest page; the general
 * allocator's pages, 64 KiB and up, are whole OS pages for any).
 */
#define BRISK_OS_MIN_PAGE_SIZE ((size_t)4 << 10)
#define BRISK_OS_MAX_PAGE_SIZE ((size_t)64 << 10)
BRISK_HIDDEN size_t _brisk_os_page_size(void);

/*
 * Reserve `size` bytes (a multiple of the page size) read-write, placed so
 * that base + align_offset is a multiple of `align` (a power of two, at
 * least the page size; align_offset < align, a multiple of the page size).
 * Fresh memory reads as zero. NULL with errno ENOMEM when the kernel refuses.
 */
BRISK_HIDDEN void *_brisk_os_reserve(size_t size, size_t align, size_t align_offset,
                                    size_t *calls);

/*
 * _brisk_os_reserve of `size` bytes with no-access areas of `lead` bytes
 * just before them and `tail` bytes just after (each 0 or whole pages), so
 * that no overflow runs into or out of the mapping: returns the start of
 * the usable part, placed so that it plus align_offset is a multiple of
 * `align` (align_offset < align). Give it back with
 * _brisk_os_release_guarded and the same size, lead and tail.
 */
BRISK_HIDDEN void *_brisk_os_reserve_guarded(size_t size, size_t align, size_t align_offset,
                                            size_t lead, size_t tail, size_t *calls);
BRISK_HIDDEN void _brisk_os_release_guarded(void *p, size_t size, size_t lead, size_t tail,
                                           size_t *calls);

/*
 * Reserve `size` bytes aligned to `align`, with guards of `lead` and `tail`
 * bytes around them as _brisk_os_reserve_guarded does, for memory that is
 * used a part at a time (the general allocator's segments of pages), so
 * that only what is used counts against the system's commit limit
 * (Committed_AS). Under the kernel's heuristic or "always" overcommit the
 * range is read-write at once and charged for nothing (MAP_NORESERVE;
 * memory is backed on first touch either way). Under strict accounting
 * (vm.overcommit_memory = 2, read once), which charges every read-write
 * private mapping when it is made, the range starts inaccessible and
 * *needs_commit is set: the caller makes each part read-write with
 * _brisk_os_commit before it uses it, and only those parts are charged.
 * Give it back with _brisk_os_release_guarded.
 */
BRISK_HIDDEN void *_brisk_os_reserve_pages(size_t size, size_t align, size_t lead, size_t tail,
                                          bool *needs_commit, size_t *calls);

/* Read what the calls above need to know of the system (the overcommit
 * mode) now, when the library is loaded: a program may later sandbox itself
 * so that opening a file kills it. Otherwise read at the first use. */
BRISK_HIDDEN void _brisk_os_start(void);

/* Tests: behave from now on as under strict accounting (true, whatever
 * vm.overcommit_memory says), or as the system says again (false). */
BRISK_HIDDEN void _brisk_os_assume_strict_commit(bool strict);

/*
 * Reserve address space only: no access, no memory, not counted against
 * the system's commit limit, so 64 GiB is fine to ask for. Pages become
 * usable through _brisk_os_commit. NULL/ENOMEM when the kernel refuses.
 */
BRISK_HIDDEN void *_brisk_os_reserve_address_space(size_t size, size_t align, size_t *calls);

/* Make a page-aligned range of such a reservation read-write (zeroed on
 * first touch). false when the kernel refuses (the commit limit). */
BRISK_HIDDEN bool _brisk_os_commit(void *p, size_t size, size_t *calls);

/* Drop a committed range's pages and make it inaccessible again. */
BRISK_HIDDEN void _brisk_os_uncommit(void *p, size_t size, size_t *calls);

/* Fault in every page of a committed range now (MADV_POPULATE_WRITE, or a
 * write per page on kernels without it), so later use takes no page fault. */
BRISK_HIDDEN bool _brisk_os_prefault(void *p, size_t size, size_t *calls);

/* Lock a committed range into RAM (mlock); false with errno set when the
 * limit (RLIMIT_MEMLOCK) refuses. */
BRISK_HIDDEN bool _brisk_os_lock(void *p, size_t size, size_t *calls);

/* BRISK_REGION_PREFAULT / LOCK on a committed range: fault it in, then lock
 * it when lock is set; false (errno set) when either is refused. */
BRISK_INLINE bool _brisk_os_make_resident(void *p, size_t size, bool lock, size_t *calls) {
  return _brisk_os_prefault(p, size, calls) && (!lock || _brisk_os_lock(p, size, calls));
}

/* Make a page-aligned part of a reservation inaccessible, keeping its
 * address space: a guard page, where any access faults (SIGSEGV). Undone
 * by _brisk_os_commit. false when the kernel refuses (the map count). */
BRISK_HIDDEN bool _brisk_os_guard(void *p, size_t size, size_t *calls);

/* Return a range from _brisk_os_reserve (or a page-aligned part of it). */
BRISK_HIDDEN void _brisk_os_release(void *p, size_t size, size_t *calls);

/* Drop the physical pages of a page-aligned range; it stays usable and
 * reads back as zero. false when the kernel refuses (madvise fails on
 * mlock'ed pages, for one): the range then keeps its contents. */
BRISK_HIDDEN bool _brisk_os_decommit(void *p, size_t size, size_t *calls);

/* Grow or shrink a reservation where it stands; false when the address
 * space after it is taken. */
BRISK_HIDDEN bool _brisk_os_resize(void *p, size_t old_size, size_t new_size, size_t *calls);

/* Move a reservation's pages to new_base (a reservation of new_size bytes
 * that it replaces), growing it to new_size: the pages travel, nothing is
 * copied or faulted again. False (and nothing changed) when it cannot. */
BRISK_HIDDEN bool _brisk_os_move(void *p, size_t old_size, void *new_base, size_t new_size,
                                  size_t *calls);

/* Ask for transparent huge pages on a range (madvise MADV_HUGEPAGE); a
 * hint the kernel may ignore, so nothing is reported. */
BRISK_HIDDEN void _brisk_os_advise_huge_pages(void *p, size_t size, size_t *calls);

/* The size of a transparent huge page (the PMD size, 2 MiB on x86-64) when
 * the kernel gives them to ranges that ask (THP "always" or "madvise"), 0
 * when it does not ("never", or no THP at all). Read from /sys once. */
BRISK_HIDDEN size_t _brisk_os_huge_page_size(void);

/* Bytes of a page-aligned range that are resident in RAM now (mincore),
 * counted by OS page. Pages never touched are not. */
BRISK_HIDDEN size_t _brisk_os_resident(void *p, size_t size, size_t *calls);

/*
 * The mapping cache (map_cache.c): mappings of destroyed region allocators
 * kept a short while and handed to the next allocator of the same kind
 * that asks for the same size, so that an allocator created and destroyed
 * per task takes no system call, and no page fault for the pages its
 * predecessor touched. Bounded: at most BRISK_OS_CACHE_MAX_ENTRIES
 * mappings and max_bytes of their resident memory (256 MiB by default); a
 * mapping waits at most delay_ms (1 s by default) and goes back to the OS
 * on the first cache call after that (puts, takes, the general allocator's
 * housekeeping and brisk_collect make them), the oldest first when the
 * cache is full. Statistics count what enters and leaves it.
 *
 * A mapping's bytes are what its last owner left there: a taker that needs
 * zeros (the fifo's pages, the pools' and buddies' counters) clears them.
 * Only a taker of the same kind gets it, so each kind knows what it holds.
 * Thread-safe: one try-lock, never waited for (a cache call that finds it
 * taken does without the cache), so it holds no thread up and no fork.
 */
typedef enum brisk_os_cache_kind_e {
  BRISK_OS_CACHE_ARENA,        /* an arena's reservation: header, data committed lazily */
  BRISK_OS_CACHE_STACK,        /* a stack's blocks, frame records and its own page */
  BRISK_OS_CACHE_FIFO,         /* a fifo's pages and control page */
  BRISK_OS_CACHE_POOL,         /* a pool's reservation */
  BRISK_OS_CACHE_BUDDY_META,   /* a buddy's header, counters and index, all zero but the header */
  BRISK_OS_CACHE_BUDDY_REGION, /* a buddy's blocks */
  BRISK_OS_CACHE_HYBRID,       /* a hybrid's mapping: itself, its buckets, its first region */
  BRISK_OS_CACHE_KINDS
} brisk_os_cache_kind_t;

#define BRISK_OS_CACHE_MAX_ENTRIES 32
#define BRISK_OS_CACHE_DEFAULT_BYTES ((size_t)256 << 20)
#define BRISK_OS_CACHE_DEFAULT_DELAY_MS 1000u
/* For put's `resident`: count the resident pages (mincore) instead. */
#define BRISK_OS_CACHE_MEASURE ((size_t)-1)

/*
 * Instead of _brisk_os_release: keep [p, p + size) for a later take of this
 * kind and size. committed: the bytes from p that are read-write (size for
 * a _brisk_os_reserve mapping; a prefix of a _brisk_os_reserve_address_space
 * one, whose rest must be no-access and read as zero when committed).
 * resident: an upper bound of the bytes it holds in RAM, or
 * BRISK_OS_CACHE_MEASURE. Released at once when the cache cannot keep it.
 * The system calls it makes (the measuring, that release, and the release
 * of older mappings it makes room by) are added to *calls: the caller's,
 * as its allocator made them; those of expire and flush are nobody's.
 * Returns false, and does nothing, when the range overlaps a mapping the
 * cache keeps (a region allocator destroyed twice): the caller aborts
 * with its message. Checked under the cache's lock: when the lock is busy
 * the range is released unchecked, as ever.
 */
BRISK_HIDDEN bool _brisk_os_cache_put(brisk_os_cache_kind_t kind, void *p, size_t size,
                                      size_t committed, size_t resident, size_t *calls);
/* A kept mapping of this kind, exactly `size` bytes, whose start is a
 * multiple of `align`; NULL when there is none. *committed and *resident:
 * its read-write prefix and its resident bytes, as put had them. Its only
 * system calls release mappings kept too long (added to *calls). */
BRISK_HIDDEN void *_brisk_os_cache_take(brisk_os_cache_kind_t kind, size_t size, size_t align,
                                        size_t *committed, size_t *resident, size_t *calls);
/* _brisk_os_reserve(size, align, 0, calls) served by the cache when it
 * can: *reused tells whether it was (the bytes are then not zero). */
BRISK_HIDDEN void *_brisk_os_reserve_cached(brisk_os_cache_kind_t kind, size_t size, size_t align,
                                           bool *reused, size_t *calls);
/* _brisk_os_release of such a mapping, through the cache (all of it
 * read-write; its resident bytes measured when it is over 1 MiB); false
 * as _brisk_os_cache_put. */
BRISK_HIDDEN bool _brisk_os_release_cached(brisk_os_cache_kind_t kind, void *p, size_t size,
                                           size_t *calls);
/* Release what has waited longer than the delay: one relaxed load when
 * nothing has (the general allocator's housekeeping calls it). */
BRISK_HIDDEN void _brisk_os_cache_expire(uint64_t now_ms);
/* Release every kept mapping now (brisk_collect(true), malloc_trim). */
BRISK_HIDDEN void _brisk_os_cache_flush(void);

/* What the cache holds now, and its limits (tests). */
typedef struct brisk_os_cache_info_s {
  size_t entries;
  size_t resident;     /* sum of the entries' resident bytes */
  size_t max_bytes;
  size_t max_entries;
  uint64_t delay_ms;
  uint64_t hits, puts, releases; /* takes served, mappings kept, mappings released by the cache */
} brisk_os_cache_info_t;
BRISK_HIDDEN void _brisk_os_cache_info(brisk_os_cache_info_t *out);
/* The cache's counts and gauges for brisk_stats_get (<brisk/stats.h>),
 * read without its lock: a snapshot never waits for it. */
struct brisk_region_cache_stats_s;
BRISK_HIDDEN void _brisk_os_cache_stats(struct brisk_region_cache_stats_s *out);
/* Whether p lies in a mapping the cache keeps (tests). */
BRISK_HIDDEN bool _brisk_os_cache_holds(const void *p);
/* Set the limits (the options BRISK_REGION_CACHE_MB/MS at load, and tests;
 * 0 bytes, entries or milliseconds: keep nothing), flushing what no longer
 * fits. */
BRISK_HIDDEN void _brisk_os_cache_configure(size_t max_bytes, size_t max_entries,
                                            uint64_t delay_ms);

/* System calls by kind, each counted once, for statistics and for tests
 * that check a caller's own count of its OS calls against this one. */
typedef enum brisk_os_call_kind_e {
  BRISK_OS_MAP,       /* mmap */
  BRISK_OS_UNMAP,     /* munmap */
  BRISK_OS_COMMIT,    /* mprotect to read-write */
  BRISK_OS_DECOMMIT,  /* madvise(MADV_DONTNEED), and mprotect back to no access */
  BRISK_OS_REMAP,     /* mremap */
  BRISK_OS_OTHER,     /* prefault, mlock, huge-page advice */
  BRISK_OS_CALL_KINDS
} brisk_os_call_kind_t;

typedef struct brisk_os_counts_s {
  uint64_t calls[BRISK_OS_CALL_KINDS];
  uint64_t bytes[BRISK_OS_CALL_KINDS];
  uint64_t failed_calls;   /* refused by the kernel (not in calls[]) */
  size_t bytes_mapped;     /* address space mapped now */
} brisk_os_counts_t;

BRISK_HIDDEN void _brisk_os_counts(brisk_os_counts_t *out);
/* How many ranges the calling thread has unmapped or decommitted so far: a
 * caller that compares it before and after its own work learns whether that
 * work gave memory back, whatever other threads did meanwhile. */
BRISK_HIDDEN uint64_t _brisk_os_thread_releases(void);

/*
 * Fault injection, a test hook: the OS layer refuses system calls of one
 * kind as the kernel would (errno ENOMEM, counted in failed_calls and in
 * the caller's `calls`). After `skip` more calls of `kind` have gone
 * through, the next `count` are refused; BRISK_OS_FAIL_ALWAYS refuses
 * every one until the kind is disarmed again (count 0). Always compiled
 * in: while nothing is armed it costs each system call one load.
 */
#define BRISK_OS_FAIL_ALWAYS UINT64_MAX
BRISK_HIDDEN void _brisk_os_inject_failures(brisk_os_call_kind_t kind, uint64_t skip,
                                            uint64_t count);
/* Calls refused by injection so far, every kind. */
BRISK_HIDDEN uint64_t _brisk_os_injected_failures(void);

/* A monotonic clock in milliseconds, cheap enough for slow paths (vDSO). */
BRISK_HIDDEN uint64_t _brisk_os_now_ms(void);
/* A test hook: hold the clock at its time now plus advance_ms (returned),
 * and let it go again, after which it runs on from the time it was held at
 * (never backwards: a heap's purge lists are oldest first). So a test of
 * what happens after a delay runs the same however slow the machine is.
 * Always compiled in: while never held it costs each reading one load. */
BRISK_HIDDEN uint64_t _brisk_os_clock_hold(uint64_t advance_ms);
BRISK_HIDDEN void _brisk_os_clock_release(void);

/* The file an open descriptor refers to (its device and inode), to tell
 * later whether the descriptor still does: a program may close every
 * descriptor it did not open itself (a daemon at start) and get the number
 * back for a file of its own, which a line written to, or a close of, the
 * library's descriptor would then corrupt or take away. */
typedef struct brisk_os_file_id_s {
  uint64_t device, inode;
} brisk_os_file_id_t;
/* fd's file in *id; false (and *id zero) when fd is not open. */
BRISK_HIDDEN bool _brisk_os_file_id(int fd, brisk_os_file_id_t *id);
/* Whether fd is open on the file *id names. */
BRISK_HIDDEN bool _brisk_os_file_is(int fd, const brisk_os_file_id_t *id);

/* A descriptor of this process's /proc/self/stat, for
 * _brisk_os_only_thread_left (opened once: a thread that opened it at every
 * look could take a descriptor number the program is about to reuse);
 * -1 when it cannot be opened. A forked child opens its own. */
BRISK_HIDDEN int _brisk_os_open_process_status(void);
/* Whether the calling thread is the only one left running in its process
 * (the main thread may have ended with pthread_exit and be waiting as a
 * zombie for the rest), read from that descriptor without allocating.
 * False when it cannot be read. */
BRISK_HIDDEN bool _brisk_os_only_thread_left(int status_fd);

/* Fill buffer with random bytes from the kernel (getrandom, without
 * blocking); where that fails, with bytes mixed from the clock, the
 * process id and addresses of the randomised layout (AT_RANDOM first).
 * Allocates nothing. */
BRISK_HIDDEN void _brisk_os_random(void *buffer, size_t size);

/* Copy n bytes at src, which may lie in memory that is not mapped or not
 * readable, to dst: true when all could be read, false (dst's bytes then
 * unspecified) when not, or when the kernel refuses the call (a seccomp
 * filter). One system call (process_vm_readv on the process itself), not
 * counted: for misuse messages, which look at what a bad pointer points
 * at without faulting on it. */
BRISK_HIDDEN bool _brisk_os_try_read(void *dst, const void *src, size_t n);

/* Write a message to stderr without allocating: for a message the process
 * dies after (misuse, a broken invariant), whatever descriptor 2 is now. */
BRISK_HIDDEN void _brisk_os_write_error(const char *message);

/* What brisk writes to stderr while the process runs on (warnings, the
 * statistics table at exit) goes there only while descriptor 2 is the file
 * it was when the library loaded: a program that closed its stderr may
 * have the number back for a file of its own, which a line written there
 * would corrupt. _brisk_os_stderr_remember records the file (once, at
 * load; until then descriptor 2 counts as stderr); _brisk_os_stderr_is_ours
 * says whether descriptor 2 still is it (false where it was closed at
 * load); _brisk_os_write_warning writes message only then. None allocates. */
BRISK_HIDDEN void _brisk_os_stderr_remember(void);
BRISK_HIDDEN bool _brisk_os_stderr_is_ours(void);
BRISK_HIDDEN void _brisk_os_write_warning(const char *message);

/* "brisk: CALLER(0xADDRESS): WHY" on stderr, then abort: the one message
 * format of every misuse check. Allocates nothing. */
BRISK_HIDDEN BRISK_NORETURN void _brisk_os_fatal_pointer(const char *caller, const void *p,
                                                         const char *why);

/* Abort the process after a heap-misuse message (never returns). */
BRISK_HIDDEN BRISK_NORETURN void _brisk_os_abort(void);

#endif /* BRISK_OS_H */
