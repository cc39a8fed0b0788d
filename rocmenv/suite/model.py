"""Suites: ``[suites.NAME]`` and ``[slurm]`` in the project file, as frozen values.

Schema (every key optional unless said)::

    [suites.stage-c]
    profile = "ci"                    # the profile every test's container uses (default: the default)
    gpus = 1                          # GPUs per test unless the test says (0: no GPU)
    est-time = 600                    # seconds, for tests that declare none
    cmd = "python {path}"             # command template ({path}, {name}); a string or a list
    labels = ["fast"]                 # keep tests with any of these labels
    exclude-labels = ["flaky"]        # drop tests with any of these
    tests = [
      { path = "test/a.py", gpus = 4, est-time = 1600 },
      { path = "test/b.py", cmd = "python -m pytest {path}", labels = ["fast"] },
    ]
    # and/or discovery: registration calls read from the files' AST (never imported)
    discover = { glob = "test/srt/**/*.py", call = "register_rocm_ci", suite = "stage-c-4-gpu" }

    [slurm]                           # also [suites.NAME.slurm], which wins key by key
    partition = "gpu"
    account = "ml"
    gpu-request = "gres"              # gres: --gres=gpu[:TYPE]:K; gpus: --gpus=K
    gres-type = "mi300x"
    time-factor = 2.0                 # --time = estimate x factor (at least min-time)
    min-time = 300                    # seconds
    extra-args = ["--qos=ci"]         # more srun/sbatch arguments
    gres-conf = "/etc/slurm/gres.conf"  # default: next to slurm.conf (scontrol show config)
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.profiles import as_str, as_str_list, check_keys, did_you_mean

GpuRequestStyle = Literal["gres", "gpus"]
GPU_REQUEST_STYLES: tuple[str, ...] = ("gres", "gpus")
SUITE_KEYS = (
    "profile", "gpus", "est-time", "cmd", "labels", "exclude-labels", "tests", "discover",
    "slurm",
)  # fmt: skip
TEST_KEYS = ("path", "name", "gpus", "est-time", "cmd", "labels")
DISCOVER_KEYS = ("glob", "call", "suite")
SLURM_KEYS = (
    "partition", "account", "gpu-request", "gres-type", "time-factor", "min-time",
    "extra-args", "gres-conf",
)  # fmt: skip
DEFAULT_CMD = ("python", "{path}")
DEFAULT_EST_TIME = 600.0
MAX_GPUS = 64


@dataclass(frozen=True, kw_only=True)
class SuiteTest:
    name: str  # unique in the suite: the path relative to the project root, posix
    path: str
    gpus: int
    est_time: float | None  # declared; None: the suite's default applies
    command: tuple[str, ...]
    labels: tuple[str, ...] = ()
    source: str = ""  # where it was declared ("tests[2]", "test/a.py:14")


@dataclass(frozen=True, kw_only=True)
class Discovery:
    glob: str
    call: str
    suite: str | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    gpu_request: GpuRequestStyle = "gres"
    gres_type: str | None = None
    time_factor: float = 2.0
    min_time: int = 300
    extra_args: tuple[str, ...] = ()
    gres_conf: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Suite:
    name: str
    profile: str | None
    gpus: int = 1
    est_time: float = DEFAULT_EST_TIME
    tests: tuple[SuiteTest, ...] = ()
    slurm: SlurmSettings = field(default_factory=SlurmSettings)

    def declared(self, test: SuiteTest) -> float:
        return test.est_time if test.est_time is not None else self.est_time

    @property
    def max_gpus(self) -> int:
        return max((t.gpus for t in self.tests), default=0)


def _int(value: Any, where: str, *, lo: int = 0, hi: int = MAX_GPUS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(f"{where} must be an integer from {lo} to {hi}, got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1e9:
        raise ConfigError(f"{where} must be a positive number of seconds, got {value!r}")
    return float(value)


def command_template(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            parts = tuple(shlex.split(value))
        except ValueError as err:
            raise ConfigError(f"{where} = {value!r} cannot be split: {err}") from None
    else:
        parts = as_str_list(value, where)
    if not parts:
        raise ConfigError(f"{where} is empty", hint='e.g. cmd = "python {path}"')
    for part in parts:
        try:
            part.format(path="p", name="n")
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(
                f"{where}: {part!r} uses an unknown placeholder ({err})",
                hint="placeholders: {path} and {name}; write {{ and }} for braces",
            ) from None
    return parts


def render_command(template: tuple[str, ...], *, path: str, name: str) -> tuple[str, ...]:
    return tuple(part.format(path=path, name=name) for part in template)


def parse_slurm(table: Any, where: str, base: SlurmSettings | None = None) -> SlurmSettings:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    check_keys(table, SLURM_KEYS, where)
    s = base or SlurmSettings()
    if "partition" in table:
        s = replace(s, partition=as_str(table["partition"], f"{where}.partition"))
    if "account" in table:
        s = replace(s, account=as_str(table["account"], f"{where}.account"))
    if "gres-type" in table:
        s = replace(s, gres_type=as_str(table["gres-type"], f"{where}.gres-type"))
    if "gpu-request" in table:
        style = as_str(table["gpu-request"], f"{where}.gpu-request")
        if style not in GPU_REQUEST_STYLES:
            raise ConfigError(
                f"{where}.gpu-request = {style!r} is not gres or gpus"
                + did_you_mean(style, GPU_REQUEST_STYLES)
            )
        s = replace(s, gpu_request="gres" if style == "gres" else "gpus")
    if "time-factor" in table:
        s = replace(s, time_factor=_seconds(table["time-factor"], f"{where}.time-factor"))
    if "min-time" in table:
        s = replace(s, min_time=int(_seconds(table["min-time"], f"{where}.min-time")))
    if "extra-args" in table:
        s = replace(s, extra_args=as_str_list(table["extra-args"], f"{where}.extra-args"))
    if "gres-conf" in table:
        s = replace(s, gres_conf=Path(as_str(table["gres-conf"], f"{where}.gres-conf")))
    return s


def _test(raw: Any, where: str, *, gpus: int, template: tuple[str, ...]) -> SuiteTest:
    if not isinstance(raw, dict):
        raise ConfigError(f'{where} must be a table such as {{ path = "test/a.py" }}')
    check_keys(raw, TEST_KEYS, where)
    if "path" not in raw:
        raise ConfigError(f"{where} has no path")
    path = as_str(raw["path"], f"{where}.path")
    name = as_str(raw.get("name", path), f"{where}.name")
    tmpl = command_template(raw["cmd"], f"{where}.cmd") if "cmd" in raw else template
    return SuiteTest(
        name=name,
        path=path,
        gpus=_int(raw.get("gpus", gpus), f"{where}.gpus"),
        est_time=_seconds(raw["est-time"], f"{where}.est-time") if "est-time" in raw else None,
        command=render_command(tmpl, path=path, name=name),
        labels=as_str_list(raw.get("labels", []), f"{where}.labels"),
        source=where,
    )


def parse_suite(
    name: str,
    raw: Any,
    *,
    root: Path,
    where: str,
    slurm: SlurmSettings,
) -> Suite:
    """One ``[suites.NAME]`` table; discovery reads the test files under ``root``."""
    here = f"[suites.{name}] in {where}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{here} must be a table")
    check_keys(raw, SUITE_KEYS, here)
    gpus = _int(raw.get("gpus", 1), f"{here}.gpus")
    template = command_template(raw.get("cmd", list(DEFAULT_CMD)), f"{here}.cmd")
    tests: list[SuiteTest] = []
    raw_tests = raw.get("tests", [])
    if not isinstance(raw_tests, list):
        raise ConfigError(f"{here}.tests must be a list of tables")
    for i, item in enumerate(raw_tests):
        tests.append(_test(item, f"{here}.tests[{i}]", gpus=gpus, template=template))
    if "discover" in raw:
        from rocmenv.suite.discovery import discover_tests

        disc = raw["discover"]
        if not isinstance(disc, dict):
            raise ConfigError(f"{here}.discover must be a table {{ glob = …, call = … }}")
        check_keys(disc, DISCOVER_KEYS, f"{here}.discover")
        for key in ("glob", "call"):
            if key not in disc:
                raise ConfigError(f"{here}.discover has no {key}")
        discovery = Discovery(
            glob=as_str(disc["glob"], f"{here}.discover.glob"),
            call=as_str(disc["call"], f"{here}.discover.call"),
            suite=as_str(disc["suite"], f"{here}.discover.suite") if "suite" in disc else None,
        )
        known = {t.path for t in tests}
        for found in discover_tests(root, discovery, gpus=gpus, template=template):
            if found.path not in known:  # an explicit entry wins over discovery
                tests.append(found)
    seen: dict[str, str] = {}
    for test in tests:
        if test.name in seen:
            raise ConfigError(
                f"{here}: test {test.name!r} is listed twice ({seen[test.name]} and {test.source})",
                hint="give one of them a distinct name = …",
            )
        seen[test.name] = test.source
    wanted = set(as_str_list(raw.get("labels", []), f"{here}.labels"))
    unwanted = set(as_str_list(raw.get("exclude-labels", []), f"{here}.exclude-labels"))
    if wanted:
        tests = [t for t in tests if wanted & set(t.labels)]
    if unwanted:
        tests = [t for t in tests if not unwanted & set(t.labels)]
    profile = as_str(raw["profile"], f"{here}.profile") if "profile" in raw else None
    return Suite(
        name=name,
        profile=profile,
        gpus=gpus,
        est_time=_seconds(raw.get("est-time", DEFAULT_EST_TIME), f"{here}.est-time"),
        tests=tuple(tests),
        slurm=parse_slurm(raw["slurm"], f"{here}.slurm", slurm) if "slurm" in raw else slurm,
    )


def suite_names(table: dict[str, Any]) -> list[str]:
    raw = table.get("suites", {})
    return list(raw) if isinstance(raw, dict) else []


def load_suite(
    table: dict[str, Any], name: str, *, root: Path, where: str, slurm_raw: Any = None
) -> Suite:
    """``[suites.NAME]`` of the project table (as read by :func:`rocmenv.settings.project.find_config`)."""
    raw = table.get("suites", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"suites in {where} must be a table of tables")
    if name not in raw:
        names = list(raw)
        raise UsageError(
            f"no suite {name!r} in {where}" + did_you_mean(name, names),
            hint=f"suites defined: {', '.join(names)}" if names else "add a [suites.NAME] table",
        )
    slurm = parse_slurm(slurm_raw, f"[slurm] in {where}") if slurm_raw is not None else None
    return parse_suite(name, raw[name], root=root, where=where, slurm=slurm or SlurmSettings())


def checkout_distrusted(ctx: Context, path: Path | None, *, untrusted: bool) -> bool:
    """Untrusted mode with a project file from the checkout (the pull request's): its Slurm
    settings (partition, account, extra ``srun``/``sbatch`` arguments, gres.conf path) are
    not used, as its ``[registry]`` is not (README "Running untrusted code")."""
    from rocmenv.settings.project import config_trusted
    from rocmenv.spec.guard import untrusted_env

    return (untrusted or untrusted_env(ctx.env)) and not config_trusted(ctx, path)


def slurm_table(ctx: Context, path: Path | None, table: dict[str, Any]) -> Any:
    """The project file's ``[slurm]`` table, or ``None`` (absent, or distrusted)."""
    if "slurm" not in table or checkout_distrusted(ctx, path, untrusted=False):
        return None
    return table["slurm"]
