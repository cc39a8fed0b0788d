"""The container a profile describes, as one pure value: :class:`RunSpec` and the values it is
made of (devices, bind mounts, environment variables), with what the command line adds
(:class:`Overrides`) and what the host says (:class:`HostFacts`). Building one is
:mod:`rocmenv.container.builder`; rendering one for other tools is :mod:`rocmenv.container.render`; nothing here
touches an engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from rocmenv.container.gpu import (
    GpuInventory,
    GpuSelection,
)
from rocmenv.container.labels import Identity
from rocmenv.errors import ConfigError
from rocmenv.lazy import Pattern
from rocmenv.record import field, record
from rocmenv.settings.profiles import Profile, Ulimit

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Literal

    # fixed: the profile's env; pass: its pass-env; secret: its secret-env; host: -e NAME;
    # cli: -e NAME=VALUE; gpu: the selection's visible-device variables; launcher: PYTHONPATH
    EnvSource = Literal["fixed", "pass", "host", "secret", "gpu", "cli", "launcher"]

    # checkout: the working directory's git top level; profile: the profile's mounts; cli: -v
    # (the command line's: trusted input); guard: what the untrusted guard adds; launcher:
    # rocmenv's shim launcher; output: the declared output directory (``--output``)
    MountOrigin = Literal["checkout", "profile", "cli", "guard", "launcher", "output"]

    # bind: the host path itself; overlay: a copy-on-write view of it whose writes are
    # discarded with the container (rocmenv.engine.overlay); volume: an empty anonymous
    # volume of the engine's, removed with the container (no source)
    MountKind = Literal["bind", "overlay", "volume"]


#: The variable naming, in the container, the directory ``--output`` copies out.
OUTPUT_ENV = "ROCMENV_OUTPUT"


@record
class Device:
    host: str
    container: str
    permissions: str = "rwm"
    # /dev/kfd or a GPU's node, from the selection (not the profile's devices)
    gpu: bool = field(default=False, compare=False)
    cdi: bool = False  # a CDI name (amd.com/gpu=2) in host and container, not a path

    def render(self) -> str:
        if self.host == self.container and self.permissions == "rwm":
            return self.host
        out = f"{self.host}:{self.container}"
        return out if self.permissions == "rwm" else f"{out}:{self.permissions}"


@record
class BindMount:
    """A mount of the container: a host path (``bind``), a copy-on-write view of one
    (``overlay``: what an untrusted container gets of the checkout) or an empty volume of the
    engine's (``volume``: the output directory)."""

    source: str
    target: str
    readonly: bool = False
    origin: MountOrigin = field(default="profile", compare=False)
    # the engine creates an absent source (``-v`` semantics): only an optional mount rendered
    # for another host, whose source this host cannot check (docs/configuration.md)
    create_source: bool = False
    kind: MountKind = "bind"

    @property
    def host_writable(self) -> bool:
        """Whether the container can write the host path ``source`` through this mount."""
        return self.kind == "bind" and not self.readonly

    def render_volume(self) -> str:
        """``SRC:DST[:ro]`` for ``-v``/``Binds`` (the builder refuses paths holding ``:``)."""
        return f"{self.source}:{self.target}" + (":ro" if self.readonly else "")

    def mount_fields(self) -> list[str]:
        """The ``--mount`` fields, CSV-quoted where a path holds a comma or a quote. An
        overlay renders as a read-only bind: what ``docker run`` arguments can say of it
        (the engines make the real view: :mod:`rocmenv.engine.overlay`)."""
        if self.kind == "volume":
            return ["type=volume", csv_field(f"target={self.target}")]
        fields = [
            "type=bind",
            csv_field(f"source={self.source}"),
            csv_field(f"target={self.target}"),
        ]
        return fields + (["readonly"] if self.readonly or self.kind == "overlay" else [])

    def render_mount(self) -> str:
        return ",".join(self.mount_fields())


def csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if ("," in text or '"' in text) else text


@record
class EnvVar:
    name: str
    value: str | None  # None: taken from the host at run time (rendered as bare NAME)
    source: EnvSource = "fixed"

    @property
    def from_host(self) -> bool:
        return self.source in ("pass", "host", "secret")


@record
class RunSpec:
    image: str
    command: tuple[str, ...] = ()
    profile: str = ""
    devices: tuple[Device, ...] = ()
    group_add: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc: str | None = None
    network: str | None = None
    shm_size: str | None = None
    memory: str | None = None
    memory_swap: str | None = None
    pids_limit: int | None = None  # None: the engine's default; 0 or -1: no limit
    ulimits: tuple[Ulimit, ...] = ()
    privileged: bool = False
    mounts: tuple[BindMount, ...] = ()
    checkout: str | None = None  # the checkout mount's target, when mounted
    tmpfs: tuple[tuple[str, str], ...] = ()  # (target, mount options), e.g. the launcher's pyc
    env: tuple[EnvVar, ...] = ()
    workdir: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    untrusted: bool = False
    gpu_selection: GpuSelection = field(default_factory=lambda: GpuSelection(kind="none"))
    notes: tuple[str, ...] = ()  # said once on stderr (skipped mounts, untrusted mode)
    warnings: tuple[str, ...] = ()

    @property
    def env_values(self) -> dict[str, str]:
        """What the container gets: host-taken variables only when set on the host."""
        return {e.name: e.value for e in self.env if e.value is not None}

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@record
class Overrides:
    """What the command line adds to or overrides in the profile."""

    image: str | None = None
    command: tuple[str, ...] = ()
    gpus: str | None = None
    env: tuple[str, ...] = ()  # "K=V" or "K" (taken from the host)
    mounts: tuple[str, ...] = ()  # "SRC:DST[:ro]"
    workdir: str | None = None
    privileged: bool | None = None
    output: bool = False  # --output: mount the profile's output directory (a volume)


def host_memory() -> int | None:
    """This host's memory in bytes (``MemTotal``), None when it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@record
class HostFacts:
    """Everything :func:`build_runspec` needs to know about the host, passed in."""

    env: Mapping[str, str]
    cwd: Path
    checkout: Path | None  # git top level of cwd (or cwd); None: don't mount
    inventory: GpuInventory | None  # None: rendering for another host
    group_gid: Callable[[str], int | None] = lambda _name: None
    path_exists: Callable[[str], bool] = lambda _p: True
    check_host: bool = True  # run: check devices and mount sources; options: don't
    identity: Identity | None = None  # a run's session and owner (None: a rendering)
    image_digest: str | None = None
    image_env: Mapping[str, str] = field(default_factory=dict)  # the image config's Env
    realpath: Callable[[str], str] = os.path.normpath  # run: os.path.realpath (symlinks)
    find_socket: Callable[[str], str | None] = lambda _p: None  # run: rocmenv.container.guard's
    # this host's memory in bytes (an untrusted cap given in percent): None when unknown
    memory_total: Callable[[], int | None] = host_memory


@record
class LauncherMount:
    """The shim launcher as the spec mounts it (see :mod:`rocmenv.shims.bundle`)."""

    host_dir: str
    container_dir: str
    pycache_dir: str | None = None  # a private tmpfs: the launcher's .pyc, once per container


#: A CDI device name: ``vendor.com/class=name`` (the CDI spec's grammar for each part).
CDI_NAME_RE = Pattern(
    r"[A-Za-z0-9][A-Za-z0-9.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*=[A-Za-z0-9][A-Za-z0-9_.:-]*"
)


def parse_device(text: str, where: str) -> Device:
    """``HOST[:CONTAINER[:PERMISSIONS]]``, or a CDI name (``amd.com/gpu=all``)."""
    if CDI_NAME_RE.fullmatch(text):
        return Device(host=text, container=text, cdi=True)
    parts = text.split(":")
    if not parts[0].startswith("/") or len(parts) > 3 or not all(parts):
        raise ConfigError(f"{where}: device {text!r} is not HOST[:CONTAINER[:PERMISSIONS]]")
    container = parts[1] if len(parts) > 1 else parts[0]
    perms = parts[2] if len(parts) > 2 else "rwm"
    if not set(perms) <= set("rwm"):
        raise ConfigError(f"{where}: device permissions {perms!r} must be made of r, w, m")
    return Device(host=parts[0], container=container, permissions=perms)


def gpus_text(profile: Profile, overrides: Overrides) -> str:
    """The GPU selection asked for: ``--gpus``, else the profile's."""
    return overrides.gpus if overrides.gpus is not None else profile.gpus


def wants_gpus(profile: Profile, overrides: Overrides) -> bool:
    """Whether the host's GPU inventory is needed (anything but ``none``)."""
    return gpus_text(profile, overrides).strip().lower() != "none"
