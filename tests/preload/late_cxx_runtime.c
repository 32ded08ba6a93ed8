/* A C program that loads C++ code after start (a plugin host, Python's
 * ctypes): libstdc++ arrives with the library it opens, after brisk was
 * loaded, and outside the global scope (RTLD_LOCAL). operator new's failure
 * must still throw std::bad_alloc, call the new-handler, and let the
 * nothrow forms return nullptr (brisk's weak references to libstdc++ were
 * null; it aborted). Prints the same lines with or without brisk
 * (run_preload.sh compares them); exits 1 where a case failed. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  /* The case this program is for: no C++ runtime loaded before the plugin. */
  if (dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD) != NULL) {
    printf("libstdc++ is loaded before the plugin: not the case under test\n");
    return 1;
  }
  void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == NULL) {
    printf("dlopen: %s\n", dlerror());
    return 1;
  }
  int (*run)(void) = (int (*)(void))dlsym(plugin, "late_cxx_run");
  if (run == NULL) {
    printf("dlsym: %s\n", dlerror());
    return 1;
  }
  return run() == 0 ? 0 : 1;
}
