"""A suite run as JUnit XML that every consumer reads, whatever the logs hold.

Shape (Maven Surefire's test report, which the GitHub test-report actions and CI servers
read; ``tests/support/junit.xsd`` is the schema the tests validate against)::

    <testsuites name=…><testsuite name tests failures errors skipped time>
      <testcase classname name time>
        <failure|error message type>log tail</…>         the last attempt, when it failed
        <rerunFailure|rerunError message type>             earlier failed attempts of a test
          <stackTrace>log tail</stackTrace></…>            that failed in the end
        <flakyFailure|flakyError message type>             failed attempts of a test that
          <stackTrace>log tail</stackTrace></…>            passed on a retry (as Surefire and
                                                           pytest-rerunfailures report them)
        <skipped message="disabled: <reason>"/>            disabled, or never started
        <system-out>GPUs, estimate, timeout, log paths</system-out>

``timeout`` is a failure of type ``timeout``; ``cancelled`` an error. Every text and attribute
passes :func:`rocmenv.escape.shown` (a log's text with ``lines=True``): ANSI colours are
removed, the characters XML 1.0 cannot hold (NUL and other control characters, lone
surrogates from undecodable file names, U+FFFE/FFFF) and the others a reader must not be
shown raw become visible ``\\uNNNN`` escapes, invalid UTF-8 in a log becomes U+FFFD, and a
log longer than :data:`LOG_TAIL` bytes is cut to its end with a note saying so and where the
whole log is. The standard library's ElementTree escapes markup; nothing else is needed.
"""

from __future__ import annotations

import contextlib
import os
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from rocmenv.escape import shown
from rocmenv.suite.drive import Attempt, TestResult

if TYPE_CHECKING:
    from rocmenv.suite.report import SuiteReport

LOG_TAIL = 16_000  # bytes of a failed attempt's log in its element
FAILURE_KIND = ("failed", "timeout")
ERROR_KIND = ("error", "cancelled")


def log_tail(path: str | None, limit: int = LOG_TAIL) -> str:
    """The end of a log file as XML-safe text, with a note when it was cut."""
    if not path:
        return ""
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        data = fh.read(limit)
        text = data.decode("utf-8", "replace")
        if size > limit:
            text = (
                f"[rocmenv: the log is {size} bytes; its last {len(data)} follow; "
                f"the whole log: {path}]\n{text}"
            )
        return shown(text, lines=True)
    return ""


def _kind(status: str, *, final: bool, flaky: bool) -> str:
    prefix = "flaky" if flaky else ("" if final else "rerun")
    base = "Failure" if status in FAILURE_KIND else "Error"
    return (prefix + base) if prefix else base.lower()


def _message(a: Attempt) -> str:
    if a.status == "timeout":
        return shown(a.message or "timeout", lines=True)
    if a.status == "failed":
        return f"exit code {a.exit_code}"
    return shown(a.message or a.status, lines=True)


def attempts_of(r: TestResult) -> tuple[Attempt, ...]:
    """Every attempt; a result made without them (never started: none) counts as one."""
    if r.attempts or r.status == "skipped":
        return r.attempts
    return (
        Attempt(number=1, status=r.status, exit_code=r.exit_code, wall=r.wall,
                message=r.message, log=r.log, assigned=r.assigned),
    )  # fmt: skip


def _attempt_elements(r: TestResult) -> list[tuple[str, Attempt]]:
    """(element name, attempt) in the schema's order for the failed attempts of ``r``."""
    attempts = attempts_of(r)
    failed = [a for a in attempts if a.status in (*FAILURE_KIND, *ERROR_KIND)]
    if r.status == "passed":
        named = [(_kind(a.status, final=False, flaky=True), a) for a in failed]
    else:
        earlier = [a for a in failed if a is not attempts[-1]]
        named = [(_kind(a.status, final=False, flaky=False), a) for a in earlier]
        if attempts and attempts[-1].status in (*FAILURE_KIND, *ERROR_KIND):
            named.append((_kind(r.status, final=True, flaky=False), attempts[-1]))
    order = ["failure", "rerunFailure", "flakyFailure", "error", "rerunError", "flakyError"]
    return sorted(named, key=lambda item: order.index(item[0]))


def _system_out(r: TestResult) -> str:
    lines = [
        f"GPUs: {','.join(map(str, r.assigned)) or '-'}; estimate: {r.estimate:.1f}s"
        + (f"; timeout: {r.timeout:.0f}s" if r.timeout is not None else "")
    ]
    for a in attempts_of(r):
        lines.append(
            f"attempt {a.number}: {a.status}, exit {a.exit_code}, {a.wall:.1f}s, log: {a.log}"
        )
    return shown("\n".join(lines), lines=True)


def junit_xml(report: SuiteReport) -> str:
    results = report.ordered()
    suites = ET.Element("testsuites", name=shown(f"rocmenv suite {report.suite}"))
    suite = ET.SubElement(
        suites, "testsuite", name=shown(report.suite), tests=str(len(results)),
        failures=str(sum(r.status in FAILURE_KIND for r in results)),
        errors=str(sum(r.status in ERROR_KIND for r in results)),
        skipped=str(report.count("skipped")), time=f"{report.makespan:.3f}",
    )  # fmt: skip
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname=shown(report.suite), name=shown(r.name),
            time=f"{r.wall:.3f}",
        )  # fmt: skip
        _add_attempts(case, r)
        if r.status == "skipped":
            why = (
                f"disabled: {r.disabled}"
                if r.disabled
                else "not started (fail-fast or interrupted)"
            )
            ET.SubElement(case, "skipped", message=shown(why))
        ET.SubElement(case, "system-out").text = _system_out(r)
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def _add_attempts(case: ET.Element, r: TestResult) -> None:
    for name, a in _attempt_elements(r):
        attrs = {"message": _message(a), "type": a.status}
        el = ET.SubElement(case, name, attrs)
        if name in ("failure", "error"):
            el.text = log_tail(a.log)
        else:
            ET.SubElement(el, "stackTrace").text = log_tail(a.log)
