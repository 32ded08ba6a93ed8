#!/usr/bin/python3
"""Tests of tools/brisk-plot: a good statistics file gives a PNG with one
section per part that has data; each kind of bad file gives exit status 1
and one line naming the file and the line at fault; bad usage gives 2.

Run: python3 tests/tools/test_brisk_plot.py (CTest: label tools). The
command-line cases run the script in a child process under this interpreter;
the section choice is tested by importing it.
"""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "brisk-plot")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIB = 1 << 20


def load_tool():
    """tools/brisk-plot as a module (its name has no .py)."""
    loader = importlib.machinery.SourceFileLoader("brisk_plot", SCRIPT)
    spec = importlib.util.spec_from_loader("brisk_plot", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


tool = load_tool()


def region(in_use, held):
    return {"live": 1, "bytes_in_use": in_use, "bytes_held": held,
            "bytes_requested": in_use, "allocations": 10, "system_requests": 1}


def record(i, pid=4242, regions=None, os_stats=True):
    """The i-th line of a plausible run: one line every 100 ms."""
    in_use = (10 + i % 7) * MIB
    r = {"version": 1, "time_ms": 100.0 * i + 0.5, "pid": pid,
         "general": {"bytes_in_use": in_use, "bytes_held": in_use + 4 * MIB,
                     "bytes_reserved": 64 * MIB, "allocations": 1000 * i,
                     "frees": 900 * i, "remote_frees": 0, "huge_blocks": 0,
                     "huge_bytes": 0, "pages_held": 40, "segments_held": 1,
                     "heaps_live": 2}}
    if os_stats:
        r["os"] = {"map_calls": i, "map_bytes": 32 * MIB, "unmap_calls": 0,
                   "unmap_bytes": 0, "commit_calls": i, "commit_bytes": 4 * MIB,
                   "decommit_calls": 0, "decommit_bytes": 0}
    if regions is not None:
        r["regions"] = regions
    return r


def line(r):
    return json.dumps(r, separators=(",", ":")) + "\n"


def good_lines(n=20, with_regions=False):
    out = []
    for i in range(n):
        regions = None
        if with_regions:
            # arena from the start, stack for a while, fifo present but
            # never holding anything (no section), pool never present.
            regions = {"arena": region(i * 1000, 65536),
                       "fifo": region(0, 0)}
            if 5 <= i < 12:
                regions["stack"] = region(300 * i, 2 * MIB)
        out.append(line(record(i, regions=regions)))
    return out


class ToolTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="brisk-plot-test-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
        return path

    def run_tool(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True,
                              text=True, timeout=60)

    def assert_error(self, name, text, line_number, *words, extra=()):
        """The tool fails on file NAME holding TEXT with exit status 1 and one
        line 'brisk-plot: PATH:LINE: ...' that contains WORDS, and writes no
        output."""
        path = self.write(name, text)
        out = os.path.join(self.dir, "out.png")
        result = self.run_tool(path, "-o", out, *extra)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(result.stdout, "")
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith(f"brisk-plot: {path}:{line_number}: "),
                        lines[0])
        for word in words:
            self.assertIn(word, lines[0])
        self.assertNotIn("Traceback", result.stderr)
        self.assertFalse(os.path.exists(out))
        return lines[0]


class GoodFileTest(ToolTest):
    def test_png_with_sections(self):
        path = self.write("run.jsonl", "".join(good_lines(with_regions=True)))
        out = os.path.join(self.dir, "run.png")
        result = self.run_tool(path, "-o", out, "--title", "a test run")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        with open(out, "rb") as f:
            png = f.read()
        self.assertGreater(len(png), 1000)
        self.assertTrue(png.startswith(PNG_SIGNATURE))

    def test_general_only_file_plots(self):
        # No "os", no "regions": both optional.
        text = "".join(line(record(i, os_stats=False)) for i in range(3))
        path = self.write("general.jsonl", text)
        out = os.path.join(self.dir, "general.png")
        result = self.run_tool(path, "-o", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(out, "rb") as f:
            self.assertTrue(f.read().startswith(PNG_SIGNATURE))

    def test_sections(self):
        plain = tool.load_stats(self.write("a.jsonl", "".join(good_lines())))
        sections = tool.plot_sections(plain.records)
        self.assertEqual([s.key for s in sections], ["general"])

        regions = tool.load_stats(self.write("b.jsonl",
                                             "".join(good_lines(with_regions=True))))
        sections = tool.plot_sections(regions.records)
        # fifo is present but never holds anything: no section.
        self.assertEqual([s.key for s in sections], ["general", "arena", "stack"])
        stack = sections[2]
        self.assertEqual(len(stack.held), 20)
        # Absent before line 5 and after line 11: holds nothing then.
        self.assertEqual(stack.held[4], 0)
        self.assertEqual(stack.held[5], 2 * MIB)
        self.assertEqual(stack.held[12], 0)
        self.assertEqual(stack.in_use[6], 1800)
        self.assertAlmostEqual(sections[0].times_s[3], 0.3005)
        self.assertEqual(regions.pid, 4242)

    def test_unknown_keys_and_kinds_are_fine(self):
        r = record(0, regions={"arena": region(1, 2), "slab": region(5, 8)})
        r["future"] = {"anything": "goes"}
        r["general"]["new_counter"] = "text"
        r["regions"]["arena"]["note"] = [1, 2]
        stats = tool.load_stats(self.write("c.jsonl", line(r)))
        self.assertEqual([s.key for s in tool.plot_sections(stats.records)],
                         ["general", "arena", "slab"])

    def test_last_line_without_newline_that_parses(self):
        text = "".join(good_lines(3)).rstrip("\n")
        stats = tool.load_stats(self.write("d.jsonl", text))
        self.assertEqual(len(stats.records), 3)

    def test_blank_lines_are_skipped(self):
        lines = good_lines(3)
        text = lines[0] + "\n" + lines[1] + "  \n" + lines[2] + "\n"
        stats = tool.load_stats(self.write("e.jsonl", text))
        self.assertEqual(len(stats.records), 3)

    def test_units(self):
        self.assertEqual(tool.unit_for(0), (1, "bytes"))
        self.assertEqual(tool.unit_for(1023), (1, "bytes"))
        self.assertEqual(tool.unit_for(1024), (1024, "KiB"))
        self.assertEqual(tool.unit_for(5 * MIB), (MIB, "MiB"))
        self.assertEqual(tool.unit_for(3 << 30), (1 << 30, "GiB"))


class BadFileTest(ToolTest):
    def test_missing_file(self):
        path = os.path.join(self.dir, "absent.jsonl")
        result = self.run_tool(path, "-o", os.path.join(self.dir, "out.png"))
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.strip(),
                         f"brisk-plot: {path}: No such file or directory")

    def test_empty_file(self):
        self.assert_error("empty.jsonl", "", 1, "empty file")

    def test_invalid_json(self):
        lines = good_lines(20)
        lines[16] = '{"version":1,"time_ms":5 "general":{}}\n'
        self.assert_error("bad.jsonl", "".join(lines), 17, "not valid JSON",
                          "Expecting ',' delimiter")

    def test_not_an_object(self):
        lines = good_lines(5)
        lines[2] = "[1, 2, 3]\n"
        self.assert_error("array.jsonl", "".join(lines), 3, "not a JSON object")

    def test_invalid_utf8(self):
        lines = [l.encode() for l in good_lines(5)]
        lines[3] = b'{"time_ms":\xff}\n'
        self.assert_error("bytes.jsonl", b"".join(lines), 4, "UTF-8")

    def test_truncated_last_line(self):
        lines = good_lines(8)
        text = "".join(lines[:7]) + lines[7][:60]
        message = self.assert_error("live.jsonl", text, 8, "truncated last line",
                                    "--allow-truncated")
        self.assertIn("no newline", message)

    def test_truncated_last_line_allowed(self):
        lines = good_lines(8)
        path = self.write("live.jsonl", "".join(lines[:7]) + lines[7][:60])
        out = os.path.join(self.dir, "live.png")
        result = self.run_tool(path, "-o", out, "--allow-truncated")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr.splitlines(),
                         [result.stderr.strip()])  # one line
        self.assertIn(f"{path}:8: warning: skipped the truncated last line",
                      result.stderr)
        self.assertTrue(os.path.getsize(out) > 0)
        stats = tool.load_stats(path, allow_truncated=True)
        self.assertEqual((len(stats.records), stats.truncated_line), (7, 8))

    def test_bad_line_in_the_middle_is_no_truncation(self):
        # Only the last line, without its newline, counts as truncated.
        lines = good_lines(6)
        lines[2] = lines[2][:50] + "\n"
        self.assert_error("mid.jsonl", "".join(lines), 3, "not valid JSON",
                          extra=("--allow-truncated",))

    def test_lacks_time_ms(self):
        lines = good_lines(6)
        r = record(4)
        del r["time_ms"]
        lines[4] = line(r)
        self.assert_error("notime.jsonl", "".join(lines), 5, '"time_ms"')

    def test_lacks_general(self):
        lines = good_lines(6)
        r = record(5)
        del r["general"]
        lines[5] = line(r)
        self.assert_error("nogeneral.jsonl", "".join(lines), 6, '"general"')

    def test_lacks_plotted_counter(self):
        r = record(0)
        del r["general"]["bytes_held"]
        self.assert_error("noheld.jsonl", line(r), 1, "general", '"bytes_held"')

    def test_non_numeric_values(self):
        cases = [
            ("time_ms", lambda r: r.update(time_ms="1500"), "time_ms"),
            ("general", lambda r: r["general"].update(bytes_in_use="12"),
             "general.bytes_in_use"),
            ("bool", lambda r: r["general"].update(frees=True), "general.frees"),
            ("null", lambda r: r["os"].update(map_bytes=None), "os.map_bytes"),
            ("region", lambda r: r.update(regions={"pool": region("x", 4096)}),
             "regions.pool.bytes_in_use"),
        ]
        for name, change, where in cases:
            with self.subTest(name):
                lines = good_lines(4)
                r = record(3)
                change(r)
                lines[3] = line(r)
                self.assert_error(f"{name}.jsonl", "".join(lines), 4, where,
                                  "not a finite number")
        nan = line(record(0)).replace('"bytes_in_use":10485760', '"bytes_in_use":NaN')
        self.assert_error("nan.jsonl", nan, 1, "general.bytes_in_use", "NaN")

    def test_other_bad_values(self):
        cases = [
            ("negative", lambda r: r["general"].update(bytes_held=-1), "negative"),
            ("general_type", lambda r: r.update(general=[1]),
             "general is not a JSON object"),
            ("regions_type", lambda r: r.update(regions=3),
             "regions is not a JSON object"),
            ("version", lambda r: r.update(version=2), "unsupported version 2"),
            ("pid", lambda r: r.update(pid="4242"), "pid is not an integer"),
            ("backwards", lambda r: r.update(time_ms=0), "time_ms goes back"),
        ]
        for name, change, words in cases:
            with self.subTest(name):
                lines = good_lines(4)
                r = record(3)
                change(r)
                lines[3] = line(r)
                self.assert_error(f"{name}.jsonl", "".join(lines), 4, words)


class ProcessesTest(ToolTest):
    def test_forked_child_lines_are_skipped(self):
        lines = good_lines(10)
        child = [line(record(i, pid=5000)) for i in (3, 4, 5)]
        text = "".join(lines[:4] + child[:2] + lines[4:7] + child[2:] + lines[7:])
        path = self.write("fork.jsonl", text)
        warnings = []
        stats = tool.load_stats(path, warn=warnings.append)
        self.assertEqual((len(stats.records), stats.pid, stats.skipped_lines),
                         (10, 4242, 3))
        self.assertEqual(len(warnings), 1)
        self.assertIn("skipped 3 lines of other processes", warnings[0])
        self.assertIn("line 5, pid 5000", warnings[0])

        out = os.path.join(self.dir, "fork.png")
        result = self.run_tool(path, "-o", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assertIn(f"{path}: warning: skipped 3 lines", result.stderr)

    def test_child_lines_are_still_checked(self):
        lines = good_lines(4)
        r = record(2, pid=5000)
        del r["general"]
        lines.insert(2, line(r))
        self.assert_error("fork_bad.jsonl", "".join(lines), 3, '"general"')


class UsageTest(ToolTest):
    def test_help(self):
        result = self.run_tool("--help")
        self.assertEqual(result.returncode, 0)
        for words in ("usage: brisk-plot", "-o OUT.png", "--title", "--allow-truncated",
                      "BRISK_STATS_FILE", "time_ms", "truncated last line"):
            self.assertIn(words, result.stdout)

    def test_bad_usage(self):
        path = self.write("run.jsonl", "".join(good_lines(2)))
        for args in ((path,), ("-o", "x.png"), (path, "-o", "x.png", "--bogus")):
            with self.subTest(args=args):
                result = self.run_tool(*args)
                self.assertEqual(result.returncode, 2)
                self.assertIn("usage: brisk-plot", result.stderr)

    def test_unwritable_output(self):
        path = self.write("run.jsonl", "".join(good_lines(2)))
        out = os.path.join(self.dir, "no-such-dir", "x.png")
        result = self.run_tool(path, "-o", out)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.splitlines(),
                         [f"brisk-plot: {out}: cannot write: No such file or directory"])

    def test_script_is_executable(self):
        self.assertTrue(os.access(SCRIPT, os.X_OK))
        with open(SCRIPT, "rb") as f:
            self.assertTrue(f.readline().startswith(b"#!"))


if __name__ == "__main__":
    unittest.main()
