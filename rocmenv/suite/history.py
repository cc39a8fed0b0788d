"""Learned estimates: each test's measured wall times, in a small file next to the lock.

``rocmenv.suite-history.json`` (sorted keys, ``history_version``, written atomically under
the lock directory's advisory lock)::

    {"history_version": 1,
     "tests": {"<profile>::<test>": {"times": [812.4, 799.0], "updated": "2026-12-02T15:04:05Z"}}}

Only passed tests are recorded (a crash is not a duration), the last ``KEEP`` times per
key. The estimate is the mean of the declared ``est_time`` (the prior, weight 1) and the
recorded times, so one unusual run moves it only part of the way.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from rocmenv.errors import ConfigError
from rocmenv.hostfs import write_atomic

HISTORY_VERSION = 1
HISTORY_NAME = "rocmenv.suite-history.json"
KEEP = 10

EstimateSource = Literal["declared", "learned", "default"]


class EntryJSON(TypedDict):
    times: list[float]
    updated: str


@dataclass(frozen=True, kw_only=True)
class Estimate:
    seconds: float
    declared: float
    source: EstimateSource
    runs: int = 0


@dataclass(frozen=True, kw_only=True)
class History:
    path: Path
    entries: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def times(self, test: str, profile: str) -> tuple[float, ...]:
        return self.entries.get(key(test, profile), ())

    def estimate(self, test: str, profile: str, declared: float, *, default: bool) -> Estimate:
        seen = self.times(test, profile)
        if not seen:
            return Estimate(
                seconds=declared, declared=declared, source="default" if default else "declared"
            )
        value = (declared + sum(seen)) / (1 + len(seen))
        return Estimate(seconds=value, declared=declared, source="learned", runs=len(seen))


def key(test: str, profile: str) -> str:
    return f"{profile}::{test}"


def history_path(lockfile: Path) -> Path:
    return lockfile.parent / HISTORY_NAME


def _fail(path: Path, what: str) -> ConfigError:
    return ConfigError(
        f"{path}: {what}",
        hint="delete the file to start learning again (it only holds measured test times)",
    )


def read_history(path: Path) -> History:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return History(path=path)
    except OSError as err:
        raise _fail(path, f"cannot read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(path, "not UTF-8 text, so not a history file") from None
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise _fail(path, f"not JSON ({err})") from None
    except RecursionError:
        raise _fail(path, "not a history file (JSON nested too deeply)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("history_version"), int):
        raise _fail(path, "no history_version")
    if doc["history_version"] > HISTORY_VERSION:
        raise ConfigError(
            f"{path} is history_version {doc['history_version']}, newer than this rocmenv "
            f"understands ({HISTORY_VERSION})",
            hint="upgrade rocmenv",
        )
    tests = doc.get("tests", {})
    if not isinstance(tests, dict):
        raise _fail(path, "tests is not an object")
    entries: dict[str, tuple[float, ...]] = {}
    for name, entry in tests.items():
        times = entry.get("times") if isinstance(entry, dict) else None
        if not isinstance(times, list) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < 1e9 for t in times
        ):
            raise _fail(path, f"entry {name!r} has no list of times")
        entries[name] = tuple(float(t) for t in times)
    return History(path=path, entries=entries)


def _write(
    path: Path,
    entries: Mapping[str, tuple[float, ...]],
    stamps: Mapping[str, str],
    *,
    within: Path | None,
) -> None:

    doc = {
        "history_version": HISTORY_VERSION,
        "tests": {
            k: EntryJSON(times=[round(t, 3) for t in v], updated=stamps[k])
            for k, v in sorted(entries.items())
        },
    }
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", within=within)


def record(
    path: Path, profile: str, measured: Iterable[tuple[str, float]], *, within: Path | None
) -> History:
    """Add passed tests' wall times (read-modify-write under the directory's lock), following
    no link inside ``within`` (the checkout: :mod:`rocmenv.hostfs`). Untrusted runs never
    call this (:func:`rocmenv.suite.runner.run_suite`)."""
    from rocmenv.image.lock import exclusive

    new = list(measured)
    with exclusive(path, within=within):
        current = read_history(path)
        entries = dict(current.entries)
        stamps: dict[str, str] = {}
        raw: dict[str, object] = {}
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads(path.read_text(encoding="utf-8")).get("tests", {})
        for k in entries:
            old = raw.get(k)
            stamps[k] = str(old.get("updated", "")) if isinstance(old, dict) else ""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for test, seconds in new:
            k = key(test, profile)
            entries[k] = (*entries.get(k, ()), float(seconds))[-KEEP:]
            stamps[k] = now
        _write(path, entries, stamps, within=within)
        return History(path=path, entries=entries)
