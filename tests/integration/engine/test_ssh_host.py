"""``DOCKER_HOST=ssh://…`` through the ``rocmenv[ssh]`` extra (paramiko, docker-py's SSH
transport), against a real sshd on a loopback port (``tests/support/sshd.py``: its own
config, host key and authorized key): a container runs and its exit code comes back over
the connection. Without paramiko the error says so and how to install it — not "start the
engine"."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.sshd import LocalSshd, local_sshd, sshd_available

IMAGE = "demo"


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[LocalSshd]:
    if not sshd_available():
        testenv.missing_environment("sshd (openssh-server) is not installed: scripts/setup.sh")
    with local_sshd(tmp_path / "sshd") as server:
        yield server


def rocmenv(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocmenv", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180, check=False)  # fmt: skip


def test_a_run_over_ssh_returns_the_commands_exit_code(
    sshd: LocalSshd, tmp_path: Path, family: testenv.Family
) -> None:
    env = {**os.environ, **sshd.client_env(), "DOCKER_HOST": sshd.docker_host}
    done = rocmenv(env, tmp_path, "run", "--profile", "cpu", "--no-shims", "--image", family[IMAGE].ref,
                   "--", "sh", "-c", "echo hello-over-ssh; exit 3")  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "hello-over-ssh"
    log = (tmp_path / "sshd" / "sshd.log").read_text()
    assert "Accepted publickey for root" in log  # it did go through our sshd


def test_without_paramiko_the_error_names_the_extra(
    sshd: LocalSshd, tmp_path: Path, family: testenv.Family
) -> None:
    blocked = tmp_path / "no-paramiko"
    (blocked / "paramiko").mkdir(parents=True)
    (blocked / "paramiko" / "__init__.py").write_text(
        "raise ImportError('paramiko is not installed (blocked by the test)')\n"
    )
    env = {**os.environ, **sshd.client_env(), "DOCKER_HOST": sshd.docker_host,
           "PYTHONPATH": str(blocked)}  # fmt: skip
    run = ("run", "--profile", "cpu", "--image", family[IMAGE].ref, "--", "true")
    for args in (("gc", "--dry-run"), run):
        done = rocmenv(env, tmp_path, *args)
        expected = 125 if args[0] == "run" else 4
        assert done.returncode == expected, done.stderr
        assert "ssh:// engine hosts need paramiko, which is not installed" in done.stderr
        assert "pip install 'rocmenv[ssh]'" in done.stderr
        assert "systemctl start docker" not in done.stderr
    doctor = rocmenv(env, tmp_path, "doctor")
    assert "pip install 'rocmenv[ssh]'" in doctor.stdout + doctor.stderr
