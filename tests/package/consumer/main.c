/* A program built against an installed brisk by the package tests
 * (tests/package/test_install.sh, test_deb.sh), with pkg-config's flags or
 * through find_package(brisk). It calls brisk by name and through
 * malloc, which linking brisk makes brisk's: brisk_usable_size aborts on a
 * block brisk did not hand out, so a malloc that is still glibc's fails
 * here. It includes <brisk/pool.h> first, alone, as a program that wants
 * only the pool would (the installed brisk/ headers must stand alone), and
 * goes through a pool's inline local cache. Built with CONSUMER_SECURE, it
 * must have the secure build's malloc, whose usable size is the size asked
 * for (the release build's is the size class's). Prints OK. */
#include <brisk/pool.h>

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
#ifdef CONSUMER_SECURE
  if (usable != 1000) {
    fprintf(stderr, "brisk_usable_size of malloc(1000) is %zu: not the secure build\n", usable);
    return 1;
  }
#endif
  free(plain);

  brisk_pool_t *pool = brisk_pool_create(48, 0, 0);
  if (pool == NULL) {
    fputs("brisk_pool_create(48, 0, 0) returned NULL\n", stderr);
    return 1;
  }
  brisk_pool_local_t local;
  brisk_pool_local_init(&local, pool, 0);
  char *object = brisk_pool_local_alloc(&local);
  if (object == NULL) {
    fputs("brisk_pool_local_alloc returned NULL\n", stderr);
    return 1;
  }
  memset(object, 0x5a, 48);
  brisk_pool_local_free(&local, object);
  brisk_pool_local_flush(&local);
  brisk_pool_destroy(pool);
  puts("OK");
  return 0;
}
