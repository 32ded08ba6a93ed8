/*
 * hybrid.h — internals of the bounded hybrid pool (hybrid.c) that the
 * tests reach; the API itself is in <brisk/hybrid.h>.
 */
#ifndef BRISK_REGIONS_HYBRID_H
#define BRISK_REGIONS_HYBRID_H

#include "base/base.h"

#include <brisk/hybrid.h>

/* hybrid.c: check every thread slot's lists (lengths against their room
 * words, each block in its class's section, handed out there, carrying
 * the key, cached once), the per-slot counts against the sections' own,
 * then every bucket's pool (_brisk_pool_validate) and every region's
 * buddy (brisk_buddy_validate); "brisk: brisk_hybrid_validate(0x...):
 * ..." and abort at the first broken invariant. At a quiet point only: no
 * thread inside brisk_hybrid_alloc or brisk_hybrid_free of this hybrid
 * meanwhile, and every thread's last call ordered before this one (a
 * join). Debug builds check the calling thread's own lists from alloc's
 * slow path every 64th time (the rest needs the quiet point). */
BRISK_HIDDEN void _brisk_hybrid_validate(const brisk_hybrid_t *hybrid);

/* For the validator's tests, which corrupt it: the calling thread's word
 * of the class an align-0 request of `size` bytes takes (its list's room
 * in the low 8 bits, its count of blocks handed out above them), or NULL
 * when there is none (no class for the size, the caches off, no slot, or
 * the thread's entry not in use yet). */
BRISK_HIDDEN _Atomic size_t *_brisk_hybrid_class_word(brisk_hybrid_t *hybrid, size_t size);

/* For the tests: the code table's byte of the granule at p (the class of
 * the block that starts there, freed inline; 0: out of line), or NULL
 * when p lies past the blocks. */
BRISK_HIDDEN _Atomic uint8_t *_brisk_hybrid_code(brisk_hybrid_t *hybrid, const void *p);

#endif /* BRISK_REGIONS_HYBRID_H */
