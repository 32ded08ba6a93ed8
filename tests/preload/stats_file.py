#!/usr/bin/env python3
"""stats_file.py LIBBRISK PROGRAM PLOT_TOOL PLOT_PYTHON: the statistics options, end to end.

Runs PROGRAM (tests/preload/stats_program.c) with brisk preloaded and
BRISK_STATS=1, BRISK_STATS_FILE, BRISK_STATS_INTERVAL_MS=10 and a bad
BRISK_PURGE_DELAY_MS, then checks: one warning naming the bad option and its
value; the table on stderr at exit; every line of the file one JSON object;
lines from the parent at the interval and from the forked child under its
own pid; times that never go back; a last line written at exit; and that the
interval writer never took a heap (heaps_created stays at the program's
three threads). Finally tools/brisk-plot draws the file.

Then PROGRAM close-descriptors: a program that closes every descriptor it
did not open (a daemon at start) and opens two files of its own, which get
the numbers of brisk's statistics file and /proc/self/stat: brisk writes no
line into them and its forked child's writer closes neither; brisk says
(once in a process) that the lines stopped.

Then PROGRAM close-stderr, with BRISK_STATS=1 too: the same, but the program
closes its stderr as well and its own file gets descriptor 2: brisk writes
neither that warning nor the table at exit into it.

Then every option set to the empty string is one not set: with
BRISK_VERBOSE=1, brisk prints the same options in effect (the defaults) and
nothing else; with BRISK_VERBOSE empty too, nothing at all.

Last, BRISK_STATS_FILE=/dev/full (every write fails): one warning that names
the error, and the program runs on; and a bad value holding a newline is
printed with it as \\x0a, on one line."""
import json
import os
import re
import subprocess
import sys
import tempfile

STARTUP_LINE = re.compile(r"brisk: (option |BRISK_\w+=)")


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def check_closed_descriptors(lib, program, scratch):
    path = os.path.join(scratch, "closed.jsonl")
    env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS_FILE=path, BRISK_STATS_INTERVAL_MS="10")
    env.pop("BRISK_STATS", None)
    run = subprocess.run([program, "close-descriptors", scratch], env=env, capture_output=True,
                         text=True, timeout=60)
    if run.returncode != 0:
        fail(f"close-descriptors: program exited {run.returncode} (a write to its own file "
             f"failed?): {run.stdout} {run.stderr}")
    for name in ("first", "second"):
        with open(os.path.join(scratch, name + ".txt")) as f:
            text = f.read()
        if text != f"{name}: parent\n{name}: child\n":
            fail(f"close-descriptors: {name}.txt holds {text[:300]!r}")
    stopped = "brisk: BRISK_STATS_FILE: the program closed the file's descriptor; " \
              "no more statistics lines"
    # What brisk prints at start where the environment asks (BRISK_VERBOSE)
    # or sets a value it refuses is left out.
    lines = [line for line in run.stderr.splitlines() if not STARTUP_LINE.match(line)]
    if not 1 <= lines.count(stopped) <= 2 or len(lines) != lines.count(stopped):
        fail(f"close-descriptors: expected the warning once in a process, stderr: {run.stderr}")


def check_closed_stderr(lib, program, scratch):
    path = os.path.join(scratch, "closed_stderr.jsonl")
    env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS="1", BRISK_STATS_FILE=path,
               BRISK_STATS_INTERVAL_MS="10")
    run = subprocess.run([program, "close-stderr", scratch], env=env, capture_output=True,
                         text=True, timeout=60)
    if run.returncode != 0:
        fail(f"close-stderr: program exited {run.returncode}: {run.stdout} {run.stderr}")
    for name in ("own", "first", "second"):
        with open(os.path.join(scratch, name + ".txt")) as f:
            text = f.read()
        if text != f"{name}: parent\n{name}: child\n":
            fail(f"close-stderr: {name}.txt holds {text[:300]!r}")


def check_full_disk(lib, program):
    """Every write fails (ENOSPC): the lines stop, with one line that says
    why (the forked child's writer may say it too), and the program runs on."""
    if not os.path.exists("/dev/full"):
        fail("no /dev/full on this machine")
    env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS_FILE="/dev/full",
               BRISK_STATS_INTERVAL_MS="10")
    env.pop("BRISK_STATS", None)
    run = subprocess.run([program], env=env, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        fail(f"full disk: program exited {run.returncode}: {run.stdout} {run.stderr}")
    stopped = "brisk: BRISK_STATS_FILE=/dev/full: No space left on device; " \
              "no more statistics lines"
    lines = [line for line in run.stderr.splitlines() if not STARTUP_LINE.match(line) or
             line == stopped]
    if not 1 <= lines.count(stopped) <= 2 or len(lines) != lines.count(stopped):
        fail(f"full disk: expected the warning once in a process, stderr: {run.stderr!r}")


def check_quoted_values(lib, program):
    """A newline in a bad value is printed as \\x0a: the value cannot forge a
    line of brisk's of its own."""
    env = dict(os.environ, LD_PRELOAD=lib, BRISK_PURGE_DELAY_MS="12\nbrisk: forged")
    env.pop("BRISK_STATS", None)
    env.pop("BRISK_STATS_FILE", None)
    run = subprocess.run([program], env=env, capture_output=True, text=True, timeout=60)
    want = "brisk: BRISK_PURGE_DELAY_MS=12\\x0abrisk: forged is not a whole number from 0 " \
           "to 3600000; using the default"
    if run.returncode != 0 or run.stderr.splitlines() != [want]:
        fail(f"quoted value: exit {run.returncode}, stderr {run.stderr!r}, not [{want!r}]")


def check_empty_values(lib, program):
    def stderr_of(env):
        run = subprocess.run([program], env=dict(env, LD_PRELOAD=lib), capture_output=True,
                             text=True, timeout=60)
        if run.returncode != 0:
            fail(f"empty values: program exited {run.returncode}: {run.stdout} {run.stderr}")
        return run.stderr

    base = {k: v for k, v in os.environ.items() if not k.startswith("BRISK_")}
    defaults = stderr_of(dict(base, BRISK_VERBOSE="1"))
    names = re.findall(r"^brisk: option (BRISK_\w+) ", defaults, re.M)
    if len(names) < 10 or len(defaults.splitlines()) != len(names):
        fail(f"empty values: BRISK_VERBOSE=1 printed {defaults!r}")
    empty = {name: "" for name in names}
    got = stderr_of(dict(base, **dict(empty, BRISK_VERBOSE="1")))
    if got != defaults:
        fail(f"empty values: every other option empty printed {got!r}, not the defaults "
             f"{defaults!r}")
    got = stderr_of(dict(base, **empty))
    if got != "":
        fail(f"empty values: every option empty printed {got!r}")


def main():
    lib, program, plot_tool, plot_python = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "stats.jsonl")
        env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS="1", BRISK_STATS_FILE=path,
                   BRISK_STATS_INTERVAL_MS="10", BRISK_PURGE_DELAY_MS="banana")
        run = subprocess.run([program], env=env, capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            fail(f"program exited {run.returncode}: {run.stdout} {run.stderr}")
        child = int(run.stdout.split("child=")[1])
        warnings = [l for l in run.stderr.splitlines() if "BRISK_PURGE_DELAY_MS=banana" in l]
        if len(warnings) != 1 or not warnings[0].startswith("brisk: "):
            fail(f"expected one warning about BRISK_PURGE_DELAY_MS=banana, stderr: {run.stderr}")
        if "brisk statistics" not in run.stderr:
            fail(f"no statistics table at exit on stderr: {run.stderr}")
        lines = {}
        with open(path) as f:
            raw = f.read()
        if not raw.endswith("\n"):
            fail("the file does not end with a newline")
        for number, line in enumerate(raw.splitlines(), 1):
            try:
                record = json.loads(line)
            except ValueError as error:
                fail(f"line {number} is not JSON ({error}): {line[:200]}")
            lines.setdefault(record["pid"], []).append(record)
        parent = [pid for pid in lines if pid != child]
        if len(parent) != 1 or child not in lines:
            fail(f"pids in the file: {sorted(lines)}, child {child}")
        mine = lines[parent[0]]
        if len(mine) < 10:
            fail(f"only {len(mine)} lines from the parent in about 0.3 s at 10 ms")
        for records in lines.values():
            times = [r["time_ms"] for r in records]
            if times != sorted(times):
                fail(f"time_ms goes back: {times}")
        last = mine[-1]
        general = last["general"]
        if general["heaps_created"] != 3:
            fail(f"heaps_created {general['heaps_created']}: the writer thread took a heap?")
        if general["allocations"] < 1000 or general["frees"] > general["allocations"]:
            fail(f"counts at exit: {general}")
        if max(r["general"]["bytes_held"] for r in mine) < 1 << 20:
            fail("bytes_held never reached 1 MiB")
        png = os.path.join(scratch, "stats.png")
        plot = subprocess.run([plot_python, plot_tool, path, "-o", png],
                              capture_output=True, text=True, timeout=120)
        # The file holds the child's lines too: the tool plots the first pid
        # and says so.
        if plot.returncode != 0 or not os.path.getsize(png):
            fail(f"brisk-plot: {plot.returncode} {plot.stderr}")
        check_closed_descriptors(lib, program, scratch)
        check_closed_stderr(lib, program, scratch)
        check_empty_values(lib, program)
        check_full_disk(lib, program)
        check_quoted_values(lib, program)
        print(f"ok: {len(mine)} parent lines, {len(lines[child])} child lines, table and "
              f"warning on stderr, plot drawn; no line in a program's own files, its stderr's "
              f"number included; a full disk stops the lines with one warning; a bad value "
              f"printed quoted")


main()
