"""Suites: ``[suites.NAME]`` and ``[slurm]`` in the project file, as frozen values.

Schema (every key optional unless said)::

    [suites.stage-c]
    profile = "ci"                    # the profile every test's container uses (default: the default)
    gpus = 1                          # GPUs per test unless the test says (0: no GPU)
    est-time = 600                    # seconds, for tests that declare none
    cmd = "python {path}"             # command template ({path}, {name}); a string or a list
    labels = ["fast"]                 # keep only tests with any of these labels
    exclude-labels = ["flaky"]        # drop tests with any of these
    include-labels = []               # the labels asked for when --labels is not given
    timeout-factor = 1.25             # and min-timeout, timeout, retries, retry-wait, retry-on
    retries = 1                       #   (rocmenv.suite.policy)
    tests = [
      { path = "test/a.py", gpus = 4, est-time = 1600, timeout = 3600 },
      { path = "test/b.py", cmd = "python -m pytest {path}", labels = ["fast"], nightly = true },
      { path = "test/c.py", disabled = "FIXME: flaky on MI350" },
    ]

    # and/or discovery: registration calls read from the files' AST, never imported
    # (rocmenv.suite.registered, rocmenv.suite.discovery)
    [suites.stage-c.discover]
    glob = "test/**/*.py"
    call = "register_rocm_ci"         # or a list of call names
    signature = "est_time, suite, *, labels=None, nightly=False, disabled=None"
    select = { suite = "stage-c-4-gpu-mi350" }      # each key must equal (a list: any of)
    gpus-from = { key = "suite", pattern = "-(\\d+)-gpu-" }   # or { key = "num_gpus" }
    # or suite = "…": the registration's suite, as suite-name names it (default "{suite}")
    suite-name = ["{stage}-test-{runner_config}", "{suite}"]  # sglang's collector: first complete

    [suites.stage-c.per-test."test/a.py"]   # timeout/retry keys (and disabled) for one test
    timeout = 3600

    [suites.NAME.slurm]               # Slurm settings of this suite: rocmenv.settings.slurm

A registration's ``est_time``, ``labels``, ``nightly`` and ``disabled`` are read by those
names: ``disabled`` is a reason (``True`` says "disabled"); ``nightly = True`` admits the test
only in the nightly and weekly cadences (:mod:`rocmenv.suite.select`). Without ``gpus-from``
the GPU count is the call's ``num_gpus`` (or ``gpus``), else the suite's ``gpus``. An explicit
``tests`` entry wins over a discovered test of the same path.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.keys import as_bool, as_str, as_str_list, check_keys, did_you_mean
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.labels import BUILTIN_POLICY, LabelPolicy
from rocmenv.suite.policy import POLICY_KEYS, RunPolicy, parse_policy
from rocmenv.suite.registered import (
    Found,
    checked_name,
    disabled_reason,
    discovered_tests,
    parse_discovery,
)

SUITE_KEYS = (
    "profile", "gpus", "est-time", "cmd", "labels", "exclude-labels", "include-labels",
    "tests", "discover", "per-test", "slurm", *POLICY_KEYS,
)  # fmt: skip
TEST_KEYS = (
    "path", "name", "gpus", "est-time", "cmd", "labels", "nightly", "disabled", *POLICY_KEYS,
)  # fmt: skip
PER_TEST_KEYS = ("disabled", *POLICY_KEYS)
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
    nightly: bool = False  # only in the nightly/weekly cadences
    disabled: str | None = None  # the reason: listed and reported as skipped, never run
    policy: RunPolicy = field(default_factory=RunPolicy)
    registration: Mapping[str, Any] = field(default_factory=dict)  # every value read


@dataclass(frozen=True, kw_only=True)
class Suite:
    name: str
    profile: str | None
    gpus: int = 1
    est_time: float = DEFAULT_EST_TIME
    tests: tuple[SuiteTest, ...] = ()
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    include_labels: tuple[str, ...] | None = None  # the default of --labels (None: all)
    policy: RunPolicy = field(default_factory=RunPolicy)
    label_policy: LabelPolicy = BUILTIN_POLICY  # the project's [labels] (rocmenv.suite.labels)

    def declared(self, test: SuiteTest) -> float:
        return test.est_time if test.est_time is not None else self.est_time

    def timeout(self, test: SuiteTest) -> float:
        return test.policy.timeout_for(self.declared(test))

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


@dataclass(frozen=True, kw_only=True)
class _Defaults:
    gpus: int
    template: tuple[str, ...]
    policy: RunPolicy


def _listed(raw: Any, where: str, d: _Defaults) -> SuiteTest:
    if not isinstance(raw, dict):
        raise ConfigError(f'{where} must be a table such as {{ path = "test/a.py" }}')
    check_keys(raw, TEST_KEYS, where)
    if "path" not in raw:
        raise ConfigError(f"{where} has no path")
    path = checked_name(as_str(raw["path"], f"{where}.path"), f"{where}.path", "the path")
    name = checked_name(as_str(raw.get("name", path), f"{where}.name"), f"{where}.name", "the name")
    labels = as_str_list(raw.get("labels", []), f"{where}.labels")
    for label in labels:
        checked_name(label, f"{where}.labels", "the label")
    tmpl = command_template(raw["cmd"], f"{where}.cmd") if "cmd" in raw else d.template
    return SuiteTest(
        name=name,
        path=path,
        gpus=_int(raw.get("gpus", d.gpus), f"{where}.gpus"),
        est_time=_seconds(raw["est-time"], f"{where}.est-time") if "est-time" in raw else None,
        command=render_command(tmpl, path=path, name=name),
        labels=labels,
        source=where,
        nightly=as_bool(raw.get("nightly", False), f"{where}.nightly"),
        disabled=disabled_reason(raw.get("disabled"), where, "disabled"),
        policy=parse_policy(raw, where, d.policy),
    )


def _discovered(found: Found, d: _Defaults) -> SuiteTest:
    return SuiteTest(
        name=found.path, path=found.path, gpus=found.gpus if found.gpus is not None else d.gpus,
        est_time=found.est_time,
        command=render_command(d.template, path=found.path, name=found.path),
        labels=found.labels, source=found.where, nightly=found.nightly, disabled=found.disabled,
        policy=d.policy, registration=found.values,
    )  # fmt: skip


def _per_test(tests: list[SuiteTest], raw: Any, where: str) -> list[SuiteTest]:
    """``[suites.NAME.per-test."PATH"]``: policy keys and ``disabled`` for named tests."""
    if not isinstance(raw, dict):
        raise ConfigError(f'{where} must be a table of "test path" = {{ timeout = … }}')
    by_name = {t.name: i for i, t in enumerate(tests)}
    out = list(tests)
    for name, table in raw.items():
        here = f"{where}.{name!r}"
        if name not in by_name:
            raise ConfigError(
                f"{here}: the suite has no test {name!r}" + did_you_mean(name, list(by_name)),
                hint="use the test's name as `rocmenv suite list` shows it",
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{here} must be a table such as {{ timeout = 1800 }}")
        check_keys(table, PER_TEST_KEYS, here)
        i = by_name[name]
        disabled = out[i].disabled
        if "disabled" in table:
            disabled = disabled_reason(table["disabled"], here, "disabled")
        out[i] = replace(out[i], disabled=disabled, policy=parse_policy(table, here, out[i].policy))
    return out


def parse_suite(
    name: str,
    raw: Any,
    *,
    root: Path,
    where: str,
    slurm: SlurmSettings,
    labels: LabelPolicy = BUILTIN_POLICY,
) -> Suite:
    """One ``[suites.NAME]`` table; discovery reads the test files under ``root``; ``labels``
    is the project's ``[labels]`` policy."""
    here = f"[suites.{name}] in {where}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{here} must be a table")
    check_keys(raw, SUITE_KEYS, here)
    policy = parse_policy(raw, here, RunPolicy())
    d = _Defaults(
        gpus=_int(raw.get("gpus", 1), f"{here}.gpus"),
        template=command_template(raw.get("cmd", list(DEFAULT_CMD)), f"{here}.cmd"),
        policy=policy,
    )
    raw_tests = raw.get("tests", [])
    if not isinstance(raw_tests, list):
        raise ConfigError(f"{here}.tests must be a list of tables")
    tests = [_listed(item, f"{here}.tests[{i}]", d) for i, item in enumerate(raw_tests)]
    if "discover" in raw:
        discovery = parse_discovery(raw["discover"], f"{here}.discover")
        known = {t.path for t in tests}
        for found in discovered_tests(root, discovery):
            if found.path not in known:  # an explicit entry wins over discovery
                tests.append(_discovered(found, d))
    seen: dict[str, str] = {}
    for test in tests:
        if test.name in seen:
            raise ConfigError(
                f"{here}: test {test.name!r} is listed twice ({seen[test.name]} and {test.source})",
                hint="give one of them a distinct name = …",
            )
        seen[test.name] = test.source
    if "per-test" in raw:
        tests = _per_test(tests, raw["per-test"], f"{here}.per-test")
    wanted = set(as_str_list(raw.get("labels", []), f"{here}.labels"))
    unwanted = set(as_str_list(raw.get("exclude-labels", []), f"{here}.exclude-labels"))
    if wanted:
        tests = [t for t in tests if wanted & set(t.labels)]
    if unwanted:
        tests = [t for t in tests if not unwanted & set(t.labels)]
    profile = as_str(raw["profile"], f"{here}.profile") if "profile" in raw else None
    include = (
        as_str_list(raw["include-labels"], f"{here}.include-labels")
        if "include-labels" in raw
        else None
    )
    return Suite(
        name=name,
        profile=profile,
        gpus=d.gpus,
        est_time=_seconds(raw.get("est-time", DEFAULT_EST_TIME), f"{here}.est-time"),
        tests=tuple(tests),
        slurm=slurm,
        include_labels=include,
        policy=policy,
        label_policy=labels,
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
    suites: Mapping[str, Any],
    name: str,
    *,
    root: Path,
    where: str,
    slurm: SlurmSettings,
    labels: LabelPolicy = BUILTIN_POLICY,
) -> Suite:
    """``[suites.NAME]`` of the project file, its Slurm settings already resolved
    (:meth:`rocmenv.settings.resolve.Settings.slurm_for`) and its ``[labels]`` parsed
    (:func:`rocmenv.suite.labels.parse_label_policy`)."""
    suite_profile(suites, name, where=where)
    return parse_suite(name, suites[name], root=root, where=where, slurm=slurm, labels=labels)
