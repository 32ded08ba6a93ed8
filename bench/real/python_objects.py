"""A Python program that allocates the way Python programs do (bench/real_programs.py).

usage: python3 python_objects.py SCALE

Builds records as dicts, lists, strings and small class instances, round-trips
them through json, sorts and groups them, grows and drops a tree of small
objects, and prints one digest line per phase. Everything is drawn from a
seeded generator, so the output depends on SCALE alone (run it with a fixed
PYTHONHASHSEED: the set phase's digest is order-independent, the rest never
iterates a set). The benchmark compares this output across allocators.
"""

import collections
import hashlib
import json
import random
import sys

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
         "omicron pi rho sigma tau upsilon phi chi psi omega").split()


class Point:
    def __init__(self, x, y, label):
        self.x = x
        self.y = y
        self.label = label

    def moved(self, dx, dy):
        return Point(self.x + dx, self.y + dy, self.label)


class Slotted:
    __slots__ = ("key", "weight", "tags")

    def __init__(self, key, weight, tags):
        self.key = key
        self.weight = weight
        self.tags = tags


class Node:
    __slots__ = ("value", "left", "right")

    def __init__(self, value):
        self.value = value
        self.left = None
        self.right = None


def digest(*parts):
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()[:16]


def make_records(rng, count):
    records = []
    for i in range(count):
        name = "-".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        records.append({
            "id": i,
            "name": name,
            "score": rng.randint(0, 1_000_000) / 100.0,
            "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 6))],
            "pos": {"x": rng.randint(-500, 500), "y": rng.randint(-500, 500)},
            "note": f"record {i} of {count}: {name.upper()}" * rng.randint(1, 3),
        })
    return records


def phase_json(records):
    text = json.dumps(records, sort_keys=True)
    back = json.loads(text)
    # A second round in pieces: many small documents, as a server would see them.
    pieces = [json.dumps(r) for r in back[::3]]
    parsed = [json.loads(p) for p in pieces]
    return len(text), digest(text[:4096], text[-4096:], len(parsed), parsed[-1])


def phase_objects(rng, records):
    points = [Point(r["pos"]["x"], r["pos"]["y"], r["name"]) for r in records]
    for _ in range(3):
        points = [p.moved(rng.randint(-3, 3), rng.randint(-3, 3)) for p in points]
    slotted = [Slotted(r["name"], r["score"], tuple(r["tags"])) for r in records]
    heavy = [s for s in slotted if s.weight > 5000.0]
    return digest(sum(p.x for p in points), sum(p.y for p in points), len(heavy),
                  points[len(points) // 2].label)


def phase_sort_group(records):
    by_score = sorted(records, key=lambda r: (-r["score"], r["name"], r["id"]))
    groups = collections.defaultdict(list)
    for r in records:
        groups[r["name"].split("-")[0]].append(r["id"])
    counts = collections.Counter(tag for r in records for tag in r["tags"])
    tops = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:5]
    return digest([r["id"] for r in by_score[:50]], [(k, len(v)) for k, v in tops],
                  sorted(counts.items()))


def phase_strings(rng, count):
    lines = []
    for i in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        line = " ".join(words)
        line = line.replace("a", "A").title() + f" #{i:07d}"
        lines.append(line)
    text = "\n".join(lines)
    fields = [line.split() for line in text.splitlines()]
    joined = ",".join(f[-1] for f in fields)
    lengths = collections.Counter(len(f) for f in fields)
    uniques = set(word for f in fields for word in f[:-1])
    return digest(len(text), len(joined), sorted(lengths.items()), sorted(uniques))


def tree_insert(root, value):
    if root is None:
        return Node(value)
    node = root
    while True:
        if value < node.value:
            if node.left is None:
                node.left = Node(value)
                return root
            node = node.left
        else:
            if node.right is None:
                node.right = Node(value)
                return root
            node = node.right


def tree_depth_sum(root):
    total, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if node is None:
            continue
        total += depth
        stack.append((node.left, depth + 1))
        stack.append((node.right, depth + 1))
    return total


def phase_trees(rng, rounds, size):
    sums = []
    for _ in range(rounds):
        root = None
        for _ in range(size):
            root = tree_insert(root, rng.random())
        sums.append(tree_depth_sum(root))
        # Dropping the root frees every node of the tree.
    return digest(sums)


def phase_churn(rng, count):
    # Short-lived tuples, lists and dicts, as comprehensions and iterators make.
    acc = 0
    window = collections.deque(maxlen=1000)
    for i in range(count):
        item = (i, str(i), [i, i + 1], {"k": i})
        window.append(item)
        if rng.random() < 0.1:
            acc += sum(len(t[1]) for t in window)
    return digest(acc, len(window))


def main():
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rng = random.Random(20261124)
    records = make_records(rng, 1000 * scale)
    print("records", len(records), digest(records[0], records[-1]))
    size, d = phase_json(records)
    print("json", size, d)
    print("objects", phase_objects(rng, records))
    print("sort_group", phase_sort_group(records))
    del records
    print("strings", phase_strings(rng, 1000 * scale))
    print("trees", phase_trees(rng, 4, 500 * scale))
    print("churn", phase_churn(rng, 2000 * scale))


if __name__ == "__main__":
    main()
