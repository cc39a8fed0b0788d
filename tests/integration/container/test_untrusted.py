"""Untrusted mode in real containers (issue 9): a hostile fork's checkout on the fake 8-GPU
host, ``ROCMENV_UNTRUSTED=1`` from the workflow. What the policy neutralises is checked from
inside the container; what it refuses never becomes a container."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import testenv
from tests.support.fakegpu import build_fake_host
from tests.support.hostile import NEUTRALISED, REFUSED, SECRETS, write_checkout
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    containers_labelled,
    engine_fixture,
    remove_containers,
)

IMAGE_NAME = "demo"

# The attacks that have a safe equivalent, on a profile this sandbox can start (no
# memlock=-1, no render group: neither the host nor the image has one).
STARTABLE: dict[str, Any] = {
    "group-add": ["video"],
    "ulimits": {"stack": 67108864, "nofile": "1024:4096"},
    "shm-size": "64m",
    **NEUTRALISED["gpu-isolation"],
    **NEUTRALISED["ipc-host"],
    **NEUTRALISED["untrusted-false"],
    "pass-env": [*SECRETS, "HIP_VISIBLE_DEVICES", "HTTPS_PROXY"],
    "secret-env": ["WANDB_API_KEY"],
    "keep-proxy-env": True,
}

INSIDE = r"""
echo "dri=$(ls /dev/dri | sort | tr '\n' ' ')"
echo "kfd=$(test -c /dev/kfd && echo yes || echo no)"
echo "sock=$(ls -d /var/run/docker.sock /run/docker.sock 2>/dev/null | wc -l)"
python3 - <<'PY'
import socket
for path in ("/var/run/docker.sock", "/run/docker.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print("connect=reached", path)
    except OSError:
        print("connect=refused")
    finally:
        s.close()
PY
echo "hostroot=$(test -e /host && echo present || echo absent)"
echo "hosttree=$(test -e "@HOST_TREE@" && echo present || echo absent)"
echo "git=$(touch .git/hooks/pre-commit 2>/dev/null && echo writable || echo read-only)"
echo "gitconfig=$(echo x >> .git/config 2>/dev/null && echo writable || echo read-only)"
echo "checkout=$(touch made-inside && echo writable || echo read-only)"
echo "data=$(touch /data/x 2>/dev/null && echo writable || echo read-only)"
echo "shmfile=$(test -e "/dev/shm/@SHM_MARKER@" && echo visible || echo absent)"
echo "shmsize=$(df -k /dev/shm | tail -1 | awk '{print $2}')"
echo "ipcns=$(readlink /proc/self/ns/ipc)"
echo "seccomp=$(grep Seccomp: /proc/self/status | awk '{print $2}')"
echo "capeff=$(grep CapEff /proc/self/status | awk '{print $2}')"
env | sed 's/^/env:/'
"""


@pytest.fixture(name="fork")
def fork_fixture(tmp_path: Path, family: testenv.Family) -> Iterator[Project]:
    token = os.urandom(8).hex()
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text("hello\n")
    root = write_checkout(
        tmp_path / "fork",
        {**STARTABLE, "labels": {"org.rocmenv.test": token}, "mounts": [f"{data}:/data"]},
    )
    (root / ".git" / "config").write_text("[core]\n")
    cwd = root  # rocmenv runs at the top of the checkout, as a workflow step does
    policy = tmp_path / "policy.toml"  # the trusted side declares the data source
    policy.write_text(f'mount-sources = ["{data}"]\n')
    host = build_fake_host(tmp_path / "host", char_devices=True)
    base_env = {
        k: v
        for k, v in os.environ.items()
        if (not k.startswith("ROCMENV_") or k == "ROCMENV_SITE_CONFIG")
        and k not in SECRETS
        and k not in ("HIP_VISIBLE_DEVICES", "GITHUB_ACTIONS")  # (stdout: not the job log's)
    }
    base_env.update(host.env())
    base_env.update(SECRETS)
    base_env.update(
        {
            "ROCMENV_UNTRUSTED": "1",
            "ROCMENV_POLICY": str(policy),
            "ROCMENV_SHIMS_QUIET": "1",
            # trusted input (the workflow's): the test registry mirrors Docker Hub
            "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}",
            "HIP_VISIBLE_DEVICES": "4,5,6,7",
            "HTTPS_PROXY": "http://proxy.invalid:3128",
        }
    )
    project = Project(
        root=root, cwd=cwd, data=data, host=host, image=family[IMAGE_NAME].ref,
        group=("video", 44), base_env=base_env, token=token,
    )  # fmt: skip
    yield project
    leftovers = containers_labelled(f"org.rocmenv.test={token}")
    remove_containers(leftovers)
    assert not leftovers, f"containers left behind: {leftovers}"


def parse(stdout: str) -> tuple[dict[str, str], dict[str, str]]:
    facts: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("env:"):
            name, _, value = line[4:].partition("=")
            env[name] = value
        elif line.startswith("connect="):
            facts[f"connect{len([k for k in facts if k.startswith('connect')])}"] = line[8:]
        elif "=" in line:
            key, _, value = line.partition("=")
            facts[key] = value
    return facts, env


def test_inside_a_hostile_forks_container_nothing_of_the_host_is_reachable(
    fork: Project, engine: str, tmp_path: Path
) -> None:
    marker = f"rocmenv-test-{fork.token}"
    shm_marker = Path("/dev/shm") / marker
    shm_marker.write_text("the other job's shared memory\n")
    try:
        done = fork.run(
            "run", "--engine", engine, "--image", fork.image, "--gpus", "4-7", "--",
            "sh", "-c",
            INSIDE.replace("@HOST_TREE@", str(fork.host.root)).replace("@SHM_MARKER@", marker),
        )  # fmt: skip
    finally:
        shm_marker.unlink()
    assert done.returncode == 0, done.stderr
    facts, env = parse(done.stdout)
    selected = fork.host.gpus[4:]
    expected = sorted([g.render_name for g in selected] + [g.card_name for g in selected])
    assert facts["dri"].split() == expected  # only the selected fake GPUs' nodes
    assert facts["kfd"] == "yes"
    assert facts["sock"] == "0"
    assert facts["connect0"] == facts["connect1"] == "refused"  # the Docker socket
    assert facts["hostroot"] == "absent" and facts["hosttree"] == "absent"  # host's /
    # the checkout, .git included, is a copy-on-write view: writable inside, never on the host
    assert facts["git"] == "writable" and facts["gitconfig"] == "writable"
    assert facts["checkout"] == "writable" and facts["data"] == "read-only"
    assert not (fork.root / ".git" / "hooks" / "pre-commit").exists()
    assert (fork.root / ".git" / "config").read_text() == "[core]\n"
    assert not (fork.root / "made-inside").exists()
    assert facts["shmfile"] == "absent"  # /dev/shm is private …
    assert facts["shmsize"] == str(64 * 1024)  # … of the profile's shm-size
    assert facts["ipcns"] != os.readlink("/proc/self/ns/ipc")
    assert facts["seccomp"] == "2"  # the default seccomp filter stays
    assert not int(facts["capeff"], 16) & (1 << 19)  # no CAP_SYS_PTRACE
    for name, value in SECRETS.items():  # no secret variable is set
        assert name not in env
        assert value not in done.stdout and value not in done.stderr
    assert "HTTPS_PROXY" not in env
    for name in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        assert env[name] == "0,1,2,3", name  # renumbered, not the host's 4,5,6,7
    assert "NOT_HIP_VISIBLE_DEVICES" not in env
    notice = [line for line in done.stderr.splitlines() if "untrusted mode" in line]
    assert len(notice) == 1, done.stderr
    for change in ("gpu-isolation env -> devices", "ipc host -> private", "GITHUB_TOKEN",
                   "WANDB_API_KEY", "the checkout copy-on-write", "cap-add SYS_PTRACE dropped",
                   "pids-limit 8192", "ulimits core=0,nice=0,rtprio=0"):  # fmt: skip
        assert change in notice[0], change


@pytest.mark.parametrize(
    "attack", ["mount-socket", "mount-root", "devices", "cap-add", "network", "group-add"]
)
def test_a_refused_attack_never_becomes_a_container(fork: Project, attack: str) -> None:
    table, named = REFUSED[attack]
    write_checkout(fork.root, {**STARTABLE, **table, "labels": {"org.rocmenv.test": fork.token}})
    done = fork.run("run", "--engine", "docker-cli", "--image", fork.image, "--", "true")
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "untrusted mode" in done.stderr
    assert "Traceback" not in done.stderr
    assert fork.containers() == []


def test_the_same_checkout_trusted_reaches_what_untrusted_mode_closes(fork: Project) -> None:
    """The control: the probes above do see the attacks when the policy is off."""
    marker = f"rocmenv-test-{fork.token}"
    shm_marker = Path("/dev/shm") / marker
    shm_marker.write_text("x\n")
    try:
        done = fork.run(
            "run", "--engine", "docker-cli", "--image", fork.image, "--gpus", "4-7", "--",
            "sh", "-c",
            INSIDE.replace("@HOST_TREE@", str(fork.host.root)).replace("@SHM_MARKER@", marker),
            env={"ROCMENV_UNTRUSTED": "0"},
        )  # fmt: skip
    finally:
        shm_marker.unlink()
    assert done.returncode == 0, done.stderr
    facts, env = parse(done.stdout)
    assert len(facts["dri"].split()) == 17  # gpu-isolation = "env": every node
    assert facts["git"] == "writable" and facts["data"] == "writable"
    assert facts["shmfile"] == "visible"  # ipc = "host"
    assert int(facts["capeff"], 16) & (1 << 19) and facts["seccomp"] == "0"
    assert env["GITHUB_TOKEN"] == SECRETS["GITHUB_TOKEN"]
    assert env["NOT_HIP_VISIBLE_DEVICES"] == "4,5,6,7"
    (fork.root / ".git" / "hooks" / "pre-commit").unlink()


def test_gpus_all_untrusted_is_every_gpus_nodes_but_not_the_rest_of_dri(fork: Project) -> None:
    done = fork.run(
        "run", "--engine", "docker-api", "--image", fork.image, "--gpus", "all", "--",
        "sh", "-c", 'ls /dev/dri; echo "HIP=$HIP_VISIBLE_DEVICES"',
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    expected = sorted(
        [g.render_name for g in fork.host.gpus] + [g.card_name for g in fork.host.gpus]
    )
    assert sorted(lines[:-1]) == expected  # 16 nodes: not the BMC's card0
    assert lines[-1] == "HIP=0,1,2,3,4,5,6,7"
