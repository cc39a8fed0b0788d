"""The built-in ``rocm`` profile starts a container: a profile derived from it, with only the
limits this host cannot grant lowered to what it can (facts from tests/support/hostfacts.py),
runs with every other reference option, and the container sees each of them.

On a GPU runner (memlock unlimited, nofile 65535 allowed, render group present) the derived
profile *is* the built-in one: nothing is lowered.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.support import hostfacts
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    project_fixture,
)

MEMLOCK, STACK, NOFILE = -1, 67108864, 65535

PROBE = r"""
echo "memlock=$(ulimit -Hl) nofile=$(ulimit -Hn) stack=$(ulimit -Hs)"
echo "groups=$(id -G)"
grep -E '^(CapEff|Seccomp):' /proc/self/status
echo "ipc=$(readlink /proc/self/ns/ipc)"
echo "shm=$(df -k /dev/shm | awk 'NR==2 {print $2}')"
ls /dev/kfd /dev/dri
ls /data/miles_ci
"""


def _limit_text(value: int, unit: int = 1) -> str:
    return "unlimited" if value == hostfacts.UNLIMITED else str(value // unit)


@pytest.mark.parametrize("engine", ["docker-api", "docker-cli", "podman"], indirect=True)
def test_a_profile_derived_from_rocm_runs_with_every_reference_option(
    project: Project, engine: str
) -> None:
    memlock = hostfacts.allowed_value("memlock", MEMLOCK)
    nofile = hostfacts.allowed_value("nofile", NOFILE)
    stack = hostfacts.allowed_value("stack", STACK)
    render = "render" if hostfacts.group_resolves("render", project.image) else project.group[0]
    (project.root / "rocmenv.toml").write_text(
        (project.root / "rocmenv.toml").read_text()
        + f"""
[profiles.rocm-here]
extends = "rocm"
labels = {{ "org.rocmenv.test" = "{project.token}" }}
group-add = ["video", "{render}"]
ulimits = {{ memlock = "{memlock}", stack = {stack}, nofile = "{nofile}:{nofile}" }}
mounts = ["{project.data}:/data/miles_ci"]
"""
    )
    done = project.run(
        "run", "--engine", engine, "--profile", "rocm-here", "--gpus", "all",
        "--image", project.image, "--no-shims", "--", "sh", "-c", PROBE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"memlock={_limit_text(memlock, 1024)} nofile={nofile} stack={stack // 1024}" in out
    groups = set(re.search(r"groups=(.*)", out).group(1).split())  # type: ignore[union-attr]
    import grp

    wanted = {str(grp.getgrnam("video").gr_gid), str(grp.getgrnam(render).gr_gid)}
    assert wanted <= groups, out
    cap_eff = int(re.search(r"CapEff:\s*([0-9a-f]+)", out).group(1), 16)  # type: ignore[union-attr]
    assert cap_eff & (1 << 19), "SYS_PTRACE (capability 19) missing"
    assert re.search(r"Seccomp:\s*0", out), "seccomp=unconfined: no filter"
    assert f"ipc={os.readlink('/proc/self/ns/ipc')}" in out  # --ipc=host
    # --ipc=host shares the host's /dev/shm, so the size is the host's; with a private IPC
    # namespace --shm-size=32g applies (checked by `rocmenv options`/create tests)
    assert "shm=" in out
    assert "/dev/kfd" in out and re.search(r"renderD\d+", out), out
    assert "hello.txt" in out  # the reference data mount
    if (memlock, nofile, stack) != (MEMLOCK, NOFILE, STACK):
        print(f"lowered to this host's limits: memlock={memlock} nofile={nofile} stack={stack}")
