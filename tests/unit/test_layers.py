"""The layer diagram in docs/architecture.md is what the code does: every import of every module
(including imports inside functions and under ``TYPE_CHECKING``) points down the diagram or
sideways to a sibling the diagram allows, and there is no import cycle at all."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rocmenv"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (the vendored packaging copy excluded)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_vendor" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """``(module imported, line)`` for every import statement anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule when there is one
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        seen: set[str] = set()
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target not in seen:
                seen.add(target)
                yield target, node.lineno


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {name: dict(imports_of(name, path, known)) for name, path in known.items()}


def diagram_layers() -> list[list[list[str]]]:
    """The diagram in docs/architecture.md "How it is built": top layer first; in a layer, ``|`` separates
    siblings that may not import each other, ``,`` modules that may."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    match = re.search(r"<!-- layers -->\n```\n(.*?)```", text, re.S)
    assert match, "docs/architecture.md has no layer diagram (a ```-block after <!-- layers -->)"
    layers = []
    for line in match.group(1).splitlines():
        spec = line.split("  ", 1)[0].strip()
        if spec:
            layers.append([[m.strip() for m in g.split(",")] for g in spec.split("|")])
    return layers


def placement(name: str, layers: list[list[list[str]]]) -> tuple[int, int]:
    """(layer index from the top, sibling group) of a module: the longest diagram entry that is
    the module or a package holding it (``__init__`` is the package root module)."""
    best: tuple[int, int, int] | None = None
    for i, layer in enumerate(layers):
        for j, group in enumerate(layer):
            for entry in group:
                dotted = "rocmenv" if entry == "__init__" else f"rocmenv.{entry}"
                inside = name == dotted or (entry != "__init__" and name.startswith(dotted + "."))
                if inside and (best is None or len(dotted) > best[2]):
                    best = (i, j, len(dotted))
    assert best is not None, f"{name} is in no layer of the architecture diagram"
    return best[0], best[1]


def test_the_diagram_names_every_package_and_top_level_module() -> None:
    layers = diagram_layers()
    for name in modules():
        placement(name, layers)


def test_every_import_points_down_the_diagram() -> None:
    layers = diagram_layers()
    wrong = []
    for name, targets in graph().items():
        here = placement(name, layers)
        for target, line in targets.items():
            there = placement(target, layers)
            if there[0] < here[0] or (there[0] == here[0] and there[1] != here[1]):
                wrong.append(f"{name}:{line} imports {target}")
    assert not wrong, "imports against the layer diagram:\n" + "\n".join(wrong)


def test_there_is_no_import_cycle_type_only_ones_included() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_errors_imports_nothing_of_the_package() -> None:
    assert graph()["rocmenv.errors"] == {}


@pytest.mark.parametrize("library", ["run", "container", "suite", "bootstrap", "drift", "engine"])
def test_no_library_package_imports_the_cli(library: str) -> None:
    offenders = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        if name.startswith(f"rocmenv.{library}")
        for target in targets
        if target.startswith("rocmenv.cli")
    ]
    assert not offenders


def test_the_checker_sees_imports_inside_functions_and_type_checking_blocks(tmp_path: Path) -> None:
    """The AST walk is what makes "every import" true: a planted function-level import and a
    TYPE_CHECKING import are both found."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rocmenv.cli import main\n"
        "def f():\n    from rocmenv.run.execute import execute\n"
    )
    path = tmp_path / "m.py"
    path.write_text(source)
    found = dict(imports_of("rocmenv.errors", path, modules()))
    assert {"rocmenv.cli", "rocmenv.run.execute"} <= set(found)


PACKAGES = sorted(
    p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name not in ("_vendor",)
)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_states_its_surface_and_loads_it_lazily(package: str) -> None:
    """``__all__`` names the surface; importing the package imports none of its modules (the
    CLI and the launcher import theirs on purpose: the entry point, the bundle's constants)."""
    import subprocess
    import sys

    code = (
        "import importlib, sys\n"
        f"pkg = importlib.import_module('rocmenv.{package}')\n"
        f"loaded = [m for m in sys.modules if m.startswith('rocmenv.{package}.')]\n"
        "missing = [n for n in pkg.__all__ if getattr(pkg, n, None) is None]\n"
        "print(len(pkg.__all__), loaded, missing)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split(" ", 1)
    count, rest = int(out[0]), out[1]
    assert count > 0
    loaded, missing = rest.strip().rsplit("] ", 1)
    assert missing == "[]", f"rocmenv.{package}.__all__ names what it does not have: {missing}"
    if package not in ("cli", "launcher"):
        assert loaded == "[", f"importing rocmenv.{package} imported {loaded}]"
