"""Configuration: ``rocmenv.toml`` or ``[tool.rocmenv]`` in ``pyproject.toml``.

Schema (every key optional; unknown keys are errors with a "did you mean")::

    default-profile = "rocm"          # profile used when none is named
    lockfile = "rocmenv.lock"         # relative to the config file
    engine = "auto"                   # auto | docker-api | docker-cli | podman

    [registry]
    mirrors = { "docker.io" = ["127.0.0.1:5000"] }   # tried in order, then the registry itself
    insecure = ["myregistry.local:5000"]             # plain HTTP allowed (loopback always is)
    timeout = 30.0                                   # seconds, per request
    retries = 4                                      # on 429/5xx/connection errors

    [host]
    sysfs-root = "/sys"               # where class/kfd/kfd/topology lives
    dev-root = "/dev"                 # where kfd and dri/ live

    [profiles.NAME]
    extends = "rocm"                  # a built-in or another profile; keys below override it
    description = "…"
    image = "rocm/sgl-dev"            # repository, or repository:tag / @digest
    tag = "miles-rocm720-mi35x"       # or constraints, resolved newest-first:
    sglang = ">=0.5.8"                #   PEP 440 specifier on the tag's SGLang version
    rocm = "7.2"                      #   ROCm X.Y[.Z]
    gpu = "mi35x"                     #   GPU family of the tag
    family = "nightly"                #   nightly | release | floating | date-only
    before = "20260301"               #   tags dated before this day
    gpus = "all"                      # all | none | 0,1 | 0-3 | <uuid>[,<uuid>]
    gpu-isolation = "devices"         # devices: only the selected nodes; env: all nodes + variables
    gpu-env = ["HIP_VISIBLE_DEVICES"] # variables set to the selected GPUs
    devices = ["/dev/infiniband"]     # extra device nodes
    group-add = ["video", "render"]
    cap-add = ["SYS_PTRACE"]
    cap-drop = []
    security-opt = ["seccomp=unconfined"]
    ipc = "host"
    network = "host"
    shm-size = "32g"
    memory = "0"
    memory-swap = "0"
    ulimits = { memlock = -1, stack = 67108864, nofile = "65535:65535" }
    privileged = false                # opt-in, warned
    mounts = ["/data/ci:/data/ci", { source = "/data/x", target = "/x", readonly = true, optional = true }]
    env = { HF_HUB_OFFLINE = "1" }    # fixed values
    pass-env = ["HIP_VISIBLE_DEVICES"]  # passed from the host when set there
    secret-env = ["WANDB_API_KEY"]    # passed too, but never in untrusted mode
    keep-proxy-env = false            # http(s)_proxy/no_proxy are dropped unless true
    workdir = "/workspace"            # default: the current directory (inside the mounted checkout)
    mount-checkout = true             # mount the checkout at the same path
    shims = true                      # inject the shim launcher
    untrusted = false                 # refuse privileged, mount data read-only, no secrets
    pull = "missing"                  # always | missing | never
    engine = "docker-api"             # per-profile engine choice
    labels = { team = "ml-infra" }

Precedence: CLI flag > ``ROCMENV_*`` environment > project file > built-in defaults.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError

EngineName = Literal["auto", "docker-api", "docker-cli", "podman"]
PullPolicy = Literal["always", "missing", "never"]
GpuIsolation = Literal["devices", "env"]
ENGINES: tuple[str, ...] = ("auto", "docker-api", "docker-cli", "podman")
PULL_POLICIES: tuple[str, ...] = ("always", "missing", "never")
FAMILIES: tuple[str, ...] = ("nightly", "release", "floating", "date-only")
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

TOP_KEYS = ("default-profile", "lockfile", "engine", "registry", "host", "profiles")
REGISTRY_KEYS = ("mirrors", "insecure", "timeout", "retries")
HOST_KEYS = ("sysfs-root", "dev-root")
PROFILE_KEYS = (
    "extends", "description", "image", "tag", "sglang", "rocm", "gpu", "family", "before",
    "gpus", "gpu-isolation", "gpu-env", "devices", "group-add", "cap-add", "cap-drop",
    "security-opt", "ipc", "network", "shm-size", "memory", "memory-swap", "ulimits",
    "privileged", "mounts", "env", "pass-env", "secret-env", "keep-proxy-env", "workdir",
    "mount-checkout", "shims", "untrusted", "pull", "engine", "labels",
)  # fmt: skip
MOUNT_KEYS = ("source", "target", "readonly", "optional")


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Mount:
    source: str
    target: str
    readonly: bool = False
    optional: bool = False

    def render(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.readonly else "")


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    description: str = ""
    image: ImageSpec | None = None
    gpus: str = "none"
    gpu_isolation: GpuIsolation = "devices"
    gpu_env: tuple[str, ...] = ()
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
    ulimits: tuple[Ulimit, ...] = ()
    privileged: bool = False
    mounts: tuple[Mount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    pass_env: tuple[str, ...] = ()
    secret_env: tuple[str, ...] = ()
    keep_proxy_env: bool = False
    workdir: str | None = None
    mount_checkout: bool = True
    shims: bool = True
    untrusted: bool = False
    pull: PullPolicy = "missing"
    engine: EngineName | None = None
    labels: tuple[tuple[str, str], ...] = ()
    source: str = "built-in"  # where it was defined: "built-in" or a file path


@dataclass(frozen=True, kw_only=True)
class RegistrySettings:
    mirrors: tuple[tuple[str, tuple[str, ...]], ...] = ()
    insecure: tuple[str, ...] = ()
    timeout: float = 30.0
    retries: int = 4

    def mirrors_for(self, domain: str) -> tuple[str, ...]:
        for name, hosts in self.mirrors:
            if name == domain:
                return hosts
        return ()


@dataclass(frozen=True, kw_only=True)
class HostSettings:
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")


@dataclass(frozen=True, kw_only=True)
class Config:
    path: Path | None  # the file read, if any
    root: Path  # the project root: the config file's directory, else the working directory
    default_profile: str = "rocm"
    lockfile: Path = Path("rocmenv.lock")
    engine: EngineName = "auto"
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    host: HostSettings = field(default_factory=HostSettings)
    profiles: tuple[tuple[str, Profile], ...] = ()

    @property
    def profile_names(self) -> list[str]:
        return [name for name, _ in self.profiles]

    def profile(self, name: str | None = None) -> Profile:
        wanted = name or self.default_profile
        for pname, prof in self.profiles:
            if pname == wanted:
                return prof
        raise UsageError(
            f"unknown profile {wanted!r}" + _did_you_mean(wanted, self.profile_names),
            hint=f"profiles defined: {', '.join(self.profile_names)}"
            + (f" (from {self.path})" if self.path else " (no rocmenv.toml found)"),
        )


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


# -- loading ----------------------------------------------------------------------------------


def _did_you_mean(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"unknown key {key!r} in {where}" + _did_you_mean(key, allowed),
                hint=f"allowed keys: {', '.join(allowed)}",
            )


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(
            f"{path} is not valid TOML: {err}", hint="fix the syntax at that line"
        ) from err


def find_config(ctx: Context) -> tuple[Path | None, dict[str, Any]]:
    """The config file and its rocmenv table: --config, ROCMENV_CONFIG, else search upwards."""
    explicit = ctx.config_path or (
        Path(ctx.env["ROCMENV_CONFIG"]) if ctx.env.get("ROCMENV_CONFIG") else None
    )
    if explicit is not None:
        path = explicit if explicit.is_absolute() else ctx.cwd / explicit
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist", hint="check --config / ROCMENV_CONFIG"
            )
        return path, _rocmenv_table(path, _load_toml(path), required=True)
    for directory in (ctx.cwd, *ctx.cwd.parents):
        candidate = directory / "rocmenv.toml"
        if candidate.is_file():
            return candidate, _rocmenv_table(candidate, _load_toml(candidate), required=True)
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            data = _load_toml(pyproject)
            if isinstance(data.get("tool"), dict) and "rocmenv" in data["tool"]:
                return pyproject, _rocmenv_table(pyproject, data, required=True)
        if (directory / ".git").exists():
            break  # don't wander out of the checkout
    return None, {}


def _rocmenv_table(path: Path, data: dict[str, Any], *, required: bool) -> dict[str, Any]:
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("rocmenv")
        if table is None:
            raise ConfigError(
                f"{path} has no [tool.rocmenv] table", hint="add one or use rocmenv.toml"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"[tool.rocmenv] in {path} must be a table")
        return table
    return data


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {type(value).__name__} {value!r}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    text = _str(value, where)
    if text not in choices:
        raise ConfigError(
            f"{where} = {text!r} is not one of {', '.join(choices)}" + _did_you_mean(text, choices)
        )
    return text


_SIZE_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?[bkmgBKMG]?")


def _size(value: Any, where: str) -> str:
    text = (
        str(value) if isinstance(value, int) and not isinstance(value, bool) else _str(value, where)
    )
    if not _SIZE_RE.fullmatch(text):
        raise ConfigError(
            f"{where} = {text!r} is not a size", hint="use a number with b, k, m or g, e.g. 32g"
        )
    return text


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


def parse_mount(value: Any, where: str, base: Path) -> Mount:
    """``"SRC:DST[:ro|:rw]"`` or a table {source, target, readonly, optional}."""
    if isinstance(value, str):
        parts = value.split(":")
        if (
            len(parts) not in (2, 3)
            or not parts[0]
            or not parts[1]
            or (len(parts) == 3 and parts[2] not in ("ro", "rw"))
        ):
            raise ConfigError(
                f"{where}: mount {value!r} is not SRC:DST[:ro]", hint="e.g. /data/ci:/data/ci:ro"
            )
        source, target, readonly, optional = (
            parts[0],
            parts[1],
            len(parts) == 3 and parts[2] == "ro",
            False,
        )
    elif isinstance(value, dict):
        _check_keys(value, MOUNT_KEYS, where)
        if "source" not in value or "target" not in value:
            raise ConfigError(f"{where}: a mount table needs source and target")
        source, target = (
            _str(value["source"], f"{where}.source"),
            _str(value["target"], f"{where}.target"),
        )
        readonly = _bool(value.get("readonly", False), f"{where}.readonly")
        optional = _bool(value.get("optional", False), f"{where}.optional")
    else:
        raise ConfigError(f"{where}: a mount is a string or a table, got {value!r}")
    if not target.startswith("/"):
        raise ConfigError(
            f"{where}: mount target {target!r} must be an absolute path in the container"
        )
    source_path = Path(source).expanduser()
    if not source_path.is_absolute():
        source_path = base / source_path
    return Mount(source=str(source_path), target=target, readonly=readonly, optional=optional)


def _image(table: Mapping[str, Any], where: str, inherited: ImageSpec | None) -> ImageSpec | None:
    from rocmenv.errors import InvalidReference
    from rocmenv.reference import parse, validate_tag

    keys = ("image", "tag", "sglang", "rocm", "gpu", "family", "before")
    if not any(k in table for k in keys):
        return inherited
    spec = inherited
    if "image" in table:
        text = _str(table["image"], f"{where}.image")
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
        tag = _str(table["tag"], f"{where}.tag")
        try:
            validate_tag(tag)
        except InvalidReference as err:
            raise ConfigError(f"{where}.tag: {err.what}", hint=err.hint) from None
        updates["tag"] = tag
    for key in ("sglang", "rocm", "gpu", "before"):
        if key in table:
            updates[key] = _str(table[key], f"{where}.{key}")
    if "family" in table:
        updates["family"] = _choice(table["family"], FAMILIES, f"{where}.family")
    if "sglang" in updates:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(updates["sglang"])
        except InvalidSpecifier:
            raise ConfigError(
                f"{where}.sglang = {updates['sglang']!r} is not a PEP 440 specifier",
                hint='e.g. ">=0.5.8,<0.6"',
            ) from None
    if "before" in updates and not re.fullmatch(r"[0-9]{8}", updates["before"]):
        raise ConfigError(f"{where}.before = {updates['before']!r} must be YYYYMMDD")
    spec = replace(spec, **updates)
    if spec.tag and spec.has_constraints:
        raise ConfigError(
            f"{where} gives both a tag and tag constraints",
            hint="keep one: an exact tag, or constraints to resolve",
        )
    return spec


def _profile(name: str, table: Mapping[str, Any], base: Profile, path: Path) -> Profile:
    where = f"[profiles.{name}] in {path}"
    _check_keys(table, PROFILE_KEYS, where)
    u: dict[str, Any] = {"name": name, "source": str(path)}
    u["image"] = _image(table, where, base.image)
    simple_str = {
        "description": "description",
        "gpus": "gpus",
        "ipc": "ipc",
        "network": "network",
        "workdir": "workdir",
    }
    for key, attr in simple_str.items():
        if key in table:
            u[attr] = _str(table[key], f"{where}.{key}")
    for key in ("shm-size", "memory", "memory-swap"):
        if key in table:
            u[key.replace("-", "_")] = _size(table[key], f"{where}.{key}")
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
            u[key.replace("-", "_")] = _str_list(table[key], f"{where}.{key}")
    for key in ("privileged", "keep-proxy-env", "mount-checkout", "shims", "untrusted"):
        if key in table:
            u[key.replace("-", "_")] = _bool(table[key], f"{where}.{key}")
    if "gpu-isolation" in table:
        u["gpu_isolation"] = _choice(
            table["gpu-isolation"], ("devices", "env"), f"{where}.gpu-isolation"
        )
    if "pull" in table:
        u["pull"] = _choice(table["pull"], PULL_POLICIES, f"{where}.pull")
    if "engine" in table:
        u["engine"] = _choice(table["engine"], ENGINES, f"{where}.engine")
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
    for env_name in (
        *u.get("pass_env", ()),
        *u.get("secret_env", ()),
        *(k for k, _ in u.get("env", ())),
    ):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
            raise ConfigError(f"{where}: {env_name!r} is not an environment variable name")
    return replace(base, **u)


def _registry(table: Any, where: str) -> RegistrySettings:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    _check_keys(table, REGISTRY_KEYS, where)
    mirrors: list[tuple[str, tuple[str, ...]]] = []
    if "mirrors" in table:
        if not isinstance(table["mirrors"], dict):
            raise ConfigError(f"{where}.mirrors must be a table of registry = [mirror, …]")
        for reg, hosts in table["mirrors"].items():
            mirrors.append((reg, _str_list(hosts, f"{where}.mirrors.{reg}")))
    settings = RegistrySettings(
        mirrors=tuple(mirrors),
        insecure=_str_list(table.get("insecure", []), f"{where}.insecure"),
    )
    if "timeout" in table:
        t = table["timeout"]
        if not isinstance(t, (int, float)) or isinstance(t, bool) or t <= 0:
            raise ConfigError(f"{where}.timeout must be a positive number of seconds")
        settings = replace(settings, timeout=float(t))
    if "retries" in table:
        r = table["retries"]
        if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r <= 20:
            raise ConfigError(f"{where}.retries must be an integer from 0 to 20")
        settings = replace(settings, retries=r)
    return settings


def _env_registry(ctx: Context, settings: RegistrySettings) -> RegistrySettings:
    """``ROCMENV_MIRRORS="docker.io=127.0.0.1:5000,docker.io=m2"``, ``ROCMENV_INSECURE_REGISTRIES``,
    ``ROCMENV_REGISTRY_TIMEOUT``, ``ROCMENV_REGISTRY_RETRIES``."""
    if ctx.env.get("ROCMENV_MIRRORS"):
        pairs: dict[str, list[str]] = {}
        for item in ctx.env["ROCMENV_MIRRORS"].split(","):
            reg, eq, mirror = item.strip().partition("=")
            if not eq or not reg or not mirror:
                raise ConfigError(f"ROCMENV_MIRRORS entry {item!r} is not REGISTRY=MIRROR")
            pairs.setdefault(reg, []).append(mirror)
        settings = replace(settings, mirrors=tuple((k, tuple(v)) for k, v in pairs.items()))
    if ctx.env.get("ROCMENV_INSECURE_REGISTRIES"):
        settings = replace(
            settings,
            insecure=tuple(
                h.strip() for h in ctx.env["ROCMENV_INSECURE_REGISTRIES"].split(",") if h.strip()
            ),
        )
    try:
        if ctx.env.get("ROCMENV_REGISTRY_TIMEOUT"):
            settings = replace(settings, timeout=float(ctx.env["ROCMENV_REGISTRY_TIMEOUT"]))
        if ctx.env.get("ROCMENV_REGISTRY_RETRIES"):
            settings = replace(settings, retries=int(ctx.env["ROCMENV_REGISTRY_RETRIES"]))
    except ValueError as err:
        raise ConfigError(f"ROCMENV_REGISTRY_TIMEOUT/RETRIES: {err}") from None
    return settings


def load_config(ctx: Context) -> Config:
    """Read the project's configuration and apply ``ROCMENV_*`` environment overrides."""
    path, table = find_config(ctx)
    where = str(path) if path else "configuration"
    _check_keys(table, TOP_KEYS, where)
    root = path.parent if path else ctx.cwd
    profiles: dict[str, Profile] = dict(BUILTIN_PROFILES)
    raw_profiles = table.get("profiles", {})
    if not isinstance(raw_profiles, dict):
        raise ConfigError(f"profiles in {where} must be a table of tables")
    resolving: list[str] = []

    def build(name: str) -> Profile:
        if name in profiles and (name not in raw_profiles or name in done):
            return profiles[name]
        raw = raw_profiles[name]
        if not isinstance(raw, dict):
            raise ConfigError(f"[profiles.{name}] in {where} must be a table")
        if name in resolving:
            raise ConfigError(
                f"profile {name!r} in {where} extends itself: {' -> '.join([*resolving, name])}"
            )
        resolving.append(name)
        parent_name = raw.get("extends")
        if parent_name is None:
            base = (
                BUILTIN_PROFILES["rocm"] if name not in BUILTIN_PROFILES else BUILTIN_PROFILES[name]
            )
        else:
            parent_name = _str(parent_name, f"[profiles.{name}].extends")
            if parent_name == name and name in BUILTIN_PROFILES:
                base = BUILTIN_PROFILES[name]
            elif parent_name in raw_profiles:
                base = build(parent_name)
            elif parent_name in BUILTIN_PROFILES:
                base = BUILTIN_PROFILES[parent_name]
            else:
                known = sorted({*raw_profiles, *BUILTIN_PROFILES})
                raise ConfigError(
                    f"[profiles.{name}] extends unknown profile {parent_name!r}"
                    + _did_you_mean(parent_name, known)
                )
        assert path is not None
        profiles[name] = _profile(name, raw, base, path)
        done.add(name)
        resolving.pop()
        return profiles[name]

    done: set[str] = set()
    for name in raw_profiles:
        build(name)

    registry = (
        _registry(table["registry"], f"[registry] in {where}")
        if "registry" in table
        else RegistrySettings()
    )
    registry = _env_registry(ctx, registry)
    host = HostSettings()
    if "host" in table:
        if not isinstance(table["host"], dict):
            raise ConfigError(f"[host] in {where} must be a table")
        _check_keys(table["host"], HOST_KEYS, f"[host] in {where}")
        if "sysfs-root" in table["host"]:
            host = replace(
                host, sysfs_root=root / _str(table["host"]["sysfs-root"], "[host].sysfs-root")
            )
        if "dev-root" in table["host"]:
            host = replace(host, dev_root=root / _str(table["host"]["dev-root"], "[host].dev-root"))
    if ctx.env.get("ROCMENV_SYSFS_ROOT"):
        host = replace(host, sysfs_root=Path(ctx.env["ROCMENV_SYSFS_ROOT"]))
    if ctx.env.get("ROCMENV_DEV_ROOT"):
        host = replace(host, dev_root=Path(ctx.env["ROCMENV_DEV_ROOT"]))

    engine = cast(EngineName, _choice(table.get("engine", "auto"), ENGINES, f"engine in {where}"))
    if ctx.env.get("ROCMENV_ENGINE"):
        engine = cast(EngineName, _choice(ctx.env["ROCMENV_ENGINE"], ENGINES, "ROCMENV_ENGINE"))
    default_profile = _str(table.get("default-profile", "rocm"), f"default-profile in {where}")
    if ctx.env.get("ROCMENV_PROFILE"):
        default_profile = ctx.env["ROCMENV_PROFILE"]
    lockfile = Path(_str(table.get("lockfile", "rocmenv.lock"), f"lockfile in {where}"))
    if ctx.env.get("ROCMENV_LOCKFILE"):
        lockfile = Path(ctx.env["ROCMENV_LOCKFILE"])
    if not lockfile.is_absolute():
        lockfile = (root if not ctx.env.get("ROCMENV_LOCKFILE") else ctx.cwd) / lockfile
    config = Config(
        path=path,
        root=root,
        default_profile=default_profile,
        lockfile=lockfile,
        engine=engine,
        registry=registry,
        host=host,
        profiles=tuple(profiles.items()),
    )
    if default_profile not in profiles:
        config.profile(default_profile)  # raises with a did-you-mean
    return config
