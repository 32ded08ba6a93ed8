"""Real Debian programs under each allocator: the benchmark's group "real" (run.py).

Each workload is a program from Debian (Debian's /usr/bin/python3, sqlite3, gcc,
g++) with a fixed input kept in bench/real/; every allocator but glibc comes in by
LD_PRELOAD, which reaches the programs a compiler driver starts (cc1, cc1plus, as).

Before the timed runs each workload runs once without a preload: that run warms
the page cache and its output is the reference. Every timed run's stdout (and
the files a workload writes, such as the compiler's object file) must equal the
reference byte for byte; a run that differs is a failure, reported as an output
mismatch and never part of a median. Runs are interleaved (repetition, then
workload, then allocator, the allocator order rotated by one each repetition),
and each cell is the median wall time of its good runs, with the median CPU
time (user + system, all threads and processes) beside it: on a machine that
others share, CPU time moves less than wall time. Peak RSS is the
program's ru_maxrss, which covers the processes it waited for (the compiler's
cc1plus and as): the largest of them, as GNU time reports it (without GNU time,
wait4's, which cannot read below this Python process's own high-water mark; the
report then says so).
"""

import csv
import datetime
import math
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import child

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_DIR = os.path.join(HERE, "real")

TIMEOUT_S = {"full": 300, "quick": 60}


@dataclass
class RealWorkload:
    name: str
    about: str
    # argv per size; "{real}" is bench/real, "{tmp}" the run's scratch folder,
    # "{work}" a folder kept for the whole group, which setup fills.
    full: List[str]
    quick: List[str]
    stdin: Optional[str] = None  # file under bench/real fed on standard input
    env: Dict[str, str] = field(default_factory=dict)
    files: List[str] = field(default_factory=list)  # written under {tmp}, compared too
    # setup(work, size, env) prepares the input before the reference run, untimed;
    # it returns an error message or "".
    setup: Optional[Callable[[str, str, Dict[str, str]], str]] = None
    # equivalent(stdout, reference stdout, env): "" when a stdout that differs from
    # the reference's bytes is still the same result, else what differs.
    equivalent: Optional[Callable[[bytes, bytes, Dict[str, str]], str]] = None

    @property
    def program(self) -> str:
        return self.full[0]

    def argv(self, size: str, tmp: str, work: str = "") -> List[str]:
        return [a.replace("{real}", REAL_DIR).replace("{tmp}", tmp).replace("{work}", work)
                for a in (self.quick if size == "quick" else self.full)]

    def shown_args(self, size: str) -> str:
        """The command as the report shows it, with bench/real/ relative."""
        return shlex.join(a.replace("{real}", "bench/real").replace("{tmp}", "TMP")
                          .replace("{work}", "WORK")
                          for a in (self.quick if size == "quick" else self.full)) + \
            (f" < bench/real/{self.stdin}" if self.stdin else "")


PYTHON = "/usr/bin/python3"  # Debian's, not whichever python3 is first on PATH
# A fixed hash seed: the script's output must not depend on string hashing.
PYTHON_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
# Fixed code generation: no random seed in the object file, no locale in messages.
COMPILE = ["-O2", "-frandom-seed=brisk", "-c"]

GIT = "/usr/bin/git"
# No system or user configuration: pack settings (threads, window, compression)
# are the command line's alone.
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
GIT_COMMITS = {"full": 300, "quick": 60}


def git_setup(work: str, size: str, env: Dict[str, str]) -> str:
    """A bare repository at WORK/history.git made by bench/real/git_history.py."""
    repo = os.path.join(work, "history.git")
    env = dict(env, **GIT_ENV)
    init = subprocess.run([GIT, "init", "-q", "--bare", repo], env=env, capture_output=True,
                          text=True)
    if init.returncode != 0:
        return f"git init: {init.stderr.strip()}"
    # Piped from one to the other: the stream (tens of MiB) never enters this
    # process, whose high-water mark is the floor of wait4's peak RSS.
    stream = subprocess.Popen([sys.executable, os.path.join(REAL_DIR, "git_history.py"),
                               str(GIT_COMMITS[size])], env=env, stdout=subprocess.PIPE)
    load = subprocess.run([GIT, "-C", repo, "fast-import", "--quiet"], stdin=stream.stdout,
                          env=env, capture_output=True, text=True)
    stream.stdout.close()
    if stream.wait() != 0:
        return f"git_history.py exited with {stream.returncode}"
    if load.returncode != 0:
        return f"git fast-import: {load.stderr.strip()}"
    return ""


def git_pack_objects(pack: bytes, env: Dict[str, str]):
    """The sorted object names a pack holds, from git index-pack (which checks every
    object and delta in it), or an error message."""
    with tempfile.TemporaryDirectory(prefix="brisk-real-pack-") as tmp:
        path = os.path.join(tmp, "p.pack")
        with open(path, "wb") as f:
            f.write(pack)
        env = dict(env, **GIT_ENV)
        index = subprocess.run([GIT, "index-pack", "-o", path[:-4] + "idx", path], env=env,
                               capture_output=True, text=True)
        if index.returncode != 0:
            return f"git index-pack rejects the pack: {index.stderr.strip()}"
        with open(path[:-4] + "idx", "rb") as idx:
            shown = subprocess.run([GIT, "show-index"], stdin=idx, env=env,
                                   capture_output=True, text=True)
        return sorted(line.split()[1] for line in shown.stdout.splitlines())


def git_same_objects(pack: bytes, reference: bytes, env: Dict[str, str]) -> str:
    """Two threads may split the delta search differently from run to run: a pack
    whose bytes differ is the same result when it is valid and holds the same
    objects."""
    mine, theirs = git_pack_objects(pack, env), git_pack_objects(reference, env)
    if isinstance(mine, str):
        return mine
    if mine != theirs:
        return f"the pack holds {len(mine)} objects, not the reference's {len(theirs)} ones"
    return ""


WORKLOADS = [
    RealWorkload(
        "python_objects",
        "Debian's python3 runs bench/real/python_objects.py: dicts, lists, strings, small "
        "class instances, json dumps/loads, sorting and grouping, trees of small objects; "
        "pymalloc in front of malloc (the default)",
        full=[PYTHON, "{real}/python_objects.py", "30"],
        quick=[PYTHON, "{real}/python_objects.py", "10"],
        env=dict(PYTHON_ENV)),
    RealWorkload(
        "python_malloc",
        "the same script with PYTHONMALLOC=malloc: every object through malloc",
        full=[PYTHON, "{real}/python_objects.py", "30"],
        quick=[PYTHON, "{real}/python_objects.py", "10"],
        env=dict(PYTHON_ENV, PYTHONMALLOC="malloc")),
    RealWorkload(
        "sqlite",
        "sqlite3 :memory: runs bench/real/sqlite_events.sql: a table of events with text "
        "and blobs (100,000 rows; quick: 20,000), indexes, group by, LIKE scans, a window "
        "function, updates, deletes, an index rebuild and VACUUM",
        full=["/usr/bin/sqlite3", "-bail", "-cmd", ".parameter set @rows 100000", ":memory:"],
        quick=["/usr/bin/sqlite3", "-bail", "-cmd", ".parameter set @rows 20000", ":memory:"],
        stdin="sqlite_events.sql"),
    RealWorkload(
        "gcc_c",
        "gcc -O2 -c bench/real/compile_me.c (an interpreter, a hash table, generic code "
        "stamped out by macros for 10 types; quick: 2); the object file is compared too",
        full=["/usr/bin/gcc"] + COMPILE + ["{real}/compile_me.c", "-o", "{tmp}/out.o"],
        quick=["/usr/bin/gcc"] + COMPILE + ["-DBRISK_REAL_QUICK", "{real}/compile_me.c",
                                            "-o", "{tmp}/out.o"],
        files=["out.o"]),
    RealWorkload(
        "gxx",
        "g++ -O2 -c bench/real/compile_me.cc (std::map, unordered_map, set, vector, string, "
        "string streams, variant, function, templates instantiated for two types; quick: "
        "without the instantiations); the object file is compared too",
        full=["/usr/bin/g++"] + COMPILE + ["{real}/compile_me.cc", "-o", "{tmp}/out.o"],
        quick=["/usr/bin/g++"] + COMPILE + ["-DBRISK_REAL_QUICK", "{real}/compile_me.cc",
                                            "-o", "{tmp}/out.o"],
        files=["out.o"]),
    RealWorkload(
        "git_pack",
        "multi-threaded: git pack-objects --threads=2 packs a repository made by "
        "bench/real/git_history.py (300 commits editing 200 text files; quick: 60) "
        "from scratch, every delta searched anew; its stdout, the pack, is compared, and "
        "when its bytes differ (the two threads may split the work differently) git "
        "index-pack must accept it and find the same objects",
        full=[GIT, "-C", "{work}/history.git", "pack-objects", "--threads=2", "--all",
              "--revs", "--no-reuse-delta", "--no-reuse-object", "--window=50", "--depth=50",
              "--stdout", "-q"],
        quick=[GIT, "-C", "{work}/history.git", "pack-objects", "--threads=2", "--all",
               "--revs", "--no-reuse-delta", "--no-reuse-object", "--window=50", "--depth=50",
               "--stdout", "-q"],
        env=dict(GIT_ENV), setup=git_setup, equivalent=git_same_objects),
]
NAMES = [w.name for w in WORKLOADS]


@dataclass
class RealRun:
    rep: int  # 0 for the reference run
    workload: str
    allocator: str  # "reference" for the run without preload before the timed ones
    exit_code: int
    wall_s: float
    maxrss_kib: int
    output_ok: bool = False
    error: str = ""
    cpu_s: float = math.nan  # user + system of the program and its waited-for children

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.output_ok and not self.error


@dataclass
class RealCell:
    runs: int
    ok: int
    wall_med: float = math.nan
    wall_min: float = math.nan
    wall_max: float = math.nan
    cpu_med: float = math.nan
    rss_med: float = math.nan  # KiB


@dataclass
class RealResults:
    size: str
    workloads: List[RealWorkload]
    allocators: list  # run.py's Allocator objects
    runs: List[RealRun]
    table: Dict[str, Dict[str, RealCell]]
    floor_kib: int  # without GNU time, this process's ru_maxrss: no peak reads below it
    skipped: List[str]

    def failed(self, allocator: Optional[str] = None) -> List[RealRun]:
        return [r for r in self.runs if not r.ok and
                (allocator is None or r.allocator == allocator)]


def clean_env(allocator_env: Dict[str, str], extra: Dict[str, str]) -> Dict[str, str]:
    """The allocator's environment without Python or locale settings that change what
    the programs print or how they allocate, plus the workload's own."""
    env = {k: v for k, v in allocator_env.items()
           if not k.startswith("PYTHON") and not k.startswith("LC_") and k != "LANG"}
    env["LC_ALL"] = "C"
    env.update(extra)
    return env


# GNU time (Debian package time) forks the program from its own small image and
# prints the program's ru_maxrss. Without it the figure is wait4's of a child of
# this process, which also holds this process's high-water mark (exec keeps it).
GNU_TIME = "/usr/bin/time"


def spawn(argv, env, stdin_path, timeout):
    """Runs argv; returns (exit code, wall seconds, CPU seconds, peak RSS KiB, stdout
    bytes, stderr). CPU seconds: user + system time of the program and the
    descendants it waited for.

    The peak RSS is ru_maxrss, which covers the program and the descendants it
    waited for: GNU time's report when it is installed, else os.wait4's. A killed
    program gives minus the signal number; the time limit kills its process group."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(prefix="brisk-real-rss-") as rss_file:
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        timed = os.access(GNU_TIME, os.X_OK)
        if timed:
            argv = [GNU_TIME, "-f", "%M", "-o", rss_file.name, "--"] + argv
        try:
            code, wall, usage, timed_out = child.run_with_limit(argv, env, timeout, out, err,
                                                                stdin=stdin, own_group=True)
        finally:
            if stdin_path:
                stdin.close()
        maxrss = usage.ru_maxrss
        if timed:
            # %M on the last line; before it, for a program killed by signal N (GNU
            # time then exits 128+N), "Command terminated by signal N".
            lines = open(rss_file.name).read().split("\n")
            lines = [line.strip() for line in lines if line.strip()]
            if lines and lines[-1].isdigit():
                maxrss = int(lines[-1])
            for line in lines:
                if line.startswith("Command terminated by signal "):
                    code = -int(line.split()[-1])
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read().decode(errors="replace")
        if timed_out:
            stderr += f"\nkilled after the {timeout:.0f} s time limit"
        cpu = usage.ru_utime + usage.ru_stime
        return code, wall, cpu, maxrss, stdout, stderr


def run_once(w: RealWorkload, env: Dict[str, str], size: str, work: str):
    """One run in a fresh scratch folder: (exit code, wall, cpu, maxrss, outputs,
    error), outputs being stdout and then each of w.files, as bytes (None: not
    written)."""
    with tempfile.TemporaryDirectory(prefix="brisk-real-") as tmp:
        stdin = os.path.join(REAL_DIR, w.stdin) if w.stdin else None
        code, wall, cpu, rss, stdout, stderr = spawn(w.argv(size, tmp, work),
                                                clean_env(env, w.env), stdin, TIMEOUT_S[size])
        outputs = [stdout]
        for name in w.files:
            path = os.path.join(tmp, name)
            outputs.append(open(path, "rb").read() if os.path.exists(path) else None)
    error = ""
    if "cannot be preloaded" in stderr:
        # ld.so only warns and runs the program with the C library's malloc.
        error = "the preload did not load: " + stderr.strip().splitlines()[0]
    elif code != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        error = f"{what}: {last}" if last else what
    return code, wall, cpu, rss, outputs, error


def mismatch(w: RealWorkload, outputs, reference, env: Dict[str, str]) -> str:
    """Empty when outputs equal the reference (or, for a workload with its own
    equivalence, stdout is the same result), else what differs."""
    names = ["stdout"] + w.files
    for name, got, want in zip(names, outputs, reference):
        if got != want:
            if got is None:
                return f"OUTPUT MISMATCH: {name} was not written"
            if name == "stdout" and w.equivalent:
                why = w.equivalent(got, want, clean_env(env, w.env))
                if not why:
                    continue
                return f"OUTPUT MISMATCH: {why}"
            return (f"OUTPUT MISMATCH: {name} differs from the run without preload "
                    f"({len(got)} bytes, reference {len(want)})")
    return ""


def available(workloads: List[RealWorkload]):
    """(the workloads whose program and inputs exist, notes on the others)."""
    found, notes = [], []
    for w in workloads:
        if not os.access(w.program, os.X_OK):
            notes.append(f"{w.name} skipped: {w.program} is not installed "
                         "(scripts/ensure-deps.sh bench installs it)")
        else:
            found.append(w)
    return found, notes


def run_real(workloads: List[RealWorkload], allocators, reps: int, size: str,
             reference_env: Dict[str, str], csv_path: Optional[str],
             log=sys.stderr) -> RealResults:
    """The reference run of each workload, then reps interleaved timed runs of each
    (workload, allocator); rows are appended to csv_path (run.py's raw.csv columns)."""
    with tempfile.TemporaryDirectory(prefix="brisk-real-work-") as work:
        return run_in(workloads, allocators, reps, size, reference_env, csv_path, log, work)


def run_in(workloads, allocators, reps, size, reference_env, csv_path, log,
           work: str) -> RealResults:
    """run_real's body, with WORK the folder the setups fill."""
    workloads, skipped = available(workloads)
    for note in skipped:
        print(f"note: {note}", file=log)
    runs: List[RealRun] = []
    references = {}
    for w in workloads:
        print(f"[real] {w.name:14s} reference run (no preload)", file=log, flush=True)
        error = w.setup(work, size, clean_env(reference_env, w.env)) if w.setup else ""
        if error:
            runs.append(RealRun(0, w.name, "reference", -1, 0.0, 0, False, f"setup: {error}"))
            print(f"      FAILED to set up: {error}; {w.name} is left out", file=log,
                  flush=True)
            continue
        code, wall, cpu, rss, outputs, error = run_once(w, reference_env, size, work)
        run = RealRun(0, w.name, "reference", code, wall, rss, code == 0, error, cpu)
        runs.append(run)
        if run.ok:
            references[w.name] = outputs
        else:
            print(f"      FAILED without preload: {error}; {w.name} is left out",
                  file=log, flush=True)
    measured = [w for w in workloads if w.name in references]
    plan = []
    for rep in range(reps):
        # Rotated by one each repetition: no allocator always runs first or after
        # the same neighbour.
        order = allocators[rep % len(allocators):] + allocators[:rep % len(allocators)] \
            if allocators else []
        plan += [(rep, w, a) for w in measured for a in order]
    for index, (rep, w, a) in enumerate(plan):
        print(f"[real {index + 1:3d}/{len(plan)}] {w.name:14s} {a.name:10s} "
              f"rep {rep + 1}/{reps}", file=log, flush=True)
        code, wall, cpu, rss, outputs, error = run_once(w, a.env(), size, work)
        if not error:
            error = mismatch(w, outputs, references[w.name], reference_env)
        run = RealRun(rep + 1, w.name, a.name, code, wall, rss, not error, error, cpu)
        runs.append(run)
        if error:
            print(f"      FAILED: {error}", file=log, flush=True)
    if csv_path:
        with open(csv_path, "a", newline="") as f:
            writer = csv.writer(f)
            for r in runs:
                w = next(x for x in workloads if x.name == r.workload)
                writer.writerow([r.rep, r.workload, r.allocator, r.exit_code, f"{r.wall_s:.4f}",
                                 r.maxrss_kib, r.maxrss_kib, "", w.shown_args(size),
                                 f"cpu_s={r.cpu_s:.4f}" +
                                 (" output same as without preload" if r.output_ok else ""),
                                 r.error])
    floor = 0 if os.access(GNU_TIME, os.X_OK) else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    table = summarize(runs, measured, allocators)
    return RealResults(size, measured, allocators, runs, table, floor, skipped)


def summarize(runs: List[RealRun], workloads, allocators) -> Dict[str, Dict[str, RealCell]]:
    table = {}
    for w in workloads:
        row = {}
        for a in allocators:
            mine = [r for r in runs if r.workload == w.name and r.allocator == a.name]
            good = [r for r in mine if r.ok]
            cell = RealCell(len(mine), len(good))
            if good:
                walls = [r.wall_s for r in good]
                cell.wall_med = statistics.median(walls)
                cell.wall_min, cell.wall_max = min(walls), max(walls)
                cell.cpu_med = statistics.median(r.cpu_s for r in good)
                cell.rss_med = statistics.median(r.maxrss_kib for r in good)
            row[a.name] = cell
        table[w.name] = row
    return table


# ---------------------------------------------------------------- report

def best_peer(row: Dict[str, RealCell], peers: List[str], key="wall_med"):
    """(name, cell) of the peer with the lowest median time (wall_med or cpu_med),
    or (None, None)."""
    done = [(name, row[name]) for name in peers if name in row and row[name].ok]
    return min(done, key=lambda nc: getattr(nc[1], key)) if done else (None, None)


def geomean(values: List[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}" if math.isfinite(kib) else "-"


def summary_table(results: RealResults, peers: List[str]) -> List[str]:
    """Per workload: brisk's median wall time, the best peer's, their ratio, the
    same ratio in CPU time, glibc's time, peak RSS."""
    lines = ["| program | brisk (s) | best peer (s) | brisk ÷ best peer (wall) | "
             "brisk ÷ best peer (CPU) | glibc (s) | peak RSS brisk / best peer / glibc (MiB) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios, cpu_ratios = [], []
    bold = lambda r: f"**{r:.2f}**" if r <= 1.0 else f"{r:.2f}"
    for w in results.workloads:
        row = results.table[w.name]
        brisk, glibc = row.get("brisk"), row.get("glibc")
        name, peer = best_peer(row, peers)
        cpu_name, cpu_peer = best_peer(row, peers, "cpu_med")
        if not brisk or not brisk.ok or peer is None:
            what = "brisk failed" if brisk and not brisk.ok else "not measured"
            lines.append(f"| {w.name} | {what} | - | - | - | - | - |")
            continue
        ratio = brisk.wall_med / peer.wall_med
        cpu_ratio = brisk.cpu_med / cpu_peer.cpu_med
        ratios.append(ratio)
        cpu_ratios.append(cpu_ratio)
        glibc_time = f"{glibc.wall_med:.3f}" if glibc and glibc.ok else "-"
        glibc_rss = mib(glibc.rss_med) if glibc and glibc.ok else "-"
        lines.append(f"| {w.name} | {brisk.wall_med:.3f} | {name} {peer.wall_med:.3f} "
                     f"| {bold(ratio)} | {bold(cpu_ratio)} ({cpu_name}) | {glibc_time} "
                     f"| {mib(brisk.rss_med)} / {mib(peer.rss_med)} / {glibc_rss} |")
    if ratios:
        lines += ["", f"Geometric mean of brisk's time over the best peer's: "
                  f"{geomean(ratios):.3f} in wall time, {geomean(cpu_ratios):.3f} in CPU time "
                  f"({len(ratios)} programs; below 1: brisk faster)."]
    return lines


def report_section(results: RealResults, peers: List[str]) -> List[str]:
    """The report's "Real programs" section: the summary, then one table per program."""
    lines = ["## Real programs (LD_PRELOAD)", "",
             "Debian's programs with fixed inputs from `bench/real/`, each allocator but glibc "
             "by `LD_PRELOAD`, which reaches the processes a compiler driver starts. Each "
             "workload first runs once without a preload (warm-up and reference); every timed "
             "run's stdout, and the object file a compiler writes, must equal that run's, byte "
             "for byte, or the run is a failure (listed below, never in a median). Repetitions "
             "interleaved (repetition → program → allocator, the allocator order rotated each "
             "repetition). Time: wall time of the whole process tree, median [min–max]; CPU: "
             "user + system time of all its processes and threads, median (it moves less "
             "than wall time when other work shares the machine). Peak "
             "RSS: ru_maxrss of the largest process of the tree, as GNU time reports it, "
             "median" + (f" (GNU time was missing: wait4's figure, which cannot read below the "
                         f"launching Python process's high-water mark, "
                         f"{mib(results.floor_kib)} MiB in this run)" if results.floor_kib
                         else "") + ".", ""]
    lines += summary_table(results, peers) + [""]
    for w in results.workloads:
        row = results.table[w.name]
        lines += [f"### {w.name}", "", f"{w.about}. Command: `{w.shown_args(results.size)}`", "",
                  "| allocator | time (s) | CPU (s) | peak RSS (MiB) | time ratio | output "
                  "| runs ok |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        done = [c for c in row.values() if c.ok]
        best = min(c.wall_med for c in done) if done else math.nan
        for a in results.allocators:
            c = row[a.name]
            if not c.ok:
                lines.append(f"| {a.name} | failed | - | - | - | - | {c.ok}/{c.runs} |")
                continue
            ratio = c.wall_med / best
            is_best = abs(ratio - 1.0) < 1e-12
            name = f"**{a.name}**" if is_best else a.name
            output = "same" if c.ok == c.runs else f"{c.runs - c.ok} differ or failed"
            shown = f"**{ratio:.2f}**" if is_best else f"{ratio:.2f}"
            lines.append(f"| {name} | {c.wall_med:.3f} [{c.wall_min:.3f}–{c.wall_max:.3f}] "
                         f"| {c.cpu_med:.3f} | {mib(c.rss_med)} | {shown} | {output} "
                         f"| {c.ok}/{c.runs} |")
        lines.append("")
    failures = results.failed()
    if failures or results.skipped:
        lines += ["### Failures and skipped programs", ""]
        lines += [f"- {note}" for note in results.skipped]
        lines += [f"- **{r.workload} / {r.allocator} rep {r.rep}: {r.error}**" for r in failures]
        lines.append("")
    return lines


def smoke_lines(results: RealResults) -> List[str]:
    """One line per run for run.py --smoke."""
    lines = []
    for r in results.runs:
        status = "ok" if r.ok else f"FAILED ({r.error})"
        lines.append(f"{r.workload:14s} {r.allocator:9s} {status}  wall={r.wall_s:.3f}s  "
                     f"maxrss={r.maxrss_kib}KiB" +
                     ("  output same as without preload" if r.ok and r.rep else ""))
    return lines + [f"{note}" for note in results.skipped]


# ---------------------------------------------------------------- publishing

README_BEGIN = "<!-- real programs table: written by bench/run.py, do not edit by hand -->"
README_END = "<!-- end of the real programs table -->"


def publish(results: RealResults, peers: List[str], command: str, rev: str, cpu: str,
            readme: str) -> str:
    """bench/results/published/<date>-real/ (report.md, raw.csv) and the README's real
    programs table between its markers. Returns the report's path."""
    today = datetime.date.today().isoformat()
    folder = os.path.join(HERE, "results", "published", f"{today}-real")
    os.makedirs(folder, exist_ok=True)
    lines = ["# brisk on real programs: benchmark report", "",
             f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"- commit: {rev}",
             f"- CPU: {cpu} (lscpu's model name), {os.cpu_count()} CPUs",
             f"- command: `{command}`", ""]
    lines += report_section(results, peers)
    report = os.path.join(folder, "report.md")
    with open(report, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "raw.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rep", "workload", "allocator", "exit_code", "wall_s", "cpu_s",
                         "maxrss_kib", "output_ok", "error"])
        for r in results.runs:
            writer.writerow([r.rep, r.workload, r.allocator, r.exit_code, f"{r.wall_s:.4f}",
                             f"{r.cpu_s:.4f}", r.maxrss_kib, int(r.output_ok), r.error])
    if os.path.exists(readme):
        with open(readme) as f:
            text = f.read()
        begin, end = text.find(README_BEGIN), text.find(README_END)
        if 0 <= begin < end:
            relative = os.path.relpath(report, os.path.dirname(readme))
            spreads = []
            for w in results.workloads:
                c = results.table[w.name].get("brisk")
                if c and c.ok:
                    spreads.append(f"{w.name} {c.wall_min:.2f}–{c.wall_max:.2f}")
            body = [README_BEGIN, "",
                    f"Measured on {today} at commit {rev} on an {cpu} (lscpu's model name; "
                    f"{os.cpu_count()} CPUs, shared), by `{command}`; report with every "
                    f"allocator, min–max and the commands: [`{relative}`]({relative}). "
                    "Medians of the interleaved repetitions, wall seconds of the whole "
                    "process tree (the CPU column: the same ratio in user + system seconds); "
                    "every run's output was checked against the run without preload.", ""]
            body += summary_table(results, peers) + [""]
            if spreads:
                body += ["brisk's min–max over the repetitions (s): " + ", ".join(spreads) +
                         ".", ""]
            body.append(README_END)
            text = text[:begin] + "\n".join(body) + text[end + len(README_END):]
            with open(readme, "w") as f:
                f.write(text)
        else:
            print(f"run.py: {readme} has no real programs table markers; left alone",
                  file=sys.stderr)
    return report
