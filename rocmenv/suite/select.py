"""Which of a suite's tests a run takes: cadence, labels, disabled.

* **cadence** (``--cadence regular|nightly|weekly``, default ``regular``): a test registered
  with ``nightly=True`` runs only in the nightly and weekly cadences;
* **labels** (``--labels`` with the PR's label names, ``--all-labels``): a test runs when it
  has no labels or one of its labels is included — the project's ``[labels]`` policy says
  what the names and the cadence include (:mod:`rocmenv.suite.labels`);
* **disabled** (a reason): of the tests left, a disabled one is never run and never counted
  in a partition, but it is listed, planned and reported as skipped with its reason.

Tests the cadence or labels leave out are *deselected*: not part of this run at all (``suite
list --json`` says why). What a run could not use is named, never an error: a PR label that
is not the policy's, a label no test of the suite carries, and — when nothing is left — why
(:func:`empty_reason`).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass

from rocmenv.errors import UsageError
from rocmenv.escape import control_char
from rocmenv.suite.labels import CADENCES, Cadence, admitted, asked
from rocmenv.suite.model import Suite, SuiteTest

NIGHTLY_ONLY = "nightly only (run with --cadence nightly or weekly)"


@dataclass(frozen=True, kw_only=True)
class Selection:
    cadence: Cadence = "regular"
    labels: tuple[str, ...] | None = None  # --labels as given (PR label names); None: not given
    all_labels: bool = False  # --all-labels


@dataclass(frozen=True, kw_only=True)
class Selected:
    run: tuple[SuiteTest, ...]  # to run
    disabled: tuple[SuiteTest, ...]  # reported as skipped with the reason
    deselected: tuple[tuple[SuiteTest, str], ...]  # not part of this run, and why
    notices: tuple[str, ...] = ()  # names the selection could not use
    asked: str = ""  # what was asked, as one phrase ("cadence regular, labels amd")


def parse_labels(text: str | None) -> tuple[str, ...] | None:
    """``--labels a,b`` (spaces and empty items ignored; ``""``: no labels)."""
    if text is None:
        return None
    labels = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
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
    what = asked(
        suite.label_policy, selection.cadence, selection.labels,
        default=suite.include_labels, all_labels=selection.all_labels,
    )  # fmt: skip
    run: list[SuiteTest] = []
    disabled: list[SuiteTest] = []
    deselected: list[tuple[SuiteTest, str]] = []
    for test in suite.tests:
        why = None
        if test.nightly and selection.cadence == "regular":
            why = NIGHTLY_ONLY
        elif not admitted(what.include, test.labels):
            why = f"labels {', '.join(test.labels)} not asked for (--labels)"
        if why is not None:
            deselected.append((test, why))
        elif test.disabled is not None:
            disabled.append(test)
        else:
            run.append(test)
    carried = {label for t in suite.tests for label in t.labels}
    notices = list(what.notices)
    for label in what.labels if suite.label_policy.declared else ():
        if label not in carried:
            notices.append(f"label {label!r} matches no test of suite {suite.name!r}")
    shown = f"cadence {selection.cadence}, " + (
        "all labels" if selection.all_labels
        else f"labels {', '.join(selection.labels) or 'none'}" if selection.labels is not None
        else "no --labels"
    )  # fmt: skip
    return Selected(run=tuple(run), disabled=tuple(disabled), deselected=tuple(deselected),
                    notices=tuple(notices), asked=shown)  # fmt: skip


def empty_reason(suite: Suite, chosen: Selected) -> str:
    """Why a selection has nothing to run, in one phrase."""
    if not suite.tests:
        return "the suite has no tests (check its tests and discover)"
    by_labels = [t for t, why in chosen.deselected if why != NIGHTLY_ONLY]
    nightly = [t for t, why in chosen.deselected if why == NIGHTLY_ONLY]
    parts = []
    if by_labels:
        wanted = sorted({label for t in by_labels for label in t.labels})
        parts.append(
            f"labels left out {len(by_labels)} test(s) (they carry {', '.join(wanted)}; a PR "
            "asks for them with its labels)"
        )
    if nightly:
        parts.append(f"{len(nightly)} test(s) are nightly only (--cadence nightly or weekly)")
    if chosen.disabled:
        parts.append(f"{len(chosen.disabled)} test(s) are disabled")
    return "; ".join(parts)


def nothing_selected(
    suite: Suite, chosen: Selected, partition: tuple[int, int] | None = None
) -> str:
    """The notice of a run or plan with nothing to run: what was asked, and why."""
    where = chosen.asked + (f", partition {partition[0]}/{partition[1]}" if partition else "")
    if chosen.run and partition is not None:
        reason = f"its {len(chosen.run)} selected test(s) are all in other partitions"
    else:
        reason = empty_reason(suite, chosen)
    return f"no tests selected: suite {suite.name!r} ({where}): {reason}"


def notices_of(
    suite: Suite, chosen: Selected, partition: tuple[int, int] | None = None
) -> list[str]:
    """The selection's notices, and why nothing was selected when nothing was."""
    return [*chosen.notices, *([] if chosen.run else [nothing_selected(suite, chosen, partition)])]


def names(tests: Sequence[SuiteTest]) -> list[str]:
    return [t.name for t in tests]
