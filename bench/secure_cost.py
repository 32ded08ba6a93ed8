#!/usr/bin/env python3
"""The secure build's cost: CPU time per operation of benchmark programs under
libbrisk-secure.so against libbrisk.so (or any libraries), and the ring
workload's malloc+free instructions under callgrind.

  python3 bench/secure_cost.py --build build                      the four below
  python3 bench/secure_cost.py --build build --only stream,handoff --reps 9
  python3 bench/secure_cost.py --build build --lib before=/tmp/old-secure.so
  python3 bench/secure_cost.py --build build --ring                instructions too

Each round runs every workload under every library in turn (interleaved, so a
change in the machine's load falls on all of them), LD_PRELOAD'ed; the program's
user plus system CPU time (its rusage, from wait4) over its operations is one
sample, and the table gives each library's median over the rounds and its ratio
to the first library's. CPU time, not wall time: on a machine that other jobs
share it moves less (a program whose threads wait on each other by spinning
still counts the spinning; stream and xmalloc do). --ring adds bench/ring's
allocator instructions per free+malloc step (callgrind, the step minus the
baseline loop's, as bench/instruction_check.py measures the release build).
"""

import argparse
import os
import re
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from child import run_with_limit  # noqa: E402
from run import Allocator, callgrind_pairs  # noqa: E402

# name: (program and arguments, how many operations when the program does not
# print ops=, total_ops=, mallocs= or iterations=). larson and glibc_thread are
# run.py's --quick arguments; pairs, mixed, xmalloc and stream run.py's full
# ones (the quick ones take under 50 ms of CPU, too little to time).
WORKLOADS = {
    "larson": (["larson", "0.5", "8", "1000", "1000", "20", "42", "2"], None),
    "glibc_thread": (["glibc_thread", "2", "40000000", "1000", "32768", "42"], None),
    "pairs": (["pairs", "100000000"], None),
    "mixed": (["mixed", "10000000", "10000", "32768", "42"], None),
    "xmalloc": (["xmalloc", "--objects", "20000000"], None),
    "stream": (["stream", "20000000", "42"], 20000000),
    "handoff": (["handoff", "8", "2000000", "42"], None),
    "mstress": (["mstress", "16", "20", "600", "42"], None),
    "rptest": (["rptest", "2", "10000000", "8192", "16384", "256", "32", "42"], None),
    "alloc_test_mt": (["alloc_test", "2", "50000000", "65536", "42"], None),
}
DEFAULT_ONLY = "larson,glibc_thread,pairs,mixed"
OPS_KEYS = ("ops", "total_ops", "mallocs", "iterations")


def operations(output: str, fixed):
    if fixed is not None:
        return fixed
    for key in OPS_KEYS:
        m = re.search(rf"(?:^|\s){key}=(\d+)", output)
        if m:
            return int(m.group(1))
    return None


def cpu_ns_per_op(build: str, workload: str, library: str) -> float:
    argv, fixed = WORKLOADS[workload]
    env = dict(os.environ, LD_PRELOAD=library)
    with tempfile.TemporaryFile(mode="w+") as out:
        code, _, usage, timed_out = run_with_limit(
            [os.path.join(build, "bench", argv[0])] + argv[1:], env, 600, out, out)
        out.seek(0)
        text = out.read()
    ops = operations(text, fixed)
    if code != 0 or timed_out or not ops:
        sys.exit(f"secure_cost: {workload} under {library}: exit {code}, "
                 f"{'timed out, ' if timed_out else ''}{text.strip().splitlines()[-1:]}")
    return (usage.ru_utime + usage.ru_stime) / ops * 1e9


def ring_instructions(build: str, name: str, library: str) -> dict:
    allocator = Allocator(name, library, None)
    counts = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        for mode in ["baseline", "mix", "16", "64", "128"]:
            r = callgrind_pairs(build, allocator, tmpdir, mode, "ring")
            if "per_pair" not in r:
                sys.exit(f"secure_cost: ring {mode} under {library}: {r['error']}")
            counts[mode] = r["per_pair"]
    baseline = counts.pop("baseline")
    return {mode: count - baseline for mode, count in counts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="CMake build directory")
    parser.add_argument("--reps", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--only", default=DEFAULT_ONLY,
                        help=f"comma-separated workloads of {','.join(WORKLOADS)} "
                             f"(default {DEFAULT_ONLY})")
    parser.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                        help="a library to compare, after release and secure (repeatable)")
    parser.add_argument("--ring", action="store_true",
                        help="also the ring pair's instructions under callgrind")
    args = parser.parse_args()

    build = os.path.abspath(args.build)
    libs = [("release", os.path.join(build, "libbrisk.so")),
            ("secure", os.path.join(build, "libbrisk-secure.so"))]
    for spec in args.lib:
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"secure_cost: --lib {spec}: NAME=PATH")
        libs.append((name, os.path.abspath(path)))
    for name, path in libs:
        if not os.path.exists(path):
            sys.exit(f"secure_cost: {path} not found")
    workloads = args.only.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"secure_cost: no workload {w}")

    samples = {(w, name): [] for w in workloads for name, _ in libs}
    for _ in range(args.reps):
        for w in workloads:
            for name, path in libs:
                samples[(w, name)].append(cpu_ns_per_op(build, w, path))

    print("| workload | arguments | " + " | ".join(f"{n} ns/op" for n, _ in libs) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in libs) + " |")
    for w in workloads:
        base = statistics.median(samples[(w, libs[0][0])])
        cells = []
        for name, _ in libs:
            median = statistics.median(samples[(w, name)])
            cells.append(f"{median:.2f}" if name == libs[0][0] else
                         f"{median:.2f} ({median / base:.2f}x)")
        print(f"| {w} | `{' '.join(WORKLOADS[w][0])}` | " + " | ".join(cells) + " |")

    if args.ring:
        print()
        print("| library | ring mix | 16 B | 64 B | 128 B |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, path in libs:
            r = ring_instructions(build, name, path)
            print(f"| {name} | {r['mix']:.1f} | {r['16']:.1f} | {r['64']:.1f} | {r['128']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
