"""Host side of the shims: discover them, build the launcher bundle, probe images.

Shims come from the catalogue (``shims/`` in a checkout, ``rocmenv/_shims`` in the wheel)
and from the entry-point group ``rocmenv.shims`` (value: a module path). They are read with
:mod:`ast`, never imported: a shim is Python 3.8+ code meant for a container, not for us.

A launcher *bundle* is a directory mounted read-only into containers (``rocmenv run``) or
copied into one (``rocmenv bootstrap``); see :mod:`rocmenv.launcher` for its layout. Bundles
are content-addressed and cached under ``$XDG_CACHE_HOME/rocmenv/launcher/<digest>/``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict

if TYPE_CHECKING:  # the slow path (parsing shims, building bundles) imports these lazily
    import ast

from rocmenv import launcher
from rocmenv.context import Context
from rocmenv.errors import ConfigError, EngineError

ENTRY_POINT_GROUP = "rocmenv.shims"
BUNDLE_FORMAT = 1
MANIFEST = "rocmenv-bundle.json"
REQUIRED_CONSTANTS = ("NAME", "TARGET", "DISTRIBUTIONS", "SPECIFIER")
REQUIRED_FUNCTIONS = ("probe", "static_probe", "apply")

_NAME_RE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_DIST_RE = re.compile(r"^(?:[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)

ShimSource = Literal["catalogue", "entry-point"]


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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


# ------------------------------------------------------------------ discovery


def catalogue_dir() -> Path:
    """The shim catalogue: ``rocmenv/_shims`` in a wheel, ``<repo>/shims`` in a checkout."""
    package_dir = Path(__file__).resolve().parent
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
    import ast

    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    def bad(what: str, hint: str) -> ConfigError:
        where = f" (entry point {entry_point!r} of {package})" if entry_point else ""
        return ConfigError(f"shim {path}{where}: {what}", hint=hint)

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
    problem = launcher_specifier_problem(spec)
    if problem is not None:
        raise bad(f"SPECIFIER {spec!r}: {problem}", LAUNCHER_SPECIFIER_RULES)
    missing_text = constants.get("MISSING")
    if missing_text is not None and not isinstance(missing_text, str):
        raise bad(
            f"MISSING {missing_text!r} is not a string", "describe what the probe finds missing"
        )
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


LAUNCHER_SPECIFIER_RULES = (
    "the launcher answers with packaging 24.2, which differs from newer packaging on some "
    "spellings: write versions in normalised form (no 'v', 'rev', '-', '_'), and use neither "
    "'>' nor '===' nor '<' with a post-release (write '>=X.dev0' or '<X.postN.dev0' instead)"
)


def _probe_versions(version: str) -> list[str]:
    """Versions around a specifier's bound where PEP 440's special cases live."""
    from packaging.version import Version

    v = Version(version)
    release = list(v.release)
    bases = {".".join(map(str, release + extra)) for extra in ([], [0], [1])}
    bases.add(".".join(map(str, [*release[:-1], release[-1] + 1])))
    if len(release) > 1:
        bases.add(".".join(map(str, release[:-1])))
    prefix = f"{v.epoch}!" if v.epoch else ""
    out = {str(v), f"{v}+l.1" if v.local is None else str(v)}
    for base in bases:
        for suffix in ("", "a1", "rc0", ".dev0", ".dev7", ".post1", ".post1.dev0", ".post2"):
            out.add(f"{prefix}{base}{suffix}")
            out.add(f"{prefix}{base}{suffix}+g1a2b3c")
    return sorted(out)


def launcher_specifier_problem(spec: str) -> str | None:
    """Why the launcher's packaging 24.2 could answer `spec` unlike the host's, or None.

    Rules found by comparing 24.2 with packaging 26 (tests/unit/test_shims_specifiers.py),
    then a check of both on versions around every bound, pre-releases included as the
    runtime asks (``contains(v, prereleases=True)``).
    """
    import importlib

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    vendored_spec = importlib.import_module("rocmenv.launcher._vendor.packaging.specifiers")
    vendored_ver = importlib.import_module("rocmenv.launcher._vendor.packaging.version")
    host = SpecifierSet(spec)
    for one in host:
        op, text = one.operator, one.version
        if op in (">", "==="):
            return f"operator {op!r} is not allowed"
        bound = text[:-2] if text.endswith(".*") else text
        if str(Version(bound)) != bound:
            return f"{text!r} is not in normalised form (write {str(Version(bound))!r})"
        if op == "<" and Version(bound).is_postrelease and not Version(bound).is_prerelease:
            return f"'<' with the post-release {bound!r} is not allowed"
    try:
        vendored = vendored_spec.SpecifierSet(spec)
    except vendored_spec.InvalidSpecifier:
        return "packaging 24.2 (in the launcher) cannot parse it"
    for one in host:
        bound = one.version[:-2] if one.version.endswith(".*") else one.version
        for candidate in _probe_versions(bound):
            ours = vendored.contains(vendored_ver.Version(candidate), prereleases=True)
            theirs = host.contains(Version(candidate), prereleases=True)
            if ours != theirs:
                return (
                    f"packaging 24.2 (in the launcher) says {ours} for {candidate!r} where the "
                    f"host's packaging says {theirs}"
                )
    return None


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


# ------------------------------------------------------------------ bundles


def _template_files() -> dict[str, bytes]:
    src = launcher.SOURCE_DIR
    files = {
        "probe.py": (src / "probe.py").read_bytes(),
        f"{launcher.PACKAGE}/_runtime.py": (src / "_runtime.py").read_bytes(),
    }
    vendor = src / "_vendor"
    for path in sorted(vendor.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[f"{launcher.PACKAGE}/_vendor/{path.relative_to(vendor).as_posix()}"] = (
                path.read_bytes()
            )
    return files


def _sitecustomize(shims: Sequence[ShimInfo]) -> bytes:
    template = (launcher.SOURCE_DIR / "sitecustomize.py").read_text(encoding="utf-8")
    if template.count(launcher.INDEX_LINE) != 1:
        raise ConfigError(
            f"{launcher.SOURCE_DIR / 'sitecustomize.py'} does not contain the index line once",
            hint=f"keep the line {launcher.INDEX_LINE!r} in the launcher's sitecustomize.py",
        )
    targets = " ".join(sorted({s.target for s in shims}))
    line = launcher.INDEX_LINE.replace('set("".split())', f"set({targets!r}.split())")
    return template.replace(launcher.INDEX_LINE, line).encode("utf-8")


def _index_module(shims: Sequence[ShimInfo]) -> bytes:
    entries = [
        {
            "id": s.module_id,
            "name": s.name,
            "target": s.target,
            "distributions": s.distributions,
            "specifier": s.specifier,
            "missing": s.missing,
            "source": s.source,
            "package": s.package,
        }
        for s in shims
    ]
    targets: dict[str, list[str]] = {}
    for shim in shims:
        targets.setdefault(shim.target, []).append(shim.module_id)
    body = "".join(f"    {e!r},\n" for e in entries)
    target_body = "".join(f"    {t!r}: {tuple(ids)!r},\n" for t, ids in sorted(targets.items()))
    text = (
        '"""Generated by rocmenv.shims: the shims in this launcher bundle. Do not edit."""\n\n'
        f"BUNDLE_FORMAT = {BUNDLE_FORMAT}\n"
        f"SHIMS = (\n{body})\n"
        f"TARGETS = {{\n{target_body}}}\n"
    )
    return text.encode("utf-8")


def bundle_files(shims: Sequence[ShimInfo]) -> dict[str, bytes]:
    """Relative path -> bytes of every file of a bundle holding `shims` (manifest excluded)."""
    files = _template_files()
    files["sitecustomize.py"] = _sitecustomize(shims)
    files[f"{launcher.PACKAGE}/__init__.py"] = (
        b'"""rocmenv launcher runtime (private name: never shadows anything in the image)."""\n'
    )
    files[f"{launcher.PACKAGE}/_index.py"] = _index_module(shims)
    files[f"{launcher.PACKAGE}/shims/__init__.py"] = b'"""Shim modules of this bundle."""\n'
    for shim in shims:
        files[f"{launcher.PACKAGE}/shims/{shim.module_id}.py"] = shim.path.read_bytes()
    return files


def bundle_digest(files: Mapping[str, bytes]) -> str:
    import hashlib

    h = hashlib.sha256(f"rocmenv-launcher-bundle {BUNDLE_FORMAT}\n".encode())
    for rel in sorted(files):
        data = files[rel]
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _manifest(digest: str, shims: Sequence[ShimInfo]) -> bytes:
    from rocmenv import __version__

    payload = {
        "bundle_format": BUNDLE_FORMAT,
        "digest": digest,
        "rocmenv": __version__,
        "shims": [{"name": s.name, "target": s.target, "source": s.source} for s in shims],
    }
    return (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode()


def _write_tree(root: Path, files: Mapping[str, bytes]) -> None:
    (root / "__pycache__").mkdir()  # mount point for a tmpfs (LauncherBundle.pycache_dir)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        directory.chmod(0o755)


def _tree_digest(root: Path) -> str | None:

    files: dict[str, bytes] = {}
    try:
        for path in root.rglob("*"):
            if path.is_file() and path.name != MANIFEST and "__pycache__" not in path.parts:
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    except OSError:
        return None
    return bundle_digest(files)


def default_cache_dir(ctx: Context) -> Path:
    base = ctx.env.get("XDG_CACHE_HOME") or str(Path(ctx.env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "rocmenv" / "launcher"


def build_bundle(shims: Sequence[ShimInfo], cache_root: Path) -> tuple[Path, str]:
    """The bundle directory for `shims` under `cache_root`, built atomically if absent."""
    import shutil
    import tempfile

    files = bundle_files(shims)
    digest = bundle_digest(files)
    final = cache_root / digest[:32]
    if (final / MANIFEST).is_file() and _tree_digest(final) == digest:
        (final / "__pycache__").mkdir(exist_ok=True)
        return final, digest
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{digest[:12]}-", dir=cache_root))
    except OSError as err:
        raise ConfigError(
            f"cannot create the launcher cache in {cache_root}: {err}",
            hint="set XDG_CACHE_HOME to a writable directory",
        ) from None
    try:
        _write_tree(tmp, {**files, MANIFEST: _manifest(digest, shims)})
        if final.exists():  # stale or damaged: move it aside, then replace it
            stale = Path(tempfile.mkdtemp(prefix=f".old-{digest[:12]}-", dir=cache_root))
            os.replace(final, stale / "bundle")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / MANIFEST).is_file():  # not a concurrent builder winning the race
                raise
    except OSError as err:
        raise ConfigError(
            f"cannot write the launcher bundle {final}: {err}", hint="check the cache directory"
        ) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final, digest


def _inputs_stamp() -> str:
    """A key for everything a bundle is built from, computed with ``stat`` calls only.

    The catalogue's and launcher's files (name, size, mtime), rocmenv's version, and the
    directories of ``sys.path`` (their mtime changes when a distribution — and so an entry
    point — is installed or removed). Same stamp, same bundle: ``rocmenv run`` then skips
    parsing and validating the shims and hashing the bundle (~50 ms per run).
    """
    from rocmenv import __version__

    parts: list[str] = [__version__, str(BUNDLE_FORMAT), sys.version]
    roots = [catalogue_dir(), Path(launcher.__file__).resolve().parent]
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith(".pyc"):
                    continue
                st = os.stat(os.path.join(dirpath, name))
                parts.append(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}")
    for entry in sys.path:
        try:
            parts.append(f"{entry}:{os.stat(entry or '.').st_mtime_ns}")
        except OSError:
            parts.append(f"{entry}:-")
    import hashlib

    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _shim_from_json(data: Mapping[str, Any]) -> ShimInfo:
    return ShimInfo(
        name=data["name"],
        module_id=data["module_id"],
        target=data["target"],
        distributions=tuple(data["distributions"]),
        specifier=data["specifier"],
        summary=data["summary"],
        retire=data["retire"],
        missing=data["missing"],
        source=data["source"],
        package=data["package"],
        entry_point=data["entry_point"],
        path=Path(data["path"]),
    )


def _read_stamp(root: Path, stamp: str) -> LauncherBundle | None:
    try:
        data = json.loads((root / "stamps" / f"{stamp}.json").read_text())
        host_dir = root / data["digest"][:32]
        # Damaged or edited bundles are rebuilt: hashing ~20 small files costs ~1 ms.
        if _tree_digest(host_dir) != data["digest"]:
            return None
        shims = tuple(_shim_from_json(s) for s in data["shims"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    (host_dir / "__pycache__").mkdir(exist_ok=True)
    return LauncherBundle(host_dir=host_dir, shims=shims, digest=data["digest"])


def _write_stamp(root: Path, stamp: str, bundle: LauncherBundle) -> None:
    data = {
        "digest": bundle.digest,
        "shims": [
            {**s.to_json(), "module_id": s.module_id, "missing": s.missing} for s in bundle.shims
        ],
    }
    directory = root / "stamps"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{stamp}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data, sort_keys=True))
        os.replace(tmp, directory / f"{stamp}.json")
    except OSError:
        pass  # only a cache: the next run builds the slow way again


def prepare_launcher(
    ctx: Context,
    *,
    cache_dir: Path | None = None,
    shims: Sequence[ShimInfo] | None = None,
) -> LauncherBundle:
    """Discover the shims and return the (cached) launcher bundle to mount into a container."""
    root = cache_dir if cache_dir is not None else default_cache_dir(ctx)
    stamp = _inputs_stamp() if shims is None else None
    if stamp is not None:
        cached = _read_stamp(root, stamp)
        if cached is not None:
            return cached
    chosen = tuple(shims) if shims is not None else discover_shims()
    host_dir, digest = build_bundle(chosen, root)
    bundle = LauncherBundle(host_dir=host_dir, shims=chosen, digest=digest)
    if stamp is not None:
        _write_stamp(root, stamp, bundle)
    return bundle


def merge_pythonpath(launcher_dir: str, image_pythonpath: str | None) -> str:
    """``launcher_dir`` first, then the image's own entries: no duplicates, no empty entries.

    An empty entry would mean "the current directory", which the image did not ask for.
    """
    entries: list[str] = [launcher_dir]
    for entry in (image_pythonpath or "").split(os.pathsep):
        if entry and entry not in entries:
            entries.append(entry)
    return os.pathsep.join(entries)


def install_launcher(
    ctx: Context,
    target_dir: Path,
    *,
    bundle: LauncherBundle | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """Copy a launcher bundle into ``target_dir`` (for ``rocmenv bootstrap`` in a job container).

    Replaces what is there atomically (copy beside it, then rename); a no-op when
    ``target_dir`` already holds the same bundle.
    """
    import shutil
    import tempfile

    source = bundle if bundle is not None else prepare_launcher(ctx, cache_dir=cache_dir)
    target_dir = Path(target_dir)
    if (target_dir / MANIFEST).is_file() and _tree_digest(target_dir) == source.digest:
        return target_dir
    try:
        target_dir.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{target_dir.name}-", dir=target_dir.parent))
        try:
            staged = work / "new"
            shutil.copytree(source.host_dir, staged, ignore=shutil.ignore_patterns("__pycache__"))
            if target_dir.exists():
                os.replace(target_dir, work / "old")
            os.replace(staged, target_dir)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except OSError as err:
        raise ConfigError(
            f"cannot install the launcher into {target_dir}: {err}",
            hint="choose a writable directory (e.g. --launcher-dir)",
        ) from None
    return target_dir


# ------------------------------------------------------------------ probing images


@dataclass(frozen=True, kw_only=True)
class BindMount:
    source: str
    target: str
    read_only: bool = True


class CaptureEngine(Protocol):
    """What :func:`check_image_versions` needs from an engine adapter."""

    def run_capture(
        self,
        image: str,
        argv: Sequence[str],
        *,
        mounts: Sequence[BindMount],
        env: Mapping[str, str],
        timeout: float,
    ) -> tuple[int, str, str]: ...


class ProbeStatic(TypedDict):
    missing: bool | None
    reason: str


class ProbeShim(TypedDict):
    name: str
    target: str
    distributions: list[str]
    specifier: str
    source: str
    package: str | None
    distribution: str | None
    version: str | None
    specifier_match: bool | None
    static_probe: ProbeStatic
    would_apply: bool | None
    reason: str
    error: str | None


class ProbePython(TypedDict):
    version: str
    implementation: str
    executable: str


class ProbeRocm(TypedDict):
    version: str | None
    source: str


class ImageProbe(TypedDict):
    """What ``probe.py`` prints (``probe_version`` 1)."""

    probe_version: int
    python: ProbePython
    rocm: ProbeRocm
    distributions: dict[str, str]
    shims: list[ProbeShim]


PROBE_KEYS = ("probe_version", "python", "rocm", "distributions", "shims")


def parse_probe_output(text: str, *, where: str) -> ImageProbe:
    """Strictly read probe.py's JSON (unknown ``probe_version`` is an error)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise EngineError(
            f"the launcher probe in {where} printed something that is not JSON ({err})",
            hint="run it by hand: python3 /opt/rocmenv/launcher/probe.py",
        ) from None
    if not isinstance(data, dict) or any(k not in data for k in PROBE_KEYS):
        raise EngineError(f"the launcher probe in {where} printed an unexpected shape")
    if data["probe_version"] != 1:
        raise EngineError(
            f"the launcher probe in {where} speaks probe_version {data['probe_version']!r}; "
            "this rocmenv reads version 1",
            hint="use the same rocmenv version for the bundle and the check",
        )
    result: ImageProbe = data  # type: ignore[assignment]
    return result


@dataclass(frozen=True, kw_only=True)
class ProbeRun:
    argv: tuple[str, ...]
    mounts: tuple[BindMount, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def probe_command(bundle: LauncherBundle, *, python: str = "python3") -> ProbeRun:
    """How to run the probe in a container: argv, the read-only bundle mount, environment."""
    return ProbeRun(
        argv=(python, bundle.probe_path),
        mounts=(BindMount(source=str(bundle.host_dir), target=bundle.container_dir),),
        env={"ROCMENV_SHIMS": "0", "PYTHONDONTWRITEBYTECODE": "1"},
    )


def check_image_versions(
    engine: CaptureEngine,
    image: str,
    *,
    bundle: LauncherBundle,
    python: str = "python3",
    timeout: float = 300.0,
) -> ImageProbe:
    """Run ``probe.py`` inside `image` (nothing heavy is imported there) and parse its JSON."""
    run = probe_command(bundle, python=python)
    code, out, err = engine.run_capture(
        image, run.argv, mounts=run.mounts, env=run.env, timeout=timeout
    )
    if code != 0:
        tail = "\n".join(err.strip().splitlines()[-5:])
        raise EngineError(
            f"the launcher probe failed in {image} (exit {code}): {tail or 'no output'}",
            hint=f"does the image have {python}? try --python",
        )
    return parse_probe_output(out, where=image)


class EngineCapture:
    """:class:`CaptureEngine` on top of a :class:`rocmenv.engine.Engine` adapter."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def run_capture(
        self,
        image: str,
        argv: Sequence[str],
        *,
        mounts: Sequence[BindMount],
        env: Mapping[str, str],
        timeout: float,
    ) -> tuple[int, str, str]:
        from rocmenv.runspec import BindMount as EngineBind

        binds = [EngineBind(source=m.source, target=m.target, readonly=m.read_only) for m in mounts]
        out = self._engine.run_capture(image, argv, mounts=binds, env=dict(env), timeout=timeout)
        if getattr(out, "timed_out", False):
            raise EngineError(
                f"the launcher probe in {image} did not finish within {timeout:.0f}s",
                hint="is the engine overloaded? retry, or raise --timeout",
            )
        return int(out.exit_code), str(out.stdout), str(out.stderr)


ShimVerdict = Literal["would-apply", "would-not-apply", "unknown"]
ShimWhy = Literal[
    "feature-missing",
    "not-installed",
    "version-outside",
    "version-not-pep440",
    "feature-present",
    "probe-failed",
    "unknown",
]


def classify(shim: ProbeShim) -> tuple[ShimVerdict, ShimWhy]:
    """The verdict and its main reason, from one entry of probe.py's ``shims`` list."""
    if shim.get("error"):
        return "unknown", "probe-failed"
    if shim["distribution"] is None:
        return "would-not-apply", "not-installed"
    if shim["specifier_match"] is None:
        return "would-not-apply", "version-not-pep440"
    if shim["specifier_match"] is False:
        return "would-not-apply", "version-outside"
    missing = shim["static_probe"]["missing"]
    if missing is True:
        return "would-apply", "feature-missing"
    if missing is False:
        return "would-not-apply", "feature-present"
    return "unknown", "unknown"
