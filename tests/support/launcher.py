"""Helpers shared by the launcher/shim tests (unit and integration); holds no tests itself.

* :func:`standin_site` lays out the stand-in ``torch``/``aiter`` from ``images/standins/``
  as an installed site directory (with a ``.dist-info`` for the aiter distribution), the way
  the test images install them, so the launcher can be exercised on the host Python.
* :func:`make_bundle` builds a launcher bundle (optionally from a custom catalogue).
* :func:`run_python` runs an interpreter with a bundle on PYTHONPATH and returns the result,
  the shim report records and the stand-in call log.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.context import Context
from rocmenv.shims.bundle import prepare_launcher
from rocmenv.shims.catalogue import LauncherBundle, ShimInfo, discover_shims

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDINS = REPO_ROOT / "images" / "standins"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: has the Debian sitecustomize to chain-load


def standin_site(
    root: Path,
    *,
    layout: str = "old",
    dist: str = "amd-aiter",
    version: str = "0.1.9.post1",
    torch_version: str = "2.9.0+rocm7.0.0",
) -> Path:
    """A site directory with stand-in torch and aiter (``layout`` old/new) installed."""
    site = root / f"site-{layout}-{dist}-{version}".replace("+", "_")
    if site.exists():
        return site
    site.mkdir(parents=True)
    aiter = site / "aiter"
    shutil.copytree(STANDINS / "aiter" / "common" / "aiter", aiter)
    shutil.copytree(STANDINS / "aiter" / layout / "aiter", aiter, dirs_exist_ok=True)
    (aiter / "_version.py").write_text(f"__version__ = {version!r}\n")
    (aiter / "_standin_info.py").write_text(f"DIST = {dist!r}\nLAYOUT = {layout!r}\n")
    shutil.copytree(STANDINS / "torch" / "torch", site / "torch")
    if not (site / "torch" / "version.py").exists():
        (site / "torch" / "version.py").write_text(
            f"__version__ = {torch_version!r}\nhip = '7.0'\ncuda = None\n"
        )
    for name, ver in ((dist, version), ("torch", torch_version)):
        info = site / f"{name.replace('-', '_')}-{ver}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
    return site


def write_shim(directory: Path, module_id: str, body: str, **overrides: Any) -> Path:
    """A shim file: the standard header (overridable) plus ``body``."""
    header = {
        "NAME": module_id.replace("_", "-"),
        "TARGET": "aiter.ops.shuffle",
        "DISTRIBUTIONS": ("amd-aiter", "aiter"),
        "SPECIFIER": ">=0.1.6.post2.dev0,<0.1.14rc0",
    }
    header.update(overrides)
    lines = ['"""A test shim.\n\nRetire: never (test)."""', ""]
    lines += [f"{k} = {v!r}" for k, v in header.items() if v is not None]
    path = directory / f"{module_id}.py"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n\n" + textwrap.dedent(body))
    return path


def make_bundle(
    cache: Path, *, catalogue: Path | None = None, shims: Sequence[ShimInfo] | None = None
) -> LauncherBundle:
    chosen = shims
    if chosen is None and catalogue is not None:
        chosen = discover_shims(catalogue=catalogue, entry_points=False)
    return prepare_launcher(Context(env={}), cache_dir=cache, shims=chosen)


@dataclass
class PyRun:
    returncode: int
    stdout: str
    stderr: str
    report: list[dict[str, Any]]
    calls: list[dict[str, Any]]

    def applied_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("rocmenv: shim ")]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_python(
    code: str,
    *,
    bundle: LauncherBundle | Path | None,
    site: Path | None,
    tmp: Path,
    env: Mapping[str, str] | None = None,
    python: str = SYSTEM_PYTHON,
    args: Sequence[str] = (),
    extra_path: Sequence[Path] = (),
    timeout: float = 60.0,
) -> PyRun:
    """Run ``python -c code`` (or ``args`` when given) with the bundle first on PYTHONPATH."""
    report = tmp / f"report-{os.urandom(4).hex()}.jsonl"
    calls = tmp / f"calls-{os.urandom(4).hex()}.jsonl"
    path: list[str] = []
    if bundle is not None:
        path.append(str(bundle.host_dir if isinstance(bundle, LauncherBundle) else bundle))
    path += [str(p) for p in extra_path]
    if site is not None:
        path.append(str(site))
    full_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "ROCMENV_SHIMS_REPORT": str(report),
        "ROCMENV_STANDIN_LOG": str(calls),
        "PYTHONPATH": os.pathsep.join(path),
    }
    full_env.update(env or {})
    argv = [python, *(args or ["-c", code])]
    proc = subprocess.run(
        argv, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=tmp
    )
    return PyRun(
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        report=read_jsonl(report),
        calls=read_jsonl(calls),
    )


def host_python_ok() -> bool:
    return Path(SYSTEM_PYTHON).exists() and sys.platform.startswith("linux")
