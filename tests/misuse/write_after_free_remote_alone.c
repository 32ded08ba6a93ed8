/* A 64-byte block freed by another thread after that thread's brisk exit
 * handler ran (a thread-key destructor of the program's, run after brisk's),
 * so that it has no batch left and posts the block alone to its owner's
 * queue, linked through its first word; it then writes that word. The
 * secure build stores the link encoded and checks it when the owner drains
 * its queue (its next slow malloc). */
#include "misuse.h"

static pthread_key_t key;
static void *block;

static MISUSE_NOINLINE void late_free(void *value) {
  if (value == (void *)1) {
    /* The first round of destructors: brisk's own (its key is older) has not
     * necessarily run yet; come back in the next round. */
    pthread_setspecific(key, (void *)2);
    return;
  }
  free(opaque(block));
  memset(opaque(block), 0x41, 8);
  misuse_returned("write after free (link of a block posted alone)");
}

static MISUSE_NOINLINE void *run_thread(void *unused) {
  (void)unused;
  free(opaque(malloc(100))); /* a heap of its own, so that brisk's exit handler runs */
  pthread_setspecific(key, (void *)1);
  return NULL;
}

int main(void) {
  misuse_neighbours(64, 16); /* brisk's thread key is made by the first malloc */
  block = opaque(malloc(64));
  if (pthread_key_create(&key, late_free) != 0) misuse_fail("pthread_key_create", NULL);
  pthread_t thread;
  if (pthread_create(&thread, NULL, run_thread, NULL) != 0) misuse_fail("pthread_create", NULL);
  pthread_join(thread, NULL);
  return misuse_finish1(64);
}
