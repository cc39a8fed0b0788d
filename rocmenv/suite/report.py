"""What a suite run tells: the final table, a markdown summary, the JSON document (JUnit XML:
:mod:`rocmenv.suite.junit`).

A test's row is its final result: ``ok`` (``ok, flaky: 2 attempts`` when a retry passed),
``FAIL``, ``TIMEOUT`` (killed at its timeout; exit code 124), ``ERROR``, ``cancelled``,
``skipped`` (never started) or ``skipped: disabled: <reason>``. The markdown fits
``$GITHUB_STEP_SUMMARY``; ``--json`` carries every attempt. Names and reasons come from the
checkout: the table shows them through :func:`rocmenv.escape.shown`, the markdown as code
spans and escaped text (:func:`rocmenv.escape.markdown_code`, ``markdown_text``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.escape import markdown_code, markdown_text, shown
from rocmenv.hostfs import open_append, write_atomic
from rocmenv.suite.drive import TestResult

MARK = {
    "passed": "ok",
    "failed": "FAIL",
    "timeout": "TIMEOUT",
    "error": "ERROR",
    "cancelled": "cancelled",
    "skipped": "skipped",
}
REASON_IN_TABLE = 60  # characters of a disabled test's reason in the table


@dataclass(frozen=True, kw_only=True)
class SuiteReport:
    suite: str
    backend: str
    results: tuple[TestResult, ...]
    makespan: float
    pool: tuple[int, ...]
    interrupted: bool = False
    warnings: tuple[str, ...] = ()
    log_dir: str | None = None  # where the per-test logs are
    notices: tuple[str, ...] = ()  # what the selection could not use; why nothing ran

    @property
    def passed(self) -> bool:
        """Every test passed (a disabled one is not a failure)."""
        return not self.interrupted and all(
            r.status == "passed" or r.disabled is not None for r in self.results
        )

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    def ordered(self) -> list[TestResult]:
        """Started tests by start time, then the skipped ones."""
        started = [r for r in self.results if r.started is not None]
        return sorted(started, key=lambda r: (r.started or 0.0, r.name)) + [
            r for r in self.results if r.started is None
        ]


def _fmt_gpus(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus) if gpus else "-"


def result_mark(r: TestResult, *, reason_limit: int | None = None) -> str:
    if r.disabled is not None:
        reason = r.disabled
        if reason_limit is not None and len(reason) > reason_limit:
            reason = reason[: reason_limit - 1] + "…"
        return f"skipped: disabled: {reason}"
    mark = MARK[r.status]
    if len(r.attempts) > 1:
        mark += (
            f", flaky: {len(r.attempts)} attempts" if r.flaky else f" ({len(r.attempts)} attempts)"
        )
    return mark


def table(report: SuiteReport) -> list[str]:
    if not report.results:
        return [summary_line(report)]
    rows = [("TEST", "GPUS", "ON", "WALL", "ESTIMATE", "EXIT", "RESULT")]
    for r in report.ordered():
        rows.append(
            (
                shown(r.name),
                str(r.gpus),
                _fmt_gpus(r.assigned),
                f"{r.wall:.1f}s" if r.started is not None else "-",
                f"{r.estimate:.0f}s",
                str(r.exit_code) if r.exit_code is not None else "-",
                shown(result_mark(r, reason_limit=REASON_IN_TABLE)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.append(summary_line(report))
    return lines


def summary_line(report: SuiteReport) -> str:
    parts = [f"{report.count('passed')} passed", f"{report.count('failed')} failed"]
    for status in ("timeout", "error", "cancelled", "skipped"):
        if report.count(status):
            parts.append(f"{report.count(status)} {status}")
    disabled = sum(r.disabled is not None for r in report.results)
    if disabled:
        parts[-1] += f" ({disabled} disabled)"
    flaky = sum(r.flaky for r in report.results)
    if flaky:
        parts.append(f"{flaky} flaky")
    extra = " (interrupted)" if report.interrupted else ""
    return (
        f"suite {shown(report.suite)}: {', '.join(parts)} in {report.makespan:.1f}s on "
        f"{len(report.pool)} GPU(s){extra}"
    )


def markdown(report: SuiteReport) -> str:
    icon = "✅" if report.passed else "❌"
    out = [
        f"### {icon} suite {markdown_code(report.suite)} ({report.backend})",
        "",
        markdown_text(summary_line(report)),
        "",
        "| test | GPUs | on | wall | estimate | exit | result |",
        "|---|---|---|---|---|---|---|",
    ]
    if report.notices:
        out[3:3] = [f"> {markdown_text(text)}" for text in report.notices] + [""]
    for r in report.ordered():
        wall = f"{r.wall:.1f} s" if r.started is not None else "–"
        code = str(r.exit_code) if r.exit_code is not None else "–"
        out.append(
            f"| {markdown_code(r.name)} | {r.gpus} | {_fmt_gpus(r.assigned)} | {wall} | "
            f"{r.estimate:.0f} s | {code} | {markdown_text(result_mark(r))} |"
        )
    return "\n".join(out) + "\n"


def write_text(path: Path, text: str, *, within: Path | None) -> None:
    """Atomically (temp file beside it + rename), following no link inside ``within`` (the
    checkout; :mod:`rocmenv.hostfs`)."""
    write_atomic(path, text, within=within, durable=False, parents=True)


def append_text(path: Path, text: str, *, within: Path | None) -> None:
    """Append to a regular file (``--markdown``, ``$GITHUB_STEP_SUMMARY``), never through a
    link inside ``within``."""
    fd = open_append(path, within=within, parents=True)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(text)


def to_json(report: SuiteReport) -> dict[str, Any]:
    return {
        "suite": report.suite,
        "backend": report.backend,
        "passed": report.passed,
        "interrupted": report.interrupted,
        "makespan": round(report.makespan, 3),
        "pool": list(report.pool),
        "notices": list(report.notices),
        "tests": [
            {
                "name": r.name,
                "gpus": r.gpus,
                "assigned": list(r.assigned),
                "status": r.status,
                "exit_code": r.exit_code,
                "started": r.started,
                "wall": round(r.wall, 3),
                "estimate": round(r.estimate, 3),
                "message": r.message,
                "log": r.log,
                "disabled": r.disabled,
                "timeout": r.timeout,
                "attempts": [
                    {
                        "number": a.number,
                        "status": a.status,
                        "exit_code": a.exit_code,
                        "started": a.started,
                        "wall": round(a.wall, 3),
                        "message": a.message,
                        "log": a.log,
                        "assigned": list(a.assigned),
                    }
                    for a in r.attempts
                ],
            }
            for r in report.ordered()
        ],
    }
