/*
 * registry.c — every live region allocator, by kind (registry.h), so that
 * brisk_stats_get can sum them, and so that a destroy can tell a live
 * allocator's handle from any other address.
 *
 *   _brisk_region_register     lock; the entry at the head of its bucket's
 *                              chain; live and created counts up; unlock
 *   _brisk_region_unregister   lock; walk the bucket's chain for the
 *                              entry's address: found, and of this kind,
 *                              it is unlinked and the live count goes down
 *                              (else nothing, false: the caller's destroy
 *                              aborts); unlock
 *   _brisk_regions_stats       lock; every live entry's stats summed by
 *                              kind; unlock
 *
 * The live entries: a hash table of BUCKETS chains, each linked through
 * the `chain` word of the live entries whose addresses hash to it. A
 * lookup compares addresses as numbers and reads the words of live
 * entries only (their memory is mapped while they live), never the memory
 * at the address looked up: a destroy of a handle whose memory went back
 * to the system, or to another allocator, learns that it is no live entry
 * without touching it. The chains live in the entries, so registration
 * needs no memory of its own and cannot fail, and the table is a fixed
 * array (32 KiB of BSS, its pages touched where entries hash): with n
 * live allocators a chain holds n / BUCKETS entries on average, walked by
 * create and destroy only.
 *
 * One mutex, registry_lock, guards everything here: the buckets, the
 * entries' chain and kind words, the live counts and the created counts.
 * Creation and destruction of a region allocator take it once; its
 * allocations and frees never do.
 *
 * The stats callbacks run under the lock, so an allocator that unregisters
 * before it gives its memory back (every destroy does, first thing) is
 * never read after it is gone. They read their allocator's counters
 * (relaxed atomics, or a single-threaded allocator's own words) and take
 * no lock and allocate nothing: registry_lock is a leaf. Callers must not
 * hold a lock that a region allocator's creation or destruction might
 * wait for; the registry itself calls nothing that locks.
 *
 * fork: pthread_atfork (from a constructor) holds registry_lock across
 * fork(), so the child never inherits a chain halfway through a change.
 * The child unlocks it (its one thread took it in prepare) rather than
 * initialising it again, which ThreadSanitizer would take for a lock still
 * held (heap.c does the same). Allocators the parent's other threads had
 * registered stay registered in the child, as their memory stays mapped.
 */
#include "regions/registry.h"

#include <pthread.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

#define BUCKET_BITS 12
#define BUCKETS ((size_t)1 << BUCKET_BITS)
static brisk_region_entry_t *buckets[BUCKETS];

static size_t live[BRISK_REGION_KINDS];
static uint64_t created[BRISK_REGION_KINDS];

/* The bucket of an entry's address: the top bits of its product with the
 * golden ratio's odd multiplier, which every bit of the address moves
 * (entries of one kind share their low bits: they lie at one offset into
 * page-aligned handles). */
static brisk_region_entry_t **bucket_of(const brisk_region_entry_t *entry) {
  return &buckets[((uint64_t)(uintptr_t)entry * 0x9E3779B97F4A7C15ull) >> (64 - BUCKET_BITS)];
}

void _brisk_region_register(brisk_region_entry_t *entry, brisk_region_kind_t kind,
                            void (*stats)(const brisk_region_entry_t *, brisk_region_stats_t *)) {
  entry->kind = kind;
  entry->stats = stats;
  pthread_mutex_lock(&registry_lock);
  brisk_region_entry_t **head = bucket_of(entry);
  entry->chain = *head;
  *head = entry;
  live[kind]++;
  created[kind]++;
  pthread_mutex_unlock(&registry_lock);
}

bool _brisk_region_unregister(brisk_region_entry_t *entry, brisk_region_kind_t kind) {
  pthread_mutex_lock(&registry_lock);
  /* Only the live entries of the chain are read: `entry` itself once it
   * is found among them. */
  brisk_region_entry_t **link = bucket_of(entry);
  while (*link != NULL && *link != entry) link = &(*link)->chain;
  bool live_entry = *link != NULL && entry->kind == kind;
  if (live_entry) {
    *link = entry->chain;
    entry->chain = NULL;
    live[kind]--;
  }
  pthread_mutex_unlock(&registry_lock);
  return live_entry;
}

void _brisk_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]) {
  pthread_mutex_lock(&registry_lock);
  for (int kind = 0; kind < BRISK_REGION_KINDS; kind++) {
    out[kind].live = live[kind];
    out[kind].created = created[kind];
    out[kind].totals = (brisk_region_stats_t){0};
  }
  for (size_t b = 0; b < BUCKETS; b++) {
    for (brisk_region_entry_t *e = buckets[b]; e != NULL; e = e->chain) {
      brisk_region_stats_t s;
      e->stats(e, &s);
      brisk_region_stats_t *t = &out[e->kind].totals;
      t->bytes_requested += s.bytes_requested;
      t->bytes_in_use += s.bytes_in_use;
      t->bytes_held += s.bytes_held;
      t->system_requests += s.system_requests;
      t->allocations += s.allocations;
    }
  }
  pthread_mutex_unlock(&registry_lock);
}

/* ---- fork ---- */

static void fork_prepare(void) { pthread_mutex_lock(&registry_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&registry_lock); }
static void fork_child(void) { pthread_mutex_unlock(&registry_lock); }

static void __attribute__((constructor)) registry_init(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}
