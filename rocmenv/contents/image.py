"""An image's contents from its layers' indexes, without pulling it.

:func:`read_image` resolves the ``linux/amd64`` manifest, checks every layer descriptor (a
valid digest before it names anything, a media type, a size), indexes every layer not yet in
the :class:`LayerStore` (streaming it once from the registry, within one
:class:`~rocmenv.contents.budget.Budget` for the whole image), and
:func:`~rocmenv.contents.merge.merge` stacks the indexes as the OCI image spec says.

From the merged view: the interpreter ``python3`` on the image's ``PATH`` (symlinks
followed), its ``sys.path`` site directories (``PYTHONPATH``, a venv's, the user site, then
the prefix's: Debian's ``dist-packages`` trio or ``site-packages``), the distributions found
there (first on the path wins, as ``importlib.metadata`` does), ROCm and the OS release, and
each shim's verdict from its ``static_probe`` over the kept sources. The result has the shape
of ``launcher/probe.py``'s JSON, so ``drift --inspect`` compares either the same way.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocmenv.contents.fetch import index_layers, layer_refs
from rocmenv.contents.merge import Merged, merge, resolve
from rocmenv.contents.store import LayerStore
from rocmenv.grammar.reference import Reference
from rocmenv.registry.client import RegistryClient
from rocmenv.shims.catalogue import ShimInfo


def read_config(client: RegistryClient, ref: Reference, platform: Any) -> dict[str, Any]:
    """The image config JSON (env, rootfs diff ids) of a resolved platform image."""
    import json

    from rocmenv.errors import RegistryProtocolError

    if platform.config_digest is None:
        return {}
    blob = client.get_blob(ref, platform.registry, platform.config_digest)
    try:
        data = json.loads(blob)
    except ValueError:
        raise RegistryProtocolError(f"{ref}: image config is not JSON") from None
    return data if isinstance(data, dict) else {}


def _env(config: Mapping[str, Any]) -> dict[str, str]:
    env = {}
    for item in (config.get("config") or {}).get("Env") or ():
        name, _, value = str(item).partition("=")
        env[name] = value
    return env


@dataclass(frozen=True, kw_only=True)
class Interpreter:
    path: str  # the resolved binary, e.g. usr/bin/python3.11
    executable: str = ""  # as found on PATH (sys.executable), e.g. usr/bin/python3
    version: str | None  # X.Y[.Z]
    site_dirs: tuple[str, ...]  # sys.path's entries that may hold distributions, in order


def find_python(merged: Merged, env: Mapping[str, str], name: str = "python3") -> Interpreter:
    path_dirs = (env.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin").split(":")
    found = executable = None
    for directory in path_dirs:
        candidate = posixpath.join(directory.strip("/"), name)
        if candidate in merged.files or candidate in merged.links:
            found, executable = resolve(merged, candidate), candidate
            break
    pythonpath = [p.strip("/") for p in (env.get("PYTHONPATH") or "").split(":") if p]
    if found is None:
        return Interpreter(path="", version=None, site_dirs=tuple(pythonpath))
    match = re.search(r"python(\d+\.\d+)$", found)
    xy = match.group(1) if match else None
    prefix = posixpath.dirname(posixpath.dirname(found))
    if xy is None:  # a plain `python3` file: the stdlib directory says which
        stdlib = re.compile(re.escape(prefix) + r"/lib/python(\d+\.\d+)/os\.py")
        stdlibs = sorted(m.group(1) for p in merged.files if (m := stdlib.fullmatch(p)))
        xy = stdlibs[-1] if stdlibs else None
    sites: list[str] = list(pythonpath)
    venv = merged.files.get(f"{prefix}/pyvenv.cfg")
    if xy is not None:
        sites.append(f"root/.local/lib/python{xy}/site-packages")
        if venv is not None:
            sites.append(f"{prefix}/lib/python{xy}/site-packages")
        if venv is None or "include-system-site-packages = true" in venv:
            if prefix == "usr":
                sites += [
                    f"usr/local/lib/python{xy}/dist-packages",
                    "usr/lib/python3/dist-packages",
                    f"usr/lib/python{xy}/dist-packages",
                ]
            else:
                sites.append(f"{prefix}/lib/python{xy}/site-packages")
    expanded: list[str] = []
    for site in sites:
        expanded.append(site)
        if site not in pythonpath:  # .pth files count in site directories only
            expanded += _pth_entries(merged, site)
    return Interpreter(
        path=found,
        executable=executable or found,
        version=_patch_level(merged, xy),
        site_dirs=tuple(dict.fromkeys(expanded)),
    )


def _pth_entries(merged: Merged, site: str) -> list[str]:
    """The directories a site directory's ``*.pth`` files add to ``sys.path`` (in file-name
    order, as ``site.addsitedir`` reads them; ``import`` lines are code, not paths)."""
    out = []
    real = resolve(merged, site)  # where the files are; relative entries join `site` itself
    names = sorted(
        p
        for p in merged.files
        if p.startswith(real + "/") and p.endswith(".pth") and "/" not in p[len(real) + 1 :]
    )
    for name in names:
        for line in merged.files[name].splitlines():
            line = line.rstrip()
            if not line or line.startswith("#") or line.startswith(("import ", "import\t")):
                continue
            path = line.lstrip("/") if line.startswith("/") else posixpath.join(site, line)
            out.append(posixpath.normpath(path))
    return out


def _editable_mappings(merged: Merged, python: Interpreter) -> dict[str, str]:
    """Top-level package -> directory, from setuptools' editable finders (PEP 660) anywhere
    under a site directory (each finder is found through its own ancestors, so the cost does
    not grow with sites × files)."""
    import ast

    sites = set(python.site_dirs)
    under: dict[str, list[str]] = {}
    for path in merged.files:
        if "__editable___" in path:
            parts = path.split("/")
            for i in range(1, len(parts)):
                ancestor = "/".join(parts[:i])
                if ancestor in sites:
                    under.setdefault(ancestor, []).append(path)
    out: dict[str, str] = {}
    for site in python.site_dirs:
        for path in sorted(under.get(site, ())):
            for line in merged.files[path].splitlines():
                try:
                    mapping = ast.literal_eval(line.split("=", 1)[1].strip())
                except (ValueError, SyntaxError, IndexError):
                    continue
                if isinstance(mapping, dict):
                    for key, value in mapping.items():
                        out.setdefault(str(key), str(value).strip("/"))
    return out


def _patch_level(merged: Merged, xy: str | None) -> str | None:
    if xy is None:
        return None
    patchlevel = re.compile(rf"(?:.*/)?include/python{re.escape(xy)}m?/patchlevel\.h")
    for path, text in merged.files.items():
        if text and path.endswith("/patchlevel.h") and patchlevel.fullmatch(path):
            return text
    status = merged.files.get("var/lib/dpkg/status", "")
    match = re.search(
        rf"Package: python{re.escape(xy)}-minimal\nVersion: (?:\d+:)?({re.escape(xy)}\.\d+)",
        status,
    )
    return match.group(1) if match else xy


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, kw_only=True)
class Distribution:
    name: str
    version: str
    location: str  # the site directory


_STDLIB_OS = re.compile(r".*lib/python(\d+\.\d+)/os\.py")
_DIST = re.compile(r"(.*)/([^/]+\.dist-info/METADATA|[^/]+\.egg-info(?:/PKG-INFO)?)")


def distributions(merged: Merged, python: Interpreter) -> list[Distribution]:
    """Every distribution in a site directory of ``python``, in ``sys.path`` order (the
    metadata files are grouped by directory once, so the cost does not grow with
    sites × files)."""
    by_site: dict[str, list[str]] = {}
    for path, text in merged.files.items():
        match = _DIST.fullmatch(path)
        if match:
            by_site.setdefault(match.group(1), []).append(text)
    out = []
    for site in python.site_dirs:
        found = []
        for text in by_site.get(resolve(merged, site), ()):
            headers = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            name, version = headers.get("Name", "").strip(), headers.get("Version", "").strip()
            if name and version:
                found.append(Distribution(name=name, version=version, location="/" + site))
        out += sorted(found, key=lambda d: d.name.lower())
    return out


def _find_source(merged: Merged, python: Interpreter) -> Callable[[str], str | None]:
    editable = _editable_mappings(merged, python)

    def find_source(module: str) -> str | None:
        parts = module.split(".")
        for entry in python.site_dirs:
            site = resolve(merged, entry)
            top = f"{site}/{parts[0]}"
            if f"{top}/__init__.py" not in merged.files and f"{top}.py" not in merged.files:
                continue
            if len(parts) == 1:
                return merged.files.get(f"{top}.py") or merged.files.get(f"{top}/__init__.py")
            base = f"{site}/{'/'.join(parts)}"
            for candidate in (f"{base}.py", f"{base}/__init__.py"):
                if candidate in merged.files:
                    return merged.files[candidate]
            return None
        package = editable.get(parts[0])  # the editable finder comes after the path search
        if package is not None:
            base = "/".join([package, *parts[1:]])
            for candidate in (f"{base}.py", f"{base}/__init__.py"):
                if candidate in merged.files:
                    return merged.files[candidate]
        return None

    return find_source


def shim_verdicts(
    merged: Merged, python: Interpreter, dists: Sequence[Distribution], shims: Sequence[ShimInfo]
) -> list[dict[str, Any]]:
    """Each shim as ``probe.py`` reports it, decided from the sources and versions only."""
    from rocmenv.launcher._runtime import specifier_contains

    first: dict[str, Distribution] = {}
    for dist in dists:
        first.setdefault(_canonical(dist.name), dist)
    find_source = _find_source(merged, python)
    out = []
    for shim in shims:
        row: dict[str, Any] = {
            "name": shim.name,
            "target": shim.target,
            "distributions": list(shim.distributions),
            "specifier": shim.specifier,
            "distribution": None,
            "version": None,
            "specifier_match": None,
            "static_probe": {"missing": None, "reason": "not run"},
            "would_apply": None,
            "reason": "",
            "error": None,
        }
        found = [(n, first[_canonical(n)]) for n in shim.distributions if _canonical(n) in first]
        if not found:
            row.update(
                would_apply=False, reason=f"none of {', '.join(shim.distributions)} is installed"
            )
            out.append(row)
            continue
        asked, dist = found[0]  # importlib.metadata.version(asked), as the runtime asks
        match = specifier_contains(shim.specifier, dist.version)
        row.update(distribution=asked, version=dist.version, specifier_match=match)
        if not match:
            row.update(would_apply=False, reason=f"{asked} {dist.version} does not match")
            out.append(row)
            continue
        try:
            module = _load_shim(shim)
            missing, why = module.static_probe(find_source)
        except Exception as err:  # a broken shim file: say so, keep going
            row.update(error=f"{type(err).__name__}: {err}", reason="the static probe failed")
            out.append(row)
            continue
        row.update(
            static_probe={"missing": missing, "reason": why},
            would_apply=missing,
            reason=f"{asked} {dist.version} matches {shim.specifier}; {why}",
        )
        out.append(row)
    return out


def _load_shim(shim: ShimInfo) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_rocmenv_static_{shim.module_id}", shim.path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _os_release(merged: Merged) -> dict[str, str]:
    for path in ("etc/os-release", "usr/lib/os-release"):
        real = resolve(merged, path)
        text = merged.files.get(real)
        if text is not None:
            out = {}
            for line in text.splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip():
                    out[key.strip()] = value.strip().strip('"')
            return out
    return {}


@dataclass(frozen=True, kw_only=True)
class ReadStats:
    layers: int
    layers_read: int  # not in the index before
    bytes_read: int


def read_image(
    client: RegistryClient,
    store: LayerStore,
    ref: Reference,
    shims: Sequence[ShimInfo],
) -> tuple[dict[str, Any], ReadStats]:
    """The image's contents as ``probe.py``-shaped JSON (plus ``inspect`` keys), and what it
    cost to read them."""
    platform = client.resolve_platform(ref)
    _, manifest = client.get_manifest(
        Reference(domain=ref.domain, path=ref.path, digest=platform.platform_digest),
        platform.registry,
    )
    config = read_config(client, ref, platform)
    targets = sorted({s.target for s in shims})
    layers = layer_refs(manifest.data, ref)
    results = index_layers(client, store, ref, platform.registry, layers, targets)
    indexes = [index for index, _ in results]
    read = sum(1 for _, made in results if made)
    nbytes = sum(index["bytes"] for index, made in results if made)
    merged = merge(indexes)
    env = _env(config)
    python = find_python(merged, env)
    dists = distributions(merged, python)
    effective: dict[str, str] = {}
    for dist in dists:
        effective.setdefault(dist.name, dist.version)
    rocm = merged.files.get(resolve(merged, "opt/rocm/.info/version"))
    pythons = sorted(
        {
            m.group(1)
            for p in merged.files
            if p.endswith("/os.py") and (m := _STDLIB_OS.fullmatch(p))
        }
    )
    doc = {
        "probe_version": 1,
        "source": "registry",
        "image": str(ref),
        "digest": platform.digest,
        "platform_digest": platform.platform_digest,
        "python": {
            "version": python.version,
            "executable": "/" + python.executable if python.executable else None,
            "site_dirs": ["/" + s for s in python.site_dirs],
            "present": pythons,
        },
        "rocm": {
            "version": rocm.strip() or None if rocm else None,
            "source": "/opt/rocm/.info/version",
        },
        "os": _os_release(merged),
        "distributions": dict(sorted(effective.items(), key=lambda kv: kv[0].lower())),
        "locations": [
            {"name": d.name, "version": d.version, "location": d.location} for d in dists
        ],
        "shims": shim_verdicts(merged, python, dists, shims),
        "layers": len(indexes),
    }
    return doc, ReadStats(layers=len(indexes), layers_read=read, bytes_read=nbytes)
