"""The shim runtime in this process: decisions, the loader wrapper, records and reports.

``test_launcher.py`` runs the launcher in fresh interpreters, as in a container; a mutation
run cannot see code that runs there, so these tests drive the same runtime
(``rocmenv/launcher/_runtime.py``) in-process, through the import system: a real bundle is
built from a catalogue of test shims, its generated ``_index`` and ``shims/`` are put on
``rocmenv.launcher``'s path (where the runtime looks for them, as ``_rocmenv_launcher``'s
in a bundle), and the target is a real module in a site directory with a ``.dist-info``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import rocmenv.launcher as launcher_pkg
from rocmenv.launcher import _runtime
from tests.support.launcher import make_bundle, write_shim

APPLY_ATTR = """
def probe(module):
    return not hasattr(module, "feature")


def static_probe(find_source):
    return True, "test"


def apply(module):
    module.feature = "shimmed"
"""

BROKEN = """
def probe(module):
    return True


def static_probe(find_source):
    return True, "test"


def apply(module):
    raise RuntimeError("deliberately broken")
"""


@dataclass
class Lab:
    """A site directory with a target module, a catalogue of shims for it, and a finder
    that sends the target's import through the runtime as sitecustomize's does."""

    root: Path
    monkeypatch: pytest.MonkeyPatch
    target: str
    site: Path = field(init=False)
    catalogue: Path = field(init=False)
    report: Path = field(init=False)

    def __post_init__(self) -> None:
        self.site = self.root / "site"
        self.catalogue = self.root / "catalogue"
        self.report = self.root / "report.jsonl"
        self.site.mkdir()
        self.monkeypatch.syspath_prepend(str(self.site))
        self.monkeypatch.setenv("ROCMENV_SHIMS_REPORT", str(self.report))
        for name in ("ROCMENV_SHIMS_STRICT", "ROCMENV_SHIMS_QUIET"):
            self.monkeypatch.delenv(name, raising=False)
        self.module(self.target, "feature_present = False\n")

    def module(self, name: str, body: str) -> Path:
        path = self.site / f"{name}.py"
        path.write_text(body)
        importlib.invalidate_caches()
        return path

    def install(self, dist: str, version: str) -> None:
        info = self.site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        importlib.invalidate_caches()

    def shim(self, module_id: str, body: str = APPLY_ATTR, **overrides: object) -> None:
        header = {"TARGET": self.target, "DISTRIBUTIONS": (f"{self.target}-dist",)}
        write_shim(self.catalogue, module_id, body, **{**header, **overrides})

    def bundle(self) -> None:
        """Build the bundle and let the runtime find its index and shims."""
        bundle = make_bundle(self.root / "cache", catalogue=self.catalogue)
        extra = str(bundle.host_dir / "_rocmenv_launcher")
        self.monkeypatch.setattr(launcher_pkg, "__path__", [*launcher_pkg.__path__, extra])

    def finder(self, *targets: str) -> Finder:
        finder = Finder(set(targets or (self.target,)))
        self.monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
        return finder

    def records(self) -> list[dict[str, object]]:
        if not self.report.exists():
            return []
        return [json.loads(line) for line in self.report.read_text().splitlines()]


class Finder:
    """What the launcher's sitecustomize installs: the target names go to the runtime."""

    def __init__(self, targets: set[str]) -> None:
        self.targets = targets

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name in self.targets:
            return _runtime.find_spec(self, name, path, target)  # type: ignore[arg-type]
        return None


@pytest.fixture
def lab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Lab]:
    target = (
        "rtarget_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")[-40:]
    )
    before = set(sys.modules)
    try:
        yield Lab(root=tmp_path, monkeypatch=monkeypatch, target=target)
    finally:
        for name in set(sys.modules) - before:
            if name.startswith((target, "rocmenv.launcher._index", "rocmenv.launcher.shims")):
                del sys.modules[name]


# -- decisions ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "YES", " on ", "True"])
def test_a_switch_is_on_for_the_true_spellings(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ROCMENV_TEST_SWITCH", value)
    assert _runtime.flag("ROCMENV_TEST_SWITCH") is True


@pytest.mark.parametrize("value", ["0", "", "no", "off", "y", "2", "enabled"])
def test_a_switch_is_off_for_anything_else(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ROCMENV_TEST_SWITCH", value)
    assert _runtime.flag("ROCMENV_TEST_SWITCH") is False
    monkeypatch.delenv("ROCMENV_TEST_SWITCH")
    assert _runtime.flag("ROCMENV_TEST_SWITCH") is False


def _shim_like(**attrs: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(**attrs)


def test_a_matching_version_decides_to_apply(lab: Lab) -> None:
    lab.install("rt-dist-a", "0.1.9.post1")
    shim = _shim_like(DISTRIBUTIONS=["rt-dist-a"], SPECIFIER=">=0.1.6,<0.1.14rc0")
    decision = _runtime.decide_version(shim)
    assert decision.apply is True
    assert decision.reason == "rt-dist-a 0.1.9.post1 matches >=0.1.6,<0.1.14rc0"
    assert (decision.distribution, decision.version) == ("rt-dist-a", "0.1.9.post1")
    assert decision.specifier_match is True


def test_a_version_outside_the_specifier_is_not_applied(lab: Lab) -> None:
    lab.install("rt-dist-b", "0.1.14")
    shim = _shim_like(DISTRIBUTIONS=("rt-dist-b",), SPECIFIER="<0.1.14rc0")
    decision = _runtime.decide_version(shim)
    assert decision.apply is False
    assert decision.reason == "rt-dist-b 0.1.14 is outside <0.1.14rc0"
    assert decision.specifier_match is False
    assert (decision.distribution, decision.version) == ("rt-dist-b", "0.1.14")


def test_a_version_that_is_not_pep440_is_not_applied_and_says_so(lab: Lab) -> None:
    lab.install("rt-dist-c", "nightly_build")
    shim = _shim_like(DISTRIBUTIONS=("rt-dist-c",), SPECIFIER=">=0")
    decision = _runtime.decide_version(shim)
    assert decision.apply is False
    assert decision.specifier_match is None
    assert decision.reason == "rt-dist-c nightly_build is not a PEP 440 version"


def test_the_first_installed_distribution_of_the_list_decides(lab: Lab) -> None:
    lab.install("rt-second", "2.0")
    lab.install("rt-third", "3.0")
    assert _runtime.find_distribution(("rt-absent", "rt-second", "rt-third")) == (
        "rt-second",
        "2.0",
    )
    assert _runtime.find_distribution(("rt-absent", "rt-absent-too")) == (None, None)


def test_no_installed_distribution_names_every_candidate() -> None:
    shim = _shim_like(DISTRIBUTIONS=("rt-absent-1", "rt-absent-2"), SPECIFIER=">=0")
    decision = _runtime.decide_version(shim)
    assert decision.apply is False
    assert decision.reason == "none of rt-absent-1, rt-absent-2 is installed"
    assert (decision.distribution, decision.version, decision.specifier_match) == (None,) * 3


def test_prereleases_and_local_builds_are_inside_a_range() -> None:
    assert _runtime.specifier_contains("<0.1.14rc0", "0.1.12.post2.dev150+ga6bb49937") is True
    assert _runtime.specifier_contains(">=1.0", "1.1rc1") is True
    assert _runtime.specifier_contains("<0.1.14rc0", "0.1.14rc0") is False
    assert _runtime.specifier_contains(">=0", "not a version") is None


def test_what_is_missing_defaults_when_a_shim_does_not_say() -> None:
    assert _runtime.missing_text(_shim_like(MISSING="m lacks f")) == "m lacks f"
    assert _runtime.missing_text(_shim_like()) == "probe found the feature missing"
    assert _runtime.missing_text(_shim_like(MISSING=None)) == "probe found the feature missing"


# -- through the import system ---------------------------------------------------------------


def test_an_import_of_the_target_applies_the_shim_and_reports_it(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.install(f"{lab.target}-dist", "1.5")
    lab.shim("add_feature", SPECIFIER=">=1,<2", MISSING="the target lacks feature")
    lab.bundle()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert module.feature == "shimmed"
    reason = f"{lab.target}-dist 1.5 matches >=1,<2; the target lacks feature"
    assert capsys.readouterr().err == f"rocmenv: shim add-feature applied ({reason})\n"
    (record,) = lab.records()
    facts = {k: record.pop(k) for k in ("pid", "python", "executable", "time")}
    assert record == {
        "shim": "add-feature",
        "target": lab.target,
        "distribution": f"{lab.target}-dist",
        "version": "1.5",
        "specifier": ">=1,<2",
        "decision": "applied",
        "reason": reason,
        "v": _runtime.REPORT_VERSION,
    }
    assert facts["pid"] == os.getpid() and facts["executable"] == sys.executable
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert isinstance(facts["time"], float) and facts["time"] > 1.7e9


def test_the_real_loader_is_back_once_the_module_executed(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert type(module.__loader__) is importlib.machinery.SourceFileLoader
    assert module.__spec__ is not None
    assert type(module.__spec__.loader) is importlib.machinery.SourceFileLoader
    assert module.__spec__.loader is module.__loader__


def test_a_module_that_asks_its_loader_while_executing_gets_the_real_answers(lab: Lab) -> None:
    """The wrapper stands in for the real loader until the module has run: ``get_source``,
    ``get_data`` and ``is_package`` asked from inside the module still work."""
    lab.install(f"{lab.target}-dist", "1.0")
    lab.module(
        lab.target,
        "SOURCE_LINES = len(__loader__.get_source(__name__).splitlines())\n"
        "IS_PACKAGE = __spec__.loader.is_package(__name__)\n"
        "LOADER = type(__loader__).__name__\n",
    )
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert (module.SOURCE_LINES, module.IS_PACKAGE, module.LOADER) == (3, False, "_Loader")
    assert module.feature == "shimmed"


class _CustomModule(types.ModuleType):
    pass


class _CreatingLoader(importlib.abc.Loader):
    """A loader that makes its own module object (as extension modules' loaders do)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _CustomModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.made_by = "creating loader"  # type: ignore[attr-defined]


class _PlainLoader:
    """A loader with ``exec_module`` only (no ``create_module``: the default object)."""

    def exec_module(self, module: types.ModuleType) -> None:
        module.made_by = "plain loader"  # type: ignore[attr-defined]


class _OneModuleFinder:
    def __init__(self, name: str, loader: object) -> None:
        self.name, self.loader = name, loader

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != self.name:
            return None
        return importlib.util.spec_from_loader(name, self.loader)  # type: ignore[arg-type]


def test_a_loader_that_creates_its_module_keeps_doing_so(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    name = lab.target + "_created"
    lab.shim("add_feature", SPECIFIER=">=1", TARGET=name)
    lab.bundle()
    lab.monkeypatch.setattr(
        sys, "meta_path", [*sys.meta_path, _OneModuleFinder(name, _CreatingLoader())]
    )
    lab.finder(name)
    module = importlib.import_module(name)
    assert type(module) is _CustomModule
    assert (module.made_by, module.feature) == ("creating loader", "shimmed")


def test_a_loader_without_create_module_gets_a_plain_module(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    name = lab.target + "_plain"
    lab.shim("add_feature", SPECIFIER=">=1", TARGET=name)
    lab.bundle()
    lab.monkeypatch.setattr(
        sys, "meta_path", [*sys.meta_path, _OneModuleFinder(name, _PlainLoader())]
    )
    lab.finder(name)
    module = importlib.import_module(name)
    assert type(module) is types.ModuleType
    assert (module.made_by, module.feature) == ("plain loader", "shimmed")


class _AskingFinder:
    """A finder below ours that asks ``importlib.util.find_spec`` for the same name and
    returns what it found (as import hooks that wrap other finders' specs do), guarding only
    its own recursion."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asking = False
        self.asked = 0

    def find_spec(
        self, name: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != self.name or self.asking:
            return None
        self.asking = True
        self.asked += 1
        try:
            return importlib.util.find_spec(name)
        finally:
            self.asking = False


def test_a_finder_below_that_asks_for_the_target_again_does_not_loop(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    asking = _AskingFinder(lab.target)
    lab.monkeypatch.setattr(sys, "meta_path", [asking, *sys.meta_path])
    lab.finder()
    module = importlib.import_module(lab.target)
    assert module.feature == "shimmed"
    assert asking.asked == 1
    assert lab.target not in _runtime._busy
    assert len(lab.records()) == 1  # the nested question was not shimmed as well


class _LegacyFinder:
    """A finder of the old protocol: ``find_module`` only."""

    def find_module(self, name: str, path: object = None) -> None:
        return None


def test_a_finder_without_find_spec_is_passed_over(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    assert _runtime.shim_ids(lab.target) == ("add_feature",)  # the index, imported now
    lab.monkeypatch.setattr(sys, "meta_path", [_LegacyFinder(), *sys.meta_path])
    finder = lab.finder()
    spec = _runtime.find_spec(finder, lab.target, None, None)
    assert spec is not None and type(spec.loader).__name__ == "_Loader"
    assert spec.origin == str(lab.site / f"{lab.target}.py")


def test_a_name_no_finder_knows_gives_no_spec(lab: Lab) -> None:
    finder = lab.finder(lab.target + "_nowhere")
    assert _runtime.find_spec(finder, lab.target + "_nowhere", None, None) is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(lab.target + "_nowhere")


def test_every_shim_of_a_target_runs_in_the_index_order(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    first = APPLY_ATTR.replace('"shimmed"', "getattr(module, 'order', '') + 'a'").replace(
        'hasattr(module, "feature")', 'hasattr(module, "x_never")'
    )
    lab.shim("a_first", first.replace("module.feature =", "module.order ="), SPECIFIER=">=1")
    lab.shim(
        "b_second",
        first.replace("module.feature =", "module.order =").replace("+ 'a'", "+ 'b'"),
        SPECIFIER=">=1",
    )
    lab.bundle()
    assert _runtime.shim_ids(lab.target) == ("a_first", "b_second")
    assert _runtime.shim_ids(lab.target + "_other") == ()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert module.order == "ab"
    assert [r["shim"] for r in lab.records()] == ["a-first", "b-second"]
    assert capsys.readouterr().err.count("applied") == 2


def test_a_probe_that_finds_the_feature_skips_the_shim(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.module(lab.target, "feature = 'native'\n")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert module.feature == "native"
    (record,) = lab.records()
    assert record["decision"] == "skipped"
    assert record["reason"] == (
        f"{lab.target}-dist 1.0 matches >=1; probe: {lab.target} already has the feature"
    )
    assert capsys.readouterr().err == ""


def test_a_version_outside_the_range_is_skipped_without_probing(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "2.0")
    lab.shim("add_feature", BROKEN, SPECIFIER="<2")  # its probe and apply would fail
    lab.bundle()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert not hasattr(module, "feature")
    (record,) = lab.records()
    assert (record["decision"], record["reason"]) == (
        "skipped",
        f"{lab.target}-dist 2.0 is outside <2",
    )
    assert (record["distribution"], record["version"], record["specifier"]) == (
        f"{lab.target}-dist",
        "2.0",
        "<2",
    )


def test_quiet_mode_drops_the_applied_line_but_not_the_record(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.monkeypatch.setenv("ROCMENV_SHIMS_QUIET", "1")
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    lab.finder()
    assert importlib.import_module(lab.target).feature == "shimmed"
    assert capsys.readouterr().err == ""
    assert [r["decision"] for r in lab.records()] == ["applied"]


def test_a_failing_shim_warns_records_and_the_import_goes_on(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("a_broken", BROKEN, SPECIFIER=">=1")
    lab.shim("b_good", SPECIFIER=">=1")
    lab.bundle()
    lab.finder()
    module = importlib.import_module(lab.target)
    assert module.feature == "shimmed"  # the next shim still ran
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"rocmenv: shim a-broken failed on import of {lab.target}: RuntimeError: deliberately "
        "broken (continuing; ROCMENV_SHIMS_STRICT=1 makes this fatal)"
    )
    assert err[1].startswith("rocmenv: shim b-good applied (")
    broken, good = lab.records()
    assert (broken["shim"], broken["decision"]) == ("a-broken", "failed")
    assert broken["reason"] == "RuntimeError: deliberately broken"
    assert (broken["distribution"], broken["version"]) == (f"{lab.target}-dist", "1.0")
    assert good["decision"] == "applied"


def test_strict_mode_makes_a_failing_shim_raise_naming_it(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.monkeypatch.setenv("ROCMENV_SHIMS_STRICT", "yes")
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("a_broken", BROKEN, SPECIFIER=">=1")
    lab.bundle()
    lab.finder()
    with pytest.raises(_runtime.ShimFailure) as info:
        importlib.import_module(lab.target)
    assert str(info.value) == (
        f"rocmenv: shim a-broken failed on import of {lab.target}: RuntimeError: deliberately broken"
    )
    assert isinstance(info.value.__cause__, RuntimeError)
    assert capsys.readouterr().err == ""
    assert [r["decision"] for r in lab.records()] == ["failed"]


def test_a_shim_that_cannot_load_is_reported_under_its_module_id(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("will_break", SPECIFIER=">=1")
    lab.bundle()
    shim_file = Path(launcher_pkg.__path__[-1]) / "shims" / "will_break.py"
    shim_file.chmod(0o644)
    shim_file.write_text("raise ImportError('no such helper')\n")
    lab.finder()
    importlib.import_module(lab.target)
    (record,) = lab.records()
    assert record == {
        **{k: record[k] for k in ("pid", "python", "executable", "time", "v")},
        "shim": "will_break",
        "target": lab.target,
        "decision": "failed",
        "reason": "ImportError: no such helper",
    }
    assert "rocmenv: shim will_break failed on import of" in capsys.readouterr().err


# -- targets imported before start-up --------------------------------------------------------


def test_targets_imported_before_start_up_are_shimmed_in_name_order(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    second = lab.target + "_b"
    lab.module(second, "")
    lab.shim("on_a", SPECIFIER=">=1")
    lab.shim("on_b", SPECIFIER=">=1", TARGET=second)
    lab.bundle()
    first_module = importlib.import_module(lab.target)  # before any finder: not shimmed
    second_module = importlib.import_module(second)
    assert not hasattr(first_module, "feature")
    _runtime.handle_preimported({second, lab.target, lab.target + "_never_imported"})
    assert first_module.feature == second_module.feature == "shimmed"
    assert [r["target"] for r in lab.records()] == [lab.target, second]


def test_a_strict_failure_before_start_up_stops_the_interpreter(lab: Lab) -> None:
    lab.monkeypatch.setenv("ROCMENV_SHIMS_STRICT", "1")
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("a_broken", BROKEN, SPECIFIER=">=1")
    lab.bundle()
    importlib.import_module(lab.target)
    with pytest.raises(SystemExit) as info:
        _runtime.handle_preimported({lab.target})
    assert str(info.value.code).startswith(
        f"rocmenv: shim a-broken failed on import of {lab.target}"
    )
    assert isinstance(info.value.__cause__, _runtime.ShimFailure)


# -- the report file -------------------------------------------------------------------------


def test_report_lines_are_appended_one_json_document_each(lab: Lab) -> None:
    _runtime._report({"shim": "one", "decision": "applied"})
    _runtime._report({"shim": "two", "decision": "skipped"})
    text = lab.report.read_text()
    assert text.endswith("\n") and text.count("\n") == 2
    first, second = (json.loads(line) for line in text.splitlines())
    assert (first["shim"], second["shim"]) == ("one", "two")
    assert list(first) == sorted(first)  # sort_keys: stable lines to diff
    assert first["v"] == 1


def test_the_caller_s_record_is_left_as_it_was(lab: Lab) -> None:
    record: dict[str, object] = {"shim": "one"}
    _runtime._report(record)
    assert record == {"shim": "one"}


def test_the_report_file_is_created_readable_by_every_process(lab: Lab) -> None:
    old = os.umask(0)
    try:
        _runtime._report({"shim": "one"})
    finally:
        os.umask(old)
    assert lab.report.stat().st_mode & 0o777 == 0o666


def test_no_report_without_the_variable(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCMENV_SHIMS_REPORT", "")
    _runtime._report({"shim": "one"})
    monkeypatch.delenv("ROCMENV_SHIMS_REPORT")
    _runtime._report({"shim": "one"})
    assert not lab.report.exists()


def test_a_report_that_cannot_be_written_warns_and_goes_on(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    where = lab.root / "no-such-dir" / "report.jsonl"
    monkeypatch.setenv("ROCMENV_SHIMS_REPORT", str(where))
    _runtime._report({"shim": "one"})
    err = capsys.readouterr().err
    assert err.startswith(f"rocmenv: cannot append to ROCMENV_SHIMS_REPORT={where}: ")
    assert "No such file or directory" in err and err.endswith("\n")


def test_alone_on_the_meta_path_the_runtime_finds_nothing(lab: Lab) -> None:
    finder = Finder({lab.target})
    lab.monkeypatch.setattr(sys, "meta_path", [finder])
    assert _runtime.find_spec(finder, lab.target, None, None) is None


def test_a_submodule_target_is_found_through_its_package_s_path(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    package = lab.site / (lab.target + "_pkg")
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sub.py").write_text("")
    name = package.name + ".sub"
    lab.shim("add_feature", SPECIFIER=">=1", TARGET=name)
    lab.bundle()
    lab.finder(name)
    assert importlib.import_module(name).feature == "shimmed"


class _RecordingFinder:
    """A finder below ours that notes what it was asked (and finds nothing)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[tuple[object, object]] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == self.name:
            self.asked.append((path, target))
        return None


def test_a_reload_hands_the_module_to_the_finders_below(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    recording = _RecordingFinder(lab.target)
    lab.monkeypatch.setattr(sys, "meta_path", [recording, *sys.meta_path])
    lab.finder()
    module = importlib.import_module(lab.target)
    del module.feature
    assert importlib.reload(module).feature == "shimmed"
    assert recording.asked == [(None, None), (None, module)]


class _SlottedModule:
    """A module object that takes no import attributes (the import system lets it be)."""

    __slots__ = ("__name__", "feature", "made_by")


class _SlottedLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return _SlottedModule()

    def exec_module(self, module: types.ModuleType) -> None:
        module.made_by = "slotted loader"  # type: ignore[attr-defined]


def test_a_module_object_without_spec_or_loader_attributes_is_shimmed(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    name = lab.target + "_slotted"
    lab.shim("add_feature", SPECIFIER=">=1", TARGET=name)
    lab.bundle()
    lab.monkeypatch.setattr(
        sys, "meta_path", [*sys.meta_path, _OneModuleFinder(name, _SlottedLoader())]
    )
    lab.finder(name)
    module: Any = importlib.import_module(name)
    slotted = type(module) is _SlottedModule
    assert slotted
    assert (module.made_by, module.feature) == ("slotted loader", "shimmed")


def test_a_module_executed_by_hand_without_a_spec_is_shimmed(lab: Lab) -> None:
    lab.install(f"{lab.target}-dist", "1.0")
    lab.shim("add_feature", SPECIFIER=">=1")
    lab.bundle()
    path = str(lab.site / f"{lab.target}.py")
    loader = _runtime._Loader(
        importlib.machinery.SourceFileLoader(lab.target, path), ("add_feature",)
    )
    module = types.ModuleType(lab.target)
    loader.exec_module(module)
    assert (module.feature_present, module.feature) == (False, "shimmed")
    assert module.__spec__ is None
