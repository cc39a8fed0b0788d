"""The shim catalogue, host side: the shim and bundle types, discovery, and validation.

Shims come from the catalogue (``shims/`` in a checkout, ``rocmenv/_shims`` in the wheel)
and from the entry-point group ``rocmenv.shims`` (value: a module path). They are read with
:mod:`ast`, never imported: a shim is Python 3.8+ code meant for a container, not for us.
Building the launcher bundle from them is :mod:`rocmenv.shims.bundle`; probing images for
which shims would apply is :mod:`rocmenv.shims.probe`. Both import this module, never the
other way round.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from rocmenv import launcher
from rocmenv.errors import ConfigError
from rocmenv.lazy import Pattern
from rocmenv.record import record

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:  # the slow path (parsing shims, building bundles) imports these lazily
    import ast
    from typing import Any, Literal

    ShimSource = Literal["catalogue", "entry-point"]


@record
class ShimInfo:
    """What a shim file declares (read statically) and where it came from."""

    name: str
    module_id: str  # module name inside the bundle: _rocmenv_launcher.shims.<module_id>
    target: str
    distributions: tuple[str, ...]
    specifier: str
    summary: str
    retire: str | None
    missing: str | None
    source: ShimSource
    package: str | None  # the distribution that declared the entry point
    entry_point: str | None  # "name = module.path" for entry-point shims
    path: Path

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "distributions": list(self.distributions),
            "specifier": self.specifier,
            "summary": self.summary,
            "retire": self.retire,
            "source": self.source,
            "package": self.package,
            "entry_point": self.entry_point,
            "path": str(self.path),
        }


@record
class LauncherBundle:
    """A built launcher directory on the host and where it goes in the container."""

    host_dir: Path
    container_dir: str = launcher.CONTAINER_DIR
    shims: tuple[ShimInfo, ...] = ()
    digest: str = ""

    @property
    def probe_path(self) -> str:
        return f"{self.container_dir}/probe.py"

    @property
    def pycache_dir(self) -> str:
        """An empty directory of the bundle: mount a per-container tmpfs here.

        The bundle is read-only, so every interpreter compiles sitecustomize.py, and CPython's
        first ``compile()`` in a process also builds its AST types (~1.5 ms of the ~2.5 ms the
        launcher costs). With a writable ``__pycache__`` the first process writes the .pyc and
        the others load it (~0.5 ms); a tmpfs keeps it private to the container.
        """
        return f"{self.container_dir}/__pycache__"


def catalogue_dir() -> Path:
    """The shim catalogue: ``rocmenv/_shims`` in a wheel, ``<repo>/shims`` in a checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    wheel = package_dir / "_shims"
    if wheel.is_dir():
        return wheel
    checkout = package_dir.parent / "shims"
    if checkout.is_dir() and (package_dir.parent / "pyproject.toml").is_file():
        return checkout
    raise ConfigError(
        f"the shim catalogue is missing: neither {wheel} nor {checkout} exists",
        hint="reinstall rocmenv (the wheel ships it as rocmenv/_shims)",
    )


ENTRY_POINT_GROUP = "rocmenv.shims"
REQUIRED_CONSTANTS = ("NAME", "TARGET", "DISTRIBUTIONS", "SPECIFIER")
REQUIRED_FUNCTIONS = ("probe", "static_probe", "apply")

_NAME_RE = Pattern(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
_DOTTED_RE = Pattern(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_DIST_RE = Pattern(r"^(?:[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)


def _literal(node: ast.expr, name: str, path: Path) -> Any:
    import ast

    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ConfigError(
            f"shim {path}: {name} must be a literal (a string or a tuple of strings)",
            hint=f"write {name} = ... with a constant value",
        ) from None


def _top_level_imports(tree: ast.Module) -> Iterable[tuple[str, int]]:
    import ast

    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno


def _retire_note(doc: str) -> str | None:
    for paragraph in re.split(r"\n\s*\n", doc):
        text = " ".join(paragraph.split())
        if text.lower().startswith("retire:"):
            return text[len("retire:") :].strip() or None
    return None


def parse_shim_file(
    path: Path,
    *,
    source: ShimSource = "catalogue",
    package: str | None = None,
    entry_point: str | None = None,
) -> ShimInfo:
    """Read and validate one shim file without importing it (:class:`ConfigError` if bad)."""

    def bad(what: str, hint: str) -> ConfigError:
        where = f" (entry point {entry_point!r} of {package})" if entry_point else ""
        return ConfigError(f"shim {path}{where}: {what}", hint=hint)

    tree, doc = _read_shim(path, bad)
    constants = _declarations(tree, path, bad)
    name, target, dists, spec = _checked_constants(constants, bad)
    missing_text = constants.get("MISSING")
    return ShimInfo(
        name=name,
        module_id=name.replace("-", "_"),
        target=target,
        distributions=tuple(dists),
        specifier=spec,
        summary=doc.strip().splitlines()[0].strip(),
        retire=_retire_note(doc),
        missing=missing_text,
        source=source,
        package=package,
        entry_point=entry_point,
        path=path,
    )


def _read_shim(path: Path, bad: Callable[[str, str], ConfigError]) -> tuple[ast.Module, str]:
    """The shim's syntax tree (Python 3.8) and its module docstring, which it must have."""
    import ast

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise bad(f"cannot be read: {err}", "check the file exists and is UTF-8") from None
    try:
        tree = ast.parse(text, filename=str(path), feature_version=(3, 8))
    except SyntaxError as err:
        raise bad(
            f"is not valid Python 3.8 (line {err.lineno}: {err.msg})",
            "shims run inside containers on Python 3.8+: use 3.8 syntax",
        ) from None
    doc = ast.get_docstring(tree) or ""
    if not doc.strip():
        raise bad(
            "has no module docstring", "say why the shim exists and when to retire it ('Retire: …')"
        )
    return tree, doc


def _declarations(
    tree: ast.Module, path: Path, bad: Callable[[str, str], ConfigError]
) -> dict[str, Any]:
    """The shim's constants, once every required name is defined and only the standard
    library is imported at top level."""
    import ast

    constants: dict[str, Any] = {}
    functions: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in (*REQUIRED_CONSTANTS, "MISSING"):
                constants[target.id] = _literal(node.value, target.id, path)
        elif isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    present = set(constants) | functions
    missing = [n for n in (*REQUIRED_CONSTANTS, *REQUIRED_FUNCTIONS) if n not in present]
    if missing:
        raise bad(
            f"does not define {', '.join(missing)}",
            "a shim declares NAME, TARGET, DISTRIBUTIONS, SPECIFIER and defines "
            "probe(module), static_probe(find_source) and apply(module) at top level",
        )
    stdlib = sys.stdlib_module_names
    for module_name, lineno in _top_level_imports(tree):
        top = module_name.split(".")[0]
        if top not in stdlib and top != "__future__":
            raise bad(
                f"imports {module_name!r} at import time (line {lineno})",
                "import only the standard library at top level; import the target's "
                "packages inside apply() or the functions it installs",
            )
    return constants


def _checked_constants(
    constants: dict[str, Any], bad: Callable[[str, str], ConfigError]
) -> tuple[str, str, tuple[str, ...] | list[str], str]:
    """``NAME``, ``TARGET``, ``DISTRIBUTIONS`` and ``SPECIFIER``, each checked (and
    ``MISSING``, if given, a string)."""
    from rocmenv.launcher._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet

    name, target, dists, spec = (constants[k] for k in REQUIRED_CONSTANTS)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise bad(f"NAME {name!r} is not a lower-case name like 'aiter-shuffle-scale'", "fix NAME")
    if not isinstance(target, str) or not _DOTTED_RE.match(target):
        raise bad(
            f"TARGET {target!r} is not a dotted module name", "e.g. TARGET = 'aiter.ops.shuffle'"
        )
    if (
        not isinstance(dists, (tuple, list))
        or not dists
        or not all(isinstance(d, str) and _DIST_RE.match(d) for d in dists)
    ):
        raise bad(
            f"DISTRIBUTIONS {dists!r} is not a non-empty tuple of distribution names",
            "e.g. DISTRIBUTIONS = ('amd-aiter', 'aiter'), in priority order",
        )
    if not isinstance(spec, str) or not spec.strip():
        raise bad(f"SPECIFIER {spec!r} is not a PEP 440 specifier", "e.g. SPECIFIER = '<0.1.14rc0'")
    try:
        SpecifierSet(spec)
    except InvalidSpecifier as err:
        raise bad(
            f"SPECIFIER {spec!r} is not a valid PEP 440 specifier: {err}", "fix SPECIFIER"
        ) from None
    missing_text = constants.get("MISSING")
    if missing_text is not None and not isinstance(missing_text, str):
        raise bad(
            f"MISSING {missing_text!r} is not a string", "describe what the probe finds missing"
        )
    return name, target, dists, spec


def _locate_module_file(module: str) -> Path | None:
    """The source file of `module`, found on sys.path without importing its parents."""
    parts = module.split(".")
    for entry in sys.path:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    import importlib.util

    try:  # imports the parent packages, only as a last resort (e.g. meta-path editables)
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    return None


def _entry_point_shims() -> list[ShimInfo]:
    from importlib.metadata import entry_points

    found: list[ShimInfo] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
        package = ep.dist.name if ep.dist is not None else None
        spelled = f"{ep.name} = {ep.value}"
        if ":" in ep.value or not _DOTTED_RE.match(ep.value.strip()):
            raise ConfigError(
                f"entry point {spelled!r} in group {ENTRY_POINT_GROUP} of {package}: "
                "the value must be a module path",
                hint="point the entry point at the shim module, e.g. 'mypkg.rocmenv_shim'",
            )
        path = _locate_module_file(ep.value.strip())
        if path is None:
            raise ConfigError(
                f"entry point {spelled!r} in group {ENTRY_POINT_GROUP} of {package}: "
                f"no source file found for module {ep.value!r}",
                hint="shims are copied into containers as source: ship the .py file",
            )
        found.append(
            parse_shim_file(path, source="entry-point", package=package, entry_point=spelled)
        )
    return found


def discover_shims(
    *, catalogue: Path | None = None, entry_points: bool = True
) -> tuple[ShimInfo, ...]:
    """Every shim: the catalogue's files (``*.py`` not starting with ``_``), then entry points."""
    directory = catalogue if catalogue is not None else catalogue_dir()
    shims = [
        parse_shim_file(p) for p in sorted(directory.glob("*.py")) if not p.name.startswith("_")
    ]
    if entry_points:
        shims.extend(_entry_point_shims())
    seen: dict[str, ShimInfo] = {}
    for shim in shims:
        other = seen.get(shim.module_id)
        if other is not None:
            raise ConfigError(
                f"two shims are named {shim.name!r}: {other.path} and {shim.path}",
                hint="shim names must be unique; rename one of them",
            )
        seen[shim.module_id] = shim
    return tuple(shims)
