/* A program linked against libbrisk.a that test_override runs with brisk's
 * options in its environment, once plainly and once installed setuid root
 * and started by another user (BriskOverride.SetuidProgramsReadNoOptions).
 * It allocates a little, so that brisk is set up and its options, if it
 * read them, take effect, and prints whether the kernel started it in
 * secure-execution mode (AT_SECURE: what makes secure_getenv answer NULL),
 * so that the test knows whether the setuid bit took effect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

int main(void) {
  char *blocks[64];
  for (int i = 0; i < 64; i++) {
    blocks[i] = malloc((size_t)(i + 1) * 100);
    if (blocks[i] == NULL) return 2;
    memset(blocks[i], i, (size_t)(i + 1) * 100);
  }
  for (int i = 0; i < 64; i++) free(blocks[i]);
  printf("at_secure=%lu\n", getauxval(AT_SECURE));
  return 0;
}
