"""``rocmenv suite run --backend slurm`` on the one-node Slurm test bed (8 stand-in MI300X
GPUs whose gres.conf order is neither PCI nor minor order): each test a Slurm job, its
container on exactly the allocated GPUs; SIGINT cancels every job and leaves no container."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rocmenv.spec.gpu import discover
from rocmenv.suite.allocation import MARKER, parse_gres_conf
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
    wait_for,
)
from tests.support.suite_project import Spec, check_schedule, records, write_suite

SLURM_TABLE = '[suites.{name}.slurm]\ngres-type = "mi300x"\ntime-factor = 3.0\nmin-time = 60\n'

SPECS = [
    Spec(name="a4", gpus=4, est=100, sleep=2.0),
    Spec(name="b2", gpus=2, est=90, sleep=1.5),
    Spec(name="c2", gpus=2, est=80, sleep=1.0),
    Spec(name="d1", gpus=1, est=70, sleep=1.0),
    Spec(name="e1", gpus=1, est=60, sleep=0.5, code=5),
    Spec(name="f8", gpus=8, est=30, sleep=0.5),
]


def _env(slurm: Path) -> dict[str, str]:
    return {"ROCMENV_SYSFS_ROOT": str(slurm / "sys"), "ROCMENV_DEV_ROOT": str(slurm / "dev")}


def _jobs(prefix: str = "rocmenv-") -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return [j for j in out.split() if j.startswith(prefix)]


def _suite_with_slurm(project: Project, name: str, specs: list[Spec]) -> Path:
    out = write_suite(project, name, specs)
    config = project.root / "rocmenv.toml"
    config.write_text(config.read_text() + SLURM_TABLE.format(name=name))
    return out


def test_each_test_is_a_slurm_job_on_exactly_its_allocated_gpus(
    project: Project, slurm: Path
) -> None:
    out = _suite_with_slurm(project, "slurmed", SPECS)
    done = project.run(
        "suite", "run", "slurmed", "--backend", "slurm", "--json", env=_env(slurm), timeout=300
    )
    assert done.returncode == 1, done.stderr  # e1 exits 5
    report = json.loads(done.stdout)
    by = {t["name"]: t for t in report["tests"]}
    assert {n: t["status"] for n, t in by.items()} == {
        s.name: ("failed" if s.code else "passed") for s in SPECS
    }
    assert by["e1"]["exit_code"] == 5
    recs = records(out)
    assert sorted(recs) == sorted(s.name for s in SPECS)
    inventory = discover(slurm / "sys", slurm / "dev")
    render_of = {g.index: g.render_node.name for g in inventory.gpus}
    check_schedule(recs, SPECS, report, render_of, 8)
    # Slurm's indices are positions in gres.conf's File= list: what the container saw is
    # exactly those files, whatever PCI order or minor numbers say
    gres = parse_gres_conf(Path("/etc/slurm/gres.conf").read_text())
    assert [Path(d.path).name for d in gres] != sorted(Path(d.path).name for d in gres)
    for name, test in by.items():
        log = Path(test["log"]).read_text()
        marker = re.search(rf"^{MARKER} slurm=(\S+) host=(\S+)", log, re.M)
        assert marker, log
        slurm_indices = [int(i) for i in marker.group(1).split(",")]
        expected = sorted(Path(gres[i].path).name for i in slurm_indices)
        assert sorted(recs[name]["render"]) == expected  # type: ignore[call-overload]
    assert _jobs() == []
    assert project.containers() == []
    # the learned time is the command's own, not the queue wait
    history = json.loads((project.root / "rocmenv.suite-history.json").read_text())
    assert history["tests"]["suite-test::a4"]["times"][0] < 30


def test_a_test_bigger_than_any_node_is_refused_before_submitting(
    project: Project, slurm: Path
) -> None:
    _suite_with_slurm(project, "huge", [Spec(name="x16", gpus=16, est=1, sleep=0)])
    done = project.run("suite", "run", "huge", "--backend", "slurm", env=_env(slurm), timeout=60)
    assert done.returncode == 2, done.stderr
    assert "more GPUs than any Slurm node has (8): x16 (16)" in done.stderr


def test_sigint_cancels_every_job_and_leaves_no_container(project: Project, slurm: Path) -> None:
    specs = [Spec(name=f"s{i}", gpus=2, est=100 - i, sleep=300) for i in range(5)]
    _suite_with_slurm(project, "slow", specs)
    proc = project.popen("suite", "run", "slow", "--backend", "slurm", "--json", env=_env(slurm))
    try:
        assert wait_for(lambda: len(project.containers()) == 4, 90), "4 containers never ran"
        assert len(_jobs()) >= 5  # 4 running, 1 pending
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
        elapsed = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert elapsed < 60
    report = json.loads(out)
    assert report["interrupted"] is True
    assert {t["status"] for t in report["tests"]} <= {"cancelled", "skipped"}
    assert wait_for(lambda: _jobs() == [], 30), _jobs()
    assert wait_for(lambda: project.containers() == [], 30), project.containers()


@pytest.fixture(autouse=True)
def _no_stray_jobs() -> object:
    yield
    stray = _jobs()
    if stray:
        subprocess.run(["scancel", "--name", ",".join(stray)], check=False, timeout=30)


def _allocation(stderr: str) -> tuple[list[int], list[str]]:
    """Slurm's indices and the gres.conf files they map to, from the node's note."""
    match = re.search(r"Slurm allocation: slurm=(\S+) host=\S+ files=(\S+)", stderr)
    assert match, stderr
    return [int(i) for i in match.group(1).split(",")], match.group(2).split(",")


def test_run_backend_slurm_passes_exactly_the_allocated_gpus(project: Project, slurm: Path) -> None:
    write_suite(project, "none", [])  # the suite-test profile
    done = project.run(
        "run", "--backend", "slurm", "--profile", "suite-test", "--gpus", "0-2", "--",
        "sh", "-c", "ls /dev/dri | grep renderD; exit 7",
        env=_env(slurm), timeout=120,
    )  # fmt: skip
    assert done.returncode == 7, done.stderr
    indices, files = _allocation(done.stderr)
    gres = parse_gres_conf(Path("/etc/slurm/gres.conf").read_text())
    assert files == [gres[i].path for i in indices] and len(files) == 3
    assert sorted(done.stdout.split()) == sorted(Path(f).name for f in files)
    assert project.containers() == [] and _jobs() == []


def test_sbatch_script_from_options_runs_on_the_allocated_gpus(
    project: Project, slurm: Path, tmp_path: Path
) -> None:
    import os
    import sys

    write_suite(project, "none", [])
    done = project.run("options", "--format", "sbatch", "-p", "suite-test", "--gpus", "0,1")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert "#SBATCH --gres=gpu:2" in script and "run --gpus slurm" in script
    path = tmp_path / "job.sh"
    path.write_text(script)
    out = tmp_path / "job.out"
    env = project.env(_env(slurm))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    submitted = subprocess.run(
        ["sbatch", "--wait", f"--output={out}", str(path), "sh", "-c", "ls /dev/dri | grep renderD"],
        cwd=project.cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    text = out.read_text() if out.exists() else ""
    assert submitted.returncode == 0, (submitted.stderr, text)
    _indices, files = _allocation(text)
    assert len(files) == 2
    seen = [line for line in text.splitlines() if line.startswith("renderD")]
    assert sorted(seen) == sorted(Path(f).name for f in files)
    assert project.containers() == []
