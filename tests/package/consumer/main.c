/* A program built against an installed brisk by the package tests
 * (tests/package/test_install.sh, test_deb.sh), with pkg-config's flags or
 * through find_package(brisk). It calls brisk by name and through
 * malloc, which linking brisk makes brisk's: brisk_usable_size aborts on a
 * block brisk did not hand out, so a malloc that is still glibc's fails
 * here. Prints OK. */
#include <brisk.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *named = brisk_malloc(100);
  if (named == NULL) {
    fputs("brisk_malloc(100) returned NULL\n", stderr);
    return 1;
  }
  memset(named, 0x5a, 100);
  brisk_free(named);

  char *plain = malloc(1000);
  if (plain == NULL) {
    fputs("malloc(1000) returned NULL\n", stderr);
    return 1;
  }
  memset(plain, 0x5a, 1000);
  size_t usable = brisk_usable_size(plain);
  if (usable < 1000) {
    fprintf(stderr, "brisk_usable_size of malloc(1000) is %zu\n", usable);
    return 1;
  }
  free(plain);
  puts("OK");
  return 0;
}
