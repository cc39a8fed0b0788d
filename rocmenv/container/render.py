"""A :class:`~rocmenv.container.runspec.RunSpec` rendered for other tools.

``docker run`` arguments (:func:`render_docker`; ``rocmenv options --format docker`` and the
docker-cli adapter), a GitHub Actions ``container.options`` string (:func:`render_gha`) and
a compose service (:func:`render_compose`, YAML emitted by :func:`to_yaml`), and the Engine
API's ``POST /containers/create`` body (:func:`create_body`, the docker-api adapter).

**Text that other tools split.** ``container.options`` is split on whitespace by GitHub's
runner and ``docker run $(rocmenv options)`` by the shell, neither honouring quotes: so
those renderings refuse an argument that would need quoting (:func:`plain_words`) rather
than quote it — a profile's ``env = {A = "x --privileged"}`` must not become an option.
Compose values are JSON strings (every control character escaped); lines written into a
script (``sbatch``, Slurm arguments) refuse control characters (:func:`refuse_control`).

**The untrusted checkout.** An untrusted container sees the checkout through a
copy-on-write view (an ``overlay`` mount), which the engines make themselves
(:mod:`rocmenv.engine.overlay`: a Docker volume over scratch volumes the adapter creates
first, podman's ``:O``). ``docker run`` arguments, ``container.options`` and a compose file
cannot create those scratch volumes, so these renderings mount the checkout **read-only**
instead — never writable — and ``rocmenv options`` says so.
"""

from __future__ import annotations

import json
import re

from rocmenv.container.labels import LABEL_PREFIX
from rocmenv.container.runspec import BindMount, RunSpec
from rocmenv.errors import EngineError, UsageError
from rocmenv.escape import control_char
from rocmenv.lazy import Pattern

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any


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
    if spec.pids_limit is not None:
        args.append(f"--pids-limit={spec.pids_limit}")
    args += [f"--ulimit={u.render()}" for u in spec.ulimits]
    for m in spec.mounts:
        if m.target == spec.checkout and not with_checkout:
            continue
        args.append(
            f"--volume={m.render_volume()}" if m.create_source else f"--mount={m.render_mount()}"
        )
    args += [f"--tmpfs={target}:{options}" for target, options in spec.tmpfs]
    for e in spec.env:
        args.append(f"--env={e.name}" if e.from_host else f"--env={e.name}={e.value}")
    if spec.workdir and with_checkout:
        args.append(f"--workdir={spec.workdir}")
    if with_labels:
        args += [f"--label={k}={v}" for k, v in spec.labels]
    return args


#: What needs no quoting in a shell word (``shlex.quote``'s own set). The text renderings
#: are split by tools that do not honour quotes (module docstring): an argument outside it
#: is refused, not quoted.
SAFE_WORD = Pattern(r"[\w@%+=:,./-]+", re.ASCII)
SPLIT_BY = {
    "gha": "GitHub's runner passes container.options to docker split on whitespace, without "
    "a shell's quoting",
    "docker": "`docker run $(rocmenv options)` splits the words on whitespace and expands "
    "globs, without a shell's quoting",
}


def render_gha(spec: RunSpec) -> str:
    """A ``container.options`` string. The checkout and working directory are left out:
    Actions mounts the workspace and sets the working directory itself."""
    args = render_docker(spec, with_checkout=False, with_labels=False)
    args += [f"--label={k}={v}" for k, v in spec.labels if not k.startswith(LABEL_PREFIX)]
    return plain_words(args, "gha")


def plain_words(args: list[str], fmt: str) -> str:
    """``args`` as one line of words that need no quoting, else :class:`UsageError` naming
    the argument: a value with a space, quote, glob or control character would become
    arguments of its own (``--privileged``) where the line is split without quotes."""
    for arg in args:
        if not SAFE_WORD.fullmatch(arg):
            bad = next(c for c in arg if not SAFE_WORD.fullmatch(c))
            raise UsageError(
                f"options --format {fmt}: the argument {arg!r} holds {bad!r}, and "
                f"{SPLIT_BY[fmt]}: it cannot carry it",
                hint="remove it from the profile or the command line"
                + (" (--json gives the arguments as a list)" if fmt == "docker" else ""),
            )
    return " ".join(args)


def refuse_control(values: list[str], where: str) -> None:
    """:class:`UsageError` for the first value holding a control character."""
    for value in values:
        bad = control_char(value)
        if bad is not None:
            raise UsageError(
                f"{where}: {value!r} holds a control character ({bad!r}), which would end "
                "the line it is written into",
                hint="remove it (a newline in a value cannot be written into a script safely)",
            )


def render_compose(spec: RunSpec, *, service: str | None = None) -> str:
    """A compose file with one service for the spec (YAML, emitted by hand)."""
    svc: dict[str, Any] = {"image": spec.image}
    if spec.command:
        svc["command"] = list(spec.command)
    svc.update(_compose_privileges(spec))  # the keys in this order
    svc.update(_compose_limits(spec))
    svc.update(_compose_data(spec))
    return to_yaml({"services": {service or spec.profile or "rocmenv": svc}})


def _compose_privileges(spec: RunSpec) -> dict[str, Any]:
    """The service's devices, groups, capabilities, security options and namespaces."""
    svc: dict[str, Any] = {}
    if spec.devices:
        svc["devices"] = [
            d.host
            if d.cdi
            else f"{d.host}:{d.container}" + ("" if d.permissions == "rwm" else f":{d.permissions}")
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
    return svc


def _compose_limits(spec: RunSpec) -> dict[str, Any]:
    """The service's resource limits: ``/dev/shm``, memory, pids, ulimits."""
    svc: dict[str, Any] = {}
    if spec.shm_size:
        svc["shm_size"] = spec.shm_size
    if spec.memory:
        svc["mem_limit"] = spec.memory
    if spec.memory_swap:
        svc["memswap_limit"] = spec.memory_swap
    if spec.pids_limit is not None:
        svc["pids_limit"] = spec.pids_limit
    if spec.ulimits:
        svc["ulimits"] = {
            u.name: u.soft if u.soft == u.hard else {"soft": u.soft, "hard": u.hard}
            for u in spec.ulimits
        }
    return svc


def _compose_data(spec: RunSpec) -> dict[str, Any]:
    """The service's volumes, tmpfs mounts, environment, working directory and labels."""
    svc: dict[str, Any] = {}
    if spec.mounts:
        svc["volumes"] = [
            {"type": "volume", "target": m.target}
            if m.kind == "volume"
            else {
                "type": "bind",
                "source": m.source,
                "target": m.target,
                # an overlay: what compose can say of it (module docstring)
                **({"read_only": True} if m.readonly or m.kind == "overlay" else {}),
                "bind": {"create_host_path": m.create_source},
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
    return svc


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    # A JSON string (ASCII only: no line or paragraph separators) is a YAML double-quoted
    # scalar: no value can end it early or start a key.
    return json.dumps(str(value), ensure_ascii=True)


_PLAIN_KEY = Pattern(r"[a-z_][a-z0-9_]*")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _yaml_key(key: Any) -> str:
    """A mapping key: plain only when it is a lower-case identifier YAML reads as that
    string (``services``, ``cap_add``); anything else (profile and service names, label
    keys) double-quoted, so no name can inject keys."""
    text = str(key)
    if _PLAIN_KEY.fullmatch(text) and text not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=True)


def to_yaml(value: Any, indent: int = 0) -> str:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_yaml_key(key)}:")
                lines.append(to_yaml(item, indent + 1).rstrip("\n"))
            else:
                value = _yaml_scalar(item) if item != [] else "[]"
                lines.append(f"{pad}{_yaml_key(key)}: {value}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                body = to_yaml(item, indent + 1).rstrip("\n")
                lines.append(f"{pad}- {body.lstrip()}")
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines) + "\n"


# -- the Engine API ---------------------------------------------------------------------------

_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_bytes(text: str) -> int:
    """Docker's sizes: ``32g`` = 32 GiB, ``512m``, ``1.5g``, ``0``, plain bytes."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([bkmgtp]?)b?", text.strip().lower())
    if not match:
        raise EngineError(f"docker-api: {text!r} is not a size", hint="use e.g. 32g or 512m")
    return int(float(match.group(1)) * _UNITS[match.group(2) or "b"])


def _cap(name: str) -> str:
    """Capabilities as the docker CLI sends them (``CAP_SYS_PTRACE``; ``ALL`` stays)."""
    upper = name.upper()
    return upper if upper == "ALL" or upper.startswith("CAP_") else f"CAP_{upper}"


def _api_mount(mount: BindMount) -> dict[str, Any]:
    """One ``HostConfig.Mounts`` entry; an overlay as a read-only bind (the docker-api
    adapter puts the real view in its place: :mod:`rocmenv.engine.overlay`)."""
    if mount.kind == "volume":
        return {"Type": "volume", "Target": mount.target}
    readonly = mount.readonly or mount.kind == "overlay"
    return {"Type": "bind", "Source": mount.source, "Target": mount.target, "ReadOnly": readonly}


def create_body(spec: RunSpec, *, tty: bool, stdin_open: bool) -> dict[str, Any]:
    """The ``POST /containers/create`` body for a spec (what ``docker create`` sends)."""
    host: dict[str, Any] = {
        "Devices": [
            {
                "PathOnHost": d.host,
                "PathInContainer": d.container,
                "CgroupPermissions": d.permissions,
            }
            for d in spec.devices
            if not d.cdi
        ],
        "GroupAdd": list(spec.group_add) or None,
        "CapAdd": [_cap(c) for c in spec.cap_add] or None,
        "CapDrop": [_cap(c) for c in spec.cap_drop] or None,
        "SecurityOpt": list(spec.security_opt) or None,
        "Privileged": spec.privileged,
        "Ulimits": [
            {"Name": u.name, "Soft": u.soft, "Hard": u.hard}
            for u in sorted(spec.ulimits, key=lambda u: u.name)
        ],
        "Mounts": [_api_mount(m) for m in spec.mounts if not m.create_source],
    }
    binds = [m.render_volume() for m in spec.mounts if m.create_source]
    if binds:  # what `docker create -v` sends: the daemon creates an absent source
        host["Binds"] = binds
    cdi = [d.host for d in spec.devices if d.cdi]
    if cdi:  # what the docker CLI sends for --device amd.com/gpu=N (Docker 25+)
        host["DeviceRequests"] = [{"Driver": "cdi", "DeviceIDs": cdi}]
    if spec.tmpfs:
        host["Tmpfs"] = dict(spec.tmpfs)
    if spec.ipc:
        host["IpcMode"] = spec.ipc
    if spec.network:
        host["NetworkMode"] = spec.network
    if spec.shm_size:
        host["ShmSize"] = parse_bytes(spec.shm_size)
    if spec.memory:
        host["Memory"] = parse_bytes(spec.memory)
    if spec.memory_swap:
        host["MemorySwap"] = -1 if spec.memory_swap == "-1" else parse_bytes(spec.memory_swap)
    if spec.pids_limit is not None:
        host["PidsLimit"] = spec.pids_limit
    body: dict[str, Any] = {
        "Image": spec.image,
        "Env": [f"{k}={v}" for k, v in spec.env_values.items()],
        "Labels": spec.label_map,
        "Tty": tty,
        "OpenStdin": stdin_open,
        "StdinOnce": stdin_open,
        "AttachStdin": stdin_open,
        "AttachStdout": True,
        "AttachStderr": True,
        "HostConfig": host,
    }
    if spec.command:
        body["Cmd"] = list(spec.command)
    if spec.workdir:
        body["WorkingDir"] = spec.workdir
    return body
