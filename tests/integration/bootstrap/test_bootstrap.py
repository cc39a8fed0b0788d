"""``rocmenv bootstrap`` for real, inside containers of the test image family.

How rocmenv gets into the container: the images have Python 3.11 but no pip and no git, so
the repository is bind-mounted read-only at /opt/rocmenv-src and put on ``PYTHONPATH``;
nothing else: this path needs no third-party package (PEP 440 answers come from the
launcher's vendored ``packaging``). For the override tests:

* **git**: the host's ``/usr/bin/git`` and ``/usr/lib/git-core`` are bind-mounted read-only.
  The host and the ``py311`` image are both Debian bookworm, so git's libraries (libc,
  libpcre2-8, zlib) are in the image; the fixture checks ``git --version`` in the container
  and fails with the reason otherwise. No image build, no network, no cache to keep fresh.
* **pip**: the host venv's pure-Python ``pip`` package is bind-mounted read-only at
  /opt/hostpip and put on ``PYTHONPATH``, so ``python3 -m pip`` works; bookworm's Python is
  "externally managed", so the tests pass ``--pip-arg=--break-system-packages`` (what a
  user of such an image does). The test project builds with an in-tree PEP 517 backend
  (stdlib only, ``build_editable``), so pip needs no network for build dependencies.
* **the upstream**: a bare repository made on the host with the host's git
  (``refs/pull/7/head``, a branch, commits), mounted read-only at /srv/upstream.git; the
  "image's checkout" /sgl-workspace/sglang is cloned from it inside the container, as the
  real images have one baked in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import testenv

REPO = Path(__file__).resolve().parents[3]
IMAGE_NAME = "demo"  # rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215, Python 3.11, bookworm
LABEL = "org.rocmenv.test=bootstrap"


def _package_dir(module: str) -> Path:
    import importlib

    mod = importlib.import_module(module)
    assert mod.__file__ is not None
    return Path(mod.__file__).resolve().parent


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str
    seconds: float


def docker_run(
    image: str,
    script: str,
    *,
    mounts: Mapping[str, str] = {},
    env: Mapping[str, str] = {},
    timeout: float = 120,
    shell: str = "sh",
) -> Ran:
    """``<shell> -c script`` in a fresh container (labelled, always removed)."""
    name = f"rocmenv-bootstrap-test-{uuid.uuid4().hex[:10]}"
    argv = ["docker", "run", "--rm", "--name", name, "--label", LABEL]
    argv += ["-v", f"{REPO}:/opt/rocmenv-src:ro"]
    for source, target in mounts.items():
        argv += ["-v", f"{source}:{target}"]
    base_env = {
        "PYTHONPATH": "/opt/rocmenv-src",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key, value in {**base_env, **env}.items():
        argv += ["-e", f"{key}={value}"]
    argv += [image, shell, "-c", script]
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    return Ran(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


@pytest.fixture(scope="module")
def image(family: testenv.Family) -> str:
    problem = testenv.environment_problem()
    if problem:
        testenv.missing_environment(problem)
    ref = family[IMAGE_NAME].ref
    if subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode:
        pulled = subprocess.run(["docker", "pull", "-q", ref], capture_output=True, text=True)
        if pulled.returncode:
            testenv.missing_environment(f"cannot pull {ref}: {pulled.stderr.strip()}")
    return ref


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    return out


# ------------------------------------------------------------------ GPU wait

FLAKY_SMI = """#!/bin/sh
# fails $FAILS times (state in a file), then runs the image's stand-in rocm-smi
n=$(cat /tmp/smi-count 2>/dev/null || echo 0)
n=$((n + 1)); echo "$n" > /tmp/smi-count
if [ "$n" -le "${FAILS:-0}" ]; then
  echo "ERROR:root:Driver not initialized (amdgpu not found in modules), attempt $n"
  exit 1
fi
exec /usr/local/bin/rocm-smi "$@"
"""


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "rocm-smi").write_text(FLAKY_SMI)
    (d / "rocm-smi").chmod(0o755)
    return d


def test_bootstrap_waits_for_a_rocm_smi_that_fails_twice_then_succeeds(
    image: str, fake_bin: Path, out_dir: Path
) -> None:
    ran = docker_run(
        image,
        "PATH=/opt/fake:$PATH python3 -m rocmenv bootstrap --gpu-timeout 30 "
        "--report /out/report.json",
        mounts={str(fake_bin): "/opt/fake:ro", str(out_dir): "/out"},
        env={"FAILS": "2"},
    )
    assert ran.code == 0, ran.stderr
    report = json.loads((out_dir / "report.json").read_text())
    gpu = report["steps"][0]
    assert gpu["name"] == "gpu-wait" and gpu["status"] == "ok"
    attempts = gpu["details"]["attempts"]
    assert [a["returncode"] for a in attempts] == [1, 1, 0]
    assert attempts[-1]["gpus"] == 8
    # in order, one after the other (the 1 s, 2 s backoff schedule itself is unit-tested with
    # a recorded sleep in tests/unit/bootstrap/test_gpuwait.py; timings: benchmarks/)
    assert attempts[0]["at_s"] < attempts[1]["at_s"] < attempts[2]["at_s"]
    assert "8 GPUs after 3 attempts" in ran.stderr
    assert ran.stdout.startswith("export PYTHONPATH=/opt/rocmenv/launcher:")


def test_bootstrap_gives_up_on_a_rocm_smi_that_never_succeeds(
    image: str, fake_bin: Path, out_dir: Path
) -> None:
    ran = docker_run(
        image,
        "PATH=/opt/fake:$PATH python3 -m rocmenv bootstrap --gpu-timeout 3 "
        "--report /out/report.json",
        mounts={str(fake_bin): "/opt/fake:ro", str(out_dir): "/out"},
        env={"FAILS": "1000"},
    )
    assert ran.code == 1
    assert "amdgpu not found in modules" in ran.stderr  # the last output is shown
    assert "rocmenv bootstrap: error: the GPUs were not ready" in ran.stderr
    report = json.loads((out_dir / "report.json").read_text())
    assert report["ok"] is False
    assert [s["status"] for s in report["steps"]] == [
        "failed", "skipped", "skipped", "skipped", "ok"]  # fmt: skip
    # it gave up (a rocm-smi failing forever would otherwise be retried until docker_run's
    # 120 s ceiling): how quickly is measured in benchmarks/bench_timings.py
    assert report["steps"][0]["details"]["attempts"], report["steps"][0]
    assert ran.stdout == ""  # nothing exported after a failure


# ------------------------------------------------------------------ stale processes

STALE_SCRIPT = r"""
set -e
mkdir -p /tmp/ray/dashboard /opt/ray/_private /usr/local/bin
cat > /tmp/sleeper.py <<'EOF'
import sys, time
if len(sys.argv) > 1 and sys.argv[1] == "--comm":
    with open("/proc/self/comm", "w") as f:
        f.write(sys.argv[2])
time.sleep(1000)
EOF
cp /tmp/sleeper.py /opt/ray/_private/log_monitor.py
cp /tmp/sleeper.py /tmp/ray/dashboard/notdash.py
cp /tmp/sleeper.py /tmp/my_array_test.py
cp /tmp/sleeper.py /tmp/raytracer.py
touch /tmp/ray.txt
# stale: argv[0] titles, comm names, ray's daemons, sglang
(exec -a raylet sleep 1000) &
(exec -a 'ray::IDLE' sleep 1000) &
(exec -a 'sglang::scheduler_TP0' sleep 1000) &
python3 /tmp/sleeper.py --comm gcs_server &
python3 -u /opt/ray/_private/log_monitor.py --logs-dir=/tmp/ray &
# unrelated, with "ray" in their arguments
python3 /tmp/my_array_test.py --stray raylet 'ray::IDLE' &
python3 /tmp/ray/dashboard/notdash.py &
(cd /tmp && exec python3 -m raytracer) &
tail -f /tmp/ray.txt &
sleep 0.7
python3 -m rocmenv bootstrap --no-gpu-wait --no-shims --reap-grace 3 --report /out/report.json
python3 - <<'EOF' > /out/alive.json
import json, os
alive = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        comm = open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        continue
    if state != "Z":
        alive.append({"pid": int(pid), "comm": comm, "argv": [a.decode() for a in argv if a]})
print(json.dumps(alive))
EOF
"""


def test_bootstrap_ends_stale_ray_and_sglang_processes_and_spares_the_rest(
    image: str, out_dir: Path
) -> None:
    ran = docker_run(image, STALE_SCRIPT, mounts={str(out_dir): "/out"}, shell="bash")
    assert ran.code == 0, ran.stderr
    report = json.loads((out_dir / "report.json").read_text())
    reap = report["steps"][1]
    assert reap["name"] == "reap" and reap["status"] == "ok"
    ended = {e["name"]: e for e in reap["details"]["ended"]}
    assert set(ended) == {"raylet", "ray::IDLE", "sglang::scheduler_TP0", "python3"}
    assert all(e["ended"] and e["signal"] == "SIGTERM" for e in ended.values())
    assert {e["rule"] for e in reap["details"]["ended"]} == {
        "ray-daemon", "ray-title", "sglang-title", "python-script"}  # fmt: skip
    assert len(reap["details"]["ended"]) == 5  # the gcs_server (comm) one is a python3 too
    alive = json.loads((out_dir / "alive.json").read_text())
    joined = [" ".join(p["argv"]) for p in alive]
    for survivor in (
        "python3 /tmp/my_array_test.py --stray raylet ray::IDLE",
        "python3 /tmp/ray/dashboard/notdash.py",
        "python3 -m raytracer",
        "tail -f /tmp/ray.txt",
    ):
        assert survivor in joined, joined
    assert not any(p["comm"] in ("gcs_server", "raylet") for p in alive)
    assert not any(a.startswith(("ray::", "sglang::", "raylet")) for a in joined)
    assert not any(p["argv"][2:3] == ["/opt/ray/_private/log_monitor.py"] for p in alive)
    # PID 1 is this script: "raylet", "ray::IDLE", "log_monitor.py" are all in its argv
    assert any(p["pid"] == 1 and "raylet" in " ".join(p["argv"]) for p in alive)


def test_a_stale_process_ignoring_sigterm_is_killed(image: str, out_dir: Path) -> None:
    script = r"""
cat > /tmp/stubborn.py <<'EOF'
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open("/proc/self/comm", "w").write("raylet")
time.sleep(1000)
EOF
python3 /tmp/stubborn.py &
sleep 0.5
python3 -m rocmenv bootstrap --no-gpu-wait --no-shims --reap-grace 1 --report /out/report.json
"""
    ran = docker_run(image, script, mounts={str(out_dir): "/out"})
    assert ran.code == 0, ran.stderr
    ended = json.loads((out_dir / "report.json").read_text())["steps"][1]["details"]["ended"]
    assert [(e["comm"], e["signal"], e["ended"]) for e in ended] == [("raylet", "SIGKILL", True)]


# ------------------------------------------------------------------ overrides

BACKEND = '''"""A stdlib-only PEP 517 backend (editable installs through a .pth file) for tests."""
import base64, hashlib, os, zipfile

NAME = "sglang"


def _version():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "VERSION")) as f:
        return f.read().strip()


def _wheel(directory, files):
    version = _version()
    dist = f"{NAME}-{version}.dist-info"
    files = dict(files)
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {version}\\n"
    files[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\\n".join(record) + "\\n"
    name = f"{NAME}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return name


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    here = os.path.dirname(os.path.abspath(__file__))
    return _wheel(wheel_directory, {f"__editable__.{NAME}.pth": here + "\\n"})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("editable installs only")


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("editable installs only")
'''


def _git(cwd: Path, *args: str) -> str:
    git = shutil.which("git")
    assert git is not None
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    done = subprocess.run([git, "-C", str(cwd), *args], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout.strip()


@dataclass(frozen=True)
class Upstream:
    bare: Path
    patches: Path
    main: str
    feature: str
    pr: str


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    """An sglang look-alike upstream: python/ is a project named 'sglang' whose version and
    VALUE differ per commit; refs/pull/7/head exists only in the upstream."""
    if shutil.which("git") is None:
        testenv.missing_environment("git is not installed on this host", kind="git")
    root = tmp_path_factory.mktemp("upstream")
    work = root / "work"
    (work / "python" / "sglang").mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    (work / "python" / "tinybackend.py").write_text(BACKEND)
    (work / "python" / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "tinybackend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "sglang"\ndynamic = ["version"]\n'
    )

    def commit(version: str, value: str, message: str) -> str:
        (work / "python" / "VERSION").write_text(version + "\n")
        (work / "python" / "sglang" / "__init__.py").write_text(f"VALUE = {value!r}\n")
        _git(work, "add", "-A")
        _git(work, "commit", "-qm", message)
        return _git(work, "rev-parse", "HEAD")

    main = commit("0.5.9", "main", "main")
    _git(work, "checkout", "-qb", "feature/x")
    feature = commit("0.5.10.dev1", "feature", "feature")
    _git(work, "checkout", "-q", "--detach", main)
    pr = commit("0.5.10.dev7", "pr7", "pull request 7")
    _git(work, "checkout", "-q", "main")
    _git(work, "update-ref", "refs/pull/7/head", pr)
    bare = root / "upstream.git"
    _git(root, "clone", "-q", "--no-local", "--mirror", str(work), str(bare))
    patches = root / "patches"
    patches.mkdir()
    # applies on top of the PR; conflicts with the feature branch (VALUE differs)
    (patches / "rocm.patch").write_text(
        "--- a/python/sglang/__init__.py\n+++ b/python/sglang/__init__.py\n"
        "@@ -1 +1,2 @@\n-VALUE = 'pr7'\n+VALUE = 'pr7'\n+ROCM_PATCHED = True\n"
    )
    return Upstream(bare=bare, patches=patches, main=main, feature=feature, pr=pr)


def override_mounts(upstream: Upstream, out_dir: Path) -> dict[str, str]:
    return {
        "/usr/bin/git": "/usr/bin/git:ro",
        "/usr/lib/git-core": "/usr/lib/git-core:ro",
        str(_package_dir("pip")): "/opt/hostpip/pip:ro",
        str(upstream.bare): "/srv/upstream.git:ro",
        str(upstream.patches): "/patches:ro",
        str(out_dir): "/out",
    }


OVERRIDE_ENV = {"PYTHONPATH": "/opt/rocmenv-src:/opt/hostpip"}
BOOT = (
    "python3 -m rocmenv bootstrap --no-gpu-wait --no-reap --no-shims "
    "--pip-arg=--break-system-packages"
)


def test_bootstrap_overrides_sglang_from_a_pr_number_with_a_rocm_patch(
    image: str, upstream: Upstream, out_dir: Path
) -> None:
    script = f"""
set -e
git --version
git clone -q --no-local /srv/upstream.git /sgl-workspace/sglang
{BOOT} --sglang-pr '#7' --patch /patches/rocm.patch --report /out/first.json
python3 -c "import sglang, json; print(json.dumps([sglang.VALUE, sglang.ROCM_PATCHED, sglang.__file__]))" > /out/imported.json
# the image's patch is already in the work tree: no override, only the patch
{BOOT} --patch sglang=/patches/rocm.patch --report /out/second.json
"""
    ran = docker_run(image, script, mounts=override_mounts(upstream, out_dir), env=OVERRIDE_ENV)
    assert ran.code == 0, ran.stdout + ran.stderr
    first = json.loads((out_dir / "first.json").read_text())
    step = first["steps"][3]
    assert step["name"] == "overrides" and step["status"] == "ok", step
    target = step["details"]["targets"][0]
    assert target["ref"] == {"spelled": "#7", "kind": "pr", "fetch": "refs/pull/7/head"}
    assert target["commit"] == upstream.pr and target["previous_commit"] == upstream.main
    assert target["patches"] == [{"path": "/patches/rocm.patch", "status": "applied"}]
    assert target["installed"] == "/sgl-workspace/sglang/python"
    pip = [c for c in target["commands"] if c["argv"][1:4] == ["-m", "pip", "install"]]
    assert pip and pip[0]["returncode"] == 0
    # the report sees the reinstalled sglang, not the image's 0.5.8
    assert first["environment"]["packages"]["sglang"]["version"] == "0.5.10.dev7"
    value, patched, where = json.loads((out_dir / "imported.json").read_text())
    assert (value, patched) == ("pr7", True)
    assert where == "/sgl-workspace/sglang/python/sglang/__init__.py"
    second = json.loads((out_dir / "second.json").read_text())["steps"][3]["details"]
    assert second["targets"][0]["patches"][0]["status"] == "already-applied"
    assert second["targets"][0]["installed"] is None


def test_bootstrap_overrides_from_a_pr_body_branch_and_sha(
    image: str, upstream: Upstream, out_dir: Path
) -> None:
    body = "Fixes the MoE path.\n\n<!-- ci-sglang-pr: #1 -->\n- `ci-sglang-pr`: `feature/x`\n"
    (out_dir / "body.md").write_text(body)
    script = f"""
set -e
git clone -q --no-local /srv/upstream.git /sgl-workspace/sglang
{BOOT} --pr-body /out/body.md --report /out/branch.json
python3 -c "import sglang; print(sglang.VALUE)" > /out/branch.txt
{BOOT} --sglang-pr {upstream.main[:10]} --report /out/sha.json
python3 -c "import sglang; print(sglang.VALUE)" > /out/sha.txt
"""
    ran = docker_run(image, script, mounts=override_mounts(upstream, out_dir), env=OVERRIDE_ENV)
    assert ran.code == 0, ran.stdout + ran.stderr
    branch = json.loads((out_dir / "branch.json").read_text())["steps"][3]["details"]["targets"][0]
    assert branch["source"] == "pr-body" and branch["ref"]["kind"] == "ref"
    assert branch["commit"] == upstream.feature
    assert (out_dir / "branch.txt").read_text().strip() == "feature"
    sha = json.loads((out_dir / "sha.json").read_text())["steps"][3]["details"]["targets"][0]
    assert sha["commit"] == upstream.main and sha["ref"]["kind"] == "commit"
    assert (out_dir / "sha.txt").read_text().strip() == "main"


def test_bootstrap_stops_on_a_conflicting_patch_and_names_it(
    image: str, upstream: Upstream, out_dir: Path
) -> None:
    script = f"""
git clone -q --no-local /srv/upstream.git /sgl-workspace/sglang || exit 99
{BOOT} --sglang-pr feature/x --patch /patches/rocm.patch --report /out/conflict.json
"""
    ran = docker_run(image, script, mounts=override_mounts(upstream, out_dir), env=OVERRIDE_ENV)
    assert ran.code == 1, ran.stdout + ran.stderr
    assert "patch /patches/rocm.patch does not apply to /sgl-workspace/sglang" in ran.stderr
    assert "python/sglang/__init__.py" in ran.stderr  # git's words about the failing hunk
    report = json.loads((out_dir / "conflict.json").read_text())
    assert report["steps"][3]["status"] == "failed"
    # nothing was installed: the image's sglang is still the one reported
    assert report["environment"]["packages"]["sglang"]["version"] == "0.5.8"


SECRET_ENV = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    "GH_PAT": "github_pat_11AAAAAAA0bcdefghijklmno_pqrstuvwxyz0123456789",
    "HF_TOKEN": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm0123456789",
}


def test_a_pull_request_whose_build_prints_the_environment_leaks_no_secret_value(
    image: str, upstream: Upstream, out_dir: Path
) -> None:
    """Issue 22, attack 8, for real: the PR's build backend prints every variable and the
    bare value of $HF_TOKEN, then fails; pip shows that output, bootstrap reports it."""
    import difflib

    leaky = BACKEND.replace(
        "def build_editable(wheel_directory, config_settings=None, metadata_directory=None):\n",
        "def build_editable(wheel_directory, config_settings=None, metadata_directory=None):\n"
        "    for name, value in sorted(os.environ.items()):\n"
        '        print(f"{name}={value}")\n'
        '    print(os.environ["HF_TOKEN"])\n'
        '    raise SystemExit("cannot build with " + os.environ["HF_TOKEN"])\n',
    )
    assert leaky != BACKEND
    (out_dir / "leak.patch").write_text(
        "".join(difflib.unified_diff(BACKEND.splitlines(True), leaky.splitlines(True),
                                     "a/python/tinybackend.py", "b/python/tinybackend.py"))
    )  # fmt: skip
    script = f"""
git clone -q --no-local /srv/upstream.git /sgl-workspace/sglang 2>/dev/null || exit 99
{BOOT} --sglang-pr '#7' --patch /out/leak.patch --report /out/report.json > /out/stdout
"""
    env = {**OVERRIDE_ENV, **SECRET_ENV, "GITHUB_ACTIONS": "true",
           "GITHUB_STEP_SUMMARY": "/out/summary.md"}  # fmt: skip
    ran = docker_run(image, script, mounts=override_mounts(upstream, out_dir), env=env)
    assert ran.code == 1, ran.stdout + ran.stderr
    report = (out_dir / "report.json").read_text()
    assert "AWS_SECRET_ACCESS_KEY=***" in report  # the build did print its environment
    assert "cannot build with ***" in ran.stderr
    lines = ran.stderr.splitlines()
    masks = sorted(f"::add-mask::{v}" for v in SECRET_ENV.values())
    assert sorted(lines[:3]) == masks  # before anything else
    written = {
        "stderr": "\n".join(lines[3:]),
        "stdout": (out_dir / "stdout").read_text(),
        "report": report,
        "summary": (out_dir / "summary.md").read_text(),
    }
    assert written["summary"], "no step summary was written"
    leaks = {k: [v for v in SECRET_ENV.values() if v in text] for k, text in written.items()}
    assert {k: v for k, v in leaks.items() if v} == {}


def test_bad_refs_never_reach_git_in_the_container(image: str, out_dir: Path) -> None:
    (out_dir / "body.md").write_text("ci-megatron-pr: --upload-pack=touch${IFS}/out/pwned\n")
    ran = docker_run(
        image,
        "python3 -m rocmenv bootstrap --no-gpu-wait --pr-body /out/body.md",
        mounts={str(out_dir): "/out"},
    )
    assert ran.code == 2
    assert "is not a valid git ref" in ran.stderr
    assert not (out_dir / "pwned").exists()


# ------------------------------------------------------------------ GitHub Actions


def test_bootstrap_exports_pythonpath_through_github_env_and_the_shims_work(
    image: str, out_dir: Path
) -> None:
    script = """
set -e
export GITHUB_ENV=/out/github_env GITHUB_STEP_SUMMARY=/out/summary.md GITHUB_ACTIONS=true
: > "$GITHUB_ENV"
python3 -m rocmenv bootstrap --no-gpu-wait --report /out/report.json
# a later step: GitHub applies $GITHUB_ENV; emulate it
export "$(grep '^PYTHONPATH=' /out/github_env)"
python3 - > /out/shim.txt <<'EOF'
import aiter.ops.shuffle as s
print(hasattr(s, "shuffle_scale"))
EOF
"""
    ran = docker_run(
        image,
        script,
        mounts={str(out_dir): "/out"},
        env={"PYTHONPATH": "/opt/rocmenv-src"},
    )
    assert ran.code == 0, ran.stderr
    lines = (out_dir / "github_env").read_text().splitlines()
    assert lines == ["PYTHONPATH=/opt/rocmenv/launcher:/opt/rocmenv-src"]
    assert ran.stdout == ""  # nothing to eval when $GITHUB_ENV carries it
    assert (out_dir / "shim.txt").read_text().strip() == "True"
    summary = (out_dir / "summary.md").read_text()
    assert (
        "### rocmenv bootstrap" in summary and "| shim aiter-shuffle-scale | applies |" in summary
    )
    assert json.loads((out_dir / "report.json").read_text())["environment"]["rocm_version"] == (
        "7.0.0-38"
    )


def test_bootstrap_runs_every_step_in_a_container(image: str, out_dir: Path) -> None:
    """Every step with the image's stand-in rocm-smi (its wall time: benchmarks/bench_timings.py)."""
    ran = docker_run(
        image,
        "python3 -m rocmenv bootstrap --report /out/report.json > /dev/null",
        mounts={str(out_dir): "/out"},
    )
    assert ran.code == 0, ran.stderr
    report = json.loads((out_dir / "report.json").read_text())
    assert report["ok"] is True
    assert [(s["name"], s["status"]) for s in report["steps"]] == [
        ("gpu-wait", "ok"), ("reap", "ok"), ("shims", "ok"), ("overrides", "disabled"),
        ("environment", "ok")]  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_containers() -> Iterator[None]:
    yield
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL}"], capture_output=True, text=True
    ).stdout.split()
    if left:
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True)


# ------------------------------------------------------------------ the documented install


@pytest.fixture(scope="module")
def target_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocmenv installed as docs/workflows recommends: a wheel, ``pip install --no-deps
    --target DIR`` and nothing beside it (built and installed offline from this repo)."""
    root = tmp_path_factory.mktemp("target")
    wheels = root / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "-w", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if build.returncode:
        pytest.fail(f"cannot build the rocmenv wheel: {build.stderr[-2000:]}")
    target = root / "rocmenv"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(target), *map(str, wheels.glob("rocmenv-*.whl"))],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if install.returncode:
        pytest.fail(f"cannot install the rocmenv wheel: {install.stderr[-2000:]}")
    return target


def test_bootstrap_from_a_target_install_as_in_the_example_workflow(
    image: str, target_install: Path, out_dir: Path
) -> None:
    """No PYTHONPATH: rocmenv is imported from the working directory (the workflow's
    ``working-directory: ${{ runner.temp }}/rocmenv``), so nothing of it is exported."""
    script = """
set -e
unset PYTHONPATH
export GITHUB_ENV=/out/github_env
: > "$GITHUB_ENV"
cd /runner-temp/rocmenv
python3 -m rocmenv bootstrap --report /out/report.json
"""
    ran = docker_run(
        image,
        script,
        mounts={str(target_install): "/runner-temp/rocmenv:ro", str(out_dir): "/out"},
        env={"PYTHONPATH": ""},
    )
    assert ran.code == 0, ran.stderr
    assert (out_dir / "github_env").read_text() == "PYTHONPATH=/opt/rocmenv/launcher\n"
    report = json.loads((out_dir / "report.json").read_text())
    assert report["steps"][2]["details"]["shims"] == ["aiter-shuffle-scale"]
    assert report["environment"]["packages"]["aiter"]["version"] == "0.1.9.post1"
