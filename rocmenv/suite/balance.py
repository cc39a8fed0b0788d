"""Splitting a suite's tests into N parts balanced by estimated time.

The reference CI splits a suite by *longest estimate first onto the least-loaded partition*
(file name breaks ties): :func:`reference_split`. :func:`balanced_split` starts from that split
(and from the same rule with rocmenv's tie order: more GPUs first, then name), then improves
it by moving one test, or swapping two, out of the heaviest partition whenever that lowers it
without lifting the other partition to its load — each step makes the loads, sorted from the
heaviest down, strictly smaller, so it ends, and the worst partition is never larger than the
reference's. Deterministic: every job of a CI matrix computes the same split.

Used by ``suite plan``/``--partition`` (:mod:`rocmenv.suite.plan`) and by the packer's lanes
(:mod:`rocmenv.suite.packer`), so the dynamic run and the static plan start from one split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class Item(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def gpus(self) -> int: ...


T = TypeVar("T", bound=Item)
Weight = Callable[[T], float]
MAX_ROUNDS = 500  # improving steps (each is O(tests²)); real suites settle in a few dozen
EPS = 1e-9


def reference_split(items: Sequence[T], count: int, weight: Weight[T]) -> list[list[T]]:
    """Longest first (ties: name) onto the least-loaded part (ties: lowest index)."""
    return _greedy(sorted(items, key=lambda t: (-weight(t), t.name)), count, weight)


def longest_first(items: Sequence[T], weight: Weight[T]) -> list[T]:
    """rocmenv's order: longest first, then more GPUs, then name."""
    return sorted(items, key=lambda t: (-weight(t), -t.gpus, t.name))


def _greedy(ordered: Sequence[T], count: int, weight: Weight[T]) -> list[list[T]]:
    loads = [0.0] * count
    parts: list[list[T]] = [[] for _ in range(count)]
    for item in ordered:
        lightest = min(range(count), key=lambda i: (loads[i], i))
        parts[lightest].append(item)
        loads[lightest] += weight(item)
    return parts


def balanced_split(items: Sequence[T], count: int, weight: Weight[T]) -> list[list[T]]:
    """At least as balanced as :func:`reference_split`; each part longest first."""
    candidates = [
        _improve(_greedy(longest_first(items, weight), count, weight), weight),
        _improve(reference_split(items, count, weight), weight),
    ]
    best = min(candidates, key=lambda parts: _profile(parts, weight))
    return [longest_first(part, weight) for part in best]


def _profile(parts: Sequence[Sequence[T]], weight: Weight[T]) -> list[float]:
    return sorted((sum(weight(t) for t in p) for p in parts), reverse=True)


def _improve(parts: list[list[T]], weight: Weight[T]) -> list[list[T]]:
    parts = [list(p) for p in parts]
    loads = [sum(weight(t) for t in p) for p in parts]
    for _ in range(MAX_ROUNDS):
        heavy = max(range(len(parts)), key=lambda i: (loads[i], -i))
        step = _best_step(parts, loads, heavy, weight)
        if step is None:
            break
        other, out, back = step
        parts[heavy].remove(out)
        parts[other].append(out)
        loads[heavy] -= weight(out)
        loads[other] += weight(out)
        if back is not None:
            parts[other].remove(back)
            parts[heavy].append(back)
            loads[other] -= weight(back)
            loads[heavy] += weight(back)
    return parts


def _best_step(
    parts: Sequence[Sequence[T]], loads: Sequence[float], heavy: int, weight: Weight[T]
) -> tuple[int, T, T | None] | None:
    """The move (``back`` None) or swap out of ``heavy`` that leaves the pair's larger load
    smallest, provided it is below ``heavy``'s load now."""
    best: tuple[float, int, str, str, int, T, T | None] | None = None
    top = loads[heavy]
    for other in range(len(parts)):
        gap = top - loads[other]
        if other == heavy or gap <= EPS:
            continue
        for out in parts[heavy]:
            w_out = weight(out)
            for back in [None, *parts[other]]:
                delta = w_out - (weight(back) if back is not None else 0.0)
                if not EPS < delta < gap - EPS:
                    continue
                worst = max(top - delta, loads[other] + delta)
                key = (worst, other, out.name, back.name if back is not None else "")
                if best is None or key < best[:4]:
                    best = (*key, other, out, back)
    return None if best is None else (best[4], best[5], best[6])
