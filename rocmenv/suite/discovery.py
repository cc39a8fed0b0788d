"""Tests found by a glob and a registration call, read from each file's AST.

A file such as::

    from sglang.test.ci.ci_register import register_rocm_ci   # may not even import here
    register_rocm_ci(est_time=1600, suite="stage-c-4-gpu-mi300x", num_gpus=4, labels=["moe"])

is a test of a suite when it holds a call named ``call`` (a bare name or an attribute,
``ci.register_rocm_ci``) whose ``suite`` keyword equals the discovery's ``suite`` (when one
is given). The keywords ``est_time``, ``suite``, ``num_gpus`` (or ``gpus``) and ``labels``
are read with :func:`ast.literal_eval`; the file is never imported, so a test whose imports
fail on the host (torch, aiter) is still found. Files without such a call are helpers and
skipped; a file that does not parse, or a keyword that is not a literal, is an error that
names the file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocmenv.errors import ConfigError

KEYWORDS = ("est_time", "suite", "num_gpus", "gpus", "labels")


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def registrations(source: str, call: str, *, filename: str = "<file>") -> list[dict[str, Any]]:
    """The literal keyword arguments of every ``call(...)`` in ``source``, in file order.

    Each dict also carries ``"_line"``.
    """
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as err:
        raise ConfigError(
            f"{filename}:{err.lineno}: cannot parse the test file to read {call}(...): {err.msg}",
            hint="fix the syntax, or narrow the suite's discover.glob",
        ) from None
    except (MemoryError, RecursionError):  # the parser's own limits (e.g. 100,000 nested `-`)
        raise ConfigError(
            f"{filename}: cannot parse the test file to read {call}(...): it nests too deeply",
            hint="narrow the suite's discover.glob to the test files",
        ) from None
    found: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _call_name(node) != call:
            continue
        values: dict[str, Any] = {"_line": node.lineno}
        for kw in node.keywords:
            if kw.arg not in KEYWORDS:
                continue
            try:
                values[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, RecursionError, MemoryError):
                try:
                    shown = ast.unparse(kw.value)
                except (RecursionError, MemoryError):
                    shown = "an expression nested too deeply"
                raise ConfigError(
                    f"{filename}:{node.lineno}: {call}({kw.arg}=…) is not a literal ({shown[:80]})",
                    hint="write the value itself (a number, string or list) so rocmenv can "
                    "read it without importing the file",
                ) from None
        found.append(values)
    found.sort(key=lambda v: int(v["_line"]))
    return found


def registered_files(
    root: Path, glob: str, call: str
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``(path relative to root, registrations)`` of every file under ``root`` matching
    ``glob`` that holds a ``call(...)``, in path order."""
    for file in sorted(root.glob(glob)):
        if not file.is_file():
            continue
        rel = file.relative_to(root).as_posix()
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read test file {file}: {err}") from None
        if call not in source:
            continue  # cheap: most helpers never mention the call
        found = registrations(source, call, filename=rel)
        if found:
            yield rel, found
