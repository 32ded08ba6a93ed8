#!/usr/bin/env python3
"""Peak resident memory of a program under brisk, by kind of segment.

Runs the program as a child with LD_PRELOAD=<lib>, reads its
/proc/PID/smaps every few milliseconds, and names each 32 MiB-aligned
mapping by the kind byte at its start (read through /proc/PID/mem, which a
parent may read): small, medium, large or huge segments; other mappings of
1 MiB or more, and the rest. Prints the sample with the largest total.

    python3 bench/rss_by_kind.py build/libbrisk.so build/bench/handoff 8 2000000 42

The kind byte is the first field of brisk_segment_t (src/general/types.h).
"""
import argparse
import os
import re
import subprocess
import time

KINDS = {0: "small", 1: "medium", 2: "large", 3: "huge"}
SEGMENT = 32 << 20


def sample(pid):
    """RSS in KiB by kind, or None once the child is gone."""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            smaps = f.read()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        return None
    totals = {}
    with mem:
        span = None
        for line in smaps.splitlines():
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
            if m:
                span = (int(m.group(1), 16), int(m.group(2), 16))
                continue
            if not line.startswith("Rss:") or span is None:
                continue
            start, end = span
            kind = "other"
            if start % SEGMENT == 0:
                try:
                    mem.seek(start)
                    first = mem.read(1)
                except OSError:
                    first = b""
                kind = KINDS.get(first[0], "other") if first else "other"
            elif end - start >= 1 << 20:
                kind = "other >= 1 MiB"
            totals[kind] = totals.get(kind, 0) + int(line.split()[1])
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lib", help="the library to LD_PRELOAD")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    parser.add_argument("--interval-ms", type=float, default=5)
    args = parser.parse_args()
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib))
    child = subprocess.Popen(args.command, env=env, stdout=subprocess.DEVNULL)
    peak = {}
    while child.poll() is None:
        totals = sample(child.pid)
        if totals and sum(totals.values()) > sum(peak.values()):
            peak = totals
        time.sleep(args.interval_ms / 1000)
    parts = ", ".join(f"{k} {v // 1024}" for k, v in sorted(peak.items()))
    print(f"peak RSS {sum(peak.values()) // 1024} MiB: {parts}")


if __name__ == "__main__":
    main()
