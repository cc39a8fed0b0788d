"""Registration calls read from the AST and bound to a declared signature: positional and
keyword arguments, defaults, and an error naming file:line for anything not readable."""

from __future__ import annotations

import textwrap

import pytest

from rocmenv.errors import ConfigError
from rocmenv.suite.discovery import parse_signature, registrations

MILES = parse_signature("est_time, suite, *, labels=None, nightly=False, disabled=None", "sig")


def _read(source: str, calls: str | list[str] = "register_rocm_ci", signature=MILES):
    return registrations(textwrap.dedent(source), calls, signature=signature, filename="t.py")


def test_positional_and_keyword_registrations_bind_to_the_signature() -> None:
    (reg,) = _read('register_rocm_ci(800, "stage-c-4-gpu-mi350", labels=["moe"])\n')
    assert dict(reg.values) == {
        "est_time": 800, "suite": "stage-c-4-gpu-mi350", "labels": ["moe"], "nightly": False,
        "disabled": None,
    }  # fmt: skip
    (reg,) = _read('register_rocm_ci(est_time=60, suite="s", nightly=True, disabled="FIXME")\n')
    assert (reg.values["est_time"], reg.values["nightly"], reg.values["disabled"]) == (
        60, True, "FIXME",
    )  # fmt: skip


def test_cuda_and_amd_registrations_side_by_side_only_the_named_calls_are_read() -> None:
    source = """
        from sglang.test.ci.ci_register import register_amd_ci, register_cuda_ci
        register_cuda_ci(est_time=100, suite="stage-b-test-small-1-gpu", whatever=object())
        register_amd_ci(est_time=120, suite="stage-b-test-small-1-gpu-amd")
        register_amd_ci(est_time=130, stage="stage-b", runner_config="1-gpu-small-amd-mi35x")
    """
    found = _read(source, ["register_amd_ci"], parse_signature(
        "est_time, suite=None, *, stage=None, runner_config=None, nightly=False", "sig"))  # fmt: skip
    assert [r.line for r in found] == [4, 5]
    assert found[1].values["runner_config"] == "1-gpu-small-amd-mi35x"
    assert found[1].values["suite"] is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ('register_rocm_ci(800, "s", priority=3)', r"t\.py:1: .*'priority' is not a keyword"),
        ('register_rocm_ci(800, "s", 3)', r"t\.py:1: register_rocm_ci\(\) takes 2 positional"),
        ("register_rocm_ci(800)", r"t\.py:1: .*does not pass suite"),
        (
            'register_rocm_ci(EST, "s")',
            r"t\.py:1: register_rocm_ci\(\) argument 1 is not a literal",
        ),
        ('register_rocm_ci(8, "s", labels=LABELS)', r"t\.py:1: .*\(labels=…\) is not a literal"),
        ("register_rocm_ci(*args)", r"t\.py:1: register_rocm_ci\(\*…\)"),
        ('register_rocm_ci(8, "s", **kw)', r"t\.py:1: register_rocm_ci\(\*\*…\)"),
        ('register_rocm_ci(8, "s", suite="t")', r"gets suite twice"),
        ("register_rocm_ci(8,\n", r"t\.py:1: cannot parse"),
    ],
)
def test_what_cannot_be_read_is_an_error_naming_the_line(call: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _read(call + "\n")


def test_an_open_signature_accepts_any_keyword() -> None:
    sig = parse_signature("est_time, suite, **extra", "sig")
    (reg,) = _read('register_rocm_ci(8, "s", priority=3)\n', signature=sig)
    assert reg.values["priority"] == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("est_time, suite=", "not a Python parameter list"),
        ("est_time, *rest", r"\*rest is not supported"),
        ("est_time, suite=SOMETHING", "default of suite is not a literal"),
        ("a\nb", "one line"),
        ("a): pass\ndef f(", "one line"),
        ("a): pass; import os; def f(", "not a Python parameter list"),
    ],
)
def test_bad_signatures_are_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_signature(text, "[suites.s].discover.signature")


def test_positional_only_parameters_cannot_be_passed_by_name() -> None:
    sig = parse_signature("est_time, /, suite", "sig")
    with pytest.raises(ConfigError, match="'est_time' is not a keyword"):
        _read('register_rocm_ci(est_time=1, suite="s")\n', signature=sig)
