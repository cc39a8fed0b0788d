"""How the podman adapter renders a spec (rocmenv/engine/podman.py ``podman_args``); the real
engine runs the same specs in tests/integration (the ``podman`` engine parameter)."""

from __future__ import annotations

import resource
from pathlib import Path

from rocmenv.container.render import render_docker
from rocmenv.container.runspec import RunSpec
from rocmenv.engine.podman import podman_args
from rocmenv.settings.profiles import Ulimit


def spec(**fields: object) -> RunSpec:
    return RunSpec(image="127.0.0.1:5000/x/y:z", command=("true",), **fields)  # type: ignore[arg-type]


def test_no_ulimits_inherit_the_hosts_as_docker_does() -> None:
    s = spec()
    args = podman_args(render_docker(s), s)
    assert "--ulimit=host" in args
    assert not [a for a in args if a.startswith("--ulimit=") and a != "--ulimit=host"]


def test_set_ulimits_get_explicit_nofile_and_nproc_at_the_hosts_limits() -> None:
    s = spec(ulimits=(Ulimit(name="memlock", soft=-1, hard=-1),))
    args = podman_args(render_docker(s), s)
    assert "--ulimit=host" not in args
    nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert f"--ulimit=nofile={nofile_hard}:{nofile_hard}" in args
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nproc = [a for a in args if a.startswith("--ulimit=nproc=")]
    assert nproc and int(nproc[0].split("=")[2].split(":")[0]) <= pid_max


def test_a_profiles_own_nofile_is_kept() -> None:
    s = spec(ulimits=(Ulimit(name="nofile", soft=1024, hard=4096),))
    args = podman_args(render_docker(s), s)
    assert [a for a in args if a.startswith("--ulimit=nofile")] == ["--ulimit=nofile=1024:4096"]


def test_shm_size_with_host_ipc_and_zero_memory_limits_are_dropped() -> None:
    s = spec(ipc="host", shm_size="32g", memory="0", memory_swap="0")
    args = podman_args(render_docker(s), s)
    assert "--ipc=host" in args
    assert not [a for a in args if a.startswith(("--shm-size", "--memory"))]
    private = spec(ipc="private", shm_size="64m", memory="8g", memory_swap="8g")
    kept = podman_args(render_docker(private), private)
    assert {"--shm-size=64m", "--memory=8g", "--memory-swap=8g"} <= set(kept)


def test_podman_never_copies_the_hosts_proxy_variables() -> None:
    s = spec()
    assert "--http-proxy=false" in podman_args(render_docker(s), s)
