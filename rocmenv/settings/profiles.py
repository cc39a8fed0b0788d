"""Profiles: what a container is made of (image, GPUs, devices, groups, limits, mounts, env).

The schema is documented in :mod:`rocmenv.settings.project` (where profiles are loaded from
``rocmenv.toml`` / ``[tool.rocmenv]``); this module holds the profile types, the two
built-in profiles and the parsing of one ``[profiles.NAME]`` table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from rocmenv.errors import ConfigError, RocmenvError
from rocmenv.lazy import Pattern
from rocmenv.record import record, replace
from rocmenv.settings.choices import (
    ENGINE_NAMES,
    FAMILIES,
    GPU_DEVICE_NAMINGS,
    GPU_ISOLATIONS,
    PULL_POLICIES,
)
from rocmenv.settings.declared import MOUNT_KEYS, keys
from rocmenv.settings.keys import as_bool, as_choice, as_int, as_str, as_str_list, check_keys

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

    from rocmenv.settings.choices import EngineName, GpuDeviceNaming, GpuIsolation, PullPolicy

PROXY_VARS: tuple[str, ...] = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
)

PROFILE_KEYS = keys("profile")  # declared in rocmenv.settings.declared
#: Where the files that leave the container (``--output``) are written in it by default.
DEFAULT_OUTPUT: str = "/rocmenv-output"


@record
class ImageSpec:
    """Which image a profile means: a repository plus a tag, a digest, or tag constraints."""

    repository: str
    tag: str | None = None
    digest: str | None = None
    sglang: str | None = None
    rocm: str | None = None
    gpu: str | None = None
    family: str | None = None
    before: str | None = None

    @property
    def has_constraints(self) -> bool:
        return any((self.sglang, self.rocm, self.gpu, self.family, self.before))


@record
class Mount:
    source: str
    target: str
    readonly: bool = False
    optional: bool = False

    def render(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.readonly else "")


@record
class Ulimit:
    name: str
    soft: int
    hard: int

    def render(self) -> str:
        return (
            f"{self.name}={self.soft}"
            if self.soft == self.hard
            else f"{self.name}={self.soft}:{self.hard}"
        )


@record
class Profile:
    name: str
    description: str = ""
    image: ImageSpec | None = None
    gpus: str = "none"
    gpu_isolation: GpuIsolation = "devices"
    gpu_env: tuple[str, ...] = ()
    gpu_devices: GpuDeviceNaming = "nodes"  # cdi: the GPUs as CDI names (amd.com/gpu=N)
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    ipc: str | None = None
    network: str | None = None
    shm_size: str | None = None
    memory: str | None = None
    memory_swap: str | None = None
    pids_limit: int | None = None  # None: not said (the engine's default); 0 or -1: no limit
    ulimits: tuple[Ulimit, ...] = ()
    privileged: bool = False
    mounts: tuple[Mount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    pass_env: tuple[str, ...] = ()
    secret_env: tuple[str, ...] = ()
    keep_proxy_env: bool = False
    workdir: str | None = None
    mount_checkout: bool = True
    output: str = DEFAULT_OUTPUT  # the container directory --output copies out
    shims: bool | None = None  # None: not said (the default: on)
    untrusted: bool = False
    pull: PullPolicy | None = None  # None: not said (the default: missing)
    engine: EngineName | None = None
    labels: tuple[tuple[str, str], ...] = ()
    source: str = "built-in"  # where it was defined: "built-in" or a file path


# -- built-in profiles ----------------------------------------------------------------------

REFERENCE_DATA_MOUNTS: tuple[Mount, ...] = (
    Mount(source="/data/miles_ci", target="/data/miles_ci", optional=True),
    Mount(source="/data/miles_ci/models", target="/root/models", optional=True),
    Mount(source="/data/miles_ci/datasets", target="/root/datasets", optional=True),
    Mount(source="/data/miles_ci/hf_cache", target="/root/.cache/huggingface", optional=True),
)

BUILTIN_PROFILES: dict[str, Profile] = {
    # The container options of the reference ROCm CI, privileged left out (opt-in).
    "rocm": Profile(
        name="rocm",
        description="AMD GPUs: /dev/kfd + /dev/dri, video/render groups, ptrace, host IPC, "
        "32g shm, reference ulimits and data mounts",
        gpus="all",
        group_add=("video", "render"),
        cap_add=("SYS_PTRACE",),
        security_opt=("seccomp=unconfined",),
        ipc="host",
        shm_size="32g",
        memory="0",
        memory_swap="0",
        ulimits=(
            Ulimit(name="memlock", soft=-1, hard=-1),
            Ulimit(name="stack", soft=67108864, hard=67108864),
            Ulimit(name="nofile", soft=65535, hard=65535),
        ),
        mounts=REFERENCE_DATA_MOUNTS,
        pass_env=("HIP_VISIBLE_DEVICES",),
    ),
    # The same image without GPU devices, groups, ulimits or security options.
    "cpu": Profile(
        name="cpu",
        description="no GPU devices, groups, ulimits or security options (CPU stages, laptops)",
        gpus="none",
        ipc="host",
        shm_size="32g",
        mounts=REFERENCE_DATA_MOUNTS,
    ),
}


# -- parsing --------------------------------------------------------------------------------


_SIZE_RE = Pattern(r"[0-9]+(?:\.[0-9]+)?[bkmgBKMG]?")


def as_size(value: Any, where: str) -> str:
    text = (
        str(value)
        if isinstance(value, int) and not isinstance(value, bool)
        else as_str(value, where)
    )
    if not _SIZE_RE.fullmatch(text):
        raise ConfigError(
            f"{where} = {text!r} is not a size", hint="use a number with b, k, m or g, e.g. 32g"
        )
    return text


def as_container_dir(value: Any, where: str) -> str:
    """A directory in the container: absolute, or relative to its working directory; never
    ``/`` itself, no ``..`` and no control characters."""
    text = as_str(value, where)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ConfigError(
            f"{where} = {text!r} is not a directory in the container",
            hint="write an absolute path or one relative to the working directory, e.g. "
            '"test-results" (not "/", no "..")',
        )
    return ("/" if text.startswith("/") else "") + "/".join(parts)


def parse_ulimit(name: str, value: Any, where: str) -> Ulimit:
    """``-1`` (unlimited), ``65535``, ``"65535:65535"``, ``"unlimited"``."""

    def one(v: Any) -> int:
        if isinstance(v, bool):
            raise ValueError
        if isinstance(v, int):
            return v
        text = str(v).strip()
        return -1 if text in ("unlimited", "-1") else int(text)

    try:
        if isinstance(value, str) and ":" in value:
            soft_text, hard_text = value.split(":", 1)
            soft, hard = one(soft_text), one(hard_text)
        else:
            soft = hard = one(value)
    except ValueError:
        raise ConfigError(
            f"{where}.{name} = {value!r} is not a ulimit", hint='use -1, 65535 or "SOFT:HARD"'
        ) from None
    if not re.fullmatch(r"[a-z]+", name):
        raise ConfigError(f"{where}: {name!r} is not a ulimit name (e.g. nofile, memlock, stack)")
    if soft < -1 or hard < -1 or (hard != -1 and (soft == -1 or soft > hard)):
        raise ConfigError(
            f"{where}.{name} = {value!r}: the soft limit must not exceed the hard limit"
        )
    return Ulimit(name=name, soft=soft, hard=hard)


_ENV_NAME_RE = Pattern(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_name(name: str, where: str, error: type[RocmenvError] = ConfigError) -> None:
    """The one rule for environment variable names (profiles, ``-e``)."""
    if not _ENV_NAME_RE.fullmatch(name):
        raise error(f"{where}: {name!r} is not an environment variable name")


def parse_mount(
    value: Any, where: str, base: Path, error: type[RocmenvError] = ConfigError
) -> Mount:
    """``"SRC:DST[:ro|:rw]"`` or a table {source, target, readonly, optional}; the one mount
    parser (profiles, ``-v``); ``error`` is the class raised (UsageError for the CLI)."""
    if isinstance(value, str):
        parts = value.split(":")
        if (
            len(parts) not in (2, 3)
            or not parts[0]
            or not parts[1]
            or (len(parts) == 3 and parts[2] not in ("ro", "rw"))
        ):
            raise error(
                f"{where}: mount {value!r} is not SRC:DST[:ro]", hint="e.g. /data/ci:/data/ci:ro"
            )
        source, target, readonly, optional = (
            parts[0],
            parts[1],
            len(parts) == 3 and parts[2] == "ro",
            False,
        )
    elif isinstance(value, dict):
        check_keys(value, MOUNT_KEYS, where)
        if "source" not in value or "target" not in value:
            raise error(f"{where}: a mount table needs source and target")
        source, target = (
            as_str(value["source"], f"{where}.source"),
            as_str(value["target"], f"{where}.target"),
        )
        readonly = as_bool(value.get("readonly", False), f"{where}.readonly")
        optional = as_bool(value.get("optional", False), f"{where}.optional")
    else:
        raise error(f"{where}: a mount is a string or a table, got {value!r}")
    if not target.startswith("/"):
        raise error(f"{where}: mount target {target!r} must be an absolute path in the container")
    try:
        source_path = Path(source).expanduser()
    except RuntimeError:  # ~user that does not exist (or no HOME for ~)
        source_path = Path(source)
    if source.startswith("~") and str(source_path).startswith("~"):
        user = source[1:].split("/", 1)[0]
        raise error(
            f"{where}: mount source {source!r}: "
            + (f"there is no user {user!r} on this host" if user else "no home directory"),
            hint="write the source as an absolute path, or ~/PATH for your own home",
        )
    if not source_path.is_absolute():
        source_path = base / source_path
    return Mount(source=str(source_path), target=target, readonly=readonly, optional=optional)


def parse_image(
    table: Mapping[str, Any], where: str, inherited: ImageSpec | None
) -> ImageSpec | None:
    from rocmenv.errors import InvalidReference
    from rocmenv.grammar.reference import parse, validate_tag

    keys = ("image", "tag", "sglang", "rocm", "gpu", "family", "before")
    if not any(k in table for k in keys):
        return inherited
    spec = inherited
    if "image" in table:
        text = as_str(table["image"], f"{where}.image")
        try:
            ref = parse(text)
        except InvalidReference as err:
            raise ConfigError(f"{where}.image: {err.what}", hint=err.hint) from None
        spec = ImageSpec(repository=ref.name, tag=ref.tag, digest=ref.digest)
    if spec is None:
        raise ConfigError(
            f"{where} sets {', '.join(k for k in keys if k in table)} but no image",
            hint='add image = "rocm/sgl-dev"',
        )
    updates: dict[str, Any] = {}
    if "tag" in table:
        tag = as_str(table["tag"], f"{where}.tag")
        try:
            validate_tag(tag)
        except InvalidReference as err:
            raise ConfigError(f"{where}.tag: {err.what}", hint=err.hint) from None
        updates["tag"] = tag
    for key in ("sglang", "rocm", "gpu", "before"):
        if key in table:
            updates[key] = as_str(table[key], f"{where}.{key}")
    if "family" in table:
        updates["family"] = as_choice(table["family"], FAMILIES, f"{where}.family")
    from rocmenv.grammar.tags import constraint_problem

    for key in ("sglang", "rocm", "gpu", "before"):
        problem = constraint_problem(key, updates[key]) if key in updates else None
        if problem is not None:
            raise ConfigError(f"{where}.{key} = {updates[key][:80]!r} {problem}")
    spec = replace(spec, **updates)
    if spec.tag and spec.has_constraints:
        raise ConfigError(
            f"{where} gives both a tag and tag constraints",
            hint="keep one: an exact tag, or constraints to resolve",
        )
    return spec


def parse_profile(name: str, table: Mapping[str, Any], base: Profile, path: Path) -> Profile:
    where = f"[profiles.{name}] in {path}"
    check_keys(table, PROFILE_KEYS, where)
    u: dict[str, Any] = {"name": name, "source": str(path)}
    u["image"] = parse_image(table, where, base.image)
    u.update(_scalar_keys(table, where))  # in this order: the first bad key is the one reported
    u.update(_choice_keys(table, where))
    u.update(_table_keys(table, where, path))
    for env_name in (
        *u.get("pass_env", ()),
        *u.get("secret_env", ()),
        *(k for k, _ in u.get("env", ())),
    ):
        check_env_name(env_name, where)
    return replace(base, **u)


def _scalar_keys(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The profile's strings, sizes, numbers, lists and switches: the fields they set."""
    u: dict[str, Any] = {}
    simple_str = {
        "description": "description",
        "gpus": "gpus",
        "ipc": "ipc",
        "network": "network",
        "workdir": "workdir",
    }
    for key, attr in simple_str.items():
        if key in table:
            u[attr] = as_str(table[key], f"{where}.{key}")
    for key in ("shm-size", "memory", "memory-swap"):
        if key in table:
            u[key.replace("-", "_")] = as_size(table[key], f"{where}.{key}")
    if "pids-limit" in table:
        u["pids_limit"] = as_int(table["pids-limit"], f"{where}.pids-limit", minimum=-1)
    if "output" in table:
        u["output"] = as_container_dir(table["output"], f"{where}.output")
    for key in (
        "gpu-env",
        "devices",
        "group-add",
        "cap-add",
        "cap-drop",
        "security-opt",
        "pass-env",
        "secret-env",
    ):
        if key in table:
            u[key.replace("-", "_")] = as_str_list(table[key], f"{where}.{key}")
    for key in ("privileged", "keep-proxy-env", "mount-checkout", "shims", "untrusted"):
        if key in table:
            u[key.replace("-", "_")] = as_bool(table[key], f"{where}.{key}")
    return u


def _choice_keys(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The keys that take one of a closed set of words: the fields they set."""
    u: dict[str, Any] = {}
    if "gpu-isolation" in table:
        u["gpu_isolation"] = as_choice(
            table["gpu-isolation"], GPU_ISOLATIONS, f"{where}.gpu-isolation"
        )
    if "gpu-devices" in table:
        u["gpu_devices"] = as_choice(
            table["gpu-devices"], GPU_DEVICE_NAMINGS, f"{where}.gpu-devices"
        )
    if "pull" in table:
        u["pull"] = as_choice(table["pull"], PULL_POLICIES, f"{where}.pull")
    if "engine" in table:
        u["engine"] = as_choice(table["engine"], ENGINE_NAMES, f"{where}.engine")
    return u


def _table_keys(table: Mapping[str, Any], where: str, path: Path) -> dict[str, Any]:
    """``ulimits``, ``mounts`` (relative to the file's directory), ``env`` and ``labels``."""
    u: dict[str, Any] = {}
    if "ulimits" in table:
        if not isinstance(table["ulimits"], dict):
            raise ConfigError(f"{where}.ulimits must be a table of name = limit")
        u["ulimits"] = tuple(
            parse_ulimit(k, v, f"{where}.ulimits") for k, v in table["ulimits"].items()
        )
    if "mounts" in table:
        if not isinstance(table["mounts"], list):
            raise ConfigError(f"{where}.mounts must be a list")
        u["mounts"] = tuple(
            parse_mount(m, f"{where}.mounts[{i}]", path.parent)
            for i, m in enumerate(table["mounts"])
        )
    for key in ("env", "labels"):
        if key in table:
            value = table[key]
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f'{where}.{key} must be a table of NAME = "value" strings')
            u[key] = tuple(sorted(value.items()))
    return u
