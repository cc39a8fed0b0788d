"""The JUnit checker refuses what consumers refuse (so a passing check means something)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.junit_check import check_junit, schema_errors

GOOD = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="x"><testsuite name="s" tests="1" failures="1" errors="0" skipped="0" time="1.0">
<testcase classname="s" name="a.py" time="1.0"><failure message="m" type="exit">log</failure>
<rerunFailure message="m" type="exit"><stackTrace>log</stackTrace></rerunFailure>
<system-out>out</system-out></testcase></testsuite></testsuites>
"""


def test_a_surefire_shaped_report_passes(tmp_path: Path) -> None:
    root, doc = check_junit(GOOD, tmp_path)
    assert root.tag == "testsuites"
    (suite,) = list(doc)
    assert suite.name == "s"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            ("<system-out>out</system-out>", "<properties/><system-out>out</system-out>"),
            "properties",
        ),
        (('<failure message="m" type="exit">log</failure>', ""), None),
        (('time="1.0"><failure', "><failure"), "time"),
        (("<stackTrace>log</stackTrace>", ""), "stackTrace"),
    ],
)
def test_the_schema_refuses_what_surefire_does_not_write(
    change: tuple[str, str], needle: str | None
) -> None:
    text = GOOD.replace(*change)
    errors = schema_errors(text)
    if needle is None:  # only the failure removed: still valid (a rerun without failure is allowed)
        assert errors == []
    else:
        assert errors and any(needle in e for e in errors), errors


def test_control_characters_are_not_well_formed(tmp_path: Path) -> None:
    with pytest.raises(ET.ParseError):
        check_junit(GOOD.replace(">log<", ">\x1b[31mlog<", 1), tmp_path)
