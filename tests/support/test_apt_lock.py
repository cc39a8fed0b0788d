"""scripts/lib/apt_lock.sh: scripts/setup.sh waits (bounded) for another apt or dpkg instead of
failing with apt's exit 100, and says who holds the lock.

The locks are files of the test's own (``ROCMENV_APT_LOCKS``), held the way apt and dpkg
hold theirs (a POSIX record lock, ``fcntl``) or with flock(2) (the ``flock`` utility) by a
process the test starts and ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HOLD_FCNTL = """
import fcntl, sys
f = open(sys.argv[1], "w")
fcntl.lockf(f, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _need_lslocks() -> None:
    if shutil.which("lslocks") is None:
        from tests.support import testenv

        testenv.missing_environment("lslocks (util-linux) is not installed", kind="tool")


@contextmanager
def held(path: Path, how: str) -> Iterator[subprocess.Popen[str]]:
    """``path`` locked by a child until the block ends (its stdin closed, or killed)."""
    if how == "fcntl":
        argv = [sys.executable, "-c", HOLD_FCNTL, str(path)]
    else:
        argv = ["flock", "--exclusive", str(path), "sh", "-c", "echo held; cat >/dev/null"]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)


def _waiter(locks: list[Path], limit: int) -> subprocess.Popen[str]:
    script = (
        f'. "{REPO}/scripts/lib/common.sh"; . "{REPO}/scripts/lib/apt_lock.sh"; wait_for_apt_locks'
    )
    env = {
        **os.environ,
        "ROCMENV_APT_LOCKS": " ".join(str(p) for p in locks),
        "ROCMENV_APT_LOCK_WAIT": str(limit),
    }
    return subprocess.Popen(
        ["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("how", ["fcntl", "flock"])
def test_setup_waits_while_another_apt_holds_the_lock_and_names_it(
    tmp_path: Path, how: str
) -> None:
    _need_lslocks()
    locks = [tmp_path / "lists-lock", tmp_path / "lock-frontend"]
    for lock in locks:
        lock.touch()
    with held(locks[1], how) as holder:
        waiter = _waiter(locks, limit=60)
        time.sleep(2.5)
        assert waiter.poll() is None  # still waiting while the lock is held
        assert holder.stdin is not None
        holder.stdin.close()  # the other apt finishes
        holder.wait(timeout=10)
        out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    line = next(li for li in out.splitlines() if "waiting for apt/dpkg" in li)
    assert str(holder.pid) in line and str(locks[1]) in line


def test_setup_gives_up_after_the_bound_naming_the_holder(tmp_path: Path) -> None:
    _need_lslocks()
    lock = tmp_path / "lock-frontend"
    lock.touch()
    with held(lock, "fcntl") as holder:
        start = time.monotonic()
        waiter = _waiter([lock], limit=2)
        _out, err = waiter.communicate(timeout=30)
        took = time.monotonic() - start
    assert waiter.returncode == 1
    assert str(holder.pid) in err and "ROCMENV_APT_LOCK_WAIT" in err
    assert took >= 2


def test_setup_does_not_wait_when_no_lock_is_held(tmp_path: Path) -> None:
    _need_lslocks()
    lock = tmp_path / "lock-frontend"
    lock.touch()
    waiter = _waiter([lock, tmp_path / "absent"], limit=60)
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert "waiting" not in out
