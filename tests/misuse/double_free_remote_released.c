/* free(p) twice in another thread, p a 400 KiB block (a 4 MiB page), the
 * only live block of its page and of its segment, while the heap already
 * keeps an empty segment of that kind. The release build does not see the
 * second free at the time (the page still counts p as live: both frees wait
 * in the freeing thread's outbox); the owner takes both back in one drain
 * (its next slow malloc), where the first empties the page and the segment
 * goes back to the system before the second. The secure build names the
 * second free at once (the block's free tag). */
#include "misuse.h"

int main(void) {
  void *p = misuse_alone_on_large_page(400 << 10, 1, -1);
  misuse_free_twice_in_other_thread(p);
  void *huge = opaque(malloc(1 << 20)); /* malloc's slow path: the drain */
  misuse_returned("malloc (the drain of the other thread's frees)");
  free(huge);
  return misuse_finish1(400 << 10);
}
