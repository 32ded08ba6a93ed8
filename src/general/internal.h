/*
 * internal.h — functions and globals shared between the general allocator's
 * files. Everything here is hidden: _brisk_* never leaves libbrisk.
 */
#ifndef BRISK_GENERAL_INTERNAL_H
#define BRISK_GENERAL_INTERNAL_H

#include "general/size_class.h"
#include "general/types.h"
#include "os/os.h"

/* ---- finding things: every block's segment is its address masked ---- */

BRISK_INLINE brisk_segment_t *brisk_segment_of(uintptr_t address) {
  return (brisk_segment_t *)(address & ~(uintptr_t)BRISK_SEGMENT_MASK);
}

BRISK_INLINE brisk_page_t *brisk_page_of(const brisk_segment_t *segment, uintptr_t address) {
  return (brisk_page_t *)&segment->pages[(address - (uintptr_t)segment) >> segment->page_shift];
}

/* The calling thread's identity as free() compares it with a segment's
 * owner_thread: its thread pointer (the address of its thread control
 * block), one load from %fs. */
BRISK_INLINE uintptr_t brisk_thread_id(void) { return (uintptr_t)__builtin_thread_pointer(); }

/* The index in its segment of the page that holds address. */
BRISK_INLINE size_t brisk_page_index(const brisk_segment_t *segment, uintptr_t address) {
  return (address - (uintptr_t)segment) >> segment->page_shift;
}

/* A page's class and aligned flag as other threads see it (types.h). */
BRISK_INLINE _Atomic(uint8_t) *brisk_page_info(brisk_page_t *page) {
  brisk_segment_t *segment = brisk_segment_of((uintptr_t)page);
  return &segment->page_info[page - segment->pages];
}

/* One byte per possible segment address: 0 where brisk has no segment, else
 * the segment's page shift (types.h). */
extern BRISK_HIDDEN _Atomic(uint8_t) _brisk_segment_map[BRISK_SEGMENT_MAP_SIZE];

/* The page shift of the segment at address's slot; 0 when it is not brisk's. */
BRISK_INLINE size_t brisk_segment_map_shift(uintptr_t address) {
  size_t slot = address >> BRISK_SEGMENT_SHIFT;
  if (slot >= BRISK_SEGMENT_MAP_SIZE) return 0;
  return brisk_load_relaxed(&_brisk_segment_map[slot]);
}

BRISK_INLINE bool brisk_segment_map_contains(uintptr_t address) {
  return brisk_segment_map_shift(address) != 0;
}

BRISK_INLINE size_t brisk_page_size(const brisk_segment_t *segment) {
  return (size_t)1 << segment->page_shift;
}

/* ---- a page's blocks ---- */

/* The first block of a page (of a huge segment: the huge block). It lies
 * less than 2^32 bytes above its segment, so the low 32 bits kept in the
 * page descriptor give it back. */
BRISK_INLINE uint8_t *brisk_page_start(const brisk_page_t *page) {
  uintptr_t segment = (uintptr_t)brisk_segment_of((uintptr_t)page);
  return (uint8_t *)(segment + (uint32_t)(page->start_low - (uint32_t)segment));
}

BRISK_INLINE void brisk_page_set_start(brisk_page_t *page, const uint8_t *start) {
  page->start_low = (uint32_t)(uintptr_t)start;
}

/* The block size of a page serving a size class. */
BRISK_INLINE size_t brisk_page_block_size(const brisk_page_t *page) { return page->block_size; }

/* ceil(2^64 / block_size): offset / block_size is the high half of
 * offset times it for every offset below 2^32 (Lemire, Kaser and Kurz,
 * 2019). A page's block_magic is a little more (brisk_page_block_magic). */
BRISK_INLINE uint64_t brisk_block_magic(size_t block_size) { return UINT64_MAX / block_size + 1; }

/* The index in its page of the block that holds address: offset / d, from
 * the page's block_magic c + k (brisk_page_block_magic): offset * (c + k)
 * exceeds offset * 2^64 / d by offset * e' / d (e' below) < 2^-24 * 2^64
 * for an offset in the page, too little to reach the next multiple. */
BRISK_INLINE size_t brisk_page_block_index(const brisk_page_t *page, uintptr_t address) {
  uint32_t offset = (uint32_t)address - page->start_low;
  return (size_t)(((unsigned __int128)offset * page->block_magic) >> 64);
}

/* Whether address, inside a page that serves a size class, is the start of
 * one of the page's blocks: a multiple of the block size d below its last
 * whole block's end. The page's tail past that end, shorter than a block,
 * holds no block (one there would run into the next page). Lemire, Kaser
 * and Kurz's divisibility test ("Faster remainder by direct computation",
 * 2019), with a magic a little above theirs: with c = ceil(2^64 / d) and
 * e = c * d - 2^64 < d, an offset n = q * d + r times c + k is, modulo
 * 2^64, q * e' + r * (c + k), where e' = e + k * d: q * e' for a multiple
 * of d, and at least 2^64 / d >= 2^45 for any other offset in the page
 * (the sum stays below 2^64: q * e' < 2^41). page_init picks k
 * (brisk_page_block_magic) so that (blocks - 1) * e' < 2^40 <= blocks * e':
 * the product is below 2^40 for the page's block starts only, and not for
 * the tail's first byte. k also keeps the 16 addresses of the secure
 * build's page lead, before the first block (offsets that wrapped to
 * 2^32 - 16 .. 2^32 - 1), failing. One subtraction, one multiplication and
 * one test, no division. */
#define BRISK_BLOCK_START_SHIFT 40
_Static_assert(BRISK_LARGE_PAGE_SHIFT <= 22 && BRISK_LARGE_MAX <= ((size_t)1 << 19),
               "brisk_page_is_block_start's bounds: offsets below 2^22, blocks up to 2^19");
BRISK_INLINE bool brisk_page_is_block_start(const brisk_page_t *page, uintptr_t address) {
  uint32_t offset = (uint32_t)address - page->start_low;
  return ((uint64_t)offset * page->block_magic) >> BRISK_BLOCK_START_SHIFT == 0;
}

/* The block_magic of a page of blocks blocks of block_size bytes after a
 * lead of lead bytes (brisk_page_is_block_start): c + k for the least k
 * with blocks * e' >= 2^40, then the next ones while an address of the
 * lead passes the test (a product that wrapped below 2^40: rare, and each
 * step of k adds the offset, about 2^32, to it). Set when a page takes a class;
 * tests/internal_checks.c checks every offset of every class's page. */
BRISK_INLINE uint64_t brisk_page_block_magic(size_t block_size, size_t blocks, size_t lead) {
  uint64_t magic = brisk_block_magic(block_size);
  uint64_t excess = magic * block_size; /* e: c * d - 2^64, modulo 2^64 */
  uint64_t least = ((((uint64_t)1 << BRISK_BLOCK_START_SHIFT) - 1) / blocks) + 1;
  if (excess < least) magic += (least - excess + block_size - 1) / block_size;
  for (size_t back = 1; back <= lead; back++) {
    if (((uint64_t)(uint32_t)(0u - (uint32_t)back) * magic) >> BRISK_BLOCK_START_SHIFT == 0) {
      magic++;
      back = 0;
    }
  }
  return magic;
}

/* Secure build: the descriptor of a page serving no class (page 0, the
 * segment's header, and every free page) fails brisk_page_is_block_start
 * for every address on the page, so free()'s fast path needs no test of
 * in_use before it reads the block: the offset from one byte before the
 * page (1 .. the page size, at most 2^22) times 2^40, shifted back, is the
 * offset, never 0. page_init sets the page's class's values. */
BRISK_INLINE void brisk_page_set_no_blocks(brisk_page_t *page, uintptr_t page_base) {
  page->start_low = (uint32_t)page_base - 1;
  page->block_magic = (uint64_t)1 << BRISK_BLOCK_START_SHIFT;
}

/* ---- the secure build (BRISK_SECURE, base.h) ----
 *
 * Every block of a size class has a secret word (brisk_block_secret: its
 * address xored with a random key: one instruction, and different for
 * every block).
 * A free block holds, in the secure build:
 *   word 0  the free-list link, encoded with the block's secret and another
 *           random key (brisk_link_encode): the next block's address
 *           multiplied by the odd key K, xored with the secret. Decoding
 *           xors the secret back and multiplies by K's inverse, so a change
 *           of the stored word, even of one bit, changes the decoded
 *           address in every bit above the lowest bit changed, and the
 *           decoded address leaves the block's segment (32 MiB) but for a
 *           chance of 2^-39; a link copied from another free block decodes
 *           with the wrong secret, to such an address too. malloc checks it
 *           when it pops the block (NULL or in the block's segment), and
 *           the block it leads to is checked in turn by the pop that hands
 *           that one out (its free tag);
 *   word 1  its free tag (brisk_free_tag): the secret word. Set by every
 *           free, checked by every pop and cleared, so a free that finds it
 *           set is a double free (any thread, any order), a pop that misses
 *           it a write after free, and no block is handed out twice: the
 *           first pop clears the tag the second would need.
 * A live block is asked for 16 bytes more than the caller's size: 8 bytes
 * of canary right after the requested size, and 8 bytes of header just
 * before the block (in the last 8 bytes of the block before, or of the
 * page's lead for the first block: BRISK_SECURE_PAGE_LEAD), which
 * hold the offset of the requested end from the block start plus 16, xored
 * with the canary; free and realloc check both. Free reads the header next
 * to the block's first bytes and the canary next to its last requested
 * ones, lines the program mostly touched, never the block's own end (for a
 * block of a large class, a page the program may never have touched). The
 * canary comes from the same secret word (brisk_secure_canary: plus 2), so
 * a live block's word 1 (user data, or the canary of a request under 16
 * bytes) never reads as its tag unless the program wrote it there. A free
 * block's words 0 and 1 stay off the next block's header: the secure build
 * has no 16-byte blocks (malloc(0) is served as malloc(1)).
 *
 * The keys are process-wide; a block's address enters every check, so a
 * page's links, tags and canaries are its own (and each block's), with no
 * key in the 64-byte page descriptor. They are there against heap bugs: a
 * word written by mistake passes for a tag or a canary with a chance of
 * 2^-64, for a link 2^-39; a program that reads its freed blocks can learn
 * them. In the release build every helper here is the identity or
 * nothing. */

/* Random, set once before the first page exists (_brisk_secure_init): [0]
 * (odd) is xored into a block's address for the block's secret; [1] seeds
 * the free-list shuffle of fresh pages (page.c); [2] (odd) multiplies a
 * link, [3] is its inverse. In one cache line. */
extern BRISK_HIDDEN uint64_t _brisk_secure_keys[4];
BRISK_HIDDEN void _brisk_secure_init(void);

/* The no-access bytes the secure build puts on a side of a mapping of
 * metadata (a segment, a heap, a chunk of remote-free batches), and the
 * guard that ends a huge block's mapping: one OS page; none in the release
 * build. */
BRISK_INLINE size_t brisk_secure_guard_size(void) { return BRISK_SECURE ? _brisk_os_page_size() : 0; }

/* Bytes the secure build adds to each request of a size class: the canary,
 * and the header of the block after. */
#define BRISK_SECURE_OVERHEAD ((size_t)16)
/* Bytes before the first block of a page of a size class: the first block's
 * header, after 8 bytes that keep blocks 16-byte aligned. 0 in the release
 * build. */
#define BRISK_SECURE_PAGE_LEAD (BRISK_SECURE ? (size_t)16 : (size_t)0)
/* Only in a block of at most this many bytes (the smallest the secure build
 * has) may the canary overlap word 1, the free tag (a request under 16
 * bytes; aligned blocks start further in, api.c): another thread's free
 * checks those whole at once, the others' tags only
 * (brisk_secure_free_remote_block). One cache line at most. */
#define BRISK_SECURE_SMALL_BLOCK ((size_t)32)

typedef uint64_t brisk_word_t __attribute__((may_alias));

/* The block's secret word: its free tag, and the canary and header key
 * plus 2 (brisk_secure_canary). */
BRISK_INLINE uint64_t brisk_block_secret(const void *block) {
  return (uintptr_t)block ^ _brisk_secure_keys[0];
}

BRISK_INLINE uint64_t brisk_free_tag(const void *block) { return brisk_block_secret(block); }

/* The link to next, as stored in a free block whose secret word is secret. */
BRISK_INLINE brisk_block_t *brisk_link_encode_with(uint64_t secret, const brisk_block_t *next) {
  return (brisk_block_t *)(uintptr_t)(((uintptr_t)next * _brisk_secure_keys[2]) ^ secret);
}

/* The address a stored link stands for (brisk_link_encode_with undone). */
BRISK_INLINE brisk_block_t *brisk_link_decode_with(uint64_t secret, const brisk_block_t *stored) {
  return (brisk_block_t *)(uintptr_t)(((uintptr_t)stored ^ secret) * _brisk_secure_keys[3]);
}

/* The link to next as the free block holder stores it. */
BRISK_INLINE brisk_block_t *brisk_link_encode(const void *holder, brisk_block_t *next) {
  if (!BRISK_SECURE) return next;
  return brisk_link_encode_with(brisk_block_secret(holder), next);
}

BRISK_INLINE brisk_block_t *brisk_link_decode(const void *holder, brisk_block_t *stored) {
  if (!BRISK_SECURE) return stored;
  return brisk_link_decode_with(brisk_block_secret(holder), stored);
}

/* Whether a link decoded from holder may be followed: the end of the list,
 * or an address in holder's segment, where reading the block it names
 * (its free tag, when it is popped) cannot fault but in the header page.
 * A stored word written over or copied from another block decodes outside
 * the segment but for a chance of 2^-39 (see above). */
BRISK_INLINE bool brisk_link_is_valid(const void *holder, const brisk_block_t *next) {
  return next == NULL ||
         (((uintptr_t)next ^ (uintptr_t)holder) >> BRISK_SEGMENT_SHIFT) == 0;
}

/* The canary after a block's requested size, and the header's key: the
 * secret plus 2 (one instruction that leaves the secret in its register).
 * Never the tag; and odd, as every secret is (keys[0] is odd and a block's
 * address even), so the first byte (the lowest address) is never 0 and the
 * most common one-byte overflow, a string's terminating NUL, always
 * changes it. */
BRISK_INLINE uint64_t brisk_secure_canary(uint64_t secret) { return secret + 2; }

/* A popped block's checks failed: name it ("write after free"), abort. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_secure_fatal_pop(const brisk_page_t *page,
                                                                   const brisk_block_t *block);

/* The secure build's pop of block, the head of one of page's lists, whose
 * secret word the caller has: the link decoded and checked, the free tag
 * checked and cleared; returns the next free block. */
BRISK_INLINE brisk_block_t *brisk_secure_pop(const brisk_page_t *page, brisk_block_t *block,
                                             uint64_t secret) {
  brisk_word_t *words = (brisk_word_t *)block;
  brisk_block_t *next = brisk_link_decode_with(secret, (const brisk_block_t *)words[0]);
  if (BRISK_UNLIKELY(!brisk_link_is_valid(block, next) || words[1] != secret)) {
    _brisk_secure_fatal_pop(page, block);
  }
  words[1] = 0;
  return next;
}

/* The block malloc pops from page: returns the next free block. The secure
 * build checks the link and the free tag and clears the tag. */
BRISK_INLINE brisk_block_t *brisk_page_pop(brisk_page_t *page, brisk_block_t *block) {
  if (!BRISK_SECURE) return block->next;
  return brisk_secure_pop(page, block, brisk_block_secret(block));
}

/* Secure build: the owner's free of block, checked and its free tag set
 * (secret): it waits alone in page->local_free until the page's next free,
 * which puts it on malloc's list (last in first out, so that blocks are
 * reused while their lines are in cache), so the block just freed is not
 * the next one handed out (unless its page has no other free block, when
 * the slow path takes local_free): free(p), malloc of p's size, free(p)
 * finds p's tag still set, and a use after free cannot count on its block
 * coming back at once. While held, the block's first word (its link to
 * nothing) and its tag both hold its secret. Its link on malloc's list is
 * encoded with the first word rather than the tag: a write to the first
 * word while it was held (a use after free of an object's first field) is
 * not overwritten unseen but left in the link, which the pop that hands the
 * block out then finds wrong; a write to the tag fails the pop's tag test.
 * page->local_free
 * holds one block at most in the secure build: the owner's frees come here
 * (free()'s fast path and _brisk_free_not_local), other threads' go on
 * malloc's list when drained (_brisk_page_free_block: the freeing thread
 * tagged them). */
BRISK_INLINE void brisk_secure_hold(brisk_page_t *page, brisk_block_t *block, uint64_t secret) {
  brisk_block_t *held = page->local_free;
  block->next = brisk_link_encode_with(secret, NULL);
  page->local_free = block;
  if (held != NULL) {
    held->next = brisk_link_encode_with(((const brisk_word_t *)held)[0], page->free);
    page->free = held;
  }
}

/* Push block on a list of page whose head is *head. */
BRISK_INLINE void brisk_page_push(const brisk_page_t *page, brisk_block_t **head,
                                  brisk_block_t *block) {
  (void)page;
  block->next = brisk_link_encode(block, *head);
  *head = block;
}

/* Secure build: a block being freed failed brisk_secure_free_block's test:
 * names what is wrong (freed already, the header overwritten, the canary)
 * and aborts. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_secure_fatal_free(const char *caller,
                                                                    const brisk_page_t *page,
                                                                    const uint8_t *block);
/* Secure build: a block another thread freed failed brisk_secure_check_end
 * when it came back to its page: names what is wrong and aborts. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_secure_fatal_end(const brisk_page_t *page,
                                                                   const uint8_t *block);

/* Secure build: the bytes a live block needs, as its header says (the
 * requested end plus BRISK_SECURE_OVERHEAD; more than its block size when
 * the header was overwritten, or when the block was handed out at an
 * address inside it: brisk_secure_stamp). */
BRISK_INLINE uint64_t brisk_secure_needed(const uint8_t *block, uint64_t canary) {
  return ((const brisk_word_t *)block)[-1] ^ canary;
}

/* Secure build: whether a block's header is in range and the canary it
 * points at intact; tag is the block's secret (brisk_block_secret). */
BRISK_INLINE bool brisk_secure_end_is_intact(const uint8_t *block, size_t block_size,
                                             uint64_t tag) {
  uint64_t expected = brisk_secure_canary(tag);
  uint64_t needed = brisk_secure_needed(block, expected);
  uint64_t canary = tag; /* never the canary: fails when the header is out of range */
  if (BRISK_LIKELY(needed <= block_size)) {
    __builtin_memcpy(&canary, block + needed - BRISK_SECURE_OVERHEAD, sizeof canary);
  }
  return canary == expected;
}

/* Secure build: the header a block's free leaves in place of the one its
 * malloc wrote. It decodes out of range (to the canary itself, which is
 * not a size but with a chance of 2^-45), so a second free, realloc or
 * malloc_usable_size of the block fails the header test even when the
 * program has written over the free tag since (free(p), a write after
 * free into its second word, free(p)); malloc writes a header anew. */
#define BRISK_SECURE_FREED_HEADER ((uint64_t)0)

/* Secure build: the checks of a block start of a size-class page that is
 * being freed (caller: "free", "realloc", ...), then its free tag set and
 * its header cleared: a set tag is a double free, a header out of range
 * or a bad canary an overflow (or, for the header of a freed block, a
 * double free after a write after free); each aborts. The block size comes
 * from the caller (page is read only to name a failure). Returns the
 * block's secret word, for its link. */
BRISK_INLINE uint64_t brisk_secure_free_block(const char *caller, const brisk_page_t *page,
                                              size_t block_size, uint8_t *block) {
  uint64_t tag = brisk_block_secret(block);
  if (BRISK_UNLIKELY(((const brisk_word_t *)block)[1] == tag ||
                     !brisk_secure_end_is_intact(block, block_size, tag))) {
    _brisk_secure_fatal_free(caller, page, block);
  }
  ((brisk_word_t *)block)[1] = tag;
  ((brisk_word_t *)block)[-1] = BRISK_SECURE_FREED_HEADER;
  return tag;
}

/* Secure build: another thread's free of a block start. The free tag is
 * tested and set here, so a double free is caught at once in any thread.
 * The header and canary of a block bigger than BRISK_SECURE_SMALL_BLOCK
 * are checked by the owner when the block comes back to its page
 * (brisk_secure_check_end, heap.c's drain), before it can be handed out
 * again: the canary mostly lies on another line than the tag, one the
 * owner wrote at malloc and mostly still holds; read here, it would move to
 * this thread's cache for every block. A smaller block is checked whole
 * here: its canary may lie under the tag, and it is one line anyway. */
BRISK_INLINE void brisk_secure_free_remote_block(const brisk_page_t *page, size_t block_size,
                                                 uint8_t *block) {
  uint64_t tag;
  if (block_size <= BRISK_SECURE_SMALL_BLOCK) {
    tag = brisk_secure_free_block("free", page, block_size, block);
  } else {
    tag = brisk_block_secret(block);
    if (BRISK_UNLIKELY(((const brisk_word_t *)block)[1] == tag)) {
      _brisk_secure_fatal_free("free", page, block);
    }
    ((brisk_word_t *)block)[1] = tag;
  }
  /* The first word holds the block's link to nothing, as a held block's
   * does (brisk_secure_hold), until the owner takes the block back: its
   * drain checks it (brisk_secure_check_link) before it stores the block's
   * link there, which would otherwise overwrite a write after free unseen.
   * (A block posted alone holds its queue link there instead: heap.c.) */
  ((brisk_word_t *)block)[0] = (uint64_t)(uintptr_t)brisk_link_encode_with(tag, NULL);
}

/* Secure build: a block another thread freed in a batch found its first
 * word changed when it came back to its page: names it and aborts. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_secure_fatal_link(const brisk_page_t *page,
                                                                    const uint8_t *block);

/* Secure build: the owner's check of the first word
 * brisk_secure_free_remote_block left in a block freed in a batch, as the
 * block goes back to its page (the release build: nothing). */
BRISK_INLINE void brisk_secure_check_link(const brisk_page_t *page, const uint8_t *block) {
  if (!BRISK_SECURE) return;
  uint64_t expected = (uint64_t)(uintptr_t)brisk_link_encode(block, NULL);
  if (BRISK_UNLIKELY(((const brisk_word_t *)block)[0] != expected)) _brisk_secure_fatal_link(page, block);
}

/* Secure build: the owner's half of brisk_secure_free_remote_block, as the
 * block goes back to its page: its header and canary checked, its header
 * cleared (brisk_secure_free_block did both for a small block). The release
 * build: nothing. */
BRISK_INLINE void brisk_secure_check_end(const brisk_page_t *page, uint8_t *block) {
  if (!BRISK_SECURE) return;
  size_t block_size = page->block_size;
  if (block_size > BRISK_SECURE_SMALL_BLOCK) {
    if (BRISK_UNLIKELY(!brisk_secure_end_is_intact(block, block_size, brisk_block_secret(block)))) {
      _brisk_secure_fatal_end(page, block);
    }
    ((brisk_word_t *)block)[-1] = BRISK_SECURE_FREED_HEADER;
  }
}

/* Secure build: the checks of brisk_secure_free_block without the tag; the
 * bytes the caller asked for from p (inside block) to the requested end. */
BRISK_HIDDEN size_t _brisk_secure_requested_size(const char *caller, const brisk_page_t *page,
                                                 const uint8_t *block, const uint8_t *p);
/* Secure build: malloc(size) past brisk_secure_malloc_pop's fast path. */
BRISK_HIDDEN void *_brisk_secure_malloc(size_t size, bool zero);
/* Secure build: write the canary and header of a block whose secret word is
 * secret, handed out at p (inside it) for size bytes. The header holds the
 * requested end plus BRISK_SECURE_OVERHEAD in its low half and p's offset
 * in the block in its high half, xored with the canary: free compares it
 * with the block size as it is, so a block handed out at its start (offset
 * 0, every malloc) passes there, and one handed out inside (an aligned
 * allocation, api.c) fails and is checked on the slow path, which accepts
 * only the pointer at that offset (_brisk_secure_free_interior). */
BRISK_INLINE void brisk_secure_stamp(uint8_t *block, uint64_t secret, uint8_t *p, size_t size) {
  uint64_t offset = (uint64_t)(p - block);
  uint64_t end = offset + size;
  uint64_t canary = brisk_secure_canary(secret);
  __builtin_memcpy(block + end, &canary, sizeof canary);
  ((brisk_word_t *)block)[-1] = ((offset << 32) | (end + BRISK_SECURE_OVERHEAD)) ^ canary;
}

/* Secure build: free of p inside block (block_size bytes, a page of aligned
 * blocks), another thread's or the owner's: aborts unless block is live
 * (its free tag), its header and canary intact and p the address it was
 * handed out at; then writes the header as a block handed out at its start
 * has it, for the checks of free's own path (brisk_secure_free_block,
 * brisk_secure_check_end). page is read only to name a failure. */
BRISK_HIDDEN void _brisk_secure_free_interior(const brisk_page_t *page, size_t block_size,
                                              uint8_t *block, const void *p);

/* ---- page queues: a class's pages, the full pages, the purge list ---- */

BRISK_INLINE void brisk_page_queue_push_front(brisk_page_queue_t *queue, brisk_page_t *page) {
  page->prev = NULL;
  page->next = queue->head;
  if (queue->head != NULL) queue->head->prev = page;
  else queue->tail = page;
  queue->head = page;
}

BRISK_INLINE void brisk_page_queue_push_back(brisk_page_queue_t *queue, brisk_page_t *page) {
  page->next = NULL;
  page->prev = queue->tail;
  if (queue->tail != NULL) queue->tail->next = page;
  else queue->head = page;
  queue->tail = page;
}

BRISK_INLINE void brisk_page_queue_remove(brisk_page_queue_t *queue, brisk_page_t *page) {
  if (page->prev != NULL) page->prev->next = page->next;
  else queue->head = page->next;
  if (page->next != NULL) page->next->prev = page->prev;
  else queue->tail = page->prev;
  page->next = page->prev = NULL;
}

/* ---- heap.c: thread heaps, remote frees, thread exit, fork ---- */

/* The calling thread's heap. Starts as &_brisk_heap_empty, whose direct
 * pages are all empty, so malloc's first call falls into the slow path and
 * makes a real heap: the fast path needs no "initialised?" test. */
extern BRISK_HIDDEN BRISK_TLS brisk_heap_t *_brisk_tls_heap;
extern BRISK_HIDDEN brisk_heap_t _brisk_heap_empty;
extern BRISK_HIDDEN brisk_page_t _brisk_page_empty;

/* After an allocation whose malloc path counted `counted` bytes requested
 * (a padded or rounded size: the secure build's canary and header, an
 * aligned request's slack; 0 for a huge block made directly) for a caller
 * that asked for `size`: the calling thread's heap counts size instead.
 * Modulo 2^64, as the folds add (stats.c). Nothing on the empty heap (a
 * thread past its exit handler, whose heap for the call was handed back):
 * that block stays counted as its path counted it. */
BRISK_INLINE void brisk_count_requested(size_t counted, size_t size) {
  brisk_heap_t *heap = _brisk_tls_heap;
  if (!heap->is_empty_heap) heap->bytes_requested_unfolded += (uint64_t)size - counted;
}

/* Give the calling thread a heap (adopting an abandoned one if any; with
 * cold, only one already tidied, for a thread that may never allocate and so
 * never run the housekeeping a warm heap needs). NULL with errno ENOMEM if
 * none can be made. */
BRISK_HIDDEN brisk_heap_t *_brisk_heap_init_thread(bool cold);
/* True once the calling thread's heap was abandoned at its exit: frees from
 * later destructors (glibc's own, after brisk's) must not adopt a heap, and
 * an allocation there takes one for the call alone (_brisk_heap_hand_back). */
extern BRISK_HIDDEN BRISK_TLS bool _brisk_thread_exited;
/* After an allocation by a thread whose exit handler has run: abandon the
 * heap _brisk_heap_init_thread gave it, as the exit handler did the first
 * time. The thread may be in glibc's last round of key destructors, after
 * which no handler runs again: a heap it kept would stay owned by a thread
 * that is gone. */
BRISK_HIDDEN void _brisk_heap_hand_back(brisk_heap_t *heap);
/* Tidy the abandoned heaps nobody adopted in time (heap.c); one load when
 * there are none. Called from slow paths of malloc and of free, so threads
 * that only free keep it going; the caller may hold a drain_lock, so it
 * only tries heaps_lock (and leaves the pass to a later call). */
BRISK_HIDDEN void _brisk_heaps_tidy_stale(uint64_t now_ms);
/* Drain the heap's remote queue and purge its free pages that waited long
 * enough: a thread that only frees does this from free's slow path. */
BRISK_HIDDEN void _brisk_heap_free_only_chores(brisk_heap_t *heap);
/* Register the fork handlers (heap.c), once: when the library is loaded,
 * so that they run last of the prepare handlers and first of the others. */
BRISK_HIDDEN void _brisk_heaps_register_fork_handlers(void);
/* Tidy every abandoned heap not yet tidied (brisk_collect). */
BRISK_HIDDEN void _brisk_heaps_tidy_all(void);
/* Append a node, a batch (tag BRISK_REMOTE_BATCH_TAG) or one block (tag 0),
 * to owner's remote queue: one atomic exchange. */
BRISK_HIDDEN void _brisk_heap_post_remote(brisk_heap_t *owner, brisk_remote_node_t *node,
                                          uintptr_t tag);
/* Post every open batch of the heap's outbox to its owner (free.c). */
BRISK_HIDDEN void _brisk_heap_flush_outbox(brisk_heap_t *heap);
/* Owner side: move every block in the remote queue back to its page;
 * returns how many. */
BRISK_HIDDEN size_t _brisk_heap_drain_remote(brisk_heap_t *heap);
/* Periodic work of the slow path: remote frees, delayed purge, huge cache. */
BRISK_HIDDEN void _brisk_heap_housekeeping(brisk_heap_t *heap);
/* A page or huge block freed into heap (its memory_lock held): a heap an
 * idle-heap pass marked done (housekept_at_ms 0) is looked at again
 * BRISK_PURGE_DELAY_MAX_MS after now_ms (heap.c: purge_idle_heaps). */
BRISK_HIDDEN void _brisk_heap_idle_rearm(brisk_heap_t *heap, uint64_t now_ms);
/* malloc's fast path counted BRISK_ALLOCATIONS_PER_FOLD blocks of one entry
 * of the direct table, or the generic path as many of a class: fold the
 * counts, drain remote frees, do the housekeeping; returns block, which
 * malloc just took. */
BRISK_HIDDEN BRISK_NOINLINE __attribute__((returns_nonnull)) void *_brisk_malloc_heartbeat(
    brisk_heap_t *heap, void *block);
/* brisk_collect for the calling thread's heap: everything housekeeping does,
 * without the delays (the abandoned heaps are _brisk_heaps_tidy_all's). */
BRISK_HIDDEN void _brisk_heap_collect(brisk_heap_t *heap);
/* Out of memory (the system refused a mapping of `needed` bytes): give back
 * everything held and unused that may stand in the way, so that the caller
 * can try once more. brisk_collect(true), and the empty segments kept as
 * spares by the calling heap (heap may be the empty heap) and by every
 * abandoned heap. Nothing when brisk maps less than `needed` in all (a size
 * no system could serve must not cost every heap its cached memory).
 * Returns true when anything was unmapped or purged. Call it with no lock
 * held. */
BRISK_HIDDEN bool _brisk_heap_reclaim(brisk_heap_t *heap, size_t needed);

/* ---- segment.c: segments, the segment map, pages of segments, purging ---- */

/* A free page of kind for blocks of block_size (the page is not set up). */
BRISK_HIDDEN brisk_page_t *_brisk_segment_page_alloc(brisk_heap_t *heap, brisk_segment_kind_t kind,
                                                     size_t block_size);
BRISK_HIDDEN void _brisk_segment_page_free(brisk_heap_t *heap, brisk_page_t *page);
/* The heap changes hands: thread (a brisk_thread_id, or 0 when abandoned)
 * becomes its owner_thread and every one of its segments'. */
BRISK_HIDDEN void _brisk_segments_set_owner_thread(brisk_heap_t *heap, uintptr_t thread);
/* Decommit the free pages due for a base delay of base_ms
 * (BRISK_PURGE_DELAY_MS): those older than it but the newest the heap keeps
 * for reuse, and any older than BRISK_PURGE_DELAY_MAX_MS (segment.c); every
 * free page if 0. */
BRISK_HIDDEN void _brisk_heap_purge(brisk_heap_t *heap, uint64_t now_ms, uint64_t base_ms);
/* Decommit the oldest free pages until at most max_bytes of free pages
 * stay backed. */
BRISK_HIDDEN void _brisk_heap_purge_down_to(brisk_heap_t *heap, size_t max_bytes);
/* Release the heap's empty segments; with keep_spare, all but one spare per
 * kind (purged if the heap is abandoned). */
BRISK_HIDDEN void _brisk_heap_release_empty_segments(brisk_heap_t *heap, bool keep_spare);
/* Free page bytes a heap keeps backed before it decommits at once. */
BRISK_HIDDEN void _brisk_set_purge_max_bytes(size_t bytes);
/* Reserve a segment-aligned mapping and enter it in the segment map with its
 * page shift. With block_align (> BRISK_SEGMENT_SIZE) the address one segment
 * above the base is aligned to it instead: the home of an over-aligned huge
 * block. */
BRISK_HIDDEN brisk_segment_t *_brisk_segment_reserve(size_t mapped_size, size_t block_align,
                                                     size_t page_shift);
BRISK_HIDDEN void _brisk_segment_unmap(brisk_segment_t *segment);
/* Give a huge segment's mapping new_size bytes (a multiple of the page
 * size): trimmed, grown in place, or moved with its pages (no copy) to a new
 * segment-aligned address. Returns the segment's address, NULL if it can't. */
BRISK_HIDDEN brisk_segment_t *_brisk_segment_resize(brisk_segment_t *segment, size_t new_size);

/* ---- page.c: size-class pages, malloc's slow paths ---- */

BRISK_HIDDEN void *_brisk_malloc_generic(size_t size, brisk_heap_t *heap, bool zero);
/* After the free of `freed` made page->used <= 0: the page was full or is
 * empty (or the count shows a double free, named with `freed`). NULL: the
 * block freed heads page->free (free()'s fast path, release build). */
BRISK_HIDDEN void _brisk_page_free_slow(brisk_heap_t *heap, brisk_page_t *page, const void *freed);
/* Return a block to its page on behalf of the page's heap (remote drains;
 * the secure build puts it on malloc's list). */
BRISK_HIDDEN void _brisk_page_free_block(brisk_heap_t *heap, brisk_page_t *page, brisk_block_t *block);
/* Retire every empty page of the heap (pinned heads excepted). */
BRISK_HIDDEN void _brisk_heap_collect_all(brisk_heap_t *heap);
/* Drop the head pins when a heap is tidied; restore them on adoption. */
BRISK_HIDDEN void _brisk_heap_unpin_all(brisk_heap_t *heap);
/* Retire the heads of large classes (a 4 MiB page each) that hold nothing
 * but their pin: a warm abandoned heap keeps its small and medium heads for
 * its adopter, not these (heap.c). */
BRISK_HIDDEN void _brisk_heap_unpin_empty_large(brisk_heap_t *heap);
BRISK_HIDDEN void _brisk_heap_pin_all(brisk_heap_t *heap);
/* Housekeeping: retire head pages that hold nothing but their pin, so an
 * idle class gives its page back (through the purge list). */
BRISK_HIDDEN void _brisk_heap_retire_empty_heads(brisk_heap_t *heap);
/* Housekeeping (all false): retire the kept empty pages found empty at the
 * last pass too, drop from the kept set those in use again. Thread exit
 * (all true, the heap `abandoned`; housekeeping no longer runs): retire
 * every page still empty, drop the rest, so the set ends empty. */
BRISK_HIDDEN void _brisk_heap_retire_kept_empty(brisk_heap_t *heap, bool all);

/* ---- huge.c: blocks above BRISK_LARGE_MAX, each in its own mapping ---- */

BRISK_HIDDEN void *_brisk_huge_alloc(brisk_heap_t *heap, size_t size, size_t align, bool zero);
BRISK_HIDDEN void _brisk_huge_free(brisk_heap_t *heap, brisk_segment_t *segment);
/* Resize a huge block without copying its bytes: the new address (which may
 * differ), or NULL when the caller must allocate and copy. */
BRISK_HIDDEN void *_brisk_huge_realloc(brisk_segment_t *segment, void *p, size_t new_size);
BRISK_HIDDEN void _brisk_huge_cache_trim(brisk_heap_t *heap, uint64_t now_ms, uint64_t max_age_ms);
BRISK_HIDDEN void _brisk_huge_cache_trim_to(brisk_heap_t *heap, size_t max_bytes);
BRISK_HIDDEN uint8_t *_brisk_huge_block(const brisk_segment_t *segment);
/* The huge block of segment, which the segment map marks huge, after checks
 * that its header still describes it (the word in front of the block, the
 * kind and the block's place): "heap corruption: a huge block's header was
 * overwritten", naming p, and abort otherwise. */
BRISK_HIDDEN uint8_t *_brisk_huge_checked_block(const char *caller, const void *p,
                                                const brisk_segment_t *segment);
/* Whether the segment map marks the segment holding address huge: the map,
 * not the segment's header, which a write before a huge block can reach. */
BRISK_INLINE bool brisk_segment_map_huge(uintptr_t address) {
  return brisk_segment_map_shift(address) == BRISK_HUGE_PAGE_SHIFT;
}
/* Whether p is one of the last huge blocks freed whose mapping went back to
 * the system (for the message of an abort: a double free). */
BRISK_HIDDEN bool _brisk_huge_was_unmapped(const void *p);
/* The secure build: a huge block's requested size, after checking the
 * canary that follows it ("heap overflow past the requested size", abort). */
BRISK_HIDDEN size_t _brisk_huge_requested_size(const char *caller, const brisk_segment_t *segment);
/* The end of what a huge block may use: its mapping's end, less the secure
 * build's guard page. */
BRISK_HIDDEN uint8_t *_brisk_huge_end(const brisk_segment_t *segment);

/* ---- free.c: free's paths past the fast one, and pointer checks ---- */

/* NULL, a segment-aligned huge block, or a pointer brisk never handed out. */
BRISK_HIDDEN void _brisk_free_generic(void *p);
/* free() of a pointer into a segment brisk owns (for a segment-aligned huge
 * block, its header's) that belongs to another heap or is huge, and the
 * checked free of any pointer into a segment: the misuse checks, an aligned
 * block found from an interior pointer. Reads the segment's page info, not
 * the page descriptor, for another heap's block. */
BRISK_HIDDEN void _brisk_free_not_local(void *p, brisk_segment_t *segment);
/* free()'s fast path pushed a pointer that is not the start of a block on
 * page's free list (owned by the calling thread): takes it back off
 * and frees it the checked way (an aligned block's start, else abort). */
BRISK_HIDDEN BRISK_COLD void _brisk_free_local_not_block_start(brisk_segment_t *segment,
                                                               brisk_page_t *page);
/* The release build's evidence of a freed block, as free's slow path reads
 * it (page.c): page, if the calling thread owns it, counts no block handed
 * out (the pinned head's phantom count is no block), so no pointer into it
 * is live. For the calls that keep or read a block rather than free it
 * (realloc, malloc_usable_size, free_sized's size check), which would
 * otherwise hand a freed one out a second time; another heap's count is its
 * owner's to read. */
BRISK_INLINE bool brisk_page_counts_no_live_block(const brisk_segment_t *segment,
                                                  const brisk_page_t *page) {
  if (brisk_load_relaxed(&segment->owner_thread) != brisk_thread_id()) return false;
  uint32_t counted = page->used & ~BRISK_PAGE_FULL_FLAG;
  if (BRISK_LIKELY(counted > 1)) return false;
  return counted == 0 || segment->heap->pinned[page->class_index] == page;
}
/* p lies on a page of its segment that serves no class (header_page: the
 * header's, page 0): "brisk: caller(p): invalid pointer: not allocated by
 * brisk" on the header's page, "... not the start of a block" where no
 * block could ever have started (not 8-aligned), else `freed` (a block freed
 * again after its page went back, or a wild pointer); then abort. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_fatal_no_block_page(const char *caller,
                                                                      const void *p,
                                                                      bool header_page,
                                                                      const char *freed);
/* "brisk: caller(p): invalid pointer: block is already free (double free?),
 * size class N (S-byte blocks)", then abort. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_fatal_freed_block(const char *caller,
                                                                    const void *p,
                                                                    const brisk_page_t *page);
/* "brisk: caller(p): invalid pointer: not the start of a block, size class
 * N (S-byte blocks)", then abort. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_fatal_not_block_start(const char *caller,
                                                                        const void *p,
                                                                        const brisk_page_t *page);
/* "brisk: caller(p): why, size class N (S-byte blocks)", then abort. */
BRISK_HIDDEN BRISK_NORETURN BRISK_COLD void _brisk_fatal_block(const char *caller, const void *p,
                                                              const brisk_page_t *page,
                                                              const char *why);
/* Find a pointer's segment; aborts with a message if p is not one of brisk's
 * live blocks. Used by free's slow path, usable_size and realloc. */
BRISK_HIDDEN brisk_segment_t *_brisk_checked_segment(const void *p, const char *caller);
/* Start of the block that contains p (p may be an interior aligned pointer). */
BRISK_HIDDEN uint8_t *_brisk_page_block_start(const brisk_page_t *page, const void *p);
/* Usable bytes from p to the end of its block (p in a segment that
 * _brisk_checked_segment accepted); aborts for a pointer inside a block that
 * was not handed out as such. */
BRISK_HIDDEN size_t _brisk_block_usable_size(const brisk_segment_t *segment, const void *p,
                                             const char *caller);

/* "brisk: caller(0x...): invalid pointer: why", then abort. */
#define brisk_fatal_pointer(caller, p, why) \
  _brisk_os_fatal_pointer((caller), (p), "invalid pointer: " why)

/* ---- stats.c: statistics ---- */

/* Process-wide counts and gauges that change on slow paths only (segments,
 * pages, huge blocks, heaps): relaxed atomic adds, a few per page or
 * mapping, next to work that costs far more. */
typedef enum brisk_global_stat_e {
  BRISK_STAT_PAGES_IN_USE,          /* pages serving a size class */
  BRISK_STAT_PAGE_BYTES_IN_USE,
  BRISK_STAT_FREE_PAGES_COMMITTED,  /* on a purge list, still backed */
  BRISK_STAT_FREE_PAGE_BYTES_COMMITTED,
  BRISK_STAT_SEGMENTS,              /* paged segments held */
  BRISK_STAT_SEGMENT_BYTES,
  BRISK_STAT_BYTES_PURGED,
  BRISK_STAT_BYTES_REFAULTED,       /* faulted in again soon after a purge by delay */
  BRISK_STAT_BYTES_REUSED_LATE,     /* free pages taken back after the base delay */
  BRISK_STAT_HUGE_BLOCKS,           /* live huge blocks */
  BRISK_STAT_HUGE_BYTES,            /* their mappings' bytes */
  BRISK_STAT_HUGE_ALLOCATIONS,
  BRISK_STAT_HUGE_FREES,
  BRISK_STAT_HUGE_CACHED_BYTES,
  BRISK_STAT_HEAPS_CREATED,
  BRISK_STAT_HEAPS_ABANDONED,
  BRISK_STAT_HEAPS_ADOPTED,
  BRISK_STAT_IN_USE_BYTES,          /* live block bytes, as published by heaps */
  BRISK_STAT_IN_USE_PEAK,
  BRISK_STAT_COUNT
} brisk_global_stat_t;

extern BRISK_HIDDEN _Atomic(int64_t) _brisk_global_stats[BRISK_STAT_COUNT];
/* Pages serving each class now. */
extern BRISK_HIDDEN _Atomic(int64_t) _brisk_class_pages[BRISK_CLASS_COUNT];

BRISK_INLINE void brisk_global_stat_add(brisk_global_stat_t which, int64_t n) {
  atomic_fetch_add_explicit(&_brisk_global_stats[which], n, memory_order_relaxed);
}

/* Tell the heap how its page's live blocks changed since the page last did,
 * for the process's bytes in use and their peak (owner or drain_lock
 * holder; the page is in use). */
BRISK_HIDDEN void _brisk_page_fold_stats(brisk_heap_t *heap, brisk_page_t *page);
/* Fold the counts malloc's paths keep in plain fields (every 4096 slow
 * mallocs, before a 32-bit count can wrap: see types.h). */
BRISK_HIDDEN void _brisk_heap_fold_counts(brisk_heap_t *heap);
/* Fold every page of the heap, and the plain counts. */
BRISK_HIDDEN void _brisk_heap_fold_stats(brisk_heap_t *heap);
/* segment.c: the blocks a page in use holds, its queue's pin left out (any
 * thread: another's read is a few operations old). */
BRISK_HIDDEN uint32_t _brisk_page_live_blocks(const brisk_heap_t *heap, const brisk_page_t *page);
/* segment.c: add the blocks live on each page of the heap to live[class]
 * (any thread; takes the heap's memory_lock, waiting at most about 100 ms:
 * false, and nothing added, when it could not be had). */
BRISK_HIDDEN bool _brisk_heap_count_live_blocks(brisk_heap_t *heap, uint64_t live[BRISK_CLASS_COUNT]);
/* Change the heap's live bytes; published to the process total (and peak)
 * in steps of BRISK_STATS_PUBLISH_BYTES. */
BRISK_HIDDEN void _brisk_heap_stats_in_use(brisk_heap_t *heap, int64_t bytes);
/* Huge blocks, counted process-wide (their threads may have no heap). */
BRISK_HIDDEN void _brisk_stats_huge_in_use(int64_t blocks, int64_t bytes);
/* Start the interval writer and the at-exit report the options ask for. */
BRISK_HIDDEN void _brisk_stats_start(void);

/* heap.c: the heap's memory_lock (types.h); never held across another
 * heap's. */
BRISK_HIDDEN void _brisk_heap_lock_memory(brisk_heap_t *heap);
BRISK_HIDDEN void _brisk_heap_unlock_memory(brisk_heap_t *heap);
/* The memory lock, waiting at most about patience_ms for it: false when its
 * holder does not let go (a thread stopped inside a page change: by a
 * debugger, or by a signal handler that went on to call exit()). */
BRISK_HIDDEN bool _brisk_heap_try_lock_memory(brisk_heap_t *heap, uint64_t patience_ms);
/* validate.c: check every structure of the heap against the others; one
 * "brisk: heap check: ..." line and abort at the first disagreement (the
 * heap's owner, or the holder of an abandoned heap's drain_lock). */
BRISK_HIDDEN void _brisk_heap_validate(brisk_heap_t *heap);
/* heap.c: _brisk_heap_validate on every heap no thread owns. */
BRISK_HIDDEN void _brisk_heaps_validate_idle(void);
/* heap.c: call fn for every heap made before the call (without heaps_lock
 * held: fn may wait). */
BRISK_HIDDEN void _brisk_heaps_for_each(void (*fn)(brisk_heap_t *heap, void *context),
                                        void *context);
/* heap.c: decommit the free pages and release the huge caches of every heap
 * but `self`, live threads' heaps included (brisk_collect(true)). */
BRISK_HIDDEN void _brisk_heaps_trim_others(brisk_heap_t *self);

/* ---- api.c ---- */

BRISK_HIDDEN void *_brisk_malloc_aligned(size_t size, size_t alignment, bool zero);

#endif /* BRISK_GENERAL_INTERNAL_H */
