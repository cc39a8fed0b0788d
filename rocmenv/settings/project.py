"""The project file (``rocmenv.toml`` or ``[tool.rocmenv]``) as read: every table validated,
nothing from the environment or the command line applied yet — that is
:mod:`rocmenv.settings.resolve`'s one cascade.

Schema (every key optional; unknown keys are errors with a "did you mean")::

    default-profile = "rocm"          # profile used when none is named
    lockfile = "rocmenv.lock"         # relative to the config file
    engine = "auto"                   # auto | docker-api | docker-cli | podman

    [registry]                        # rocmenv.settings.registry
    mirrors = { "docker.io" = ["127.0.0.1:5000"] }   # tried in order, then the registry itself
    insecure = ["myregistry.local:5000"]             # plain HTTP allowed (loopback always is)
    timeout = 30.0                                   # seconds, per request
    retries = 4                                      # on 429/5xx/connection errors

    [host]
    sysfs-root = "/sys"               # where class/kfd/kfd/topology lives
    dev-root = "/dev"                 # where kfd and dri/ live

    [profiles.NAME]                   # rocmenv.settings.profiles
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
    untrusted = false                 # true: the untrusted policy (rocmenv.spec.guard); false
                                      #   cannot switch off --untrusted/ROCMENV_UNTRUSTED
    pull = "missing"                  # always | missing | never
    engine = "docker-api"             # per-profile engine choice
    labels = { team = "ml-infra" }

    [suites.NAME]                     # test suites: rocmenv.suite.model
    [slurm]                           # rocmenv.settings.slurm (also [suites.NAME.slurm])
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.choices import ENGINE_NAMES, EngineName
from rocmenv.settings.files import file_trusted, find_project_file
from rocmenv.settings.keys import as_choice, as_str, check_keys, did_you_mean
from rocmenv.settings.profiles import BUILTIN_PROFILES, Profile, parse_profile
from rocmenv.settings.registry import RegistrySettings, registry_settings

TOP_KEYS = (
    "default-profile", "lockfile", "engine", "registry", "host", "profiles", "suites", "slurm",
)  # fmt: skip
HOST_KEYS = ("sysfs-root", "dev-root")
PROFILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, kw_only=True)
class HostSettings:
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")


@dataclass(frozen=True, kw_only=True)
class Project:
    """The project file as written (or the built-ins when there is none)."""

    path: Path | None  # the file read, if any
    root: Path  # the project root: the file's directory, else the working directory
    # A file outside the checkout named by --config/ROCMENV_CONFIG, or no file (built-ins):
    # what untrusted mode may believe (README "Running untrusted code").
    trusted: bool = True
    default_profile: str | None = None  # the file's default-profile
    lockfile: str | None = None  # the file's lockfile, as written
    engine: EngineName | None = None
    registry: RegistrySettings | None = None  # [registry], validated
    host: Any = None  # [host] as written; validated when it counts (resolve)
    slurm: Any = None  # [slurm] as written; parsed when it counts (resolve)
    suites: Mapping[str, Any] = field(default_factory=dict)  # [suites.*] as written
    profiles: tuple[tuple[str, Profile], ...] = tuple(BUILTIN_PROFILES.items())

    @property
    def where(self) -> str:
        return str(self.path) if self.path else "configuration"

    @property
    def profile_names(self) -> list[str]:
        return [name for name, _ in self.profiles]

    def profile(self, name: str) -> Profile:
        for pname, prof in self.profiles:
            if pname == name:
                return prof
        raise UsageError(
            f"unknown profile {name!r}" + did_you_mean(name, self.profile_names),
            hint=f"profiles defined: {', '.join(self.profile_names)}"
            + (f" (from {self.path})" if self.path else " (no rocmenv.toml found)"),
        )


def load_project(ctx: Context) -> Project:
    """Find and read the project file: every key checked, the profiles built (``extends``
    resolved), ``[registry]`` validated; ``[host]`` and ``[slurm]`` kept as written until
    the resolver knows whether they count."""
    path, table = find_project_file(ctx)
    where = str(path) if path else "configuration"
    check_keys(table, TOP_KEYS, where)
    engine = table.get("engine")
    default_profile = table.get("default-profile")
    lockfile = table.get("lockfile")
    suites = table.get("suites", {})
    if not isinstance(suites, dict):
        raise ConfigError(f"suites in {where} must be a table of tables")
    return Project(
        path=path,
        root=path.parent if path else ctx.cwd,
        trusted=file_trusted(ctx, path),
        default_profile=as_str(default_profile, f"default-profile in {where}")
        if default_profile is not None
        else None,
        lockfile=as_str(lockfile, f"lockfile in {where}") if lockfile is not None else None,
        engine=cast(EngineName, as_choice(engine, ENGINE_NAMES, f"engine in {where}"))
        if engine is not None
        else None,
        registry=registry_settings(table["registry"], f"[registry] in {where}")
        if "registry" in table
        else None,
        host=table.get("host"),
        slurm=table.get("slurm"),
        suites=suites,
        profiles=_profiles(table.get("profiles", {}), where, path),
    )


def host_settings(table: Any, root: Path, where: str) -> HostSettings:
    """``[host]``: paths relative to the project root."""
    if not isinstance(table, dict):
        raise ConfigError(f"[host] in {where} must be a table")
    check_keys(table, HOST_KEYS, f"[host] in {where}")
    host = HostSettings()
    if "sysfs-root" in table:
        host = HostSettings(
            sysfs_root=root / as_str(table["sysfs-root"], "[host].sysfs-root"),
            dev_root=host.dev_root,
        )
    if "dev-root" in table:
        host = HostSettings(
            sysfs_root=host.sysfs_root, dev_root=root / as_str(table["dev-root"], "[host].dev-root")
        )
    return host


def _profiles(raw_profiles: Any, where: str, path: Path | None) -> tuple[tuple[str, Profile], ...]:
    """The built-in profiles, then the file's, each resolved through its ``extends`` chain."""
    if not isinstance(raw_profiles, dict):
        raise ConfigError(f"profiles in {where} must be a table of tables")
    for name in raw_profiles:
        if not PROFILE_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"profile name {name!r} in {where} is not a name",
                hint="profile names match [A-Za-z0-9][A-Za-z0-9._-]* (letters, digits, . _ -)",
            )
    profiles: dict[str, Profile] = dict(BUILTIN_PROFILES)
    done: set[str] = set()
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
        base = _base_of(name, raw.get("extends"), raw_profiles, build)
        assert path is not None
        profiles[name] = parse_profile(name, raw, base, path)
        done.add(name)
        resolving.pop()
        return profiles[name]

    try:
        for name in raw_profiles:
            build(name)
    except RecursionError:
        raise ConfigError(
            f"the profiles in {where} extend each other too deeply",
            hint="keep `extends` chains short (a few levels)",
        ) from None
    return tuple(profiles.items())


def _base_of(name: str, parent: Any, raw_profiles: Mapping[str, Any], build: Any) -> Profile:
    """The profile ``name`` extends: its ``extends``, else the built-in of the same name, else
    the built-in ``rocm``."""
    if parent is None:
        return BUILTIN_PROFILES.get(name, BUILTIN_PROFILES["rocm"])
    parent = as_str(parent, f"[profiles.{name}].extends")
    if parent == name and name in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name]
    if parent in raw_profiles:
        return cast(Profile, build(parent))
    if parent in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[parent]
    known = sorted({*raw_profiles, *BUILTIN_PROFILES})
    raise ConfigError(
        f"[profiles.{name}] extends unknown profile {parent!r}" + did_you_mean(parent, known)
    )
