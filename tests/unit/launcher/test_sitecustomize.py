"""The launcher's sitecustomize in this process: the finder, chain-loading, the .pyc cache.

``test_launcher.py`` starts real interpreters with a bundle on ``PYTHONPATH``; a mutation
run cannot see code that runs there, so these tests call the same functions
(``rocmenv/launcher/sitecustomize.py``, imported with ``ROCMENV_SHIMS=0`` and an empty
``sys.path`` so that importing it changes nothing) against real files: other
``sitecustomize.py`` modules on a path, a built bundle, a ``__pycache__`` directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import marshal
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv import launcher
from tests.support.launcher import make_bundle, write_shim


@pytest.fixture(scope="module")
def site() -> types.ModuleType:
    """``rocmenv.launcher.sitecustomize``, imported so that its start-up does nothing."""
    saved_path, saved_env = list(sys.path), os.environ.get("ROCMENV_SHIMS")
    os.environ["ROCMENV_SHIMS"] = "0"
    sys.path[:] = []
    try:
        return importlib.import_module("rocmenv.launcher.sitecustomize")
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            del os.environ["ROCMENV_SHIMS"]
        else:
            os.environ["ROCMENV_SHIMS"] = saved_env


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the chained ``sitecustomize.py`` files wrote (each appends its own name)."""
    log: list[str] = []
    monkeypatch.setattr(sys.modules[__name__], "CHAIN_LOG", log, raising=False)
    yield log


def _customize(directory: Path, name: str, body: str = "") -> Path:
    """A ``sitecustomize.py`` in ``directory`` that records that it ran."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sitecustomize.py"
    path.write_text(f"import sys\nsys.modules[{__name__!r}].CHAIN_LOG.append({name!r})\n{body}")
    return path


def _launcher_copy(directory: Path) -> Path:
    """Another rocmenv launcher's ``sitecustomize.py`` (it carries the marker): never run."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sitecustomize.py"
    path.write_text(f"# {launcher.MARKER}: a copy\nraise AssertionError('a launcher ran twice')\n")
    return path


# -- chain-loading ---------------------------------------------------------------------------


def test_the_next_sitecustomize_after_ours_runs_and_only_that_one(
    site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[str]
) -> None:
    _customize(tmp_path / "before", "before")
    _launcher_copy(tmp_path / "copy1")
    _launcher_copy(tmp_path / "copy2")
    _customize(tmp_path / "theirs", "theirs")
    _customize(tmp_path / "later", "later")
    path = [tmp_path / d for d in ("copy1", "before")] + [Path(site._HERE)]
    path += [tmp_path / d for d in ("copy2", "theirs", "later")]
    monkeypatch.setattr(sys, "path", [str(p) for p in path])
    site._chain()
    assert ran == ["theirs"]


def test_without_ours_on_the_path_the_first_foreign_one_runs(
    site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[str]
) -> None:
    _launcher_copy(tmp_path / "copy")
    _customize(tmp_path / "theirs", "theirs")
    _customize(tmp_path / "later", "later")
    monkeypatch.setattr(sys, "path", [str(tmp_path / d) for d in ("copy", "theirs", "later")])
    site._chain()
    assert ran == ["theirs"]


def test_an_empty_path_entry_is_the_current_directory(
    site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[str]
) -> None:
    _customize(tmp_path / "cwd", "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setattr(sys, "path", [site._HERE, ""])
    site._chain()
    assert ran == ["cwd"]


def test_a_launcher_copy_as_the_last_one_ends_the_chain(
    site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[str]
) -> None:
    _launcher_copy(tmp_path / "copy")
    monkeypatch.setattr(sys, "path", [site._HERE, str(tmp_path / "copy")])
    site._chain()
    assert ran == []


def test_a_marker_further_down_a_file_does_not_make_it_a_launcher(
    site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[str]
) -> None:
    """Only the first line says what a file is: one that quotes the marker later runs."""
    _customize(tmp_path / "theirs", "theirs", "#\n" * 60 + f"# {launcher.MARKER}\n")
    monkeypatch.setattr(sys, "path", [site._HERE, str(tmp_path / "theirs")])
    site._chain()
    assert ran == ["theirs"]


def test_a_failing_chained_sitecustomize_is_reported_like_site_does(
    site: types.ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ran: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    theirs = _customize(tmp_path / "theirs", "theirs", "raise ValueError('theirs is broken')\n")
    monkeypatch.setattr(sys, "path", [site._HERE, str(tmp_path / "theirs")])
    site._chain()
    assert ran == ["theirs"]
    assert capsys.readouterr().err == (
        f"Error in sitecustomize {theirs}; ValueError: theirs is broken\n"
    )


def test_no_other_sitecustomize_is_nothing_to_do(
    site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran: list[str]
) -> None:
    monkeypatch.setattr(sys, "path", [site._HERE, str(tmp_path)])
    site._chain()
    assert ran == []


# -- the finder ------------------------------------------------------------------------------


@pytest.fixture
def targets(site: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    chosen = {"rtarget_sitecustomize"}
    monkeypatch.setattr(site, "_TARGETS", chosen)
    before = set(sys.modules)
    yield chosen
    for name in set(sys.modules) - before:
        if name.startswith("_rocmenv_launcher"):
            del sys.modules[name]


def test_the_finder_leaves_every_other_name_alone(
    site: types.ModuleType, targets: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert site._Finder().find_spec("json") is None
    assert site._Finder().find_spec("rtarget_sitecustomize_other") is None
    assert targets == {"rtarget_sitecustomize"} and capsys.readouterr().err == ""


def test_without_the_runtime_the_finder_says_so_once_and_turns_shims_off(
    site: types.ModuleType,
    targets: set[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "_rocmenv_launcher" not in p])
    assert site._Finder().find_spec("rtarget_sitecustomize") is None
    assert capsys.readouterr().err == (
        "rocmenv: shims off, no launcher runtime: No module named '_rocmenv_launcher'\n"
    )
    assert targets == set()
    assert site._Finder().find_spec("rtarget_sitecustomize") is None
    assert capsys.readouterr().err == ""


def test_a_target_goes_to_the_bundle_s_runtime(
    site: types.ModuleType, targets: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "rtarget_sitecustomize.py").write_text("")
    body = "def probe(m):\n    return False\n\n\ndef static_probe(f):\n    return False, ''\n\n\ndef apply(m):\n    pass\n"
    write_shim(tmp_path / "catalogue", "one", body, TARGET="rtarget_sitecustomize")
    bundle = make_bundle(tmp_path / "cache", catalogue=tmp_path / "catalogue")
    monkeypatch.setattr(sys, "path", [str(bundle.host_dir), str(tmp_path / "site"), *sys.path])
    finder = site._Finder()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    spec = finder.find_spec("rtarget_sitecustomize", None, None)
    assert spec is not None
    assert spec.origin == str(tmp_path / "site" / "rtarget_sitecustomize.py")
    assert type(spec.loader).__module__ == "_rocmenv_launcher._runtime"
    assert spec.loader._shim_ids == ("one",)


def test_the_finder_passes_the_package_path_and_the_reload_target_on(
    site: types.ModuleType, targets: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site" / "rtarget_sitecustomize"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub.py").write_text("")
    targets.add("rtarget_sitecustomize.sub")
    body = "def probe(m):\n    return False\n\n\ndef static_probe(f):\n    return False, ''\n\n\ndef apply(m):\n    pass\n"
    write_shim(tmp_path / "catalogue", "one", body, TARGET="rtarget_sitecustomize.sub")
    bundle = make_bundle(tmp_path / "cache", catalogue=tmp_path / "catalogue")
    monkeypatch.setattr(sys, "path", [str(bundle.host_dir), str(tmp_path / "site"), *sys.path])
    finder = site._Finder()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    try:
        module = importlib.import_module("rtarget_sitecustomize.sub")
        assert type(module.__loader__).__name__ == "SourceFileLoader"
        seen: list[object] = []

        class Recording:
            def find_spec(self, name: str, path: object = None, target: object = None) -> None:
                seen.append(target)

        monkeypatch.setattr(sys, "meta_path", [finder, Recording(), *sys.meta_path[1:]])
        assert importlib.reload(module) is module
        assert seen == [module]
    finally:
        for name in ("rtarget_sitecustomize.sub", "rtarget_sitecustomize"):
            sys.modules.pop(name, None)


# -- the .pyc cache --------------------------------------------------------------------------


@pytest.fixture
def source(site: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the launcher's sitecustomize.py that the module takes for its own file."""
    copy = tmp_path / "bundle" / "sitecustomize.py"
    copy.parent.mkdir()
    copy.write_bytes((launcher.SOURCE_DIR / "sitecustomize.py").read_bytes())
    monkeypatch.setattr(site, "__file__", str(copy))
    return copy


def test_the_compiled_launcher_is_cached_where_python_would_look(
    site: types.ModuleType, source: Path
) -> None:
    (source.parent / "__pycache__").mkdir()
    code = compile(source.read_bytes(), str(source), "exec")
    site._cache_pyc(code)
    pyc = Path(importlib.util.cache_from_source(str(source)))
    data = pyc.read_bytes()
    st = source.stat()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[4:8], "little") == 0  # a timestamp pyc
    assert int.from_bytes(data[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
    assert int.from_bytes(data[12:16], "little") == st.st_size & 0xFFFFFFFF
    assert marshal.loads(data[16:]) == code


def test_an_existing_pyc_is_left_alone(site: types.ModuleType, source: Path) -> None:
    (source.parent / "__pycache__").mkdir()
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.write_bytes(b"someone else's")
    site._cache_pyc(compile("", str(source), "exec"))
    assert pyc.read_bytes() == b"someone else's"


def test_no_cache_directory_means_no_pyc(site: types.ModuleType, source: Path) -> None:
    site._cache_pyc(compile("", str(source), "exec"))
    assert not (source.parent / "__pycache__").exists()
    assert sys.modules["rocmenv.launcher.sitecustomize"] is site
