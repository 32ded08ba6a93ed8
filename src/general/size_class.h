/*
 * size_class.h — the mapping between request sizes and size classes.
 *
 *   class 1:       8 bytes (requests of 0..8 B: the only 8-aligned blocks)
 *   class 2..9:    16, 32, 48, ..., 128 bytes (16-byte steps)
 *   class 10..81:  for each doubling (2^b, 2^(b+1)], 7 <= b < 16, eight
 *                  steps of 2^(b-3): 144, 160, ..., 256, 288, ..., 64 KiB.
 *   class 82..93:  above 64 KiB (the large pages), four steps of 2^(b-2):
 *                  80, 96, 112, 128, 160, ..., 512 KiB.
 *
 * Every class from 16 B up is a multiple of 16 and pages start 4 KiB-aligned,
 * so every block of 16 bytes or more is 16-byte aligned: the x86-64 ABI's
 * alignof(max_align_t), which compilers assume of malloc's result (aligned
 * SSE loads and stores). Worst waste is one step over the lower bound:
 * under 12.5% from 128 B to 64 KiB, under 25% above. Each large class has
 * 4 MiB pages of its own, so fewer large classes means fewer pages that a
 * program's few large blocks keep half empty, and fewer that empty and are
 * purged only to be faulted in again. A fresh block's unused tail is
 * address space only (carving writes a block's first bytes; the secure
 * build's malloc also the 8 bytes just before them, its header); once a
 * larger request has written it, or under transparent huge pages, it is
 * memory until its page is purged: `mixed`
 * (1 request in 256 of 64-512 KiB) peaks at about 67 MB instead of 51,
 * tcmalloc's level, with 18 K page faults instead of 45 K.
 */
#ifndef BRISK_GENERAL_SIZE_CLASS_H
#define BRISK_GENERAL_SIZE_CLASS_H

#include "general/types.h"

/* size <= BRISK_LARGE_MAX; size 0 is served as 1. */
BRISK_INLINE size_t brisk_size_to_class(size_t size) {
  if (size <= 128) return size <= 8 ? 1 : ((size + 15) >> 4) + 1;
  size_t b = brisk_bit_scan_reverse(size - 1); /* size in (2^b, 2^(b+1)] */
  if (b >= 16) return BRISK_CLASS_MEDIUM_LAST + 1 + (b - 16) * 4 + (((size - 1) >> (b - 2)) & 3);
  return 10 + (b - 7) * 8 + (((size - 1) >> (b - 3)) & 7);
}

BRISK_INLINE size_t brisk_class_to_size(size_t class_index) {
  if (class_index <= 9) return class_index == 1 ? 8 : (class_index - 1) * 16;
  if (class_index > BRISK_CLASS_MEDIUM_LAST) {
    size_t large_index = class_index - (BRISK_CLASS_MEDIUM_LAST + 1);
    size_t b = 16 + large_index / 4;
    return ((size_t)1 << b) + ((large_index % 4 + 1) << (b - 2));
  }
  size_t b = 7 + (class_index - 10) / 8;
  size_t step_index = (class_index - 10) % 8;
  return ((size_t)1 << b) + ((step_index + 1) << (b - 3));
}

/* brisk_class_to_size as a constant expression, for tables (class 0: 0).
 * The steps are clamped at 0 so that no arm, even one not taken, shifts
 * by a negative count (compilers warn on those). */
#define BRISK_CLASS_MSTEP_(c) ((c) < 10 ? 0 : (c)-10)
#define BRISK_CLASS_LSTEP_(c) ((c) <= BRISK_CLASS_MEDIUM_LAST ? 0 : (c)-BRISK_CLASS_MEDIUM_LAST - 1)
#define BRISK_CLASS_SIZE(c)                                                              \
  ((c) == 0   ? (size_t)0                                                                \
   : (c) == 1 ? (size_t)8                                                                \
   : (c) <= 9 ? (size_t)((c)-1) * 16                                                     \
   : (c) <= BRISK_CLASS_MEDIUM_LAST                                                      \
       ? ((size_t)1 << (7 + BRISK_CLASS_MSTEP_(c) / 8)) +                                \
             ((size_t)(BRISK_CLASS_MSTEP_(c) % 8 + 1) << (4 + BRISK_CLASS_MSTEP_(c) / 8)) \
       : ((size_t)1 << (16 + BRISK_CLASS_LSTEP_(c) / 4)) +                               \
             ((size_t)(BRISK_CLASS_LSTEP_(c) % 4 + 1) << (14 + BRISK_CLASS_LSTEP_(c) / 4)))

/* A class's block size and ceil(2^64 / size) (brisk_block_magic), for a
 * path that has only the class index (free() of another thread's block,
 * free.c): one table load instead of the arithmetic above. */
typedef struct brisk_class_info_s {
  uint64_t magic;
  uint64_t size;
} brisk_class_info_t;
extern BRISK_HIDDEN const brisk_class_info_t _brisk_class_info[BRISK_CLASS_COUNT];

BRISK_INLINE brisk_segment_kind_t brisk_class_to_kind(size_t class_index) {
  if (class_index <= BRISK_CLASS_SMALL_LAST) return BRISK_KIND_SMALL;
  if (class_index <= BRISK_CLASS_MEDIUM_LAST) return BRISK_KIND_MEDIUM;
  return BRISK_KIND_LARGE;
}

#endif /* BRISK_GENERAL_SIZE_CLASS_H */
