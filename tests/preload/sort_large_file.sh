#!/bin/sh
# usage: sort_large_file.sh LIBBRISK PYTHON
#
# Makes ~20 MB of pseudo-random lines (the same every time) in the current
# directory, then has run_preload.sh compare `sort` on them with and without
# brisk. --parallel=4 makes sort use more threads than there are cores, and
# -S caps its buffer so that it also merges temporary files.
set -eu

lib=$1
python=$2
here=$(dirname "$0")
input=sort_input.txt

# Made once per build directory, as the content never changes; written
# under another name first so that an interrupted run leaves no partial file.
if [ ! -s "$input" ]; then
  "$python" - "$input.tmp" <<'EOF'
import random
import sys

rng = random.Random(20240601)
with open(sys.argv[1], "w") as out:
    written = 0
    while written < 20_000_000:
        word = format(rng.getrandbits(160), "040x")[: rng.randint(1, 40)]
        line = f"{word},{rng.randint(0, 99999)},{rng.getrandbits(20)}\n"
        out.write(line)
        written += len(line)
EOF
  mv "$input.tmp" "$input"
fi

LC_ALL=C exec sh "$here/run_preload.sh" "$lib" \
  sort -t , -k 2,2n -k 1,1 --parallel=4 -S 8M -T . "$input"
