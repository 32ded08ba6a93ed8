#!/bin/sh
# ensure-deps.sh GROUP — make sure the Debian packages GROUP needs are present.
#   build: what `make` needs; test: + GoogleTest, python3, valgrind (its
#   client-request header, and memcheck for the region tests'
#   *_valgrind runs), pkg-config, dpkg-dev and file for the package
#   tests, sqlite3 and CPython's regression tests for the real-program
#   tests, and clang with its runtimes (libFuzzer, AddressSanitizer) for the
#   fuzz test; deb: + dpkg-dev (dpkg-shlibdeps) and file;
#   bench: + valgrind, python3, sqlite3, git and time (the real programs, with
#   gcc and g++; time reports their peak RSS),
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
  test) required="$required libgtest-dev python3 python3-matplotlib valgrind pkg-config dpkg-dev file"
        # The fuzz test: clang, and its libFuzzer and sanitizer runtimes.
        required="$required clang libclang-rt-14-dev"
        # Real programs run under brisk: sqlite3, and CPython's own regression
        # tests for the python3 Debian ships (known once python3 is there).
        required="$required sqlite3"
        python_version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
                         2>/dev/null || true)
        [ -n "$python_version" ] && required="$required libpython$python_version-testsuite" ;;
  deb) required="$required dpkg-dev file" ;;
  bench) required="$required python3 valgrind sqlite3 git time"
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
  # python3 was just installed: once more, for what depends on its version.
  if [ "$group" = test ] && [ -z "${python_version:-}" ] && [ -x /usr/bin/python3 ] &&
     [ -z "${BRISK_DEPS_AGAIN:-}" ]; then
    BRISK_DEPS_AGAIN=1 exec sh "$0" "$group"
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
