"""Benchmark input for benchmarks/profiler_overhead.py: a varied, allocation-heavy
CPython workload (run with PYTHONMALLOC=malloc so every object goes through malloc).

Deterministic: a fixed seed and no I/O besides one summary line on stdout.
Usage: python bench_python.py [scale]   (scale 1 takes a few seconds)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
import re
import sys


@dataclasses.dataclass
class Order:
    order_id: int
    customer: str
    items: list[tuple[str, int, float]]
    tags: set[str]

    def total(self) -> float:
        return sum(qty * price for _, qty, price in self.items)


class Node:
    __slots__ = ("key", "left", "right")

    def __init__(self, key):
        self.key = key
        self.left = None
        self.right = None


def bst_insert(root, key):
    if root is None:
        return Node(key)
    node = root
    while True:
        if key < node.key:
            if node.left is None:
                node.left = Node(key)
                return root
            node = node.left
        else:
            if node.right is None:
                node.right = Node(key)
                return root
            node = node.right


def bst_depth(root) -> int:
    stack, best = [(root, 1)], 0
    while stack:
        node, d = stack.pop()
        if node is not None:
            best = max(best, d)
            stack.append((node.left, d + 1))
            stack.append((node.right, d + 1))
    return best


WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
         "omicron pi rho sigma tau upsilon phi chi psi omega").split()


def make_orders(rng: random.Random, n: int) -> list[Order]:
    orders = []
    for i in range(n):
        items = [(rng.choice(WORDS), rng.randint(1, 5), round(rng.uniform(1, 100), 2))
                 for _ in range(rng.randint(1, 6))]
        orders.append(Order(i, f"cust-{rng.randint(0, 500):04d}", items,
                            {rng.choice(WORDS) for _ in range(3)}))
    return orders


def json_round_trip(orders: list[Order]) -> int:
    doc = [dataclasses.asdict(o) | {"tags": sorted(o.tags)} for o in orders]
    text = json.dumps(doc)
    back = json.loads(text)
    return len(text) + len(back)


LOG_LINE = re.compile(r"(?P<ip>\d+\.\d+\.\d+\.\d+) - (?P<user>\w+) \[(?P<ts>[^\]]+)\] "
                      r'"(?P<method>GET|POST) (?P<path>/[\w/]*) HTTP/1\.1" (?P<status>\d{3}) '
                      r"(?P<size>\d+)")


def log_analysis(rng: random.Random, n: int) -> dict[str, int]:
    lines = [f"10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)} - {rng.choice(WORDS)} "
             f"[2024-01-{rng.randint(1, 28):02d}T12:00:00] "
             f'"{rng.choice(["GET", "POST"])} /{rng.choice(WORDS)}/{rng.randint(0, 99)} '
             f'HTTP/1.1" {rng.choice([200, 200, 200, 404, 500])} {rng.randint(10, 10000)}'
             for _ in range(n)]
    by_status: collections.Counter[str] = collections.Counter()
    bytes_by_user: dict[str, int] = collections.defaultdict(int)
    for line in lines:
        m = LOG_LINE.match(line)
        if m:
            by_status[m["status"]] += 1
            bytes_by_user[m["user"]] += int(m["size"])
    return dict(by_status) | {"users": len(bytes_by_user)}


def text_stats(rng: random.Random, n: int) -> int:
    text = " ".join(rng.choice(WORDS) + ("," if rng.random() < 0.1 else "") for _ in range(n))
    words = re.findall(r"[a-z]+", text)
    freq = collections.Counter(words)
    bigrams = collections.Counter(zip(words, words[1:]))
    upper = [w.upper() for w in words if len(w) > 3]
    joined = "-".join(sorted(set(upper)))
    return len(freq) + len(bigrams) + len(joined)


def dict_churn(rng: random.Random, n: int) -> int:
    cache: dict[tuple[int, str], list[int]] = {}
    for i in range(n):
        key = (rng.randint(0, 2000), rng.choice(WORDS))
        cache.setdefault(key, []).append(i)
        if len(cache) > 1500:
            for k in list(cache)[:500]:
                del cache[k]
    return sum(len(v) for v in cache.values())


def main() -> None:
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    rng = random.Random(1234)
    result = {}
    orders = make_orders(rng, int(20000 * scale))
    result["revenue"] = round(sum(o.total() for o in orders), 2)
    result["json"] = json_round_trip(orders)
    result["logs"] = log_analysis(rng, int(40000 * scale))
    result["text"] = text_stats(rng, int(200000 * scale))
    result["dict"] = dict_churn(rng, int(200000 * scale))
    root = None
    for _ in range(int(50000 * scale)):
        root = bst_insert(root, rng.random())
    result["bst_depth"] = bst_depth(root)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
