"""Which of a suite's tests a run takes: cadence, labels, disabled.

* **cadence** (``--cadence regular|nightly|weekly``, default ``regular``): a test registered
  with ``nightly=True`` runs only in the nightly and weekly cadences;
* **labels** (``--labels a,b``): a test runs when it has no labels or one of its labels is in
  the set, as the reference runner's ``run-ci-<label>`` opt-in does; ``--all-labels`` keeps
  every test. Without either flag the suite's ``include-labels`` is the set, and a suite
  without one keeps every test;
* **disabled** (a reason): of the tests left, a disabled one is never run and never counted
  in a partition, but it is listed, planned and reported as skipped with its reason.

Tests the cadence or labels leave out are *deselected*: not part of this run at all (``suite
list --json`` says why).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from rocmenv.errors import UsageError
from rocmenv.escape import control_char
from rocmenv.suite.model import Suite, SuiteTest

Cadence = Literal["regular", "nightly", "weekly"]
CADENCES: Final = typing.get_args(Cadence)


@dataclass(frozen=True, kw_only=True)
class Selection:
    cadence: Cadence = "regular"
    labels: frozenset[str] | None = None  # --labels; None: not given
    all_labels: bool = False  # --all-labels


@dataclass(frozen=True, kw_only=True)
class Selected:
    run: tuple[SuiteTest, ...]  # to run
    disabled: tuple[SuiteTest, ...]  # reported as skipped with the reason
    deselected: tuple[tuple[SuiteTest, str], ...]  # not part of this run, and why


def parse_labels(text: str | None) -> frozenset[str] | None:
    """``--labels a,b`` (spaces and empty items ignored; ``""``: unlabelled tests only)."""
    if text is None:
        return None
    labels = frozenset(part.strip() for part in text.split(",") if part.strip())
    for label in labels:
        if len(label) > 200 or control_char(label) is not None:
            raise UsageError(f"--labels: {label[:40]!r} is not a label")
    return labels


def selection_of(cadence: str | None, labels: str | None, all_labels: bool = False) -> Selection:
    if labels is not None and all_labels:
        raise UsageError("give --labels or --all-labels, not both")
    chosen = cadence or "regular"
    if chosen not in CADENCES:
        raise UsageError(f"--cadence {chosen!r}: one of {', '.join(CADENCES)}")
    return Selection(
        cadence=typing.cast(Cadence, chosen), labels=parse_labels(labels), all_labels=all_labels
    )


def select(suite: Suite, selection: Selection) -> Selected:
    include = selection.labels
    if include is None and not selection.all_labels and suite.include_labels is not None:
        include = frozenset(suite.include_labels)
    if selection.all_labels:
        include = None
    run: list[SuiteTest] = []
    disabled: list[SuiteTest] = []
    deselected: list[tuple[SuiteTest, str]] = []
    for test in suite.tests:
        why = _deselected(test, selection.cadence, include)
        if why is not None:
            deselected.append((test, why))
        elif test.disabled is not None:
            disabled.append(test)
        else:
            run.append(test)
    return Selected(run=tuple(run), disabled=tuple(disabled), deselected=tuple(deselected))


def _deselected(test: SuiteTest, cadence: Cadence, include: frozenset[str] | None) -> str | None:
    if test.nightly and cadence == "regular":
        return "nightly only (run with --cadence nightly or weekly)"
    if include is not None and test.labels and not include & set(test.labels):
        return f"labels {', '.join(test.labels)} not asked for (--labels)"
    return None


def names(tests: Sequence[SuiteTest]) -> list[str]:
    return [t.name for t in tests]
