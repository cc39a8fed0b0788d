"""Helpers for the layer benchmarks (``bench_layer.py``, ``bench_inspect.py --baseline``).

- :func:`real_layer`: a tar of real files from this machine (shared libraries, Python
  packages, data: what image layers hold), gzip'd by the ``gzip`` tool at level 6 (Docker's
  default) and zstd'd at level 3 (zstd's), cached under ``$TMPDIR/rocmenv-bench/`` so a
  second run does not pay for it again (``--clean`` in the benchmarks removes it);
- :func:`export_revision`: a past revision's ``rocmenv`` package, exported with ``git
  archive`` to run side by side with the working tree (``PYTHONPATH``), so "before" is
  measured on the same machine under the same load, interleaved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(tempfile.gettempdir()) / "rocmenv-bench"
SOURCES = ("/usr/lib", "/usr/share", "/usr/local", "/usr/bin")


@dataclass(frozen=True, kw_only=True)
class RealLayer:
    tar: Path  # uncompressed
    gzip: Path
    zstd: Path

    @property
    def size(self) -> int:
        return self.tar.stat().st_size


def real_layer(target_mb: int) -> RealLayer:
    """A layer of about ``target_mb`` MB of real files (uncompressed), made once."""
    CACHE.mkdir(exist_ok=True)
    base = CACHE / f"real-{target_mb}mb"
    layer = RealLayer(
        tar=base.with_suffix(".tar"),
        gzip=base.with_suffix(".tar.gz"),
        zstd=base.with_suffix(".tar.zst"),
    )
    if not layer.tar.exists():
        partial = base.with_suffix(".tar.part")
        _write_tar(partial, target_mb * 1_000_000)
        partial.rename(layer.tar)
    for path, argv in (
        (layer.gzip, ["gzip", "-6", "-c", str(layer.tar)]),
        (layer.zstd, ["zstd", "-3", "-q", "-c", str(layer.tar)]),
    ):
        if not path.exists():
            partial = path.with_name(path.name + ".part")
            with partial.open("wb") as out:
                subprocess.run(argv, stdout=out, check=True)
            partial.rename(path)
    return layer


def _write_tar(path: Path, target: int) -> None:
    total = 0
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for source in SOURCES:
            for directory, dirs, files in os.walk(source):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(directory, name)
                    if os.path.islink(full) or not os.path.isfile(full):
                        continue
                    try:
                        tar.add(full, arcname=full.lstrip("/"), recursive=False)
                    except OSError:
                        continue
                    total += os.path.getsize(full) + 512
                    if total >= target:
                        return


def export_revision(revision: str, into: Path) -> Path:
    """``rocmenv/``, ``shims/`` and ``pyproject.toml`` of ``revision`` under ``into``: put
    ``into`` first on ``PYTHONPATH`` (and run from another directory) to run that revision."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "rocmenv", "shims", "pyproject.toml"],
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def clean() -> None:
    shutil.rmtree(CACHE, ignore_errors=True)
