"""Registration calls read from test files' AST, bound to a declared signature.

A file such as::

    from miles.ci import register_rocm_ci          # may not even import on the host
    register_rocm_ci(800, "stage-c-4-gpu-mi350", labels=["moe"], disabled="FIXME: …")
    register_cuda_ci(est_time=300, suite="stage-b")  # another call: not read

is read, never imported. A suite's ``discover`` names the call(s) and their signature, written
as the function's own parameter list (``"est_time, suite, *, labels=None, nightly=False"``):
positional arguments bind to the parameters in order, keywords by name, and the defaults of
the signature fill what a call leaves out. Every argument must be a literal
(:func:`ast.literal_eval`); a keyword the signature does not know, a positional argument too
many, a missing required parameter, ``*args``/``**kwargs`` in the call or a non-literal value
is a :class:`~rocmenv.errors.ConfigError` naming ``file:line`` — never silently dropped.
Files that never mention a call are helpers and skipped; a file that does not parse is an
error naming the file and line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmenv.errors import ConfigError

#: What rocmenv reads when a suite declares no signature: miles' ``est_time, suite``
#: positional, then the keywords miles and sglang use (and the older ``num_gpus``/``gpus``).
DEFAULT_SIGNATURE = (
    "est_time=None, suite=None, *, stage=None, runner_config=None, labels=None, "
    "nightly=False, disabled=None, num_gpus=None, gpus=None"
)
MAX_SIGNATURE = 2000  # characters: a parameter list, not a program
MAX_TEST_FILE = 8 << 20  # bytes: a test file, not a data set
NOT_GIVEN: Any = object()  # a parameter without a default


@dataclass(frozen=True, kw_only=True)
class Param:
    name: str
    default: Any = NOT_GIVEN
    positional: bool = True  # may be passed by position
    keyword: bool = True  # may be passed by name (False: before "/")


@dataclass(frozen=True, kw_only=True)
class Signature:
    text: str
    params: tuple[Param, ...]
    any_keyword: bool = False  # **kwargs: every keyword is accepted

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


@dataclass(frozen=True, kw_only=True)
class Registration:
    """One call, its arguments bound to the signature (defaults filled in)."""

    line: int
    call: str
    values: Mapping[str, Any] = field(default_factory=dict)


def parse_signature(text: str, where: str) -> Signature:
    """A Python parameter list (``"est_time, suite, *, labels=None"``) as a :class:`Signature`."""
    if len(text) > MAX_SIGNATURE or "\n" in text or "\r" in text:
        raise ConfigError(f"{where} = {text[:60]!r}…: not a parameter list on one line")
    try:
        tree = ast.parse(f"def _({text}): pass", mode="exec")
        func = tree.body[0]
        assert len(tree.body) == 1 and isinstance(func, ast.FunctionDef)
    except (SyntaxError, ValueError, RecursionError, MemoryError, AssertionError):
        raise ConfigError(
            f"{where} = {text!r} is not a Python parameter list",
            hint='write it as the function declares it, e.g. "est_time, suite, *, labels=None"',
        ) from None
    args = func.args
    if args.vararg is not None:
        raise ConfigError(f"{where}: *{args.vararg.arg} is not supported (name each parameter)")
    ordered = [*args.posonlyargs, *args.args]
    first_default = len(ordered) - len(args.defaults)
    params: list[Param] = []
    for i, arg in enumerate(ordered):
        default = (
            _default(args.defaults[i - first_default], where, arg.arg)
            if i >= first_default
            else NOT_GIVEN
        )
        params.append(Param(name=arg.arg, default=default, keyword=i >= len(args.posonlyargs)))
    for arg, node in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        default = NOT_GIVEN if node is None else _default(node, where, arg.arg)
        params.append(Param(name=arg.arg, default=default, positional=False))
    return Signature(text=text, params=tuple(params), any_keyword=args.kwarg is not None)


def _default(node: ast.expr, where: str, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise ConfigError(f"{where}: the default of {name} is not a literal") from None


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _literal(node: ast.expr, where: str, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        try:
            shown = ast.unparse(node)
        except (RecursionError, MemoryError):
            shown = "an expression nested too deeply"
        raise ConfigError(
            f"{where}: {what} is not a literal ({shown[:80]})",
            hint="write the value itself (a number, string, list or True/False/None) so "
            "rocmenv can read it without importing the file",
        ) from None


def bind(node: ast.Call, call: str, signature: Signature, where: str) -> dict[str, Any]:
    """The call's arguments by parameter name, the signature's defaults filled in."""
    positional = [p for p in signature.params if p.positional]
    values: dict[str, Any] = {}
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            raise ConfigError(f"{where}: {call}(*…) cannot be read without running the file")
        if i >= len(positional):
            raise ConfigError(
                f"{where}: {call}() takes {len(positional)} positional argument(s) in the "
                f"declared signature ({signature.text}), this call passes {len(node.args)}",
                hint="declare the real signature in the suite's discover.signature",
            )
        values[positional[i].name] = _literal(arg, where, f"{call}() argument {i + 1}")
    known = {p.name: p for p in signature.params}
    for kw in node.keywords:
        if kw.arg is None:
            raise ConfigError(f"{where}: {call}(**…) cannot be read without running the file")
        param = known.get(kw.arg)
        if (param is None or not param.keyword) and not signature.any_keyword:
            raise ConfigError(
                f"{where}: {call}({kw.arg}=…): {kw.arg!r} is not a keyword of the declared "
                f"signature ({signature.text})",
                hint=f"add {kw.arg} to the suite's discover.signature, or fix the call",
            )
        if kw.arg in values:
            raise ConfigError(f"{where}: {call}() gets {kw.arg} twice")
        values[kw.arg] = _literal(kw.value, where, f"{call}({kw.arg}=…)")
    for param in signature.params:
        if param.name in values:
            continue
        if param.default is NOT_GIVEN:
            raise ConfigError(
                f"{where}: {call}() does not pass {param.name}, which the declared signature "
                f"({signature.text}) requires",
                hint="pass it, or give it a default in discover.signature",
            )
        values[param.name] = param.default
    return values


def registrations(
    source: str,
    calls: Sequence[str] | str,
    *,
    signature: Signature | None = None,
    filename: str = "<file>",
) -> list[Registration]:
    """Every call of one of ``calls`` in ``source``, bound to ``signature``, in file order."""
    names = (calls,) if isinstance(calls, str) else tuple(calls)
    sig = signature or parse_signature(DEFAULT_SIGNATURE, "the default signature")
    shown = "/".join(names)
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as err:
        raise ConfigError(
            f"{filename}:{err.lineno}: cannot parse the test file to read {shown}(...): {err.msg}",
            hint="fix the syntax, or narrow the suite's discover.glob",
        ) from None
    except (MemoryError, RecursionError, ValueError):  # too deep; a NUL byte in the source
        raise ConfigError(
            f"{filename}: cannot parse the test file to read {shown}(...): it nests too deeply "
            "or is not Python source",
            hint="narrow the suite's discover.glob to the test files",
        ) from None
    found: list[Registration] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name not in names:
            continue
        where = f"{filename}:{node.lineno}"
        found.append(Registration(line=node.lineno, call=name, values=bind(node, name, sig, where)))
    found.sort(key=lambda r: r.line)
    return found


def registered_files(
    root: Path, glob: str, calls: Sequence[str], signature: Signature
) -> Iterator[tuple[str, list[Registration]]]:
    """``(path relative to root, registrations)`` of every file under ``root`` matching
    ``glob`` that holds one of ``calls``, in path order."""
    real_root = root.resolve()
    for file in sorted(root.glob(glob)):
        if not file.is_file() or not file.resolve().is_relative_to(real_root):
            continue  # a link out of the checkout is nobody's test file
        rel = file.relative_to(root).as_posix()
        try:
            with file.open("rb") as fh:
                raw = fh.read(MAX_TEST_FILE + 1)
            if len(raw) > MAX_TEST_FILE:
                raise ConfigError(
                    f"{rel} is larger than {MAX_TEST_FILE >> 20} MiB: not a test file",
                    hint="narrow the suite's discover.glob to the test files",
                )
            source = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read test file {rel}: {err}") from None
        if not any(call in source for call in calls):
            continue  # cheap: most helpers never mention the call
        found = registrations(source, calls, signature=signature, filename=rel)
        if found:
            yield rel, found
