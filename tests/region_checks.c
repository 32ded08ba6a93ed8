/* The C side of region_checks.h. */
#include "region_checks.h"

#include "regions/fifo.h"
#include "regions/hybrid.h"
#include "regions/pool_internal.h"
#include "regions/thread_slot.h"

void brisk_test_pool_validate(const brisk_pool_t *pool) { _brisk_pool_validate(pool, NULL, 0); }

void brisk_test_pool_validate_locals(const brisk_pool_t *pool,
                                     const brisk_pool_local_t *const *locals, size_t count) {
  _brisk_pool_validate(pool, locals, count);
}

size_t brisk_test_pool_take_batch(brisk_pool_t *pool, size_t want, void **out) {
  return _brisk_pool_take_batch(pool, want, out);
}

void brisk_test_pool_give_batch(brisk_pool_t *pool, void *const *objects, size_t n) {
  _brisk_pool_give_batch(pool, objects, n, "brisk_pool_free");
}

void brisk_test_fifo_validate(const brisk_fifo_t *fifo) { _brisk_fifo_validate(fifo); }

void brisk_test_hybrid_validate(const brisk_hybrid_t *hybrid) { _brisk_hybrid_validate(hybrid); }

unsigned brisk_test_thread_slots_held(void) { return _brisk_thread_slots_held(); }
unsigned brisk_test_thread_slots_reclaim(void) { return _brisk_thread_slots_reclaim(); }

bool brisk_test_hybrid_add_room(brisk_hybrid_t *hybrid, size_t size, long delta) {
  _Atomic size_t *word = _brisk_hybrid_class_word(hybrid, size);
  if (word == NULL) return false;
  atomic_fetch_add_explicit(word, (size_t)delta, memory_order_relaxed);
  return true;
}

int brisk_test_hybrid_code(brisk_hybrid_t *hybrid, const void *p) {
  _Atomic uint8_t *code = _brisk_hybrid_code(hybrid, p);
  return code == NULL ? -1 : atomic_load_explicit(code, memory_order_relaxed);
}

void brisk_test_hybrid_set_code(brisk_hybrid_t *hybrid, const void *p, unsigned char code) {
  atomic_store_explicit(_brisk_hybrid_code(hybrid, p), code, memory_order_relaxed);
}

void brisk_test_pool_push_behind_api(brisk_pool_t *pool, void *p) {
  uint8_t *object = p;
  uint32_t slot = brisk_thread_slot();
  brisk_pool_slot_t *entry = &pool->slots[slot];
  if (pool->mode == BRISK_POOL_CACHED && slot != BRISK_NO_THREAD_SLOT &&
      entry->mag_count < pool->mag_max) {
    brisk_pool_mag_link_store(object, entry->mag_head);
    entry->mag_head = object;
    entry->mag_count += 1;
    return;
  }
  uint32_t index1 = (uint32_t)brisk_pool_index_of(pool, object) + 1;
  brisk_pool_push_chain(pool, brisk_pool_home_shard(slot), index1, object);
}

void brisk_test_pool_clear_nonempty(brisk_pool_t *pool) {
  atomic_store_explicit(&pool->nonempty, 0, memory_order_seq_cst);
}

BRISK_NO_ASAN BRISK_NOINLINE void brisk_test_poke(void *p, const void *bytes, size_t n) {
  volatile unsigned char *to = p;
  const unsigned char *from = bytes;
  for (size_t i = 0; i < n; i++) to[i] = from[i];
}
