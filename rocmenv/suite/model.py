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

    [suites.NAME.slurm]               # Slurm settings of this suite: rocmenv.settings.slurm
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.keys import as_str, as_str_list, check_keys, did_you_mean
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.discovery import registered_files

SUITE_KEYS = (
    "profile", "gpus", "est-time", "cmd", "labels", "exclude-labels", "tests", "discover",
    "slurm",
)  # fmt: skip
TEST_KEYS = ("path", "name", "gpus", "est-time", "cmd", "labels")
DISCOVER_KEYS = ("glob", "call", "suite")
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


def _check(values: dict[str, Any], where: str, call: str) -> None:
    est = values.get("est_time")
    if est is not None and (
        not isinstance(est, (int, float)) or isinstance(est, bool) or not 0 < est < float("inf")
    ):
        raise ConfigError(f"{where}: {call}(est_time={est!r}) must be a positive number")
    for key in ("num_gpus", "gpus"):
        n = values.get(key)
        if n is not None and (
            not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_GPUS
        ):
            raise ConfigError(f"{where}: {call}({key}={n!r}) must be an integer 0..{MAX_GPUS}")
    labels = values.get("labels")
    if labels is not None and (
        not isinstance(labels, (list, tuple)) or not all(isinstance(x, str) for x in labels)
    ):
        raise ConfigError(f"{where}: {call}(labels={labels!r}) must be a list of strings")
    suite = values.get("suite")
    if suite is not None and not isinstance(suite, str):
        raise ConfigError(f"{where}: {call}(suite={suite!r}) must be a string")


def _discovered(
    root: Path, discovery: Discovery, *, gpus: int, template: tuple[str, ...]
) -> Iterator[SuiteTest]:
    """The tests under ``root`` matching the discovery, in path order."""
    for rel, found in registered_files(root, discovery.glob, discovery.call):
        for values in found:
            where = f"{rel}:{values['_line']}"
            _check(values, where, discovery.call)
            if discovery.suite is not None and values.get("suite") != discovery.suite:
                continue
            count = values.get("num_gpus", values.get("gpus", gpus))
            est = values.get("est_time")
            yield SuiteTest(
                name=rel,
                path=rel,
                gpus=int(count),
                est_time=float(est) if est is not None else None,
                command=render_command(template, path=rel, name=rel),
                labels=tuple(values.get("labels") or ()),
                source=where,
            )
            break  # one registration per file and suite


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
        for found in _discovered(root, discovery, gpus=gpus, template=template):
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
        slurm=slurm,
    )


def suite_profile(suites: Mapping[str, Any], name: str, *, where: str) -> str | None:
    """The profile ``[suites.NAME]`` names (None: the default profile); a missing suite is an
    error with a did-you-mean."""
    if name not in suites:
        names = list(suites)
        raise UsageError(
            f"no suite {name!r} in {where}" + did_you_mean(name, names),
            hint=f"suites defined: {', '.join(names)}" if names else "add a [suites.NAME] table",
        )
    raw = suites[name]
    if isinstance(raw, dict) and "profile" in raw:
        return as_str(raw["profile"], f"[suites.{name}].profile in {where}")
    return None


def load_suite(
    suites: Mapping[str, Any], name: str, *, root: Path, where: str, slurm: SlurmSettings
) -> Suite:
    """``[suites.NAME]`` of the project file, its Slurm settings already resolved
    (:meth:`rocmenv.settings.resolve.Settings.slurm_for`)."""
    suite_profile(suites, name, where=where)
    return parse_suite(name, suites[name], root=root, where=where, slurm=slurm)
