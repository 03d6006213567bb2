"""Long-running CPython workload for benchmarks/cross_version.py: a toy service whose
objects live from microseconds to "forever", so profiles of one process populate the
lifetime classes up to 10 s and beyond (bench_python.py, a batch job of a few
seconds, cannot). Run with PYTHONMALLOC=malloc so every object goes through malloc.

Each kind of retained object is made by a different C path (json decoding, regex
matches, bytearrays, dataclass instances, tuples in sorted lists...), since the
allocation contexts a profiler sees are CPython's C stacks, not Python frames.

Deterministic choices (fixed seed); the clock decides only when things expire.
Usage: python bench_python_service.py [seconds]   (default 70)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_python as bp  # noqa: E402


@dataclasses.dataclass
class Session:
    user: str
    started: float
    history: list
    attrs: dict


def ttl_store(store: collections.deque, now: float) -> None:
    """Drops entries whose expiry has passed (entries are (expiry, value), in order)."""
    while store and store[0][0] <= now:
        store.popleft()


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 70.0
    rng = random.Random(4321)
    start = time.monotonic()
    end = start + seconds
    responses = collections.deque()     # ~30-80 ms: json documents (class 100ms)
    cache = collections.deque()         # ~0.3-0.8 s: regex match groups (class 1s)
    sessions = collections.deque()      # ~3-8 s: dataclass sessions (class 10s)
    archive = collections.deque()       # ~20-50 s: bytearray snapshots (class 100s)
    registry = []                       # never freed (class inf)
    stats = collections.Counter()
    while True:
        now = time.monotonic()
        if now >= end:
            break
        for store in (responses, cache, sessions, archive):
            ttl_store(store, now)
        # short-lived work (class 10ms)
        orders = bp.make_orders(rng, 20)
        stats["json"] += bp.json_round_trip(orders)
        stats["text"] += bp.text_stats(rng, 300)
        stats["dict"] += bp.dict_churn(rng, 300)
        # retained for a while, each by its own kind of allocation
        doc = json.loads(json.dumps([dataclasses.asdict(o) | {"tags": sorted(o.tags)} for o in orders[:3]]))
        responses.append((now + rng.uniform(0.03, 0.08), doc))
        line = f"10.0.{rng.randint(0, 255)}.1 - {rng.choice(bp.WORDS)} [t] \"GET /x HTTP/1.1\" 200 5"
        m = bp.LOG_LINE.match(line)
        if m:
            cache.append((now + rng.uniform(0.3, 0.8), m.groupdict()))
        if rng.random() < 0.3:
            s = Session(rng.choice(bp.WORDS), now, [rng.random() for _ in range(20)],
                        {w: len(w) for w in rng.sample(bp.WORDS, 5)})
            sessions.append((now + rng.uniform(3.0, 8.0), s))
        if rng.random() < 0.05:
            archive.append((now + rng.uniform(20.0, 50.0),
                            bytearray(rng.getrandbits(8) for _ in range(512))))
        if rng.random() < 0.05:
            registry.append(tuple(sorted(re.findall(r"[a-z]+", line))))
        time.sleep(0.002)
    print(json.dumps({"seconds": round(time.monotonic() - start, 1), "registry": len(registry),
                      "work": sum(stats.values())}, sort_keys=True))


if __name__ == "__main__":
    main()
