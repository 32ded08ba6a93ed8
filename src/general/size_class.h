/*
 * size_class.h — the mapping between request sizes and size classes.
 *
 *   class 1..8:   8, 16, ..., 64 bytes (8-byte steps)
 *   class 9..112: for each doubling (2^b, 2^(b+1)], b >= 6, eight steps of
 *                 2^(b-3): 72, 80, ..., 128, 144, ..., 256, ..., 512 KiB.
 *
 * Worst waste above 64 B is one step over the lower bound: under 12.5%.
 * Every class that is a multiple of 16 starts its blocks 16-aligned, and a
 * request that is a multiple of 16 always lands in such a class.
 */
#ifndef BRISK_GENERAL_SIZE_CLASS_H
#define BRISK_GENERAL_SIZE_CLASS_H

#include "general/types.h"

/* size <= BRISK_LARGE_MAX; size 0 is served as 1. */
BRISK_INLINE size_t brisk_size_to_class(size_t size) {
  if (size <= 64) return size == 0 ? 1 : (size + 7) >> 3;
  size_t b = brisk_bit_scan_reverse(size - 1); /* size in (2^b, 2^(b+1)] */
  size_t step_index = ((size - 1) >> (b - 3)) & 7;
  return 9 + (b - 6) * 8 + step_index;
}

BRISK_INLINE size_t brisk_class_to_size(size_t class_index) {
  if (class_index <= 8) return class_index * 8;
  size_t b = 6 + (class_index - 9) / 8;
  size_t step_index = (class_index - 9) % 8;
  return ((size_t)1 << b) + ((step_index + 1) << (b - 3));
}

BRISK_INLINE brisk_segment_kind_t brisk_class_to_kind(size_t class_index) {
  if (class_index <= BRISK_CLASS_SMALL_LAST) return BRISK_KIND_SMALL;
  if (class_index <= BRISK_CLASS_MEDIUM_LAST) return BRISK_KIND_MEDIUM;
  return BRISK_KIND_LARGE;
}

#endif /* BRISK_GENERAL_SIZE_CLASS_H */
