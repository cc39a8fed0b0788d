"""Issue 31, item 3: an untrusted container cannot exhaust the runner. Real containers on
every engine, with a site policy of small caps (safe on a shared 2-core machine): a fork
bomb stops at the pids limit and ends with the container, a ``/dev/shm`` fill stops at the
shm size, an allocation past the memory limit kills only the container; afterwards none of
their processes is left on the host. A profile asking beyond a cap is refused, naming the
key, before anything runs."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.hostile import write_checkout
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    containers_labelled,
    engine_fixture,
    remove_containers,
    untrusted_fork,
)

PIDS = 24
POLICY = f'pids-limit = {PIDS}\nmemory = "96m"\nshm-size = "32m"\n'

# Fork children that stay (sleeping) until fork fails; then say how many were made and what
# the container's pids cgroup (v1 or v2) says. @TOKEN@ marks them in the host's process list.
BOMB = r"""
import errno, os, time
made = 0
while made < 5000:
    try:
        pid = os.fork()
    except OSError as err:
        print("refused", errno.errorcode[err.errno])
        break
    if pid == 0:
        time.sleep(60)  # @TOKEN@
        os._exit(0)
    made += 1
print("made", made)
for path in ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"):
    if os.path.exists(path):
        print("max", open(path).read().strip())
"""


@pytest.fixture(name="fork")
def fork_fixture(family: testenv.Family) -> Iterator[Project]:
    base = Path(tempfile.mkdtemp(prefix="rocmenv-caps-", dir="/tmp"))
    token = os.urandom(8).hex()
    policy = base / "policy.toml"

    def root() -> Path:
        made = write_checkout(base / "fork", {
            "extends": "cpu", "mounts": [], "labels": {"org.rocmenv.test": token},
            "ipc": "host", "shm-size": "32m",
        })  # fmt: skip
        policy.write_text(POLICY)
        return made

    env = {"ROCMENV_POLICY": str(policy), "ROCMENV_SITE_CONFIG": ""}
    with untrusted_fork(family, base, token, root, env=env) as project:
        yield project


def host_processes(marker: str) -> list[str]:
    done = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return done.stdout.split()


def test_a_fork_bomb_stops_at_the_pids_limit_and_ends_with_the_container(
    fork: Project, engine: str
) -> None:
    marker = f"rocmenv-bomb-{fork.token}"
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "python3", "-c", BOMB.replace("@TOKEN@", marker))  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert facts["refused"] == "EAGAIN"
    assert int(facts["made"]) < PIDS  # the container's own processes count too
    assert facts["max"] == str(PIDS)
    assert host_processes(marker) == []  # every child went with the container
    assert f"pids-limit {PIDS}" in done.stderr  # the profile asked none: the policy's, said


def test_a_shm_fill_stops_at_the_shm_size_and_memory_at_the_limit(
    fork: Project, engine: str
) -> None:
    script = (
        "dd if=/dev/zero of=/dev/shm/fill bs=1M count=256 2>/dev/null; "
        "echo shm=$(($(stat -c %s /dev/shm/fill) >> 20)); rm /dev/shm/fill; "
        "python3 -c 'b = bytearray(512 << 20)'; echo hog=$?"
    )
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "sh", "-c", script)  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert facts["shm"] == "32"  # the policy's shm-size, not the host's /dev/shm
    assert facts["hog"] == "137"  # killed inside its cgroup (SIGKILL), not the host's OOM
    assert "memory 96m (no swap)" in done.stderr


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"pids-limit": 100000}, "pids-limit"),
        ({"memory": "64g"}, "memory"),
        ({"shm-size": "100000g"}, "shm-size"),
        ({"ulimits": {"core": -1}}, "ulimits.core"),
        ({"ulimits": {"rtprio": 99}}, "ulimits.rtprio"),
        ({"ulimits": {"nproc": -1}}, "ulimits.nproc"),
    ],
)
def test_a_profile_asking_beyond_a_cap_is_refused_naming_the_key(
    fork: Project, table: dict[str, object], key: str
) -> None:
    write_checkout(fork.root, {"extends": "cpu", "mounts": [],
                               "labels": {"org.rocmenv.test": fork.token}, **table})  # fmt: skip
    done = fork.run("run", "--engine", "docker-api", "--image", fork.image, "--gpus", "none",
                    "--", "true")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{key} = " in done.stderr and "Traceback" not in done.stderr
    assert fork.containers() == []
