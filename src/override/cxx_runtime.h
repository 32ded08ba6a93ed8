/*
 * cxx_runtime.h — how brisk's C++ operators (new_delete.cc,
 * new_nothrow.cc) are declared, and how they reach libstdc++.
 *
 * The shared libraries are linked as C, so a C program that preloads brisk
 * never loads libstdc++: the libstdc++ functions the operators call are weak
 * references there (BRISK_CXX_RUNTIME_WEAK, set for the shared targets),
 * which the dynamic linker binds in any program that can call operator new.
 * The static archives reference them strongly: a linker extracts no archive
 * member for a weak reference, so a program linked with -static-libstdc++
 * (or -static) would find them null and abort where it should throw
 * std::bad_alloc. Only a program that calls an operator pulls these objects
 * out of libbrisk.a, and such a program links libstdc++.
 *
 * Every operator is defined weak, so a program that replaces some of them
 * and links libbrisk.a gets its own (a strong definition wins over a weak
 * one) and brisk's others, instead of a "multiple definition" error for
 * the object that defines them together. The dynamic linker ignores the
 * difference: under LD_PRELOAD, the first definition in lookup order wins,
 * as always.
 */
#ifndef BRISK_OVERRIDE_CXX_RUNTIME_H
#define BRISK_OVERRIDE_CXX_RUNTIME_H

/* A weak reference the dynamic linker found null stays null: a C program
 * that preloads brisk and later dlopens C++ code (a plugin host, Python's
 * ctypes) loads libstdc++ after it. BRISK_CXX_RUNTIME_FUNCTION(fn, "name")
 * is then the function looked up by its mangled name at the call
 * (_brisk_cxx_late_symbol, new_delete.cc), or null where no libstdc++ is
 * loaded at all. Only failure paths call them. */
#if BRISK_CXX_RUNTIME_WEAK
#define BRISK_CXX_RUNTIME __attribute__((weak))
#define BRISK_CXX_RUNTIME_FUNCTION(fn, name) \
  (&(fn) != nullptr ? &(fn) : reinterpret_cast<decltype(&(fn))>(_brisk_cxx_late_symbol(name)))
extern "C" __attribute__((visibility("hidden"))) void *_brisk_cxx_late_symbol(const char *name);
#else
#define BRISK_CXX_RUNTIME
#define BRISK_CXX_RUNTIME_FUNCTION(fn, name) (&(fn))
#endif

#define BRISK_OPERATOR __attribute__((visibility("default"), weak))

#endif
