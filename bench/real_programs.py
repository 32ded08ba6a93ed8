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
and each cell is the median wall time of its good runs. Peak RSS is wait4's
ru_maxrss of the program, which covers the processes it waited for (the
compiler's cc1plus and as): the largest of them. It cannot read below the
high-water mark of the Python process that starts the program (shown as the
launcher's floor in the report).
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
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_DIR = os.path.join(HERE, "real")

TIMEOUT_S = {"full": 300, "quick": 60}


@dataclass
class RealWorkload:
    name: str
    about: str
    # argv per size; "{real}" is bench/real, "{tmp}" the run's scratch folder.
    full: List[str]
    quick: List[str]
    stdin: Optional[str] = None  # file under bench/real fed on standard input
    env: Dict[str, str] = field(default_factory=dict)
    files: List[str] = field(default_factory=list)  # written under {tmp}, compared too

    @property
    def program(self) -> str:
        return self.full[0]

    def argv(self, size: str, tmp: str) -> List[str]:
        return [a.replace("{real}", REAL_DIR).replace("{tmp}", tmp)
                for a in (self.quick if size == "quick" else self.full)]

    def shown_args(self, size: str) -> str:
        """The command as the report shows it, with bench/real/ relative."""
        return shlex.join(a.replace("{real}", "bench/real").replace("{tmp}", "TMP")
                          for a in (self.quick if size == "quick" else self.full)) + \
            (f" < bench/real/{self.stdin}" if self.stdin else "")


PYTHON = "/usr/bin/python3"  # Debian's, not whichever python3 is first on PATH
# A fixed hash seed: the script's output must not depend on string hashing.
PYTHON_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
# Fixed code generation: no random seed in the object file, no locale in messages.
COMPILE = ["-O2", "-frandom-seed=brisk", "-c"]

WORKLOADS = [
    RealWorkload(
        "python_objects",
        "Debian's python3 runs bench/real/python_objects.py: dicts, lists, strings, small "
        "class instances, json dumps/loads, sorting and grouping, trees of small objects; "
        "pymalloc in front of malloc (the default)",
        full=[PYTHON, "{real}/python_objects.py", "50"],
        quick=[PYTHON, "{real}/python_objects.py", "10"],
        env=dict(PYTHON_ENV)),
    RealWorkload(
        "python_malloc",
        "the same script with PYTHONMALLOC=malloc: every object through malloc",
        full=[PYTHON, "{real}/python_objects.py", "50"],
        quick=[PYTHON, "{real}/python_objects.py", "10"],
        env=dict(PYTHON_ENV, PYTHONMALLOC="malloc")),
    RealWorkload(
        "sqlite",
        "sqlite3 :memory: runs bench/real/sqlite_events.sql: a table of events with text "
        "and blobs (150,000 rows; quick: 20,000), indexes, group by, LIKE scans, a window "
        "function, updates, deletes, an index rebuild and VACUUM",
        full=["/usr/bin/sqlite3", "-bail", "-cmd", ".parameter set @rows 150000", ":memory:"],
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
        "g++ -O2 -c bench/real/compile_me.cc (std::map, unordered_map, vector, string, "
        "variant, function, <regex>, templates over several types; quick: without <regex>, "
        "one type); the object file is compared too",
        full=["/usr/bin/g++"] + COMPILE + ["{real}/compile_me.cc", "-o", "{tmp}/out.o"],
        quick=["/usr/bin/g++"] + COMPILE + ["-DBRISK_REAL_QUICK", "{real}/compile_me.cc",
                                            "-o", "{tmp}/out.o"],
        files=["out.o"]),
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
    rss_med: float = math.nan  # KiB


@dataclass
class RealResults:
    size: str
    workloads: List[RealWorkload]
    allocators: list  # run.py's Allocator objects
    runs: List[RealRun]
    table: Dict[str, Dict[str, RealCell]]
    floor_kib: int  # the launcher's ru_maxrss: no peak RSS can read below it
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


def spawn(argv, env, stdin_path, timeout):
    """Runs argv; returns (exit code, wall seconds, ru_maxrss KiB, stdout bytes, stderr).

    Reaped with os.wait4, whose ru_maxrss covers the child and the descendants it
    waited for. A killed child gives minus the signal number."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        try:
            start = time.monotonic()
            proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, env=env)
            timed_out = []

            def kill():
                timed_out.append(True)
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

            timer = threading.Timer(timeout, kill)
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            wall = time.monotonic() - start
        finally:
            if stdin_path:
                stdin.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read().decode(errors="replace")
        if timed_out:
            stderr += f"\nkilled after the {timeout:.0f} s time limit"
        return proc.returncode, wall, usage.ru_maxrss, stdout, stderr


def run_once(w: RealWorkload, env: Dict[str, str], size: str):
    """One run in a fresh scratch folder: (exit code, wall, maxrss, outputs, error),
    outputs being stdout and then each of w.files, as bytes (None: not written)."""
    with tempfile.TemporaryDirectory(prefix="brisk-real-") as tmp:
        stdin = os.path.join(REAL_DIR, w.stdin) if w.stdin else None
        code, wall, rss, stdout, stderr = spawn(w.argv(size, tmp), clean_env(env, w.env),
                                                stdin, TIMEOUT_S[size])
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
    return code, wall, rss, outputs, error


def mismatch(w: RealWorkload, outputs, reference) -> str:
    """Empty when outputs equal the reference, else what differs."""
    names = ["stdout"] + w.files
    for name, got, want in zip(names, outputs, reference):
        if got != want:
            if got is None:
                return f"OUTPUT MISMATCH: {name} was not written"
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
    workloads, skipped = available(workloads)
    for note in skipped:
        print(f"note: {note}", file=log)
    runs: List[RealRun] = []
    references = {}
    for w in workloads:
        print(f"[real] {w.name:14s} reference run (no preload)", file=log, flush=True)
        code, wall, rss, outputs, error = run_once(w, reference_env, size)
        run = RealRun(0, w.name, "reference", code, wall, rss, code == 0, error)
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
        code, wall, rss, outputs, error = run_once(w, a.env(), size)
        if not error:
            error = mismatch(w, outputs, references[w.name])
        run = RealRun(rep + 1, w.name, a.name, code, wall, rss, not error, error)
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
                                 "output same as without preload" if r.output_ok else "",
                                 r.error])
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
                cell.rss_med = statistics.median(r.maxrss_kib for r in good)
            row[a.name] = cell
        table[w.name] = row
    return table


# ---------------------------------------------------------------- report

def best_peer(row: Dict[str, RealCell], peers: List[str]):
    """(name, cell) of the peer with the lowest median time, or (None, None)."""
    done = [(name, row[name]) for name in peers if name in row and row[name].ok]
    return min(done, key=lambda nc: nc[1].wall_med) if done else (None, None)


def geomean(values: List[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}" if math.isfinite(kib) else "-"


def summary_table(results: RealResults, peers: List[str]) -> List[str]:
    """Per workload: brisk's median time, the best peer's, their ratio, peak RSS."""
    lines = ["| program | brisk (s) | best peer (s) | brisk ÷ best peer (time) | glibc (s) | "
             "peak RSS brisk / best peer / glibc (MiB) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    ratios = []
    for w in results.workloads:
        row = results.table[w.name]
        brisk, glibc = row.get("brisk"), row.get("glibc")
        name, peer = best_peer(row, peers)
        if not brisk or not brisk.ok or peer is None:
            what = "brisk failed" if brisk and not brisk.ok else "not measured"
            lines.append(f"| {w.name} | {what} | - | - | - | - |")
            continue
        ratio = brisk.wall_med / peer.wall_med
        ratios.append(ratio)
        text = f"**{ratio:.2f}**" if ratio <= 1.0 else f"{ratio:.2f}"
        glibc_time = f"{glibc.wall_med:.3f}" if glibc and glibc.ok else "-"
        glibc_rss = mib(glibc.rss_med) if glibc and glibc.ok else "-"
        lines.append(f"| {w.name} | {brisk.wall_med:.3f} | {name} {peer.wall_med:.3f} | {text} "
                     f"| {glibc_time} | {mib(brisk.rss_med)} / {mib(peer.rss_med)} / "
                     f"{glibc_rss} |")
    if ratios:
        lines += ["", f"Geometric mean of brisk's time over the best peer's: "
                  f"{geomean(ratios):.3f} ({len(ratios)} programs; below 1: brisk faster)."]
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
             "repetition). Time: wall time of the whole process tree, median [min–max]. Peak "
             "RSS: wait4's ru_maxrss (the largest process of the tree), median; it cannot read "
             f"below the launching Python process's high-water mark, {mib(results.floor_kib)} "
             "MiB in this run.", ""]
    lines += summary_table(results, peers) + [""]
    for w in results.workloads:
        row = results.table[w.name]
        lines += [f"### {w.name}", "", f"{w.about}. Command: `{w.shown_args(results.size)}`", "",
                  "| allocator | time (s) | peak RSS (MiB) | time ratio | output | runs ok |",
                  "| --- | --- | --- | --- | --- | --- |"]
        done = [c for c in row.values() if c.ok]
        best = min(c.wall_med for c in done) if done else math.nan
        for a in results.allocators:
            c = row[a.name]
            if not c.ok:
                lines.append(f"| {a.name} | failed | - | - | - | {c.ok}/{c.runs} |")
                continue
            ratio = c.wall_med / best
            is_best = abs(ratio - 1.0) < 1e-12
            name = f"**{a.name}**" if is_best else a.name
            output = "same" if c.ok == c.runs else f"{c.runs - c.ok} differ or failed"
            lines.append(f"| {name} | {c.wall_med:.3f} [{c.wall_min:.3f}–{c.wall_max:.3f}] "
                         f"| {mib(c.rss_med)} | {f'**{ratio:.2f}**' if is_best else f'{ratio:.2f}'}"
                         f" | {output} | {c.ok}/{c.runs} |")
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
        writer.writerow(["rep", "workload", "allocator", "exit_code", "wall_s", "maxrss_kib",
                         "output_ok", "error"])
        for r in results.runs:
            writer.writerow([r.rep, r.workload, r.allocator, r.exit_code, f"{r.wall_s:.4f}",
                             r.maxrss_kib, int(r.output_ok), r.error])
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
                    "process tree; every run's output was checked against the run without "
                    "preload.", ""] + summary_table(results, peers) + [""]
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
