#!/usr/bin/env python3
"""python_regrtest.py: a subset of CPython's own regression tests (Debian's
libpython3.X-testsuite), run with this interpreter, with every Python object
through malloc (PYTHONMALLOC=malloc, so the allocator under test sees all of
them, not only what pymalloc passes on) and two worker processes.

Prints one line per test, "<name> <passed|failed|skipped|...>", sorted, and
the overall result: stdout that is the same with and without brisk
preloaded (tests/preload/run_preload.sh compares them). Exits 1 unless the
result is SUCCESS."""
import os
import re
import subprocess
import sys

# Allocation-heavy modules, threads and fork among them; none needs the
# network or a resource regrtest leaves off by default.
TESTS = [
    "test_list", "test_dict", "test_set", "test_bytes", "test_unicode", "test_string",
    "test_re", "test_json", "test_pickle", "test_itertools", "test_collections",
    "test_deque", "test_heapq", "test_bisect", "test_sort", "test_gc", "test_weakref",
    "test_threading", "test_thread", "test_queue", "test_fork1",
]


def prints_on_stderr(env):
    probe = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True,
                           text=True, timeout=60)
    return probe.stderr != ""


def quiet_options(env):
    """env without the BRISK_* options under which the interpreter prints on
    stderr: brisk does where asked (BRISK_STATS, BRISK_VERBOSE) and where it
    refuses a value (a warning), and CPython's tests check that the
    interpreters they start print nothing there. The other options stay."""
    loud = [name for name in sorted(env) if name.startswith("BRISK_") and prints_on_stderr(
        {k: v for k, v in env.items() if not k.startswith("BRISK_") or k == name})]
    if loud:
        print(f"python_regrtest: left out, as the interpreter prints on stderr under them: "
              f"{' '.join(loud)}", file=sys.stderr)
    return {k: v for k, v in env.items() if k not in loud}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import test.libregrtest  # noqa: F401  (the testsuite package)
    except ImportError:
        print(f"CPython's regression tests are not installed for {sys.executable} "
              f"(Debian: apt-get install libpython{sys.version_info[0]}.{sys.version_info[1]}"
              "-testsuite)", file=sys.stderr)
        return 1
    tests = [t for t in TESTS if os.path.exists(
        os.path.join(os.path.dirname(test.libregrtest.__file__), "..", t + ".py"))]
    env = quiet_options(dict(os.environ, PYTHONMALLOC="malloc"))
    run = subprocess.run([sys.executable, "-m", "test", "-j2", "--timeout", "600", *tests],
                         env=env, capture_output=True, text=True, cwd=here, timeout=1200)
    outcomes = {}
    for line in run.stdout.splitlines():
        match = re.search(r"\] (test_\w+) (passed|failed|skipped|crashed|timed out|"
                          r"resource denied|env changed)", line)
        if match:
            outcomes[match.group(1)] = match.group(2)
    result = re.search(r"Tests result: (\w+)", run.stdout)
    for name in sorted(outcomes):
        print(name, outcomes[name])
    print("result:", result.group(1) if result else "none")
    if result is None or result.group(1) != "SUCCESS" or len(outcomes) != len(tests):
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-2000:])
        return 1
    return 0


sys.exit(main())
