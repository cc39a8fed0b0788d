"""The launcher in real containers of the test family (Python 3.9, 3.11, 3.13).

The bundle is mounted read-only at /opt/rocmenv/launcher and prepended to the image's own
PYTHONPATH, as ``rocmenv run`` does (the last tests go through ``rocmenv run`` itself).
Stand-in aiter functions record their calls (``ROCMENV_STANDIN_LOG``) and the launcher its
decisions (``ROCMENV_SHIMS_REPORT``), both into a host directory mounted at /out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rocmenv.shims.bundle import merge_pythonpath
from rocmenv.shims.catalogue import LauncherBundle
from tests.support.launcher import make_bundle, read_jsonl, write_shim

LAUNCHER = "/opt/rocmenv/launcher"
OLD = ["aiter-old-py39", "aiter-old-py311", "aiter-old-py313"]
NEW = ["aiter-new-py39", "aiter-new-py311", "aiter-new-py313"]
PYTEST_VERSION = "8.4.2"  # supports Python 3.9 .. 3.14


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    report: list[dict[str, Any]]
    calls: list[dict[str, Any]]
    out: Path

    def applied_lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.startswith("rocmenv: shim ")]


def image_pythonpath(ref: str) -> str | None:
    raw = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Env}}", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for item in json.loads(raw) or []:
        if item.startswith("PYTHONPATH="):
            return str(item.split("=", 1)[1])
    return None


def docker_python(
    ref: str,
    code: str | None,
    *,
    bundle: LauncherBundle | None,
    out: Path,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[tuple[Path, str]] = (),
    extra_path: Sequence[str] = (),
    argv: Sequence[str] | None = None,
    docker_args: Sequence[str] = (),
    timeout: float = 120,
) -> Result:
    """``docker run --rm`` the image's python3 with the launcher mounted (test-only adapter)."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("report.jsonl", "calls.jsonl"):
        (out / name).unlink(missing_ok=True)
    name = f"rocmenv-test-shims-{os.getpid()}-{os.urandom(4).hex()}"
    cmd = ["docker", "run", "--rm", "--name", name, "--network", "none", "-v", f"{out}:/out"]
    cmd += ["--label", "rocmenv.test=shims"]
    pythonpath = image_pythonpath(ref)
    if bundle is not None:
        cmd += ["-v", f"{bundle.host_dir}:{LAUNCHER}:ro"]
        pythonpath = merge_pythonpath(LAUNCHER, pythonpath)
    if extra_path:
        pythonpath = ":".join([*(pythonpath or "").split(":"), *extra_path]).strip(":")
    if pythonpath:
        cmd += ["-e", f"PYTHONPATH={pythonpath}"]
    full_env = {
        "ROCMENV_SHIMS_REPORT": "/out/report.jsonl",
        "ROCMENV_STANDIN_LOG": "/out/calls.jsonl",
        "PYTHONDONTWRITEBYTECODE": "1",
        **(env or {}),
    }
    for key, value in full_env.items():
        cmd += ["-e", f"{key}={value}"]
    for host, target in mounts:
        cmd += ["-v", f"{host}:{target}:ro"]
    cmd += [*docker_args, "-w", "/out", ref]
    cmd += list(argv) if argv is not None else ["python3", "-c", textwrap.dedent(code or "")]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:  # a killed `docker run` leaves its container running: remove it by name
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    return Result(
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        report=read_jsonl(out / "report.jsonl"),
        calls=read_jsonl(out / "calls.jsonl"),
        out=out,
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shims-containers")
    path.chmod(0o777)
    return path


@pytest.fixture(scope="module")
def bundle(work: Path) -> LauncherBundle:
    return make_bundle(work / "cache")


@pytest.fixture(scope="module")
def pytest_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pure-Python pytest for the images (they have none), usable from Python 3.9 on."""
    target = tmp_path_factory.mktemp("pytest-target")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(target),
            "--python-version",
            "3.9",
            "--only-binary",
            ":all:",
            f"pytest=={PYTEST_VERSION}",
            # pip evaluates markers for the host (3.11): name the <3.11 backports explicitly
            "exceptiongroup>=1",
            # iniconfig 2.3 says Requires-Python >=3.8 but needs 3.10 (PEP 604 at runtime)
            "iniconfig==2.1.0",
            "tomli>=1",
        ],
        check=True,
        timeout=300,
    )
    return target


EVERY_PROCESS = r"""
import json, multiprocessing as mp, os, subprocess, sys

CALL = (
    "import torch\n"
    "from aiter.ops.shuffle import shuffle_scale\n"
    "shuffle_scale(torch.empty(64, 8, dtype=torch.uint8))\n"
)

def worker(_):
    exec(CALL, {})
    return os.getpid()

if __name__ == "__main__":
    exec(CALL, {})                                               # main process
    subprocess.run([sys.executable, "-c", CALL], check=True)     # a child interpreter
    pids = {}
    for method in ("spawn", "forkserver"):
        with mp.get_context(method).Pool(1) as pool:
            pids[method] = pool.map(worker, [0])[0]
    print(json.dumps({"main": os.getpid(), **pids}))
"""


@pytest.mark.parametrize("name", OLD)
def test_shim_applies_in_main_subprocess_spawn_and_forkserver(family, bundle, work, name):
    image = family[name]
    scripts = work / f"{name}-scripts"
    scripts.mkdir(exist_ok=True)
    (scripts / "every_process.py").write_text(EVERY_PROCESS)  # spawn needs a real __main__ file
    r = docker_python(
        image.ref,
        None,
        bundle=bundle,
        out=work / name,
        mounts=[(scripts, "/scripts")],
        argv=["python3", "/scripts/every_process.py"],
    )
    assert r.returncode == 0, r.stderr
    pids = json.loads(r.stdout)
    shimmed = [c for c in r.calls if c["fn"] == "aiter.utility.fp4_utils.e8m0_shuffle"]
    assert len(shimmed) == 4, r.calls
    called_from = {c["pid"] for c in shimmed}
    assert len(called_from) == 4
    assert {pids["main"], pids["spawn"], pids["forkserver"]} <= called_from
    applied = [rec for rec in r.report if rec["decision"] == "applied"]
    assert {rec["pid"] for rec in applied} == called_from
    assert all(rec["python"].startswith(image.python) for rec in applied)
    assert all(rec["version"] == image.aiter_version for rec in applied)
    assert len(r.applied_lines()) == 4


@pytest.mark.parametrize("name", OLD)
def test_shim_applies_under_python_m_pytest(family, bundle, work, pytest_target, name):
    image = family[name]
    tests = work / f"{name}-tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_x.py").write_text(
        textwrap.dedent(
            """
            import torch
            from aiter.ops.shuffle import shuffle_scale

            def test_shuffle_scale_is_there():
                out = shuffle_scale(torch.empty(64, 8, dtype=torch.uint8), 4, True, False)
                assert out.produced_by == "aiter.ops.shuffle.shuffle_scale_a16w4"
            """
        )
    )
    r = docker_python(
        image.ref,
        None,
        bundle=bundle,
        out=work / name,
        mounts=[(tests, "/tests"), (pytest_target, "/opt/pytest")],
        extra_path=["/opt/pytest"],
        argv=["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "/tests/test_x.py"],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
    assert [c["fn"] for c in r.calls] == ["aiter.ops.shuffle.shuffle_scale_a16w4"]
    assert r.report[0]["decision"] == "applied"


DISPATCH = """
import torch
from aiter.ops.shuffle import shuffle_scale
x = torch.empty(64, 8, dtype=torch.uint8)
assert shuffle_scale(x).produced_by == "aiter.utility.fp4_utils.e8m0_shuffle"
assert shuffle_scale(x, None, False).produced_by == "aiter.utility.fp4_utils.e8m0_shuffle"
assert shuffle_scale(src=x, is_guinterleave=False).produced_by == "aiter.utility.fp4_utils.e8m0_shuffle"
assert shuffle_scale(x, 4, True, True).produced_by == "aiter.ops.shuffle.shuffle_scale_a16w4"
assert shuffle_scale(x, experts_cnt=8, is_guinterleave=True).produced_by == "aiter.ops.shuffle.shuffle_scale_a16w4"
assert shuffle_scale(None, 4, True) is None
f32 = torch.empty(64, 8)
assert shuffle_scale(f32, 4, True) is f32
try:
    shuffle_scale(x, is_guinterleave=True)
except ValueError as err:
    print("ValueError:", err)
"""


@pytest.mark.parametrize("name", ["aiter-old-py39", "aiter-old-py313"])
def test_dispatch_follows_is_guinterleave_positional_and_keyword(family, bundle, work, name):
    r = docker_python(family[name].ref, DISPATCH, bundle=bundle, out=work / name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ValueError: experts_cnt is required when is_guinterleave=True"
    got = [(c["fn"].rsplit(".", 1)[1], c["args"][1:], c["kwargs"]) for c in r.calls]
    assert got == [
        ("e8m0_shuffle", [], {}),
        ("e8m0_shuffle", [], {}),
        ("e8m0_shuffle", [], {}),
        ("shuffle_scale_a16w4", ["4", "True"], {}),
        ("shuffle_scale_a16w4", ["8", "False"], {}),
    ]


CALLS = """
import torch
from aiter.ops.shuffle import shuffle_scale
x = torch.empty(64, 8, dtype=torch.uint8)
print(shuffle_scale(x).produced_by, shuffle_scale(x, 4, True, False).produced_by)
"""


@pytest.mark.parametrize("name", NEW)
def test_new_aiter_is_left_alone(family, bundle, work, name):
    image = family[name]
    r = docker_python(image.ref, CALLS, bundle=bundle, out=work / name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["aiter.ops.shuffle.shuffle_scale"] * 2
    assert r.applied_lines() == []
    assert {c["fn"] for c in r.calls} == {"aiter.ops.shuffle.shuffle_scale"}  # the real one
    (record,) = r.report
    assert record["decision"] == "skipped"
    assert (
        record["reason"]
        == f"amd-aiter {image.aiter_version} is outside >=0.1.6.post2.dev0,<0.1.14rc0"
    )


def test_probe_finds_the_backported_function(family, bundle, work):
    r = docker_python(family["aiter-backport"].ref, CALLS, bundle=bundle, out=work / "backport")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["aiter.ops.shuffle.shuffle_scale"] * 2
    assert r.applied_lines() == []
    (record,) = r.report
    assert record["decision"] == "skipped"
    assert record["version"] == "0.1.13.post1"
    assert record["reason"].endswith("probe: aiter.ops.shuffle already has the feature")


def test_old_distribution_name_is_found(family, bundle, work):
    image = family["sgl-old-name"]
    assert image.aiter_dist == "aiter"
    r = docker_python(image.ref, DISPATCH, bundle=bundle, out=work / "old-name")
    assert r.returncode == 0, r.stderr
    assert r.report[0]["decision"] == "applied"
    assert r.report[0]["distribution"] == "aiter"
    assert r.applied_lines() == [
        f"rocmenv: shim aiter-shuffle-scale applied (aiter {image.aiter_version} matches "
        ">=0.1.6.post2.dev0,<0.1.14rc0; aiter.ops.shuffle lacks shuffle_scale)"
    ]


@pytest.mark.parametrize("name", OLD)
def test_debian_sitecustomize_still_runs(family, bundle, work, name):
    # The images' /usr/lib/python3.X/sitecustomize.py (Debian's) imports apport_python_hook
    # and calls install(): ours writes a marker, which proves Debian's file was chain-loaded.
    hook = work / "apport-hook"
    hook.mkdir(exist_ok=True)
    (hook / "apport_python_hook.py").write_text(
        "import os\n"
        "def install():\n"
        "    with open('/out/debian-marker', 'a') as f:\n"
        "        f.write('debian sitecustomize ran in %d\\n' % os.getpid())\n"
    )
    out = work / f"{name}-debian"
    (out / "debian-marker").unlink(missing_ok=True)
    code = "import sys, aiter; print(sys.modules['sitecustomize'].__file__)"
    r = docker_python(
        family[name].ref,
        code,
        bundle=bundle,
        out=out,
        mounts=[(hook, "/opt/hook")],
        extra_path=["/opt/hook"],
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{LAUNCHER}/sitecustomize.py"
    assert (out / "debian-marker").read_text().count("debian sitecustomize ran") == 1
    assert r.report[0]["decision"] == "applied"


@pytest.fixture(scope="module")
def broken_bundle(work: Path) -> LauncherBundle:
    catalogue = work / "broken-catalogue"
    write_shim(
        catalogue,
        "broken_one",
        "def probe(module):\n    return True\n\n\n"
        "def static_probe(find_source):\n    return True, 'test'\n\n\n"
        "def apply(module):\n    raise RuntimeError('deliberately broken')\n",
    )
    return make_bundle(work / "cache", catalogue=catalogue)


def test_a_broken_shim_warns_and_the_program_goes_on(family, broken_bundle, work):
    code = "import aiter.ops.shuffle\nprint('still running')"
    r = docker_python(family["aiter-old-py39"].ref, code, bundle=broken_bundle, out=work / "broken")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "still running"
    assert (
        "rocmenv: shim broken-one failed on import of aiter.ops.shuffle: RuntimeError: " in r.stderr
    )
    assert r.report[0]["decision"] == "failed"


def test_strict_mode_fails_naming_the_shim(family, broken_bundle, work):
    code = "import aiter.ops.shuffle\nprint('not reached')"
    r = docker_python(
        family["aiter-old-py313"].ref,
        code,
        bundle=broken_bundle,
        out=work / "strict",
        env={"ROCMENV_SHIMS_STRICT": "1"},
    )
    assert r.returncode == 1
    assert "not reached" not in r.stdout
    assert "ShimFailure: rocmenv: shim broken-one failed" in r.stderr


def test_disable_switch(family, bundle, work):
    code = "import aiter.ops.shuffle as s; print(hasattr(s, 'shuffle_scale'))"
    r = docker_python(
        family["aiter-old-py311"].ref,
        code,
        bundle=bundle,
        out=work / "off",
        env={"ROCMENV_SHIMS": "0"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
    assert r.report == [] and r.applied_lines() == []


def test_the_image_pythonpath_survives(family, bundle, work):
    image = family["aiter-old-pythonpath"]
    assert image.env["PYTHONPATH"] == "/opt/image-site"
    code = """
import os, image_site_marker, aiter.ops.shuffle as s
print(os.environ["PYTHONPATH"], hasattr(s, "shuffle_scale"))
"""
    r = docker_python(image.ref, code, bundle=bundle, out=work / "pythonpath")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"{LAUNCHER}:/opt/image-site", "True"]


# ---------------------------------------------------------------- through the CLI


def rocmenv(*args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("name", "verdict", "why"),
    [
        ("demo", "would-apply", "feature-missing"),
        ("sgl-new", "would-not-apply", "version-outside"),
        ("aiter-backport", "would-not-apply", "feature-present"),
        ("sgl-old-name", "would-apply", "feature-missing"),
    ],
)
def test_shims_check_reads_the_image_without_importing_it(family, tmp_path, name, verdict, why):
    image = family[name]
    r = rocmenv("shims", "check", "--image", image.ref, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["check_version"] == 1
    assert data["python"].startswith(image.python)
    assert data["rocm"] == image.rocm_build
    (shim,) = data["shims"]
    assert (shim["name"], shim["verdict"], shim["why"]) == ("aiter-shuffle-scale", verdict, why)
    assert shim["distribution"] == image.aiter_dist
    assert shim["version"] == image.aiter_version
    assert data["probe"]["distributions"][image.aiter_dist] == image.aiter_version


def test_rocmenv_run_injects_the_launcher_and_no_shims_turns_it_off(family, tmp_path):
    image = family["aiter-old-pythonpath"]
    code = "import os, aiter.ops.shuffle as s; print(os.environ.get('PYTHONPATH'), hasattr(s, 'shuffle_scale'))"
    on = rocmenv(
        "run", "--profile", "cpu", "--image", image.ref, "--", "python3", "-c", code, cwd=tmp_path
    )
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == [f"{LAUNCHER}:/opt/image-site", "True"]
    assert "rocmenv: shim aiter-shuffle-scale applied" in on.stderr
    off = rocmenv(
        "run",
        "--profile",
        "cpu",
        "--no-shims",
        "--image",
        image.ref,
        "--",
        "python3",
        "-c",
        code,
        cwd=tmp_path,
    )
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["/opt/image-site", "False"]


@pytest.mark.parametrize("name", ["aiter-old-py39", "aiter-new-py313"])
def test_shims_check_on_the_oldest_and_newest_python(family, tmp_path, name):
    image = family[name]
    r = rocmenv("shims", "check", "--image", image.ref, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["python"].startswith(image.python)
    (shim,) = data["shims"]
    assert shim["verdict"] == ("would-not-apply" if image.has_shuffle_scale else "would-apply")


def test_shims_check_a_profile_reads_its_image(family, tmp_path):
    image = family["demo"]
    (tmp_path / "rocmenv.toml").write_text(
        "[profiles.demo]\n"
        'extends = "cpu"\n'
        f'image = "{image.registry}/{image.repository}"\n'
        f'tag = "{image.tag}"\n'
    )
    r = rocmenv("shims", "check", "--profile", "demo", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["profile"] == "demo"
    assert data["image"] == image.ref  # no lockfile here: the profile's tag, as written
    assert data["shims"][0]["verdict"] == "would-apply"
    unknown = rocmenv("shims", "check", "--profile", "nosuch", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "unknown profile 'nosuch'" in unknown.stderr


def test_readme_demo_shows_the_shim_in_main_and_worker_process(family):
    image = family["demo"]
    repo = Path(__file__).resolve().parents[3]
    r = rocmenv(
        "run",
        "--profile",
        "cpu",
        "--image",
        image.ref,
        "--",
        "python3",
        "examples/test_x.py",
        cwd=repo,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("main process (pid ")
    assert lines[1].startswith("spawn worker (pid ")
    for line in lines:
        assert "shuffle_scale from rocmenv shim 'aiter-shuffle-scale'" in line
        assert line.endswith(
            "ran aiter.utility.fp4_utils.e8m0_shuffle, aiter.ops.shuffle.shuffle_scale_a16w4"
        )
    assert r.stderr.count("rocmenv: shim aiter-shuffle-scale applied") == 2
    off = rocmenv(
        "run", "--profile", "cpu", "--no-shims", "--image", image.ref, "--", "python3", "examples/test_x.py",
        cwd=repo,
    )  # fmt: skip
    assert off.returncode == 1
    assert "ImportError: cannot import name 'shuffle_scale'" in off.stderr


def test_a_tmpfs_pycache_lets_later_processes_load_the_compiled_launcher(family, bundle, work):
    # PYTHONDONTWRITEBYTECODE=1 (docker_python sets it, many images do): the launcher still
    # caches its own code in the container's private tmpfs.
    code = """
import os, subprocess, sys
env = dict(os.environ)
assert env["PYTHONDONTWRITEBYTECODE"] == "1"
for _ in range(3):
    subprocess.run([sys.executable, "-c", "import aiter"], env=env, check=True)
print(sorted(os.listdir("/opt/rocmenv/launcher/__pycache__")))
verbose = subprocess.run([sys.executable, "-v", "-c", "pass"], env=env, capture_output=True, text=True)
print([ln for ln in verbose.stderr.splitlines() if "code object from" in ln and "sitecustomize" in ln])
"""
    r = docker_python(
        family["aiter-old-py313"].ref,
        code,
        bundle=bundle,
        out=work / "tmpfs-pyc",
        docker_args=["--tmpfs", f"{bundle.pycache_dir}:rw,size=1m"],
    )
    assert r.returncode == 0, r.stderr
    listing, loaded = r.stdout.splitlines()
    assert listing == "['sitecustomize.cpython-313.pyc']"
    # `python -v` says where the code came from: the .pyc, not a fresh compile of the .py
    assert (
        "code object from '/opt/rocmenv/launcher/__pycache__/sitecustomize.cpython-313.pyc'"
        in loaded
    )
    assert [rec["decision"] for rec in r.report] == ["applied"] * 3
