#!/usr/bin/env python3
"""The differential ABI test: abi_probe's observations against glibc's.

  check_abi.py --probe build/tests/abi_probe --build glibc
  check_abi.py --probe build/tests/abi_probe --build release --preload build/libbrisk.so
  check_abi.py --probe build/tests/abi_probe_linked_secure --build secure
  check_abi.py --probe build/tests/abi_probe --record    (rewrites the recording)

abi_probe (tests/abi/abi_probe.cc) calls every allocation entry point on
edge inputs and prints one line per observation, "name: observation".
GLIBC_RECORDING holds what it printed on glibc 2.36's malloc (Debian 12,
with the libstdc++ of GCC 12 for the C++ operators), one line per name.

--build glibc runs the probe on the system's malloc and requires it to
print the recording exactly: that shows the recording is glibc's. It runs
only where the C library is glibc 2.36 (elsewhere it exits 77, which CTest
reports as skipped); the brisk runs compare against the recording and so
need no particular glibc.

--build release or secure runs the probe on brisk (preloaded, or a probe
linked against libbrisk.a / libbrisk-secure.a) and requires every line to
read as the recording's, except the lines DIFFERENCES lists for that build,
which must read exactly as listed there. Every difference is one the README
documents; a line that differs and is not listed fails the test, and so
does a listed difference that no longer differs (the table must stay true).
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GLIBC_RECORDING = os.path.join(HERE, "glibc-2.36.expected")
GLIBC_VERSION = "glibc 2.36"
SKIPPED = 77

BUILDS = ("release", "secure")


def sweep_lines(functions, what):
    return {f"{f} sizes 1-8": what for f in functions}


# What brisk prints where it differs from glibc 2.36 on purpose, and why
# (each reason names the README's words for it). name -> {build: line}.
DIFFERENCES = {}


def differ(why, builds, lines):
    for name, line in lines.items():
        assert name not in DIFFERENCES, name
        DIFFERENCES[name] = {"why": why, **{b: line for b in builds}}


# Blocks of 1-8 bytes are 8-aligned in the release build (no type that fits
# needs more; glibc's are 16-aligned). The secure build's are 16-aligned: it
# asks for 16 bytes more per block.
differ("README 'Call it by name': blocks of 8 bytes or less are 8-aligned",
       ["release"],
       sweep_lines(["malloc", "calloc", "realloc(NULL)", "realloc-grown", "realloc-shrunk",
                    "memalign(8)", "aligned_alloc(8)", "posix_memalign(8)", "operator new"],
                   "align=8"))

# aligned_alloc takes only a power of two, as C17 (DR 460) asks and glibc
# 2.38 does; glibc 2.36's aligned_alloc is memalign, which rounds up.
differ("README 'Using brisk': aligned_alloc with an alignment that is not a power of two"
       " fails with EINVAL (C17, glibc 2.38 and later)",
       BUILDS,
       {f"aligned_alloc({a},64)": "NULL errno=EINVAL"
        for a in ("0", "3", "12", "24", "48", "100", "4097")}
       | {"aligned_alloc(2^62+1,1)": "NULL errno=EINVAL"})

# libstdc++ 12's aligned operator new rounds the size up to the alignment
# and wraps to 0 for SIZE_MAX: it hands out a tiny block for a request of
# SIZE_MAX bytes. brisk's operators replace it and fail as the standard
# says: the new-handler, then std::bad_alloc (or nullptr).
differ("README 'Using brisk': brisk's aligned operator new fails for a size near SIZE_MAX"
       " (libstdc++ 12's wraps the size and returns a small block)",
       BUILDS,
       {"new(SIZE_MAX,align 64)": "throws bad_alloc",
        "new[](SIZE_MAX,align 64)": "throws bad_alloc",
        "new(SIZE_MAX,align 64,nothrow)": "nullptr",
        "new[](SIZE_MAX,align 64,nothrow)": "nullptr",
        "new align 64(SIZE_MAX) with a handler that gives up on its 3rd call":
            "throws bad_alloc, handler called 3x",
        "new align 64(SIZE_MAX) with a handler that throws its own":
            "throws the handler's exception, handler called 1x",
        "new align 64(SIZE_MAX) with a handler that throws bad_alloc":
            "throws bad_alloc, handler called 1x",
        "new align 64 nothrow(SIZE_MAX) with a handler that gives up on its 3rd call":
            "nullptr, handler called 3x",
        "new align 64 nothrow(SIZE_MAX) with a handler that throws its own":
            "nullptr, handler called 1x",
        "new align 64 nothrow(SIZE_MAX) with a handler that throws bad_alloc":
            "nullptr, handler called 1x"})


def parse(text, source):
    """name -> observation, in order; fails on a malformed or repeated name."""
    lines = {}
    for number, raw in enumerate(text.splitlines(), 1):
        name, sep, what = raw.partition(": ")
        if not sep:
            sys.exit(f"{source}:{number}: not 'name: observation': {raw!r}")
        if name in lines:
            sys.exit(f"{source}:{number}: '{name}' appears twice")
        lines[name] = what
    return lines


def run_probe(probe, preload):
    # Without the settings that change glibc's malloc (GLIBC_TUNABLES'
    # glibc.malloc.mmap_threshold moves a 32 MiB block off mmap, MALLOC_*
    # the same and more): the recording is of its defaults.
    env = {name: value for name, value in os.environ.items()
           if name not in ("LD_PRELOAD", "GLIBC_TUNABLES") and not name.startswith("MALLOC_")}
    if preload:
        env["LD_PRELOAD"] = os.path.abspath(preload)  # ld.so searches its paths for a bare name
    result = subprocess.run([probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, timeout=120)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-4000:])
        sys.exit(f"{probe} exited with {result.returncode}")
    return result.stdout


def libc_version():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--build", choices=("glibc",) + BUILDS)
    parser.add_argument("--preload", help="the library to preload (a brisk build)")
    parser.add_argument("--record", action="store_true",
                        help="write the probe's output on the system's malloc as the recording")
    args = parser.parse_args()

    if args.record:
        if libc_version() != GLIBC_VERSION:
            sys.exit(f"the recording is of {GLIBC_VERSION}; this system has {libc_version()!r}")
        output = run_probe(args.probe, None)
        parse(output, "probe")
        with open(GLIBC_RECORDING, "w") as f:
            f.write(output)
        print(f"wrote {GLIBC_RECORDING} ({len(output.splitlines())} lines)")
        return 0
    if args.build is None:
        parser.error("--build is required")

    with open(GLIBC_RECORDING) as f:
        recorded = parse(f.read(), GLIBC_RECORDING)
    for name, entry in DIFFERENCES.items():
        if name not in recorded:
            sys.exit(f"DIFFERENCES names '{name}', which the recording does not have")

    if args.build == "glibc":
        if args.preload:
            parser.error("--build glibc runs without a preload")
        if libc_version() != GLIBC_VERSION:
            print(f"skipped: the recording is of {GLIBC_VERSION}; this system has "
                  f"{libc_version()!r} (the brisk runs still compare against the recording)")
            return SKIPPED
        expected = dict(recorded)
        expected_allocator = "glibc"
    else:
        expected = {name: (DIFFERENCES[name].get(args.build, what) if name in DIFFERENCES else what)
                    for name, what in recorded.items()}
        expected_allocator = f"brisk {args.build}"
    expected["allocator"] = expected_allocator

    observed = parse(run_probe(args.probe, args.preload), "probe")
    if observed.get("allocator") != expected_allocator:
        sys.exit(f"the probe ran on {observed.get('allocator')!r}, not {expected_allocator!r}"
                 + (f" (LD_PRELOAD={args.preload})" if args.preload else ""))

    failures = []
    for name, want in expected.items():
        got = observed.get(name)
        if got is None:
            failures.append(f"  {name}: missing (expected '{want}')")
        elif got != want:
            why = ""
            if name in DIFFERENCES and args.build in DIFFERENCES[name]:
                why = f"\n      documented difference: {DIFFERENCES[name]['why']}"
            failures.append(f"  {name}:\n      expected '{want}'\n      got      '{got}'"
                            f"\n      glibc    '{recorded[name]}'{why}")
    for name in observed:
        if name not in expected:
            failures.append(f"  {name}: not in the recording ('{observed[name]}');"
                            f" re-record with --record on {GLIBC_VERSION}")
    # A listed difference must still be one: brisk's line is not glibc's.
    if args.build in BUILDS:
        for name, entry in DIFFERENCES.items():
            if args.build in entry and entry[args.build] == recorded[name]:
                failures.append(f"  {name}: DIFFERENCES lists '{entry[args.build]}' for"
                                f" {args.build}, which is glibc's line too")

    source = args.preload and f"LD_PRELOAD={args.preload}" or args.probe
    if failures:
        print(f"FAIL: {len(failures)} of {len(expected)} observations differ "
              f"({args.build}, {source}):")
        print("\n".join(failures))
        return 1
    documented = sum(1 for entry in DIFFERENCES.values() if args.build in entry)
    print(f"ok: {len(expected)} observations as glibc 2.36's"
          + (f", {documented} of them the documented differences" if documented else "")
          + f" ({args.build}, {source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
