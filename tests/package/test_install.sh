#!/bin/sh
# usage: test_install.sh BUILD SCRATCH LIBDIR VERSION CMAKE CC PKG_CONFIG
#
# Installs the build tree BUILD with `cmake --install --prefix SCRATCH/prefix`
# (LIBDIR: its CMAKE_INSTALL_LIBDIR; VERSION: the project's) and builds the
# consumer (tests/package/consumer) against that prefix as a user would: with
# pkg-config's flags, and as a CMake project with find_package(brisk). Each
# program, linked to libbrisk.so or libbrisk.a, must print OK and load its
# libbrisk from the prefix. SCRATCH is emptied first.
set -u
if [ $# -ne 7 ]; then
  echo "usage: $0 BUILD SCRATCH LIBDIR VERSION CMAKE CC PKG_CONFIG" >&2
  exit 2
fi
build=$1 scratch=$2 libdir=$3 version=$4 cmake=$5 cc=$6 pkg_config=$7
. "$(dirname "$0")/common.sh"

rm -rf "$scratch"
mkdir -p "$scratch"
prefix=$scratch/prefix
lib=$prefix/$libdir
step "cmake --install $build --prefix $prefix" "$cmake" --install "$build" --prefix "$prefix"

(cd "$prefix" && find . ! -type d \( -type l -printf '%p -> %l\n' -o -printf '%p\n' \)) \
  >"$scratch/files"
expect_install "cmake --install" "$scratch/files" .

pkg_config_consumers "$lib/pkgconfig" "$lib"

# CMAKE_PREFIX_PATH comes before the system's places, and the cache says
# which package was found.
consumer_build=$scratch/cmake_consumer
step "configure the find_package(brisk) consumer" "$cmake" -S "$consumer_src" -B "$consumer_build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release
expect_lines "the consumer's CMakeCache.txt" "$consumer_build/CMakeCache.txt" -Fx \
  "brisk_DIR:PATH=$lib/cmake/brisk"
step "build the find_package(brisk) consumer" "$cmake" --build "$consumer_build"
run_consumer "find_package consumer (brisk::brisk)" "$consumer_build/consumer_shared" "$lib"
run_consumer "find_package consumer (brisk::brisk_static)" "$consumer_build/consumer_static" ""
run_consumer "find_package consumer naming no malloc (brisk::brisk_static)" \
  "$consumer_build/consumer_static_no_malloc" ""
run_consumer "find_package consumer (brisk::brisk_secure)" "$consumer_build/consumer_secure" "$lib" \
  libbrisk-secure
echo "installed into $prefix; pkg-config and find_package(brisk) consumers built and ran, shared, static and secure"
