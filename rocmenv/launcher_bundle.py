"""The launcher bundle: what ``rocmenv run`` mounts and ``rocmenv bootstrap`` installs.

A bundle is a directory holding the launcher's ``sitecustomize.py``, its runtime, the
vendored ``packaging``, the shim files and a generated index (see :mod:`rocmenv.launcher`
for the layout). Bundles are content-addressed and cached under
``$XDG_CACHE_HOME/rocmenv/launcher/<digest>/``; a stat-only stamp of their inputs lets
``rocmenv run`` reuse one without reading the shims again. Reading and validating shims is
:mod:`rocmenv.shims`; probing images is :mod:`rocmenv.shim_probe`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rocmenv import launcher
from rocmenv.context import Context
from rocmenv.errors import ConfigError

BUNDLE_FORMAT = 1
MANIFEST = "rocmenv-bundle.json"

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
    if shims is None:
        from rocmenv.shims import discover_shims

        shims = discover_shims()
    chosen = tuple(shims)
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
