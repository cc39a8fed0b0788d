"""The skip rule (harness): a missing environment skips locally and FAILS under
``ROCMENV_REQUIRE_ENGINE=1`` — for every kind of environment and every way a test can skip.

The probe suites run in a child pytest with this repository's ``tests/conftest.py``, exactly
as CI runs the real suite, so the hooks themselves are under test.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import testenv

PROBE = """
import pytest
from tests.support import testenv

@pytest.mark.parametrize("kind", testenv.ENVIRONMENT_KINDS)
def test_helper(kind):
    testenv.missing_environment(f"no {kind} here", kind=kind)

@pytest.mark.skipif(True, reason="a plain skipif")
def test_plain_skipif():
    pass

def test_plain_skip():
    pytest.skip("a plain pytest.skip")

@pytest.mark.requires("tool")
def test_requires_present():
    pass

def test_importorskip():
    pytest.importorskip("no_such_module_rocmenv_probe")

@pytest.mark.xfail(reason="an expected failure is not a skip", strict=True)
def test_xfail():
    assert False
"""
MODULE_SKIP = 'import pytest\npytest.skip("module skip", allow_module_level=True)\n'
N_KINDS = len(testenv.ENVIRONMENT_KINDS)


def run_probe(
    tmp_path: Path, flag: str | None, source: str = PROBE
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != testenv.REQUIRE_VAR}
    if flag is not None:
        env[testenv.REQUIRE_VAR] = flag
    root = testenv.REPO_ROOT
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         "-p", "tests.conftest", "-c", str(root / "pyproject.toml"), "--rootdir", str(root),
         str(tmp_path)],
        capture_output=True, text=True, env={**env, "PYTHONPATH": str(root)},
        cwd=tmp_path, timeout=180, check=False,
    )  # fmt: skip


def counts(stdout: str) -> dict[str, int]:
    last = stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


@pytest.mark.parametrize("flag", [None, "", "0", "false", "no", "No"])
def test_without_the_flag_every_kind_skips(tmp_path: Path, flag: str | None) -> None:
    done = run_probe(tmp_path, flag)
    assert done.returncode == 0, done.stdout
    # every kind + skipif + skip + importorskip
    assert counts(done.stdout) == {"passed": 1, "skipped": N_KINDS + 3, "xfailed": 1}
    for kind in testenv.ENVIRONMENT_KINDS:
        assert f"no {kind} here [{kind}]" in done.stdout


@pytest.mark.parametrize("flag", ["1", "true", "yes", "TRUE"])
def test_with_the_flag_every_kind_and_every_skip_fails(tmp_path: Path, flag: str) -> None:
    done = run_probe(tmp_path, flag)
    assert done.returncode == 1, done.stdout
    got = counts(done.stdout)
    assert got.get("skipped", 0) == 0, done.stdout
    # a skipif is raised in setup, so it reports as an error; every other skip as a failure
    assert got == {"failed": N_KINDS + 2, "error": 1, "passed": 1, "xfailed": 1}, done.stdout
    for kind in testenv.ENVIRONMENT_KINDS:
        assert f"ROCMENV_REQUIRE_ENGINE is set but no {kind} here [{kind}]" in done.stdout
    assert "a skip is a failure: a plain skipif" in done.stdout


@pytest.mark.parametrize("flag", ["", "1"])
def test_a_module_level_skip_is_a_collection_error_under_the_flag(
    tmp_path: Path, flag: str
) -> None:
    done = run_probe(tmp_path, flag, MODULE_SKIP)
    if flag:
        assert done.returncode == 2, done.stdout  # interrupted: 1 error during collection
        assert "a skip is a failure: module skip" in done.stdout
    else:
        assert done.returncode == 5, done.stdout  # no tests ran
        assert counts(done.stdout) == {"skipped": 1}


def test_a_value_that_is_neither_yes_nor_no_is_a_usage_error(tmp_path: Path) -> None:
    done = run_probe(tmp_path, "maybe")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "ROCMENV_REQUIRE_ENGINE='maybe' is not a yes/no value" in done.stderr


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("Yes", True), (" yes ", True),
     ("", False), ("0", False), ("false", False), ("NO", False)],
)  # fmt: skip
def test_require_flag_values(value: str, expected: bool) -> None:
    assert testenv.require_engine({testenv.REQUIRE_VAR: value}) is expected
    assert testenv.require_engine({}) is False


@pytest.mark.parametrize("value", ["2", "on", "off", "y", "enabled"])
def test_require_flag_rejects_other_values(value: str) -> None:
    with pytest.raises(testenv.RequireFlagError, match="not a yes/no value"):
        testenv.require_engine({testenv.REQUIRE_VAR: value})


# --------------------------------------------------------------------------- the probes


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("kind", "program"), [("git", "git"), ("podman", "podman")])
def test_tool_probes_see_a_program_missing_from_path(
    kind: testenv.EnvironmentKind, program: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert f"({program}) is not on PATH" in (testenv.environment_problem_of(kind) or "")
    fake = tmp_path / program
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert testenv.environment_problem_of(kind) is None


def test_the_slurm_probe_sees_slurm_missing_from_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "Slurm is not installed" in (testenv.environment_problem_of("slurm") or "")


def test_system_python_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testenv, "SYSTEM_PYTHON", str(tmp_path / "python3"))
    assert "is missing" in (testenv.environment_problem_of("system-python") or "")
    assert "is missing" in (testenv.environment_problem_of("debian-sitecustomize") or "")


def test_engine_and_registry_probes_see_nothing_listening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    assert "none.sock" in (testenv.environment_problem_of("engine") or "")
    port = _closed_port()
    monkeypatch.setattr(testenv, "OPEN_REGISTRY", f"127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in (testenv.environment_problem_of("registry") or "")


def test_need_fails_under_the_flag_with_the_probes_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(testenv.REQUIRE_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match=r"\(git\) is not on PATH \[git\]"):
        testenv.need("git")
    monkeypatch.setenv(testenv.REQUIRE_VAR, "0")
    with pytest.raises(pytest.skip.Exception, match=r"\[git\]"):
        testenv.need("git")


def test_git_off_path_fails_the_override_tests_under_the_flag(tmp_path: Path) -> None:
    """The issue's reproduction: git off PATH + the flag used to end '58 passed, 10 skipped'."""
    root = testenv.REPO_ROOT
    env = {**os.environ, "PATH": str(tmp_path), testenv.REQUIRE_VAR: "1", "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(root / "tests/unit/bootstrap/test_overrides.py"), "-k", "checkout or patch"],
        capture_output=True, text=True, env=env, cwd=root, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "skipped" not in counts(done.stdout)
    assert "(git) is not on PATH [git]" in done.stdout
