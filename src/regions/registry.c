/*
 * registry.c — every live region allocator, by kind (registry.h), so that
 * brisk_stats_get can sum them.
 *
 *   _brisk_region_register     lock; link the entry after its kind's head,
 *                              mark it; live and created counts up; unlock
 *   _brisk_region_unregister   lock; an entry marked live as this kind,
 *                              whose neighbours link to it: unlink, clear
 *                              the mark, live count down (else nothing,
 *                              false: the caller's destroy aborts); unlock
 *   _brisk_regions_stats       lock; each kind's entries' stats summed;
 *                              unlock
 *
 * One mutex, registry_lock, guards everything here: the per-kind lists
 * (circular, around a static head per kind, so an entry unlinks in O(1)),
 * the entries' marks, the live counts and the created counts. Creation
 * and destruction of a region allocator take it once; its allocations and
 * frees never do.
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
 * fork(), so the child never inherits a list halfway through a change.
 * The child unlocks it (its one thread took it in prepare) rather than
 * initialising it again, which ThreadSanitizer would take for a lock still
 * held (heap.c does the same). Allocators the parent's other threads had
 * registered stay registered in the child, as their memory stays mapped.
 */
#include "regions/registry.h"

#include <pthread.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* The heads of the per-kind lists: an empty list is a head linked to itself. */
#define HEAD(k) {.next = &heads[k], .prev = &heads[k], .kind = (brisk_region_kind_t)(k)}
static brisk_region_entry_t heads[BRISK_REGION_KINDS] = {HEAD(0), HEAD(1), HEAD(2),
                                                         HEAD(3), HEAD(4), HEAD(5)};
_Static_assert(BRISK_REGION_KINDS == 6, "one HEAD() per kind of region allocator");
#undef HEAD

static size_t live[BRISK_REGION_KINDS];
static uint64_t created[BRISK_REGION_KINDS];

/* A registered entry's mark: its address xor a constant of its kind (odd
 * multiples of the golden ratio's, all different and none 0), so that
 * neither another kind's entry at the same address, nor a word that
 * points at itself, nor a 0 left by a destroy or a fresh page passes. */
static uintptr_t mark_of(const brisk_region_entry_t *entry, brisk_region_kind_t kind) {
  return (uintptr_t)entry ^ (0x9E3779B97F4A7C15ull * (2 * (uint64_t)kind + 1));
}

void _brisk_region_register(brisk_region_entry_t *entry, brisk_region_kind_t kind,
                            void (*stats)(const brisk_region_entry_t *, brisk_region_stats_t *)) {
  entry->kind = kind;
  entry->stats = stats;
  pthread_mutex_lock(&registry_lock);
  brisk_region_entry_t *head = &heads[kind];
  entry->prev = head;
  entry->next = head->next;
  head->next->prev = entry;
  head->next = entry;
  entry->mark = mark_of(entry, kind);
  live[kind]++;
  created[kind]++;
  pthread_mutex_unlock(&registry_lock);
}

bool _brisk_region_unregister(brisk_region_entry_t *entry, brisk_region_kind_t kind) {
  pthread_mutex_lock(&registry_lock);
  /* Read under the lock: a registration writes the mark and a neighbour's
   * the links. The mark first, so that bytes which are no entry of this
   * kind are never followed as links. */
  bool live_entry = entry->mark == mark_of(entry, kind) && entry->kind == kind &&
                    entry->next != NULL && entry->next->prev == entry &&
                    entry->prev->next == entry;
  if (live_entry) {
    entry->prev->next = entry->next;
    entry->next->prev = entry->prev;
    entry->next = entry->prev = NULL;
    entry->mark = 0;
    live[kind]--;
  }
  pthread_mutex_unlock(&registry_lock);
  return live_entry;
}

void _brisk_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]) {
  pthread_mutex_lock(&registry_lock);
  for (int kind = 0; kind < BRISK_REGION_KINDS; kind++) {
    brisk_region_kind_stats_t *k = &out[kind];
    k->live = live[kind];
    k->created = created[kind];
    k->totals = (brisk_region_stats_t){0};
    for (brisk_region_entry_t *e = heads[kind].next; e != &heads[kind]; e = e->next) {
      brisk_region_stats_t s;
      e->stats(e, &s);
      k->totals.bytes_requested += s.bytes_requested;
      k->totals.bytes_in_use += s.bytes_in_use;
      k->totals.bytes_held += s.bytes_held;
      k->totals.system_requests += s.system_requests;
      k->totals.allocations += s.allocations;
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
