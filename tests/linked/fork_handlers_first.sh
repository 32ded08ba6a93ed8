#!/bin/sh
# usage: fork_handlers_first.sh PROGRAM
# Runs PROGRAM (fork_handlers_first.c) with BRISK_VERBOSE=1, so that
# brisk's constructor prints its options: the library's constructor must
# have run before it (the case under test), and the program must pass.
out=$(BRISK_VERBOSE=1 "$1" 2>&1)
status=$?
printf '%s\n' "$out" | tail -3
case $(printf '%s\n' "$out" | head -1) in
  "fork_handlers_lib: constructor") ;;
  *) echo "FAIL: the library's constructor did not run before brisk's"; exit 1 ;;
esac
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status"; exit 1; }
