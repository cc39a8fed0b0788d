"""``rocmenv suite run --backend slurm`` on the one-node Slurm test bed (8 stand-in MI300X
GPUs whose gres.conf order is neither PCI nor minor order; the scheduler at Slurm's
defaults): each test a job step of the suite's one allocation (``packing = "slurm"``: a job
of its own), its container on exactly the GPUs Slurm gave it; timeouts stop the step, SIGINT
cancels every step and job and leaves no container."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv.container.gpu import discover
from rocmenv.suite.allocation import MARKER, parse_gres_conf
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
    wait_for,
)
from tests.support.suite_project import Spec, check_schedule, records, write_suite

SLURM_TABLE = (
    '[suites.{name}.slurm]\ngres-type = "mi300x"\ntime-factor = 3.0\nmin-time = 60\n'
    'packing = "{packing}"\n'
)

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


def _steps(prefix: str = "rocmenv-") -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-s", "-o", "%i|%j"], capture_output=True, text=True, check=True,
        timeout=30,
    ).stdout  # fmt: skip
    return [  # id|name
        line for line in out.splitlines() if line.partition("|")[2].startswith(prefix)
    ]


def _pending(prefix: str = "rocmenv-") -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-t", "PENDING", "-o", "%j"], capture_output=True, text=True,
        check=True, timeout=30,
    ).stdout  # fmt: skip
    return [j for j in out.split() if j.startswith(prefix)]


@contextlib.contextmanager
def _blocker(gpus: int) -> Iterator[set[int]]:
    """Another user's job holding ``gpus`` GPUs: yields their Slurm indices."""
    name = f"blocker-{os.urandom(4).hex()}"
    subprocess.run(
        ["salloc", "--no-shell", f"--job-name={name}", f"--gres=gpu:mi300x:{gpus}", "--time=10"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    try:
        job = subprocess.run(["squeue", "-h", f"--name={name}", "-o", "%i"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()  # fmt: skip
        shown = subprocess.run(["scontrol", "show", "job", "-d", job], capture_output=True,
                               text=True, timeout=30, check=True).stdout  # fmt: skip
        match = re.search(r"IDX:([0-9,\-]+)\)", shown)
        assert match, shown
        indices: set[int] = set()
        for part in match.group(1).split(","):
            lo, _, hi = part.partition("-")
            indices.update(range(int(lo), int(hi or lo) + 1))
        yield indices
    finally:
        subprocess.run(["scancel", f"--name={name}"], check=False, timeout=30)


def _suite_with_slurm(
    project: Project, name: str, specs: list[Spec], *, packing: str = "rocmenv", extra: str = ""
) -> Path:
    out = write_suite(project, name, specs, extra=extra)
    config = project.root / "rocmenv.toml"
    config.write_text(config.read_text() + SLURM_TABLE.format(name=name, packing=packing))
    return out


def _step_of(log: str) -> str:
    match = re.search(rf"^{MARKER} .* step=(\S+)", log, re.M)
    assert match, log
    return match.group(1)


@pytest.mark.parametrize("packing", ["rocmenv", "slurm"])
def test_each_test_runs_in_slurm_on_exactly_its_allocated_gpus(
    project: Project, slurm: Path, packing: str
) -> None:
    out = _suite_with_slurm(project, "slurmed", SPECS, packing=packing)
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
        assert sorted(recs[name]["render"]) == expected
    # rocmenv's packing: every test a step of one allocation; Slurm's: a job each
    steps = {_step_of(Path(t["log"]).read_text()) for t in by.values()}
    assert len(steps) == len(SPECS)
    assert len({s.split(".")[0] for s in steps}) == (1 if packing == "rocmenv" else len(SPECS))
    # each step handed its test to the allocation's warm runner (a silent fallback to a
    # node-side rocmenv per step would pass everything above, only slower)
    warm = [
        n
        for n, t in by.items()
        if re.search(rf"^{MARKER} .* via=warm$", Path(t["log"]).read_text(), re.M)
    ]
    assert sorted(warm) == (sorted(by) if packing == "rocmenv" else [])
    assert list(Path(tempfile.gettempdir()).glob("rocmenv-*-warm")) == []  # the runner cleaned up
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


@pytest.mark.parametrize("packing", ["rocmenv", "slurm"])
def test_sigint_cancels_every_job_and_step_and_leaves_no_container(
    project: Project, slurm: Path, packing: str
) -> None:
    specs = [Spec(name=f"s{i}", gpus=2, est=100 - i, sleep=300) for i in range(5)]
    _suite_with_slurm(project, "slow", specs, packing=packing)
    proc = project.popen("suite", "run", "slow", "--backend", "slurm", "--json", env=_env(slurm))
    try:
        assert wait_for(lambda: len(project.containers()) == 4, 90), "4 containers never ran"
        if packing == "slurm":
            assert len(_jobs()) >= 5  # 4 running, 1 pending
        else:  # one allocation, 4 steps and the warm runner's; the fifth test waits
            tests = [s for s in _steps() if not s.endswith("-warm")]
            assert len(_jobs()) == 1 and len(tests) == 4, (_jobs(), _steps())
            assert len(_steps()) == 5, _steps()
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
    assert _steps() == []
    assert wait_for(lambda: project.containers() == [], 30), project.containers()


def test_a_step_past_its_timeout_is_stopped_and_retried_as_a_new_step(
    project: Project, slurm: Path
) -> None:
    specs = [Spec(name="hang", gpus=2, est=1, sleep=300), Spec(name="ok", gpus=1, est=1, sleep=0.5)]
    _suite_with_slurm(project, "hangs", specs, extra="timeout = 5\nretries = 1\nretry-wait = 0\n")
    t0 = time.monotonic()
    done = project.run("suite", "run", "hangs", "--backend", "slurm", "--json", env=_env(slurm),
                       timeout=240)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - t0 < 120  # not the 300 s the test sleeps
    by = {t["name"]: t for t in json.loads(done.stdout)["tests"]}
    assert by["ok"]["status"] == "passed"
    hang = by["hang"]
    assert hang["status"] == "timeout" and hang["exit_code"] == 124
    assert len(hang["attempts"]) == 2
    steps = [_step_of(Path(a["log"]).read_text()) for a in hang["attempts"]]
    assert len(set(steps)) == 2 and len({s.split(".")[0] for s in steps}) == 1, steps
    assert _jobs() == [] and _steps() == []
    assert wait_for(lambda: project.containers() == [], 30), project.containers()


def test_a_test_without_gpus_takes_none_of_the_allocation(project: Project, slurm: Path) -> None:
    """Without ``--gres=none`` a step gets every GPU of its job: the 8-GPU test would wait."""
    specs = [Spec(name="z0", gpus=0, est=10, sleep=4), Spec(name="f8", gpus=8, est=9, sleep=4)]
    out = _suite_with_slurm(project, "nogpu", specs)
    done = project.run("suite", "run", "nogpu", "--backend", "slurm", "--json", env=_env(slurm),
                       timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    recs = records(out)
    assert recs["z0"]["render"] == [] and len(recs["f8"]["render"]) == 8
    z, f = recs["z0"], recs["f8"]
    assert float(z["start"]) < float(f["end"]) and float(f["start"]) < float(z["end"]), recs


def test_with_half_the_gpus_taken_the_suite_holds_the_free_half(
    project: Project, slurm: Path
) -> None:
    specs = [Spec(name=f"p{i}", gpus=g, est=10 - i, sleep=1) for i, g in enumerate((2, 2, 1, 1))]
    _suite_with_slurm(project, "half", specs)
    with _blocker(4) as taken:
        done = project.run("suite", "run", "half", "--backend", "slurm", "--json",
                           env=_env(slurm), timeout=180)  # fmt: skip
        assert done.returncode == 0, done.stderr
        used: set[int] = set()
        for test in json.loads(done.stdout)["tests"]:
            marker = re.search(rf"^{MARKER} slurm=(\S+)", Path(test["log"]).read_text(), re.M)
            assert marker
            used.update(int(i) for i in marker.group(1).split(","))
        assert used and not used & taken and len(used) <= 4, (used, taken)
    assert _jobs() == []


def test_sigint_while_the_allocation_is_pending_cancels_it(project: Project, slurm: Path) -> None:
    _suite_with_slurm(project, "queued", [Spec(name="q2", gpus=2, est=1, sleep=1)])
    with _blocker(8):
        proc = project.popen("suite", "run", "queued", "--backend", "slurm", "--json",
                             env=_env(slurm))  # fmt: skip
        try:
            assert wait_for(lambda: len(_pending()) == 1, 60), _jobs()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 130, err
        assert [t["status"] for t in json.loads(out)["tests"]] == ["skipped"]
        assert wait_for(lambda: _jobs() == [], 30), _jobs()
    assert project.containers() == []


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
    done = project.run("options", "--format", "sbatch", "--profile", "suite-test", "--gpus", "0,1")
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


def test_an_allocation_slurm_refuses_is_a_clear_error(project: Project, slurm: Path) -> None:
    _suite_with_slurm(project, "nowhere", [Spec(name="n1", gpus=1, est=1, sleep=0)])
    config = project.root / "rocmenv.toml"
    config.write_text(config.read_text() + 'partition = "nope"\n')
    done = project.run("suite", "run", "nowhere", "--backend", "slurm", env=_env(slurm),
                       timeout=120)  # fmt: skip
    assert done.returncode == 4, done.stderr  # SlurmError: an engine error
    assert "salloc could not allocate 1 GPU(s)" in done.stderr
    assert "Invalid partition" in done.stderr and "Traceback" not in done.stderr
    assert _jobs() == [] and project.containers() == []
