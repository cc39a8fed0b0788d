"""Every setting resolved once, by one cascade, into one frozen :class:`Settings`.

The order (docs/configuration.md "Precedence")::

    command-line flag > ROCMENV_* variable > the profile > site file > user file > project file
    > default

``None`` (not given) and ``auto`` at any level defer to the next. Not every setting has every
level; :data:`CASCADE` says which it has (and ``rocmenv config show --origin`` reports the
level every value came from). Tables (``[registry]``, ``[host]``, ``[slurm]``, ``[policy]``)
cascade key by key: each level's table is read over the one below it. The site file
(``/etc/rocmenv/config.toml``) and the user file (``$XDG_CONFIG_HOME/rocmenv/config.toml``)
are :mod:`rocmenv.settings.site`'s; they are trusted (outside the checkout) and count in
untrusted mode too.

**Untrusted mode** is the one setting that does not cascade: any source turns it on
(``--untrusted``, ``ROCMENV_UNTRUSTED``, the selected profile's ``untrusted = true``), none
turns it off. When it is on and the project file is the checkout's (found in it, or named
inside it), the checkout's ``[registry]``, ``[host]``, ``[slurm]`` and ``[suites.*.slurm]``
are ignored (and said so in :attr:`Settings.notes`) and its ``lockfile`` must stay inside the
project; a site or user file inside the checkout is refused. Those rules are applied here
and nowhere else: every command takes the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from rocmenv.context import Context, find_checkout
from rocmenv.errors import ConfigError
from rocmenv.hostfs import is_under
from rocmenv.record import field, record, replace
from rocmenv.settings.choices import ENGINE_NAMES
from rocmenv.settings.declared import VARIABLES, default, setting, variables
from rocmenv.settings.host import HostSettings, host_settings
from rocmenv.settings.images import ImageCacheSettings
from rocmenv.settings.keys import parse_size
from rocmenv.settings.policy import (
    DEFAULT_POLICY,
    Policy,
    policy_file,
    policy_from_table,
    untrusted_env,
)
from rocmenv.settings.profiles import Profile
from rocmenv.settings.project import Project, load_project
from rocmenv.settings.registry import (
    REGISTRY_ENV,
    RegistrySettings,
    env_registry,
    registry_settings,
)
from rocmenv.settings.site import SiteFile
from rocmenv.settings.slurm import SlurmSettings, parse_slurm

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final, Literal, TypeVar

    from rocmenv.settings.choices import EngineName, PullPolicy

    Origin = Literal["flag", "env", "profile", "site", "user", "project", "default"]

    T = TypeVar("T")

    #: (level, the table as written, where it was written, the directory it is relative to)
    Layer = tuple[Origin, Any, str, Path]

#: The levels, highest first (docs/configuration.md "Precedence").
ORIGINS: Final[tuple[Origin, ...]] = (
    "flag", "env", "profile", "site", "user", "project", "default",
)  # fmt: skip

if not TYPE_CHECKING:  # the alias at run time, for whoever asks (the package's surface)
    from rocmenv.typecheck import literal

    __getattr__ = literal({"Origin": ORIGINS})

# the defaults and variables of rocmenv.settings.declared, named for the cascade below
DEFAULT_PROFILE: Final[str] = default("top", "default-profile")
DEFAULT_ENGINE: Final[EngineName] = default("top", "engine")
DEFAULT_PULL: Final[PullPolicy] = "missing"
DEFAULT_LOCKFILE: Final[str] = default("top", "lockfile")
PROFILE_ENV: Final = setting("top", "default-profile").env or ""
ENGINE_ENV: Final = setting("top", "engine").env or ""
LOCKFILE_ENV: Final = setting("top", "lockfile").env or ""
RESERVE_ENV: Final = "ROCMENV_DISK_RESERVE"
#: bytes kept free after a pull unless configured
DEFAULT_RESERVE: Final = parse_size(next(v.default for v in VARIABLES if v.name == RESERVE_ENV))

#: Which levels each setting has: (flag, variable, profile key, site and user key, project
#: key). Tables cascade key by key.
CASCADE: Mapping[str, tuple[str | None, str | None, str | None, str | None, str | None]] = {
    "profile": ("--profile", "ROCMENV_PROFILE", None, None, "default-profile"),
    "engine": ("--engine", "ROCMENV_ENGINE", "engine", "engine", "engine"),
    "pull": ("--pull", None, "pull", None, None),
    "shims": ("--no-shims", None, "shims", None, None),
    "lockfile": ("--lock", "ROCMENV_LOCKFILE", None, None, "lockfile"),
    "disk-reserve": ("--reserve", "ROCMENV_DISK_RESERVE", None, None, None),
    "untrusted": ("--untrusted", "ROCMENV_UNTRUSTED", "untrusted", None, None),
    "registry": (None, "ROCMENV_MIRRORS …", None, "[registry]", "[registry]"),
    "host": (
        None,
        "ROCMENV_SYSFS_ROOT / ROCMENV_DEV_ROOT / ROCMENV_GPUS_FROM / ROCMENV_PODINFO_DEVICES",
        None,
        "[host]",
        "[host]",
    ),
    "slurm": (None, None, None, "[slurm]", "[slurm]"),
    "policy": (None, "ROCMENV_POLICY", None, "[policy]", None),
    "images": (None, "ROCMENV_IMAGE_CACHE …", None, "[images]", None),
}
HOST_ENV: Final = variables("host")


@record
class Flags:
    """What the command line says; ``None`` is "not given" (the next level decides)."""

    profile: str | None = None
    engine: EngineName | None = None
    pull: PullPolicy | None = None
    shims: bool | None = None  # --no-shims: False
    lockfile: Path | None = None  # --lock, relative to the working directory
    reserve: str | None = None  # --reserve SIZE
    untrusted: bool = False


@record
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
    images: ImageCacheSettings  # the runner image cache (site, user, environment only)
    notes: tuple[str, ...] = ()  # what untrusted mode ignored
    # the level each value came from: "engine", …, and "registry.timeout", "slurm.partition"
    # … key by key (the table's own name: its highest level)
    origins: Mapping[str, Origin] = field(default_factory=dict)
    distrusted: bool = False  # untrusted, and the project file is the checkout's

    @property
    def root(self) -> Path:
        return self.project.root

    def slurm_for(self, suite: str) -> SlurmSettings:
        """``[suites.NAME.slurm]`` over the project's ``[slurm]``, under the user's and the
        site's; a distrusted checkout's tables do not count."""
        return slurm_settings(self.project, self.distrusted, suite)


def pick(*levels: tuple[Origin, Any]) -> tuple[Any, Origin]:
    """The first level that says something other than ``None``/``auto`` (the last one is the
    default and always answers). Callers annotate what they receive."""
    for origin, value in levels:
        if value is not None and value != "auto":
            return value, origin
    origin, value = levels[-1]
    return value, origin


def layered(
    layers: list[Layer],
    read: Callable[[Any, str, Path, T], T],
    base: T,
    origins: dict[str, Origin] | None = None,
    prefix: str = "",
) -> T:
    """Each layer's table read over the ones below it (``layers`` lowest first), recording in
    ``origins`` the level every key it sets came from."""
    value = base
    for origin, table, where, root in layers:
        if table is None:
            continue
        value = read(table, where, root, value)
        if origins is not None and isinstance(table, dict):
            origins.update((f"{prefix}.{key}", origin) for key in table)
    return value


def site_layers(project: Project, name: str) -> list[Layer]:
    """The user's then the site's table ``name`` (lowest first)."""
    by_origin = sorted(project.sites, key=lambda s: s.origin == "site")
    return [(s.origin, getattr(s, name), f"[{name}] in {s.where}", s.path.parent)
            for s in by_origin]  # fmt: skip


def _project_layer(project: Project, table: Any, name: str, distrusted: bool) -> list[Layer]:
    if distrusted or table is None:
        return []
    return [("project", table, f"[{name}] in {project.where}", project.root)]


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
        ("flag", flags.profile), ("env", env.get(PROFILE_ENV) or None),
        ("project", project.default_profile), ("default", DEFAULT_PROFILE),
    )  # fmt: skip
    # the default must exist even when a flag chose another profile (a did-you-mean for typos)
    project.profile(env.get(PROFILE_ENV) or project.default_profile or DEFAULT_PROFILE)
    profile = project.profile(name)

    untrusted = flags.untrusted or untrusted_env(env) or profile.untrusted
    origins["untrusted"] = _untrusted_origin(flags.untrusted, untrusted_env(env), profile.untrusted)
    distrusted = untrusted and not project.trusted
    notes = _ignored(project) if distrusted else ()
    if untrusted:
        _refuse_site_files_in_checkout(project.sites, find_checkout(ctx.cwd))

    engine, origins["engine"] = pick(
        ("flag", flags.engine), ("env", _env_engine(env)), ("profile", profile.engine),
        *((s.origin, s.engine) for s in project.sites), ("project", project.engine),
        ("default", DEFAULT_ENGINE),
    )  # fmt: skip
    pull, origins["pull"] = pick(
        ("flag", flags.pull), ("profile", profile.pull), ("default", DEFAULT_PULL)
    )
    shims, origins["shims"] = pick(
        ("flag", flags.shims), ("profile", profile.shims), ("default", True)
    )
    lockfile, origins["lockfile"] = _lockfile(ctx, flags, project, distrusted)
    reserve_text, origins["disk-reserve"] = pick(
        ("flag", flags.reserve), ("env", env.get(RESERVE_ENV, "").strip() or None),
        ("default", None),
    )  # fmt: skip
    registry = _registry(env, project, distrusted, origins)
    host = _host(env, project, distrusted, origins)
    slurm = slurm_settings(project, distrusted, None, origins)
    policy = resolve_policy(ctx, project, origins) if untrusted else None
    images = _images(env, project, origins)
    for table in ("registry", "host", "slurm", "policy", "images"):
        origins[table] = _highest(origins, table)
    return Settings(
        project=project,
        profile=profile,
        untrusted=untrusted,
        engine=engine,
        pull=pull,
        shims=shims,
        lockfile=lockfile,
        disk_reserve=parse_size(reserve_text) if reserve_text else DEFAULT_RESERVE,
        registry=registry,
        host=host,
        slurm=slurm,
        policy=policy,
        images=images,
        notes=notes,
        origins=origins,
        distrusted=distrusted,
    )


def _registry(
    env: Mapping[str, str], project: Project, distrusted: bool, origins: dict[str, Origin]
) -> RegistrySettings:
    """default < project file < user < site (key by key) < ``ROCMENV_*`` (field by field)."""
    layers = _project_layer(project, project.registry, "registry", distrusted)
    registry = layered(
        [*layers, *site_layers(project, "registry")],
        lambda table, where, _root, base: registry_settings(table, where, base),
        RegistrySettings(), origins, "registry",
    )  # fmt: skip
    origins.update((f"registry.{key}", "env") for var, key in REGISTRY_ENV.items() if env.get(var))
    return env_registry(env, registry)


def _images(
    env: Mapping[str, str], project: Project, origins: dict[str, Origin]
) -> ImageCacheSettings:
    """default < user < site (key by key) < ``ROCMENV_IMAGE_CACHE`` … (never the project's)."""
    from rocmenv.settings.images import IMAGES_ENV, env_image_cache, image_cache_settings

    images = layered(
        site_layers(project, "images"),
        lambda table, where, root, base: image_cache_settings(table, where, root, base),
        ImageCacheSettings(), origins, "images",
    )  # fmt: skip
    origins.update((f"images.{key}", "env") for var, key in IMAGES_ENV.items() if env.get(var))
    return env_image_cache(env, images)


def _host(
    env: Mapping[str, str], project: Project, distrusted: bool, origins: dict[str, Origin]
) -> HostSettings:
    layers = _project_layer(project, project.host, "host", distrusted)
    host = layered(
        [*layers, *site_layers(project, "host")],
        lambda table, where, root, base: host_settings(table, root, where, base),
        HostSettings(), origins, "host",
    )  # fmt: skip
    over = {key: env[var] for var, key in HOST_ENV.items() if env.get(var)}  # a path each
    origins.update((f"host.{key}", "env") for key in over)
    return replace(host, **{key.replace("-", "_"): Path(value) for key, value in over.items()})


def slurm_settings(
    project: Project,
    distrusted: bool,
    suite: str | None = None,
    origins: dict[str, Origin] | None = None,
) -> SlurmSettings:
    """default < the project's ``[slurm]`` < its ``[suites.NAME.slurm]`` < user < site."""
    layers = _project_layer(project, project.slurm, "slurm", distrusted)
    raw = project.suites.get(suite) if suite is not None else None
    if isinstance(raw, dict) and "slurm" in raw and not distrusted:
        layers.append(("project", raw["slurm"], f"[suites.{suite}.slurm] in {project.where}",
                       project.root))  # fmt: skip
    return layered(
        [*layers, *site_layers(project, "slurm")],
        lambda table, where, _root, base: parse_slurm(table, where, base),
        SlurmSettings(), origins, "slurm",
    )  # fmt: skip


def resolve_policy(
    ctx: Context, project: Project, origins: dict[str, Origin] | None = None
) -> Policy:
    """The untrusted policy: built-in < the user's ``[policy]`` < the site's < the file
    ``ROCMENV_POLICY`` names, key by key (``config show`` asks for it in trusted mode too)."""
    layers = site_layers(project, "policy")
    named = policy_file(ctx.env, find_checkout(ctx.cwd))
    if named is not None:
        layers.append(("env", named[0], f"policy file {named[1]}", named[1].parent))
    return layered(
        layers,
        lambda table, where, _root, base: policy_from_table(
            table, where, base, source=where.removeprefix("policy file ")
        ),
        DEFAULT_POLICY, origins, "policy",
    )  # fmt: skip


def _highest(origins: Mapping[str, Origin], table: str) -> Origin:
    """A table's origin: the highest level any of its keys came from."""
    found = {o for k, o in origins.items() if k.startswith(f"{table}.")}
    return next((o for o in ORIGINS if o in found), "default")


def _refuse_site_files_in_checkout(sites: tuple[SiteFile, ...], checkout: Path) -> None:
    for site in sites:
        if is_under(os.path.realpath(site.path), os.path.realpath(checkout)):
            raise ConfigError(
                f"the {site.origin} configuration {site.path} is inside the checkout {checkout}: "
                "in an untrusted job that file is the pull request's, not yours",
                hint="keep site and user configuration outside the checkout (check "
                "XDG_CONFIG_HOME, HOME and ROCMENV_SITE_CONFIG)",
            )


def _untrusted_origin(flag: bool, env: bool, profile: bool) -> Origin:
    return "flag" if flag else "env" if env else "profile" if profile else "default"


def _env_engine(env: Mapping[str, str]) -> EngineName | None:
    value = env.get(ENGINE_ENV, "").strip()
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
        ("flag", flags.lockfile), ("env", _path(ctx.env.get(LOCKFILE_ENV))),
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
