"""Running one benchmark program under a time limit (run.py, real_programs.py)."""
import os
import signal
import subprocess
import threading
import time


def run_with_limit(argv, env, timeout, stdout, stderr, stdin=subprocess.DEVNULL,
                   own_group=False):
    """Starts argv and reaps it with os.wait4, killing it with SIGKILL after
    timeout seconds (its whole process group when own_group: the program runs in
    a session of its own). Returns (exit code, wall seconds, rusage, timed out);
    a killed program's exit code is minus the signal number."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env,
                            start_new_session=own_group)
    timed_out = []

    def kill():
        timed_out.append(True)
        try:
            if own_group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
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
    # Reaped here, not by Popen: tell it, so it does not try again.
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage, bool(timed_out)
