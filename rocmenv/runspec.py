"""The container a profile describes, as one pure value, and its renderings.

:func:`build_runspec` turns (profile, CLI overrides, host GPU inventory, host facts) into a
frozen :class:`RunSpec`; nothing here touches an engine. The same spec is what ``rocmenv
run`` gives the engine and what ``rocmenv options`` prints, as ``docker run`` arguments
(:func:`render_docker`), a GitHub Actions ``container.options`` string (:func:`render_gha`)
or a compose service (:func:`render_compose`).

Policies (README "Profiles"):

* **GPUs.** ``--gpus all`` passes ``/dev/kfd`` and the whole ``/dev/dri`` (as the
  reference CI does); a subset passes ``/dev/kfd`` plus exactly the selected ``renderD*``
  and ``card*`` nodes. With ``gpu-isolation = "env"`` every node is passed and the
  ``gpu-env`` variables (default ``HIP_VISIBLE_DEVICES``) carry the host indices; with
  ``devices`` (default) they carry the container's own numbering ``0..k-1``.
* **Groups.** A ``group-add`` name that exists on the host is passed as the host's numeric
  GID: device nodes keep their host group inside the container, so that number is what
  the kernel checks (the image may lack the name, or map it to another GID). Names the
  host lacks are passed by name for the engine to resolve in the image.
* **Mounts** are bind mounts that never create their source: a missing source is an
  error unless the mount is ``optional`` (then skipped with a note). The checkout (git
  top level of the working directory, else the directory) is mounted at the same path and
  the working directory is the current one.
* **Environment**: only what the profile declares; proxy variables are dropped unless
  ``keep-proxy-env``; ``secret-env`` is never passed in untrusted mode.
* **Untrusted mode** refuses privileged, mounts host data read-only (the checkout stays
  writable: it is the job's own workspace) and passes no secrets.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rocmenv.config import PROXY_VARS, Mount, Profile, Ulimit
from rocmenv.errors import ConfigError, UsageError
from rocmenv.gpu import (
    CONTAINER_DRI,
    CONTAINER_KFD,
    GpuInventory,
    GpuSelection,
    parse_gpus,
    select,
)

LABEL_PREFIX = "rocmenv."
LABEL_SESSION = "rocmenv.session"
LABEL_PROFILE = "rocmenv.profile"
LABEL_OWNER_PID = "rocmenv.owner-pid"
LABEL_OWNER_HOST = "rocmenv.owner-host"
LABEL_OWNER_START = "rocmenv.owner-start"  # "<boot id>:<start time>": survives pid reuse
LABEL_IMAGE_DIGEST = "rocmenv.image-digest"

EnvSource = Literal["fixed", "host", "secret", "gpu", "cli", "launcher"]


@dataclass(frozen=True, kw_only=True)
class Device:
    host: str
    container: str
    permissions: str = "rwm"

    def render(self) -> str:
        if self.host == self.container and self.permissions == "rwm":
            return self.host
        out = f"{self.host}:{self.container}"
        return out if self.permissions == "rwm" else f"{out}:{self.permissions}"


@dataclass(frozen=True, kw_only=True)
class BindMount:
    source: str
    target: str
    readonly: bool = False

    def mount_fields(self) -> list[str]:
        """The ``--mount`` fields, CSV-quoted where a path holds a comma or a quote."""
        fields = [
            "type=bind",
            csv_field(f"source={self.source}"),
            csv_field(f"target={self.target}"),
        ]
        return fields + (["readonly"] if self.readonly else [])

    def render_mount(self) -> str:
        return ",".join(self.mount_fields())


def csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if ("," in text or '"' in text) else text


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    name: str
    value: str | None  # None: taken from the host at run time (rendered as bare NAME)
    source: EnvSource = "fixed"

    @property
    def from_host(self) -> bool:
        return self.source in ("host", "secret")


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """What the command line adds to or overrides in the profile."""

    image: str | None = None
    command: tuple[str, ...] = ()
    gpus: str | None = None
    env: tuple[str, ...] = ()  # "K=V" or "K" (taken from the host)
    mounts: tuple[str, ...] = ()  # "SRC:DST[:ro]"
    workdir: str | None = None
    untrusted: bool = False
    privileged: bool | None = None


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """Everything :func:`build_runspec` needs to know about the host, passed in."""

    env: Mapping[str, str]
    cwd: Path
    checkout: Path | None  # git top level of cwd (or cwd); None: don't mount
    inventory: GpuInventory | None  # None: rendering for another host
    group_gid: Callable[[str], int | None] = lambda _name: None
    path_exists: Callable[[str], bool] = lambda _p: True
    check_host: bool = True  # run: check devices and mount sources; options: don't
    session: str = ""
    owner_pid: int = 0
    owner_host: str = ""
    image_digest: str | None = None


def parse_cli_mount(text: str) -> Mount:
    parts = text.split(":")
    if (
        len(parts) not in (2, 3)
        or not parts[0]
        or not parts[1]
        or (len(parts) == 3 and parts[2] not in ("ro", "rw"))
    ):
        raise UsageError(f"-v {text!r} is not SRC:DST[:ro]", hint="e.g. -v /data/ci:/data/ci:ro")
    if not parts[1].startswith("/"):
        raise UsageError(f"-v {text!r}: the target must be an absolute path in the container")
    return Mount(source=parts[0], target=parts[1], readonly=len(parts) == 3 and parts[2] == "ro")


def parse_device(text: str, where: str) -> Device:
    parts = text.split(":")
    if not parts[0].startswith("/") or len(parts) > 3 or not all(parts):
        raise ConfigError(f"{where}: device {text!r} is not HOST[:CONTAINER[:PERMISSIONS]]")
    container = parts[1] if len(parts) > 1 else parts[0]
    perms = parts[2] if len(parts) > 2 else "rwm"
    if not set(perms) <= set("rwm"):
        raise ConfigError(f"{where}: device permissions {perms!r} must be made of r, w, m")
    return Device(host=parts[0], container=container, permissions=perms)


def _gpu_devices(
    profile: Profile, selection: GpuSelection, host: HostFacts
) -> tuple[list[Device], list[EnvVar], list[str]]:
    """Device nodes and visible-devices variables for a selection."""
    if selection.kind == "none":
        return [], [], []
    inv = host.inventory
    # Rendering for another host (no host check): that host's nodes are under /dev.
    dev_root = str(inv.dev_root) if inv is not None and host.check_host else "/dev"
    kfd = Device(host=f"{dev_root}/kfd", container=CONTAINER_KFD)
    whole_dri = Device(host=f"{dev_root}/dri", container=CONTAINER_DRI)
    notes: list[str] = []
    env_names = profile.gpu_env or (
        ("HIP_VISIBLE_DEVICES",) if profile.gpu_isolation == "env" else ()
    )
    if selection.kind == "all" or profile.gpu_isolation == "env":
        devices = [kfd, whole_dri]
        if selection.kind == "subset":
            value = ",".join(str(g.index) for g in selection.gpus)
            return devices, [EnvVar(name=n, value=value, source="gpu") for n in env_names], notes
        return devices, [], notes
    devices = [kfd]
    for gpu in sorted(selection.gpus, key=lambda g: g.index):
        for node in (gpu.render_node, gpu.card_node):
            if node is not None:
                source = str(node) if host.check_host else f"{dev_root}/dri/{node.name}"
                devices.append(Device(host=source, container=f"{CONTAINER_DRI}/{node.name}"))
        if gpu.card_node is None:
            notes.append(
                f"GPU {gpu.index} ({gpu.pci_address}): no card node found, render node only"
            )
    value = ",".join(str(i) for i in range(len(selection.gpus)))
    return devices, [EnvVar(name=n, value=value, source="gpu") for n in env_names], notes


def _gpu_selection(profile: Profile, overrides: Overrides, host: HostFacts) -> GpuSelection:
    text = overrides.gpus if overrides.gpus is not None else profile.gpus
    request = parse_gpus(text)
    inv = host.inventory
    if request.kind == "none":
        return GpuSelection(kind="none")
    if inv is None:
        if request.kind == "all":
            return GpuSelection(kind="all")
        raise UsageError(
            f"--gpus {text!r} names particular GPUs, which needs this host's GPU inventory",
            hint="render with --gpus all for another host, or run on the GPU host",
        )
    if host.check_host and not inv.kfd_present:
        raise UsageError(
            f"the profile {profile.name!r} wants GPUs (--gpus {text}) but {inv.kfd_node} does "
            "not exist: no AMD GPU driver (amdgpu/KFD) on this host",
            hint="use --gpus none or --profile cpu for a CPU-only run; "
            "check `rocmenv gpus` and that amdgpu is loaded",
        )
    return select(request, inv)


def _mounts(
    profile: Profile, overrides: Overrides, host: HostFacts, untrusted: bool
) -> tuple[list[BindMount], list[str], str | None]:
    notes: list[str] = []
    declared: list[tuple[Mount, str]] = [(m, "profile") for m in profile.mounts]
    for text in overrides.mounts:
        m = parse_cli_mount(text)
        source = Path(m.source).expanduser()
        if not source.is_absolute():
            source = host.cwd / source
        declared = [(d, w) for d, w in declared if d.target != m.target]  # -v wins
        declared.append((replace(m, source=str(source)), "-v"))
    out: list[BindMount] = []
    skipped: list[str] = []
    by_target: dict[str, str] = {}
    checkout_target: str | None = None
    if host.checkout is not None and profile.mount_checkout:
        checkout_target = str(host.checkout)
        out.append(BindMount(source=checkout_target, target=checkout_target))
        by_target[checkout_target] = "the checkout"
    for mount, origin in declared:
        if host.check_host and not host.path_exists(mount.source):
            if mount.optional:
                skipped.append(mount.source)
                continue
            raise UsageError(
                f"mount source {mount.source} (-> {mount.target}, from {origin}) does not exist",
                hint="create it, fix the path, or mark the mount optional = true in the profile "
                "(Docker would silently create an empty root-owned directory)",
            )
        if mount.target in by_target:
            raise UsageError(
                f"two mounts target {mount.target}: {by_target[mount.target]} and {mount.source}",
                hint="give one of them another target",
            )
        by_target[mount.target] = mount.source
        out.append(
            BindMount(
                source=mount.source, target=mount.target, readonly=mount.readonly or untrusted
            )
        )
    if skipped:
        notes.append(f"optional mounts skipped, source absent: {', '.join(skipped)}")
    return out, notes, checkout_target


def _env(
    profile: Profile, overrides: Overrides, host: HostFacts, untrusted: bool
) -> tuple[list[EnvVar], list[str]]:
    env: dict[str, EnvVar] = {}
    notes: list[str] = []
    for name, value in profile.env:
        env[name] = EnvVar(name=name, value=value, source="fixed")
    for name in profile.pass_env:
        env[name] = EnvVar(name=name, value=host.env.get(name), source="host")
    skipped_secrets = []
    for name in profile.secret_env:
        if untrusted:
            env.pop(name, None)
            skipped_secrets.append(name)
            continue
        env[name] = EnvVar(name=name, value=host.env.get(name), source="secret")
    for item in overrides.env:
        name, eq, value = item.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"-e {item!r}: {name!r} is not an environment variable name")
        if untrusted and name in profile.secret_env:
            raise UsageError(
                f"-e {name}: {name} is a secret of profile {profile.name!r} and untrusted mode "
                "passes no secrets"
            )
        env[name] = EnvVar(
            name=name, value=value if eq else host.env.get(name), source="cli" if eq else "host"
        )
    if not profile.keep_proxy_env:
        for name in PROXY_VARS:
            env.pop(name, None)
    if skipped_secrets:
        notes.append(f"secrets not passed: {', '.join(skipped_secrets)}")
    return list(env.values()), notes


def _groups(profile: Profile, host: HostFacts) -> tuple[str, ...]:
    out: list[str] = []
    for group in profile.group_add:
        gid = None if group.isdigit() else host.group_gid(group)
        value = str(gid) if gid is not None else group
        if value not in out:
            out.append(value)
    return tuple(out)


def build_runspec(
    profile: Profile, overrides: Overrides, host: HostFacts, *, image: str
) -> RunSpec:
    """The container for ``profile`` with the CLI's ``overrides`` on ``host``."""
    untrusted = profile.untrusted or overrides.untrusted or _flag(host.env, "ROCMENV_UNTRUSTED")
    privileged = profile.privileged if overrides.privileged is None else overrides.privileged
    warnings: list[str] = []
    notes: list[str] = []
    if privileged and untrusted:
        raise UsageError(
            f"profile {profile.name!r} is privileged and this run is untrusted "
            "(--untrusted, untrusted = true or ROCMENV_UNTRUSTED=1): refused",
            hint="use a profile without privileged = true for untrusted code",
        )
    if privileged:
        warnings.append(
            f"profile {profile.name!r} runs the container privileged: it can access every "
            "host device and disable its own confinement"
        )
    selection = _gpu_selection(profile, overrides, host)
    gpu_devices, gpu_env, gpu_notes = _gpu_devices(profile, selection, host)
    notes += gpu_notes
    devices: list[Device] = list(gpu_devices)
    for text in profile.devices:
        devices.append(parse_device(text, f"[profiles.{profile.name}].devices"))
    if host.check_host:
        for dev in devices:
            if not host.path_exists(dev.host):
                raise UsageError(
                    f"device {dev.host} (for {dev.container}) does not exist on this host",
                    hint="check the profile's devices and `rocmenv gpus`",
                )
    mounts, mount_notes, checkout = _mounts(profile, overrides, host, untrusted)
    notes += mount_notes
    env, env_notes = _env(profile, overrides, host, untrusted)
    for var in gpu_env:
        env = [e for e in env if e.name != var.name] + [var]
    notes += env_notes
    workdir = overrides.workdir or profile.workdir
    if workdir is None and checkout is not None:
        workdir = str(host.cwd)
    if workdir is not None and not workdir.startswith("/"):
        raise UsageError(f"--workdir {workdir!r} must be an absolute path in the container")
    labels = {
        LABEL_PROFILE: profile.name,
        **({LABEL_SESSION: host.session} if host.session else {}),
        **({LABEL_OWNER_PID: str(host.owner_pid)} if host.owner_pid else {}),
        **({LABEL_OWNER_HOST: host.owner_host} if host.owner_host else {}),
        **({LABEL_IMAGE_DIGEST: host.image_digest} if host.image_digest else {}),
    }
    for key, value in profile.labels:
        if key.startswith(LABEL_PREFIX):
            raise ConfigError(f"[profiles.{profile.name}].labels: {key!r} is reserved for rocmenv")
        labels[key] = value
    if untrusted:
        data_mounts = sum(1 for m in mounts if m.target != checkout)
        notes.insert(
            0,
            f"untrusted mode: privileged refused, {data_mounts} host data mount(s) read-only, "
            "no secret variables passed",
        )
    return RunSpec(
        image=image,
        command=tuple(overrides.command),
        profile=profile.name,
        devices=tuple(_dedupe(devices)),
        group_add=_groups(profile, host),
        cap_add=profile.cap_add,
        cap_drop=profile.cap_drop,
        security_opt=profile.security_opt,
        ipc=profile.ipc,
        network=profile.network,
        shm_size=profile.shm_size,
        memory=profile.memory,
        memory_swap=profile.memory_swap,
        ulimits=profile.ulimits,
        privileged=privileged,
        mounts=tuple(mounts),
        checkout=checkout,
        env=tuple(env),
        workdir=workdir,
        labels=tuple(sorted(labels.items())),
        untrusted=untrusted,
        gpu_selection=selection,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


def with_launcher(
    spec: RunSpec,
    *,
    host_dir: str,
    container_dir: str,
    pythonpath: str,
    pycache_dir: str | None = None,
) -> RunSpec:
    """The spec plus the shim launcher: mounted read-only, ``PYTHONPATH`` set to ``pythonpath``
    (the caller merges the launcher directory with the image's own ``PYTHONPATH``), and a
    small private tmpfs on ``pycache_dir`` so the launcher is compiled once per container."""
    env = [e for e in spec.env if e.name != "PYTHONPATH"]
    env.append(EnvVar(name="PYTHONPATH", value=pythonpath, source="launcher"))
    mounts = [m for m in spec.mounts if m.target != container_dir]
    mounts.append(BindMount(source=host_dir, target=container_dir, readonly=True))
    tmpfs = [t for t in spec.tmpfs if t[0] != pycache_dir]
    if pycache_dir:
        tmpfs.append((pycache_dir, "rw,size=1m"))
    return replace(spec, env=tuple(env), mounts=tuple(mounts), tmpfs=tuple(tmpfs))


def _dedupe(devices: Sequence[Device]) -> list[Device]:
    seen: set[str] = set()
    out: list[Device] = []
    for dev in devices:
        if dev.container not in seen:
            seen.add(dev.container)
            out.append(dev)
    return out


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


# -- renderers ------------------------------------------------------------------------------


def render_docker(
    spec: RunSpec, *, with_checkout: bool = True, with_labels: bool = True
) -> list[str]:
    """``docker run``/``docker create`` arguments (without the image and command)."""
    args: list[str] = []
    args += [f"--device={d.render()}" for d in spec.devices]
    args += [f"--group-add={g}" for g in spec.group_add]
    args += [f"--cap-add={c}" for c in spec.cap_add]
    args += [f"--cap-drop={c}" for c in spec.cap_drop]
    args += [f"--security-opt={s}" for s in spec.security_opt]
    if spec.privileged:
        args.append("--privileged")
    if spec.ipc:
        args.append(f"--ipc={spec.ipc}")
    if spec.network:
        args.append(f"--network={spec.network}")
    if spec.shm_size:
        args.append(f"--shm-size={spec.shm_size}")
    if spec.memory:
        args.append(f"--memory={spec.memory}")
    if spec.memory_swap:
        args.append(f"--memory-swap={spec.memory_swap}")
    args += [f"--ulimit={u.render()}" for u in spec.ulimits]
    for m in spec.mounts:
        if m.target == spec.checkout and not with_checkout:
            continue
        args.append(f"--mount={m.render_mount()}")
    args += [f"--tmpfs={target}:{options}" for target, options in spec.tmpfs]
    for e in spec.env:
        args.append(f"--env={e.name}" if e.from_host else f"--env={e.name}={e.value}")
    if spec.workdir and with_checkout:
        args.append(f"--workdir={spec.workdir}")
    if with_labels:
        args += [f"--label={k}={v}" for k, v in spec.labels]
    return args


def render_gha(spec: RunSpec) -> str:
    """A ``container.options`` string. The checkout and working directory are left out:
    Actions mounts the workspace and sets the working directory itself."""
    args = render_docker(spec, with_checkout=False, with_labels=False)
    args += [f"--label={k}={v}" for k, v in spec.labels if not k.startswith(LABEL_PREFIX)]
    return shlex.join(args)


def render_compose(spec: RunSpec, *, service: str | None = None) -> str:
    """A compose file with one service for the spec (YAML, emitted by hand)."""
    svc: dict[str, Any] = {"image": spec.image}
    if spec.command:
        svc["command"] = list(spec.command)
    if spec.devices:
        svc["devices"] = [
            f"{d.host}:{d.container}" + ("" if d.permissions == "rwm" else f":{d.permissions}")
            for d in spec.devices
        ]
    for key, values in (
        ("group_add", spec.group_add),
        ("cap_add", spec.cap_add),
        ("cap_drop", spec.cap_drop),
        ("security_opt", spec.security_opt),
    ):
        if values:
            svc[key] = list(values)
    if spec.privileged:
        svc["privileged"] = True
    if spec.ipc:
        svc["ipc"] = spec.ipc
    if spec.network:
        svc["network_mode"] = spec.network
    if spec.shm_size:
        svc["shm_size"] = spec.shm_size
    if spec.memory:
        svc["mem_limit"] = spec.memory
    if spec.memory_swap:
        svc["memswap_limit"] = spec.memory_swap
    if spec.ulimits:
        svc["ulimits"] = {
            u.name: u.soft if u.soft == u.hard else {"soft": u.soft, "hard": u.hard}
            for u in spec.ulimits
        }
    if spec.mounts:
        svc["volumes"] = [
            {
                "type": "bind",
                "source": m.source,
                "target": m.target,
                **({"read_only": True} if m.readonly else {}),
                "bind": {"create_host_path": False},
            }
            for m in spec.mounts
        ]
    if spec.tmpfs:
        svc["tmpfs"] = [f"{target}:{options}" for target, options in spec.tmpfs]
    if spec.env:
        svc["environment"] = [e.name if e.from_host else f"{e.name}={e.value}" for e in spec.env]
    if spec.workdir:
        svc["working_dir"] = spec.workdir
    user_labels = {k: v for k, v in spec.labels if not k.startswith(LABEL_PREFIX)}
    if user_labels:
        svc["labels"] = user_labels
    return _yaml({"services": {service or spec.profile or "rocmenv": svc}})


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a YAML scalar


def _yaml(value: Any, indent: int = 0) -> str:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines.append(_yaml(item, indent + 1).rstrip("\n"))
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(item) if item != [] else '[]'}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                body = _yaml(item, indent + 1).rstrip("\n")
                lines.append(f"{pad}- {body.lstrip()}")
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines) + "\n"
