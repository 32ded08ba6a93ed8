#!/usr/bin/env python3
"""stats_file_real.py LIBBRISK -- COMMAND [ARG...] [-- COMMAND [ARG...]]...

Each COMMAND (a real program) runs without brisk and then with LIBBRISK
preloaded and BRISK_STATS_FILE set, a line every millisecond
(BRISK_STATS_INTERVAL_MS=1), under whatever other options the environment
sets. It must print the same stdout and the same stderr (an option prints
nothing it was not asked for: what brisk prints at start where the
environment asks for it, BRISK_VERBOSE's lines or a warning about a value
it refuses, is left out), and every line of the file must be one JSON
object of the statistics, at least one from the program's own process."""
import json
import os
import re
import subprocess
import sys
import tempfile

STARTUP_LINE = re.compile(rb"brisk: (option |BRISK_\w+=)")


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def commands(argv):
    current = None
    for arg in argv:
        if arg == "--":
            if current:
                yield current
            current = []
        else:
            current.append(arg)
    if current:
        yield current


def check(lib, command, scratch):
    program = [arg for arg in command if "=" not in arg and os.path.basename(arg) != "env"]
    name = os.path.basename(program[0] if program else command[0])
    plain_env = {k: v for k, v in os.environ.items()
                 if k != "LD_PRELOAD" and not k.startswith("BRISK_")}
    plain = subprocess.run(command, env=plain_env, capture_output=True, timeout=600)
    if plain.returncode != 0:
        fail(f"{name} exited {plain.returncode} without brisk: {plain.stderr[-2000:]!r}")
    path = os.path.join(scratch, name + ".jsonl")
    env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS_FILE=path, BRISK_STATS_INTERVAL_MS="1")
    env.pop("BRISK_STATS", None)
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = run.communicate(timeout=600)
    if run.returncode != 0:
        fail(f"{name} exited {run.returncode} under brisk: {stderr[-2000:]!r}")
    if stdout != plain.stdout:
        fail(f"{name}: stdout differs under brisk")
    stderr = b"".join(line for line in stderr.splitlines(keepends=True)
                      if not STARTUP_LINE.match(line))
    if stderr != plain.stderr:
        fail(f"{name}: stderr differs under brisk: {stderr[-2000:]!r}")
    pids = set()
    count = 0
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except ValueError as error:
                fail(f"{name}: line {number} of the statistics file is not JSON ({error}): "
                     f"{line[:200]!r}")
            if not isinstance(record, dict) or "general" not in record:
                fail(f"{name}: line {number} is not a statistics record: {line[:200]!r}")
            pids.add(record["pid"])
            count += 1
    if run.pid not in pids:
        fail(f"{name}: no line from the program's process {run.pid} (pids {sorted(pids)})")
    print(f"ok: {name}: same output; {count} JSON lines from {len(pids)} processes")


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    lib = os.path.abspath(sys.argv[1])
    options = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("BRISK_"))
    print(f"options: {options or '(defaults)'}")
    with tempfile.TemporaryDirectory() as scratch:
        for command in commands(sys.argv[2:]):
            check(lib, command, scratch)


main()
