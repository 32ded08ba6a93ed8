#!/bin/sh
# usage: run_programs.sh PROGRAM[:GTEST_FILTER]...
#
# Runs each GoogleTest program in turn under the environment this test runs
# in (the BRISK_* options its CTest test sets: tests/CMakeLists.txt, label
# options), each with its filter where one follows a colon; stops at the
# first that fails and shows the end of its output. Prints how many cases
# of each passed, and how many skipped because the options in effect make
# their check meaningless (each skip names the option).
set -u

options=$(env | grep '^BRISK_' | sort | tr '\n' ' ' | sed 's/ $//')
echo "options: ${options:-(defaults)}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for entry in "$@"; do
  program=${entry%%:*}
  filter=*
  case $entry in *:*) filter=${entry#*:} ;; esac
  log=$scratch/$(basename "$program").log
  if ! "$program" "--gtest_filter=$filter" >"$log" 2>&1; then
    echo "FAILED: $program --gtest_filter=$filter under ${options:-the defaults}" >&2
    tail -n 60 "$log" >&2
    exit 1
  fi
  # (The last iteration's counts where GTEST_REPEAT runs the cases again.)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$log" |
    tail -n 1)
  echo "ok: $(basename "$program"): ${passed:-0} passed, ${skipped:-0} skipped"
  grep -A1 ': Skipped$' "$log" | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c |
    sed 's/^ */  skipped: /'
done
