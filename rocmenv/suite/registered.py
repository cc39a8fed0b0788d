"""A suite's ``discover`` table, and the tests its registrations make.

:func:`parse_discovery` reads the table (calls, signature, selection, where the GPU count
comes from) and checks it against the signature before any file is read;
:func:`discovered_tests` binds every registration (:mod:`rocmenv.suite.discovery`), keeps
those the selection names, and turns each into a :class:`~rocmenv.suite.model.SuiteTest`
draft: the values rocmenv reads (``est_time``, ``labels``, ``nightly``, ``disabled``, the GPU
count) are type-checked with ``file:line`` in every error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.errors import ConfigError
from rocmenv.escape import control_char
from rocmenv.settings.keys import as_str, as_str_list, check_keys
from rocmenv.suite.discovery import (
    DEFAULT_SIGNATURE,
    Registration,
    Signature,
    parse_signature,
    registered_files,
)

DISCOVER_KEYS = ("glob", "call", "suite", "suite-name", "signature", "select", "gpus-from")
DEFAULT_SUITE_NAME: tuple[str, ...] = ("{suite}",)
GPUS_FROM_KEYS = ("key", "pattern")
MAX_GPUS = 64
MAX_MATCHED = 1000  # characters of a registration value a gpus-from pattern is run on


@dataclass(frozen=True, kw_only=True)
class GpusFrom:
    key: str
    pattern: str | None = None  # one group: the count


@dataclass(frozen=True, kw_only=True)
class Discovery:
    glob: str
    calls: tuple[str, ...]
    signature: Signature
    select: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    gpus_from: GpusFrom | None = None
    suite: tuple[Any, ...] | None = None  # suite = …: the registration's suite name is one
    suite_name: tuple[str, ...] = DEFAULT_SUITE_NAME  # how its suite is named (suite_name_of)


@dataclass(frozen=True, kw_only=True)
class Found:
    """One selected registration, read: what a discovered test is made of."""

    path: str
    where: str  # file:line
    est_time: float | None
    gpus: int | None  # None: the suite's
    labels: tuple[str, ...]
    nightly: bool
    disabled: str | None
    values: Mapping[str, Any]


def _scalar_or_list(value: Any, where: str) -> tuple[Any, ...]:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, (str, int, float, bool)):
            raise ConfigError(f"{where} must be a string, number or boolean (or a list of them)")
    return tuple(items)


def parse_discovery(raw: Any, where: str) -> Discovery:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table {{ glob = …, call = … }}")
    check_keys(raw, DISCOVER_KEYS, where)
    for key in ("glob", "call"):
        if key not in raw:
            raise ConfigError(f"{where} has no {key}")
    calls_raw = raw["call"]
    calls = tuple(calls_raw) if isinstance(calls_raw, list) else (calls_raw,)
    if not calls or not all(
        isinstance(c, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", c) for c in calls
    ):
        raise ConfigError(f"{where}.call must be a function name or a list of them")
    signature = parse_signature(
        as_str(raw.get("signature", DEFAULT_SIGNATURE), f"{where}.signature"),
        f"{where}.signature",
    )
    if "suite" in raw and "select" in raw:
        raise ConfigError(f"{where}: give select = {{ suite = … }} or suite = …, not both")
    select_raw = raw.get("select", {})
    if not isinstance(select_raw, dict):
        raise ConfigError(f'{where}.select must be a table such as {{ suite = "stage-b" }}')
    select = tuple(
        (key, _scalar_or_list(value, f"{where}.select.{key}")) for key, value in select_raw.items()
    )
    suite = _scalar_or_list(raw["suite"], f"{where}.suite") if "suite" in raw else None
    suite_name: tuple[str, ...] = DEFAULT_SUITE_NAME
    if "suite-name" in raw or suite is not None:
        suite_name = _suite_name(raw.get("suite-name", list(DEFAULT_SUITE_NAME)), where, signature)
    gpus_from = _gpus_from(raw["gpus-from"], f"{where}.gpus-from") if "gpus-from" in raw else None
    keys = [k for k, _ in select] + ([gpus_from.key] if gpus_from else [])
    for key in keys:
        if key not in signature.names and not signature.any_keyword:
            raise ConfigError(
                f"{where}: {key!r} is not a parameter of the signature ({signature.text})",
                hint="add it to discover.signature",
            )
    return Discovery(
        glob=as_str(raw["glob"], f"{where}.glob"), calls=calls, signature=signature,
        select=select, gpus_from=gpus_from, suite=suite, suite_name=suite_name,
    )  # fmt: skip


def _suite_name(raw: Any, where: str, signature: Signature) -> tuple[str, ...]:
    """``suite-name``: templates such as ``"{stage}-test-{runner_config}"``, tried in order."""
    from string import Formatter

    templates = (raw,) if isinstance(raw, str) else as_str_list(raw, f"{where}.suite-name")
    if not templates:
        raise ConfigError(f"{where}.suite-name is empty", hint='e.g. suite-name = "{suite}"')
    for template in templates:
        try:
            fields = [(f, spec, conv) for _, f, spec, conv in Formatter().parse(template)
                      if f is not None]  # fmt: skip
        except ValueError as err:
            raise ConfigError(f"{where}.suite-name {template!r}: {err}") from None
        for name, spec, conv in fields:
            if spec or conv or not name.isidentifier():
                raise ConfigError(
                    f"{where}.suite-name {template!r}: {{{name}}} must name a parameter, "
                    "nothing more",
                    hint='e.g. "{stage}-test-{runner_config}"',
                )
            if name not in signature.names and not signature.any_keyword:
                raise ConfigError(
                    f"{where}.suite-name {template!r}: {name!r} is not a parameter of the "
                    f"signature ({signature.text})"
                )
    return templates


def suite_name_of(values: Mapping[str, Any], templates: tuple[str, ...]) -> str | None:
    """A registration's suite as its client's collector names it: the first template whose
    parameters are all given (not None), filled in (sglang: ``{stage}-test-{runner_config}``
    when both are given, else ``{suite}``)."""
    from string import Formatter

    for template in templates:
        fields = [f for _, f, _, _ in Formatter().parse(template) if f is not None]
        if all(values.get(f) is not None for f in fields):
            return template.format(**{f: values[f] for f in fields})
    return None


def _gpus_from(raw: Any, where: str) -> GpusFrom:
    if not isinstance(raw, dict) or "key" not in raw:
        raise ConfigError(
            f'{where} must be a table {{ key = "num_gpus" }} or {{ key = "suite", pattern = … }}'
        )
    check_keys(raw, GPUS_FROM_KEYS, where)
    pattern = None
    if "pattern" in raw:
        pattern = as_str(raw["pattern"], f"{where}.pattern")
        try:
            groups = re.compile(pattern).groups
        except re.error as err:
            raise ConfigError(f"{where}.pattern is not a regular expression: {err}") from None
        if groups != 1:
            raise ConfigError(
                f"{where}.pattern = {pattern!r} must have exactly one group: the GPU count",
                hint='e.g. "-(\\\\d+)-gpu-"',
            )
    return GpusFrom(key=as_str(raw["key"], f"{where}.key"), pattern=pattern)


def discovered_tests(root: Path, discovery: Discovery) -> Iterator[Found]:
    """The selected registrations under ``root``, one per file, in path order."""
    for rel, found in registered_files(root, discovery.glob, discovery.calls, discovery.signature):
        chosen = [r for r in found if _selected(r, discovery)]
        if len(chosen) > 1:
            lines = ", ".join(f"{rel}:{r.line}" for r in chosen)
            raise ConfigError(
                f"{rel} registers itself {len(chosen)} times for this suite ({lines})",
                hint="keep one registration per suite (it would run the file twice)",
            )
        for reg in chosen:
            yield _read(rel, reg, discovery)


def _selected(reg: Registration, discovery: Discovery) -> bool:
    named = suite_name_of(reg.values, discovery.suite_name)
    if discovery.suite is not None and named not in discovery.suite:
        return False
    return all(reg.values.get(key) in allowed for key, allowed in discovery.select)


def _read(rel: str, reg: Registration, discovery: Discovery) -> Found:
    where = f"{rel}:{reg.line}"
    v = reg.values
    est = v.get("est_time")
    if est is not None and (
        not isinstance(est, (int, float)) or isinstance(est, bool) or not 0 < est < 1e9
    ):
        raise ConfigError(f"{where}: {reg.call}(est_time={est!r}) must be a positive number")
    labels = v.get("labels")
    if labels is not None and (
        not isinstance(labels, (list, tuple)) or not all(isinstance(x, str) for x in labels)
    ):
        raise ConfigError(f"{where}: {reg.call}(labels={labels!r}) must be a list of strings")
    checked_name(rel, where, "the test file's name")
    for label in labels or ():
        checked_name(label, where, f"{reg.call}() label")
    nightly = v.get("nightly")
    if nightly is not None and not isinstance(nightly, bool):
        raise ConfigError(f"{where}: {reg.call}(nightly={nightly!r}) must be True or False")
    return Found(
        path=rel, where=where, est_time=float(est) if est is not None else None,
        gpus=_gpu_count(reg, discovery.gpus_from, where), labels=tuple(labels or ()),
        nightly=bool(nightly), disabled=disabled_reason(v.get("disabled"), where, reg.call),
        values=dict(v),
    )  # fmt: skip


def checked_name(value: str, where: str, what: str) -> str:
    """A test's name, path or label as read: :class:`ConfigError` at ``where`` when it holds
    a control character (a newline, an escape, a bidirectional override: what
    :func:`rocmenv.escape.control_char` finds), which every report would have to disguise."""
    bad = control_char(value)
    if bad is not None:
        raise ConfigError(
            f"{where}: {what} {value!r} holds the control character {bad!r}",
            hint="rename it: test names, paths and labels are shown in logs, tables and "
            "summaries, where a control character could end a line or forge one",
        )
    return value


def disabled_reason(value: Any, where: str, call: str = "the test") -> str | None:
    """``None``/``False``: enabled; ``True``: "disabled"; a string: the reason."""
    if value is None or value is False:
        return None
    if value is True:
        return "disabled"
    if isinstance(value, str):
        return value.strip() or "disabled"
    raise ConfigError(f"{where}: {call}(disabled={value!r}) must be a reason (a string) or a bool")


def _gpu_count(reg: Registration, gpus_from: GpusFrom | None, where: str) -> int | None:
    keys = (gpus_from.key,) if gpus_from else ("num_gpus", "gpus")
    key = next((k for k in keys if reg.values.get(k) is not None), None)
    if key is None:
        return None
    value = reg.values[key]
    if gpus_from is not None and gpus_from.pattern is not None:
        text = str(value)[:MAX_MATCHED]
        match = re.search(gpus_from.pattern, text)
        if match is None:
            raise ConfigError(
                f"{where}: {reg.call}({key}={value!r}) does not match the GPU-count pattern "
                f"{gpus_from.pattern!r}",
                hint="fix the registration, or the suite's discover.gpus-from",
            )
        value = int(match.group(1)) if match.group(1).isdigit() else match.group(1)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_GPUS:
        raise ConfigError(f"{where}: {reg.call}({key}={value!r}) must be a GPU count 0..{MAX_GPUS}")
    return value
