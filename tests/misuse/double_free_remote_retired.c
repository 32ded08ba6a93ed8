/* free(p) twice in another thread, p a 400 KiB block (a 4 MiB page), the
 * only live block of its page, in a segment that stays in use. The owner
 * takes both frees back in one drain (its next slow malloc): the first
 * empties the page, which goes back to its segment (4 MiB pages are not
 * kept empty), before the second. The secure build names the second free
 * at once (the block's free tag). */
#include "misuse.h"

int main(void) {
  void *p = misuse_alone_on_large_page(400 << 10, 0, -1);
  misuse_free_twice_in_other_thread(p);
  void *huge = opaque(malloc(1 << 20)); /* malloc's slow path: the drain */
  misuse_returned("malloc (the drain of the other thread's frees)");
  free(huge);
  return misuse_finish1(400 << 10);
}
