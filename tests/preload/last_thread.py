#!/usr/bin/env python3
"""last_thread.py LIBBRISK PROGRAM: brisk's statistics writer never keeps a
process alive. Runs PROGRAM (tests/preload/last_thread.c) with brisk
preloaded and BRISK_STATS_FILE set: its forked child (whose last thread
returns) and then the program itself (whose main calls pthread_exit) must
end with status 0; a process still there after 60 s fails the test. The
file must hold lines from both, the last at the program's exit."""
import json
import os
import subprocess
import sys
import tempfile


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    lib, program = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "stats.jsonl")
        env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS_FILE=path,
                   BRISK_STATS_INTERVAL_MS="1000")
        try:
            run = subprocess.run([program], env=env, capture_output=True, text=True,
                                 timeout=60)
        except subprocess.TimeoutExpired:
            fail("the program did not end 60 s after its main called pthread_exit "
                 "(a thread of brisk's keeps it alive)")
        if run.returncode != 0 or "exited 0" not in run.stdout:
            fail(f"program exited {run.returncode}: {run.stdout} {run.stderr}")
        child = int(run.stdout.split("child=")[1].split()[0])
        with open(path) as f:
            pids = [json.loads(line)["pid"] for line in f]
        if child not in pids:
            fail(f"no line from the child {child} (its report at exit): pids {pids}")
        if run.returncode == 0 and not any(pid != child for pid in pids):
            fail(f"no line from the program itself (its report at exit): pids {pids}")
    print("ok: the child and the program ended with their last threads")


main()
