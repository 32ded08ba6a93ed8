#!/usr/bin/env python3
"""Run brisk's benchmark programs under several allocators and write a report.

The programs in bench/ call only malloc/free/realloc, so one binary measures any
allocator: glibc runs it as it is, every other allocator comes in by LD_PRELOAD.
Runs are interleaved (repetition, then workload, then allocator) so that drift of
the machine hits every allocator alike. After them, each region allocator
benchmark found in <build>/bench/region_* (linked to brisk, no preload) runs once,
then its region_*_brisk twin (the same source with brisk's malloc) with --user,
and their Markdown joins the report, led by issue 11's table (each region
allocator as a user calls it, against glibc's malloc and brisk's).

  python3 bench/run.py --build build                  full run, ~45 min (2 cores, 6 allocators)
  python3 bench/run.py --build build --quick          small sizes, 3 reps, ~5.5 min
  python3 bench/run.py --build build --callgrind      adds instructions per operation (callgrind;
                                                      with the region programs, theirs too)
  python3 bench/run.py --build build --smoke          CI: each workload once, brisk only
  python3 bench/run.py --build build --only larson,xmalloc --alloc brisk,glibc,mimalloc
  python3 bench/run.py --build build --only regions   the region allocator programs alone
  python3 bench/run.py --build build --only classic   the classic benchmarks' shapes
  python3 bench/run.py --build build --only real      real programs (python3, sqlite3, gcc,
                                                      g++, git) under LD_PRELOAD, output checked

Writes <out>/raw.csv (one row per run, region programs included), <out>/report.md
and, when matplotlib can be imported, <out>/relative_time.png, relative_rss.png
and rss_over_time.png (rss_cycle). A full run (not --quick) that includes the region
programs also writes bench/results/published/<date>-regions/ (report.md, raw.csv,
hybrid_scaling.png) and rewrites the README's regions table, each naming the commit
and the CPU (--no-publish: neither); one with the real programs (real_programs.py)
writes bench/results/published/<date>-real/ and the README's real programs table
the same way. Exits non-zero if a brisk run or a region program fails, or a real
program's output under brisk differs from its output without preload; a peer
allocator that fails is only noted in the report (a real program's output
mismatch loudly, as a failure).
"""

import argparse
import csv
import datetime
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import child
import real_programs

HERE = os.path.dirname(os.path.abspath(__file__))
MULTIARCH = getattr(sys.implementation, "_multiarch", None) or f"{platform.machine()}-linux-gnu"
LIBDIR = f"/usr/lib/{MULTIARCH}"

# Peers: name, library in LIBDIR that is preloaded, Debian package that ships it.
PEERS = [
    ("mimalloc", "libmimalloc.so.2", "libmimalloc2.0"),
    ("jemalloc", "libjemalloc.so.2", "libjemalloc2"),
    ("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    ("tbbmalloc", "libtbbmalloc_proxy.so.2", "libtbbmalloc2"),
]
ALLOCATOR_NAMES = ["glibc", "brisk"] + [name for name, _, _ in PEERS]

# Instructions per pair = (Ir(N) - Ir(BASE)) / (N - BASE). BASE is not 0 so that
# an allocator's lazy set-up on its first malloc is in both runs and cancels out.
CALLGRIND_N = 200_000
CALLGRIND_BASE = 1_000
# pairs modes measured under callgrind: the 16-128 B mix, single size classes
# from tiny to medium, calloc, and a small buffer growing by realloc.
CALLGRIND_MODES = ["mix", "16", "64", "256", "1024", "4096", "32768", "calloc", "realloc"]
# ring modes (free the oldest of 64 live blocks, malloc a new one): the 16-128 B
# mix and each 16 B size class in it, plus baseline, the same loop without the
# allocator, whose count is subtracted to give the allocator's instructions.
RING_CALLGRIND_MODES = ["mix", "16", "32", "48", "64", "80", "96", "112", "128"]
RING_BASELINE = "baseline"
# ring_new (ring through C++'s sized operator delete and operator new): its
# mix, less its own baseline, is the ring table's column `new`.
RING_NEW_CALLGRIND_MODES = ["mix"]

RUN_TIMEOUT_S = {"full": 300, "quick": 60}


@dataclass
class Allocator:
    name: str
    preload: Optional[str]  # None: the C library's own malloc
    package: Optional[str]  # Debian package, for the version in the report

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        if self.preload:
            env["LD_PRELOAD"] = self.preload
        return env


@dataclass
class Workload:
    name: str
    program: str
    about: str
    full: List[str]
    quick: List[str]
    # Extra report columns: (key printed by the program, column heading); the
    # values are KiB, shown in MiB, median over the repetitions.
    extra_kib: List[Tuple[str, str]] = field(default_factory=list)


def make_workloads(cpus: int) -> List[Workload]:
    threads = str(max(2, cpus))
    # mstress means more threads than cores (mimalloc's own default is 32).
    mstress_threads = str(max(16, 2 * cpus))
    return [
        Workload("larson", "larson",
                 f"Larson server: {threads} threads, 8-1000 B, arrays handed to successor "
                 "threads (cross-thread frees, thread churn); fixed duration",
                 full=["5", "8", "1000", "5000", "20", "42", threads],
                 quick=["0.5", "8", "1000", "1000", "20", "42", threads]),
        Workload("xmalloc", "xmalloc",
                 "1 producer thread mallocs, 1 consumer thread frees, 16-128 B",
                 full=["--objects", "20000000"],
                 quick=["--objects", "2000000"]),
        Workload("pairs", "pairs",
                 "one thread, malloc then free, sizes cycling 16..128 B",
                 full=["100000000"],
                 quick=["10000000"]),
        Workload("large", "large",
                 "malloc, touch every page, free: 2-8 MiB blocks, 4 alive",
                 full=["2000"],
                 quick=["300"]),
        Workload("cache_thrash", "cache_thrash",
                 f"active false sharing (Hoard): {threads} threads each malloc an 8 B object, "
                 "write it 1000 times, free it",
                 full=[threads, "200000", "8", "1000"],
                 quick=[threads, "10000", "8", "1000"]),
        Workload("cache_scratch", "cache_scratch",
                 f"passive false sharing (Hoard): main mallocs {threads} neighbouring 8 B "
                 "objects, each thread frees one, then mallocs, writes 1000 times, frees",
                 full=[threads, "200000", "8", "1000"],
                 quick=[threads, "10000", "8", "1000"]),
        Workload("mixed", "mixed",
                 "one thread, random replacement in a live set of 10000 blocks, sizes 1/size "
                 "in 8 B-32 KiB plus 1 in 256 of 64-512 KiB (glibc-bench style)",
                 full=["10000000", "10000", "32768", "42"],
                 quick=["1000000", "10000", "32768", "42"]),
        Workload("realloc_grow", "realloc_grow",
                 "256 uint32 arrays growing by doubling and 4096 strings by 1-16 B realloc "
                 "appends, interleaved, checked, freed; op = one realloc",
                 full=["8", "256", "4096", "42"],
                 quick=["1", "256", "4096", "42"]),
        Workload("memory_return", "memory_return",
                 "malloc 1 GiB (quick: 128 MiB) in 16-256 B blocks, free all, sleep 1 s "
                 "(quick: 0.5 s): RSS after the sleep, and after one more malloc/free (poke)",
                 full=["1024", "16", "256", "1", "42"],
                 quick=["128", "16", "256", "0.5", "42"],
                 extra_kib=[("rss_after_free_kib", "RSS after free"),
                            ("rss_after_idle_kib", "RSS after idle"),
                            ("rss_after_poke_kib", "RSS after poke")]),
        Workload("rss_cycle", "rss_cycle",
                 "peaks and troughs: malloc to 256 MiB (quick: 64 MiB) live, free 90% at "
                 "random, idle at the trough; RSS sampled every 20 ms (chart)",
                 full=["8", "256", "10", "200", "20", "42"],
                 quick=["4", "64", "10", "50", "20", "42"],
                 extra_kib=[("mean_rss_kib", "mean RSS"),
                            ("trough_rss_kib", "last trough RSS")]),
        Workload("thread_churn", "thread_churn",
                 f"short-lived threads, {threads} at a time: 1000 malloc/free each, 64 blocks "
                 "handed to the successor, exit",
                 full=["20000", threads, "1000", "64", "42"],
                 quick=["3000", threads, "1000", "64", "42"]),
        Workload("stream", "stream",
                 "1 producer thread mallocs 16-256 B and writes a header, 1 consumer reads and "
                 "frees, one pointer at a time through a lock-free ring: every free is remote",
                 full=["20000000", "42"],
                 quick=["2000000", "42"]),
        Workload("handoff", "handoff",
                 "8 threads malloc 8 B-64 KiB (1 in 10000: 4 MiB) and swap each block into one "
                 "of 4096 shared slots, freeing the block it held: local and remote frees "
                 "mixed, about half remote on 2 idle cores ((cores-1)/cores; fewer on a busy "
                 "machine; remote_free_pct in raw.csv)",
                 full=["8", "10000000", "42"],
                 quick=["8", "2000000", "42"]),
        Workload("mstress", "mstress",
                 f"rounds of {mstress_threads} short-lived threads keeping local and shared "
                 "blocks and arrays of 8 B-1 KiB (some to 64 KiB, rare 1-4 MiB); shared ones "
                 "outlive their thread; op = one malloc",
                 full=[mstress_threads, "50", "1200", "42"],
                 quick=[mstress_threads, "20", "600", "42"]),
        Workload("ring", "ring",
                 "one thread, 64 blocks live: free the oldest, malloc 16-128 B (random, "
                 "pre-drawn) in its place; op = one free + one malloc",
                 full=["1000000000", "mix"],
                 quick=["200000000", "mix"]),
        # The classic allocator benchmarks' shapes, our own programs written from a
        # description of each (group "classic" in WORKLOAD_GROUPS).
        Workload("rptest", "rptest",
                 f"rpmalloc-benchmark shape: {threads} threads toggle random slots of an 8192-slot "
                 "working set, 16 B-16 KiB skewed small; every 256 steps 32 live blocks go to "
                 "the next thread, which frees them (a sender waits while 256 batches are "
                 "queued); op = one malloc or free",
                 full=[threads, "40000000", "8192", "16384", "256", "32", "42"],
                 quick=[threads, "10000000", "8192", "16384", "256", "32", "42"]),
        Workload("alloc_test", "alloc_test",
                 "alloc-test shape, 1 thread: random malloc/free over 65536 slots (7/8 of steps "
                 "in a hot 1/16), 8 B-4 KiB skewed small, 1 in 512 of 4-64 KiB; op = one "
                 "malloc or free",
                 full=["1", "200000000", "65536", "42"],
                 quick=["1", "50000000", "65536", "42"]),
        Workload("alloc_test_mt", "alloc_test",
                 f"alloc-test shape, {threads} independent threads, each the single-thread "
                 "sequence from its own seed, nothing shared; op = one malloc or free",
                 full=[threads, "200000000", "65536", "42"],
                 quick=[threads, "50000000", "65536", "42"]),
        Workload("glibc_simple", "glibc_simple",
                 "glibc bench-malloc-simple shape: one thread mallocs a batch of 25/100/400/1600 "
                 "blocks of one size (16 B-4 KiB) and frees it in order, every cell; op = one "
                 "malloc or free",
                 full=["1000000", "0"],
                 quick=["300000", "0"]),
        Workload("glibc_thread", "glibc_thread",
                 f"glibc bench-malloc-thread shape: {threads} threads each replace random blocks "
                 "of a private 1000-slot set, sizes 1/size^1.5 over 8 B-32 KiB; op = one free + "
                 "one malloc",
                 full=[threads, "200000000", "1000", "32768", "42"],
                 quick=[threads, "40000000", "1000", "32768", "42"]),
        Workload("cfrac_like", "cfrac_like",
                 "cfrac shape: our bignum library (every result a fresh 8-80 B block) expands "
                 "sqrt(N) as a continued fraction with checks, and factors N by Pollard rho; "
                 "op = one bignum malloc (+ its free)",
                 full=["48", "100000", "42"],
                 quick=["12", "100000", "42"]),
        Workload("tree_like", "tree_like",
                 "barnes/espresso shape: each step builds a 50000-node search tree (payloads "
                 "0-192 B, realloc-grown labels) and a quadtree with realloc-grown buckets, "
                 "walks them, frees post-order; op = one malloc or realloc",
                 full=["400", "50000", "42"],
                 quick=["80", "50000", "42"]),
        Workload("mleak", "mleak",
                 f"leaking program: {threads} threads each replace random blocks of a "
                 "20000-block working set (quick: 4000): 16 B-1 KiB in a band that moves every "
                 "200000 steps (quick: 40000), 1 in 32 of 1-32 KiB; 1 retired block in 100 is "
                 "leaked, never freed; op = one malloc or free",
                 full=[threads, "10000000", "20000", "100", "200000", "42"],
                 quick=[threads, "1000000", "4000", "100", "40000", "42"],
                 extra_kib=[("peak_live_kib", "peak live"),
                            ("leaked_kib", "leaked"),
                            ("rss_end_kib", "RSS at end")]),
        Workload("sh8bench_like", "sh8bench_like",
                 f"sh8bench shape: {threads} threads in a ring each malloc batches of 2000 "
                 "blocks, sizes cycling through 1 B-16 KiB, free 3 in 4 in reverse and "
                 "interleaved order and pass every 4th to the next thread to free; op = one "
                 "malloc or free",
                 full=[threads, "10000", "2000", "16384", "4", "42"],
                 quick=[threads, "1000", "2000", "16384", "4", "42"]),
    ]


@dataclass
class Run:
    rep: int
    workload: str
    allocator: str
    args: List[str]
    exit_code: int
    wall_s: float
    maxrss_kib: int
    values: Dict[str, float] = field(default_factory=dict)
    output: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and "ops_per_sec" in self.values

    @property
    def peak_rss_kib(self) -> float:
        """The program's own VmHWM when it printed one, else wait4's ru_maxrss.

        On Linux, ru_maxrss of an exec'd child also holds the high-water mark of
        the image it replaced: the Python process that forked it, some 15-20 MiB."""
        return self.values.get("peak_rss_kib") or self.maxrss_kib


# ---------------------------------------------------------------- running

def parse_values(text: str) -> Dict[str, float]:
    """Every key=value token whose value is a number."""
    values = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            try:
                values[key] = float(value)
            except ValueError:
                pass
    return values


def run_program(argv: List[str], env: Dict[str, str], timeout: float):
    """Runs argv; returns (exit code, wall seconds, peak RSS KiB, stdout, stderr).

    The child is reaped with os.wait4 to read its own ru_maxrss. A killed child
    gives a negative exit code (minus the signal number)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code, wall, usage, timed_out = child.run_with_limit(argv, env, timeout, out, err)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        if timed_out:
            stderr += f"\nkilled after the {timeout:.0f} s time limit"
        return code, wall, usage.ru_maxrss, stdout, stderr


def describe_failure(exit_code: int, stderr: str, values: Dict[str, float]) -> str:
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if exit_code < 0:
        what = f"killed by {signal.Signals(-exit_code).name}"
    elif exit_code != 0:
        what = f"exit {exit_code}"
    elif "ops_per_sec" not in values:
        what = "no ops_per_sec line"
    else:
        return ""
    return f"{what}: {last}" if last else what


def find_allocators(names: List[str], build: str, notes: List[str]) -> List[Allocator]:
    found = []
    peers = {name: (lib, pkg) for name, lib, pkg in PEERS}
    for name in names:
        if name == "glibc":
            found.append(Allocator("glibc", None, "libc6"))
        elif name == "brisk":
            lib = os.path.join(build, "libbrisk.so")
            if os.path.exists(lib):
                found.append(Allocator("brisk", os.path.abspath(lib), None))
            else:
                notes.append(f"brisk skipped: {lib} does not exist (build the 'brisk' target)")
        else:
            lib, pkg = peers[name]
            path = os.path.join(LIBDIR, lib)
            if os.path.exists(path):
                found.append(Allocator(name, path, pkg))
            else:
                notes.append(f"{name} skipped: {path} not found "
                             f"(Debian package {pkg}: apt-get install {pkg})")
    return found


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def run_matrix(build, workloads, allocators, reps, size, csv_path) -> List[Run]:
    """All runs, interleaved; each row is written to csv_path as soon as it exists."""
    plan = [(rep, w, a) for rep in range(reps) for w in workloads for a in allocators]
    durations: Dict[str, List[float]] = {}
    runs = []
    csv_file = open(csv_path, "w", newline="") if csv_path else None
    writer = None
    if csv_file:
        writer = csv.writer(csv_file)
        writer.writerow(["rep", "workload", "allocator", "exit_code", "wall_s", "peak_rss_kib",
                         "wait4_maxrss_kib", "ops_per_sec", "args", "output", "error"])
    try:
        for index, (rep, w, a) in enumerate(plan):
            left = estimate_left(plan[index:], durations)
            print(f"[{index + 1:3d}/{len(plan)}] {w.name:13s} {a.name:10s} rep {rep + 1}/{reps}"
                  f"  ~{format_duration(left)} left", file=sys.stderr, flush=True)
            args = w.quick if size == "quick" else w.full
            argv = [os.path.join(build, "bench", w.program)] + args
            code, wall, rss, out, err = run_program(argv, a.env(), RUN_TIMEOUT_S[size])
            values = parse_values(out)
            run = Run(rep, w.name, a.name, args, code, wall, rss, values,
                      " ".join(out.split()), describe_failure(code, err, values))
            runs.append(run)
            durations.setdefault(w.name, []).append(wall)
            if not run.ok:
                print(f"      FAILED: {run.error}", file=sys.stderr, flush=True)
            if writer:
                writer.writerow([rep + 1, w.name, a.name, code, f"{wall:.4f}",
                                 f"{run.peak_rss_kib:.0f}", rss,
                                 f"{values.get('ops_per_sec', float('nan')):.0f}",
                                 " ".join(args), run.output, run.error])
                csv_file.flush()
    finally:
        if csv_file:
            csv_file.close()
    return runs


def estimate_left(remaining, durations: Dict[str, List[float]]) -> float:
    seen = [d for ds in durations.values() for d in ds]
    if not seen:
        return 0.0
    overall = statistics.mean(seen)
    return sum(statistics.mean(durations[w.name]) if w.name in durations else overall
               for _, w, _ in remaining)


# ---------------------------------------------------------------- callgrind

def callgrind_total(path: str) -> Optional[int]:
    """The Ir count of a callgrind output file: its 'totals:' line, else 'summary:'."""
    found = {}
    with open(path) as f:
        for line in f:
            for key in ("totals:", "summary:"):
                if line.startswith(key):
                    found[key] = int(line.split()[1])
    return found.get("totals:", found.get("summary:"))


def callgrind_pairs(build: str, allocator: Allocator, tmpdir: str, mode: str,
                    program: str = "pairs") -> dict:
    """Instructions per iteration of `program N mode` (pairs, or ring: per step)."""
    binary = os.path.join(build, "bench", program)
    counts = {}
    for n in (CALLGRIND_BASE, CALLGRIND_N):
        out_file = os.path.join(tmpdir, f"{allocator.name}.{program}.{mode}.{n}.callgrind")
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", binary,
                str(n), mode]
        # valgrind passes LD_PRELOAD on to the program it runs; callgrind does not
        # replace malloc, so the preloaded allocator is the one measured.
        try:
            proc = subprocess.run(argv, env=allocator.env(), capture_output=True, text=True,
                                  timeout=600)
        except subprocess.TimeoutExpired:
            return {"error": f"N={n}: valgrind timed out"}
        total = callgrind_total(out_file) if os.path.exists(out_file) else None
        if proc.returncode != 0 or total is None:
            last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
            return {"error": f"N={n}: exit {proc.returncode} {last}".strip()}
        counts[n] = total
    per_pair = (counts[CALLGRIND_N] - counts[CALLGRIND_BASE]) / (CALLGRIND_N - CALLGRIND_BASE)
    return {"per_pair": per_pair, "ir_n": counts[CALLGRIND_N], "ir_base": counts[CALLGRIND_BASE]}


def run_callgrind(build, allocators, out_dir) -> Dict[str, Dict[str, dict]]:
    """results[allocator][mode] = {"per_pair", "ir_n", "ir_base"} or {"error"}.

    pairs modes are keyed by their name, ring modes by "ring:<mode>" (ring_new's by
    "ring_new:<mode>"); a ring mode other than baseline also has "minus_baseline"
    when both counts exist."""
    results: Dict[str, Dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        for a in allocators:
            results[a.name] = {}
            for mode in CALLGRIND_MODES:
                r = callgrind_pairs(build, a, tmpdir, mode)
                results[a.name][mode] = r
                print(f"callgrind: pairs {mode:>7} under {a.name:<10} " +
                      (f"{r['per_pair']:.1f} instructions per iteration" if "per_pair" in r
                       else f"FAILED: {r['error']}"), file=sys.stderr, flush=True)
            for program, modes in (("ring", RING_CALLGRIND_MODES),
                                   ("ring_new", RING_NEW_CALLGRIND_MODES)):
                if not os.access(os.path.join(build, "bench", program), os.X_OK):
                    continue
                for mode in [RING_BASELINE] + modes:
                    r = callgrind_pairs(build, a, tmpdir, mode, program)
                    base = results[a.name].get(f"{program}:{RING_BASELINE}", {})
                    if mode != RING_BASELINE and "per_pair" in r and "per_pair" in base:
                        r["minus_baseline"] = r["per_pair"] - base["per_pair"]
                    results[a.name][f"{program}:{mode}"] = r
                    print(f"callgrind: {program:<8} {mode:>8} under {a.name:<10} " +
                          (f"{r['per_pair']:.1f} instructions per step" if "per_pair" in r
                           else f"FAILED: {r['error']}") +
                          (f", {r['minus_baseline']:.1f} over baseline"
                           if "minus_baseline" in r else ""), file=sys.stderr, flush=True)
    if out_dir:
        with open(os.path.join(out_dir, "callgrind.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            # ir_per_iteration: per pairs iteration, or per ring step; ring's
            # ir_minus_baseline is the allocator's share of a step (free + malloc).
            writer.writerow(["allocator", "program", "mode", "ir_per_iteration",
                             "ir_minus_baseline", f"ir_n{CALLGRIND_N}", f"ir_n{CALLGRIND_BASE}",
                             "error"])
            for name, modes in results.items():
                for key, r in modes.items():
                    program, _, mode = key.rpartition(":")
                    writer.writerow([name, program or "pairs", mode,
                                     f"{r['per_pair']:.2f}" if "per_pair" in r else "",
                                     f"{r['minus_baseline']:.2f}" if "minus_baseline" in r
                                     else "",
                                     r.get("ir_n", ""), r.get("ir_base", ""), r.get("error", "")])
    return results


# ---------------------------------------------------------------- report

@dataclass
class Cell:
    runs: int
    ok: int
    wall_med: float = math.nan
    wall_min: float = math.nan
    wall_max: float = math.nan
    ops_med: float = math.nan
    rss_med: float = math.nan  # KiB
    time_ratio: float = math.nan
    rss_ratio: float = math.nan
    extra_kib: Dict[str, float] = field(default_factory=dict)  # key -> median


def summarize(runs: List[Run], workloads, allocators) -> Dict[str, Dict[str, Cell]]:
    table = {}
    for w in workloads:
        row = {}
        for a in allocators:
            mine = [r for r in runs if r.workload == w.name and r.allocator == a.name]
            good = [r for r in mine if r.ok]
            cell = Cell(len(mine), len(good))
            if good:
                walls = [r.wall_s for r in good]
                cell.wall_med = statistics.median(walls)
                cell.wall_min, cell.wall_max = min(walls), max(walls)
                cell.ops_med = statistics.median(r.values["ops_per_sec"] for r in good)
                cell.rss_med = statistics.median(r.peak_rss_kib for r in good)
                for key, _ in w.extra_kib:
                    seen = [r.values[key] for r in good if key in r.values]
                    if seen:
                        cell.extra_kib[key] = statistics.median(seen)
            row[a.name] = cell
        measured = [c for c in row.values() if c.ok]
        if measured:
            best_ops = max(c.ops_med for c in measured)
            best_rss = min(c.rss_med for c in measured)
            for c in measured:
                # Time per operation relative to the best: fixed-duration workloads
                # (larson) compare fairly this way too.
                c.time_ratio = best_ops / c.ops_med if c.ops_med > 0 else math.inf
                c.rss_ratio = c.rss_med / best_rss if best_rss > 0 else math.nan
        table[w.name] = row
    return table


def geomean(values: List[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def fmt_rate(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def fmt_ratio(x: float, best: bool) -> str:
    if not math.isfinite(x):
        return "-"
    return f"**{x:.2f}**" if best else f"{x:.2f}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(allocator: Allocator, build: str) -> str:
    if allocator.package is None and allocator.name != "brisk":
        return "given with --lib"
    if allocator.package is None:
        try:
            rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip()
        except OSError:
            rev = ""
        return f"local build {rev}".strip()
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", allocator.package],
                              capture_output=True, text=True)
    except OSError:
        return "n/a"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "n/a"


def ring_callgrind_section(callgrind, allocators) -> List[str]:
    """Two tables from the ring modes of run_callgrind: the allocator's instructions
    per step (the baseline loop's subtracted), then the raw counts per step."""
    if not any(f"ring:{RING_BASELINE}" in modes for modes in callgrind.values()):
        return []
    lines = [f"`bench/ring N MODE` under callgrind, counted as for pairs: a step frees the "
             "oldest of 64 live blocks and mallocs a new one (sizes from a table drawn before "
             "the loop). `mix` = 16..128 B at random; a number = that size only; `new` = "
             "`bench/ring_new N mix`, the mix through C++'s sized `operator delete` and "
             "`operator new` (what `delete p` and `new T` compile to). First table: "
             "allocator instructions per pair (free + malloc), i.e. per step minus the "
             f"`{RING_BASELINE}` loop (the same loop over a static array, no allocator calls; "
             "ring_new's own for `new`; call and PLT instructions count as the allocator's). "
             "Second: instructions per step, loop included. Fewest per column in bold.", ""]
    # (column, results key)
    columns = [(mode, f"ring:{mode}") for mode in RING_CALLGRIND_MODES] + [("new", "ring_new:mix")]
    for key, title in (("minus_baseline", "allocator instructions per pair"),
                       ("per_pair", "instructions per step")):
        shown = columns + ([(RING_BASELINE, f"ring:{RING_BASELINE}")] if key == "per_pair"
                           else [])
        lines += [f"| {title} | " + " | ".join(column for column, _ in shown) + " |",
                  "| --- |" + " --- |" * len(shown)]
        best = {}
        for _, result_key in shown:
            done = [modes[result_key][key] for modes in callgrind.values()
                    if key in modes.get(result_key, {})]
            best[result_key] = min(done) if done else None
        for a in allocators:
            modes = callgrind.get(a.name, {})
            cells = []
            for column, result_key in shown:
                r = modes.get(result_key, {"error": "not run"})
                if key in r:
                    value = f"{r[key]:.1f}"
                    # baseline runs no allocator: its count is the same loop for all.
                    cells.append(f"**{value}**" if r[key] == best[result_key] and
                                 column != RING_BASELINE else value)
                else:
                    cells.append("failed" if "error" in r else "-")
            lines.append(f"| {a.name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def write_report(path, args, workloads, allocators, runs, table, callgrind, notes, charts,
                 regions, real=None):
    lines = []
    add = lines.append
    add("# brisk benchmark report")
    add("")
    add(f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    add(f"- CPU: {cpu_model()}, {os.cpu_count()} cores")
    add(f"- kernel: {platform.release()}")
    add(f"- mode: {'quick' if args.quick else 'full'}, {args.reps} repetitions, interleaved "
        "(rep → workload → allocator)")
    add("")
    add("| allocator | library | package version |")
    add("| --- | --- | --- |")
    for a in allocators:
        pkg = f"{a.package} {package_version(a, args.build)}" if a.package \
            else package_version(a, args.build)
        add(f"| {a.name} | {a.preload or '(C library)'} | {pkg} |")
    add("")
    add("Time ratio: the best allocator's median ops/s divided by this one's, i.e. time per "
        "operation relative to the best (1.00, in bold). RSS ratio: median peak RSS over the "
        "smallest. Time is the process's wall time, median [min–max]. Peak RSS is the "
        "program's VmHWM (wait4's ru_maxrss, also in raw.csv, counts the forking Python "
        "process's memory too).")
    add("")

    for w in workloads:
        row = table[w.name]
        add(f"## {w.name}")
        add("")
        add(f"{w.about}. Arguments: `{' '.join(w.quick if args.quick else w.full)}`")
        add("")
        extra_heads = "".join(f" {label} (MiB) |" for _, label in w.extra_kib)
        add(f"| allocator | time (s) | ops/s | peak RSS (MiB) |{extra_heads} time ratio "
            "| RSS ratio | runs ok |")
        add("| --- | --- | --- | --- |" + " --- |" * len(w.extra_kib) + " --- | --- | --- |")
        for a in allocators:
            c = row[a.name]
            if not c.ok:
                add(f"| {a.name} | failed | - | - |" + " - |" * len(w.extra_kib)
                    + f" - | - | {c.ok}/{c.runs} |")
                continue
            # Bold marks the smallest value of each extra RSS column.
            extras = ""
            for key, _ in w.extra_kib:
                value = c.extra_kib.get(key, math.nan)
                lows = [row[b.name].extra_kib[key] for b in allocators
                        if row[b.name].ok and key in row[b.name].extra_kib]
                text = f"{value / 1024:.1f}" if math.isfinite(value) else "-"
                extras += f" **{text}** |" if lows and value == min(lows) else f" {text} |"
            best_time = abs(c.time_ratio - 1.0) < 1e-12
            best_rss = abs(c.rss_ratio - 1.0) < 1e-12
            name = f"**{a.name}**" if best_time else a.name
            add(f"| {name} | {c.wall_med:.3f} [{c.wall_min:.3f}–{c.wall_max:.3f}] "
                f"| {fmt_rate(c.ops_med)} | {c.rss_med / 1024:.1f} |{extras}"
                f" {fmt_ratio(c.time_ratio, best_time)} | {fmt_ratio(c.rss_ratio, best_rss)} "
                f"| {c.ok}/{c.runs} |")
        add("")

    # Only the synthetic workloads (--only real or regions runs none of them).
    if workloads:
        add("## Geometric mean over workloads")
        add("")
        add("| allocator | time ratio | RSS ratio | workloads |")
        add("| --- | --- | --- | --- |")
        means = {}
        for a in allocators:
            cells = [table[w.name][a.name] for w in workloads if table[w.name][a.name].ok]
            means[a.name] = (geomean([c.time_ratio for c in cells]),
                             geomean([c.rss_ratio for c in cells]), len(cells))
        # Only allocators measured on every workload compete for the bold.
        complete = [m for m in means.values() if m[2] == len(workloads)]
        finite_t = [m[0] for m in complete if math.isfinite(m[0])]
        finite_r = [m[1] for m in complete if math.isfinite(m[1])]
        for a in allocators:
            t, r, n = means[a.name]
            best_t = n == len(workloads) and bool(finite_t) and t == min(finite_t)
            best_r = n == len(workloads) and bool(finite_r) and r == min(finite_r)
            name = f"**{a.name}**" if best_t else a.name
            add(f"| {name} | {fmt_ratio(t, best_t)} | {fmt_ratio(r, best_r)} "
                f"| {n} of {len(workloads)} |")
        add("")

    if callgrind is not None:
        add("## Instructions per operation (callgrind)")
        add("")
        add(f"`bench/pairs N MODE` under `valgrind --tool=callgrind`: (Ir(N={CALLGRIND_N}) − "
            f"Ir(N={CALLGRIND_BASE})) / {CALLGRIND_N - CALLGRIND_BASE}, so start-up cost "
            "cancels out; deterministic, unlike time. The loop itself (a few instructions) is "
            "included. Modes: `mix` = malloc+free cycling 16..128 B; a number = malloc+free of "
            "that size; `calloc` = calloc+free of the mix; `realloc` = malloc(16), realloc to "
            "100, realloc to 200, free. Fewest per column in bold.")
        add("")
        add("| allocator | " + " | ".join(CALLGRIND_MODES) + " |")
        add("| --- |" + " --- |" * len(CALLGRIND_MODES))
        best = {}
        for mode in CALLGRIND_MODES:
            done = [modes[mode]["per_pair"] for modes in callgrind.values()
                    if "per_pair" in modes.get(mode, {})]
            best[mode] = min(done) if done else None
        for a in allocators:
            modes = callgrind.get(a.name, {})
            cells = []
            for mode in CALLGRIND_MODES:
                r = modes.get(mode, {"error": "not run"})
                if "per_pair" in r:
                    value = f"{r['per_pair']:.1f}"
                    cells.append(f"**{value}**" if r["per_pair"] == best[mode] else value)
                else:
                    cells.append("failed")
            add(f"| {a.name} | " + " | ".join(cells) + " |")
        add("")
        lines.extend(ring_callgrind_section(callgrind, allocators))

    if regions is not None:
        lines.extend(region_section(regions))

    if real is not None:
        lines.extend(real_programs.report_section(real, PEER_NAMES))

    failures = [r for r in runs if not r.ok]
    if notes or failures or charts:
        add("## Notes")
        add("")
        for title, chart in charts:
            add(f"![{title}]({os.path.basename(chart)})")
            add("")
        for note in notes:
            add(f"- {note}")
        for r in failures:
            add(f"- {r.workload} / {r.allocator} rep {r.rep + 1} failed: {r.error}")
        add("")

    with open(path, "w") as f:
        f.write("\n".join(lines))


def import_pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_chart(path, workloads, allocators, table, metric="time_ratio") -> Optional[str]:
    """A grouped bar chart of time (or RSS) ratios; None when matplotlib is missing."""
    plt = import_pyplot()
    if plt is None:
        return None
    width = 0.8 / max(1, len(allocators))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(workloads)), 4.5))
    for i, a in enumerate(allocators):
        xs = [j + i * width for j in range(len(workloads))]
        ys = [getattr(table[w.name][a.name], metric) if table[w.name][a.name].ok else math.nan
              for w in workloads]
        ax.bar(xs, ys, width, label=a.name)
    ax.set_xticks([j + width * (len(allocators) - 1) / 2 for j in range(len(workloads))])
    ax.set_xticklabels([w.name for w in workloads], rotation=30, ha="right")
    ax.axhline(1.0, color="black", linewidth=0.5)
    # Log scale: one allocator 50x slower on one workload must not flatten the rest.
    ax.set_yscale("log", base=2)
    ax.set_ylim(bottom=0.9)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_ylabel("time per op relative to best (lower is better)" if metric == "time_ratio"
                  else "peak RSS relative to smallest (lower is better)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def rss_series(run: Run):
    """(interval in seconds, samples in KiB) from a run's rss_samples_kib line, or None."""
    interval, samples = None, None
    for token in run.output.split():
        key, _, value = token.partition("=")
        if key == "rss_interval_ms":
            interval = float(value) / 1000.0
        elif key == "rss_samples_kib" and value:
            try:
                samples = [float(v) for v in value.split(",")]
            except ValueError:
                return None
    return (interval, samples) if interval and samples else None


def write_rss_chart(path, workload: str, allocators, runs: List[Run]) -> Optional[str]:
    """RSS over time, one line per allocator: the repetition with the median mean RSS."""
    plt = import_pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = 0
    for a in allocators:
        good = [r for r in runs if r.workload == workload and r.allocator == a.name and r.ok
                and rss_series(r)]
        if not good:
            continue
        good.sort(key=lambda r: r.values.get("mean_rss_kib", 0))
        interval, samples = rss_series(good[(len(good) - 1) // 2])
        ax.plot([i * interval for i in range(len(samples))], [v / 1024 for v in samples],
                label=a.name, linewidth=1.2)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("resident set (MiB)")
    ax.set_title(f"{workload}: RSS over time (repetition with the median mean RSS)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- region allocators

def write_scaling_chart(path: str, regions) -> Optional[str]:
    """Seed 003's experiment (region_hybrid): wall time per thread count, one line per
    allocator, one panel per sequence; None without matplotlib or without its output."""
    plt = import_pyplot()
    run = next((r for r in regions or [] if r.name == "region_hybrid" and r.exit_code == 0),
               None)
    if plt is None or run is None:
        return None
    tables: Dict[str, Dict[str, List[tuple]]] = {}
    for line in run.kv_lines:
        values = dict(token.split("=", 1) for token in line.split())
        if "table" not in values or "threads" not in values:
            continue
        series = tables.setdefault(values["table"], {})
        for key, value in values.items():
            if key.endswith("_ms"):
                series.setdefault(key[:-3], []).append((int(values["threads"]), float(value)))
    if not tables:
        return None
    fig, axes = plt.subplots(1, len(tables), figsize=(6 * len(tables), 4.5), squeeze=False)
    for ax, (name, series) in zip(axes[0], tables.items()):
        for allocator, points in series.items():
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                    label=allocator, linewidth=1.2,
                    linestyle="--" if allocator.endswith("_spin") else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([1, 2, 4, 8, 16, 32])
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlabel("threads (the machine's cores: %d)" % (os.cpu_count() or 0))
        ax.set_ylabel("wall time, ms (lower is better)")
        ax.set_title(f"seed 003 experiment, {name} sequence")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path



@dataclass
class RegionRun:
    name: str
    argv: List[str]
    exit_code: int
    wall_s: float
    markdown: str
    kv_lines: List[str]
    error: str


def is_kv_line(line: str) -> bool:
    tokens = line.split()
    return bool(tokens) and all("=" in t and not t.startswith("=") for t in tokens)


def find_region_programs(build: str) -> List[str]:
    """<build>/bench/region_*, without the region_*_brisk twins (run_regions runs those)."""
    folder = os.path.join(build, "bench")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.startswith("region_") and not f.endswith(BRISK_TWIN)
                  and os.access(os.path.join(folder, f), os.X_OK)
                  and os.path.isfile(os.path.join(folder, f)))


# region_X links brisk's core alone (malloc is glibc's); region_X_brisk, built from the
# same source with libbrisk.a, gets brisk's malloc and runs the user patterns only.
BRISK_TWIN = "_brisk"


def run_region_program(argv: List[str], env: Dict[str, str], quick: bool) -> RegionRun:
    """One region program: its stdout is Markdown followed by key=value lines; the
    trailing key=value block is split off."""
    name = os.path.basename(argv[0])
    print(f"[region] {' '.join([name] + argv[1:])}", file=sys.stderr, flush=True)
    code, wall, _, out, err = run_program(argv, env, RUN_TIMEOUT_S["quick" if quick else "full"])
    lines = out.rstrip().splitlines()
    cut = len(lines)
    while cut > 0 and (is_kv_line(lines[cut - 1]) or not lines[cut - 1].strip()):
        cut -= 1
    # The user patterns' lines come right after their own table, before the rest.
    kv_lines = [line.strip() for line in lines if line.startswith("user=")]
    kv_lines += [line.strip() for line in lines[cut:] if line.strip() and
                 not line.startswith("user=")]
    markdown = "\n".join(line for line in lines[:cut] if not line.startswith("user="))
    error = ""
    if code != 0:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        what = (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}")
        error = f"{what}: {last}" if last else what
        print(f"      FAILED: {error}", file=sys.stderr, flush=True)
    return RegionRun(name, argv, code, wall, markdown.strip(), kv_lines, error)


def run_regions(build: str, quick: bool, csv_path: Optional[str]) -> List[RegionRun]:
    """Each <build>/bench/region_* once (they link brisk; no preload), then its
    region_*_brisk twin, if built, with --user."""
    results = []
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for program in find_region_programs(build):
        mode = ["--quick"] if quick else []
        results.append(run_region_program([program] + mode, env, quick))
        twin = program + BRISK_TWIN
        if os.access(twin, os.X_OK):
            results.append(run_region_program([twin, "--user"] + mode, env, quick))
    if csv_path and results:
        with open(csv_path, "a", newline="") as f:
            writer = csv.writer(f)
            for r in results:
                values = parse_values(" ".join(r.kv_lines))
                writer.writerow([1, r.name, "brisk (linked)", r.exit_code, f"{r.wall_s:.4f}",
                                 f"{values.get('peak_rss_kib', float('nan')):.0f}", "",
                                 f"{values.get('ops_per_sec', float('nan')):.0f}",
                                 " ".join(r.argv[1:]), " | ".join(r.kv_lines), r.error])
    return results


# The user patterns (bench/region_user.h): what each measures and issue 11's goals,
# as (times glibc's malloc, times brisk's malloc); None: no goal.
USER_PATTERNS = [
    ("arena_alloc", "arena, `brisk_arena_alloc`, 4 M blocks of 8–64 B, no frees", 3.0, 1.5),
    ("arena_cursor", "arena cursor, the same blocks", 10.0, None),
    ("stack_frames", "stack, recursive frames (push, 8 allocations, recurse twice, one more, "
     "pop)", 5.0, 3.0),
    ("fifo_ring", "fifo, ring of 1024 blocks of 16–255 B freed in order (vs calloc)", 1.3, 1.3),
    ("hybrid_2t", "hybrid, `brisk_hybrid_create(NULL)`, 16–512 B, 128 live per thread, "
     "2 threads", 1.4, 1.0),
    ("hybrid_8t", "hybrid, the same, 8 threads", 1.9, 1.0),
    ("hybrid_32t", "hybrid, the same, 32 threads", 1.9, 1.0),
]


def user_results(regions: List[RegionRun]) -> Dict[Tuple[str, str], Dict[str, str]]:
    """(pattern, malloc) -> the values of its user= line."""
    found = {}
    for r in regions or []:
        if r.exit_code != 0:
            continue
        for line in r.kv_lines:
            if line.startswith("user="):
                values = dict(token.split("=", 1) for token in line.split())
                found[(values["user"], values.get("malloc", "?"))] = values
    return found


def user_table(regions: List[RegionRun]) -> List[str]:
    """Issue 11's table: each region allocator as a user calls it, against glibc's
    malloc (region_X) and brisk's (region_X_brisk), with the goals."""
    found = user_results(regions)
    if not found:
        return []

    def cell(pattern, malloc, goal):
        v = found.get((pattern, malloc))
        if v is None:
            return "–", "–"
        ratio = float(v["ratio"])
        met = "" if goal is None else (" ✓" if ratio >= goal else " ✗")
        goal_text = "–" if goal is None else f"≥ {goal:g}×"
        # The arena's malloc trial without its frees, for what they cost.
        no_frees = (f"; {float(v['ratio_no_frees']):.2f}× without malloc's frees"
                    if "ratio_no_frees" in v else "")
        # The harness alone (no allocator) bounds what any allocator can reach.
        bound = (f"; harness {float(v['harness_ns']):.2f} ns: at most "
                 f"{float(v['baseline_ns']) / float(v['harness_ns']):.2f}× for any allocator"
                 if "harness_ns" in v and float(v["harness_ns"]) > 0 else "")
        return (f"{float(v['region_ns']):.2f} / {float(v['baseline_ns']):.2f}",
                f"**{ratio:.2f}×**{met} ({goal_text}{no_frees}{bound})")

    lines = ["| allocator, pattern | ns: region / glibc | vs glibc (goal) | "
             "ns: region / brisk | vs brisk's malloc (goal) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for pattern, label, goal_glibc, goal_brisk in USER_PATTERNS:
        g_ns, g_ratio = cell(pattern, "glibc", goal_glibc)
        b_ns, b_ratio = cell(pattern, "brisk", goal_brisk)
        lines.append(f"| {label} | {g_ns} | {g_ratio} | {b_ns} | {b_ratio} |")
    return lines


# Filled by main when --callgrind ran with the region programs.
REGION_INSTRUCTIONS: List[str] = []


def user_section(regions: List[RegionRun]) -> List[str]:
    table = user_table(regions)
    if not table:
        return []
    return ["### As a user calls them", "",
            "Each region allocator in the pattern it is made for, every block written whole "
            "after it is handed out, the allocator created and destroyed in every trial (for "
            "malloc: every block freed), medians of interleaved trials "
            "(bench/region_user.h). `region_X` links brisk's core alone, so its malloc is "
            "glibc's; `region_X_brisk`, the same source linked with libbrisk.a, gets brisk's "
            "malloc: each ratio is measured inside one process. ns per block (arena), "
            "allocation (stack, hybrid: with its free) or operation (fifo: a free and an "
            "allocation); the hybrid's time includes its creation and destruction.", ""] + \
        table + [""] + REGION_INSTRUCTIONS


def region_section(regions: List[RegionRun]) -> List[str]:
    lines = ["## Region allocators", ""]
    if not regions:
        return lines + ["none built (no `<build>/bench/region_*` program).", ""]
    lines += ["Programs that call brisk's region APIs directly (linked, no preload) and "
              "compare them with malloc/free inside the same process; each is run once.", ""]
    lines += user_section(regions)
    for r in regions:
        args = " ".join(r.argv[1:])
        if r.exit_code != 0:
            lines += [f"**{r.name} {args} FAILED** ({r.error}).", ""]
        if r.markdown:
            lines += [r.markdown, ""]
        elif r.exit_code == 0:
            lines += [f"{r.name} printed no Markdown.", ""]
        if r.kv_lines:
            lines += [f"`{r.name}`: `" + " ".join(r.kv_lines) + "`", ""]
    return lines


# ---------------------------------------------------------------- region instructions

# The user patterns under callgrind (`region_X callgrind KIND N`, region_user.h): per
# program, its region kinds, malloc's kind, the unit N counts, how many of the
# table's units one is, and the two N whose difference is divided.
REGION_CALLGRIND = [
    ("region_arena", ["arena", "cursor"], "malloc", "block", 1, (20_000, 220_000)),
    ("region_stack", ["stack"], "malloc", "allocation", 2047 * 9, (2, 12)),
    ("region_fifo", ["fifo"], "calloc", "operation", 1, (20_000, 220_000)),
    ("region_hybrid", ["hybrid"], "malloc", "allocation (with its free)", 10_000, (1, 6)),
]


def region_callgrind(build: str) -> List[str]:
    """Instructions per unit of each user pattern: the region allocator, glibc's malloc
    (region_X) and brisk's (region_X_brisk), and the harness alone ("floor")."""
    if shutil.which("valgrind") is None:
        return ["(no region instruction counts: valgrind is not installed)", ""]
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        def per_unit(binary, kind, ns, units):
            counts = []
            for n in ns:
                out = os.path.join(tmpdir, f"{os.path.basename(binary)}.{kind}.{n}")
                argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary,
                        "callgrind", kind, str(n)]
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                total = callgrind_total(out) if os.path.exists(out) else None
                if proc.returncode != 0 or total is None:
                    return None
                counts.append(total)
            return (counts[1] - counts[0]) / ((ns[1] - ns[0]) * units)

        for program, kinds, baseline, unit, units, ns in REGION_CALLGRIND:
            binary = os.path.join(build, "bench", program)
            twin = binary + BRISK_TWIN
            if not os.access(binary, os.X_OK):
                continue
            print(f"callgrind: {program} user patterns", file=sys.stderr, flush=True)
            floor = per_unit(binary, "floor", ns, units)
            glibc = per_unit(binary, baseline, ns, units)
            brisk = per_unit(twin, baseline, ns, units) if os.access(twin, os.X_OK) else None
            for kind in kinds:
                mine = per_unit(binary, kind, ns, units)
                rows.append((f"{program} {kind}", unit, mine, glibc, brisk, floor))
    fmt = lambda x, floor: "–" if x is None or floor is None else f"{x - floor:.1f}"
    lines = ["#### Instructions per operation (callgrind)", "",
             "`valgrind --tool=callgrind <build>/bench/region_X callgrind KIND N` at two N, "
             "the difference divided: the user patterns above (one thread; the hybrid's "
             "sequence of thread 0, one hybrid for all rounds), less the same loop and "
             "writes with no allocator (`floor`), so each figure is the allocator's own, "
             "its calls included. Zeroing is counted as callgrind sees it: glibc's memset "
             "clears big ranges with `rep stosb`, one instruction per byte for callgrind, so "
             "the fifo, which zeroes a page's used part in one go when it reuses the page, "
             "counts about one per byte it hands out, where a calloc that clears each block "
             "with vector stores counts a few.", "",
             "| pattern | per | region allocator | glibc malloc | brisk malloc | harness |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, unit, mine, glibc, brisk, floor in rows:
        lines.append(f"| {name} | {unit} | {fmt(mine, floor)} | {fmt(glibc, floor)} | "
                     f"{fmt(brisk, floor)} | {'–' if floor is None else f'{floor:.1f}'} |")
    return lines + [""]


# ---------------------------------------------------------------- publishing the regions

README = os.path.join(os.path.dirname(HERE), "README.md")
REGIONS_BEGIN = "<!-- regions table: written by bench/run.py, do not edit by hand -->"
REGIONS_END = "<!-- end of the regions table -->"


def git_revision() -> str:
    """HEAD's short hash, with "+changes" when tracked files differ from it."""
    try:
        rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    return (rev or "unknown") + ("+changes" if dirty.strip() else "")


def lscpu_model() -> str:
    """lscpu's "Model name", else /proc/cpuinfo's."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu_model()


def publish_regions(args, regions: List[RegionRun]) -> Optional[str]:
    """bench/results/published/<date>-regions/ (report.md, raw.csv, the scaling chart)
    and the README's regions table between its markers, from this run's region
    programs. Returns the report's path."""
    today = datetime.date.today().isoformat()
    folder = os.path.join(HERE, "results", "published", f"{today}-regions")
    os.makedirs(folder, exist_ok=True)
    rev, cpu = git_revision(), lscpu_model()
    command = f"python3 bench/run.py --build {args.build}" + \
        (f" --only {args.only}" if args.only else "") + \
        (f" --reps {args.reps}" if args.reps else "")
    lines = ["# brisk region allocators: benchmark report", "",
             f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"- commit: {rev}",
             f"- CPU: {cpu} (lscpu's model name), {os.cpu_count()} CPUs",
             f"- kernel: {platform.release()}",
             f"- command: `{command}` (`make bench` runs it)", ""]
    lines += region_section(regions)
    chart = write_scaling_chart(os.path.join(folder, "hybrid_scaling.png"), regions) \
        if import_pyplot() is not None else None
    if chart:
        lines += ["![seed 003's experiment: wall time by thread count](hybrid_scaling.png)", ""]
    report = os.path.join(folder, "report.md")
    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "raw.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["program", "args", "exit_code", "wall_s", "output", "error"])
        for r in regions:
            writer.writerow([r.name, " ".join(r.argv[1:]), r.exit_code, f"{r.wall_s:.4f}",
                             " | ".join(r.kv_lines), r.error])
    table = user_table(regions)
    if table and os.path.exists(README):
        with open(README) as f:
            text = f.read()
        begin, end = text.find(REGIONS_BEGIN), text.find(REGIONS_END)
        if 0 <= begin < end:
            relative = os.path.relpath(report, os.path.dirname(README))
            body = [REGIONS_BEGIN, "",
                    f"Measured on {today} at commit {rev} on an {cpu} (lscpu's model name; "
                    f"{os.cpu_count()} CPUs, shared), by `make bench` ({command}); report: "
                    f"[`{relative}`]({relative}). Each cell: the region allocator's median "
                    "ns and malloc's, then malloc's time over the allocator's (✓: goal met).",
                    ""] + table + [""]
            if chart:
                image = os.path.relpath(chart, os.path.dirname(README))
                body += [f"![seed 003's experiment: wall time by thread count]({image})", ""]
            body += [REGIONS_END]
            text = text[:begin] + "\n".join(body) + text[end + len(REGIONS_END):]
            with open(README, "w") as f:
                f.write(text)
        else:
            print(f"run.py: {README} has no regions table markers; left alone", file=sys.stderr)
    return report


# ---------------------------------------------------------------- main

# Names --only takes besides workload names; each stands for the workloads listed.
WORKLOAD_GROUPS = {
    "classic": ["rptest", "alloc_test", "alloc_test_mt", "glibc_simple", "glibc_thread",
                "cfrac_like", "tree_like", "mleak", "sh8bench_like"],
    "real": real_programs.NAMES,
}
# brisk's rivals in the real programs' "best peer" column (not --lib builds).
PEER_NAMES = [name for name in ALLOCATOR_NAMES if name != "brisk"]


def expand_groups(text: Optional[str]) -> Optional[str]:
    """--only's comma-separated list with each group name replaced by its workloads."""
    if not text:
        return text
    names = []
    for name in (n.strip() for n in text.split(",")):
        names += [n for n in WORKLOAD_GROUPS.get(name, [name]) if n not in names]
    return ",".join(names)


def parse_list(text: Optional[str], known: List[str], what: str) -> List[str]:
    if not text:
        return list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"run.py: unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="CMake build directory (default: build)")
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions")
    parser.add_argument("--reps", type=int, help="repetitions (default 5, --quick 3)")
    parser.add_argument("--only", help="comma-separated workloads; 'regions' selects the "
                        "region allocator programs (run unless --only leaves them out), "
                        "'classic' the classic benchmarks' shapes (rptest ... sh8bench_like), "
                        "'real' the real programs (" + ", ".join(real_programs.NAMES) + ")")
    parser.add_argument("--alloc", help=f"comma-separated allocators ({','.join(ALLOCATOR_NAMES)})")
    parser.add_argument("--callgrind", action="store_true",
                        help="also count instructions per operation under callgrind "
                             "(malloc/free by size, calloc, realloc; ring's free-oldest + "
                             "malloc by size, minus its baseline loop)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"),
                        help="output directory (default: bench/results)")
    parser.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                        help="also measure the allocator in shared library PATH under NAME "
                             "(e.g. an older brisk build: --lib brisk-before=/tmp/old/libbrisk.so); "
                             "repeatable")
    parser.add_argument("--no-publish", action="store_true",
                        help="a full run that includes the region programs rewrites "
                             "bench/results/published/<date>-regions/ and the README's regions "
                             "table, one with the real programs <date>-real/ and the README's "
                             "real programs table; this leaves them alone")
    parser.add_argument("--smoke", action="store_true",
                        help="CI: each workload once at quick size under brisk; no report")
    args = parser.parse_args()

    workloads = make_workloads(os.cpu_count() or 1)
    wanted = parse_list(expand_groups(args.only),
                        [w.name for w in workloads] + ["regions"] + real_programs.NAMES,
                        "workload")
    workloads = [w for w in workloads if w.name in wanted]
    with_regions = "regions" in wanted
    real_wanted = [w for w in real_programs.WORKLOADS if w.name in wanted]
    # The real programs' reference runs: no preload.
    no_preload = Allocator("glibc", None, "libc6").env()
    for w in workloads:
        program = os.path.join(args.build, "bench", w.program)
        if not os.access(program, os.X_OK):
            sys.exit(f"run.py: {program} not found; build the benchmarks first "
                     f"(cmake --build {args.build})")

    if args.smoke:
        notes = []
        allocators = find_allocators(["brisk"], args.build, notes)
        if not allocators:
            print(f"run.py --smoke: {notes[0]}", file=sys.stderr)
            return 1
        runs = run_matrix(args.build, workloads, allocators, 1, "quick", None)
        real = real_programs.run_real(real_wanted, allocators, 1, "quick", no_preload, None) \
            if real_wanted else None
        regions = run_regions(args.build, True, None) if with_regions else []
        for r in runs:
            status = "ok" if r.ok else f"FAILED ({r.error})"
            output = r.output if len(r.output) <= 300 else r.output[:300] + " ..."
            print(f"{r.workload:13s} brisk {status}  wall={r.wall_s:.3f}s  {output}")
        for r in regions:
            status = "ok" if r.exit_code == 0 else f"FAILED ({r.error})"
            print(f"{r.name:13s} linked {status}  wall={r.wall_s:.3f}s  {' '.join(r.kv_lines)}")
        if real is not None:
            print("\n".join(real_programs.smoke_lines(real)))
        ok = all(r.ok for r in runs) and all(r.exit_code == 0 for r in regions) and \
            (real is None or not real.failed())
        return 0 if ok else 1

    args.reps = args.reps or (3 if args.quick else 5)
    if args.reps < 1:
        sys.exit("run.py: --reps must be at least 1")
    notes: List[str] = []
    allocators = find_allocators(parse_list(args.alloc, ALLOCATOR_NAMES, "allocator"),
                                 args.build, notes)
    for spec in args.lib:
        name, sep, path = spec.partition("=")
        if not sep or not name or not os.path.exists(path):
            sys.exit(f"run.py: --lib wants NAME=PATH of an existing library, got '{spec}'")
        allocators.append(Allocator(name, os.path.abspath(path), None))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not allocators:
        sys.exit("run.py: no allocator to measure")

    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    runs = run_matrix(args.build, workloads, allocators, args.reps,
                      "quick" if args.quick else "full", os.path.join(args.out, "raw.csv"))

    # Before anything imports matplotlib: without GNU time, the real programs' peak RSS
    # cannot read below this process's own.
    real = real_programs.run_real(real_wanted, allocators, args.reps,
                                  "quick" if args.quick else "full", no_preload,
                                  os.path.join(args.out, "raw.csv")) if real_wanted else None

    regions = run_regions(args.build, args.quick, os.path.join(args.out, "raw.csv")) \
        if with_regions else None
    global REGION_INSTRUCTIONS
    if regions and args.callgrind:
        REGION_INSTRUCTIONS = region_callgrind(args.build)

    callgrind = None
    # The general workloads' counts; --only regions asks for the region ones alone.
    if args.callgrind and workloads:
        if shutil.which("valgrind") is None:
            notes.append("callgrind skipped: valgrind is not installed (Debian package valgrind)")
        else:
            callgrind = run_callgrind(args.build, allocators, args.out)

    table = summarize(runs, workloads, allocators)
    charts = []
    if import_pyplot() is None:
        notes.append("no charts: matplotlib is not installed (Debian package python3-matplotlib)")
    elif workloads:
        charts.append(("relative time per workload",
                       write_chart(os.path.join(args.out, "relative_time.png"), workloads,
                                   allocators, table, "time_ratio")))
        charts.append(("relative peak RSS per workload",
                       write_chart(os.path.join(args.out, "relative_rss.png"), workloads,
                                   allocators, table, "rss_ratio")))
        if any(w.name == "rss_cycle" for w in workloads):
            chart = write_rss_chart(os.path.join(args.out, "rss_over_time.png"), "rss_cycle",
                                    allocators, runs)
            if chart:
                charts.append(("rss_cycle: RSS over time", chart))
    if import_pyplot() is not None and regions:
        chart = write_scaling_chart(os.path.join(args.out, "hybrid_scaling.png"), regions)
        if chart:
            charts.append(("hybrid pool, pool and buddy against malloc by thread count", chart))
    if regions and not args.quick and not args.no_publish:
        published = publish_regions(args, regions)
        print(f"regions published: {published}", file=sys.stderr)
    if real and real.workloads and not args.quick and not args.no_publish:
        command = f"python3 bench/run.py --build {args.build}" + \
            (f" --only {args.only}" if args.only else "") + \
            (f" --alloc {args.alloc}" if args.alloc else "") + f" --reps {args.reps}"
        published = real_programs.publish(real, PEER_NAMES, command, git_revision(),
                                          lscpu_model(), README)
        print(f"real programs published: {published}", file=sys.stderr)
    report = os.path.join(args.out, "report.md")
    write_report(report, args, workloads, allocators, runs, table, callgrind, notes, charts,
                 regions, real)
    print(f"done in {format_duration(time.monotonic() - started)}: {report}", file=sys.stderr)

    brisk_failed = any(r.allocator == "brisk" and not r.ok for r in runs)
    if regions and any(r.exit_code != 0 for r in regions):
        print("run.py: a region allocator program failed (see report)", file=sys.stderr)
        brisk_failed = True
    if callgrind and any("error" in r for r in callgrind.get("brisk", {}).values()):
        brisk_failed = True
    if real is not None:
        for r in real.failed():
            # A peer's mismatch is the peer's problem, but never quietly.
            print(f"run.py: real program {r.workload} under {r.allocator} failed: {r.error}",
                  file=sys.stderr)
        if real.failed("brisk") or real.failed("reference"):
            brisk_failed = True
    if brisk_failed:
        print("run.py: brisk failed at least one run (see report)", file=sys.stderr)
    return 1 if brisk_failed else 0


if __name__ == "__main__":
    sys.exit(main())
