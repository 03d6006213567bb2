"""Peak RSS and wall time of one allocation-heavy command under each allocator
(`lifetime run`): glibc, jemalloc, mimalloc, gperftools' tcmalloc, LLAMA with one class
for every object (the paper's policy and the tolerant preset), and the simulator's
TCMalloc-like baseline heap on real memory.  A quick measurement, not the issue's full
benchmark (Redis, the model predictor, RSS over time): that is the next slice.

    .venv/bin/python benchmarks/allocator_rss.py [--repeat N]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

# Waves of dicts built and dropped, a few survivors kept from each (PYTHONMALLOC=malloc:
# every object through the allocator under test).
WORKLOAD = """
import random
r = random.Random(0)
keep = []
for wave in range(20):
    batch = [{str(i): 'x' * r.randrange(1, 200), 'n': i} for i in range(50000)]
    keep.append(batch[::50])
    del batch
print(sum(len(b) for b in keep))
"""

CONFIGS = [
    ("glibc", []),
    ("jemalloc", []),
    ("mimalloc", []),
    ("tcmalloc-gperftools", []),
    ("llama", ["--policy", "paper", "--predictor", "constant:0"]),
    ("llama", ["--policy", "tolerant", "--predictor", "constant:0"]),
    ("llama", ["--policy", "baseline"]),
]
LINE = re.compile(r"peak RSS ([\d.]+) MiB, wall ([\d.]+) s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per allocator; the median is shown")
    args = ap.parse_args()
    print(f"{'allocator':<34} {'peak RSS MiB':>12} {'wall s':>8}")
    for name, extra in CONFIGS:
        rss, wall = [], []
        for _ in range(args.repeat):
            proc = subprocess.run([sys.executable, "-m", "lifetime.cli", "run", "--allocator", name, *extra, "--",
                                   "env", "PYTHONMALLOC=malloc", sys.executable, "-c", WORKLOAD],
                                  capture_output=True, text=True, check=True)
            m = LINE.search(proc.stderr)
            rss.append(float(m.group(1)))
            wall.append(float(m.group(2)))
        label = " ".join([name, *extra[1::2]])
        print(f"{label:<34} {sorted(rss)[len(rss) // 2]:>12.1f} {sorted(wall)[len(wall) // 2]:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
