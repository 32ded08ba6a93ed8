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
 * destroyed already, or from another kind's: it keeps the addresses of
 * the live entries, so it finds whether an address is one of them, and of
 * which kind, without reading the memory there. A public destroy
 * unregisters first and aborts when that finds no live entry of its kind
 * at the handle's entry: a second destroy (whether the mapping cache
 * keeps the handle's memory as destroy left it or the memory went back to
 * the system), or a handle of another kind.
 */
#ifndef BRISK_REGIONS_REGISTRY_H
#define BRISK_REGIONS_REGISTRY_H

#include <brisk/stats.h>
#include "base/base.h"

typedef struct brisk_region_entry_s {
  /* While registered: the next live entry whose address hashes alike
   * (registry.c), under the registry's lock. */
  struct brisk_region_entry_s *chain;
  brisk_region_kind_t kind;
  /* Fills out for the allocator that embeds this entry. */
  void (*stats)(const struct brisk_region_entry_s *entry, brisk_region_stats_t *out);
} brisk_region_entry_t;

BRISK_HIDDEN void _brisk_region_register(brisk_region_entry_t *entry, brisk_region_kind_t kind,
                                         void (*stats)(const brisk_region_entry_t *,
                                                       brisk_region_stats_t *));
/* Unregisters a live entry of this kind and returns true; returns false
 * and changes nothing for any other address: an entry never registered (a
 * hybrid's pools and buddies, a fresh zeroed header), one unregistered
 * already, one registered as another kind, or an address that is no
 * entry at all (a handle of another kind). Reads no memory at `entry`
 * unless it is a live entry, so the address may be anything: memory
 * unmapped, or given to something else. */
BRISK_HIDDEN bool _brisk_region_unregister(brisk_region_entry_t *entry, brisk_region_kind_t kind);

/* out[kind] for every kind: live count, created count, totals of the live. */
BRISK_HIDDEN void _brisk_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]);

#endif /* BRISK_REGIONS_REGISTRY_H */
