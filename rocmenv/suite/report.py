"""What a suite run tells: the final table, JUnit XML, a markdown summary, the JSON document.

JUnit XML follows the common schema CI systems read (``testsuites/testsuite/testcase`` with
``failure``, ``error`` and ``skipped`` children; the tail of each failed test's log in the
element's text). The markdown fits ``$GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.hostfs import open_append, write_atomic
from rocmenv.suite.packer import TestResult

LOG_TAIL = 4000  # characters of a failed test's log in its JUnit element
MARK = {
    "passed": "ok",
    "failed": "FAIL",
    "error": "ERROR",
    "cancelled": "cancelled",
    "skipped": "skipped",
}


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

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(r.status == "passed" for r in self.results)

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


def table(report: SuiteReport) -> list[str]:
    rows = [("TEST", "GPUS", "ON", "WALL", "ESTIMATE", "EXIT", "RESULT")]
    for r in report.ordered():
        rows.append(
            (
                r.name,
                str(r.gpus),
                _fmt_gpus(r.assigned),
                f"{r.wall:.1f}s" if r.started is not None else "-",
                f"{r.estimate:.0f}s",
                str(r.exit_code) if r.exit_code is not None else "-",
                MARK[r.status],
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
    for status in ("error", "cancelled", "skipped"):
        if report.count(status):
            parts.append(f"{report.count(status)} {status}")
    extra = " (interrupted)" if report.interrupted else ""
    return (
        f"suite {report.suite}: {', '.join(parts)} in {report.makespan:.1f}s on "
        f"{len(report.pool)} GPU(s){extra}"
    )


def markdown(report: SuiteReport) -> str:
    icon = "✅" if report.passed else "❌"
    out = [
        f"### {icon} suite `{report.suite}` ({report.backend})",
        "",
        summary_line(report),
        "",
        "| test | GPUs | on | wall | estimate | exit | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.ordered():
        wall = f"{r.wall:.1f} s" if r.started is not None else "–"
        code = str(r.exit_code) if r.exit_code is not None else "–"
        out.append(
            f"| `{r.name}` | {r.gpus} | {_fmt_gpus(r.assigned)} | {wall} | {r.estimate:.0f} s "
            f"| {code} | {MARK[r.status]} |"
        )
    return "\n".join(out) + "\n"


def _log_tail(path: str | None) -> str:
    if not path:
        return ""
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - LOG_TAIL))
        return fh.read().decode("utf-8", "replace")
    return ""


def junit_xml(report: SuiteReport) -> str:
    import xml.etree.ElementTree as ET

    suites = ET.Element("testsuites", name=f"rocmenv suite {report.suite}")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=report.suite,
        tests=str(len(report.results)),
        failures=str(report.count("failed")),
        errors=str(report.count("error") + report.count("cancelled")),
        skipped=str(report.count("skipped")),
        time=f"{report.makespan:.3f}",
    )
    for r in report.ordered():
        case = ET.SubElement(
            suite, "testcase", classname=report.suite, name=r.name, time=f"{r.wall:.3f}"
        )
        ET.SubElement(case, "properties")
        props = case.find("properties")
        assert props is not None
        for key, value in (("gpus", _fmt_gpus(r.assigned)), ("estimate", f"{r.estimate:.1f}")):
            ET.SubElement(props, "property", name=key, value=value)
        if r.status == "failed":
            el = ET.SubElement(case, "failure", message=f"exit code {r.exit_code}", type="exit")
            el.text = _log_tail(r.log)
        elif r.status in ("error", "cancelled"):
            el = ET.SubElement(case, "error", message=r.message or r.status, type=r.status)
            el.text = _log_tail(r.log)
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", message="not started (fail-fast or interrupted)")
        if r.log:
            ET.SubElement(case, "system-out").text = f"log: {r.log}"
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


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
            }
            for r in report.ordered()
        ],
    }
