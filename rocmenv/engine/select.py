"""Which engine a command uses, and opening it.

Choice (one rule for every setting with several sources, docs/configuration.md "Precedence"): ``--engine``
> ``ROCMENV_ENGINE`` > the profile's ``engine`` > the project file's ``engine`` > auto
(a socket that answers ``/_ping`` → docker-api; else a ``docker`` binary → docker-cli;
else ``podman``). Adapters are imported only when an engine is made (``rocmenv --help``
stays fast).
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` adds enum conversions and ``selectors`` (~2.5 ms a run)
import importlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from rocmenv.context import Context
from rocmenv.engine.protocol import Engine
from rocmenv.errors import EngineUnavailable, UsageError
from rocmenv.record import field, record
from rocmenv.settings.choices import ENGINE_KINDS, ENGINE_NAMES

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import cast

    from rocmenv.settings.choices import EngineKind, EngineName
else:
    from rocmenv.typecheck import cast

DEFAULT_SOCKET = "/var/run/docker.sock"

START_HINT = (
    "start the engine: `sudo systemctl start docker` (or run `sudo dockerd &`); rootless: "
    "`systemctl --user start docker`; or choose another with --engine docker-api|docker-cli|podman"
)


def _socket_path(env: Mapping[str, str]) -> str | None:
    host = env.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    if host.startswith("unix://"):
        return host[len("unix://") :]
    return None  # tcp:// or ssh://: not a local socket


def socket_answers(path: str, timeout: float = 1.0) -> bool:
    """``GET /_ping`` on a unix socket, without importing docker-py."""
    return ping(path, timeout) is not None


def ping(path: str, timeout: float = 1.0) -> str | None:
    """``GET /_ping`` on a unix socket: ``None`` when it does not answer 200, else the API
    version it offers — its ``Api-Version`` header, ``""`` when that is absent or not plain
    (the docker-api adapter then asks again, strictly: :mod:`rocmenv.engine.wire`)."""
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            head = sock.recv(4096)
        finally:
            sock.close()
    except OSError:
        return None
    if not (head.startswith(b"HTTP/1.") and b" 200 " in head[:16]):
        return None
    for line in head.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"api-version":
            offered = value.strip()
            major, dot, minor = offered.partition(b".")
            return offered.decode() if dot and major.isdigit() and minor.isdigit() else ""
    return ""


def _uses_cli_context(env: Mapping[str, str]) -> bool:
    context = env.get("DOCKER_CONTEXT", "")
    if context:  # the variable overrides the config's currentContext, as in the docker CLI
        return context != "default"
    config = Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME", "/root")) / ".docker")
    try:
        text = (config / "config.json").read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):  # unreadable, or a path the OS refuses
        return False
    match = re.search(r'"currentContext"\s*:\s*"([^"]*)"', text)
    return bool(match and match.group(1) not in ("", "default"))


def _on_path(binary: str, path_env: str) -> bool:
    import shutil  # only when the socket does not decide (shutil costs ~3 ms: bz2, lzma)

    return shutil.which(binary, path=path_env) is not None


@record
class EngineChoice:
    """A concrete engine, and the API version its socket offered if a ping asked (then the
    docker-api adapter need not ask again)."""

    kind: EngineKind
    api_offered: str | None = None


def detect_engine(env: Mapping[str, str]) -> EngineKind:
    """Auto-detection (see the module docstring)."""
    return _detect(env).kind


def _detect(env: Mapping[str, str]) -> EngineChoice:
    path_env = env.get("PATH", os.defpath)
    if not env.get("DOCKER_HOST") and _uses_cli_context(env) and _on_path("docker", path_env):
        # a CLI context points elsewhere; only the CLI knows where
        return EngineChoice(kind="docker-cli")
    sock = _socket_path(env)
    if sock is None:
        # DOCKER_HOST=tcp://… or ssh://…: docker-py speaks both
        return EngineChoice(kind="docker-api")
    offered = ping(sock)
    if offered is not None:
        return EngineChoice(kind="docker-api", api_offered=offered or None)
    if _on_path("docker", path_env):
        return EngineChoice(kind="docker-cli")
    if _on_path("podman", path_env):
        return EngineChoice(kind="podman")
    raise EngineUnavailable(
        f"no container engine found: {sock} does not answer and neither docker nor podman "
        "is on PATH",
        hint=START_HINT,
    )


def engine_name(
    ctx: Context,
    *,
    flag: EngineName | None = None,
    profile: EngineName | None = None,
    config: EngineName = "auto",
) -> EngineName:
    """The engine asked for: ``--engine`` > ``ROCMENV_ENGINE`` > the profile's ``engine`` >
    the project file's ``engine`` > ``auto``; ``auto`` at any level defers to the next."""
    env_value = ctx.env.get("ROCMENV_ENGINE", "").strip()
    if env_value and env_value not in ENGINE_NAMES:
        raise UsageError(
            f"ROCMENV_ENGINE={env_value!r} is not an engine",
            hint=f"use one of: {', '.join(ENGINE_NAMES)}",
        )
    for value in (flag, env_value, profile, config):
        if value and value != "auto":
            return cast("EngineName", value)
    return "auto"


def choose_engine_kind(ctx: Context, name: EngineName = "auto") -> EngineKind:
    """A concrete engine for ``name`` (``auto``: detected)."""
    return choose_engine(ctx, name).kind


def choose_engine(ctx: Context, name: EngineName = "auto") -> EngineChoice:
    """A concrete engine for ``name`` (``auto``: detected), with what detection learnt."""
    if name == "auto":
        return _detect(ctx.env)
    if name not in ENGINE_KINDS:
        raise UsageError(f"unknown engine {name!r}", hint=f"use one of: {', '.join(ENGINE_NAMES)}")
    return EngineChoice(kind=name)


_MODULES: dict[str, str] = {
    "docker-api": "rocmenv.engine.docker_api",
    "docker-cli": "rocmenv.engine.cli_engine",
    "podman": "rocmenv.engine.cli_engine",
}


@record
class EngineOptions:
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 60.0
    api_offered: str | None = None  # what the socket's /_ping offered (EngineChoice)


def make_engine(kind: EngineKind, ctx: Context, *, api_offered: str | None = None) -> Engine:
    if kind == "docker-api":
        require_ssh_support(ctx.env)
    module = importlib.import_module(_MODULES[kind])
    factory: Callable[[EngineKind, EngineOptions], Engine] = module.make
    return factory(kind, EngineOptions(env=dict(ctx.env), api_offered=api_offered))


SSH_HINT = (
    "install the extra: `pip install 'rocmenv[ssh]'` (paramiko, docker-py's SSH transport); "
    "or use --engine docker-cli, whose docker CLI speaks ssh:// itself"
)


def require_ssh_support(env: Mapping[str, str]) -> None:
    """``DOCKER_HOST=ssh://…`` for the Engine API needs paramiko (the ``rocmenv[ssh]``
    extra): without it, say so — not "start the engine"."""
    host = env.get("DOCKER_HOST", "")
    if not host.startswith("ssh://"):
        return
    try:
        importlib.import_module("paramiko")
    except ImportError:
        raise EngineUnavailable(
            f"DOCKER_HOST={host}: ssh:// engine hosts need paramiko, which is not installed",
            hint=SSH_HINT,
        ) from None


def open_engine(ctx: Context, name: EngineName = "auto") -> Engine:
    return make_engine(choose_engine_kind(ctx, name), ctx)


def in_container() -> bool:
    """Are we inside a container (where bind sources are the engine host's paths)?"""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        text = Path("/proc/1/cgroup").read_text()
    except OSError:
        return False
    return any(marker in text for marker in ("/docker/", "/kubepods", "/containerd/", "libpod"))
