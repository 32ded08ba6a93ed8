/* Linked to libbrisk.a, a program that calls no allocation function by
 * name: libc's own calls (strdup's malloc) must reach brisk's malloc all
 * the same. The archive's malloc is pulled in by the link flags brisk
 * gives (-u malloc), not by a reference of the program's; without them the
 * program ran on glibc's malloc. brisk_usable_size aborts on a block brisk
 * did not hand out. Never frees: free would be a reference of its own.
 * Prints OK. */
#include <brisk.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  char *copy = strdup("brisk");
  if (copy == NULL) {
    fputs("strdup returned NULL\n", stderr);
    return 1;
  }
  if (brisk_usable_size(copy) < 6) {
    fputs("brisk_usable_size of strdup's block is too small\n", stderr);
    return 1;
  }
  puts("OK");
  return 0;
}
