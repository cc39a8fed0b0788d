"""Issue 22, item 3, and issue 31: nothing an untrusted container plants in the checkout is
honoured by the host. Real containers on every engine plant a setuid-root shell, a setgid
one and world-writable device nodes in the checkout; since issue 31 they land in the
container's copy-on-write view and never reach the host at all. The proof is taken on the
host, through the checkout's own path, as an unprivileged user: nothing there elevates or
opens. Also when rocmenv is interrupted while the container runs. The sweep of
``rocmenv/run/planted.py`` stays as the second line: it still neutralises, after an
untrusted run, what the host's checkout holds."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
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
#: ``cap_setuid+ep`` as the kernel stores it (``security.capability``, revision 2)
CAPABILITY = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)
DROPPED = {"MKNOD": 27, "SETFCAP": 31, "FSETID": 4, "NET_RAW": 13, "AUDIT_WRITE": 29,
           "SETPCAP": 8, "SYS_CHROOT": 18}  # fmt: skip


@pytest.fixture(name="fork")
def fork_fixture(family: testenv.Family) -> Iterator[Project]:
    """A fork's checkout where an unprivileged host user can reach it (pytest's own temp
    directory is root's alone), and rocmenv run from its top, untrusted."""
    base = Path(tempfile.mkdtemp(prefix="rocmenv-planted-", dir="/tmp"))
    os.chmod(base, 0o755)
    token = os.urandom(8).hex()

    def root() -> Path:
        made = write_checkout(base / "fork", {
            "extends": "cpu", "labels": {"org.rocmenv.test": token}, "mounts": [],
        })  # fmt: skip
        os.chmod(made, 0o755)
        return made

    with untrusted_fork(family, base, token, root, drop=("ROCMENV_", "GITHUB_ACTIONS")) as project:
        yield project


def as_nobody(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        cwd=cwd, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def assert_nothing_honoured(root: Path) -> None:
    """From the host, through the checkout's own path, as an unprivileged user: nothing the
    container planted is there to run or open."""
    for name in ("s", "g", "b", "c"):
        assert not os.path.lexists(root / name), name
    for name in ("s", "g"):
        shell = as_nobody(str(root / name), "-p", "-c", "id -u", cwd=root)
        assert shell.returncode != 0 and str(0) not in shell.stdout.split()
    for node in ("b", "c"):
        opened = as_nobody("sh", "-c", f"exec 3<>{root / node}", cwd=root)
        assert opened.returncode != 0


def test_a_planted_setuid_shell_or_device_node_never_reaches_the_host(
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
    assert "cleared setuid" not in done.stderr  # nothing reached the host to sweep


def test_nodes_a_policy_lets_the_container_make_stay_in_its_view(
    fork: Project, engine: str
) -> None:
    """A site may allow MKNOD (a policy file): the nodes made do not reach the host."""
    policy = fork.data / "policy.toml"
    policy.write_text('cap-add = ["MKNOD"]\n')
    write_checkout(fork.root, {"extends": "cpu", "cap-add": ["MKNOD"],
                               "labels": {"org.rocmenv.test": fork.token}, "mounts": []})  # fmt: skip
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "sh", "-c", PLANT, env={"ROCMENV_POLICY": str(policy)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mknod=made" in done.stdout
    assert_nothing_honoured(fork.root)


def test_an_interrupted_run_still_leaves_nothing_the_host_honours(fork: Project) -> None:
    proc = fork.popen("run", "--engine", "docker-cli", "--image", fork.image, "--gpus", "none",
                      "--", "sh", "-c", PLANT + "echo planted-done; sleep 300")  # fmt: skip
    try:
        assert proc.stdout is not None
        line, deadline = "", time.monotonic() + 60
        while "planted-done" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert "planted-done" in line, "never planted"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert_nothing_honoured(fork.root)
    assert fork.containers() == []


def test_the_sweep_is_still_the_second_line_over_the_checkout(fork: Project) -> None:
    """What the host's checkout holds (put there by an earlier trusted run, say) is still
    neutralised after an untrusted run: setuid bits cleared, said in one warning."""
    shutil.copy("/bin/sh", fork.root / "s")
    os.chmod(fork.root / "s", 0o4755)
    done = fork.run("run", "--engine", "docker-api", "--image", fork.image, "--gpus", "none",
                    "--", "true")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (fork.root / "s").stat().st_mode & 0o6000
    assert "cleared setuid/setgid on 1 file(s)" in done.stderr


CAP = r"""
cp /bin/sh capped && cp /bin/sh later && chmod 644 later && python3 -c '
import os, struct
cap = struct.pack("<5I", 0x02000001, 1 << 7, 0, 0, 0)  # cap_setuid+ep (CAPABILITY)
for name in ("capped", "later"):
    os.setxattr(name, "security.capability", cap)
print("capped=" + ",".join(n for n in ("capped", "later") if os.getxattr(n, "security.capability")))
'
"""


def test_file_capabilities_a_policy_lets_the_container_set_never_reach_the_host(
    fork: Project, engine: str
) -> None:
    """A site may allow SETFCAP (a policy file): ``cap_setuid+ep`` on a copied shell, and on
    a 0644 copy a host user could make executable later, stay in the container's view; and
    the sweep (the second line) still removes one the host's checkout already held."""
    policy = fork.data / "policy.toml"
    policy.write_text('cap-add = ["SETFCAP"]\n')
    write_checkout(fork.root, {"extends": "cpu", "cap-add": ["SETFCAP"],
                               "labels": {"org.rocmenv.test": fork.token}, "mounts": []})  # fmt: skip
    shutil.copy("/bin/sh", fork.root / "old")
    os.setxattr(fork.root / "old", "security.capability", CAPABILITY)
    done = fork.run("run", "--engine", engine, "--image", fork.image, "--gpus", "none", "--",
                    "sh", "-c", CAP, env={"ROCMENV_POLICY": str(policy)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "capped=capped,later" in done.stdout  # they were set, inside
    for name in ("capped", "later"):
        assert not os.path.lexists(fork.root / name)
    with pytest.raises(OSError):
        os.getxattr(fork.root / "old", "security.capability")
    assert "removed file capabilities from 1 file(s)" in done.stderr
