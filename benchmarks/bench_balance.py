"""`suite plan --partitions N`: the worst partition of the balanced split vs the reference
CI's longest-first split, on random suites shaped like the reference's (estimates 60-1800 s,
10-60 tests), and the time it takes to plan.

    .venv/bin/python benchmarks/bench_balance.py
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rocmenv.suite.balance import balanced_split, reference_split


@dataclass(frozen=True)
class T:
    name: str
    seconds: float
    gpus: int = 4


def worst(parts: list[list[T]]) -> float:
    return max(sum(t.seconds for t in p) for p in parts)


def main() -> None:
    rng = random.Random(17)
    print(
        "| partitions | suites | worst / reference: median | best | never worse | plan time (median, max) |"
    )
    print("|---|---|---|---|---|---|")
    for count in (2, 3, 4, 8):
        ratios, times = [], []
        for _ in range(200):
            n = rng.randint(10, 60)
            items = [T(f"test_{i:03d}.py", float(rng.randint(60, 1800))) for i in range(n)]
            t0 = time.perf_counter()
            ours = balanced_split(items, count, lambda t: t.seconds)
            times.append(time.perf_counter() - t0)
            ratios.append(worst(ours) / worst(reference_split(items, count, lambda t: t.seconds)))
        print(
            f"| {count} | 200 | {statistics.median(ratios):.4f} | {min(ratios):.4f} | "
            f"{sum(r <= 1 + 1e-12 for r in ratios)}/200 | "
            f"{1000 * statistics.median(times):.1f} ms, {1000 * max(times):.1f} ms |"
        )


if __name__ == "__main__":
    main()
