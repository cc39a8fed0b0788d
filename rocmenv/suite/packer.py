"""The GPU-slot packer: disjoint GPU sets from a pool, longest expected test first, the next
test started the moment enough GPUs are free.

:class:`Packer` is the pure state machine (no clock, no threads): :meth:`Packer.take`
hands out every pending test that fits now, in longest-first order (a test that does not
fit is passed over for a later, smaller one: list scheduling), each with the lowest free
GPU indices; :meth:`Packer.release` gives a finished test's GPUs back.

When every test needs the same number of GPUs g and the pool holds k >= 2 groups of g
(the reference CI's shape: 4-GPU tests on an 8-GPU host), the pool is cut into k lanes and
the tests are first split between them exactly as ``suite plan --partitions k`` splits
them (longest first onto the lightest lane); a lane that runs out of its own tests takes
the shortest pending test of the lane with the most estimated work left. A test taken that
way was waiting, so it ends no later on the idle lane than it would have on its own, and the
other lane only loses work: the makespan is never worse than the static split's, whatever
the actual times (plain list scheduling can be, by a few per cent). :func:`simulate`
drives it with given durations (benchmarks, tests); :func:`run_packed` drives it with real
tests, one thread each, and owns cancellation (``--fail-fast``, SIGINT): every running test
is told to stop, repeatedly until it has, and tests not started are reported as skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rocmenv.errors import UsageError
from rocmenv.suite.balance import balanced_split
from rocmenv.suite.policy import RunPolicy


@dataclass(frozen=True, kw_only=True)
class Job:
    name: str
    gpus: int
    estimate: float
    timeout: float | None = None  # seconds from the container's start; None: no limit
    policy: RunPolicy | None = None  # retries (None: none)
    attempt: int = 1  # 1-based: the retry of a failed attempt is attempt 2


def longest_first(jobs: Sequence[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (-j.estimate, -j.gpus, j.name))


class Packer:
    """Which tests start now, on which GPUs. ``pool`` holds host GPU indices."""

    def __init__(
        self, jobs: Sequence[Job], pool: Sequence[int], *, max_parallel: int | None = None
    ) -> None:
        too_big = [j for j in jobs if j.gpus > len(pool)]
        if too_big:
            names = ", ".join(f"{j.name} ({j.gpus})" for j in too_big)
            raise UsageError(
                f"{len(too_big)} test(s) need more GPUs than the pool of {len(pool)} has: {names}",
                hint="give the suite more GPUs (--gpus all), or lower those tests' gpus",
            )
        if len(set(pool)) != len(pool):
            raise UsageError(f"the GPU pool {list(pool)} names a GPU twice")
        if max_parallel is not None and max_parallel < 1:
            raise UsageError(f"--max-parallel {max_parallel}: must be at least 1")
        self.pending: list[Job] = longest_first(jobs)
        self.free: list[int] = sorted(pool)
        self.running: dict[str, tuple[int, ...]] = {}
        self.max_parallel = max_parallel
        self.pool_size = len(pool)  # pragma: no mutate (nothing reads it: equivalent)
        self.lanes: list[tuple[int, ...]] = []  # pragma: no mutate (None: as falsy, equivalent)
        self.queues: list[list[Job]] = []
        sizes = {j.gpus for j in jobs}
        if len(sizes) == 1 and (g := sizes.pop()) > 0 and len(pool) // g >= 2:
            k = len(pool) // g
            if max_parallel is None or max_parallel >= k:
                self.lanes = [tuple(self.free[i * g : (i + 1) * g]) for i in range(k)]
                self.queues = split(self.pending, k)

    def take(self) -> list[tuple[Job, tuple[int, ...]]]:
        if self.lanes:
            return self._take_lanes()
        started: list[tuple[Job, tuple[int, ...]]] = []
        for job in list(self.pending):
            if self.max_parallel is not None and len(self.running) >= self.max_parallel:
                break
            if job.gpus > len(self.free):
                continue
            gpus, self.free = tuple(self.free[: job.gpus]), self.free[job.gpus :]
            self.pending.remove(job)
            self.running[job.name] = gpus
            started.append((job, gpus))
        return started

    def _take_lanes(self) -> list[tuple[Job, tuple[int, ...]]]:
        started: list[tuple[Job, tuple[int, ...]]] = []
        busy = set(self.running.values())
        for i, lane in enumerate(self.lanes):
            if lane in busy or not self.pending:
                continue
            if self.queues[i]:
                job = self.queues[i].pop(0)
            else:  # steal the shortest test of the lane with the most work left
                loads = [(sum(j.estimate for j in q), -n) for n, q in enumerate(self.queues) if q]
                job = self.queues[-max(loads)[1]].pop()
            self.pending.remove(job)
            # pragma below: with lanes nothing reads free (a lane is busy or not): equivalent
            self.free = [g for g in self.free if g not in lane]  # pragma: no mutate
            self.running[job.name] = lane
            started.append((job, lane))
        return started

    def requeue(self, job: Job, gpus: tuple[int, ...]) -> None:
        """Run ``job`` again (a retry), before the tests still waiting — on the lane of
        ``gpus`` when there are lanes."""
        self.pending.insert(0, job)
        if self.lanes:
            lane = self.lanes.index(gpus) if gpus in self.lanes else 0
            self.queues[lane].insert(0, job)

    def release(self, name: str) -> None:
        self.free = sorted([*self.free, *self.running.pop(name)])

    def drain(self) -> list[Job]:
        """Start nothing more; returns the tests that will not run."""
        left, self.pending = self.pending, []
        # pragma below: after a drain nothing reads the queues (take skips every lane when
        # nothing is pending; run_packed requeues nothing once stopping): equivalent
        self.queues = [[] for _ in self.queues]  # pragma: no mutate
        return left

    @property
    def finished(self) -> bool:
        return not self.pending and not self.running


def split(jobs: Sequence[Job], count: int) -> list[list[Job]]:
    """The split of :func:`rocmenv.suite.plan.partitions`, each lane longest first."""
    return balanced_split(jobs, count, lambda j: j.estimate)


@dataclass(frozen=True, kw_only=True)
class Slot:
    name: str
    gpus: tuple[int, ...]
    start: float
    end: float


def simulate(
    jobs: Sequence[Job],
    durations: Mapping[str, float],
    pool_size: int,
    *,
    max_parallel: int | None = None,
) -> list[Slot]:
    """The schedule :func:`run_packed` makes when each test takes ``durations[name]``."""
    packer = Packer(jobs, list(range(pool_size)), max_parallel=max_parallel)
    now = 0.0
    ends: list[tuple[float, str]] = []
    slots: list[Slot] = []
    while not packer.finished:
        for job, gpus in packer.take():
            end = now + durations[job.name]
            heapq.heappush(ends, (end, job.name))
            slots.append(Slot(name=job.name, gpus=gpus, start=now, end=end))
        if not ends:  # nothing runs and nothing fits: cannot happen after the size check
            raise AssertionError("packer stalled")  # pragma: no mutate (unreachable, see above)
        now, name = heapq.heappop(ends)
        packer.release(name)
        while ends and ends[0][0] == now:
            packer.release(heapq.heappop(ends)[1])
    return slots


def lower_bound(jobs: Sequence[Job], durations: Mapping[str, float], pool_size: int) -> float:
    """max(sum of time x GPUs / pool, longest test): no schedule can beat it."""
    area = sum(durations[j.name] * max(j.gpus, 0) for j in jobs) / max(pool_size, 1)
    return max(area, max((durations[j.name] for j in jobs), default=0.0))
