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

#if BRISK_CXX_RUNTIME_WEAK
#define BRISK_CXX_RUNTIME              __attribute__((weak))
#define BRISK_CXX_RUNTIME_PRESENT(fn) (&(fn) != nullptr)
#else
#define BRISK_CXX_RUNTIME
#define BRISK_CXX_RUNTIME_PRESENT(fn) true
#endif

#define BRISK_OPERATOR __attribute__((visibility("default"), weak))

#endif
