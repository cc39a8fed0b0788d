"""The suites a checkout registers: every ``register_rocm_ci`` / ``register_amd_ci`` call
under the project, read from the AST (never imported), grouped by suite.

A call with ``suite="…"`` belongs to that suite; one with ``stage`` and ``runner_config`` (and
no suite) to the suite ``<stage>-<runner_config>``, selected on both. The GPU count comes
from ``-N-gpu-`` in the suite's name (or the runner config's ``N-gpu-``). Calls of other
names (``register_cuda_ci``) are left alone. The walk skips hidden directories, virtual
environments and build output, and stops at :data:`MAX_FILES` Python files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmenv.errors import UsageError
from rocmenv.suite.discovery import MAX_TEST_FILE, parse_signature, registrations

AMD_CALLS = ("register_rocm_ci", "register_amd_ci")
MAX_FILES = 50_000
SKIP_DIRS = {"node_modules", "venv", "build", "dist", "site-packages", "__pycache__"}
GPUS_IN_NAME = re.compile(r"(?:^|-)(\d+)-gpu(?:-|$)")
#: Read every keyword (the real signatures are written out from what the calls use).
OPEN_SIGNATURE = "est_time=None, suite=None, **keywords"
KNOWN_DEFAULTS = {"nightly": "False"}  # every other keyword defaults to None


@dataclass
class FoundSuite:
    name: str
    call: str
    select: dict[str, str]
    files: list[str] = field(default_factory=list)
    keywords: dict[str, None] = field(default_factory=dict)  # in order of first use
    all_est_time: bool = True
    labelled: bool = False
    nightly: int = 0
    disabled: int = 0

    @property
    def gpus(self) -> int | None:
        for text in (self.name, *self.select.values()):
            match = GPUS_IN_NAME.search(text)
            if match:
                return int(match.group(1))
        return None

    def signature(self) -> str:
        est = "est_time" if self.all_est_time else "est_time=None"
        keywords = [k for k in self.keywords if k not in ("est_time", "suite")]
        rest = ", ".join(f"{k}={KNOWN_DEFAULTS.get(k, 'None')}" for k in keywords)
        return f"{est}, suite=None" + (f", *, {rest}" if rest else "")


def python_files(root: Path) -> Iterator[Path]:
    count = 0
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                count += 1
                if count > MAX_FILES:
                    raise UsageError(
                        f"more than {MAX_FILES} Python files under {root}: not scanning further",
                        hint="run init in the repository's root, or write the suites by hand",
                    )
                yield Path(directory) / name


def scan(root: Path) -> list[FoundSuite]:
    """Every AMD/ROCm suite registered under ``root``, by name."""
    signature = parse_signature(OPEN_SIGNATURE, "the scan")
    suites: dict[str, FoundSuite] = {}
    for path in python_files(root):
        if path.is_symlink():
            continue
        try:
            if path.stat().st_size > MAX_TEST_FILE:
                continue
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # not a test file rocmenv could read anyway
        if not any(call in source for call in AMD_CALLS):
            continue
        rel = path.relative_to(root).as_posix()
        for reg in registrations(source, AMD_CALLS, signature=signature, filename=rel):
            _add(suites, rel, reg.call, reg.values, f"{rel}:{reg.line}")
    _share_signatures(list(suites.values()))
    return [suites[name] for name in sorted(suites)]


def _share_signatures(suites: list[FoundSuite]) -> None:
    """A discover binds every call of its name in its glob: each suite's signature must know
    every keyword any call of that name uses."""
    for call in AMD_CALLS:
        same = [s for s in suites if s.call == call]
        keywords: dict[str, None] = {}
        for suite in same:
            keywords |= suite.keywords
        every_est = all(s.all_est_time for s in same)
        for suite in same:
            suite.keywords = dict(keywords)
            suite.all_est_time = every_est


def _add(suites: dict[str, FoundSuite], rel: str, call: str, values: Any, where: str) -> None:
    keywords = {k: v for k, v in dict(values).items() if k not in ("est_time", "suite")}
    suite = values.get("suite")
    stage, config = keywords.get("stage"), keywords.get("runner_config")
    if isinstance(suite, str) and suite:
        name, select = suite, {"suite": suite}
    elif isinstance(stage, str) and isinstance(config, str):
        name, select = f"{stage}-{config}", {"stage": stage, "runner_config": config}
    else:
        raise UsageError(
            f"{where}: {call}() names neither a suite nor a stage and runner_config",
            hint="pass suite=… (or stage=… and runner_config=…) as literal strings",
        )
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UsageError(f"{where}: suite name {name!r} is not a plain name rocmenv can use")
    found = suites.setdefault(name, FoundSuite(name=name, call=call, select=select))
    if found.call != call:
        raise UsageError(f"{where}: suite {name!r} is registered by both {found.call} and {call}")
    if rel not in found.files:
        found.files.append(rel)
    for key in ("est_time", "suite", *keywords):
        found.keywords.setdefault(key, None)
    found.all_est_time &= values.get("est_time") is not None
    found.labelled |= bool(keywords.get("labels"))
    found.nightly += keywords.get("nightly") is True
    found.disabled += bool(keywords.get("disabled"))


def common_glob(files: list[str]) -> str:
    """``tests/**/*.py`` for files all under ``tests/``; ``**/*.py`` otherwise."""
    dirs = [os.path.dirname(f) for f in files]
    common = os.path.commonpath(dirs) if dirs and all(dirs) else ""
    return f"{common}/**/*.py" if common else "**/*.py"
