/* One byte written just before a huge block (1 MiB, its own mapping),
 * then the block freed: the byte lands between the block and its mapping's
 * header, in the word both builds keep in front of the block. */
#include "misuse.h"

int main(void) {
  unsigned char *p = misuse_malloc((size_t)1 << 20);
  p[-1] ^= 1;
  free(misuse_named(p));
  misuse_returned("free");
  return misuse_finish1(4096);
}
