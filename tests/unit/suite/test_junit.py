"""JUnit XML that every consumer reads: any log bytes, attempts as Surefire writes them,
checked with a real parser, the schema (tests/support/junit.xsd) and junitparser."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmenv.escape import shown
from rocmenv.suite.drive import Attempt, TestResult
from rocmenv.suite.junit import LOG_TAIL, junit_xml
from rocmenv.suite.report import SuiteReport
from tests.support.junit_check import check_junit


def _report(*results: TestResult) -> SuiteReport:
    return SuiteReport(suite="stage-c", backend="local", results=results, makespan=9.0, pool=(0,))


def _failed(name: str, log: Path, *, status: str = "failed") -> TestResult:
    attempt = Attempt(number=1, status=status, exit_code=1, started=1.0, wall=2.0, log=str(log))  # type: ignore[arg-type]
    return TestResult(name=name, gpus=1, status=status, exit_code=1, started=1.0, wall=2.0,  # type: ignore[arg-type]
                      log=str(log), attempts=(attempt,))  # fmt: skip


HOSTILE = (
    b"\x1b[31mFAILED\x1b[0m test_accuracy \x1b]0;title\x07\n"  # colour codes, an OSC title
    b"nul:\x00 bell:\x07 vt:\x0b ff:\x0c esc-alone:\x1b\n"  # control characters
    b"bad utf-8: \xff\xfe\xc3\x28 half: \xe2\x82\n"  # invalid UTF-8
    b"markup: <failure> & ]]> \"quotes\" 'apostrophes'\n"
    b"\xef\xbf\xbe noncharacter U+FFFE\n"
)


def test_a_log_with_ansi_nul_and_invalid_utf8_gives_well_formed_valid_junit(
    tmp_path: Path,
) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(HOSTILE)
    text = junit_xml(_report(_failed("test/a.py", log)))
    root, doc = check_junit(text, tmp_path)
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert "FAILED test_accuracy" in failure.text and "\x1b" not in failure.text
    assert "nul:\\u0000 bell:\\u0007 vt:\\u000b ff:\\u000c" in failure.text
    assert "markup: <failure> & ]]>" in failure.text  # escaped by the writer, read back intact
    assert "\\ufffe" in failure.text
    (suite,) = list(doc)
    (case,) = list(suite)
    assert case.name == "test/a.py" and not case.is_passed


def test_a_huge_log_is_cut_to_its_end_with_a_note(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"x" * (5 * LOG_TAIL) + b"\nthe real error at the end\n")
    root, _ = check_junit(junit_xml(_report(_failed("big.py", log))), tmp_path)
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert "the real error at the end" in failure.text
    assert f"[rocmenv: the log is {log.stat().st_size} bytes" in failure.text
    assert str(log) in failure.text
    assert len(failure.text) < LOG_TAIL + 500


def test_hostile_test_names_and_messages_stay_well_formed(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("x")
    name = "test/\udcff\x01evil\x1b[2J<\"'>.py"  # an undecodable file name byte, controls
    result = TestResult(
        name=name, gpus=0, status="error", message="boom\x00\x1b[1m", started=1.0,
        attempts=(Attempt(number=1, status="error", message="boom\x00\x1b[1m", log=str(log)),),
    )  # fmt: skip
    text = junit_xml(_report(result))
    text.encode("utf-8")  # no lone surrogate survives
    root, _ = check_junit(text, tmp_path)
    case = root.find("testsuite/testcase")
    # one line: the name's controls shown, its escape sequence too (not run, not dropped)
    assert case is not None and case.get("name") == "test/\\udcff\\u0001evil\\u001b[2J<\"'>.py"
    error = case.find("error")
    assert error is not None and error.get("message") == "boom\\u0000"  # a log's text: colour gone


def test_a_flaky_test_has_flaky_failures_and_a_failed_one_rerun_failures(tmp_path: Path) -> None:
    logs = [tmp_path / f"{i}.log" for i in range(4)]
    for i, log in enumerate(logs):
        log.write_text(f"attempt {i} AssertionError: accuracy 0.61 < 0.62\n")
    flaky = TestResult(
        name="flaky.py", gpus=1, status="passed", exit_code=0, started=1.0, wall=5.0,
        attempts=(
            Attempt(number=1, status="failed", exit_code=1, wall=2.0, log=str(logs[0])),
            Attempt(number=2, status="passed", exit_code=0, wall=3.0, log=str(logs[1])),
        ),
    )  # fmt: skip
    failing = TestResult(
        name="bad.py", gpus=1, status="timeout", exit_code=124, started=2.0, wall=9.0,
        message="killed after its timeout of 5s",
        attempts=(
            Attempt(number=1, status="failed", exit_code=1, wall=2.0, log=str(logs[2])),
            Attempt(number=2, status="timeout", exit_code=124, wall=7.0, log=str(logs[3]),
                    message="killed after its timeout of 5s"),
        ),
    )  # fmt: skip
    disabled = TestResult(name="off.py", gpus=4, status="skipped", disabled="FIXME: MI350")
    root, doc = check_junit(junit_xml(_report(flaky, failing, disabled)), tmp_path)
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert [c.tag for c in cases["flaky.py"]] == ["flakyFailure", "system-out"]
    trace = cases["flaky.py"].find("flakyFailure/stackTrace")
    assert trace is not None and "attempt 0 AssertionError" in (trace.text or "")
    assert [c.tag for c in cases["bad.py"]] == ["failure", "rerunFailure", "system-out"]
    failure = cases["bad.py"].find("failure")
    assert failure is not None and failure.get("type") == "timeout"
    assert "attempt 3" in (failure.text or "")
    skipped = cases["off.py"].find("skipped")
    assert skipped is not None and skipped.get("message") == "disabled: FIXME: MI350"
    by_name = {c.name: c for s in doc for c in s}
    assert by_name["flaky.py"].is_passed and by_name["off.py"].is_skipped


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=3000), st.text(max_size=60))
def test_any_log_bytes_and_any_name_give_parseable_junit(data: bytes, name: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "t.log"
        log.write_bytes(data)
        result = _failed(name or "t.py", log)
        check_junit(junit_xml(_report(result)), Path(scratch))


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("\x1b[1;31mred\x1b[0m", "red"),
        ("a\x00b", "a\\u0000b"),
        ("\ud800", "\\ud800"),
        ("ok\tß", "ok\tß"),
        ("line\r\n::error::x", "line\n\\u003a:error::x"),
    ],
)
def test_a_logs_text_is_shown_as_xml_can_hold_it(raw: str, text: str) -> None:
    assert shown(raw, lines=True) == text
