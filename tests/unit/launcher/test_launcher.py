"""The launcher on the host's Debian Python against the stand-in aiter (no engine needed).

Each test starts a real interpreter with a built bundle first on PYTHONPATH, exactly as in a
container; the container versions of these checks live in tests/integration/test_shims*.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.launcher import (
    make_bundle,
    run_python,
    standin_site,
    write_shim,
)

pytestmark = pytest.mark.requires("system-python")

CALLS = """
import torch
from aiter.ops.shuffle import shuffle_scale
x = torch.empty(64, 8, dtype=torch.uint8)
shuffle_scale(x)
shuffle_scale(x, 4, True, False)
shuffle_scale(x, experts_cnt=4, is_guinterleave=True, gate_up=True)
shuffle_scale(x, None, False)
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("launcher")


@pytest.fixture(scope="module")
def bundle(work: Path):
    return make_bundle(work / "cache")


@pytest.fixture(scope="module")
def old_site(work: Path) -> Path:
    return standin_site(work, layout="old", dist="amd-aiter", version="0.1.9.post1")


def test_shim_applies_and_dispatches_like_the_new_function(bundle, old_site, tmp_path):
    r = run_python(CALLS, bundle=bundle, site=old_site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [c["fn"] for c in r.calls] == [
        "aiter.utility.fp4_utils.e8m0_shuffle",
        "aiter.ops.shuffle.shuffle_scale_a16w4",
        "aiter.ops.shuffle.shuffle_scale_a16w4",
        "aiter.utility.fp4_utils.e8m0_shuffle",
    ]
    assert r.calls[1]["args"][1:] == ["4", "False"]
    assert r.calls[2]["args"][1:] == ["4", "True"]
    assert r.applied_lines() == [
        "rocmenv: shim aiter-shuffle-scale applied (amd-aiter 0.1.9.post1 matches "
        ">=0.1.6.post2.dev0,<0.1.14rc0; aiter.ops.shuffle lacks shuffle_scale)"
    ]
    (record,) = r.report
    assert record["decision"] == "applied"
    assert record["shim"] == "aiter-shuffle-scale"
    assert record["version"] == "0.1.9.post1"
    assert record["distribution"] == "amd-aiter"


def test_shim_edge_cases_follow_aiter(bundle, old_site, tmp_path):
    code = """
import inspect, torch
import aiter
from aiter.ops import shuffle
f = shuffle.shuffle_scale
assert f(None, 4, True) is None
x32 = torch.empty(64, 8)
assert f(x32, 4, True) is x32
try:
    f(torch.empty(64, 8, dtype=torch.uint8), is_guinterleave=True)
except ValueError as e:
    print("ValueError:", e)
print(str(inspect.signature(f)))
print(f.__module__, f.__qualname__, f._rocmenv_shim, hasattr(f, "__wrapped__"))
print(aiter.shuffle_scale is f, "shuffle_scale" in shuffle.__all__)
print(type(shuffle.__loader__).__name__, type(shuffle.__spec__.loader).__name__)
print(len(inspect.getsource(shuffle)) > 0)
"""
    r = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "ValueError: experts_cnt is required when is_guinterleave=True"
    assert lines[1].startswith("(src")
    assert "experts_cnt" in lines[1] and "is_guinterleave" in lines[1] and "gate_up" in lines[1]
    assert lines[2] == "aiter.ops.shuffle shuffle_scale aiter-shuffle-scale False"
    assert lines[3] == "True True"  # re-exported by `from aiter.ops.shuffle import *`
    assert lines[4] == "SourceFileLoader SourceFileLoader"  # our loader wrapper is gone
    assert lines[5] == "True"
    assert r.calls == []  # None / float32 / ValueError never reach a kernel


def test_nothing_is_loaded_until_a_target_is_imported(bundle, old_site, tmp_path):
    code = """
import sys, json, email, torch
print(json.dumps(sorted(m for m in sys.modules if "rocmenv" in m or m.startswith("packaging"))))
print("importlib.metadata" in sys.modules)
import aiter
print(json.dumps(sorted(m for m in sys.modules if m.startswith("packaging"))))
"""
    r = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    first, metadata_loaded, after = r.stdout.splitlines()
    assert json.loads(first) == []
    assert metadata_loaded == "False"
    assert json.loads(after) == []  # vendored packaging never appears as `packaging`
    assert len(r.report) == 1


def test_new_layout_is_left_alone(bundle, work, tmp_path):
    site = standin_site(work, layout="new", dist="amd-aiter", version="0.1.14")
    r = run_python(CALLS, bundle=bundle, site=site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.applied_lines() == []
    assert {c["fn"] for c in r.calls} == {"aiter.ops.shuffle.shuffle_scale"}
    (record,) = r.report
    assert record["decision"] == "skipped"
    assert record["reason"] == "amd-aiter 0.1.14 is outside >=0.1.6.post2.dev0,<0.1.14rc0"


def test_probe_finds_a_backported_function(bundle, work, tmp_path):
    site = standin_site(work, layout="new", dist="amd-aiter", version="0.1.13.post1")
    r = run_python(CALLS, bundle=bundle, site=site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.applied_lines() == []
    (record,) = r.report
    assert record["decision"] == "skipped"
    assert "probe: aiter.ops.shuffle already has the feature" in record["reason"]


def test_old_distribution_name_and_dev_builds_match(bundle, work, tmp_path):
    for dist, version in (
        ("aiter", "0.1.7.post5"),
        ("amd-aiter", "0.1.12.post2.dev150+ga6bb49937"),
    ):
        site = standin_site(work, layout="old", dist=dist, version=version)
        r = run_python(CALLS, bundle=bundle, site=site, tmp=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.report[0]["decision"] == "applied", r.report
        assert r.report[0]["distribution"] == dist
        assert r.report[0]["version"] == version


def test_version_outside_range_is_not_shimmed_even_if_missing(bundle, work, tmp_path):
    site = standin_site(work, layout="old", dist="amd-aiter", version="0.1.14rc0")
    r = run_python("import aiter", bundle=bundle, site=site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report[0]["decision"] == "skipped"
    assert "outside" in r.report[0]["reason"]


def test_disable_switch_turns_everything_off(bundle, old_site, tmp_path):
    code = (
        "import sys, aiter.ops.shuffle as s; print(hasattr(s, 'shuffle_scale'), len(sys.meta_path))"
    )
    on = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path)
    off = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path, env={"ROCMENV_SHIMS": "0"})
    assert on.stdout.split()[0] == "True"
    assert off.stdout.split()[0] == "False"
    assert int(on.stdout.split()[1]) == int(off.stdout.split()[1]) + 1
    assert off.report == [] and off.stderr == ""


def test_quiet_switch_silences_the_applied_line(bundle, old_site, tmp_path):
    r = run_python(
        "import aiter", bundle=bundle, site=old_site, tmp=tmp_path, env={"ROCMENV_SHIMS_QUIET": "1"}
    )
    assert r.returncode == 0 and r.stderr == ""
    assert r.report[0]["decision"] == "applied"


BROKEN = """
def probe(module):
    return True


def static_probe(find_source):
    return True, "test"


def apply(module):
    raise RuntimeError("deliberately broken")
"""

GOOD = """
def probe(module):
    return not hasattr(module, "rocmenv_test_attr")


def static_probe(find_source):
    return True, "test"


def apply(module):
    module.rocmenv_test_attr = 42
"""


@pytest.fixture(scope="module")
def broken_bundle(work: Path):
    catalogue = work / "broken-catalogue"
    write_shim(catalogue, "broken_one", BROKEN)
    write_shim(catalogue, "good_one", GOOD)
    return make_bundle(work / "cache", catalogue=catalogue)


def test_a_broken_shim_warns_and_the_program_goes_on(broken_bundle, old_site, tmp_path):
    code = "import aiter.ops.shuffle as s; print('still here', s.rocmenv_test_attr)"
    r = run_python(code, bundle=broken_bundle, site=old_site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "still here 42"  # the other shim still applied
    assert (
        "rocmenv: shim broken-one failed on import of aiter.ops.shuffle: "
        "RuntimeError: deliberately broken (continuing; ROCMENV_SHIMS_STRICT=1 makes this fatal)"
    ) in r.stderr
    decisions = {rec["shim"]: rec["decision"] for rec in r.report}
    assert decisions == {"broken-one": "failed", "good-one": "applied"}


def test_strict_mode_makes_a_broken_shim_fatal(broken_bundle, old_site, tmp_path):
    code = "import aiter.ops.shuffle\nprint('not reached')"
    r = run_python(
        code, bundle=broken_bundle, site=old_site, tmp=tmp_path, env={"ROCMENV_SHIMS_STRICT": "1"}
    )
    assert r.returncode == 1
    assert "not reached" not in r.stdout
    assert "ShimFailure: rocmenv: shim broken-one failed on import of aiter.ops.shuffle" in r.stderr


@pytest.mark.requires("debian-sitecustomize")
def test_debian_sitecustomize_still_runs(bundle, old_site, tmp_path):
    # Debian's /usr/lib/python3.X/sitecustomize.py does `import apport_python_hook` and
    # calls install(): a module of that name on the path proves it was chain-loaded.
    hook = tmp_path / "hookdir"
    hook.mkdir()
    marker = tmp_path / "marker"
    (hook / "apport_python_hook.py").write_text(
        f"def install():\n    open({str(marker)!r}, 'a').write('debian sitecustomize ran\\n')\n"
    )
    code = "import sys, aiter; print(sys.modules['sitecustomize'].__file__)"
    r = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path, extra_path=[hook])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(bundle.host_dir / "sitecustomize.py")
    assert marker.read_text() == "debian sitecustomize ran\n"
    assert r.report[0]["decision"] == "applied"
    off = run_python(
        code,
        bundle=bundle,
        site=old_site,
        tmp=tmp_path,
        extra_path=[hook],
        env={"ROCMENV_SHIMS": "0"},
    )
    assert off.returncode == 0
    assert marker.read_text() == "debian sitecustomize ran\n" * 2


def test_a_second_launcher_on_the_path_does_not_apply_twice(bundle, old_site, tmp_path):
    import shutil

    copy = tmp_path / "second-launcher"
    shutil.copytree(bundle.host_dir, copy)
    hook = tmp_path / "hookdir"
    hook.mkdir()
    marker = tmp_path / "marker"
    (hook / "apport_python_hook.py").write_text(
        f"def install():\n    open({str(marker)!r}, 'a').write('x')\n"
    )
    r = run_python(
        "import aiter", bundle=bundle, site=old_site, tmp=tmp_path, extra_path=[copy, hook]
    )
    assert r.returncode == 0, r.stderr
    assert len(r.report) == 1 and len(r.applied_lines()) == 1
    assert marker.read_text() == "x"  # Debian's still ran, once


def test_a_failing_chained_sitecustomize_is_reported_like_site_does(bundle, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("raise ValueError('theirs is broken')\n")
    r = run_python("print('ok')", bundle=bundle, site=None, tmp=tmp_path, extra_path=[other])
    assert r.returncode == 0 and r.stdout.strip() == "ok"
    assert "Error in sitecustomize" in r.stderr and "ValueError: theirs is broken" in r.stderr


def test_target_imported_before_sitecustomize_is_shimmed(bundle, old_site, tmp_path):
    # A .pth file in the user site imports the target before sitecustomize runs.
    r0 = run_python("import sys; print(sys.version_info[1])", bundle=None, site=None, tmp=tmp_path)
    ver = f"python3.{r0.stdout.strip()}"
    user_site = tmp_path / "userbase" / "lib" / ver / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "early.pth").write_text("import aiter.ops.shuffle\n")
    code = "import sys; import aiter.ops.shuffle as s; print(hasattr(s, 'shuffle_scale'))"
    env = {"PYTHONUSERBASE": str(tmp_path / "userbase"), "PYTHONNOUSERSITE": ""}
    r = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
    assert r.report[0]["decision"] == "applied"


def test_report_lines_from_concurrent_processes_stay_whole(bundle, old_site, tmp_path):
    code = """
import subprocess, sys
procs = [subprocess.Popen([sys.executable, "-c", "import aiter"]) for _ in range(12)]
assert all(p.wait() == 0 for p in procs)
"""
    r = run_python(code, bundle=bundle, site=old_site, tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(r.report) == 12  # read_jsonl would fail on an interleaved line
    assert len({rec["pid"] for rec in r.report}) == 12


def test_probe_script_reports_without_importing_the_target(bundle, work, tmp_path):
    site = standin_site(work, layout="old", dist="amd-aiter", version="0.1.12.post1")
    poisoned = tmp_path / "poisoned"
    import shutil

    shutil.copytree(site, poisoned)
    init = poisoned / "aiter" / "__init__.py"
    init.write_text("raise ImportError('probe must not import aiter')\n" + init.read_text())
    (poisoned / "torch" / "__init__.py").write_text("raise ImportError('nor torch')\n")
    rocm = tmp_path / "rocm-version"
    r = run_python(
        "", bundle=None, site=poisoned, tmp=tmp_path, args=[str(bundle.host_dir / "probe.py")]
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"probe_version", "python", "rocm", "distributions", "shims"}
    assert data["probe_version"] == 1
    assert data["distributions"]["amd-aiter"] == "0.1.12.post1"
    (shim,) = data["shims"]
    assert shim["name"] == "aiter-shuffle-scale"
    assert shim["distribution"] == "amd-aiter" and shim["version"] == "0.1.12.post1"
    assert shim["specifier_match"] is True
    assert shim["static_probe"] == {
        "missing": True,
        "reason": "aiter.ops.shuffle lacks shuffle_scale (has shuffle_scale_a16w4)",
    }
    assert shim["would_apply"] is True
    assert shim["error"] is None
    assert not rocm.exists()


def test_probe_script_explains_why_not(bundle, work, tmp_path):
    cases = {
        ("new", "0.1.13.post1"): (False, "aiter.ops.shuffle defines shuffle_scale"),
        ("new", "0.1.14"): (False, "amd-aiter 0.1.14 is outside >=0.1.6.post2.dev0,<0.1.14rc0"),
    }
    for (layout, version), (would, reason_part) in cases.items():
        site = standin_site(work, layout=layout, dist="amd-aiter", version=version)
        r = run_python(
            "", bundle=None, site=site, tmp=tmp_path, args=[str(bundle.host_dir / "probe.py")]
        )
        assert r.returncode == 0, r.stderr
        (shim,) = json.loads(r.stdout)["shims"]
        assert shim["would_apply"] is would
        assert reason_part in shim["reason"]
    r = run_python(
        "", bundle=None, site=None, tmp=tmp_path, args=[str(bundle.host_dir / "probe.py")]
    )
    (shim,) = json.loads(r.stdout)["shims"]
    assert shim["would_apply"] is False
    assert shim["reason"] == "none of amd-aiter, aiter is installed"


def test_strict_failure_of_a_target_imported_before_us_stops_the_interpreter(
    broken_bundle, old_site, tmp_path
):
    r0 = run_python("import sys; print(sys.version_info[1])", bundle=None, site=None, tmp=tmp_path)
    user_site = tmp_path / "userbase" / "lib" / f"python3.{r0.stdout.strip()}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "early.pth").write_text("import aiter.ops.shuffle\n")
    env = {"PYTHONUSERBASE": str(tmp_path / "userbase"), "PYTHONNOUSERSITE": ""}
    lenient = run_python("print('ran')", bundle=broken_bundle, site=old_site, tmp=tmp_path, env=env)
    assert lenient.returncode == 0 and lenient.stdout.strip() == "ran"
    assert "rocmenv: shim broken-one failed on import of aiter.ops.shuffle" in lenient.stderr
    strict = run_python(
        "print('ran')",
        bundle=broken_bundle,
        site=old_site,
        tmp=tmp_path,
        env={**env, "ROCMENV_SHIMS_STRICT": "1"},
    )
    assert strict.returncode != 0 and "ran" not in strict.stdout
    assert "rocmenv: shim broken-one failed on import of aiter.ops.shuffle" in strict.stderr
