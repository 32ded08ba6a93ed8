#!/usr/bin/env python3
"""Guard the fast path's instruction count: brisk's malloc+free pair on the ring
workload, per size class, against the counts recorded in ring_instructions.csv.

  python3 bench/instruction_check.py --build build            check (CTest runs this)
  python3 bench/instruction_check.py --build build --record   measure and record anew

Each mode of `bench/ring N MODE` (mix, and each 16-byte size class from 16 to 128
bytes) runs under `valgrind --tool=callgrind` with libbrisk.so preloaded, at two
step counts; the difference in instructions over the difference in steps is the
count per step, and the `baseline` mode's count (the same loop over a static array,
no allocator call) subtracted from it is the allocator's share: one free and one
malloc, call and return included. Mode `new` is `bench/ring_new N mix` less its
own baseline: the same through C++'s sized operator delete and operator new.
Callgrind counts instructions, not time, so the numbers do not move with the
machine's load; they move with the code and the compiler. The check fails when a mode's count rises by more than TOLERANCE over its
record; a fall only prints a reminder to record the better number.
"""

import argparse
import csv
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import Allocator, callgrind_pairs  # noqa: E402  (run.py sits beside this file)

RECORD = os.path.join(HERE, "ring_instructions.csv")
MODES = ["mix", "16", "32", "48", "64", "80", "96", "112", "128"]
# Measured on ring_new (its mix), recorded as this mode.
NEW_MODE = "new"
TOLERANCE = 0.03


def measure(build: str) -> dict:
    """{mode: allocator instructions per pair}, plus the baseline loop's count.

    Under brisk's defaults: the record is of them, and an option's work on
    other threads (BRISK_STATS_FILE's writer) counts in callgrind's totals."""
    for name in [k for k in os.environ if k.startswith("BRISK_")]:
        del os.environ[name]
    lib = os.path.abspath(os.path.join(build, "libbrisk.so"))
    if not os.path.exists(lib):
        sys.exit(f"instruction_check: {lib} not found; build the 'brisk' target first")
    brisk = Allocator("brisk", lib, None)
    counts = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        for program, modes in (("ring", MODES), ("ring_new", ["mix"])):
            for mode in ["baseline"] + modes:
                r = callgrind_pairs(build, brisk, tmpdir, mode, program)
                if "per_pair" not in r:
                    sys.exit(f"instruction_check: {program} {mode}: {r['error']}")
                counts[program, mode] = r["per_pair"]
    baseline = counts["ring", "baseline"]
    measured = {"baseline": baseline, **{m: counts["ring", m] - baseline for m in MODES}}
    measured[NEW_MODE] = counts["ring_new", "mix"] - counts["ring_new", "baseline"]
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="CMake build directory")
    parser.add_argument("--record", action="store_true",
                        help=f"write the measured counts to {os.path.relpath(RECORD)}")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("instruction_check: valgrind is needed (Debian package valgrind)")

    measured = measure(args.build)
    print(f"ring loop alone (baseline): {measured['baseline']:.2f} instructions per step")
    if args.record:
        with open(RECORD, "w", newline="") as f:
            f.write("# brisk malloc+free instructions per pair on bench/ring (callgrind, step "
                    "minus baseline); written by bench/instruction_check.py --record\n")
            writer = csv.writer(f)
            writer.writerow(["mode", "instructions_per_pair"])
            for mode in MODES + [NEW_MODE]:
                writer.writerow([mode, f"{measured[mode]:.2f}"])
        for mode in MODES + [NEW_MODE]:
            print(f"{mode:>5}: {measured[mode]:6.2f} recorded")
        return 0

    with open(RECORD) as f:
        recorded = {row["mode"]: float(row["instructions_per_pair"])
                    for row in csv.DictReader(line for line in f if not line.startswith("#"))}
    failed = False
    for mode in MODES + [NEW_MODE]:
        if mode not in recorded:
            print(f"{mode:>5}: {measured[mode]:6.2f} (no record)")
            failed = True
            continue
        now, then = measured[mode], recorded[mode]
        change = now / then - 1
        verdict = "ok"
        if change > TOLERANCE:
            verdict = f"FAILED: more than {TOLERANCE:.0%} over the record"
            failed = True
        elif change < -TOLERANCE:
            verdict = "fewer than recorded: record it with --record"
        print(f"{mode:>5}: {now:6.2f} instructions per pair, recorded {then:6.2f} "
              f"({change:+.1%}) {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
