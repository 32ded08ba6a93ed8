#!/usr/bin/env python3
"""exit_in_signal.py LIBBRISK PROGRAM: the report at exit never hangs on a
lock held by the thread a signal handler interrupted. Runs PROGRAM
(exit_in_signal.c) 30 times with brisk preloaded and BRISK_STATS=1; each run
must end with status 0 and print the table. A run still there after 30 s
fails the test (it hung: 14 runs of 40 did, before snapshots stopped
waiting without end for a heap's memory lock)."""
import os
import subprocess
import sys


def main():
    lib, program = sys.argv[1:3]
    env = dict(os.environ, LD_PRELOAD=lib, BRISK_STATS="1")
    for attempt in range(30):
        try:
            run = subprocess.run([program], env=env, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            print(f"FAIL: run {attempt + 1} still running 30 s after its exit() (hung at exit)")
            return 1
        if run.returncode != 0 or "brisk statistics" not in run.stderr:
            print(f"FAIL: run {attempt + 1} exited {run.returncode}, stderr: {run.stderr[-2000:]}")
            return 1
    print("ok: 30 exits from a signal handler, each with its report")
    return 0


sys.exit(main())
