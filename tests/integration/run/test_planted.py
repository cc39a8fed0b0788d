"""Issue 22, item 3: nothing an untrusted container plants in the checkout is honoured by the
host. Real containers on every engine plant a setuid-root shell, a setgid one and
world-writable device nodes in the checkout; the proof is taken on the host, through the
checkout's own path, as an unprivileged user: the shell does not elevate, the node cannot be
opened. Also when rocmenv is interrupted while the container runs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.fakegpu import build_fake_host
from tests.support.hostile import write_checkout
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    containers_labelled,
    engine_fixture,
    remove_containers,
    wait_for,
)

# root's alone: the fork's fake host has real device nodes (mknod), the proof is taken as
# another user (setpriv); and an ordinary user's rocmenv cannot change what a root container
# left in the checkout anyway (the sweep reports it; the copy-on-write checkout is the fix)
pytestmark = pytest.mark.root_only

NOBODY = 65534
PLANT = r"""
cp /bin/sh s && chmod 4755 s && echo "suid=$(stat -c %a s)"
cp /bin/sh g && chmod 2755 g
if mknod b b 7 0 2>/dev/null && chmod 666 b; then echo mknod=made; else echo mknod=refused; fi
mknod c c 1 3 2>/dev/null && chmod 666 c
echo "capeff=$(grep CapEff /proc/self/status | awk '{print $2}')"
"""
# what the default policy drops (bits of CapEff): MKNOD, SETFCAP, FSETID, NET_RAW,
# AUDIT_WRITE, SETPCAP, SYS_CHROOT
DROPPED = {"MKNOD": 27, "SETFCAP": 31, "FSETID": 4, "NET_RAW": 13, "AUDIT_WRITE": 29,
           "SETPCAP": 8, "SYS_CHROOT": 18}  # fmt: skip


@pytest.fixture(name="fork")
def fork_fixture(family: testenv.Family) -> Iterator[Project]:
    """A fork's checkout where an unprivileged host user can reach it (pytest's own temp
    directory is root's alone), and rocmenv run from its top, untrusted."""
    base = Path(tempfile.mkdtemp(prefix="rocmenv-planted-", dir="/tmp"))
    os.chmod(base, 0o755)
    token = os.urandom(8).hex()
    try:
        root = write_checkout(base / "fork", {
            "extends": "cpu", "labels": {"org.rocmenv.test": token}, "mounts": [],
        })  # fmt: skip
        os.chmod(root, 0o755)
        host = build_fake_host(base / "host", char_devices=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ROCMENV_") and k != "GITHUB_ACTIONS"}  # fmt: skip
        env.update(host.env())
        env.update({"ROCMENV_UNTRUSTED": "1", "ROCMENV_SHIMS_QUIET": "1",
                    "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}"})  # fmt: skip
        yield Project(
            root=root, cwd=root, data=base, host=host, image=family["demo"].ref,
            group=("video", 44), base_env=env, token=token,
        )  # fmt: skip
    finally:
        leftovers = containers_labelled(f"org.rocmenv.test={token}")
        remove_containers(leftovers)
        shutil.rmtree(base, ignore_errors=True)
    assert not leftovers, f"containers left behind: {leftovers}"


def as_nobody(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        cwd=cwd, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def assert_nothing_honoured(root: Path) -> None:
    """From the host, through the checkout's own path, as an unprivileged user."""
    for name in ("s", "g"):
        mode = (root / name).stat().st_mode
        assert not mode & 0o6000, f"{name}: {oct(mode)}"
    shell = as_nobody(str(root / "s"), "-p", "-c", "id -u; id -g", cwd=root)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == [str(NOBODY), str(NOBODY)]  # not 0: no root shell
    group = as_nobody(str(root / "g"), "-p", "-c", "id -g", cwd=root)
    assert group.stdout.split() == [str(NOBODY)]
    for node in ("b", "c"):
        assert not os.path.lexists(root / node)
        opened = as_nobody("sh", "-c", f"exec 3<>{root / node}", cwd=root)
        assert opened.returncode != 0


def test_a_planted_setuid_shell_or_device_node_is_not_honoured_by_the_host(
    fork: Project, engine: str
) -> None:
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "sh", "-c", PLANT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert facts["suid"] == "4755"  # it was planted, inside
    assert facts["mknod"] == "refused"  # MKNOD dropped
    capeff = int(facts["capeff"], 16)
    assert not [name for name, bit in DROPPED.items() if capeff & (1 << bit)]
    assert_nothing_honoured(fork.root)
    assert "cleared setuid/setgid on 2 file(s)" in done.stderr, done.stderr


def test_nodes_a_policy_lets_the_container_make_are_removed_after_the_run(
    fork: Project, engine: str
) -> None:
    """A site may allow MKNOD (a policy file): the nodes made still do not survive the run."""
    policy = fork.data / "policy.toml"
    policy.write_text('cap-add = ["MKNOD"]\n')
    write_checkout(fork.root, {"extends": "cpu", "cap-add": ["MKNOD"],
                               "labels": {"org.rocmenv.test": fork.token}, "mounts": []})  # fmt: skip
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "sh", "-c", PLANT, env={"ROCMENV_POLICY": str(policy)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mknod=made" in done.stdout
    assert_nothing_honoured(fork.root)
    assert "removed 2 device node(s)" in done.stderr


def test_an_interrupted_run_still_leaves_nothing_the_host_honours(fork: Project) -> None:
    proc = fork.popen("run", "--engine", "docker-cli", "--image", fork.image, "--gpus", "none",
                      "--", "sh", "-c", PLANT + "touch planted-done; sleep 300")  # fmt: skip
    try:
        assert wait_for(lambda: (fork.root / "planted-done").exists(), 60), "never planted"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert_nothing_honoured(fork.root)
    assert fork.containers() == []


CAP = r"""
cp /bin/sh capped && cp /bin/sh later && chmod 644 later && python3 -c '
import os, struct
cap = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)  # cap_setuid+ep
for name in ("capped", "later"):
    os.setxattr(name, "security.capability", cap)
print("capped=" + ",".join(n for n in ("capped", "later") if os.getxattr(n, "security.capability")))
'
"""


def test_file_capabilities_a_policy_lets_the_container_set_are_removed_after_the_run(
    fork: Project, engine: str
) -> None:
    """A site may allow SETFCAP (a policy file): ``cap_setuid+ep`` on a copied shell, and on
    a 0644 copy a host user could make executable later, do not survive the run."""
    policy = fork.data / "policy.toml"
    policy.write_text('cap-add = ["SETFCAP"]\n')
    write_checkout(fork.root, {"extends": "cpu", "cap-add": ["SETFCAP"],
                               "labels": {"org.rocmenv.test": fork.token}, "mounts": []})  # fmt: skip
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "sh", "-c", CAP, env={"ROCMENV_POLICY": str(policy)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "capped=capped,later" in done.stdout  # they were set, inside
    for name in ("capped", "later"):
        assert (fork.root / name).exists()
        with pytest.raises(OSError):
            os.getxattr(fork.root / name, "security.capability")
