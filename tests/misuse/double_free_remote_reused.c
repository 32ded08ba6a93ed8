/* free(p) twice in another thread, p a 70 KiB block (80 KiB class, a 4 MiB
 * page), the only live block of its page, the two frees in two batches of
 * that thread's outbox: the first batch goes to the owner full (63 small
 * blocks freed after p), the second waits in the outbox. The owner takes
 * the first back (its next slow malloc): the page empties and goes back to
 * its segment, and a malloc of 90 KiB (96 KiB class) takes it again. p, at
 * 480 KiB into the page, is a block start of the new class too, not yet
 * carved. Then the freeing thread exits, which posts its second batch, and
 * the owner takes it back in its next drain: into a page of another class,
 * whose lists it would corrupt (p would be handed out twice). The secure
 * build names the second free at once (the block's free tag). */
#include "misuse.h"

#define SMALL_COUNT 63

static void *p;
static void *small[SMALL_COUNT];
static pthread_barrier_t barrier;

static MISUSE_NOINLINE void *free_twice(void *unused) {
  (void)unused;
  free(opaque(p));
  for (int i = 0; i < SMALL_COUNT; i++) free(small[i]); /* the batch is full: posted */
  free(misuse_named(p)); /* into the next batch, posted at this thread's exit */
  misuse_returned("free twice (other thread)");
  pthread_barrier_wait(&barrier); /* the owner drains the first batch... */
  pthread_barrier_wait(&barrier); /* ... and its page went to another class */
  return NULL;
}

int main(void) {
  p = misuse_alone_on_large_page(70 << 10, 0, 480);
  for (int i = 0; i < SMALL_COUNT; i++) small[i] = opaque(malloc(8));
  pthread_barrier_init(&barrier, NULL, 2);
  pthread_t thread;
  if (pthread_create(&thread, NULL, free_twice, NULL) != 0) misuse_fail("pthread_create", NULL);
  pthread_barrier_wait(&barrier);
  free(opaque(malloc(1 << 20))); /* malloc's slow path: the drain of the first batch */
  unsigned char *q = misuse_malloc(90 << 10);
  if (((uintptr_t)q >> MISUSE_LARGE_PAGE_SHIFT) != ((uintptr_t)p >> MISUSE_LARGE_PAGE_SHIFT)) {
    misuse_fail("setup: the page was not taken again", q);
  }
  pthread_barrier_wait(&barrier);
  pthread_join(thread, NULL);
  void *huge = opaque(malloc(1 << 20)); /* the drain of the second batch */
  misuse_returned("malloc (the drain of the other thread's frees)");
  free(huge);
  size_t sizes[] = {70 << 10, 90 << 10};
  return misuse_finish(sizes, 2);
}
