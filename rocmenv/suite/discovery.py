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
from rocmenv.suite.model import MAX_GPUS, Discovery, SuiteTest, render_command

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
            except ValueError:
                raise ConfigError(
                    f"{filename}:{node.lineno}: {call}({kw.arg}=…) is not a literal "
                    f"({ast.unparse(kw.value)})",
                    hint="write the value itself (a number, string or list) so rocmenv can "
                    "read it without importing the file",
                ) from None
        found.append(values)
    found.sort(key=lambda v: int(v["_line"]))
    return found


def _check(values: dict[str, Any], where: str, call: str) -> None:
    est = values.get("est_time")
    if est is not None and (not isinstance(est, (int, float)) or isinstance(est, bool) or est <= 0):
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


def discover_tests(
    root: Path, discovery: Discovery, *, gpus: int, template: tuple[str, ...]
) -> Iterator[SuiteTest]:
    """The tests under ``root`` matching the discovery, in path order."""
    for file in sorted(root.glob(discovery.glob)):
        if not file.is_file():
            continue
        rel = file.relative_to(root).as_posix()
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read test file {file}: {err}") from None
        if discovery.call not in source:
            continue  # cheap: most helpers never mention the call
        for values in registrations(source, discovery.call, filename=rel):
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
