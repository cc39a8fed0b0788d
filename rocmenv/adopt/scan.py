"""The suites a checkout registers: every ``register_rocm_ci`` / ``register_amd_ci`` call
under the project, read from the AST (never imported), grouped by suite as the client's own
collector groups them (:mod:`rocmenv.adopt.clients`).

Each call is bound to the function's real signature: its ``def`` in the tree (annotations
dropped; the client's own file first), else the known client's parameter list for that name.
A registration's suite is named as the client names it — sglang's ``stage``/``runner_config``
pair is ``{stage}-test-{runner_config}`` — and a suite discovers its tests with a glob at the
test root: the client's collector's files when its layout is found, else every ``.py`` under
the top-level directory of the registering files. The GPU count comes from ``-N-gpu-`` in the
suite's name. Calls of other names (``register_cuda_ci``) are left alone. The walk skips
hidden directories, virtual environments and build output, and stops at :data:`MAX_FILES`
Python files.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Formatter

from rocmenv.adopt.clients import Client, client_for_call, layout_of
from rocmenv.errors import ConfigError, UsageError
from rocmenv.suite.discovery import MAX_TEST_FILE, parse_signature, registrations
from rocmenv.suite.registered import DEFAULT_SUITE_NAME, suite_name_of

AMD_CALLS = ("register_rocm_ci", "register_amd_ci")
MAX_FILES = 50_000
SKIP_DIRS = {"node_modules", "venv", "build", "dist", "site-packages", "__pycache__"}
GPUS_IN_NAME = re.compile(r"(?:^|-)(\d+)-gpu(?:-|$)")


@dataclass
class FoundSuite:
    name: str
    call: str
    signature: str  # the call's parameter list, as discover.signature
    glob: str  # discover.glob
    suite_name: tuple[str, ...] = DEFAULT_SUITE_NAME  # discover.suite-name
    files: list[str] = field(default_factory=list)
    labelled: bool = False
    nightly: int = 0
    disabled: int = 0

    @property
    def gpus(self) -> int | None:
        match = GPUS_IN_NAME.search(self.name)
        return int(match.group(1)) if match else None

    def add(self, rel: str, values: dict[str, object]) -> None:
        """One registration of this suite, in file ``rel``."""
        if rel not in self.files:
            self.files.append(rel)
        self.labelled |= bool(values.get("labels"))
        self.nightly += values.get("nightly") is True
        self.disabled += bool(values.get("disabled"))


@dataclass(frozen=True, kw_only=True)
class Scanned:
    suites: tuple[FoundSuite, ...]
    client: Client | None  # the client whose layout the tree has
    notes: tuple[str, ...] = ()  # where each signature came from; files a collector skips

    @property
    def labelled(self) -> bool:
        return any(s.labelled for s in self.suites)


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


def _sources(root: Path) -> dict[str, str]:
    """The files that mention a registration function, by path relative to ``root``."""
    out: dict[str, str] = {}
    for path in python_files(root):
        if path.is_symlink():
            continue
        try:
            if path.stat().st_size > MAX_TEST_FILE:
                continue
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # not a test file rocmenv could read anyway
        if any(call in source for call in AMD_CALLS):
            out[path.relative_to(root).as_posix()] = source
    return out


def _defined(sources: dict[str, str]) -> dict[str, list[tuple[str, str | None]]]:
    """call -> ``(file, its parameter list or None when rocmenv cannot read it)`` for every
    ``def`` of a registration function, in path order."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for rel, source in sources.items():
        if "def register_" not in source:
            continue
        try:
            tree = ast.parse(source, filename=rel)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # its calls, if any, are reported by the read below
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in AMD_CALLS:
                out.setdefault(node.name, []).append((f"{rel}:{node.lineno}", _parameters(node)))
    return out


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The ``def``'s parameter list without annotations, if rocmenv can bind calls to it."""
    args = node.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None:
            arg.annotation = None
    text = ast.unparse(args)
    try:
        parse_signature(text, "the def")
    except ConfigError:
        return None
    return text


def _signature(
    call: str, defs: list[tuple[str, str | None]], client: Client | None
) -> tuple[str, str]:
    """The parameter list to bind ``call`` with, and a note saying where it came from."""
    own = [d for d in defs if client is not None and d[0].startswith(client.register_file + ":")]
    readable = [d for d in own + defs if d[1] is not None]
    if readable:
        where, text = readable[0]
        assert text is not None
        others = sorted({t for _, t in defs if t is not None and t != text})
        extra = f" ({len(others)} other def(s) differ)" if others else ""
        return text, f"{call}: the signature of its def at {where}{extra}"
    known = client_for_call(call)
    assert known is not None  # AMD_CALLS are the known clients' calls
    why = "its def cannot be read" if defs else "no def of it in the tree"
    return known.signature, f"{call}: {known.name}'s signature ({why})"


def scan(root: Path) -> Scanned:
    """Every AMD/ROCm suite registered under ``root``, by name."""
    sources = _sources(root)
    defs = _defined(sources)
    client = layout_of({call: [w.rpartition(":")[0] for w, _ in d] for call, d in defs.items()})
    suites: dict[str, FoundSuite] = {}
    notes: list[str] = []
    for call in AMD_CALLS:
        files = [rel for rel, source in sources.items() if call in source]
        text, note = _signature(call, defs.get(call, []), client)
        signature = parse_signature(text, note)
        known = client_for_call(call)
        templates = tuple(
            t for t in (known.suite_name if known else ())
            if all(f in signature.names for _, f, _, _ in Formatter().parse(t) if f is not None)
        ) or DEFAULT_SUITE_NAME  # fmt: skip
        own = client is not None and client.call == call
        skipped: list[str] = []
        if own:
            assert client is not None
            collected = {p.relative_to(root).as_posix() for p in root.glob(client.glob)}
            skipped = [rel for rel in files if rel not in collected]
            files = [rel for rel in files if rel in collected]
        found: list[tuple[str, dict[str, object], str]] = []
        for rel in files:
            for reg in registrations(sources[rel], (call,), signature=signature, filename=rel):
                found.append((rel, dict(reg.values), f"{rel}:{reg.line}"))
        if not found:
            continue
        notes.append(note)
        glob = client.glob if own and client is not None else root_glob([r for r, _, _ in found])
        skipped = [r for r in skipped if re.search(rf"(?<!def ){call}\(", sources[r])]  # not a def
        if skipped:
            notes.append(
                f"{client.name if client else call}: its collector reads {glob} only, so not "
                + ", ".join(skipped[:5]) + (" …" if len(skipped) > 5 else "")
            )  # fmt: skip
        for rel, values, where in found:
            name = _suite_of(values, templates, call, where)
            suite = suites.setdefault(name, FoundSuite(
                name=name, call=call, signature=text, glob=glob, suite_name=templates))  # fmt: skip
            if suite.call != call:
                raise UsageError(
                    f"{where}: suite {name!r} is registered by both {suite.call} and {call}"
                )
            suite.add(rel, values)
    return Scanned(suites=tuple(suites[n] for n in sorted(suites)), client=client,
                   notes=tuple(notes))  # fmt: skip


def _suite_of(values: dict[str, object], templates: tuple[str, ...], call: str, where: str) -> str:
    name = suite_name_of(values, templates)
    if not isinstance(name, str) or not name:
        raise UsageError(
            f"{where}: {call}() names no suite (" + " or ".join(templates) + ")",
            hint="pass suite=… (or stage=… and runner_config=…) as literal strings",
        )
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UsageError(f"{where}: suite name {name!r} is not a plain name rocmenv can use")
    return name


def root_glob(files: list[str]) -> str:
    """Every ``.py`` under the one top-level directory the files share (``tests/**/*.py``),
    else under the root: never narrowed to the directories today's tests are in."""
    tops = {f.split("/", 1)[0] if "/" in f else "" for f in files}
    top = tops.pop() if len(tops) == 1 else ""
    return f"{top}/**/*.py" if top else "**/*.py"
