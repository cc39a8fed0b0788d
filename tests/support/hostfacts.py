"""Facts about this host that decide whether a container option can start here.

A sandboxed CI machine and a real GPU runner differ: here root cannot raise its hard
``RLIMIT_MEMLOCK`` (8 MiB) or ``RLIMIT_NOFILE`` (20000) and ``--privileged`` fails to apply
capabilities; on a GPU runner all of them start. Tests read these facts and expect "starts"
where the host allows and "refused, naming the option" where it does not — instead of baking
one machine's limits into the expectation.

* :func:`engine_hard_limit` — the hard limit of the engine's process (``dockerd``'s
  ``/proc/<pid>/limits``; a container's init inherits from the engine's side), falling back
  to this process's own;
* :func:`root_can_raise_hard_limits` — whether root may raise a hard limit at all here
  (a child process tries ``setrlimit`` above its own hard limit);
* :func:`ulimit_starts` — whether ``--ulimit NAME=SOFT:HARD`` can start here;
* :func:`privileged_starts` — whether ``docker run --privileged`` starts here (asked of the
  engine directly, not through rocmenv).

Test-support code: standard library only, independent of ``rocmenv``.
"""

from __future__ import annotations

import functools
import os
import resource
import subprocess
import sys
from pathlib import Path

UNLIMITED = -1
_RESOURCES = {
    "memlock": (resource.RLIMIT_MEMLOCK, "Max locked memory"),
    "nofile": (resource.RLIMIT_NOFILE, "Max open files"),
    "stack": (resource.RLIMIT_STACK, "Max stack size"),
    "nproc": (resource.RLIMIT_NPROC, "Max processes"),
}


def _engine_pid() -> int | None:
    for pidfile in ("/var/run/docker.pid", "/run/docker.pid"):
        try:
            return int(Path(pidfile).read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def _parse_limit(text: str) -> int:
    return UNLIMITED if text == "unlimited" else int(text)


@functools.cache
def engine_hard_limit(name: str) -> int:
    """The hard limit ``name`` (``memlock``/``nofile``/``stack``/``nproc``) of the engine's
    process, ``-1`` for unlimited; this process's own when the engine's cannot be read."""
    number, label = _RESOURCES[name]
    pid = _engine_pid()
    if pid is not None:
        try:
            for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
                if line.startswith(label):
                    return _parse_limit(line[len(label) :].split()[1])
        except OSError:
            pass
    hard = resource.getrlimit(number)[1]
    return UNLIMITED if hard == resource.RLIM_INFINITY else hard


@functools.cache
def root_can_raise_hard_limits() -> bool:
    """Whether a root process here may raise its hard RLIMIT_NOFILE (a child tries it)."""
    if os.geteuid() != 0:
        return False
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "nr_open = int(open('/proc/sys/fs/nr_open').read())\n"
        "if hard != resource.RLIM_INFINITY and hard < nr_open:\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard + 1))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    return done.returncode == 0


def nr_open() -> int:
    """The kernel's ceiling for RLIMIT_NOFILE (even root cannot go past it)."""
    return int(Path("/proc/sys/fs/nr_open").read_text())


def ulimit_starts(name: str, soft: int, hard: int) -> bool:
    """Whether a container with ``--ulimit name=soft:hard`` (``-1`` = unlimited) starts here."""
    if name == "nofile" and (hard == UNLIMITED or hard > nr_open()):
        return False
    limit = engine_hard_limit(name)
    if limit == UNLIMITED:
        return True
    if hard != UNLIMITED and hard <= limit and soft != UNLIMITED and soft <= hard:
        return True
    return root_can_raise_hard_limits()


def allowed_value(name: str, wanted: int) -> int:
    """``wanted`` if it starts here, else the highest value that does (the engine's hard)."""
    if ulimit_starts(name, wanted, wanted):
        return wanted
    return engine_hard_limit(name)


@functools.cache
def privileged_starts(image: str) -> bool:
    """Whether ``docker run --privileged IMAGE true`` starts here (asked of docker itself)."""
    done = subprocess.run(
        ["docker", "run", "--rm", "--privileged", image, "true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode == 0


@functools.cache
def group_resolves(name: str, image: str) -> bool:
    """Whether ``--group-add NAME`` can start: the host or the image has the group."""
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        pass
    done = subprocess.run(
        ["docker", "run", "--rm", image, "getent", "group", name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode == 0
