"""Host side of the shims: reading shim files, the bundle builder and its cache, PYTHONPATH."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocmenv import launcher
from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.errors import ConfigError, EngineError
from rocmenv.shims.bundle import (
    MANIFEST,
    bundle_digest,
    bundle_files,
    install_launcher,
    merge_pythonpath,
    prepare_launcher,
)
from rocmenv.shims.catalogue import catalogue_dir, discover_shims, parse_shim_file
from rocmenv.shims.probe import BindMount, check_image_versions, classify, parse_probe_output
from tests.support.launcher import (
    SYSTEM_PYTHON,
    make_bundle,
    run_python,
    standin_site,
    write_shim,
)

GOOD_BODY = """
def probe(module):
    return not hasattr(module, "rocmenv_test_attr")


def static_probe(find_source):
    return (find_source("aiter.ops.shuffle") is not None), "test"


def apply(module):
    module.rocmenv_test_attr = 42
"""


# ------------------------------------------------------------------ the catalogue


def test_catalogue_is_found_in_the_checkout():
    assert catalogue_dir() == Path(__file__).resolve().parents[3] / "shims"


def test_the_first_shim_declares_what_the_design_says():
    (shim,) = [s for s in discover_shims(entry_points=False) if s.name == "aiter-shuffle-scale"]
    assert shim.target == "aiter.ops.shuffle"
    assert shim.distributions == ("amd-aiter", "aiter")
    assert shim.specifier == ">=0.1.6.post2.dev0,<0.1.14rc0"
    assert shim.source == "catalogue" and shim.package is None
    assert shim.retire and "v0.1.14-rc0" in shim.retire
    assert shim.summary.startswith("Add ``aiter.ops.shuffle.shuffle_scale``")


@pytest.mark.parametrize(
    ("overrides", "body", "message"),
    [
        ({"NAME": None}, GOOD_BODY, "does not define NAME"),
        ({}, GOOD_BODY.replace("def apply", "def apply_"), "does not define apply"),
        ({"SPECIFIER": ">=1.0 and <2"}, GOOD_BODY, "is not a valid PEP 440 specifier"),
        ({"TARGET": "aiter/ops/shuffle"}, GOOD_BODY, "is not a dotted module name"),
        ({"DISTRIBUTIONS": ()}, GOOD_BODY, "is not a non-empty tuple of distribution names"),
        ({"DISTRIBUTIONS": "amd-aiter"}, GOOD_BODY, "is not a non-empty tuple"),
        ({"NAME": "Bad Name"}, GOOD_BODY, "is not a lower-case name"),
        ({}, "import torch\n" + GOOD_BODY, "imports 'torch' at import time (line"),
        ({}, GOOD_BODY + "\nmatch x:\n    case 1:\n        pass\n", "is not valid Python 3.8"),
    ],
)
def test_malformed_shims_are_config_errors_naming_the_file(tmp_path, overrides, body, message):
    path = write_shim(tmp_path, "bad_shim", body, **overrides)
    with pytest.raises(ConfigError) as err:
        parse_shim_file(path)
    assert str(path) in err.value.what
    assert message in err.value.what
    assert err.value.hint


def test_a_shim_without_docstring_is_refused(tmp_path):
    path = tmp_path / "nodoc.py"
    path.write_text(
        "NAME = 'x'\nTARGET = 'a.b'\nDISTRIBUTIONS = ('a',)\nSPECIFIER = '<1'\n" + GOOD_BODY
    )
    with pytest.raises(ConfigError, match="has no module docstring"):
        parse_shim_file(path)


def test_a_computed_constant_is_refused(tmp_path):
    path = write_shim(tmp_path, "computed", GOOD_BODY)
    path.write_text(path.read_text().replace("NAME = 'computed'", "NAME = 'comp' + 'uted'"))
    with pytest.raises(ConfigError, match="NAME must be a literal"):
        parse_shim_file(path)


def test_duplicate_shim_names_are_refused(tmp_path):
    write_shim(tmp_path, "one", GOOD_BODY, NAME="same-name")
    write_shim(tmp_path, "two", GOOD_BODY, NAME="same-name")
    with pytest.raises(ConfigError, match="two shims are named 'same-name'"):
        discover_shims(catalogue=tmp_path, entry_points=False)


def test_private_files_in_the_catalogue_are_ignored(tmp_path):
    write_shim(tmp_path, "one", GOOD_BODY)
    (tmp_path / "_helper.py").write_text("this is not a shim")
    assert [s.name for s in discover_shims(catalogue=tmp_path, entry_points=False)] == ["one"]


# ------------------------------------------------------------------ entry points


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """An installed distribution declaring a shim through the `rocmenv.shims` entry point."""
    site = tmp_path / "ep-site"
    write_shim(site / "thirdparty", "rocmenv_shim", GOOD_BODY, NAME="third-party-attr")
    (site / "thirdparty" / "__init__.py").write_text("raise ImportError('never imported')\n")
    info = site / "thirdparty_shims-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-shims\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[rocmenv.shims]\nattr = thirdparty.rocmenv_shim\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_entry_point_shims_are_discovered_without_importing_them(third_party):
    shims = {s.name: s for s in discover_shims()}
    shim = shims["third-party-attr"]
    assert shim.source == "entry-point"
    assert shim.package == "thirdparty-shims"
    assert shim.entry_point == "attr = thirdparty.rocmenv_shim"
    assert shim.path == third_party / "thirdparty" / "rocmenv_shim.py"
    assert "thirdparty" not in sys.modules
    assert "aiter-shuffle-scale" in shims


@pytest.mark.requires("system-python")
def test_entry_point_shims_are_bundled_and_applied(third_party, tmp_path):
    bundle = prepare_launcher(Context(env={}), cache_dir=tmp_path / "cache")
    assert {s.name for s in bundle.shims} == {"aiter-shuffle-scale", "third-party-attr"}
    site = standin_site(tmp_path, layout="old")
    r = run_python(
        "import aiter.ops.shuffle as s; print(s.rocmenv_test_attr, hasattr(s, 'shuffle_scale'))",
        bundle=bundle,
        site=site,
        tmp=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["42", "True"]
    assert {rec["shim"] for rec in r.report} == {"aiter-shuffle-scale", "third-party-attr"}


def test_entry_point_with_an_attribute_is_refused(third_party):
    ep = third_party / "thirdparty_shims-1.0.dist-info" / "entry_points.txt"
    ep.write_text("[rocmenv.shims]\nattr = thirdparty.rocmenv_shim:something\n")
    with pytest.raises(ConfigError, match="the value must be a module path"):
        discover_shims()


# ------------------------------------------------------------------ bundles


def test_bundle_embeds_the_index_in_sitecustomize(tmp_path):
    bundle = make_bundle(tmp_path / "cache")
    text = (bundle.host_dir / "sitecustomize.py").read_text()
    assert "_TARGETS = set('aiter.ops.shuffle'.split())" in text
    index = (bundle.host_dir / "_rocmenv_launcher" / "_index.py").read_text()
    assert "'aiter.ops.shuffle': ('aiter_shuffle_scale',)" in index
    assert launcher.MARKER in text.splitlines()[0]
    assert (bundle.host_dir / "probe.py").is_file()
    assert (bundle.host_dir / "_rocmenv_launcher" / "shims" / "aiter_shuffle_scale.py").is_file()
    assert (bundle.host_dir / "_rocmenv_launcher" / "_vendor" / "packaging" / "LICENSE").is_file()
    manifest = json.loads((bundle.host_dir / MANIFEST).read_text())
    assert manifest["digest"] == bundle.digest
    assert bundle.container_dir == "/opt/rocmenv/launcher"
    assert bundle.host_dir.stat().st_mode & 0o777 == 0o755


def test_bundle_is_content_addressed_cached_and_rebuilt_when_damaged(tmp_path):
    first = make_bundle(tmp_path / "cache")
    mtime = (first.host_dir / "sitecustomize.py").stat().st_mtime_ns
    again = make_bundle(tmp_path / "cache")
    assert again.host_dir == first.host_dir
    assert (again.host_dir / "sitecustomize.py").stat().st_mtime_ns == mtime  # reused
    (first.host_dir / "_rocmenv_launcher" / "_runtime.py").write_text("broken = True\n")
    repaired = make_bundle(tmp_path / "cache")
    assert repaired.host_dir == first.host_dir
    assert "def handle" in (repaired.host_dir / "_rocmenv_launcher" / "_runtime.py").read_text()
    left = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert left == sorted([first.host_dir.name, "stamps"])  # no temp left


def test_a_bundle_edited_in_place_with_its_size_kept_is_rebuilt(tmp_path):
    first = make_bundle(tmp_path / "cache")
    runtime = first.host_dir / "_rocmenv_launcher" / "_runtime.py"
    size, mtime = runtime.stat().st_size, runtime.stat().st_mtime_ns
    runtime.write_bytes(b"#" * size)  # same size: only the mtime tells
    os.utime(runtime, ns=(mtime + 1_000_000, mtime + 1_000_000))
    repaired = make_bundle(tmp_path / "cache")
    assert "def handle" in (repaired.host_dir / "_rocmenv_launcher" / "_runtime.py").read_text()


def test_a_stamp_written_for_other_inputs_is_not_reused(tmp_path):
    first = make_bundle(tmp_path / "cache")
    (stamp,) = (tmp_path / "cache" / "stamps").iterdir()
    data = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**data, "inputs": data["inputs"] + "x", "shims": []}))
    again = make_bundle(tmp_path / "cache")  # a checksum collision: rebuilt, not trusted
    assert again.shims == first.shims and again.shims


def test_reusing_a_bundle_reads_stat_only_and_loads_no_hashlib(tmp_path):
    probe = (
        "import sys\nfrom pathlib import Path\nfrom tests.support.launcher import make_bundle\n"
        "b = make_bundle(Path(sys.argv[1]))\nprint(b.digest, 'hashlib' in sys.modules)"
    )
    run = [sys.executable, "-c", probe, str(tmp_path / "cache")]
    built = subprocess.run(run, capture_output=True, text=True, check=True)
    reused = subprocess.run(run, capture_output=True, text=True, check=True)
    assert built.stdout.split()[1] == "True"  # building hashes the bundle
    assert reused.stdout.split() == [built.stdout.split()[0], "False"]


def test_a_different_shim_set_is_a_different_bundle(tmp_path):
    write_shim(tmp_path / "cat", "extra", GOOD_BODY)
    default = make_bundle(tmp_path / "cache")
    other = make_bundle(tmp_path / "cache", catalogue=tmp_path / "cat")
    assert default.digest != other.digest and default.host_dir != other.host_dir
    assert bundle_digest(bundle_files(default.shims)) == default.digest


def test_prepare_launcher_uses_xdg_cache_home(tmp_path):
    ctx = Context(env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    bundle = prepare_launcher(ctx)
    assert bundle.host_dir.parent == tmp_path / "xdg" / "rocmenv" / "launcher"


def test_install_launcher_copies_and_replaces_atomically(tmp_path):
    bundle = make_bundle(tmp_path / "cache")
    target = tmp_path / "opt" / "rocmenv" / "launcher"
    assert install_launcher(Context(env={}), target, bundle=bundle) == target
    assert (target / "sitecustomize.py").read_bytes() == (
        bundle.host_dir / "sitecustomize.py"
    ).read_bytes()
    (target / "stale.txt").write_text("old")
    write_shim(tmp_path / "cat", "extra", GOOD_BODY)
    other = make_bundle(tmp_path / "cache", catalogue=tmp_path / "cat")
    install_launcher(Context(env={}), target, bundle=other)
    assert not (target / "stale.txt").exists()
    assert json.loads((target / MANIFEST).read_text())["digest"] == other.digest
    assert sorted(p.name for p in target.parent.iterdir()) == ["launcher"]


# ------------------------------------------------------------------ PYTHONPATH


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (None, "/opt/rocmenv/launcher"),
        ("", "/opt/rocmenv/launcher"),
        ("/opt/image-site", "/opt/rocmenv/launcher:/opt/image-site"),
        ("/a::/b:", "/opt/rocmenv/launcher:/a:/b"),  # empty entries would mean the CWD
        ("/a:/opt/rocmenv/launcher:/a", "/opt/rocmenv/launcher:/a"),
    ],
)
def test_merge_pythonpath_puts_the_launcher_first_and_keeps_the_image_entries(image, expected):
    assert merge_pythonpath("/opt/rocmenv/launcher", image) == expected


# ------------------------------------------------------------------ probe output


class LocalEngine:
    """Runs the probe on this machine's Python with the bundle path mapped (a real run)."""

    def __init__(self, python: str, site: Path | None) -> None:
        self.python, self.site = python, site
        self.calls: list[Any] = []

    def run_capture(self, image, argv, *, mounts, env, timeout):
        import subprocess

        (mount,) = mounts
        assert isinstance(mount, BindMount) and mount.read_only
        args = [a.replace(mount.target, mount.source) for a in argv]
        args[0] = self.python
        full_env = {"PATH": os.environ["PATH"], **env}
        if self.site:
            full_env["PYTHONPATH"] = str(self.site)
        self.calls.append((image, tuple(argv), dict(env)))
        p = subprocess.run(args, capture_output=True, text=True, env=full_env, timeout=timeout)
        return p.returncode, p.stdout, p.stderr


@pytest.mark.requires("system-python")
def test_check_image_versions_runs_probe_py_and_parses_it(tmp_path):
    bundle = make_bundle(tmp_path / "cache")
    engine = LocalEngine(SYSTEM_PYTHON, standin_site(tmp_path, layout="old"))
    probe = check_image_versions(engine, "some/image:tag", bundle=bundle)
    (call,) = engine.calls
    assert call[1] == ("python3", "/opt/rocmenv/launcher/probe.py")
    assert call[2]["ROCMENV_SHIMS"] == "0"
    (shim,) = probe["shims"]
    assert classify(shim) == ("would-apply", "feature-missing")
    broken = LocalEngine("/bin/false", None)
    with pytest.raises(
        EngineError, match=r"the launcher probe failed in some/image:tag \(exit 1\)"
    ):
        check_image_versions(broken, "some/image:tag", bundle=bundle)


def test_probe_output_is_read_strictly():
    with pytest.raises(EngineError, match="not JSON"):
        parse_probe_output("Traceback ...", where="img")
    with pytest.raises(EngineError, match="unexpected shape"):
        parse_probe_output('{"probe_version": 1}', where="img")
    future = {"probe_version": 2, "python": {}, "rocm": {}, "distributions": {}, "shims": []}
    with pytest.raises(EngineError, match="speaks probe_version 2"):
        parse_probe_output(json.dumps(future), where="img")


def _probe_shim(**kw):
    base = {
        "distribution": "amd-aiter",
        "specifier_match": True,
        "static_probe": {"missing": True, "reason": ""},
        "error": None,
    }
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, ("would-apply", "feature-missing")),
        ({"distribution": None, "specifier_match": None}, ("would-not-apply", "not-installed")),
        ({"specifier_match": False}, ("would-not-apply", "version-outside")),
        ({"specifier_match": None}, ("would-not-apply", "version-not-pep440")),
        (
            {"static_probe": {"missing": False, "reason": ""}},
            ("would-not-apply", "feature-present"),
        ),
        ({"static_probe": {"missing": None, "reason": ""}}, ("unknown", "unknown")),
        ({"error": "boom"}, ("unknown", "probe-failed")),
    ],
)
def test_classify_names_the_reason(fields, expected):
    assert classify(_probe_shim(**fields)) == expected


# ------------------------------------------------------------------ CLI


def test_shims_list_json_has_stable_keys(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["shims", "list", "--json"]) == 0
    data = json.loads(out.getvalue())
    assert data["list_version"] == 1
    (shim,) = [s for s in data["shims"] if s["name"] == "aiter-shuffle-scale"]
    assert set(shim) == {
        "name", "target", "distributions", "specifier", "summary", "retire",
        "source", "package", "entry_point", "path",
    }  # fmt: skip


def test_shims_check_refuses_a_bad_reference(capsys):
    assert main(["shims", "check", "--image", "Rocm/SGL-dev:x y"]) == 2
    assert "error" in capsys.readouterr().err


def test_unchanged_inputs_reuse_the_bundle_without_parsing_shims(tmp_path, monkeypatch):
    from rocmenv.context import Context
    from rocmenv.shims import bundle as shims_module

    ctx = Context(env={"HOME": str(tmp_path)})
    first = shims_module.prepare_launcher(ctx, cache_dir=tmp_path / "cache")

    def boom(**_kw):  # the fast path must not discover (parse + validate) the shims again
        raise AssertionError("discover_shims called although nothing changed")

    monkeypatch.setattr(shims_module, "discover_shims", boom)
    again = shims_module.prepare_launcher(ctx, cache_dir=tmp_path / "cache")
    assert again == first
    (again.host_dir / "sitecustomize.py").write_text("broken = True\n")  # damage: rebuilt
    monkeypatch.undo()
    repaired = shims_module.prepare_launcher(ctx, cache_dir=tmp_path / "cache")
    assert "broken = True" not in (repaired.host_dir / "sitecustomize.py").read_text()
