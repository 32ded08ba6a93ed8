#!/usr/bin/env python3
"""Run the misuse programs (tests/misuse/*.c) against one build of brisk and
check each outcome against the table below.

  run_misuse.py --build release --library build/libbrisk.so --programs build/tests/misuse

Each program does one heap misuse through malloc and free and runs in a child
process with the library preloaded (LD_PRELOAD). The table says, for each
program and each build, what must happen:

  CAUGHT     the bad call aborts: the child dies of SIGABRT, and its stderr
             holds one `brisk: ...` line, matching the row's message pattern
             and naming the pointer the program said it must name
             ("misuse: names 0x...", misuse_named in misuse.h).
  CAUGHT_LATER
             as CAUGHT, but by a later call (a write after free is a plain
             store: the next malloc that hands the block out catches it),
             so the bad step itself returns.
  NEVER_OVERLAPPING
             the build does not catch it and promises that no harm follows:
             the child exits 0 after checking that it was handed no
             overlapping blocks and that the live blocks the bug did not
             write kept their bytes ("misuse: no overlap"; misuse.h).
  UNCAUGHT   the build does not catch it and promises nothing about what
             follows (the README says so): the bad call returns
             ("misuse: ... returned") without a `brisk:` line; the child may
             crash or see overlapping blocks later, which is not checked.
  FAULTS     the bad access itself hits a guard page: the child dies of
             SIGSEGV, with no `brisk:` line, and the bad step never returns.

A build takes its entry in a row, else its default in BUILDS. To add a build
(libbrisk-secure.so), add one entry to BUILDS ("secure": CAUGHT, or None to
require an entry in every row) and one brisk_misuse_test() line in
tests/CMakeLists.txt; rows where it differs get their own "secure" entry.
"""

import argparse
import os
import re
import resource
import signal
import subprocess
import sys

CAUGHT, CAUGHT_LATER, NEVER_OVERLAPPING, UNCAUGHT, FAULTS = (
    "caught", "caught later", "never overlapping", "uncaught", "faults")

# Default outcome per build for a row that names no entry for it (None: every
# row must name one).
BUILDS = {
    "release": None,
    "secure": CAUGHT,
}

# The message patterns, searched for in the `brisk: ` line; `ADDR` stands for
# the pointer as brisk prints it.
ADDR = r"0x[0-9a-f]+"

# program: (message pattern, {build: outcome})
TABLE = {
    # Double frees. The release build sees one through the page's count of
    # live blocks only: when the block was the last live one of its page, or
    # a huge block (its own mapping).
    "double_free":              (rf"free\({ADDR}\): .*double free",
                                 {"release": UNCAUGHT}),
    "double_free_alone":        (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT}),
    "double_free_alone_second": (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT}),
    "double_free_after_others": (rf"free\({ADDR}\): .*double free",
                                 {"release": UNCAUGHT}),
    # A malloc of the same size between the two frees: the secure build
    # does not hand p out again at once, so the second free finds it free.
    "double_free_after_malloc": (rf"free\({ADDR}\): .*double free",
                                 {"release": UNCAUGHT}),
    "double_free_other_thread": (rf"free\({ADDR}\): .*double free",
                                 {"release": UNCAUGHT}),
    # The reverse: another thread's free first, then the owner's own.
    "double_free_remote_then_owner": (rf"free\({ADDR}\): .*double free",
                                 {"release": UNCAUGHT}),
    "double_free_huge":         (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT}),
    # The old pointer of a huge block that realloc moved to a new mapping.
    "free_huge_moved":          (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT}),
    # A write into the freed block's second word (the secure build's free
    # tag) between the two frees: the first free cleared the block's header,
    # which the second finds. Another thread's two frees are named by the
    # owner when it takes the blocks back.
    "double_free_after_tag_write": (rf"free\({ADDR}\): .*double free.*write after free",
                                 {"release": UNCAUGHT}),
    "double_free_after_tag_write_other_thread": (
                                 rf"free\({ADDR}\): .*double free.*write after free",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    "double_free_huge_other_thread": (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT}),
    # A block freed twice by a thread that does not own it, its page's only
    # live block: both frees find it live (it counts until its owner takes
    # it back), and the owner names the second when it drains it (its next
    # slow malloc), after the first emptied the page: the segment went back
    # to the system, the page to its segment, or the page to another class
    # between the two batches. The secure build names the second free at
    # once (the block's free tag).
    "double_free_remote_released": (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT_LATER}),
    "double_free_remote_retired": (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT_LATER}),
    "double_free_remote_reused": (rf"free\({ADDR}\): .*double free",
                                 {"release": CAUGHT_LATER}),
    "realloc_freed":            (rf"realloc\({ADDR}\): .*(double free|already free|not an allocated block)",
                                 {"release": UNCAUGHT}),
    # The same with p alone on its page, whose count of live blocks shows
    # it: named for realloc before the block is kept (the same size), moved
    # (another class) or, on a page of aligned blocks, either.
    "realloc_freed_alone":      (rf"realloc\({ADDR}\): .*block is already free",
                                 {"release": CAUGHT}),
    "realloc_freed_alone_move": (rf"realloc\({ADDR}\): .*block is already free",
                                 {"release": CAUGHT}),
    "realloc_freed_alone_aligned": (rf"realloc\({ADDR}\): .*block is already free",
                                 {"release": CAUGHT}),
    # realloc(p, 0) frees p after realloc's own checks of it, named for
    # realloc (they named free): a freed block, a pointer inside a block.
    "realloc_zero_freed":       (rf"realloc\({ADDR}\): .*block is already free",
                                 {"release": UNCAUGHT}),
    "realloc_zero_interior":    (rf"realloc\({ADDR}\): .*not the start of a block, size class (5|6)\b",
                                 {"release": CAUGHT}),
    # Pointers brisk never handed out.
    "free_stack":               (rf"free\({ADDR}\): invalid pointer: not allocated by brisk",
                                 {"release": CAUGHT}),
    "free_global":              (rf"free\({ADDR}\): invalid pointer: not allocated by brisk",
                                 {"release": CAUGHT}),
    "free_mmap":                (rf"free\({ADDR}\): invalid pointer: not allocated by brisk",
                                 {"release": CAUGHT}),
    # A garbage word far above every mapping (it spun for minutes first).
    "free_wild_high":           (rf"free\({ADDR}\): invalid pointer: not allocated by brisk",
                                 {"release": CAUGHT}),
    # brisk's metadata: a segment's header (it named a double free).
    "free_segment_header":      (rf"free\({ADDR}\): invalid pointer: not allocated by brisk",
                                 {"release": CAUGHT}),
    # Pointers inside a live block, of every kind of page.
    # (The secure build asks for 16 bytes more per block: one class up.)
    "free_interior_small":      (rf"free\({ADDR}\): .*not the start of a block, size class (17|18)\b",
                                 {"release": CAUGHT}),
    "free_interior_remote":     (rf"free\({ADDR}\): .*not the start of a block, size class (4|5)\b",
                                 {"release": CAUGHT}),
    "free_interior_large":      (rf"free\({ADDR}\): .*not the start of a block, size class 88\b",
                                 {"release": CAUGHT}),
    "free_interior_huge":       (rf"free\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    # The same pointer given to realloc and malloc_usable_size (both took
    # it for the block's start).
    "realloc_interior_huge":    (rf"realloc\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    "usable_size_interior_huge": (rf"malloc_usable_size\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    # The same past a huge mapping's first 32 MiB, which brisk's map of
    # segments does not mark (it named such a pointer "not allocated by
    # brisk").
    "free_interior_huge_far":   (rf"free\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    "realloc_interior_huge_far": (rf"realloc\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    # A page's first address (the secure build's page lead, before its
    # first block; the release build's first block, which the program
    # holds), and an address in the lead of a page of aligned blocks.
    "free_page_lead":           (rf"free\({ADDR}\): .*not the start of a block, size class 6\b",
                                 {"release": NEVER_OVERLAPPING}),
    "usable_size_lead_aligned": (rf"malloc_usable_size\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    # The last byte of a small block's segment: both builds name it before
    # anything is written there.
    "free_segment_last_byte":   (rf"free\({ADDR}\): invalid pointer: not the start of a block",
                                 {"release": CAUGHT}),
    # A page's tail, past its last whole block: no block starts there,
    # though a whole number of blocks lies before it.
    "free_page_tail":           (rf"free\({ADDR}\): .*not the start of a block, size class (8|9)\b",
                                 {"release": CAUGHT}),
    # Around an aligned block the secure build handed out inside a larger
    # one (it over-allocates for every alignment above 8): a pointer 16
    # bytes in, and that larger block's start.
    "free_aligned_interior":    (rf"free\({ADDR}\): .*not the start of a block",
                                 {"release": CAUGHT}),
    "free_aligned_block_start": (rf"free\({ADDR}\): .*not the start of a block",
                                 {"release": UNCAUGHT}),
    # C23's free_sized with a size larger than the block.
    "free_sized_wrong":         (rf"free_sized\({ADDR}\): .*size larger than the block",
                                 {"release": CAUGHT}),
    # Their size lookup's own checks, named for the call made (they named
    # malloc_usable_size): an interior pointer, and (the secure build's free
    # tag) a block freed already; in the release build the second is a
    # double free among live blocks.
    "free_sized_interior":      (rf"free_sized\({ADDR}\): .*not the start of a block, size class (5|6)\b",
                                 {"release": CAUGHT}),
    "free_aligned_sized_freed": (rf"free_aligned_sized\({ADDR}\): .*block is already free",
                                 {"release": UNCAUGHT}),
    # Writes outside a live block, or into a freed one. Only what stays off
    # the free-list link (a free block's first 8 bytes) is harmless in the
    # release build.
    "overflow_1_in_block":      (rf"\({ADDR}\): .*overflow",
                                 {"release": NEVER_OVERLAPPING}),
    "overflow_1":               (rf"\({ADDR}\): .*overflow",
                                 {"release": UNCAUGHT}),
    "overflow_32":              (rf"\({ADDR}\): .*overflow",
                                 {"release": UNCAUGHT}),
    # One byte before a block: the secure build keeps the block's header
    # (its requested size, encoded) there; in the release build it is the
    # last byte of the block before.
    "underflow_1":              (rf"free\({ADDR}\): .*header was overwritten",
                                 {"release": UNCAUGHT}),
    # Before a huge block: the word in front of it, then its mapping's
    # header. Both builds check that word before they read the header.
    "underflow_huge_1":         (rf"free\({ADDR}\): heap corruption: a huge block's header was overwritten",
                                 {"release": CAUGHT}),
    "underflow_huge_header":    (rf"realloc\({ADDR}\): heap corruption: a huge block's header was overwritten",
                                 {"release": CAUGHT}),
    # The block freed by another thread: the secure build checks its canary
    # when it comes back to its owner, before it can be handed out again.
    "overflow_1_small_other_thread": (rf"free\({ADDR}\): .*overflow",
                                 {"release": NEVER_OVERLAPPING}),
    "overflow_1_other_thread":  (rf"free\({ADDR}\): .*overflow",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    "write_after_free":         (rf"malloc\({ADDR}\): .*(after free|free list)",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    "write_after_free_tail":    (rf"malloc\({ADDR}\): .*(after free|free list)",
                                 {"release": NEVER_OVERLAPPING, "secure": CAUGHT_LATER}),
    # The same caught by calloc, which takes the secure build's slow path
    # every time; the line names malloc, the hand-out, whichever call made it.
    "write_after_free_calloc":  (rf"malloc\({ADDR}\): .*(after free|free list)",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    # A write to the first word of the block the secure build holds back,
    # before the page's next free lets it go onto malloc's list.
    "write_after_free_held":    (rf"malloc\({ADDR}\): .*(after free|free list)",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    # One byte of a free block's link changed, and a link copied from
    # another free block of the page: the secure build decodes each link
    # with its own block's secret and checks it before it follows it.
    "write_after_free_link_byte": (rf"malloc\({ADDR}\): .*(after free|free list)",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    "write_after_free_link_copy": (rf"malloc\({ADDR}\): .*(after free|free list)",
                                 {"release": NEVER_OVERLAPPING, "secure": CAUGHT_LATER}),
    # A block another thread freed in a batch (that thread has a heap), its
    # first word written before the owner takes it back: the secure build's
    # drain finds the word it left there changed.
    "write_after_free_remote_link": (rf"free\({ADDR}\): .*free block was written",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    # A block posted alone to its owner's queue (its freeing thread had
    # exited), its link written after the free: the secure build checks the
    # link when the owner drains the queue.
    "write_after_free_remote_alone": (rf"free\({ADDR}\): .*free block was written",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    # The same link overwritten with exactly 0 ("not linked yet"), which
    # would strand every block queued behind it.
    "write_after_free_remote_alone_zero": (rf"free\({ADDR}\): .*free block was written",
                                 {"release": UNCAUGHT, "secure": CAUGHT_LATER}),
    # A write past a huge block's mapping: the secure build's guard page.
    "overflow_huge":            ("",
                                 {"release": UNCAUGHT, "secure": FAULTS}),
    # Out of a segment's last page, and into a segment's or a huge block's
    # header from the mapping below it: the secure build's guard pages
    # around each segment (the release build has none; its segments usually
    # have unmapped space around them, where the programs map pages of
    # their own).
    "overflow_segment_end":     ("",
                                 {"release": UNCAUGHT, "secure": FAULTS}),
    "overflow_into_segment_header": ("",
                                 {"release": UNCAUGHT, "secure": FAULTS}),
    "overflow_into_huge_header": ("",
                                 {"release": UNCAUGHT, "secure": FAULTS}),
    # One byte past a huge block's requested size: the secure build's canary;
    # in the release build the byte is in the block's own mapping.
    "overflow_huge_1":          (rf"free\({ADDR}\): heap overflow past the requested size, huge block",
                                 {"release": NEVER_OVERLAPPING}),
    # The same byte, then the block grown in its mapping by realloc: the
    # canary is checked before the resize stamps a new one.
    "overflow_huge_1_realloc":  (rf"realloc\({ADDR}\): heap overflow past the requested size, huge block",
                                 {"release": NEVER_OVERLAPPING}),
}

TIMEOUT_S = 30


def expected_outcome(program: str, build: str) -> str:
    outcome = TABLE[program][1].get(build, BUILDS[build])
    if outcome is None:
        sys.exit(f"run_misuse: the table gives no outcome for {program} in build {build}")
    return outcome


def no_core_dumps():
    # A crash after an uncaught misuse is expected; it need not write a core.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(path: str, library: str):
    env = dict(os.environ)
    env["LD_PRELOAD"] = library
    # misuse.h exits at once unless this library is mapped: a preload that
    # did not load would otherwise test glibc's malloc.
    env["MISUSE_EXPECT_MAPPED"] = os.path.basename(library)
    return subprocess.run([path], env=env, capture_output=True, text=True, errors="replace",
                          timeout=TIMEOUT_S, preexec_fn=no_core_dumps)


def describe(rc: int) -> str:
    """A child's exit status in words."""
    if rc < 0:
        return f"killed by {signal.Signals(-rc).name}"
    return f"exit {rc}"


# What brisk prints at start where the environment asks for it (BRISK_VERBOSE's
# options) or sets an option to a value it refuses (a warning naming it): not
# about the misuse, and left out of the lines checked.
STARTUP_LINE = re.compile(r"brisk: (option |BRISK_\w+=)")


# The pointer a program says the `brisk:` line must name (misuse_named in
# misuse.h), and the pointer the line names: `brisk: call(0x...): ...`.
NAMED_LINE = re.compile(r"^misuse: names (0x[0-9a-f]+)$", re.MULTILINE)
BRISK_POINTER = re.compile(r"^brisk: [\w ]+\((0x[0-9a-f]+)\)")


def wrong_pointer(stderr: str, brisk_line: str) -> list:
    """Empty when the brisk line names the pointer the program announced
    last (or it announced none), else the problem."""
    named = NAMED_LINE.findall(stderr)
    if not named:
        return []
    found = BRISK_POINTER.match(brisk_line)
    if found is None:
        return [f"the message names no pointer; expected {named[-1]}"]
    if int(found.group(1), 16) != int(named[-1], 16):
        return [f"the message names {found.group(1)}, the bad pointer is {named[-1]}"]
    return []


def check(program: str, outcome: str, result) -> list:
    """The ways result differs from outcome (empty: as the table says)."""
    pattern = TABLE[program][0]
    brisk_lines = [line for line in result.stderr.splitlines()
                   if line.startswith("brisk: ") and not STARTUP_LINE.match(line)]
    returned = [line for line in result.stderr.splitlines()
                if line.startswith("misuse: ") and line.endswith(" returned")]
    problems = []
    if outcome in (CAUGHT, CAUGHT_LATER):
        if result.returncode != -signal.SIGABRT:
            problems.append(f"expected SIGABRT, got {describe(result.returncode)}")
        if len(brisk_lines) != 1:
            problems.append(f"expected one `brisk:` line, got {len(brisk_lines)}")
        elif not re.search(pattern, brisk_lines[0]):
            problems.append(f"the message does not match /{pattern}/")
        else:
            problems += wrong_pointer(result.stderr, brisk_lines[0])
        if returned and outcome == CAUGHT:
            problems.append("the bad call returned")
    elif outcome == NEVER_OVERLAPPING:
        if result.returncode != 0:
            problems.append(f"expected exit 0, got {describe(result.returncode)}")
        if brisk_lines:
            problems.append("a `brisk:` line")
        if "misuse: no overlap" not in result.stdout:
            problems.append("no `misuse: no overlap` line")
    elif outcome == UNCAUGHT:
        if brisk_lines:
            problems.append("caught after all (update the table and the README)")
        if not returned:
            problems.append(f"the bad call did not return ({describe(result.returncode)})")
    elif outcome == FAULTS:
        if result.returncode != -signal.SIGSEGV:
            problems.append(f"expected SIGSEGV, got {describe(result.returncode)}")
        if brisk_lines:
            problems.append("a `brisk:` line")
        if returned:
            problems.append("the bad call returned")
    else:
        problems.append(f"unknown outcome {outcome!r} in the table")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, choices=sorted(BUILDS),
                        help="which column of the table to check")
    parser.add_argument("--library", required=True, help="the library to preload")
    parser.add_argument("--programs", required=True, help="folder of the built misuse programs")
    parser.add_argument("--only", help="run only this program")
    args = parser.parse_args()
    library = os.path.abspath(args.library)
    if not os.path.isfile(library):
        sys.exit(f"run_misuse: no library {library}")

    # Every program built has a row, and every row a program.
    sources = os.path.dirname(os.path.abspath(__file__))
    programs = sorted(f[:-2] for f in os.listdir(sources) if f.endswith(".c"))
    if programs != sorted(TABLE):
        sys.exit(f"run_misuse: programs without a row: {sorted(set(programs) - set(TABLE))}; "
                 f"rows without a program: {sorted(set(TABLE) - set(programs))}")
    if args.only:
        if args.only not in TABLE:
            sys.exit(f"run_misuse: no program {args.only}")
        programs = [args.only]

    failures = 0
    for program in programs:
        outcome = expected_outcome(program, args.build)
        path = os.path.join(args.programs, program)
        try:
            result = run(path, library)
        except subprocess.TimeoutExpired:
            print(f"FAIL {program:26} {outcome:17} timed out after {TIMEOUT_S} s")
            failures += 1
            continue
        problems = check(program, outcome, result)
        brisk_line = next((line for line in result.stderr.splitlines()
                           if line.startswith("brisk: ")), "")
        status = "ok  " if not problems else "FAIL"
        print(f"{status} {program:26} {outcome:17} {describe(result.returncode):22} {brisk_line}")
        if problems:
            failures += 1
            print(f"     {'; '.join(problems)}")
            for line in (result.stdout + result.stderr).splitlines()[-10:]:
                print(f"     | {line}")
    print(f"{len(programs) - failures} of {len(programs)} misuse programs as the table says "
          f"for build {args.build} ({library})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
