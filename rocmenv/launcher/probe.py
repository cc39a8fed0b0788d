"""Print JSON facts about the Python environment of an image, without importing heavy modules.

Run inside a container from a launcher bundle: ``python3 /opt/rocmenv/launcher/probe.py``.
Standard library only, Python 3.8+. Nothing from the installed packages is imported: the
distributions come from ``importlib.metadata``, and each shim's *static* probe reads the
target module's source file, located through ``importlib.util.find_spec`` of the top-level
package only (``find_spec("aiter.ops.shuffle")`` would import ``aiter``, hence torch).

Output (``probe_version`` 1; keys are stable, consumers: ``rocmenv shims check``,
``rocmenv drift --inspect``, ``rocmenv bootstrap --report``)::

  {"probe_version": 1,
   "python": {"version": "3.11.2", "implementation": "cpython", "executable": "/usr/bin/python3"},
   "rocm": {"version": "7.0.0" | null, "source": "/opt/rocm/.info/version"},
   "distributions": {"<name as in its metadata>": "<version>", ...},
   "shims": [{"name", "target", "distributions": [...], "specifier", "source", "package",
              "distribution": str | null, "version": str | null,
              "specifier_match": bool | null,
              "static_probe": {"missing": bool | null, "reason": str},
              "would_apply": bool | null, "reason": str, "error": str | null}, ...]}

``would_apply`` is null when it cannot be told statically (no source file, probe error).
"""

from __future__ import annotations

import json
import os
import platform
import sys

MYPY = False
if MYPY:  # type checking only
    from typing import Any, Dict, List, Optional

PROBE_VERSION = 1
ROCM_VERSION_FILE = "/opt/rocm/.info/version"


def _bundle_imports() -> Any:
    """The runtime and index of the bundle this file belongs to (also when run as a script)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if __package__:  # imported as <pkg>.probe (tests on the host)
        package = __package__
    else:
        if here not in sys.path:
            sys.path.insert(0, here)
        package = "_rocmenv_launcher"
    import importlib

    runtime = importlib.import_module(package + "._runtime")
    index = importlib.import_module(package + "._index")
    return runtime, index


def find_source(name: str) -> Optional[str]:
    """Source text of module `name`, found on disk without importing any package."""
    import importlib.util

    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if len(parts) == 1:
        path = spec.origin if spec.origin and spec.origin.endswith(".py") else None
        return _read(path) if path else None
    dirs = list(spec.submodule_search_locations or [])
    for part in parts[1:-1]:
        dirs = [os.path.join(d, part) for d in dirs if os.path.isdir(os.path.join(d, part))]
    last = parts[-1]
    for d in dirs:
        for candidate in (os.path.join(d, last + ".py"), os.path.join(d, last, "__init__.py")):
            if os.path.isfile(candidate):
                return _read(candidate)
    return None


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data.decode("utf-8", "replace")


def rocm_version(path: str = ROCM_VERSION_FILE) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return None
    return text or None


def distributions() -> Dict[str, str]:
    """name -> version of every installed distribution (first on sys.path wins)."""
    from importlib import metadata

    found: Dict[str, str] = {}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
            version = dist.version
        except Exception:  # broken metadata: skip it, the rest is still useful
            continue
        if name and version and name not in found:
            found[str(name)] = str(version)
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def shim_report(runtime: Any, entry: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "name": entry["name"],
        "target": entry["target"],
        "distributions": list(entry["distributions"]),
        "specifier": entry["specifier"],
        "source": entry["source"],
        "package": entry["package"],
        "distribution": None,
        "version": None,
        "specifier_match": None,
        "static_probe": {"missing": None, "reason": "not run"},
        "would_apply": None,
        "reason": "",
        "error": None,
    }
    try:
        shim = runtime.load_shim(entry["id"])
        decision = runtime.decide_version(shim)
        out.update(
            distribution=decision.distribution,
            version=decision.version,
            specifier_match=decision.specifier_match,
        )
        if not decision.apply:
            out.update(would_apply=False, reason=decision.reason)
            return out
        missing, why = shim.static_probe(find_source)
        out["static_probe"] = {"missing": missing, "reason": why}
        out["would_apply"] = missing
        out["reason"] = decision.reason + "; " + why
    except Exception as err:
        out["error"] = "%s: %s" % (err.__class__.__name__, err)
        out["reason"] = "the probe failed: " + out["error"]
    return out


def probe() -> Dict[str, Any]:
    runtime, index = _bundle_imports()
    shims: List[Dict[str, Any]] = [shim_report(runtime, entry) for entry in index.SHIMS]
    return {
        "probe_version": PROBE_VERSION,
        "python": {
            "version": platform.python_version(),
            "implementation": sys.implementation.name,
            "executable": sys.executable,
        },
        "rocm": {"version": rocm_version(), "source": ROCM_VERSION_FILE},
        "distributions": distributions(),
        "shims": shims,
    }


def main() -> int:
    sys.stdout.write(json.dumps(probe(), indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
