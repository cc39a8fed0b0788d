"""Issue 31, item 1 for suites: an untrusted ``suite run`` — on the local backend and on the
Slurm test bed — whose tests write, chmod, mknod, symlink and plant ``.git`` files leaves
the host checkout byte for byte and mode for mode as it was, the host's ``git status`` runs
nothing planted, and each test's results leave through ``--output DIR`` into ``DIR/TEST``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.fakegpu import build_fake_host
from tests.support.planting import PLANT, fork_repo, planted_commands_ran
from tests.support.run_project import Project, containers_labelled, remove_containers
from tests.support.treehash import differences, snapshot

SUITE = """
[suites.fork]
profile = "evil"
tests = [
  {{ path = "t/plant.py", name = "planter", gpus = {gpus}, est-time = 5, cmd = {plant} }},
  {{ path = "t/write.py", name = "writer", gpus = {gpus}, est-time = 5, cmd = {write} }},
]
"""
WRITE = 'echo more >> a.txt; mkdir -p "$ROCMENV_OUTPUT/d"; echo ok > "$ROCMENV_OUTPUT/d/r.txt"'


def fork_with_suite(base: Path, token: str, image: str, gpus: int) -> Path:
    """The fork, its profile asking ``MKNOD`` (which the test's policy allows: the nodes are
    really made, in the container's view)."""
    marker = base / "pwned"
    tail = SUITE.format(
        gpus=gpus,
        plant=json.dumps(["sh", "-c", PLANT.replace("@MARKER@", str(marker))]),
        write=json.dumps(["sh", "-c", WRITE]),
    )
    return fork_repo(base, token, {"extends": "cpu", "mounts": [], "image": image,
                                   "tag": image.rsplit(":", 1)[1], "cap-add": ["MKNOD"]},
                     tail=tail)  # fmt: skip


@pytest.fixture(name="base")
def base_fixture() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="rocmenv-suite-view-", dir="/tmp"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize(
    ("backend", "engine"),
    [("local", "docker-api"), ("local", "docker-cli"), ("local", "podman"), ("slurm", None)],
)
def test_an_untrusted_suite_leaves_the_host_checkout_identical(
    base: Path, family: testenv.Family, backend: str, engine: str | None,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    if engine == "podman":
        testenv.need("podman")
    token = os.urandom(8).hex()
    image = family["demo"].ref
    gpus = 1 if backend == "slurm" else 0
    root = fork_with_suite(base, token, image, gpus)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
    if backend == "slurm":
        gpu_root = request.getfixturevalue("slurm")
        env.update({"ROCMENV_SYSFS_ROOT": str(gpu_root / "sys"),
                    "ROCMENV_DEV_ROOT": str(gpu_root / "dev")})  # fmt: skip
    else:
        env.update(build_fake_host(base / "host", char_devices=True).env())
    env.update({"ROCMENV_UNTRUSTED": "1", "ROCMENV_SHIMS_QUIET": "1", "ROCMENV_SITE_CONFIG": "",
                "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}",
                "RUNNER_TEMP": str(base / "runner-temp"),
                "ROCMENV_POLICY": str(base / "policy.toml")})  # fmt: skip
    (base / "policy.toml").write_text('cap-add = ["MKNOD"]\n')
    (base / "runner-temp").mkdir()
    project = Project(root=root, cwd=root, data=base, host=None, image=image,  # type: ignore[arg-type]
                      group=("video", 44), base_env=env, token=token)  # fmt: skip
    before = snapshot(root)
    out = base / "results"
    try:
        done = project.run("suite", "run", "fork", "--backend", backend, "--json",
                           *(("--engine", engine) if engine else ()),
                           "--output", str(out), timeout=300)  # fmt: skip
    finally:
        leftovers = containers_labelled(f"org.rocmenv.test={token}")
        remove_containers(leftovers)
    assert done.returncode == 0, done.stderr
    assert leftovers == []
    tests = {t["name"]: t for t in json.loads(done.stdout)["tests"]}
    assert {t["status"] for t in tests.values()} == {"passed"}
    said = Path(tests["planter"]["log"]).read_text()
    assert "planted=yes" in said and "node=made" in said  # all of it, inside
    assert differences(before, snapshot(root)) == []
    assert planted_commands_ran(root, base / "pwned") == []
    assert (out / "writer" / "d" / "r.txt").read_text() == "ok\n"
    assert sorted(p.name for p in out.iterdir()) == ["planter", "writer"]
