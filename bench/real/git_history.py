"""A git history for the real-program benchmark (bench/real_programs.py), as a
`git fast-import` stream on stdout.

usage: python3 git_history.py COMMITS | git -C REPO fast-import --quiet

200 text files of 50-400 lines; each commit edits 10 of them (lines inserted
and deleted), so the history is full of near-copies for pack-objects' delta
search. Everything is drawn from a seeded generator and every date is fixed:
the same COMMITS gives the same repository, object for object.
"""

import random
import sys

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
         "omicron pi rho sigma tau upsilon phi chi psi omega").split()


def line(rng):
    return " ".join(rng.choice(WORDS) for _ in range(8))


def main():
    commits = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(20261125)
    files = {f"src/file{i:03d}.txt": [line(rng) for _ in range(rng.randint(50, 400))]
             for i in range(200)}
    out = sys.stdout.buffer
    for c in range(commits):
        changed = sorted(files) if c == 0 else rng.sample(sorted(files), 10)
        if c:
            for name in changed:
                lines = files[name]
                for _ in range(rng.randint(1, 10)):
                    at = rng.randrange(len(lines) + 1)
                    if rng.random() < 0.7 or len(lines) < 2:
                        lines.insert(at, line(rng))
                    else:
                        del lines[min(at, len(lines) - 1)]
        message = f"commit {c}: {len(changed)} files\n".encode()
        out.write(b"commit refs/heads/main\n")
        out.write(f"mark :{c + 1}\n".encode())
        out.write(f"committer Bench <bench@example.invalid> {1700000000 + 60 * c} +0000\n"
                  .encode())
        out.write(b"data %d\n%s" % (len(message), message))
        if c:
            out.write(f"from :{c}\n".encode())
        for name in changed:
            data = ("\n".join(files[name]) + "\n").encode()
            out.write(f"M 100644 inline {name}\n".encode())
            out.write(b"data %d\n%s\n" % (len(data), data))
        out.write(b"\n")


if __name__ == "__main__":
    main()
