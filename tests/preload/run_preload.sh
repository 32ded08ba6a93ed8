#!/bin/sh
# usage: run_preload.sh LIBBRISK COMMAND [ARG...]
#
# Runs COMMAND without and then with LIBBRISK preloaded. Passes when both
# succeed and print byte-identical stdout, and libbrisk was really loaded
# into the preloaded run.
set -u

if [ $# -lt 2 ]; then
  echo "usage: $0 LIBBRISK COMMAND [ARG...]" >&2
  exit 2
fi
lib=$1
shift
if [ ! -f "$lib" ]; then
  echo "no such library: $lib" >&2
  exit 2
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

"$@" >"$scratch/plain.out" 2>"$scratch/plain.err"
status=$?
if [ $status -ne 0 ]; then
  echo "without preload, '$*' exited with $status:" >&2
  tail -n 20 "$scratch/plain.err" >&2
  exit 1
fi

# The preloaded shell checks its own mappings before it execs the command,
# which inherits LD_PRELOAD (ld.so only warns when a preload fails to load).
# BRISK_EXPECT_PRELOAD asks programs that can check for themselves to do so.
BRISK_EXPECT_PRELOAD=1 LD_PRELOAD="$lib" sh -c '
  grep -q libbrisk /proc/$$/maps || { echo "libbrisk is not mapped" >&2; exit 97; }
  exec "$@"' sh "$@" >"$scratch/preload.out" 2>"$scratch/preload.err"
status=$?
if [ $status -ne 0 ]; then
  echo "with LD_PRELOAD=$lib, '$*' exited with $status:" >&2
  tail -n 20 "$scratch/preload.err" >&2
  exit 1
fi

if ! cmp -s "$scratch/plain.out" "$scratch/preload.out"; then
  echo "stdout differs with LD_PRELOAD=$lib for '$*':" >&2
  diff "$scratch/plain.out" "$scratch/preload.out" | head -n 20 >&2
  exit 1
fi
echo "same output ($(wc -c <"$scratch/plain.out") bytes) with and without brisk: $*"
