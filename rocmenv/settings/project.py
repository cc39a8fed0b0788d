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
    untrusted = false                 # true: the untrusted policy (rocmenv.spec.guard); false
                                      #   cannot switch off --untrusted/ROCMENV_UNTRUSTED
    pull = "missing"                  # always | missing | never
    engine = "docker-api"             # per-profile engine choice
    labels = { team = "ml-infra" }

    [suites.NAME] / [slurm]           # test suites: see rocmenv/suite/model.py

Precedence: CLI flag > ``ROCMENV_*`` environment > project file > built-in defaults.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from rocmenv.context import Context, find_checkout
from rocmenv.engine import ENGINE_NAMES, EngineName
from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.profiles import (
    BUILTIN_PROFILES,
    Profile,
    as_choice,
    as_str,
    check_keys,
    did_you_mean,
    parse_profile,
)
from rocmenv.settings.registry import RegistrySettings, env_registry, registry_settings

# suites and slurm are read by rocmenv.suite.model
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
class Config:
    path: Path | None  # the file read, if any
    root: Path  # the project root: the config file's directory, else the working directory
    default_profile: str = "rocm"
    lockfile: Path = Path("rocmenv.lock")
    engine: EngineName = "auto"
    registry: RegistrySettings = field(default_factory=RegistrySettings)
    host: HostSettings = field(default_factory=HostSettings)
    profiles: tuple[tuple[str, Profile], ...] = ()
    # A file outside the checkout named by --config/ROCMENV_CONFIG, or no file (built-ins):
    # what untrusted mode may believe (README "Running untrusted code").
    trusted: bool = True
    notes: tuple[str, ...] = ()  # what loading ignored (untrusted mode)

    @property
    def profile_names(self) -> list[str]:
        return [name for name, _ in self.profiles]

    def profile(self, name: str | None = None) -> Profile:
        wanted = name or self.default_profile
        for pname, prof in self.profiles:
            if pname == wanted:
                return prof
        raise UsageError(
            f"unknown profile {wanted!r}" + did_you_mean(wanted, self.profile_names),
            hint=f"profiles defined: {', '.join(self.profile_names)}"
            + (f" (from {self.path})" if self.path else " (no rocmenv.toml found)"),
        )


# -- loading --------------------------------------------------------------------------------


#: The largest project file (rocmenv.toml, pyproject.toml) or lockfile read (a real one is
#: kilobytes; a checkout may carry anything).
MAX_FILE_BYTES = 16 << 20


def load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB: not a rocmenv configuration",
                hint="point --config/ROCMENV_CONFIG at the project's rocmenv.toml",
            )
        data: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
        nul = find_nul(data)
        if nul is not None:
            raise ConfigError(
                f"{path}: {nul} contains a NUL character (\\u0000)",
                hint="no path, name or value rocmenv passes on can hold one; remove it",
            )
        return data
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(
            f"{path} is not valid TOML: {err}", hint="fix the syntax at that line"
        ) from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {err.start}: {err.object[err.start : err.start + 1]!r})",
            hint="TOML files are UTF-8; re-save the file as UTF-8",
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{path} nests arrays or tables too deeply to read",
            hint="flatten the structure; rocmenv's keys nest at most three levels",
        ) from None


def find_nul(value: Any, where: str = "") -> str | None:
    """The key path of the first string (or key) holding a NUL character, else ``None``.
    Iterative: a document nested as deep as the parser allows is walked without recursion."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        here, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return here or "a value"
        elif isinstance(item, dict):
            for key, sub in item.items():
                name = f"{here}.{key}" if here else str(key)
                if "\x00" in str(key):
                    return name.replace("\x00", "\\u0000")
                stack.append((name, sub))
        elif isinstance(item, list):
            stack.extend((f"{here}[{i}]", sub) for i, sub in enumerate(item))
    return None


def find_config(ctx: Context) -> tuple[Path | None, dict[str, Any]]:
    """The config file and its rocmenv table: --config, ROCMENV_CONFIG, else search upwards."""
    explicit = ctx.config_path or (
        Path(ctx.env["ROCMENV_CONFIG"]) if ctx.env.get("ROCMENV_CONFIG") else None
    )
    if explicit is not None:
        path = explicit if explicit.is_absolute() else ctx.cwd / explicit
        if not _is_file(path):
            raise ConfigError(
                f"config file {path} does not exist", hint="check --config / ROCMENV_CONFIG"
            )
        return path, _rocmenv_table(path, load_toml(path), required=True)
    for directory in (ctx.cwd, *ctx.cwd.parents):
        candidate = directory / "rocmenv.toml"
        if _is_file(candidate):
            return candidate, _rocmenv_table(candidate, load_toml(candidate), required=True)
        pyproject = directory / "pyproject.toml"
        if _is_file(pyproject):
            data = load_toml(pyproject)
            if isinstance(data.get("tool"), dict) and "rocmenv" in data["tool"]:
                return pyproject, _rocmenv_table(pyproject, data, required=True)
        if (directory / ".git").exists():
            break  # don't wander out of the checkout
    return None, {}


def _is_file(path: Path) -> bool:
    """``path.is_file()``, false for a name the OS refuses (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


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


def config_trusted(ctx: Context, path: Path | None) -> bool:
    """No file, or one named by ``--config``/``ROCMENV_CONFIG`` that lies outside the
    checkout: a file found in (or named inside) the checkout is the checkout's."""
    if path is None:
        return True
    explicit = ctx.config_path is not None or bool(ctx.env.get("ROCMENV_CONFIG"))
    checkout = os.path.realpath(find_checkout(ctx.cwd))
    real = os.path.realpath(path)
    return explicit and not (real == checkout or real.startswith(checkout.rstrip("/") + "/"))


def load_config(ctx: Context, *, untrusted: bool = False) -> Config:
    """Read the project's configuration and apply ``ROCMENV_*`` environment overrides.

    In untrusted mode (``untrusted`` or ``ROCMENV_UNTRUSTED``) a file from the checkout is
    the pull request's: its ``[registry]`` and ``[host]`` tables are ignored (said in
    :attr:`Config.notes`) and its ``lockfile`` must stay inside the project."""
    from rocmenv.spec.guard import untrusted_env

    untrusted = untrusted_env(ctx.env) or untrusted
    path, table = find_config(ctx)
    where = str(path) if path else "configuration"
    check_keys(table, TOP_KEYS, where)
    root = path.parent if path else ctx.cwd
    trusted = config_trusted(ctx, path)
    distrust = untrusted and not trusted
    notes: list[str] = []
    profiles: dict[str, Profile] = dict(BUILTIN_PROFILES)
    raw_profiles = table.get("profiles", {})
    if not isinstance(raw_profiles, dict):
        raise ConfigError(f"profiles in {where} must be a table of tables")
    for name in raw_profiles:
        if not PROFILE_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"profile name {name!r} in {where} is not a name",
                hint="profile names match [A-Za-z0-9][A-Za-z0-9._-]* (letters, digits, . _ -)",
            )
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
            parent_name = as_str(parent_name, f"[profiles.{name}].extends")
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
                    + did_you_mean(parent_name, known)
                )
        assert path is not None
        profiles[name] = parse_profile(name, raw, base, path)
        done.add(name)
        resolving.pop()
        return profiles[name]

    done: set[str] = set()
    try:
        for name in raw_profiles:
            build(name)
    except RecursionError:
        raise ConfigError(
            f"the profiles in {where} extend each other too deeply",
            hint="keep `extends` chains short (a few levels)",
        ) from None

    registry = (
        registry_settings(table["registry"], f"[registry] in {where}")
        if "registry" in table
        else RegistrySettings()
    )
    ignored = [f"[{key}]" for key in ("registry", "host") if key in table and distrust]
    if ignored:
        notes.append(f"ignored from the checkout's {path.name if path else 'config'}: "
                     + " and ".join(ignored) + " (mirrors, insecure registries and host roots "
                     "come only from trusted input)")  # fmt: skip
    if distrust:
        registry = RegistrySettings()
    registry = env_registry(ctx.env, registry)
    host = HostSettings()
    if "host" in table and not distrust:
        if not isinstance(table["host"], dict):
            raise ConfigError(f"[host] in {where} must be a table")
        check_keys(table["host"], HOST_KEYS, f"[host] in {where}")
        if "sysfs-root" in table["host"]:
            host = replace(
                host, sysfs_root=root / as_str(table["host"]["sysfs-root"], "[host].sysfs-root")
            )
        if "dev-root" in table["host"]:
            host = replace(
                host, dev_root=root / as_str(table["host"]["dev-root"], "[host].dev-root")
            )
    if ctx.env.get("ROCMENV_SYSFS_ROOT"):
        host = replace(host, sysfs_root=Path(ctx.env["ROCMENV_SYSFS_ROOT"]))
    if ctx.env.get("ROCMENV_DEV_ROOT"):
        host = replace(host, dev_root=Path(ctx.env["ROCMENV_DEV_ROOT"]))

    engine = cast(
        EngineName, as_choice(table.get("engine", "auto"), ENGINE_NAMES, f"engine in {where}")
    )
    default_profile = as_str(table.get("default-profile", "rocm"), f"default-profile in {where}")
    if ctx.env.get("ROCMENV_PROFILE"):
        default_profile = ctx.env["ROCMENV_PROFILE"]
    lockfile = Path(as_str(table.get("lockfile", "rocmenv.lock"), f"lockfile in {where}"))
    if ctx.env.get("ROCMENV_LOCKFILE"):
        lockfile = Path(ctx.env["ROCMENV_LOCKFILE"])
    if not lockfile.is_absolute():
        lockfile = (root if not ctx.env.get("ROCMENV_LOCKFILE") else ctx.cwd) / lockfile
    if distrust and not ctx.env.get("ROCMENV_LOCKFILE"):
        real, project = os.path.realpath(lockfile), os.path.realpath(root)
        if not real.startswith(project.rstrip("/") + "/"):
            raise ConfigError(
                f"lockfile in {where} points outside the project ({lockfile}): refused in "
                "untrusted mode",
                hint="keep rocmenv.lock inside the project, or name a lockfile from trusted "
                "input (ROCMENV_LOCKFILE)",
            )
    config = Config(
        path=path,
        root=root,
        default_profile=default_profile,
        lockfile=lockfile,
        engine=engine,
        registry=registry,
        host=host,
        profiles=tuple(profiles.items()),
        trusted=trusted,
        notes=tuple(notes),
    )
    if default_profile not in profiles:
        config.profile(default_profile)  # raises with a did-you-mean
    return config
