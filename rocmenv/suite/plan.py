"""Estimates per test and static partitions for CI matrices.

``suite plan NAME --partitions N`` and ``suite run NAME --partition I/N`` split a suite's
selected tests (disabled ones never count) into N parts balanced by estimated time
(:func:`rocmenv.suite.balance.balanced_split`: the reference's longest-first onto the
least-loaded partition, then improved; never a larger worst partition than the reference).
The same inputs always give the same split, so every job of a GitHub matrix
``partition: [0, 1]`` computes the same plan independently. :func:`gha_matrix` is the
``{"include": [...]}`` a workflow's matrix is made from; :func:`partitions_for_time` sizes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rocmenv.errors import UsageError
from rocmenv.suite.balance import balanced_split, reference_split
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


def estimates(
    suite: Suite, history: History, profile: str, tests: Sequence[SuiteTest] | None = None
) -> list[PlannedTest]:
    """The tests (default: every test of the suite) with their estimates (learned when
    measured), longest first."""
    out = []
    for test in suite.tests if tests is None else tests:
        declared = suite.declared(test)
        est = history.estimate(test.name, profile, declared, default=test.est_time is None)
        out.append(PlannedTest(test=test, estimate=est))
    return longest_first(out)


#: More partitions than any CI matrix has jobs (GitHub allows 256 per matrix).
MAX_PARTITIONS = 1000


def _check_count(count: int) -> None:
    if not 1 <= count <= MAX_PARTITIONS:
        raise UsageError(f"--partitions {count}: must be from 1 to {MAX_PARTITIONS}")


def partitions(tests: Sequence[PlannedTest], count: int) -> list[Partition]:
    _check_count(count)
    parts = balanced_split(tests, count, lambda t: t.seconds)
    return [Partition(index=i, tests=tuple(p)) for i, p in enumerate(parts)]


def reference_partitions(tests: Sequence[PlannedTest], count: int) -> list[Partition]:
    """The reference CI's split (longest first, file name breaks ties, onto the least-loaded
    partition): what ``partitions`` is measured against."""
    _check_count(count)
    parts = reference_split(tests, count, lambda t: t.seconds)
    return [Partition(index=i, tests=tuple(p)) for i, p in enumerate(parts)]


def partitions_for_time(tests: Sequence[PlannedTest], seconds: float) -> int:
    """The fewest partitions whose worst one is estimated at most ``seconds`` (at least 1; a
    test longer than that gets a partition of its own)."""
    if not seconds > 0:
        raise UsageError(f"--max-partition-time {seconds}: must be a positive number of seconds")
    longest = max((t.seconds for t in tests), default=0.0)
    limit = max(seconds, longest)
    for count in range(1, min(len(tests), MAX_PARTITIONS) + 1):
        if max(p.seconds for p in partitions(tests, count)) <= limit + 1e-9:
            return count
    return max(1, min(len(tests), MAX_PARTITIONS))


def gha_matrix(parts: Sequence[Partition]) -> dict[str, list[dict[str, object]]]:
    """``{"include": [{"partition": "0/2", "index": 0, "count": 2, …}, …]}``: one matrix
    job per partition (``--partition ${{ matrix.partition }}``)."""
    n = len(parts)
    return {
        "include": [
            {
                "partition": f"{p.index}/{n}",
                "index": p.index,
                "count": n,
                "tests": len(p.tests),
                "estimated_seconds": round(p.seconds),
            }
            for p in parts
        ]
    }


_PART_RE = re.compile(r"([0-9]+)/([0-9]+)", re.ASCII)


def parse_partition(text: str) -> tuple[int, int]:
    """``I/N`` with 0 <= I < N (GitHub matrices count from 0)."""
    match = _PART_RE.fullmatch(text.strip()) if len(text) < 40 else None
    if (
        not match
        or not 1 <= int(match.group(2)) <= MAX_PARTITIONS
        or int(match.group(1)) >= int(match.group(2))
    ):
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
