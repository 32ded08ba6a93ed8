# `make deb`: a Debian package of what cmake/install.cmake installs, under
# /usr, built by CPack into build/package/ (`cpack -G DEB` in the build tree).
#
# One package, named `brisk`: it holds the runtime libraries (libbrisk.so.0
# and libbrisk-secure.so.0, what a linked or LD_PRELOADed program loads) and the development files
# (libbrisk.so, libbrisk.a, the headers, brisk.pc, the CMake package) together.
# Debian's name libbrisk-dev would say "headers beside a libbrisk0 runtime
# package", a split this package does not make.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME brisk)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "memory allocator: a drop-in malloc for multi-threaded programs")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"brisk is a C11 memory allocator for Linux: a drop-in malloc, calloc,
realloc, free and C++ operator new/delete built for multi-threaded
programs, plus region allocators (a lock-free arena, a frame stack, a FIFO)
and pools for real-time code, called through <brisk.h>.
.
This package holds libbrisk.so.${PROJECT_VERSION_MAJOR} (link it, or LD_PRELOAD it into
any program), libbrisk.a, the secure build libbrisk-secure.so.${PROJECT_VERSION_MAJOR} and
libbrisk-secure.a (the same API with heap checks: double frees, overflows,
writes after free), the headers (brisk.h and brisk/*.h), the
pkg-config file brisk.pc and the
CMake package (find_package(brisk): brisk::brisk, brisk::brisk_static,
brisk::brisk_secure and brisk::brisk_secure_static).")
set(BRISK_PACKAGE_MAINTAINER "brisk developers <dev@brisk.invalid>" CACHE STRING
  "the Maintainer field of the Debian package")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${BRISK_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # brisk_VERSION_ARCH.deb

find_program(BRISK_DPKG dpkg)
if(BRISK_DPKG)
  execute_process(COMMAND ${BRISK_DPKG} --print-architecture
    OUTPUT_VARIABLE CPACK_DEBIAN_PACKAGE_ARCHITECTURE OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
# Depends: what dpkg-shlibdeps reads off libbrisk.so (libc6 at the version
# the build's glibc needs; CPack runs `file` to find the ELF files), or plain
# libc6 where dpkg-dev is not installed.
find_program(BRISK_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(BRISK_FILE file)
if(BRISK_DPKG_SHLIBDEPS AND BRISK_FILE)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS libc6)
endif()

include(CPack)
