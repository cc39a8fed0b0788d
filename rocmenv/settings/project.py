"""The project file (``rocmenv.toml`` or ``[tool.rocmenv]``) as read, with the site and user
files under it (:mod:`rocmenv.settings.site`; their profiles are the bases the file's extend):
every table validated, nothing from the environment or the command line applied yet — that is
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

    [host]                            # rocmenv.settings.host
    sysfs-root = "/sys"               # where class/kfd/kfd/topology lives
    dev-root = "/dev"                 # where kfd and dri/ live
    gpus-from = "gpus.txt"            # the GPU pool: --device flags or node paths (container/pool)
    podinfo-devices = "/etc/podinfo/gha-render-devices"  # a pod's list, when it exists

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
    gpu-devices = "nodes"             # nodes: /dev/kfd + the GPUs' nodes; cdi: amd.com/gpu=N
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
    pids-limit = 4096                 # processes and threads (0 or -1: no limit)
    ulimits = { memlock = -1, stack = 67108864, nofile = "65535:65535" }
    privileged = false                # opt-in, warned
    mounts = ["/data/ci:/data/ci", { source = "/data/x", target = "/x", readonly = true, optional = true }]
    env = { HF_HUB_OFFLINE = "1" }    # fixed values
    pass-env = ["HIP_VISIBLE_DEVICES"]  # passed from the host when set there
    secret-env = ["WANDB_API_KEY"]    # passed too, but never in untrusted mode
    keep-proxy-env = false            # http(s)_proxy/no_proxy are dropped unless true
    workdir = "/workspace"            # default: the current directory (inside the mounted checkout)
    mount-checkout = true             # mount the checkout at the same path
    output = "/rocmenv-output"        # what --output copies out ($ROCMENV_OUTPUT; relative:
                                      #   to the working directory): rocmenv.run.output
    shims = true                      # inject the shim launcher
    untrusted = false                 # true: the untrusted policy (rocmenv.container.guard); false
                                      #   cannot switch off --untrusted/ROCMENV_UNTRUSTED
    pull = "missing"                  # always | missing | never
    engine = "docker-api"             # per-profile engine choice
    labels = { team = "ml-infra" }

    [labels]                          # PR labels and cadences -> labels: rocmenv.suite.labels
    [suites.NAME]                     # test suites: rocmenv.suite.model
    [slurm]                           # rocmenv.settings.slurm (also [suites.NAME.slurm])
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError
from rocmenv.record import field, record
from rocmenv.settings.choices import ENGINE_NAMES
from rocmenv.settings.declared import keys
from rocmenv.settings.files import file_trusted, find_project_file
from rocmenv.settings.keys import as_choice, as_str, check_keys, did_you_mean
from rocmenv.settings.profile_set import PROFILE_NAME_RE, build_profiles
from rocmenv.settings.profiles import BUILTIN_PROFILES, Profile
from rocmenv.settings.registry import registry_settings
from rocmenv.settings.site import SiteFile, load_site_files

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, cast

    from rocmenv.settings.choices import EngineName
else:
    from rocmenv.typecheck import cast

TOP_KEYS = keys("top")  # declared in rocmenv.settings.declared


@record
class Project:
    """The project file as written (or the built-ins when there is none)."""

    path: Path | None  # the file read, if any
    root: Path  # the project root: the file's directory, else the working directory
    # A file outside the checkout named by --config/ROCMENV_CONFIG, or no file (built-ins):
    # what untrusted mode may believe (docs/security.md "Running untrusted code").
    trusted: bool = True
    default_profile: str | None = None  # the file's default-profile
    lockfile: str | None = None  # the file's lockfile, as written
    engine: EngineName | None = None
    registry: Any = None  # [registry] as written (validated); layered by the resolver
    host: Any = None  # [host] as written; validated when it counts (resolve)
    slurm: Any = None  # [slurm] as written; parsed when it counts (resolve)
    suites: Mapping[str, Any] = field(default_factory=dict)  # [suites.*] as written
    labels: Any = None  # [labels] as written; parsed with the suites (rocmenv.suite.labels)
    # the built-ins, the user's and the site's profiles, then the file's (profile_set)
    profiles: tuple[tuple[str, Profile], ...] = tuple(BUILTIN_PROFILES.items())
    sites: tuple[SiteFile, ...] = ()  # the site and user files read (trusted), site first

    @property
    def trusted_sources(self) -> tuple[str, ...]:
        """The ``Profile.source`` values untrusted mode believes: the built-ins, the site and
        user files, and the project file when it is trusted."""
        files = [str(s.path) for s in self.sites]
        if self.trusted and self.path is not None:
            files.append(str(self.path))
        return ("built-in", *files)

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
    """Find and read the project file (and the site and user files under it): every key
    checked, the profiles built (``extends`` resolved), ``[registry]`` validated;
    ``[host]`` and ``[slurm]`` kept as written until the resolver knows whether they
    count."""
    sites = load_site_files(ctx.env)
    path, table = find_project_file(ctx)
    where = str(path) if path else "configuration"
    check_keys(table, TOP_KEYS, where)
    engine = table.get("engine")
    default_profile = table.get("default-profile")
    lockfile = table.get("lockfile")
    suites = table.get("suites", {})
    if not isinstance(suites, dict):
        raise ConfigError(f"suites in {where} must be a table of tables")
    for name in suites:
        if not PROFILE_NAME_RE.fullmatch(name):  # it names the directory of the suite's logs
            raise ConfigError(
                f"suite name {name!r} in {where} is not a name",
                hint="suite names match [A-Za-z0-9][A-Za-z0-9._-]* (letters, digits, . _ -), "
                "as profile names do",
            )
    return Project(
        path=path,
        root=path.parent if path else ctx.cwd,
        trusted=file_trusted(ctx, path),
        default_profile=as_str(default_profile, f"default-profile in {where}")
        if default_profile is not None
        else None,
        lockfile=as_str(lockfile, f"lockfile in {where}") if lockfile is not None else None,
        engine=cast("EngineName", as_choice(engine, ENGINE_NAMES, f"engine in {where}"))
        if engine is not None
        else None,
        registry=_validated_registry(table.get("registry"), where),
        host=table.get("host"),
        slurm=table.get("slurm"),
        suites=suites,
        labels=table.get("labels"),
        profiles=tuple(_profiles(sites, table.get("profiles", {}), where, path).items()),
        sites=sites,
    )


def _validated_registry(table: Any, where: str) -> Any:
    if table is not None:
        registry_settings(table, f"[registry] in {where}")
    return table


def _profiles(
    sites: tuple[SiteFile, ...], raw: Any, where: str, path: Path | None
) -> dict[str, Profile]:
    """Built-ins, then the user's profiles, then the site's, then the project file's: each
    level refines a same-named profile from below (``rocmenv.settings.profile_set``)."""
    profiles: dict[str, Profile] = dict(BUILTIN_PROFILES)
    for site in sorted(sites, key=lambda s: s.origin == "site"):  # user first, site over it
        if site.profiles is not None:
            profiles = build_profiles(site.profiles, site.where, site.path, profiles)
    if raw != {}:
        assert path is not None  # profiles only come from a file
        profiles = build_profiles(raw, where, path, profiles)
    return profiles
