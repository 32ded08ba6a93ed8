/*
 * dl.c — dlopen and dlsym over libc's, so that every library of the process
 * and every function pointer it looks up reach brisk's malloc.
 *
 * dlopen drops RTLD_DEEPBIND. A library opened with that flag looks its
 * symbols up in its own dependencies before the program's: its malloc and
 * free bind to libc's, while the program, the other libraries and libc
 * itself (strdup, fopen, getline) call brisk's. A block then crosses from
 * one allocator to the other, and glibc's free of a brisk block crashes or
 * corrupts glibc's heap (php opens every extension with the flag: it died
 * at start). Without the flag such a library binds as it does under C
 * libraries that have no RTLD_DEEPBIND (musl).
 *
 * dlsym on a handle answers brisk's function where it would answer libc's
 * own allocation function: a lookup in a library's handle finds that
 * library's definition, whatever the process interposes, so Python's
 * ctypes.CDLL("libc.so.6").free was glibc's free, and freeing what libc's
 * strdup returned with it crashed. Only the names override.c exports are
 * looked at, and only a definition that is the one brisk's replaces (the
 * next after brisk's in the search order) is replaced: a handle of another
 * allocator's library still gives that allocator's functions.
 *
 * glibc's dlopen reads its return address to find the object that called
 * it, whose RUNPATH it searches and whose namespace it loads into, and its
 * dlsym does so for RTLD_DEFAULT and RTLD_NEXT (the scope searched, the
 * object after the caller's). Those calls must be tail calls (a jump leaves
 * the caller's return address in place): this file is built with -O2 in
 * every build type (CMakeLists.txt), ctest preload_dlopen_deepbind finds a
 * library through its program's RUNPATH and preload_dlsym_libc looks up
 * RTLD_NEXT under the preload. A lookup in a handle does not use the
 * caller (glibc reads it only for an auditor, LD_AUDIT), so there dlsym can
 * call libc's and look at the answer.
 *
 * dlvsym, the lookup of a name at a version, answers the same way: on a
 * handle and with RTLD_DEFAULT, brisk's function where libc's definition of
 * that name at that version is the answer (dlvsym(libc, "malloc",
 * "GLIBC_2.2.5") was glibc's malloc); with RTLD_NEXT, libc's answer by a
 * tail call.
 *
 * Every call of dlsym or dlvsym by name, this file's own included, reaches
 * brisk's (the library is linked -Bsymbolic-functions, a preloaded library
 * comes before libc in every lookup, and a definition without a version,
 * as brisk's are, answers a reference of any version). So libc's dlvsym is
 * found as ld.so finds a symbol, in the symbol table of the loaded object
 * that defines it at its version (libc at glibc 2.34, libdl before), and
 * libc's dlvsym then finds libc's dlsym, which finds libc's dlopen.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "os/os.h"
#include "override/glibc_names.h"

#define BRISK_EXPORT __attribute__((visibility("default")))

typedef void *(*dlopen_fn)(const char *file, int mode);
typedef void *(*dlsym_fn)(void *handle, const char *name);
typedef void *(*dlvsym_fn)(void *handle, const char *name, const char *version);

/* libc's functions, found on the first call (a library's constructor may
 * call dlopen before brisk's would run). Racing threads store the same
 * value. */
static _Atomic(dlopen_fn) libc_dlopen;
static _Atomic(dlsym_fn) libc_dlsym;
static _Atomic(dlvsym_fn) libc_dlvsym;

/* ---- libc's dlvsym, read from its dynamic symbol table ---- */

typedef struct symbol_query_s {
  const char *name, *version;
  void *found;
} symbol_query_t;

/* An address in an object's dynamic section: glibc rewrites the entries it
 * uses (the symbol, string, hash and version-index tables) into addresses
 * and leaves the others (DT_VERDEF), and the vDSO's, offsets from the
 * object's base, which is above any offset in it. */
static const void *dynamic_pointer(const struct dl_phdr_info *object, ElfW(Addr) value) {
  return (const void *)(value < object->dlpi_addr ? object->dlpi_addr + value : value);
}

/* The GNU hash of a symbol name (DT_GNU_HASH; ld.so's _dl_new_hash). */
static uint32_t gnu_hash(const char *name) {
  uint32_t hash = 5381;
  for (const unsigned char *c = (const unsigned char *)name; *c != '\0'; c++) hash = hash * 33 + *c;
  return hash;
}

/* dl_iterate_phdr's callback: sets query->found and stops at the first
 * object that defines the function query->name at version query->version.
 * An object without a GNU hash table or version definitions is passed
 * over (every glibc build has both). */
static int find_versioned_function(struct dl_phdr_info *object, size_t size, void *data) {
  (void)size;
  symbol_query_t *query = data;
  const ElfW(Dyn) *dynamic = NULL;
  for (ElfW(Half) i = 0; i < object->dlpi_phnum; i++) {
    if (object->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dynamic = (const ElfW(Dyn) *)(object->dlpi_addr + object->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dynamic == NULL) return 0;
  const ElfW(Sym) *symbols = NULL;
  const char *strings = NULL;
  const uint32_t *hash = NULL;
  const ElfW(Versym) *version_of = NULL;
  const ElfW(Verdef) *definitions = NULL;
  for (const ElfW(Dyn) *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
    const void *pointer = dynamic_pointer(object, entry->d_un.d_ptr);
    switch (entry->d_tag) {
      case DT_SYMTAB: symbols = pointer; break;
      case DT_STRTAB: strings = pointer; break;
      case DT_GNU_HASH: hash = pointer; break;
      case DT_VERSYM: version_of = pointer; break;
      case DT_VERDEF: definitions = pointer; break;
      default: break;
    }
  }
  if (symbols == NULL || strings == NULL || hash == NULL || version_of == NULL ||
      definitions == NULL) {
    return 0;
  }
  /* The index of the version among the object's definitions (not the
   * first, which names the object itself). */
  ElfW(Half) index = 0;
  for (const ElfW(Verdef) *definition = definitions;;
       definition = (const ElfW(Verdef) *)((const char *)definition + definition->vd_next)) {
    const ElfW(Verdaux) *aux =
        (const ElfW(Verdaux) *)((const char *)definition + definition->vd_aux);
    if (!(definition->vd_flags & VER_FLG_BASE) &&
        strcmp(strings + aux->vda_name, query->version) == 0) {
      index = definition->vd_ndx;
      break;
    }
    if (definition->vd_next == 0) return 0;
  }
  /* The name's chain in the hash table: a count of buckets, the first
   * symbol hashed, the Bloom filter's size in words (and its shift), the
   * filter, the buckets, then one hash per symbol from the first hashed,
   * its low bit set on the last of a chain. */
  const uint32_t buckets = hash[0], first = hash[1], bloom_words = hash[2];
  const uint32_t *bucket = hash + 4 + (size_t)bloom_words * (sizeof(ElfW(Addr)) / sizeof(uint32_t));
  const uint32_t *chain = bucket + buckets;
  const uint32_t wanted = gnu_hash(query->name);
  uint32_t i = bucket[wanted % buckets];
  if (i < first) return 0;
  for (;; i++) {
    const uint32_t link = chain[i - first];
    const ElfW(Sym) *symbol = &symbols[i];
    if ((link | 1) == (wanted | 1) && (version_of[i] & 0x7fff) == index &&
        symbol->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(symbol->st_info) == STT_FUNC &&
        strcmp(strings + symbol->st_name, query->name) == 0) {
      query->found = (void *)(object->dlpi_addr + symbol->st_value);
      return 1;
    }
    if (link & 1) return 0;
  }
}

/* libc's dlvsym: its version since glibc 2.34, or the first one (libdl's
 * before 2.34, which had no other). NULL where no loaded object defines
 * it, which no glibc process is. */
static BRISK_NOINLINE dlvsym_fn find_libc_dlvsym(void) {
  dlvsym_fn found = atomic_load_explicit(&libc_dlvsym, memory_order_relaxed);
  if (found != NULL) return found;
  static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5"};
  for (size_t v = 0; v < sizeof versions / sizeof versions[0] && found == NULL; v++) {
    symbol_query_t query = {"dlvsym", versions[v], NULL};
    dl_iterate_phdr(find_versioned_function, &query);
    found = (dlvsym_fn)query.found;
  }
  if (found != NULL) atomic_store_explicit(&libc_dlvsym, found, memory_order_relaxed);
  return found;
}

/* libc's dlvsym, or NULL with one line on stderr: a statically linked
 * program has no dynamic symbol table to find it in, and libbrisk.a's
 * dlopen, dlsym and dlvsym replace glibc's there, so that program can
 * neither load a library nor look one up (and dlerror says nothing). */
static dlvsym_fn reachable_libc_dlvsym(void) {
  dlvsym_fn found = find_libc_dlvsym();
  if (found == NULL) {
    static atomic_bool said;
    if (!atomic_exchange_explicit(&said, true, memory_order_relaxed)) {
      _brisk_os_write_warning(
          "brisk: dlopen, dlsym and dlvsym fail: glibc's cannot be found (a statically linked "
          "program, whose own libbrisk.a replaces them)\n");
    }
  }
  return found;
}

BRISK_EXPORT void *dlopen(const char *file, int mode) {
  dlopen_fn next = atomic_load_explicit(&libc_dlopen, memory_order_relaxed);
  if (next == NULL) {
    next = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    if (next == NULL) return NULL; /* dlerror() says why */
    atomic_store_explicit(&libc_dlopen, next, memory_order_relaxed);
  }
  return next(file, mode & ~RTLD_DEEPBIND);
}

#define OWN(name) {#name, (void (*)(void))name}
static const struct {
  const char *name;
  void (*own)(void);
} own_functions[] = {
    OWN(malloc),         OWN(free),           OWN(calloc),          OWN(realloc),
    OWN(reallocarray),   OWN(malloc_usable_size), OWN(aligned_alloc), OWN(memalign),
    OWN(posix_memalign), OWN(valloc),         OWN(pvalloc),         OWN(cfree),
    OWN(free_sized),     OWN(free_aligned_sized), OWN(mallinfo2),   OWN(malloc_stats),
    OWN(malloc_info),    OWN(malloc_trim),    OWN(mallopt),         OWN(__libc_malloc),
    OWN(__libc_free),    OWN(__libc_calloc),  OWN(__libc_realloc),  OWN(__libc_memalign),
    OWN(__libc_valloc),  OWN(__libc_pvalloc), OWN(__libc_mallinfo), OWN(__libc_mallopt),
    /* The same function as mallinfo, which the header marks deprecated. */
    {"mallinfo", (void (*)(void))__libc_mallinfo},
};
#undef OWN

/* brisk's definition of name, or NULL where brisk defines none. */
static void *own_function(const char *name) {
  for (size_t i = 0; i < sizeof own_functions / sizeof own_functions[0]; i++) {
    if (strcmp(name, own_functions[i].name) == 0) return (void *)own_functions[i].own;
  }
  return NULL;
}

BRISK_EXPORT void *dlsym(void *handle, const char *name) {
  dlsym_fn next = atomic_load_explicit(&libc_dlsym, memory_order_relaxed);
  if (next == NULL) {
    /* Through libc's dlvsym: dlsym is this function, dlvsym brisk's. dlsym
     * moved into libc at glibc 2.34 (a new version); before, libdl's has
     * the first one. */
    dlvsym_fn lookup = reachable_libc_dlvsym();
    if (lookup == NULL) return NULL;
    next = (dlsym_fn)lookup(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (next == NULL) next = (dlsym_fn)lookup(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (next == NULL) return NULL; /* dlerror() says why */
    atomic_store_explicit(&libc_dlsym, next, memory_order_relaxed);
  }
  void *own = handle == RTLD_DEFAULT || handle == RTLD_NEXT ? NULL : own_function(name);
  if (own == NULL) return next(handle, name);
  /* The definition brisk's replaces: the next after brisk's (libc's). Looked
   * up first, so that dlerror() tells of the caller's lookup alone. */
  void *replaced = next(RTLD_NEXT, name);
  void *found = next(handle, name);
  return found != NULL && found == replaced ? own : found;
}

/* glibc's dlvsym takes only a definition of the version asked for, and
 * brisk's have none: unlike dlsym, it passes over brisk's functions with
 * RTLD_DEFAULT too. That lookup searches the global scope first whoever
 * calls (libc is in it), so brisk can look it up itself and answer as it
 * does for a handle. RTLD_NEXT searches from the caller: libc's, by a tail
 * call (from the program under the preload, libc's malloc where dlsym
 * gives brisk's: the README says so). */
BRISK_EXPORT void *dlvsym(void *handle, const char *name, const char *version) {
  dlvsym_fn next = reachable_libc_dlvsym();
  if (next == NULL) return NULL;
  void *own = handle == RTLD_NEXT ? NULL : own_function(name);
  if (own == NULL) return next(handle, name, version);
  /* As in dlsym: libc's definition at that version, looked up first. */
  void *replaced = next(RTLD_NEXT, name, version);
  void *found = next(handle, name, version);
  return found != NULL && found == replaced ? own : found;
}
