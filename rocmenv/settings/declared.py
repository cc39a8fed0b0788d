"""Every setting declared once: its table and key, the JSON Schema of its value, its default,
the ``ROCMENV_*`` variable and the flag that override it, and one line of help — and every
other ``ROCMENV_*`` variable rocmenv reads (:data:`VARIABLES`), with what it does or why it is
rocmenv's own (tests, benchmarks, its own children).

What reads this table: the readers take their key tables (``REGISTRY_KEYS`` = :func:`keys`),
their defaults (:func:`default`) and their variables (:func:`variables`) from it; ``rocmenv
config schema`` its descriptions and defaults (:mod:`rocmenv.settings.schema`); ``rocmenv
config docs`` (``docs/settings.md``) its table. A setting is added here, and only here.

A profile key's default is what a profile inherits when it sets nothing: the built-in ``rocm``
profile's value (:data:`INHERITED`; the schema shows that profile's value). The suite
tables (``[suites.NAME]``, ``[labels]``) are the suite layer's: :mod:`rocmenv.suite.schema`
declares them the same way, with this :class:`Setting`.
"""

from __future__ import annotations

from rocmenv.record import record
from rocmenv.settings.choices import (
    ENGINE_NAMES,
    FAMILIES,
    GPU_DEVICE_NAMINGS,
    GPU_ISOLATIONS,
    GPU_REQUEST_STYLES,
    PACKINGS,
    PULL_POLICIES,
)

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final

Schema = dict[str, "Any"]

STR: Final[Schema] = {"type": "string"}
BOOL: Final[Schema] = {"type": "boolean"}
STR_LIST: Final[Schema] = {"type": "array", "items": STR}
STR_TABLE: Final[Schema] = {"type": "object", "additionalProperties": STR}
TABLE: Final[Schema] = {"type": "object"}  # a table whose own keys are declared below
SIZE: Final[Schema] = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?[bkmgBKMG]?$"},
    ]
}
#: ``memory = "75%"``: a share of this host's memory (or a size, as Docker writes them).
PERCENT_RE: Final = r"(100|[1-9][0-9]?)(\.[0-9]+)?%"
CAP_SIZE: Final[Schema] = {"anyOf": [SIZE, {"type": "string", "pattern": f"^{PERCENT_RE}$"}]}
SECONDS_DAY: Final[Schema] = {"type": "number", "exclusiveMinimum": 0, "maximum": 86400}
POSITIVE: Final[Schema] = {"type": "number", "exclusiveMinimum": 0}


def enum(values: tuple[str, ...]) -> Schema:
    return {"type": "string", "enum": list(values)}


def count(top: int) -> Schema:
    return {"type": "integer", "minimum": 0, "maximum": top}


#: A profile key's default: what the profile it extends says (at the bottom, built-in rocm).
INHERITED: Final = "inherited"


@record
class Setting:
    """One key of one table of the configuration files."""

    table: str  # "top" (the file's own keys), "registry", "host", "slurm", "policy", "site", …
    key: str
    schema: Schema  # the JSON Schema of the value (TABLE: the table's keys are declared)
    help: str  # one line, plain text: what it does, and what unset means when it has no default
    default: Any = None  # a JSON value; None: not set; INHERITED for profile keys
    env: str | None = None  # the ROCMENV_* variable over every file (trusted input)
    flag: str | None = None  # the command-line flag over everything

    @property
    def name(self) -> str:
        """How the docs and ``config show`` name it: ``registry.timeout``, ``engine``."""
        return self.key if self.table == "top" else f"{self.table}.{self.key}"


@record
class Variable:
    """A ``ROCMENV_*`` variable that is not a key's override (those are :attr:`Setting.env`)."""

    name: str
    help: str
    default: str = ""  # as written in the environment; "" when unset means off/none
    flag: str | None = None
    internal: str | None = None  # why it is rocmenv's own: not a user's setting


def _s(table: str, key: str, schema: Schema, help: str, default: Any = None, **kw: Any) -> Setting:
    return Setting(table=table, key=key, schema=schema, help=help, default=default, **kw)


def _p(key: str, schema: Schema, help: str) -> Setting:
    return Setting(table="profile", key=key, schema=schema, help=help, default=INHERITED)


#: Size caps (bytes) on registry responses by kind, enforced while reading.
RESPONSE_LIMITS: Final[dict[str, int]] = {
    "tags": 16 * 1024 * 1024,
    "manifest": 4 * 1024 * 1024,
    "index": 4 * 1024 * 1024,
    "config": 8 * 1024 * 1024,
    "token": 1024 * 1024,
    "error": 1024 * 1024,
}
#: Caps (bytes) on what ``inspect``, ``diff`` and ``drift --inspect`` read from an image's
#: layers: decompressed bytes of one layer and of one image (the largest rocm/sgl-dev images
#: are ~40 GB unpacked: both leave room), and what is kept of one image's layers as their
#: index, together (a real image keeps well under 1 MiB).
CONTENT_LIMITS: Final[dict[str, int]] = {
    "layer": 64 << 30,
    "image": 128 << 30,
    "layer-index": 32 << 20,
}
LIMIT_HELP: Final[dict[str, str]] = {
    "tags": "bytes of one page of a tag listing",
    "manifest": "bytes of an image manifest",
    "index": "bytes of a manifest index (multi-platform)",
    "config": "bytes of an image's config blob",
    "token": "bytes of a token answer",
    "error": "bytes of an error body",
    "layer": "decompressed bytes of one layer read by inspect, diff, drift --inspect",
    "image": "decompressed bytes of one image's layers read by inspect, diff, drift --inspect",
    "layer-index": "bytes kept of one image's layers as their index",
}
#: the largest value each kind of limit takes
LIMIT_MAX: Final[dict[str, int]] = {
    **dict.fromkeys(RESPONSE_LIMITS, 1 << 32),
    **dict.fromkeys(CONTENT_LIMITS, 1 << 40),
}

MOUNT_KEYS: Final = ("source", "target", "readonly", "optional")
MOUNT_SETTINGS: Final[tuple[Setting, ...]] = (
    _s("mount", "source", STR, "the host path (relative: to the file's directory; ~ expands)"),
    _s("mount", "target", {"type": "string", "pattern": "^/"}, "the path in the container"),
    _s("mount", "readonly", BOOL, "mounted read-only", False),
    _s("mount", "optional", BOOL, "left out when the source does not exist on this host", False),
)

_TOP: Final = (
    _s("top", "default-profile", STR, "the profile used when none is named", "rocm",
       env="ROCMENV_PROFILE", flag="--profile"),
    _s("top", "lockfile", STR, "the lockfile, relative to the config file", "rocmenv.lock",
       env="ROCMENV_LOCKFILE", flag="--lock"),
    _s("top", "engine", enum(ENGINE_NAMES), "the container engine (auto: docker's API socket, "
       "then the docker CLI, then podman)", "auto", env="ROCMENV_ENGINE", flag="--engine"),
    _s("top", "registry", TABLE, "registry access: mirrors, insecure hosts, timeouts, caps "
       "(ignored from an untrusted checkout)", {}),
    _s("top", "host", TABLE, "where the GPU topology and device nodes are read, and the GPU "
       "pool (ignored from an untrusted checkout)", {}),
    _s("top", "profiles", TABLE, "named container profiles ([profiles.NAME])", {}),
    _s("top", "suites", TABLE, "test suites ([suites.NAME]): docs/suites.md", {}),
    _s("top", "slurm", TABLE, "Slurm partition, account and GPU requests for --backend slurm "
       "(ignored from an untrusted checkout)", {}),
    _s("top", "labels", TABLE, "how pull request labels and cadences select tests", {}),
)  # fmt: skip

_PROFILE: Final = (
    _p("extends", STR, "the profile this one refines: a built-in (rocm, cpu) or another; "
       "default: the same name from the site/user files, else rocm"),
    _p("description", STR, "one line saying what the profile is for"),
    _p("image", STR, "the image: a repository, or repository:tag or @digest"),
    _p("tag", STR, "an exact tag (instead of the constraints below)"),
    _p("sglang", STR, "tag constraint: a PEP 440 specifier on the tag's SGLang version"),
    _p("rocm", STR, "tag constraint: ROCm X.Y[.Z]"),
    _p("gpu", STR, "tag constraint: the GPU family of the tag (mi30x, mi35x, or a gfx target)"),
    _p("family", enum(FAMILIES), "tag constraint: the tag family"),
    _p("before", {"type": "string", "pattern": "^20[0-9]{6}$"},
       "tag constraint: only tags dated before this day (YYYYMMDD)"),
    _p("gpus", STR, "which GPUs: all, none, 0,1, 0-3, or UUIDs"),
    _p("gpu-isolation", enum(GPU_ISOLATIONS),
       "devices: only the selected GPUs' nodes; env: every node, the variables select"),
    _p("gpu-env", STR_LIST, "variables set to the selected GPUs (HIP_VISIBLE_DEVICES …)"),
    _p("gpu-devices", enum(GPU_DEVICE_NAMINGS),
       "nodes: /dev/kfd and the GPUs' nodes; cdi: CDI names (amd.com/gpu=N)"),
    _p("devices", STR_LIST, "more device nodes"),
    _p("group-add", STR_LIST, "supplementary groups (video, render)"),
    _p("cap-add", STR_LIST, "capabilities added"),
    _p("cap-drop", STR_LIST, "capabilities dropped"),
    _p("security-opt", STR_LIST, "security options (seccomp=unconfined …)"),
    _p("ipc", STR, "the IPC namespace (host)"),
    _p("network", STR, "the network (host, bridge, none …)"),
    _p("shm-size", SIZE, "the size of /dev/shm (32g)"),
    _p("memory", SIZE, "the memory limit (0: none)"),
    _p("memory-swap", SIZE, "the memory+swap limit (0: none)"),
    _p("pids-limit", {"type": "integer", "minimum": -1},
       "processes and threads of the container (0 or -1: no limit; unset: the engine's)"),
    _p("ulimits", {"type": "object", "additionalProperties": {"type": ["integer", "string"]}},
       "ulimits: name = -1 | N | \"SOFT:HARD\""),
    _p("privileged", BOOL, "a privileged container (opt-in, warned; refused untrusted)"),
    _p("mounts", {"type": "array"}, "bind mounts: \"SRC:DST[:ro]\" or {source, target, "
       "readonly, optional}"),
    _p("env", STR_TABLE, "variables with fixed values"),
    _p("pass-env", STR_LIST, "variables passed from the host when set there"),
    _p("secret-env", STR_LIST, "secret variables passed from the host, never in untrusted mode"),
    _p("keep-proxy-env", BOOL, "keep http(s)_proxy/no_proxy (dropped unless true)"),
    _p("workdir", STR, "the working directory (unset: the current one, in the mounted checkout)"),
    _p("mount-checkout", BOOL, "mount the checkout at the same path"),
    _p("output", {"type": "string", "minLength": 1}, "the container directory --output copies "
       "out ($ROCMENV_OUTPUT; relative: to the working directory)"),
    Setting(table="profile", key="shims", schema=BOOL, default=INHERITED, flag="--no-shims",
            help="inject the shim launcher (unset: on)"),
    Setting(table="profile", key="untrusted", schema=BOOL, default=INHERITED,
            env="ROCMENV_UNTRUSTED", flag="--untrusted",
            help="the untrusted policy applies (no source can switch it off once on)"),
    Setting(table="profile", key="pull", schema=enum(PULL_POLICIES), default=INHERITED,
            flag="--pull", help="when the image is pulled (unset: missing)"),
    Setting(table="profile", key="engine", schema=enum(ENGINE_NAMES), default=INHERITED,
            flag="--engine", help="this profile's engine (over the file's and the site's)"),
    _p("labels", STR_TABLE, "labels on the container"),
)  # fmt: skip

_REGISTRY: Final = (
    _s("registry", "mirrors", {"type": "object", "additionalProperties": STR_LIST},
       "registry = [mirror, …]: tried in order, then the registry itself", {},
       env="ROCMENV_MIRRORS"),
    _s("registry", "insecure", STR_LIST, "hosts spoken to over plain HTTP (loopback always is)",
       [], env="ROCMENV_INSECURE_REGISTRIES"),
    _s("registry", "timeout", SECONDS_DAY, "seconds to connect and between reads", 30.0,
       env="ROCMENV_REGISTRY_TIMEOUT"),
    _s("registry", "retries", count(20), "retries on 429, 5xx and connection errors", 4,
       env="ROCMENV_REGISTRY_RETRIES"),
    _s("registry", "request-deadline", SECONDS_DAY, "seconds for one request, retries "
       "excluded", 120.0),
    _s("registry", "command-deadline", SECONDS_DAY, "seconds for every request of one command",
       600.0, env="ROCMENV_REGISTRY_DEADLINE"),
    _s("registry", "max-pages", count(1_000_000), "tag-list pages followed", 1000),
    _s("registry", "limits", TABLE, "size caps in bytes on what registries send, by kind",
       {**RESPONSE_LIMITS, **CONTENT_LIMITS}),
    _s("registry", "proxy", STR, "the proxy URL for registries (over HTTPS_PROXY/HTTP_PROXY/"
       "ALL_PROXY; unset or empty: those)"),
    _s("registry", "no-proxy", STR_LIST, "hosts added to NO_PROXY", []),
    _s("registry", "pull-from-mirror", BOOL, "run and pull fetch through the mirror that "
       "served the pin, not the canonical registry", False, env="ROCMENV_PULL_FROM_MIRROR"),
    _s("registry", "ratelimit-warning", count(1_000_000), "warn when a registry's "
       "ratelimit-remaining falls under this", 10),
)  # fmt: skip

_HOST: Final = (
    _s("host", "sysfs-root", STR, "where class/kfd/kfd/topology is read", "/sys",
       env="ROCMENV_SYSFS_ROOT"),
    _s("host", "dev-root", STR, "where kfd and dri/ are", "/dev", env="ROCMENV_DEV_ROOT"),
    _s("host", "gpus-from", STR, "the GPU pool: a file of --device flags or node paths "
       "(unset or empty: every GPU)", env="ROCMENV_GPUS_FROM"),
    _s("host", "podinfo-devices", STR, "an ARC runner pod's device list, the pool when it "
       "exists and gpus-from is not set (empty: none)", "/etc/podinfo/gha-render-devices",
       env="ROCMENV_PODINFO_DEVICES"),
)  # fmt: skip

_SLURM: Final = (
    _s("slurm", "partition", STR, "the partition (unset: Slurm's default)"),
    _s("slurm", "account", STR, "the account (unset: Slurm's default)"),
    _s("slurm", "gpu-request", enum(GPU_REQUEST_STYLES),
       "gres: --gres=gpu[:TYPE]:K; gpus: --gpus=K", "gres"),
    _s("slurm", "gres-type", STR, "the GPU type in the gres request (unset: none)"),
    _s("slurm", "time-factor", POSITIVE, "--time is the estimate times this", 2.0),
    _s("slurm", "min-time", POSITIVE, "the least --time, in seconds", 300),
    _s("slurm", "extra-args", STR_LIST, "more srun/sbatch arguments", []),
    _s("slurm", "gres-conf", STR, "gres.conf (unset: next to slurm.conf)"),
    _s("slurm", "packing", enum(PACKINGS), "rocmenv: job steps packed into one allocation; "
       "slurm: one job per test", "rocmenv"),
)  # fmt: skip

_POLICY: Final = (
    _s("policy", "cap-add", STR_LIST, "capabilities an untrusted container may add", []),
    _s("policy", "security-opt", STR_LIST, "security options it may set", []),
    _s("policy", "group-add", STR_LIST, "groups it may join", ["video", "render"]),
    _s("policy", "devices", STR_LIST, "host device nodes beyond /dev/kfd and the GPUs'", []),
    _s("policy", "network", STR_LIST, "networks it may use", ["bridge", "default", "none"]),
    _s("policy", "images", STR_LIST, "repositories it may run (empty: the trusted config's, "
       "else rocm/sgl-dev)", []),
    _s("policy", "mount-sources", STR_LIST, "host paths its data mounts may come from (empty: "
       "the trusted config's profile mounts)", []),
    _s("policy", "pass-env", STR_LIST, "host variables it may still pass", []),
    _s("policy", "pids-limit", {"type": "integer", "minimum": 1},
       "the most processes and threads an untrusted container may have", 8192),
    _s("policy", "memory", CAP_SIZE, "its memory at most: a size or a share of this host's "
       "(no swap beyond it)", "75%"),
    _s("policy", "shm-size", CAP_SIZE, "its /dev/shm at most", "32g"),
    _s("policy", "ulimits", {"type": "object", "additionalProperties": {"type": ["integer",
       "string"]}}, "the most each ulimit may be (set when a profile asks none)",
       {"core": 0, "nice": 0, "rtprio": 0}),
    _s("policy", "output-size", SIZE, "what --output copies out of it, in all", "1g"),
)  # fmt: skip

_SITE: Final = (
    _s("site", "engine", enum(ENGINE_NAMES), "the container engine on this machine", "auto",
       env="ROCMENV_ENGINE", flag="--engine"),
    _s("site", "registry", TABLE, "registry access for every project here (over theirs)", {}),
    _s("site", "host", TABLE, "this machine's GPU topology, device nodes and pool", {}),
    _s("site", "slurm", TABLE, "this cluster's Slurm settings (over the projects')", {}),
    _s("site", "policy", TABLE, "what untrusted containers may have here", {}),
    _s("site", "profiles", TABLE, "profiles every project here extends", {}),
    _s("site", "images", TABLE, "the runner image cache (never in a project file)", {}),
)  # fmt: skip

_IMAGES: Final = (
    _s("images", "cache", STR, "the runner image cache: an absolute directory that survives "
       "between jobs (unset: none, the engine pulls)", env="ROCMENV_IMAGE_CACHE"),
    _s("images", "max-size", SIZE, "the cache's cap, least recently used first (unset: only "
       "--reserve bounds it)", env="ROCMENV_IMAGE_CACHE_MAX"),
    _s("images", "source-floor", SIZE, "bytes per second below which a source (mirror, then "
       "upstream) is left …", 1_000_000, env="ROCMENV_SOURCE_FLOOR"),
    _s("images", "source-window", {"type": "number", "minimum": 1, "maximum": 3600},
       "… when it stays below the floor for this many seconds", 20.0,
       env="ROCMENV_SOURCE_WINDOW"),
)  # fmt: skip

_LIMITS: Final = tuple(
    _s("registry.limits", kind, {"type": "integer", "exclusiveMinimum": 0, "maximum": top},
       LIMIT_HELP[kind], {**RESPONSE_LIMITS, **CONTENT_LIMITS}[kind])
    for kind, top in LIMIT_MAX.items()
)  # fmt: skip

#: Every setting of the project, site and policy files (the suite tables: the suite layer's).
SETTINGS: Final[tuple[Setting, ...]] = (
    *_TOP, *_PROFILE, *_REGISTRY, *_LIMITS, *_HOST, *_SLURM, *_POLICY, *_SITE, *_IMAGES,
    *MOUNT_SETTINGS,
)  # fmt: skip

#: Every ``ROCMENV_*`` variable that is not a key's override.
VARIABLES: Final[tuple[Variable, ...]] = (
    Variable(name="ROCMENV_CONFIG", help="the project file to use (over the search upwards "
             "from the working directory)", flag="--config"),
    Variable(name="ROCMENV_SITE_CONFIG", help="the site file instead of /etc/rocmenv/"
             "config.toml (empty: none)", default="/etc/rocmenv/config.toml"),
    Variable(name="ROCMENV_POLICY", help="a TOML file of [policy] keys over the site's and "
             "user's (outside the checkout)"),
    Variable(name="ROCMENV_DISK_RESERVE", help="free disk space that must remain after a "
             "pull", default="2g", flag="--reserve"),
    Variable(name="ROCMENV_TOKEN_CACHE", help="0/false/no/off: registry tokens and "
             "challenges are not cached on disk", default="1"),
    Variable(name="ROCMENV_CERTS_D", help="the certs.d roots (:-separated) instead "
             "of /etc/docker/certs.d and /etc/containers/certs.d",
             default="/etc/docker/certs.d:/etc/containers/certs.d"),
    Variable(name="ROCMENV_PR_BODY", help="bootstrap: a pull request's body, read for "
             "ci-sglang-pr:/ci-megatron-pr: lines", flag="--pr-body"),
    Variable(name="ROCMENV_TIMINGS", help="1: run notes how long each stage took"),
    Variable(name="ROCMENV_SHIMS", help="in the container: 0 turns every shim off", default="1"),
    Variable(name="ROCMENV_SHIMS_STRICT", help="in the container: 1 makes a failing shim "
             "fail the process (else a warning)"),
    Variable(name="ROCMENV_SHIMS_REPORT", help="in the container: a JSON file each applied "
             "shim is recorded in"),
    Variable(name="ROCMENV_SHIMS_QUIET", help="in the container: 1 drops the 'shim … "
             "applied' lines (warnings stay)"),
    Variable(name="ROCMENV_REGISTRY_BACKOFF", help="the first registry retry delay in "
             "seconds (0-60), doubled each retry (tests shorten it)"),
    Variable(name="ROCMENV_DOCKER_API_TRANSPORT", help="docker-py: the docker-api engine "
             "speaks through docker-py instead of rocmenv's own Engine API client"),
    Variable(name="ROCMENV_TEST_PARK", help="STAGE:FILE parks a run at the start of a stage "
             "until FILE is removed", internal="the signal tests' hook into a run's stages"),
    Variable(name="ROCMENV_OUTPUT", help="in the container: the directory --output copies "
             "out (the profile's output key)", internal="set by rocmenv in the container for "
             "the tests to write into; never read from the host"),
)  # fmt: skip


def settings_of(table: str) -> tuple[Setting, ...]:
    return tuple(s for s in SETTINGS if s.table == table)


def keys(table: str) -> tuple[str, ...]:
    """The keys of ``table``, in their declared order: the readers' key tables."""
    return tuple(s.key for s in SETTINGS if s.table == table)


def setting(table: str, key: str) -> Setting:
    return next(s for s in SETTINGS if s.table == table and s.key == key)


def default(table: str, key: str) -> Any:
    """The declared default of ``table.key`` (a JSON value; the readers convert it)."""
    return setting(table, key).default


def variables(table: str) -> dict[str, str]:
    """``ROCMENV_*`` variable -> the key of ``table`` it overrides."""
    return {s.env: s.key for s in SETTINGS if s.table == table and s.env}
