#!/bin/sh
# ensure-deps.sh GROUP — make sure the Debian packages GROUP needs are present.
#   build: what `make` needs; test: + GoogleTest, python3, valgrind (its
#   client-request header), pkg-config, dpkg-dev and file for the
#   package tests, and clang with its runtimes (libFuzzer, AddressSanitizer)
#   for the fuzz test; deb: + dpkg-dev (dpkg-shlibdeps) and file;
#   bench: + valgrind,
#   matplotlib and the peer allocators (those are optional: missing peers are
#   skipped by the benchmark, with a note).
# As root it installs what is missing with apt-get; otherwise it prints the
# exact command to run and fails (for required packages).
set -eu
group=${1:-build}

required="cmake make gcc g++"
optional=""
case "$group" in
  build) ;;
  test) required="$required libgtest-dev python3 python3-matplotlib valgrind pkg-config dpkg-dev file
                  clang libclang-rt-14-dev" ;;
  deb) required="$required dpkg-dev file" ;;
  bench) required="$required python3 valgrind"
         optional="python3-matplotlib libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 libtbbmalloc2" ;;
  *) echo "ensure-deps.sh: unknown group '$group'" >&2; exit 2 ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing_required=""
for p in $required; do installed "$p" || missing_required="$missing_required $p"; done
missing_optional=""
for p in $optional; do installed "$p" || missing_optional="$missing_optional $p"; done
missing="$missing_required$missing_optional"
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-deps: installing$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q $missing >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    if ! apt-get install -y -q $missing >/dev/null; then
      # A peer allocator may be missing from this release: retry required only.
      [ -n "$missing_required" ] && apt-get install -y -q $missing_required >/dev/null
    fi
  fi
  exit 0
fi

if [ -n "$missing_required" ]; then
  echo "brisk needs these Debian packages:$missing_required" >&2
  echo "run:  sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "note: optional packages missing (the benchmark skips them):$missing_optional" >&2
echo "      to add them: sudo apt-get install -y$missing_optional" >&2
