/*
 * An unmodified C program that allocates at every awkward moment of a
 * process's life: in a constructor before main, around dlopen/dlsym (the
 * dynamic linker allocates), in a thread's start routine and in its TLS
 * destructor, and in atexit handlers after main returns. run_preload.sh
 * runs it with and without brisk preloaded and compares the output.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *before_main;
static pthread_key_t key;

static unsigned checksum(const char *s) {
  unsigned h = 5381;
  while (*s) h = h * 33 + (unsigned char)*s++;
  return h;
}

__attribute__((constructor)) static void early(void) {
  before_main = malloc(64);
  strcpy(before_main, "allocated in a constructor before main");
}

static void key_destructor(void *value) {
  char *copy = strdup(value); /* allocates while the thread is exiting */
  free(value);
  free(copy);
}

static void *thread_main(void *arg) {
  char *s = malloc(128);
  snprintf(s, 128, "thread %ld", (long)arg);
  pthread_setspecific(key, s);
  void *scratch[100];
  for (int i = 0; i < 100; i++) scratch[i] = malloc((size_t)(i * 37 + 1));
  for (int i = 0; i < 100; i++) free(scratch[i]);
  return NULL;
}

static void at_exit_late(void) {
  char *s = malloc(4096);
  memset(s, 'x', 4095);
  s[4095] = '\0';
  printf("atexit: %zu bytes, checksum %u\n", strlen(s), checksum(s));
  free(s);
  free(before_main);
}

int main(void) {
  printf("before main: %s\n", before_main);
  atexit(at_exit_late);
  pthread_key_create(&key, key_destructor);

  void *libm = dlopen("libm.so.6", RTLD_NOW);
  double (*cosine)(double) = libm != NULL ? (double (*)(double))dlsym(libm, "cos") : NULL;
  printf("dlsym(cos): %s, cos(0) = %.1f\n", cosine != NULL ? "found" : "missing",
         cosine != NULL ? cosine(0.0) : -1.0);

  pthread_t threads[8];
  for (long i = 0; i < 8; i++) pthread_create(&threads[i], NULL, thread_main, (void *)i);
  for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
  printf("8 threads allocated, exited and ran their destructors\n");
  if (libm != NULL) dlclose(libm);
  return 0;
}
