"""rocmenv.lazy: package surfaces and regular expressions compiled on first use."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from rocmenv.lazy import Pattern
from tests.support.startup import IMPORT_UNUSED, RUN_MODULES, RUN_UNUSED


def test_a_pattern_is_compiled_only_when_first_used() -> None:
    pattern = Pattern(r"(?P<n>[0-9]+)-x", re.ASCII)
    assert pattern._compiled is None
    assert pattern.pattern == r"(?P<n>[0-9]+)-x"  # the source needs no compiling
    assert pattern._compiled is None
    match = pattern.fullmatch("12-x")
    assert match is not None and match.group("n") == "12"
    assert pattern._compiled is not None and pattern.flags & re.ASCII


@pytest.mark.parametrize(
    ("source", "flags", "text"),
    [
        (r"[a-z]+", 0, "ab1cd 2 EF gh"),
        (r"(?i)[a-z]+", 0, "ab1cd 2 EF gh"),
        (r"([0-9])", re.ASCII, "a1b22c"),
        (r"\w+", 0, "über straße"),  # Unicode \w unless re.ASCII
        (r"\w+", re.ASCII, "über straße"),
        (r"x*", 0, "axxb"),  # empty matches
    ],
)
def test_a_pattern_answers_exactly_as_the_compiled_expression(
    source: str, flags: int, text: str
) -> None:
    lazy, real = Pattern(source, flags), re.compile(source, flags)

    def span(m: re.Match[str] | None) -> tuple[int, int] | None:
        return None if m is None else m.span()

    for pos in range(len(text) + 1):
        assert span(lazy.match(text, pos)) == span(real.match(text, pos))
        assert span(lazy.search(text, pos)) == span(real.search(text, pos))
        assert span(lazy.fullmatch(text, pos, pos + 2)) == span(real.fullmatch(text, pos, pos + 2))
    assert lazy.findall(text) == real.findall(text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.split(text) == real.split(text)
    assert lazy.sub("-", text) == real.sub("-", text)
    assert lazy.subn(lambda m: m.group(0).upper(), text, 1) == real.subn(
        lambda m: m.group(0).upper(), text, 1
    )
    assert lazy.flags == real.flags


def test_a_bytes_pattern_matches_bytes() -> None:
    status = Pattern(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: .*)?")
    match = status.fullmatch(b"HTTP/1.1 204 No Content")
    assert match is not None and match.group(1) == b"204"
    assert status.fullmatch(b"HTTP/2 204") is None


#: Modules the run and registry paths must not import (docs/benchmarks.md: start-up budget).
_BUDGET_PROBE = textwrap.dedent(
    """
    import sys
    try:
        import re._compiler as rc
    except ImportError:  # Python 3.10: re.py calls sre_compile
        import sre_compile as rc
    compiled = []
    original = rc.compile
    def in_re(name):
        return "/re/" in name or name.endswith(("/re.py", "/sre_compile.py"))
    def counting(p, flags=0):
        frame = sys._getframe(1)
        while frame is not None and in_re(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None and "/rocmenv/" in frame.f_code.co_filename:
            compiled.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        return original(p, flags)
    rc.compile = counting
    import importlib
    for name in sys.argv[1:]:
        importlib.import_module(name)
    print("compiled=" + ",".join(compiled))
    print("modules=" + ",".join(sorted(sys.modules)))
    """
)


def _imported(*modules: str) -> tuple[list[str], set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _BUDGET_PROBE, *modules],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    compiled = [c for c in out[0].removeprefix("compiled=").split(",") if c]
    return compiled, set(out[1].removeprefix("modules=").split(","))


def test_the_run_path_compiles_no_expression_and_imports_only_what_a_run_uses() -> None:
    compiled, modules = _imported(
        "rocmenv.cli.run", "rocmenv.run.execute", "rocmenv.engine.docker_api",
        "rocmenv.shims.bundle", "rocmenv.container.plan",
    )  # fmt: skip
    assert compiled == []
    assert (RUN_UNUSED | IMPORT_UNUSED) & modules == set()
    ours = {m for m in modules if m == "rocmenv" or m.startswith("rocmenv.")}
    assert ours - RUN_MODULES == set(), "new on the run path: update RUN_MODULES deliberately"


def test_the_registry_path_compiles_none_of_rocmenvs_expressions_at_import() -> None:
    compiled, modules = _imported("rocmenv.cli.tags", "rocmenv.registry.client")
    assert compiled == []
    assert "rocmenv.registry.client" in modules
