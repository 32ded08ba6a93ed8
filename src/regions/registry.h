/*
 * registry.h — every live region allocator, by kind, for brisk_stats_get.
 *
 * Each region allocator embeds a brisk_region_entry_t, registers it when it
 * is created and unregisters it when it is destroyed (a hybrid registers
 * itself only, not the pools and buddies inside it). _brisk_regions_stats
 * sums the stats of the live ones per kind. Creation and destruction take
 * the registry's lock; allocation and free never touch it.
 */
#ifndef BRISK_REGIONS_REGISTRY_H
#define BRISK_REGIONS_REGISTRY_H

#include <brisk/stats.h>
#include "base/base.h"

typedef struct brisk_region_entry_s {
  struct brisk_region_entry_s *next;
  struct brisk_region_entry_s *prev;
  brisk_region_kind_t kind;
  /* Fills out for the allocator that embeds this entry. */
  void (*stats)(const struct brisk_region_entry_s *entry, brisk_region_stats_t *out);
} brisk_region_entry_t;

BRISK_HIDDEN void _brisk_region_register(brisk_region_entry_t *entry, brisk_region_kind_t kind,
                                         void (*stats)(const brisk_region_entry_t *,
                                                       brisk_region_stats_t *));
/* Does nothing for an entry that is not registered: one whose links are
 * NULL, as in an allocator's fresh (zeroed) header that never registered,
 * or after its unregistration. So a destroy may always call it. */
BRISK_HIDDEN void _brisk_region_unregister(brisk_region_entry_t *entry);

/* out[kind] for every kind: live count, created count, totals of the live. */
BRISK_HIDDEN void _brisk_regions_stats(brisk_region_kind_stats_t out[BRISK_REGION_KINDS]);

#endif /* BRISK_REGIONS_REGISTRY_H */
