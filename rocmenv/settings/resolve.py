"""Every setting resolved once, by one cascade, into one frozen :class:`Settings`.

The order (README "Precedence")::

    command-line flag > ROCMENV_* variable > the profile > site configuration > project file > default

``None`` (not given) and ``auto`` at any level defer to the next. Not every setting has every
level; :data:`CASCADE` says which it has (and ``rocmenv config show --origin`` reports the
level a value came from). The site level (``/etc/rocmenv``, ``$XDG_CONFIG_HOME/rocmenv``) is
a slot the cascade already passes through.

**Untrusted mode** is the one setting that does not cascade: any source turns it on
(``--untrusted``, ``ROCMENV_UNTRUSTED``, the selected profile's ``untrusted = true``), none
turns it off. When it is on and the project file is the checkout's (found in it, or named
inside it), the checkout's ``[registry]``, ``[host]``, ``[slurm]`` and ``[suites.*.slurm]``
are ignored (and said so in :attr:`Settings.notes`) and its ``lockfile`` must stay inside the
project. Those rules are applied here and nowhere else: every command takes the result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from rocmenv.context import Context, find_checkout
from rocmenv.errors import ConfigError
from rocmenv.hostfs import is_under
from rocmenv.settings.choices import ENGINE_NAMES, EngineName, PullPolicy
from rocmenv.settings.keys import parse_size
from rocmenv.settings.policy import Policy, load_policy, untrusted_env
from rocmenv.settings.profiles import Profile
from rocmenv.settings.project import HostSettings, Project, host_settings, load_project
from rocmenv.settings.registry import RegistrySettings, env_registry
from rocmenv.settings.slurm import SlurmSettings, parse_slurm

Origin = Literal["flag", "env", "profile", "site", "project", "default"]

DEFAULT_PROFILE: Final = "rocm"
DEFAULT_ENGINE: Final[EngineName] = "auto"
DEFAULT_PULL: Final[PullPolicy] = "missing"
DEFAULT_LOCKFILE: Final = "rocmenv.lock"
DEFAULT_RESERVE: Final = 2 << 30  # bytes kept free after a pull unless configured

#: Which levels each setting has: (flag, variable, profile key, site key, project key).
CASCADE: Mapping[str, tuple[str | None, str | None, str | None, str | None, str | None]] = {
    "profile": ("--profile", "ROCMENV_PROFILE", None, None, "default-profile"),
    "engine": ("--engine", "ROCMENV_ENGINE", "engine", None, "engine"),
    "pull": ("--pull", None, "pull", None, None),
    "shims": ("--no-shims", None, "shims", None, None),
    "lockfile": ("--lock", "ROCMENV_LOCKFILE", None, None, "lockfile"),
    "disk-reserve": ("--reserve", "ROCMENV_DISK_RESERVE", None, None, None),
    "untrusted": ("--untrusted", "ROCMENV_UNTRUSTED", "untrusted", None, None),
    "registry": (None, "ROCMENV_MIRRORS …", None, None, "[registry]"),
    "host": (None, "ROCMENV_SYSFS_ROOT / ROCMENV_DEV_ROOT", None, None, "[host]"),
    "slurm": (None, None, None, None, "[slurm]"),
    "policy": (None, "ROCMENV_POLICY", None, None, None),
}


@dataclass(frozen=True, kw_only=True)
class Flags:
    """What the command line says; ``None`` is "not given" (the next level decides)."""

    profile: str | None = None
    engine: EngineName | None = None
    pull: PullPolicy | None = None
    shims: bool | None = None  # --no-shims: False
    lockfile: Path | None = None  # --lock, relative to the working directory
    reserve: str | None = None  # --reserve SIZE
    untrusted: bool = False


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What a command runs with. Made by :func:`resolve`, never patched afterwards."""

    project: Project
    profile: Profile  # the selected profile, as declared (the guard constrains it later)
    untrusted: bool
    engine: EngineName
    pull: PullPolicy
    shims: bool
    lockfile: Path
    disk_reserve: int
    registry: RegistrySettings
    host: HostSettings
    slurm: SlurmSettings  # the top-level [slurm] (suites: :meth:`slurm_for`)
    policy: Policy | None  # the untrusted policy; None when trusted
    notes: tuple[str, ...] = ()  # what untrusted mode ignored
    origins: Mapping[str, Origin] = field(default_factory=dict)
    distrusted: bool = False  # untrusted, and the project file is the checkout's

    @property
    def root(self) -> Path:
        return self.project.root

    def slurm_for(self, suite: str) -> SlurmSettings:
        """``[suites.NAME.slurm]`` over the top-level ``[slurm]``; defaults for a distrusted
        checkout's file."""
        if self.distrusted:
            return SlurmSettings()
        raw = self.project.suites.get(suite)
        if isinstance(raw, dict) and "slurm" in raw:
            return parse_slurm(raw["slurm"], f"[suites.{suite}.slurm] in {self.project.where}",
                               self.slurm)  # fmt: skip
        return self.slurm


def pick(*levels: tuple[Origin, Any]) -> tuple[Any, Origin]:
    """The first level that says something other than ``None``/``auto`` (the last one is the
    default and always answers). Callers annotate what they receive."""
    for origin, value in levels:
        if value is not None and value != "auto":
            return value, origin
    origin, value = levels[-1]
    return value, origin


def settings_for(
    ctx: Context, flags: Flags | None = None, *, project: Project | None = None
) -> Settings:
    """The settings of one command (see the module docstring for the order)."""
    flags = flags or Flags()
    project = project or load_project(ctx)
    env = ctx.env
    origins: dict[str, Origin] = {}

    name: str
    engine: EngineName
    pull: PullPolicy
    shims: bool
    reserve_text: str | None
    name, origins["profile"] = pick(
        ("flag", flags.profile), ("env", env.get("ROCMENV_PROFILE") or None),
        ("project", project.default_profile), ("default", DEFAULT_PROFILE),
    )  # fmt: skip
    # the default must exist even when a flag chose another profile (a did-you-mean for typos)
    project.profile(env.get("ROCMENV_PROFILE") or project.default_profile or DEFAULT_PROFILE)
    profile = project.profile(name)

    untrusted = flags.untrusted or untrusted_env(env) or profile.untrusted
    origins["untrusted"] = _untrusted_origin(flags.untrusted, untrusted_env(env), profile.untrusted)
    distrusted = untrusted and not project.trusted
    notes = _ignored(project) if distrusted else ()

    engine, origins["engine"] = pick(
        ("flag", flags.engine), ("env", _env_engine(env)), ("profile", profile.engine),
        ("project", project.engine), ("default", DEFAULT_ENGINE),
    )  # fmt: skip
    pull, origins["pull"] = pick(
        ("flag", flags.pull), ("profile", profile.pull), ("default", DEFAULT_PULL)
    )
    shims, origins["shims"] = pick(
        ("flag", flags.shims), ("profile", profile.shims), ("default", True)
    )
    lockfile, origins["lockfile"] = _lockfile(ctx, flags, project, distrusted)
    reserve_text, origins["disk-reserve"] = pick(
        ("flag", flags.reserve), ("env", env.get("ROCMENV_DISK_RESERVE", "").strip() or None),
        ("default", None),
    )  # fmt: skip
    registry_file = None if distrusted else project.registry
    origins["registry"] = _registry_origin(env, registry_file)
    host, origins["host"] = _host(env, project, distrusted)
    slurm = SlurmSettings()
    origins["slurm"] = "default"
    if project.slurm is not None and not distrusted:
        slurm = parse_slurm(project.slurm, f"[slurm] in {project.where}")
        origins["slurm"] = "project"
    policy = load_policy(env, find_checkout(ctx.cwd)) if untrusted else None
    origins["policy"] = "env" if untrusted and env.get("ROCMENV_POLICY", "").strip() else "default"
    return Settings(
        project=project,
        profile=profile,
        untrusted=untrusted,
        engine=engine,
        pull=pull,
        shims=shims,
        lockfile=lockfile,
        disk_reserve=parse_size(reserve_text) if reserve_text else DEFAULT_RESERVE,
        registry=env_registry(env, registry_file or RegistrySettings()),
        host=host,
        slurm=slurm,
        policy=policy,
        notes=notes,
        origins=origins,
        distrusted=distrusted,
    )


def _untrusted_origin(flag: bool, env: bool, profile: bool) -> Origin:
    return "flag" if flag else "env" if env else "profile" if profile else "default"


def _env_engine(env: Mapping[str, str]) -> EngineName | None:
    value = env.get("ROCMENV_ENGINE", "").strip()
    if not value:
        return None
    if value not in ENGINE_NAMES:
        from rocmenv.errors import UsageError

        raise UsageError(
            f"ROCMENV_ENGINE={value!r} is not an engine",
            hint=f"use one of: {', '.join(ENGINE_NAMES)}",
        )
    return value


def _ignored(project: Project) -> tuple[str, ...]:
    """The note that says what untrusted mode did not read from the checkout's file (only a
    file is ever distrusted: the built-ins are trusted)."""
    assert project.path is not None
    name = project.path.name
    notes = []
    ignored = [f"[{key}]" for key, raw in (("registry", project.registry), ("host", project.host))
               if raw is not None]  # fmt: skip
    if ignored:
        notes.append(f"ignored from the checkout's {name}: " + " and ".join(ignored)
                     + " (mirrors, insecure registries and host roots come only from trusted "
                     "input)")  # fmt: skip
    slurm = ["[slurm]"] if project.slurm is not None else []
    slurm += [f"[suites.{s}.slurm]" for s, raw in project.suites.items()
              if isinstance(raw, dict) and "slurm" in raw]  # fmt: skip
    if slurm:
        notes.append(f"ignored from the checkout's {name}: {', '.join(slurm)} (partition, "
                     "account and srun/sbatch arguments come only from trusted input)")  # fmt: skip
    return tuple(notes)


def _lockfile(
    ctx: Context, flags: Flags, project: Project, distrusted: bool
) -> tuple[Path, Origin]:
    """``--lock`` or ``ROCMENV_LOCKFILE`` (relative to the working directory), else the
    file's ``lockfile`` (relative to it; inside the project when the file is distrusted)."""
    given, origin = pick(
        ("flag", flags.lockfile), ("env", _path(ctx.env.get("ROCMENV_LOCKFILE"))),
        ("project", _path(project.lockfile)), ("default", Path(DEFAULT_LOCKFILE)),
    )  # fmt: skip
    path: Path = given
    if origin in ("flag", "env"):  # trusted input, relative to the working directory
        return ctx.cwd / path, origin
    path = project.root / path  # an absolute one stays as it is
    if distrusted and not is_under(os.path.realpath(path), os.path.realpath(project.root)):
        raise ConfigError(
            f"lockfile in {project.where} points outside the project ({path}): refused in "
            "untrusted mode",
            hint="keep rocmenv.lock inside the project, or name a lockfile from trusted "
            "input (ROCMENV_LOCKFILE)",
        )
    return path, origin


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _registry_origin(env: Mapping[str, str], file: RegistrySettings | None) -> Origin:
    names = ("ROCMENV_MIRRORS", "ROCMENV_INSECURE_REGISTRIES", "ROCMENV_REGISTRY_TIMEOUT",
             "ROCMENV_REGISTRY_RETRIES", "ROCMENV_REGISTRY_DEADLINE")  # fmt: skip
    if any(env.get(n) for n in names):
        return "env"
    return "project" if file is not None else "default"


def _host(
    env: Mapping[str, str], project: Project, distrusted: bool
) -> tuple[HostSettings, Origin]:
    origin: Origin = "default"
    host = HostSettings()
    if project.host is not None and not distrusted:
        host = host_settings(project.host, project.root, project.where)
        origin = "project"
    sysfs, dev = env.get("ROCMENV_SYSFS_ROOT"), env.get("ROCMENV_DEV_ROOT")
    if sysfs or dev:
        origin = "env"
        host = HostSettings(
            sysfs_root=Path(sysfs) if sysfs else host.sysfs_root,
            dev_root=Path(dev) if dev else host.dev_root,
        )
    return host, origin
