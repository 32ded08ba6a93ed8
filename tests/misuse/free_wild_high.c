/* free() of a wild pointer far above any mapping (a garbage word taken for
 * a pointer): named at once, where the search for a huge mapping that might
 * hold it walked down from the address itself and took minutes. */
#include "misuse.h"

int main(void) {
  free(misuse_named((void *)(uintptr_t)0xdeadbeefdeadbee0ull));
  misuse_returned("free");
  return misuse_finish1(64);
}
