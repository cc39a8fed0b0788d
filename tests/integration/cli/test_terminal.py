"""The one terminal decision, as a user meets it: ``rocmenv pull``, ``drift`` and ``suite run``
as processes whose stderr is a real terminal (a pty) or a pipe. On a terminal each draws live
(``\\r`` and escape sequences); under ``TERM=dumb`` or into a pipe none writes a single one —
before issue 33, drift and the suite board drew on a ``TERM=dumb`` terminal anyway."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.integration.run.test_pull import docker, push_random_image
from tests.support.faultproxy import Delay, FaultProxy, Match
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
)
from tests.support.suite_project import Spec, write_suite

pytestmark = pytest.mark.integration

MODES = ("terminal", "dumb terminal", "pipe")
HANG = 240.0  # a ceiling that only catches a hang


def _stderr_of(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], mode: str
) -> tuple[int, bytes]:
    """Run ``rocmenv ARGV`` with stderr on a pty (``terminal``: TERM=xterm-256color, ``dumb
    terminal``: TERM=dumb) or on a pipe; every byte it wrote there. The pty does not turn
    ``\\n`` into ``\\r\\n`` (ONLCR off), so any ``\\r`` read back is rocmenv's."""
    env = {**env, "TERM": "dumb" if mode == "dumb terminal" else "xterm-256color"}
    env.pop("GITHUB_ACTIONS", None)
    master = slave = -1
    if mode == "pipe":
        stderr: Any = subprocess.PIPE
    else:
        master, slave = pty.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        stderr = slave
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmenv", *argv], cwd=cwd, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
    )  # fmt: skip
    if mode == "pipe":
        _, err = proc.communicate(timeout=HANG)
        return proc.returncode, err
    os.close(slave)
    data = b""
    deadline = time.monotonic() + HANG
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed the terminal
                    break
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    return proc.returncode, data


def _check(mode: str, written: bytes) -> None:
    if mode == "terminal":
        assert b"\r" in written and b"\x1b[" in written, written[-500:]
    else:
        assert b"\r" not in written and b"\x1b" not in written, written[-500:]


@pytest.fixture
def slow_image(scratch_repo: str) -> Iterator[str]:
    """A three-layer image whose blobs a proxy holds back for a second: a pull of it stays
    live long enough to be drawn."""
    digest, _ = push_random_image(scratch_repo, "t1", (100_000,) * 3)
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        proxy.add_rule(Match(method="GET", path=r"/v2/.*/blobs/.*"), Delay(seconds=1.0))
        ref = f"{proxy.host}/{scratch_repo}@{digest}"
        yield ref
        docker("image", "rm", "--force", ref)


@pytest.mark.parametrize("mode", MODES)
def test_pull_draws_only_on_a_live_terminal(slow_image: str, tmp_path: Path, mode: str) -> None:
    (tmp_path / ".git").mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path / "data")}  # fmt: skip
    code, written = _stderr_of(["pull", "--engine", "docker-api", slow_image], cwd=tmp_path,
                               env=env, mode=mode)  # fmt: skip
    assert code == 0, written[-2000:]
    assert b"rocmenv: pulled " in written
    _check(mode, written)


@pytest.mark.parametrize("mode", MODES)
def test_drift_progress_only_on_a_live_terminal(
    registry: Any, family: Any, scratch_repo: str, tmp_path: Path, mode: str
) -> None:
    (tmp_path / ".git").mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ROCMENV_REGISTRY_BACKOFF": "0.01"}
    tag = "v0.5.8-rocm700-mi30x-20260215"
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, tag)
    pinned = subprocess.run(
        [sys.executable, "-m", "rocmenv", "pin", f"{registry.host}/{scratch_repo}:{tag}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pinned.returncode == 0, pinned.stderr
    code, written = _stderr_of(["drift"], cwd=tmp_path, env=env, mode=mode)
    assert code == 0, written[-2000:]
    _check(mode, written)


@pytest.mark.parametrize("mode", MODES)
def test_the_suite_board_only_on_a_live_terminal(project: Project, mode: str) -> None:
    write_suite(project, "board", [Spec(name="b1", gpus=1, est=1, sleep=0.5)])
    code, written = _stderr_of(["suite", "run", "board"], cwd=project.cwd, env=project.env(),
                               mode=mode)  # fmt: skip
    assert code == 0, written[-2000:]
    assert b"rocmenv suite: passed b1" in written
    _check(mode, written)
