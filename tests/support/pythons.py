"""The Python interpreters rocmenv claims, and where to find them on a test machine.

The host side claims the versions of pyproject's ``Programming Language :: Python :: 3.X``
classifiers (``requires-python`` is their floor: ``tests/unit/test_packaging.py``);
``scripts/setup.sh`` makes a venv per claimed version (``.venv-3.X``, the main ``.venv``
stays the one the whole suite runs in) and ``scripts/test.sh`` runs the unit tests in each.
The launcher's older floor (3.8 syntax, 3.9 in the test family's containers) is exercised
with the interpreters found here too.

Interpreters are looked up on ``PATH`` (``python3.X``), then under pyenv's
``$PYENV_ROOT/versions/3.X.*`` (default ``~/.pyenv``, and root's ``/root/.pyenv``, where
this project's CI machine image has 3.6 to 3.13).

    python tests/support/pythons.py claimed          # "3.10 3.11 3.12 3.13"
    python tests/support/pythons.py find 3.12        # the interpreter's path, or exit 1
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def claimed_pythons(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """``["3.10", …]``: the Python versions pyproject's classifiers claim, oldest first."""
    text = pyproject.read_text(encoding="utf-8")
    found = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    return sorted(set(found), key=lambda v: tuple(map(int, v.split("."))))


def _pyenv_roots() -> list[Path]:
    roots = [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv"), "/root/.pyenv"]
    out: list[Path] = []
    for root in roots:
        if root and Path(root) not in out:
            out.append(Path(root))
    return out


def _version_of(path: Path) -> str | None:
    import subprocess

    try:
        done = subprocess.run(
            [str(path), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_python(version: str) -> Path | None:
    """An interpreter of ``version`` ("3.12"): ``python3.12`` on PATH, else pyenv's newest
    ``3.12.*``; checked by running it (a broken one is not found)."""
    candidates: list[Path] = []
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(Path(on_path))
    for root in _pyenv_roots():
        try:
            dirs = sorted(
                (root / "versions").glob(f"{version}.*"),
                key=lambda p: [int(x) if x.isdigit() else -1 for x in p.name.split(".")],
                reverse=True,
            )
        except OSError:
            continue
        candidates += [
            d / "bin" / f"python{version}" for d in dirs if d.name[len(version) + 1 :].isdigit()
        ]
    for candidate in candidates:
        try:
            usable = candidate.is_file() and os.access(candidate, os.X_OK)
        except OSError:
            usable = False
        if usable and _version_of(candidate) == version:
            return candidate
    return None


def main(argv: list[str]) -> int:
    if argv[:1] == ["claimed"]:
        print(" ".join(claimed_pythons()))
        return 0
    if len(argv) == 2 and argv[0] == "find":
        found = find_python(argv[1])
        if found is None:
            return 1
        print(found)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
