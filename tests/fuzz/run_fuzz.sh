#!/bin/sh
# run_fuzz.sh FUZZER CORPUS WORKDIR SECONDS — the fuzz test (CTest's
# fuzz_brisk): the harness first runs every input of the corpus kept in the
# repository, then mutates them for SECONDS seconds. It works on a copy of
# the corpus in WORKDIR (libFuzzer adds the inputs it finds to its corpus
# directory, and the repository must stay as it is); a failure leaves its
# input there too, as WORKDIR/artifacts/crash-*. Once the bug is fixed, that
# input belongs in tests/fuzz/corpus.
set -eu
fuzzer=$1 corpus=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$corpus"/* "$work/corpus/"
# -timeout: an input that runs a minute is a hang (a deadlock in brisk).
# -rss_limit_mb: ASan's shadow of the region allocators' poisoning (each new
# region lands at a new address) and its quarantine grow the process, about
# 700 MiB in the first 2 minutes, past libFuzzer's default limit of 2 GiB in
# longer runs.
status=0
"$fuzzer" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" || status=$?
if [ "$status" -ne 0 ]; then
  echo "fuzz_brisk failed; its input is in $work/artifacts/ (run $fuzzer on that file" \
       "to see it again)" >&2
  ls -l "$work/artifacts/" >&2
fi
exit "$status"
