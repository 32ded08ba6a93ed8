/*
 * registry.h — every live region allocator, by kind, for brisk_stats_get.
 *
 * Each region allocator embeds a brisk_region_entry_t, registers it when it
 * is created and unregisters it when it is destroyed (a hybrid registers
 * itself only, not the pools and buddies inside it). _brisk_regions_stats
 * sums the stats of the live ones per kind. Creation and destruction take
 * the registry's lock; allocation and free never touch it.
 *
 * The registry is also what tells a live allocator's handle from one
 * destroyed already, or from another kind's: a registered entry holds a
 * mark, its own address mixed with its kind's constant, which
 * unregistration clears. A public destroy unregisters first and aborts
 * when that finds no live entry of its kind: a second destroy of a handle
 * whose memory the mapping cache keeps (its header as destroy left it),
 * or a handle of another kind (whose bytes where this kind keeps its entry
 * are anything but that mark). So that a handle of any kind can be read
 * there, every kind keeps its entry in the first BRISK_REGION_ENTRY_END
 * bytes past its handle: the fifo's control block, 2 KiB before the end
 * of its page, has the fewest mapped bytes after it.
 */
#ifndef BRISK_REGIONS_REGISTRY_H
#define BRISK_REGIONS_REGISTRY_H

#include <brisk/stats.h>
#include "base/base.h"

typedef struct brisk_region_entry_s {
  struct brisk_region_entry_s *next;
  struct brisk_region_entry_s *prev;
  /* While registered: the entry's address xor its kind's constant; 0 once
   * unregistered (and in a fresh, zeroed header). */
  uintptr_t mark;
  brisk_region_kind_t kind;
  /* Fills out for the allocator that embeds this entry. */
  void (*stats)(const struct brisk_region_entry_s *entry, brisk_region_stats_t *out);
} brisk_region_entry_t;

/* Every kind's entry ends within this many bytes of its handle (each
 * allocator asserts it). */
#define BRISK_REGION_ENTRY_END 2048

BRISK_HIDDEN void _brisk_region_register(brisk_region_entry_t *entry, brisk_region_kind_t kind,
                                         void (*stats)(const brisk_region_entry_t *,
                                                       brisk_region_stats_t *));
/* Unlinks a registered entry of this kind and returns true; returns false
 * and changes nothing for any other: an entry never registered (a
 * hybrid's pools and buddies, a fresh zeroed header), one unregistered
 * already, registered as another kind, or bytes that are no entry at all
 * (a handle of another kind read as this one's). Reads only the entry's
 * own words until its mark matches, so any readable memory may be passed. */
BRISK_HIDDEN bool _brisk_region_unregister(brisk_region_entry_t *entry, brisk_region_kind_t kind);

/* out[kind] for every kind: live count, created count, totals of the live. */
BRISK_HIDDEN void _brisk_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]);

#endif /* BRISK_REGIONS_REGISTRY_H */
