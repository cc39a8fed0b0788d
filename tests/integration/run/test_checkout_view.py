"""Issue 31, item 1: the host checkout is never writable from an untrusted container. Real
containers on every engine write, chmod, mknod, symlink and plant ``.git`` files (top level
and a submodule's ``sub/.git`` with ``gitdir:`` and ``core.fsmonitor``); the checkout is
hashed before and after (content, modes, owners, times, ``.git`` included) and the host's
``git status`` runs in it. Results leave only through ``--output``. The overlay's scratch
volumes go with the container: on exit, on an interrupt, and by ``rocmenv gc`` after a
``kill -9``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.planting import PLANT, fork_repo, planted_commands_ran
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    containers_labelled,
    docker,
    engine_fixture,
    remove_containers,
    untrusted_fork,
    wait_for,
)
from tests.support.treehash import differences, snapshot


@pytest.fixture(name="fork")
def fork_fixture(family: testenv.Family) -> Iterator[Project]:
    """A fork's git checkout outside pytest's root-only temp directory, rocmenv run from its
    top, untrusted, with a policy that lets the container make device nodes (so the nodes
    are really made, in its view)."""
    base = Path(tempfile.mkdtemp(prefix="rocmenv-view-", dir="/tmp"))
    os.chmod(base, 0o755)
    token = os.urandom(8).hex()
    policy = base / "policy.toml"

    def root() -> Path:
        made = fork_repo(base, token, {"extends": "cpu", "mounts": [], "cap-add": ["MKNOD"]})
        policy.write_text('cap-add = ["MKNOD"]\n')
        return made

    env = {"ROCMENV_POLICY": str(policy), "ROCMENV_SITE_CONFIG": ""}
    with untrusted_fork(family, base, token, root, env=env) as project:
        yield project


def plant(fork: Project) -> str:
    return PLANT.replace("@MARKER@", str(fork.data / "pwned"))


def owned_volumes(pid: int) -> list[str]:
    """The volumes of the rocmenv process ``pid`` (docker's: the overlay's own, removed with
    its container, and its two scratch volumes; podman makes none)."""
    done = docker("volume", "ls", "-q", "--filter", f"label=rocmenv.owner-pid={pid}")
    return done.stdout.split()


def run_owned(fork: Project, *args: str, env: dict[str, str] | None = None,
              ) -> tuple[subprocess.CompletedProcess[str], int]:  # fmt: skip
    """``rocmenv ARGS`` to its end, and its pid (what its volumes are labelled with)."""
    proc = fork.popen(*args, env=env)
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def test_an_untrusted_container_leaves_the_host_checkout_identical_and_git_runs_nothing(
    fork: Project, engine: str
) -> None:
    before = snapshot(fork.root)
    done, pid = run_owned(fork, "run", "--engine", engine, "--image", fork.image,
                          "--gpus", "none", "--", "sh", "-c", plant(fork))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "planted=yes" in done.stdout and "node=made" in done.stdout  # all of it, inside
    assert differences(before, snapshot(fork.root)) == []  # byte for byte, mode for mode
    assert planted_commands_ran(fork.root, fork.data / "pwned") == []
    assert "the checkout copy-on-write" in done.stderr
    assert owned_volumes(pid) == []  # the scratch volumes went with the container


def test_the_same_attack_trusted_reaches_the_host_and_its_git(fork: Project) -> None:
    """The control: with the checkout bound writable (a trusted run) the attack lands, so
    the probes above can see it."""
    before = snapshot(fork.root)
    done = fork.run("run", "--engine", "docker-cli", "--image", fork.image, "--gpus", "none",
                    "--", "sh", "-c", plant(fork), env={"ROCMENV_UNTRUSTED": "0"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert differences(before, snapshot(fork.root)) != []
    assert planted_commands_ran(fork.root, fork.data / "pwned") == ["pwned.sub", "pwned.top"]


@pytest.mark.parametrize("engine", ["docker-api", "docker-cli"], indirect=True)
def test_an_interrupted_run_leaves_the_checkout_identical_and_no_volume(
    fork: Project, engine: str
) -> None:
    before = snapshot(fork.root)
    proc = fork.popen("run", "--engine", engine, "--image", fork.image, "--gpus", "none",
                      "--", "sh", "-c", plant(fork) + "sleep 300")  # fmt: skip
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 120
        while "planted=yes" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert "planted=yes" in line, "never planted"
        assert wait_for(lambda: owned_volumes(proc.pid) != [], 10)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert fork.containers() == []
    assert owned_volumes(proc.pid) == []
    assert differences(before, snapshot(fork.root)) == []
    assert planted_commands_ran(fork.root, fork.data / "pwned") == []


def test_gc_removes_the_volumes_of_a_killed_run(fork: Project) -> None:
    proc = fork.popen("run", "--engine", "docker-api", "--image", fork.image, "--gpus", "none",
                      "--", "sh", "-c", "echo up; sleep 300")  # fmt: skip
    try:
        assert proc.stdout is not None and "up" in proc.stdout.readline()
        assert wait_for(lambda: len(owned_volumes(proc.pid)) == 3, 10)
        proc.kill()  # rocmenv itself, -9: no cleanup ran
        proc.wait(timeout=30)
        assert len(owned_volumes(proc.pid)) == 3 and fork.containers() != []
        done = fork.run("gc", "--engine", "docker-api", "--json")
        assert done.returncode == 0, done.stderr
    finally:
        proc.kill()
    # (another test's gc may have got there first: what counts is that nothing is left)
    removed = json.loads(done.stdout)["removed"]
    assert {r["kind"] for r in removed if r["owner_pid"] == proc.pid} <= {"container", "volume"}
    assert owned_volumes(proc.pid) == [] and fork.containers() == []


OUTPUT = r"""
cd "$ROCMENV_OUTPUT"
mkdir -p d && echo report > d/junit.xml && echo run > run.sh && chmod 4755 run.sh
ln -s /etc/passwd link && mkfifo fifo && mknod node c 1 3
mkdir -p x/.git && echo '[core]' > x/.git/config && echo gitdir: .. > y.git
"""


def test_output_leaves_as_regular_files_of_plain_modes_only(
    fork: Project, engine: str, tmp_path: Path
) -> None:
    dest = tmp_path / "results"
    before = snapshot(fork.root)
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none",
                    "--output", str(dest), "--", "sh", "-c", OUTPUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = {str(p.relative_to(dest)): p.lstat().st_mode for p in dest.rglob("*")}
    assert found == {"d": 0o40755, "d/junit.xml": 0o100644, "run.sh": 0o100755,
                     "x": 0o40755, "y.git": 0o100644}  # fmt: skip
    assert (dest / "d" / "junit.xml").read_text() == "report\n"
    assert differences(before, snapshot(fork.root)) == []
    for left_out in ("link (a symbolic link)", "named .git"):
        assert left_out in done.stderr


def test_output_stops_at_the_policys_size_cap(fork: Project, tmp_path: Path) -> None:
    policy = fork.data / "small.toml"
    policy.write_text('cap-add = ["MKNOD"]\noutput-size = "1m"\n')
    dest = tmp_path / "results"
    script = ('head -c 700000 /dev/zero > "$ROCMENV_OUTPUT/a"; '
              'head -c 700000 /dev/zero > "$ROCMENV_OUTPUT/b"')  # fmt: skip
    done = fork.run("run", "--engine", "docker-api", "--image", fork.image, "--gpus", "none",
                    "--output", str(dest), "--", "sh", "-c", script,
                    env={"ROCMENV_POLICY": str(policy)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [p.name for p in dest.iterdir()] in (["a"], ["b"])  # one fits, not both
    assert "size cap" in done.stderr


def test_output_inside_the_checkouts_git_is_refused_before_anything_runs(fork: Project) -> None:
    done = fork.run("run", "--engine", "docker-api", "--image", fork.image, "--gpus", "none",
                    "--output", str(fork.root / ".git" / "x"), "--", "true")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert ".git" in done.stderr and "Traceback" not in done.stderr
    assert not (fork.root / ".git" / "x").exists() and fork.containers() == []
