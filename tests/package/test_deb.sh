#!/bin/sh
# usage: test_deb.sh BUILD SCRATCH LIBDIR VERSION CPACK CC PKG_CONFIG
#
# Builds the Debian package of the build tree BUILD with CPack into
# SCRATCH/package, checks its control fields and contents (LIBDIR: the
# build's CMAKE_INSTALL_LIBDIR; VERSION: the project's), unpacks it with
# `dpkg -x` into SCRATCH/root and builds the consumer (tests/package/consumer)
# against that root with pkg-config's flags, its prefix redirected to
# SCRATCH/root/usr. SCRATCH is emptied first.
set -u
if [ $# -ne 7 ]; then
  echo "usage: $0 BUILD SCRATCH LIBDIR VERSION CPACK CC PKG_CONFIG" >&2
  exit 2
fi
build=$1 scratch=$2 libdir=$3 version=$4 cpack=$5 cc=$6 pkg_config=$7
. "$(dirname "$0")/common.sh"

rm -rf "$scratch"
mkdir -p "$scratch"
step "cpack -G DEB" "$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$scratch/package"
set -- "$scratch"/package/*.deb
[ $# -eq 1 ] && [ -f "$1" ] || fail "cpack made no single .deb in $scratch/package: $*"
deb=$1

step "dpkg -I $deb" dpkg -I "$deb"
cp "$scratch/step.log" "$scratch/info"
expect_lines "dpkg -I" "$scratch/info" -E \
  "^ Package: brisk\$" \
  "^ Version: $version\$" \
  "^ Architecture: $(dpkg --print-architecture)\$" \
  "^ Depends: (.*, )?libc6( |,|\$)" \
  "^ Maintainer: .+" \
  "^ Description: .+"

step "dpkg -c $deb" dpkg -c "$deb"
# Only the paths (and link targets): the rest is mode, owner, size and date.
awk '{ $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print }' "$scratch/step.log" \
  >"$scratch/contents"
expect_install "dpkg -c" "$scratch/contents" ./usr

root=$scratch/root
step "dpkg -x $deb $root" dpkg -x "$deb" "$root"
pkg_config_consumers "$root/usr/$libdir/pkgconfig" "$root/usr/$libdir" \
  --define-variable=prefix="$root/usr"
echo "$(basename "$deb"): fields and files as expected; pkg-config consumers built against its contents ran"
