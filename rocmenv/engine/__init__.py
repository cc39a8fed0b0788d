"""One container-engine protocol, two adapters, and how one is chosen.

* ``docker-api`` (:mod:`rocmenv.engine.docker_api`): docker-py, the Engine API over the
  socket (``DOCKER_HOST`` or ``/var/run/docker.sock``); works where only the socket is
  mounted, as on runners that start sibling containers.
* ``docker-cli`` / ``podman`` (:mod:`rocmenv.engine.whales`): python-on-whales driving the
  ``docker`` or ``podman`` binary (contexts, remote hosts, rootless podman).

Choice: ``--engine`` > profile ``engine`` > ``ROCMENV_ENGINE`` > config ``engine`` > auto
(a socket that answers ``/_ping`` → docker-api; else a ``docker`` binary → docker-cli;
else ``podman``). Neither library is imported until an engine needs it (``rocmenv --help``
stays fast; see each adapter for what its hot path imports).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from rocmenv.context import Context
from rocmenv.errors import EngineError, EngineUnavailable, UsageError
from rocmenv.runspec import BindMount, EnvVar, RunSpec

EngineKind = Literal["docker-api", "docker-cli", "podman"]
ENGINE_KINDS: tuple[str, ...] = ("docker-api", "docker-cli", "podman")
DEFAULT_SOCKET = "/var/run/docker.sock"

START_HINT = (
    "start the engine: `sudo systemctl start docker` (or run `sudo dockerd &`); rootless: "
    "`systemctl --user start docker`; or choose another with --engine docker-api|docker-cli|podman"
)


@dataclass(frozen=True, kw_only=True)
class EngineInfo:
    kind: EngineKind
    version: str
    api_version: str = ""
    os: str = ""
    name: str = ""  # the daemon's host name


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    id: str
    repo_digests: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    def digest_for(self, repository: str) -> str | None:
        """The content digest recorded for ``repository`` (or any, when it has one only)."""
        digests = [d.split("@", 1) for d in self.repo_digests if "@" in d]
        for name, digest in digests:
            if name == repository or name.split("/", 1)[-1] == repository.split("/", 1)[-1]:
                return digest
        return digests[0][1] if len(digests) == 1 else None


@dataclass(frozen=True, kw_only=True)
class ContainerInfo:
    id: str
    name: str
    state: str  # created | running | exited | paused | dead | removing
    labels: tuple[tuple[str, str], ...] = ()
    image: str = ""

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True, kw_only=True)
class PullEvent:
    layer: str
    status: str
    current: int | None = None
    total: int | None = None


@dataclass(frozen=True, kw_only=True)
class CaptureResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


class Attachment(Protocol):
    """Output of a started container being copied to our stdout/stderr."""

    def join(self, timeout: float | None = None) -> None:
        """Wait until the container's streams end (or ``timeout``)."""

    def close(self) -> None:
        """Stop copying (idempotent); restores the terminal if it was put in raw mode."""

    def exit_code(self) -> int | None:
        """After :meth:`join`: the container's exit code when the attach channel knows it
        (None: ask :meth:`Engine.wait`). Raises :class:`EngineStartError` when the
        container never started."""


@dataclass(frozen=True, kw_only=True)
class StartFailure:
    """What went wrong when a container did not start (from the engine's error text)."""

    message: str
    option: str | None = None  # the option the engine refused, e.g. "--ulimit memlock=-1"
    exit_code: int = 125  # 127: command not found, 126: not executable


class EngineStartError(EngineError):
    """The engine created the container but could not start it."""

    def __init__(self, what: str, *, hint: str | None = None, failure: StartFailure) -> None:
        super().__init__(what, hint=hint)
        self.failure = failure


class Engine(Protocol):
    kind: EngineKind

    def ping(self) -> EngineInfo: ...

    def image_info(self, image: str) -> ImageInfo | None:
        """Inspect a local image; None when it is not present."""

    def image_exists(self, image: str) -> bool: ...

    def image_env(self, image: str) -> dict[str, str]:
        """The ``Env`` of the image's config (raises EngineError when absent)."""

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None: ...

    def create(
        self,
        spec: RunSpec,
        *,
        tty: bool = False,
        stdin_open: bool = False,
        name: str | None = None,
    ) -> str:
        """Create (not start) the container; returns its id."""

    def start(self, container_id: str) -> None:
        """Start detached; raises :class:`EngineStartError` when the engine refuses."""

    def start_attached(
        self,
        container_id: str,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None = None,
        tty: bool = False,
    ) -> Attachment:
        """Attach, start, and copy output live (stdout and stderr separately unless tty)."""

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        """The container's exit code once it is not running (EngineError on timeout)."""

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None: ...

    def remove(self, container_id: str, *, force: bool = True) -> None:
        """Remove; a container already gone is not an error."""

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        """All stdout and stderr written so far."""

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        """Containers (any state) carrying every label (``None``: any value)."""

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        """The engine's inspect document (Docker's shape)."""

    def run_capture(
        self,
        image: str,
        argv: Sequence[str],
        *,
        mounts: Sequence[BindMount] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        workdir: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> CaptureResult: ...


# -- shared behaviour ------------------------------------------------------------------------


def capture(
    engine: Engine,
    image: str,
    argv: Sequence[str],
    *,
    mounts: Sequence[BindMount] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    workdir: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> CaptureResult:
    """Run ``argv`` in a short-lived, labelled container that is always removed."""
    from rocmenv.runspec import LABEL_SESSION

    all_labels = {
        LABEL_SESSION: os.urandom(6).hex(),
        **owner_labels(),
        "rocmenv.purpose": "capture",
        **(labels or {}),
    }
    spec = RunSpec(
        image=image,
        command=tuple(argv),
        profile="capture",
        mounts=tuple(mounts),
        env=tuple(EnvVar(name=k, value=v) for k, v in (env or {}).items()),
        workdir=workdir,
        labels=tuple(sorted(all_labels.items())),
    )
    cid = engine.create(spec)
    try:
        try:
            engine.start(cid)
        except EngineStartError as err:
            return CaptureResult(exit_code=err.failure.exit_code, stdout="", stderr=err.what)
        timed_out = False
        try:
            code = engine.wait(cid, timeout=timeout)
        except EngineError:
            timed_out = True
            engine.kill(cid)
            code = engine.wait(cid, timeout=30)
        out, err_bytes = engine.logs(cid)
        return CaptureResult(
            exit_code=code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err_bytes.decode("utf-8", "replace"),
            timed_out=timed_out,
        )
    finally:
        engine.remove(cid, force=True)


_RLIMITS = (
    "cpu", "fsize", "data", "stack", "core", "rss", "nproc", "nofile", "memlock", "as",
    "locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime",
)  # fmt: skip


def explain_start_failure(text: str, spec: RunSpec | None = None) -> StartFailure:
    """Turn an OCI runtime / daemon error into a message naming the option at fault."""
    low = text.lower()
    match = re.search(r"error setting rlimit type (\d+)", low)
    if match:
        index = int(match.group(1))
        name = _RLIMITS[index] if index < len(_RLIMITS) else f"type {index}"
        value = next((u.render() for u in (spec.ulimits if spec else ()) if u.name == name), None)
        option = f"--ulimit {value}" if value else f"--ulimit {name}=…"
        return StartFailure(
            message=f"the engine refused {option}: the limit is above what the engine's own "
            f"process may grant (its hard RLIMIT_{name.upper()})",
            option=option,
        )
    if "unable to apply caps" in low or ("privileged" in low and "not permitted" in low):
        option = "--privileged" if spec and spec.privileged else "--cap-add"
        if spec and not spec.privileged and spec.cap_add:
            option = "--cap-add " + ",".join(spec.cap_add)
        return StartFailure(
            message=f"the engine refused {option}: capabilities are restricted where the engine "
            "runs (a rootless or nested engine, or a restricted runner)",
            option=option,
        )
    match = re.search(
        r"error gathering device information while adding custom device \"([^\"]+)\"", text
    )
    if match:
        return StartFailure(
            message=f"the engine refused --device {match.group(1)}: it does not exist or is "
            "not a device on the engine's host",
            option=f"--device {match.group(1)}",
        )
    match = re.search(r"bind source path does not exist: (\S+)", text)
    if match:
        return StartFailure(
            message=f"the engine refused the mount of {match.group(1)}: it does not exist on "
            "the engine's host",
            option=f"--mount source={match.group(1)}",
        )
    match = re.search(r"unable to find group ([^:\s]+)", low)
    if match:
        return StartFailure(
            message=f"the engine refused --group-add {match.group(1)}: the image has no such "
            "group and the host has none of that name either",
            option=f"--group-add {match.group(1)}",
        )
    if "executable file not found" in low or ("no such file or directory" in low and "exec" in low):
        return StartFailure(
            message="the command was not found in the image: " + _tail(text), exit_code=127
        )
    if "permission denied" in low and "exec" in low:
        return StartFailure(message="the command is not executable: " + _tail(text), exit_code=126)
    return StartFailure(message="the engine could not start the container: " + _tail(text))


def _tail(text: str) -> str:
    text = text.strip().splitlines()[-1] if text.strip() else text
    for marker in ("unable to start container process: ", "OCI runtime create failed: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.removesuffix(": unknown")


def process_start(pid: int) -> str | None:
    """``<boot id prefix>:<start time in clock ticks>`` of a process, or None when it does
    not exist (or /proc is unavailable). A pid reused after the owner died, or after a
    reboot, gives another value."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return f"{boot}:{fields[19]}" if len(fields) > 19 else None


def owner_labels(*, start_only: bool = False) -> dict[str, str]:
    """The labels that let ``rocmenv gc`` tell whether a container's owner is still alive."""
    from rocmenv.runspec import LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START

    labels: dict[str, str] = {}
    start = process_start(os.getpid())
    if start:
        labels[LABEL_OWNER_START] = start
    if not start_only:
        labels[LABEL_OWNER_PID] = str(os.getpid())
        labels[LABEL_OWNER_HOST] = socket.gethostname()
    return labels


# -- selection -------------------------------------------------------------------------------


def _socket_path(env: Mapping[str, str]) -> str | None:
    host = env.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    if host.startswith("unix://"):
        return host[len("unix://") :]
    return None  # tcp:// or ssh://: not a local socket


def socket_answers(path: str, timeout: float = 1.0) -> bool:
    """``GET /_ping`` on a unix socket, without importing docker-py."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = sock.recv(64)
        return head.startswith(b"HTTP/1.") and b" 200 " in head[:16]
    except OSError:
        return False


def _uses_cli_context(env: Mapping[str, str]) -> bool:
    if env.get("DOCKER_CONTEXT", "default") not in ("", "default"):
        return True
    config = Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME", "/root")) / ".docker")
    try:
        text = (config / "config.json").read_text()
    except OSError:
        return False
    match = re.search(r'"currentContext"\s*:\s*"([^"]*)"', text)
    return bool(match and match.group(1) not in ("", "default"))


def detect_engine(env: Mapping[str, str]) -> EngineKind:
    """Auto-detection (see the module docstring)."""
    path_env = env.get("PATH", os.defpath)
    has_docker = shutil.which("docker", path=path_env) is not None
    if has_docker and not env.get("DOCKER_HOST") and _uses_cli_context(env):
        return "docker-cli"  # a CLI context points elsewhere; only the CLI knows where
    sock = _socket_path(env)
    if sock is None:
        return "docker-api"  # DOCKER_HOST=tcp://… or ssh://…: docker-py speaks both
    if socket_answers(sock):
        return "docker-api"
    if has_docker:
        return "docker-cli"
    if shutil.which("podman", path=path_env) is not None:
        return "podman"
    raise EngineUnavailable(
        f"no container engine found: {sock} does not answer and neither docker nor podman "
        "is on PATH",
        hint=START_HINT,
    )


def choose_engine_kind(
    ctx: Context, *, flag: str | None, profile_engine: str | None, config_engine: str
) -> EngineKind:
    """``--engine`` > profile > ``ROCMENV_ENGINE`` (already folded into the config's
    value by :func:`rocmenv.config.load_config`) > config file > auto."""
    for value in (flag, profile_engine, config_engine):
        if value and value != "auto":
            if value not in ENGINE_KINDS:
                raise UsageError(
                    f"unknown engine {value!r}", hint=f"use one of: auto, {', '.join(ENGINE_KINDS)}"
                )
            return cast(EngineKind, value)
    return detect_engine(ctx.env)


_MODULES: dict[str, str] = {
    "docker-api": "rocmenv.engine.docker_api",
    "docker-cli": "rocmenv.engine.whales",
    "podman": "rocmenv.engine.whales",
}


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 60.0


def make_engine(kind: EngineKind, ctx: Context) -> Engine:
    module = importlib.import_module(_MODULES[kind])
    factory = cast(Callable[[EngineKind, EngineOptions], Engine], module.make)
    return factory(kind, EngineOptions(env=dict(ctx.env)))


def open_engine(
    ctx: Context,
    *,
    flag: str | None = None,
    profile_engine: str | None = None,
    config_engine: str = "auto",
) -> Engine:
    return make_engine(
        choose_engine_kind(
            ctx, flag=flag, profile_engine=profile_engine, config_engine=config_engine
        ),
        ctx,
    )


def in_container() -> bool:
    """Are we inside a container (where bind sources are the engine host's paths)?"""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        text = Path("/proc/1/cgroup").read_text()
    except OSError:
        return False
    return any(marker in text for marker in ("/docker/", "/kubepods", "/containerd/", "libpod"))


__all__ = [
    "Attachment",
    "CaptureResult",
    "ContainerInfo",
    "Engine",
    "EngineInfo",
    "EngineKind",
    "EngineStartError",
    "ImageInfo",
    "PullEvent",
    "StartFailure",
    "capture",
    "choose_engine_kind",
    "detect_engine",
    "explain_start_failure",
    "make_engine",
    "open_engine",
    "owner_labels",
    "process_start",
]
