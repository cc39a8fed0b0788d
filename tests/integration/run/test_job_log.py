"""Issue 31, item 2: an untrusted container's output cannot speak to GitHub's runner. Inside
GitHub Actions (``GITHUB_ACTIONS=true``) a real container on every engine adapter prints every
workflow command and escape it can (:data:`tests.support.gha_runner.ATTACK`) on stdout and
stderr; the step's two streams, read as the runner reads them, hold no command rocmenv did
not issue, the fence is closed when rocmenv ends (mid-line output and the container's own
``stop-commands`` included), and rocmenv's next annotation is read."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.gha_runner import ATTACK, read_job_log
from tests.support.hostile import write_checkout
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    containers_labelled,
    engine_fixture,
    remove_containers,
    untrusted_fork,
)


@pytest.fixture(name="fork")
def fork_fixture(family: testenv.Family) -> Iterator[Project]:
    """A fork's checkout, rocmenv run from its top in untrusted mode inside GitHub Actions."""
    base = Path(tempfile.mkdtemp(prefix="rocmenv-joblog-", dir="/tmp"))
    token = os.urandom(8).hex()

    def root() -> Path:
        return write_checkout(base / "fork", {
            "extends": "cpu", "labels": {"org.rocmenv.test": token}, "mounts": [],
        })  # fmt: skip

    with untrusted_fork(family, base, token, root, env={"GITHUB_ACTIONS": "true"},
                        drop=("ROCMENV_", "GITHUB_")) as project:  # fmt: skip
        yield project


def step(fork: Project, script: str) -> subprocess.CompletedProcess[bytes]:
    """A workflow step's ``run:`` script (bash), its two streams captured as bytes."""
    return subprocess.run(
        ["bash", "-c", script], cwd=fork.cwd, env=fork.env(), stdin=subprocess.DEVNULL,
        capture_output=True, timeout=180, check=False,
    )  # fmt: skip


def rocmenv(*args: str) -> str:
    import shlex

    return shlex.join([sys.executable, "-m", "rocmenv", *args])


def test_an_untrusted_containers_output_issues_no_workflow_command(
    fork: Project, engine: str
) -> None:
    run = rocmenv("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                  "sh", "-c", ATTACK)  # fmt: skip
    later = rocmenv("options", "--profile", "no-such-profile")  # rocmenv's next annotation
    done = step(fork, f"{run}; echo run=$?; {later}")
    assert b"run=0" in done.stdout, done.stderr.decode(errors="replace")
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [], "stdout holds commands whatever the order of the two pipes"
    assert not [c for c in runner.commands if "PWNED" in repr(c)], runner.commands
    assert runner.masks() == [] and runner.outputs() == {}
    assert not runner.failed
    tokens = [c.data for c in runner.commands if c.name == "stop-commands"]
    assert len(tokens) == 1 and runner.resumed == tokens  # rocmenv's own fence, closed
    assert runner.stop_token is None
    (error,) = runner.annotations()
    assert error.properties == {"title": "rocmenv options"} and "no-such-profile" in error.data
    shown = "\n".join(runner.lines)
    for text in ("PWNED indented", "::pwnedtoken::", "::stop-commands::pwnedlast"):
        assert shown.count(text) >= 1, text  # the container's output is all there, as text
    assert shown.count("PWNED-image") == 2  # its stdout and its stderr, both in the fence


def test_a_stdout_redirected_to_a_file_gets_the_containers_stdout(
    fork: Project, engine: str
) -> None:
    """The runner never reads a file: a result written to stdout still lands in it whole."""
    run = rocmenv("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                  "sh", "-c", ATTACK)  # fmt: skip
    out = fork.data / "out.txt"
    done = step(fork, f"{run} > {out}")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    data = out.read_bytes()
    assert data.startswith(b"::set-output name=image::PWNED-image\n")
    assert data.endswith(b"::stop-commands::pwnedlast")
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [] and not [c for c in runner.commands if "PWNED" in repr(c)]
    assert runner.stop_token is None
