"""Estimates per test and static partitions for CI matrices.

``suite plan NAME --partitions N`` and ``suite run NAME --partition I/N`` split a suite
into N parts balanced by estimated time: tests longest first (ties: more GPUs first, then
by name), each onto the partition with the least estimated time so far (ties: the lowest
index). The same inputs always give the same split, so every job of a GitHub matrix
``partition_id: [0, 1]`` computes the same plan independently.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rocmenv.errors import UsageError
from rocmenv.suite.history import Estimate, History
from rocmenv.suite.model import Suite, SuiteTest


@dataclass(frozen=True, kw_only=True)
class PlannedTest:
    test: SuiteTest
    estimate: Estimate

    @property
    def name(self) -> str:
        return self.test.name

    @property
    def gpus(self) -> int:
        return self.test.gpus

    @property
    def seconds(self) -> float:
        return self.estimate.seconds


@dataclass(frozen=True, kw_only=True)
class Partition:
    index: int
    tests: tuple[PlannedTest, ...]

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.tests)

    @property
    def gpu_seconds(self) -> float:
        return sum(t.seconds * t.gpus for t in self.tests)


def longest_first(tests: Sequence[PlannedTest]) -> list[PlannedTest]:
    return sorted(tests, key=lambda t: (-t.seconds, -t.gpus, t.name))


def estimates(suite: Suite, history: History, profile: str) -> list[PlannedTest]:
    """Every test of the suite with its estimate (learned when measured), longest first."""
    out = []
    for test in suite.tests:
        declared = suite.declared(test)
        est = history.estimate(test.name, profile, declared, default=test.est_time is None)
        out.append(PlannedTest(test=test, estimate=est))
    return longest_first(out)


def partitions(tests: Sequence[PlannedTest], count: int) -> list[Partition]:
    if count < 1:
        raise UsageError(f"--partitions {count}: must be at least 1")
    loads = [0.0] * count
    parts: list[list[PlannedTest]] = [[] for _ in range(count)]
    for test in longest_first(tests):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        parts[lightest].append(test)
        loads[lightest] += test.seconds
    return [Partition(index=i, tests=tuple(p)) for i, p in enumerate(parts)]


_PART_RE = re.compile(r"([0-9]+)/([0-9]+)")


def parse_partition(text: str) -> tuple[int, int]:
    """``I/N`` with 0 <= I < N (GitHub matrices count from 0)."""
    match = _PART_RE.fullmatch(text.strip())
    if not match or int(match.group(2)) < 1 or int(match.group(1)) >= int(match.group(2)):
        raise UsageError(
            f"--partition {text!r} is not I/N with 0 <= I < N",
            hint="e.g. --partition 0/2 and --partition 1/2 for a two-job matrix",
        )
    return int(match.group(1)), int(match.group(2))


def plan_json(parts: Sequence[Partition]) -> list[dict[str, object]]:
    return [
        {
            "index": p.index,
            "estimated_seconds": round(p.seconds, 3),
            "tests": [
                {
                    "name": t.name,
                    "gpus": t.gpus,
                    "estimate": round(t.seconds, 3),
                    "declared": round(t.estimate.declared, 3),
                    "source": t.estimate.source,
                    "runs": t.estimate.runs,
                }
                for t in p.tests
            ],
        }
        for p in parts
    ]
