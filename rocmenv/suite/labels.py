"""Label scopes as a project states them: the ``[labels]`` table, and what a pull request's
labels and the run's cadence include.

Schema (every key optional)::

    [labels]
    prefix = "run-ci-"                        # a PR label PREFIX+X asks for label X (or scope X)
    ignore = ["nightly", "bypass-fastfail"]   # PR labels the workflow reads itself: no notice
    scopes = { all = "all", image = { all-but = ["long", "ft-short", "ft-long"] } }
    cadence = { nightly = { all-but = ["long", "ft-long"] }, weekly = "all" }

An *include set* is ``"all"`` (every label), a list (exactly those labels) or ``{ all-but =
[…] }`` (every label but those). ``--labels`` reads the PR's raw label names: ``PREFIX`` is
stripped, the rest names a scope (``run-ci-all``) or a label (``run-ci-amd``); a name
without the prefix is ignored with a notice unless ``ignore`` lists it. What a run includes
is the cadence's set, plus the scopes asked for, plus the labels asked for; a test runs when
it has no labels or one of its labels is included (:mod:`rocmenv.suite.select`), as miles'
``resolve_policy`` computes it (its precedence ``run-ci-all`` > weekly > nightly >
``run-ci-image`` picks, among nested sets, the largest: the union).

Without a ``[labels]`` table the built-in policy is rocmenv's earlier one: every ``--labels``
name is a label (a ``run-ci-`` prefix dropped), no scopes, the cadence adds nothing, and
without ``--labels`` the suite's ``include-labels`` decides (unset: every test).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from rocmenv.errors import ConfigError
from rocmenv.settings.keys import as_str, as_str_list, check_keys

Cadence = Literal["regular", "nightly", "weekly"]
CADENCES: Final = typing.get_args(Cadence)
LABELS_KEYS: Final = ("prefix", "ignore", "scopes", "cadence")
BUILTIN_PREFIX: Final = "run-ci-"
MAX_NAME = 200  # characters of a label or scope name


@dataclass(frozen=True, kw_only=True)
class LabelSet:
    """An include set: exactly ``names``, or (``every``) every label but ``names``."""

    every: bool = False
    names: frozenset[str] = frozenset()

    def admits(self, label: str) -> bool:
        return (label not in self.names) if self.every else (label in self.names)

    def union(self, other: LabelSet) -> LabelSet:
        if self.every and other.every:
            return LabelSet(every=True, names=self.names & other.names)
        if self.every or other.every:
            whole, part = (self, other) if self.every else (other, self)
            return LabelSet(every=True, names=whole.names - part.names)
        return LabelSet(names=self.names | other.names)

    def shown(self) -> str:
        if self.every:
            return "every label" + (f" but {', '.join(sorted(self.names))}" if self.names else "")
        return ", ".join(sorted(self.names)) or "no label"


NOTHING: Final = LabelSet()
EVERY: Final = LabelSet(every=True)


@dataclass(frozen=True, kw_only=True)
class LabelPolicy:
    declared: bool = False  # a [labels] table (False: the built-in policy)
    prefix: str = BUILTIN_PREFIX
    ignore: frozenset[str] = frozenset()
    scopes: Mapping[str, LabelSet] = field(default_factory=dict)
    cadence: Mapping[str, LabelSet] = field(default_factory=dict)  # by cadence name

    def for_cadence(self, cadence: str) -> LabelSet:
        return self.cadence.get(cadence, NOTHING)


BUILTIN_POLICY: Final = LabelPolicy()


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What ``--labels`` (or its default) and the cadence include."""

    include: LabelSet | None  # None: every test, labelled or not
    labels: tuple[str, ...] = ()  # the labels asked for by name (a scope's are not)
    scopes: tuple[str, ...] = ()  # the scopes asked for
    notices: tuple[str, ...] = ()  # names ignored


def _label_set(value: Any, where: str) -> LabelSet:
    if value == "all":
        return EVERY
    if isinstance(value, list):
        return LabelSet(names=frozenset(_names(value, where)))
    if isinstance(value, dict) and set(value) == {"all-but"}:
        return LabelSet(every=True, names=frozenset(_names(value["all-but"], f"{where}.all-but")))
    raise ConfigError(
        f'{where} must be an include set: "all", a list of labels, or {{ all-but = [...] }}',
        hint='e.g. nightly = { all-but = ["long"] }',
    )


def _names(value: Any, where: str) -> tuple[str, ...]:
    names = as_str_list(value, where)
    for name in names:
        if not name or len(name) > MAX_NAME or not name.isprintable() or name != name.strip():
            raise ConfigError(f"{where}: {name[:40]!r} is not a label")
    return names


def parse_label_policy(raw: Any, where: str) -> LabelPolicy:
    """The ``[labels]`` table (``None``: none, the built-in policy)."""
    if raw is None:
        return BUILTIN_POLICY
    here = f"[labels] in {where}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{here} must be a table")
    check_keys(raw, LABELS_KEYS, here)
    prefix = as_str(raw.get("prefix", BUILTIN_PREFIX), f"{here}.prefix")
    if len(prefix) > MAX_NAME or not prefix.isprintable():
        raise ConfigError(f"{here}.prefix = {prefix[:40]!r} is not a label prefix")
    scopes_raw = raw.get("scopes", {})
    cadence_raw = raw.get("cadence", {})
    for key, table in (("scopes", scopes_raw), ("cadence", cadence_raw)):
        if not isinstance(table, dict):
            raise ConfigError(f"{here}.{key} must be a table of include sets")
    check_keys(cadence_raw, CADENCES, f"{here}.cadence")
    scopes = {}
    for name, value in scopes_raw.items():
        _names([name], f"{here}.scopes")
        scopes[name] = _label_set(value, f"{here}.scopes.{name}")
    return LabelPolicy(
        declared=True,
        prefix=prefix,
        ignore=frozenset(_names(raw.get("ignore", []), f"{here}.ignore")),
        scopes=scopes,
        cadence={c: _label_set(v, f"{here}.cadence.{c}") for c, v in cadence_raw.items()},
    )


def asked(
    policy: LabelPolicy,
    cadence: str,
    names: Sequence[str] | None,
    *,
    default: Sequence[str] | None = None,
    all_labels: bool = False,
) -> Asked:
    """What a run includes: ``names`` are ``--labels`` as given (``None``: not given; then
    ``default``, the suite's ``include-labels``, are labels asked for by name)."""
    if all_labels:
        return Asked(include=None)
    if not policy.declared:
        if names is None:
            if default is None:
                return Asked(include=None)
            return Asked(include=LabelSet(names=frozenset(default)), labels=tuple(default))
        plain = tuple(dict.fromkeys(n.removeprefix(BUILTIN_PREFIX) for n in names))
        return Asked(include=LabelSet(names=frozenset(plain)), labels=plain)
    include = policy.for_cadence(cadence)
    labels: list[str] = list(default or ()) if names is None else []
    scopes: list[str] = []
    notices: list[str] = []
    for name in names or ():
        if name in policy.ignore:
            continue
        if not name.startswith(policy.prefix):
            notices.append(f"PR label {name!r} ignored: not a {policy.prefix}<label> label")
            continue
        stripped = name[len(policy.prefix) :]
        if stripped in policy.scopes:
            scopes.append(stripped)
        elif stripped:
            labels.append(stripped)
    for scope in dict.fromkeys(scopes):
        include = include.union(policy.scopes[scope])
    labels = list(dict.fromkeys(labels))
    include = include.union(LabelSet(names=frozenset(labels)))
    return Asked(include=include, labels=tuple(labels), scopes=tuple(dict.fromkeys(scopes)),
                 notices=tuple(notices))  # fmt: skip


def admitted(include: LabelSet | None, labels: Iterable[str]) -> bool:
    """A test with these labels runs: it has none, or one of them is included."""
    labels = tuple(labels)
    return include is None or not labels or any(include.admits(label) for label in labels)
