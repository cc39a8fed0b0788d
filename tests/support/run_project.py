"""Helpers and fixtures for the ``rocmenv run`` integration tests (imported by them:
``from tests.support.run_project import engine_fixture, project_fixture``).

``rocmenv`` runs as a real subprocess (signals, exit codes and file descriptors are what
a user gets) inside a scratch project: a git checkout with a ``rocmenv.toml`` of test
profiles, on a fake 8-GPU MI300X host (:mod:`tests.support.fakegpu`) whose device nodes
are real character devices.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import testenv
from tests.support.fakegpu import FakeHost, build_fake_host

# Which engine variants a test runs on (issue 20: a CI that answers in 15 minutes without
# losing what matters). Three tiers:
#   ENGINES    every variant: docker-api twice (over its standard-library transport and over
#              docker-py's), the docker CLI, podman. For what the transport or the engine's
#              process model can change: signals and stage boundaries, attach and streams,
#              terminals, the shell (``every_engine``).
#   RENDERING  one variant per engine adapter, the default of the ``engine`` fixture: for
#              what each adapter renders differently from the one spec — devices, groups,
#              capabilities, ulimits, mounts and their options, environment, labels,
#              removal, the engine's own refusals and hints. The transport is the same for
#              both docker-api variants there (the engine contract suite, which runs every
#              variant, covers it).
#   ONE_ENGINE the planner's and the CLI's behaviour that no adapter changes (refusals before
#              anything runs, warnings, pull policy and pinned digests, suites) (``one_engine``).
ENGINES = ("docker-api", "docker-api+docker-py", "docker-cli", "podman")
RENDERING = ("docker-api", "docker-cli", "podman")
ONE_ENGINE = ("docker-api",)
every_engine = pytest.mark.parametrize("engine", ENGINES, indirect=True)
one_engine = pytest.mark.parametrize("engine", ONE_ENGINE, indirect=True)
IMAGE_NAME = "demo"  # images/family.toml: rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215


def host_only_group() -> tuple[str, int]:
    """A group this host has and the test images lack (proves host-GID resolution)."""
    image_groups = {"root", "daemon", "bin", "sys", "adm", "tty", "disk", "lp", "mail", "news",
                    "uucp", "man", "proxy", "kmem", "dialout", "fax", "voice", "cdrom", "floppy",
                    "tape", "sudo", "audio", "dip", "www-data", "backup", "operator", "list",
                    "irc", "src", "shadow", "utmp", "video", "sasl", "plugdev", "staff", "games",
                    "users", "nogroup", "gnats"}  # fmt: skip
    try:
        entry = grp.getgrnam("docker")
        return entry.gr_name, entry.gr_gid
    except KeyError:
        pass
    for entry in sorted(grp.getgrall(), key=lambda g: g.gr_gid):
        if entry.gr_name not in image_groups and entry.gr_gid >= 100:
            return entry.gr_name, entry.gr_gid
    pytest.fail("this host has no group that the test image lacks (e.g. docker)")


PROFILES = """
default-profile = "gpu-test"

# Every profile carries the test's token, so a test can find exactly its own containers.
[profiles.plain]
extends = "cpu"
labels = {{ "org.rocmenv.test" = "{token}" }}

# The rocm profile minus what this sandbox cannot start (memlock=-1, nofile above the
# engine's hard limit) and a render group neither host nor image has.
[profiles.gpu-test]
extends = "rocm"
labels = {{ "org.rocmenv.test" = "{token}" }}
group-add = ["video", "{group}"]
ulimits = {{ stack = 67108864, nofile = "1024:4096" }}
mounts = []
env = {{ HF_HUB_OFFLINE = "1" }}
pass-env = ["HIP_VISIBLE_DEVICES", "HTTPS_PROXY"]
secret-env = ["ROCMENV_TEST_SECRET"]

[profiles.gpu-env]
extends = "gpu-test"
gpu-isolation = "env"

[profiles.shm-test]
extends = "plain"
ipc = "private"
shm-size = "64m"

[profiles.proxy-kept]
extends = "plain"
pass-env = ["HTTPS_PROXY", "no_proxy"]
keep-proxy-env = true

[profiles.data]
extends = "plain"
mounts = ["{data}:/data", {{ source = "{data}/absent", target = "/absent", optional = true }}]

[profiles.nofile-too-high]
extends = "plain"
ulimits = {{ nofile = "{nofile_too_high}" }}

[profiles.render-group]
extends = "plain"
group-add = ["render-{group}-absent"]

[profiles.reference-ci]
extends = "rocm"
labels = {{ "org.rocmenv.test" = "{token}" }}
privileged = true
mounts = ["{data}:/data/miles_ci", "{data}/models:/root/models"]
"""


@dataclass(frozen=True, kw_only=True)
class Project:
    root: Path  # the checkout (has .git)
    cwd: Path  # a subdirectory, where rocmenv runs
    data: Path
    host: FakeHost
    image: str
    group: tuple[str, int]
    base_env: Mapping[str, str]
    token: str  # label org.rocmenv.test on every container of this project

    @property
    def label(self) -> str:
        return f"org.rocmenv.test={self.token}"

    def containers(self) -> list[str]:
        return containers_labelled(self.label)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(self.base_env)
        env.update(extra or {})
        return env

    def run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rocmenv", *args],
            cwd=self.cwd,
            env=self.env(env),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(
        self, *args: str, env: Mapping[str, str] | None = None, **kw: object
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            [sys.executable, "-m", "rocmenv", *args],
            cwd=self.cwd,
            env=self.env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kw,
        )


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=check, timeout=120
    )


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, check=check, timeout=120
    )


def _engines_clis() -> list[Callable[..., subprocess.CompletedProcess[str]]]:
    """docker, and podman where it is installed (containers of the podman param live there)."""
    return [docker, podman] if shutil.which("podman") else [docker]


def containers_labelled(label: str) -> list[str]:
    found: list[str] = []
    for cli in _engines_clis():
        found += cli("ps", "-aq", "--no-trunc", "--filter", f"label={label}").stdout.split()
    return found


def inspect(container: str) -> dict[str, Any]:
    for cli in _engines_clis():
        done = cli("inspect", "--type=container", container, check=False)
        if done.returncode == 0:
            found: dict[str, Any] = json.loads(done.stdout)[0]
            return found
    raise RuntimeError(f"no engine here knows the container {container}")


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def python_startup_interrupted(stderr: str) -> bool:
    """CPython's own start-up (``site``, ``runpy``, the standard library's imports) was cut by
    a KeyboardInterrupt before any of rocmenv ran: CPython exits 1 then ("Fatal Python
    error: init…", or a traceback of its own imports ending in KeyboardInterrupt). rocmenv
    itself answers an interrupt with 130, never 1."""
    if "Fatal Python error: init" in stderr:
        return True
    lines = stderr.strip().splitlines()
    ours = [line for line in lines if line.strip().startswith("File") and "/rocmenv/" in line]
    return bool(lines) and lines[-1] == "KeyboardInterrupt" and not ours


def remove_containers(ids: Sequence[str]) -> None:
    if ids:
        for cli in _engines_clis():
            cli("rm", "-f", *ids, check=False)


@contextlib.contextmanager
def untrusted_fork(
    family: testenv.Family,
    base: Path,
    token: str,
    make_root: Callable[[], Path],
    *,
    env: Mapping[str, str] | None = None,
    drop: tuple[str, ...] = ("ROCMENV_",),
) -> Iterator[Project]:
    """A fork's checkout (``make_root()``, under ``base``) run from its top in untrusted mode
    on a fake GPU host, the demo image pulled through the open registry; afterwards the
    containers labelled with ``token`` are removed (a leftover fails the test) and ``base``
    goes. ``env``: more variables; ``drop``: prefixes of this process's variables left out."""
    try:
        root = make_root()
        host = build_fake_host(base / "host", char_devices=True)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        base_env.update(host.env())
        base_env.update({"ROCMENV_UNTRUSTED": "1", "ROCMENV_SHIMS_QUIET": "1",
                         "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}", **(env or {})})  # fmt: skip
        yield Project(
            root=root, cwd=root, data=base, host=host, image=family["demo"].ref,
            group=("video", 44), base_env=base_env, token=token,
        )  # fmt: skip
    finally:
        leftovers = containers_labelled(f"org.rocmenv.test={token}")
        remove_containers(leftovers)
        shutil.rmtree(base, ignore_errors=True)
    assert not leftovers, f"containers left behind: {leftovers}"


@pytest.fixture(name="engine", params=RENDERING)
def engine_fixture(request: pytest.FixtureRequest) -> str:
    """The ``--engine`` value; the transport part of the param reaches rocmenv through the
    project's environment (``ROCMENV_DOCKER_API_TRANSPORT``)."""
    if request.param == "podman":
        testenv.need("podman")
    return str(request.param).partition("+")[0]


def _transport_env(request: pytest.FixtureRequest) -> dict[str, str]:
    callspec = getattr(request.node, "callspec", None)
    param = str(callspec.params.get("engine", "")) if callspec is not None else ""
    transport = param.partition("+")[2]
    return {"ROCMENV_DOCKER_API_TRANSPORT": transport} if transport else {}


@pytest.fixture(name="project")
def project_fixture(
    tmp_path: Path, family: testenv.Family, request: pytest.FixtureRequest
) -> Iterator[Project]:
    root = tmp_path / "checkout"
    (root / ".git").mkdir(parents=True)
    cwd = root / "sub"
    cwd.mkdir()
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "hello.txt").write_text("hello from the host\n")
    group = host_only_group()

    # above the kernel's fs.nr_open: refused on every host, even where root raises limits
    too_high = int(Path("/proc/sys/fs/nr_open").read_text()) * 2
    token = os.urandom(8).hex()
    (root / "rocmenv.toml").write_text(
        PROFILES.format(
            group=group[0], data=data, nofile_too_high=f"{too_high}:{too_high}", token=token
        )
    )
    # real device nodes need root (mknod); an ordinary user's pass (scripts/test.sh) gets
    # regular files, which no test it runs hands to the engine as a device
    host = build_fake_host(tmp_path / "host")
    image = family[IMAGE_NAME].ref
    base_env = {
        k: v
        for k, v in os.environ.items()
        if (not k.startswith("ROCMENV_") or k == "ROCMENV_SITE_CONFIG")
        and k not in ("HTTPS_PROXY", "HIP_VISIBLE_DEVICES", "GITHUB_ACTIONS")  # (a test sets it)
    }
    base_env.update(host.env())
    base_env.update(_transport_env(request))
    base_env["ROCMENV_SHIMS_QUIET"] = "1"
    yield Project(
        root=root,
        cwd=cwd,
        data=data,
        host=host,
        image=image,
        group=group,
        base_env=base_env,
        token=token,
    )
    # nothing a test made may survive it
    leftovers = containers_labelled(f"org.rocmenv.test={token}")
    remove_containers(leftovers)
    assert not leftovers, f"containers left behind: {leftovers}"
