"""``rocmenv gc``: removes containers whose owner is gone, never one whose owner lives."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable

import pytest

from rocmenv.container.labels import process_start
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    docker,
    engine_fixture,
    inspect,
    podman,
    project_fixture,
    wait_for,
)

# gc sweeps every engine-wide container whose owner is gone: other tests' too, so alone
pytestmark = pytest.mark.serial


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _cli(engine: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The CLI of the engine under test (podman's containers live in podman's store)."""
    return podman if engine == "podman" else docker


def _create(project: Project, labels: dict[str, str], engine: str = "docker-cli") -> str:
    args = ["create", "--label", project.label, "--label", "rocmenv.profile=gc-test"]
    for key, value in labels.items():
        args += ["--label", f"{key}={value}"]
    return _cli(engine)(*args, project.image, "sleep", "300").stdout.strip()


def test_gc_removes_orphans_and_keeps_containers_whose_owner_lives(
    project: Project, engine: str
) -> None:
    here = socket.gethostname()
    live = subprocess.Popen(["sleep", "300"])
    try:
        live_start = process_start(live.pid)
        assert live_start
        dead = _create(
            project, {"rocmenv.owner-pid": str(_dead_pid()), "rocmenv.owner-host": here}, engine
        )
        alive = _create(
            project,
            {
                "rocmenv.owner-pid": str(live.pid),
                "rocmenv.owner-host": here,
                "rocmenv.owner-start": live_start,
            },
            engine,
        )
        reused = _create(
            project,
            {
                "rocmenv.owner-pid": str(live.pid),
                "rocmenv.owner-host": here,
                "rocmenv.owner-start": "0000:1",
            },
            engine,
        )
        elsewhere = _create(
            project,
            {"rocmenv.owner-pid": str(_dead_pid()), "rocmenv.owner-host": "other-host"},
            engine,
        )
        _cli(engine)("start", alive)
        mine = {dead, alive, reused, elsewhere}

        dry = project.run("gc", "--engine", engine, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        would = {c["id"] for c in report["would_remove"]} & mine
        assert would == {dead, reused}
        assert set(project.containers()) == mine  # a dry run removes nothing

        done = project.run("gc", "--engine", engine, "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert {c["id"] for c in report["removed"]} & mine == {dead, reused}
        kept = {c["id"]: c["reason"] for c in report["kept"] if c["id"] in mine}
        assert "alive" in kept[alive] and "other-host" in kept[elsewhere]
        assert set(project.containers()) == {alive, elsewhere}
    finally:
        live.kill()
        live.wait()
        _cli(engine)("rm", "-f", *project.containers(), check=False)


def test_gc_cleans_up_after_a_run_that_was_killed(project: Project, engine: str) -> None:
    proc = project.popen(
        "run",
        "--engine",
        engine,
        "--profile",
        "plain",
        "--image",
        project.image,
        "--",
        "sleep",
        "300",
    )
    try:
        assert wait_for(
            lambda: any(inspect(c)["State"]["Running"] for c in project.containers()), 30
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up
        proc.wait()
    (orphan,) = project.containers()
    done = project.run("gc", "--engine", engine)
    assert done.returncode == 0, done.stderr
    assert f"removed {orphan[:12]}" in done.stdout
    assert project.containers() == []


def _unprivileged(argv: list[str]) -> list[str]:
    """``argv`` as an unprivileged user that may still reach the engine (the docker group):
    as root, through ``setpriv`` to the test user (or ``nobody``); as another user, as it."""
    if os.geteuid() != 0:
        return argv
    import grp
    import pwd

    docker_gid = grp.getgrnam("docker").gr_gid
    try:  # scripts/setup.sh's test user: given the way to the venv's interpreter
        user = pwd.getpwnam(os.environ.get("ROCMENV_TEST_USER", "rocmenv-test"))
        uid, gid = user.pw_uid, user.pw_gid
    except KeyError:
        uid = gid = 65534
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={docker_gid}", *argv]


def test_gc_keeps_a_container_whose_owner_it_may_not_signal(project: Project) -> None:
    """The owner is init (root's, alive): gc as an ordinary user gets EPERM from
    ``kill(1, 0)`` and must read it as "alive, someone else's", never as "gone"."""
    owner_start = process_start(1)
    assert owner_start
    theirs = _create(
        project,
        {
            "rocmenv.owner-pid": "1",
            "rocmenv.owner-host": socket.gethostname(),
            "rocmenv.owner-start": owner_start,
        },
    )
    home = tempfile.mkdtemp(prefix="h34-gc-home-")
    os.chmod(home, 0o777)
    try:
        env = {**project.env(), "HOME": home, "XDG_CACHE_HOME": home}
        for dry in (["--dry-run"], []):
            done = subprocess.run(
                _unprivileged([sys.executable, "-m", "rocmenv", "gc", "--engine", "docker-cli",
                               "--json", *dry]),
                cwd="/", env=env, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            gone = report["removed"] + report["would_remove"]
            assert theirs not in {c["id"] for c in gone}
            assert theirs in {c["id"] for c in report["kept"]}
        assert project.containers() == [theirs]
    finally:
        docker("rm", "-f", theirs, check=False)
        shutil.rmtree(home, ignore_errors=True)
