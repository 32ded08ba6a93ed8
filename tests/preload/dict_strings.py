"""Dict- and string-heavy work that prints a deterministic checksum.

run_preload.sh runs it with and without brisk preloaded and compares the
output. CMake sets PYTHONMALLOC=malloc so that every Python object, not
only the large ones, is allocated with malloc.
"""
import hashlib
import json
import os
import random
import sys
import threading

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def check_brisk_is_mapped():
    """Under the preloaded run, fail unless libbrisk is in this process."""
    if not os.environ.get("BRISK_EXPECT_PRELOAD"):
        return
    with open("/proc/self/maps") as maps:
        if "libbrisk" not in maps.read():
            print("libbrisk is not mapped into python", file=sys.stderr)
            sys.exit(3)


def make_words(rng, count):
    return ["".join(rng.choices(LETTERS, k=rng.randint(1, 14))) for _ in range(count)]


def workload(seed, count):
    rng = random.Random(seed)
    digest = hashlib.sha256()
    words = make_words(rng, count)

    # Counting and grouping: many small dicts, lists and strings.
    counts = {}
    by_prefix = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
        by_prefix.setdefault(word[:2], []).append(word)

    # Strings built, joined, split and rebuilt.
    text = " ".join(words)
    assert text.split(" ") == words
    labels = {f"{w}:{i}": w.upper() * (i % 5 + 1) for i, w in enumerate(words)}
    lines = "\n".join(f"{k}={v}" for k, v in sorted(labels.items()))
    digest.update(lines.encode())

    # A JSON round trip of nested containers.
    doc = {
        "counts": counts,
        "groups": {p: sorted(ws)[:20] for p, ws in by_prefix.items()},
        "top": sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:100],
    }
    encoded = json.dumps(doc, sort_keys=True)
    assert json.loads(encoded) == json.loads(json.dumps(doc, sort_keys=True))
    digest.update(encoded.encode())

    # Churn: drop half of the dict and refill it with longer strings.
    for key in list(labels)[::2]:
        del labels[key]
    for i in range(count // 2):
        labels[f"new{i}"] = "-".join(rng.sample(words, 5))
    digest.update(repr(sorted(labels.items())).encode())
    return digest.hexdigest()


def main():
    check_brisk_is_mapped()
    count = 25000
    serial = [workload(seed, count) for seed in range(3)]

    # The same work on threads, so blocks cross threads and the GIL moves.
    threaded = [None] * 4

    def run(index):
        threaded[index] = workload(100 + index, count)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for name, value in enumerate(serial + threaded):
        print(name, value)
    print("total", hashlib.sha256("".join(serial + threaded).encode()).hexdigest())


if __name__ == "__main__":
    main()
