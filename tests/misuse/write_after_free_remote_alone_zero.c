/* As write_after_free_remote_alone, but two 64-byte blocks are posted alone,
 * the second linked behind the first, and the write puts exactly 0 in the
 * first one's link word: the value that means "not linked yet", which would
 * leave the second block (and every one posted after it) stranded in the
 * queue. The secure build stores "not linked yet" encoded too, so a plain 0
 * is caught when the owner drains its queue. */
#include "misuse.h"

static pthread_key_t key;
static void *first;
static void *second;

static MISUSE_NOINLINE void late_free(void *value) {
  if (value == (void *)1) {
    /* The first round of destructors: brisk's own (its key is older) has not
     * necessarily run yet; come back in the next round. */
    pthread_setspecific(key, (void *)2);
    return;
  }
  free(opaque(first));
  free(opaque(second));
  memset(opaque(first), 0, 8);
  misuse_returned("write of 0 after free (link of a block posted alone)");
}

static MISUSE_NOINLINE void *run_thread(void *unused) {
  (void)unused;
  free(opaque(malloc(100))); /* a heap of its own, so that brisk's exit handler runs */
  pthread_setspecific(key, (void *)1);
  return NULL;
}

int main(void) {
  misuse_neighbours(64, 16); /* brisk's thread key is made by the first malloc */
  first = opaque(malloc(64));
  second = opaque(malloc(64));
  if (pthread_key_create(&key, late_free) != 0) misuse_fail("pthread_key_create", NULL);
  pthread_t thread;
  if (pthread_create(&thread, NULL, run_thread, NULL) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
  return misuse_finish1(64);
}
