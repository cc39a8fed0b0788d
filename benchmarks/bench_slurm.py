"""Makespan of mixed suites on the Slurm test bed at Slurm's default scheduler settings
(``sched_interval``/``bf_interval`` untouched, ``scripts/lib/slurm_setup.sh``), against the
lower bound max(sum of time x GPUs / free GPUs, longest test).

Side by side, interleaved, ``--repeats`` times each (every test a container sleeping its
time, through ``rocmenv suite run --json --no-learn``):

* ``slurm jobs``: ``[slurm] packing = "slurm"`` — one job per test, Slurm's scheduler packs
  (the design before issue 20);
* ``slurm steps``: ``packing = "rocmenv"`` — one allocation, each test a job step packed by
  rocmenv (the default now);
* ``local``: the local backend on the same number of GPUs of a stand-in host
  (``--gpus 0-3``), the packer without Slurm.

Shapes: ``half`` — 6 tests of 1/2/4 GPUs while another job holds 4 of the 8 GPUs (a
``salloc`` blocker for the whole run); ``whole`` — 6 tests of 1/2/4/8 GPUs on the idle node;
``tight`` — 1/2/4/8 GPUs whose bound no schedule reaches (not run by default).
``simulated`` is the packer's own schedule with no per-test overhead
(:func:`rocmenv.suite.packer.simulate`): the gap between it and the lower bound is the
packing, the rest is per-test start-up (srun, the node's rocmenv, the container). Where
it goes, per test: ``Slurm`` (the step's wall on the submitting side minus the node's run
time, from the log's marker: step creation and end, the hand-over to the warm runner, the
node's planning) and ``container`` (the node's run time minus the command's own: create,
start, exit — what local pays too; for ``local`` its whole overhead).

``--baseline-python PY`` adds ``slurm steps (baseline)``: the same packing run by another
install's interpreter (e.g. a venv of ``main``: ``git archive main | tar -x -C DIR``, then
``python3 -m venv DIR/.venv && DIR/.venv/bin/pip install -e DIR``), interleaved with the
others — the node side runs that interpreter too (``python -I``).

``--scale F`` multiplies every test's time (the per-test start-up is the same, so a longer
suite shows how it amortises; the reference CI's tests run for minutes).

    .venv/bin/python benchmarks/bench_slurm.py [--repeats 3] [--shapes half,whole] [--scale 1]
        [--modes "slurm jobs,slurm steps,local"] [--baseline-python PY] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import machine_note, table  # noqa: E402
from rocmenv.suite.packer import Job, lower_bound, simulate  # noqa: E402

# (GPUs, seconds): the estimates are the times (a learned history would be close to them)
SHAPES: dict[str, tuple[int, list[tuple[int, float]]]] = {
    "half": (4, [(4, 5.0), (2, 8.0), (2, 6.0), (1, 12.0), (1, 9.0), (1, 7.0)]),
    "whole": (8, [(8, 4.0), (4, 14.0), (2, 8.0), (2, 6.0), (1, 14.0), (1, 14.0)]),
    # no packing reaches this one's bound (the 8-GPU test waits for a drain wherever it
    # goes): the packer's own schedule is 1.17x of it, before any overhead
    "tight": (8, [(8, 5.0), (4, 9.0), (4, 6.0), (2, 12.0), (2, 8.0), (1, 10.0)]),
}

PROFILE = """
[profiles.bench]
extends = "rocm"
image = "{image}"
group-add = ["video"]
ulimits = {{ stack = 67108864, nofile = "1024:4096" }}
mounts = []
shims = false
labels = {{ "org.rocmenv.bench" = "{token}" }}

[slurm]
gres-type = "mi300x"
min-time = 60
packing = "{packing}"
"""


def _jobs(spec: list[tuple[int, float]]) -> list[Job]:
    return [Job(name=f"t{i}", gpus=g, estimate=s) for i, (g, s) in enumerate(spec)]


def _project(root: Path, shape: str, spec: list[tuple[int, float]], packing: str) -> None:
    from tests.support.testenv import load_family

    (root / ".git").mkdir(exist_ok=True)
    rows = ",\n".join(
        f'  {{ path = "t{i}", gpus = {g}, est-time = {s}, cmd = ["sleep", "{s}"] }}'
        for i, (g, s) in enumerate(spec)
    )
    text = PROFILE.format(
        image=load_family()["demo"].ref, token=os.urandom(6).hex(), packing=packing
    )
    text += f'\n[suites.{shape}]\nprofile = "bench"\ntests = [\n{rows}\n]\n'
    (root / "rocmenv.toml").write_text(text)


def scaled(shape: str, scale: float) -> tuple[int, list[tuple[int, float]]]:
    free, spec = SHAPES[shape]
    return free, [(g, round(s * scale, 2)) for g, s in spec]


BASELINE = "slurm steps (baseline)"


@dataclass(frozen=True, kw_only=True)
class Sample:
    makespan: float  # as the suite reports it
    wall: float  # the command's
    # per test: its step/test's wall on the submitting side minus the node's run time (Slurm's
    # step, the hand-over to the runner, the node's planning: empty for local), and the
    # node's run time minus the command's own (the container's create/start/exit)
    slurm: list[float]
    container: list[float]


def _breakdown(
    report: dict[str, object], spec: list[tuple[int, float]]
) -> tuple[list[float], list[float]]:
    import re

    slurm, container = [], []
    for test in report["tests"]:  # type: ignore[attr-defined]
        own = spec[int(test["name"][1:])][1]
        text = Path(test["log"]).read_text(errors="replace") if test.get("log") else ""
        found = re.search(r"runtime=([0-9.]+) exit=", text)
        if found is None:  # local: no node side apart
            container.append(test["wall"] - own)
            continue
        slurm.append(test["wall"] - float(found.group(1)))
        container.append(float(found.group(1)) - own)
    return slurm, container


def run_once(
    shape: str, mode: str, host_env: dict[str, str], scale: float, python: str = sys.executable
) -> Sample:
    free, spec = scaled(shape, scale)
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        root = Path(tmp)
        _project(root, shape, spec, "slurm" if mode == "slurm jobs" else "rocmenv")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
        env.update(host_env)
        argv = [python, "-m", "rocmenv", "suite", "run", shape, "--json", "--no-learn"]
        argv += ["--gpus", f"0-{free - 1}"] if mode == "local" else ["--backend", "slurm"]
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise SystemExit(f"suite run ({mode}) failed:\n{done.stderr[-3000:]}")
        report = json.loads(done.stdout)
        slurm, container = _breakdown(report, spec)
        return Sample(makespan=float(report["makespan"]), wall=wall, slurm=slurm,
                      container=container)  # fmt: skip


@contextlib.contextmanager
def blocker(gpus: int) -> Iterator[None]:
    """Another user's job holding ``gpus`` GPUs of the node for the whole measurement."""
    if gpus <= 0:
        yield
        return
    name = f"bench-blocker-{os.urandom(4).hex()}"
    subprocess.run(
        ["salloc", "--no-shell", f"--job-name={name}", f"--gres=gpu:mi300x:{gpus}", "--time=120"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        yield
    finally:
        subprocess.run(["scancel", f"--name={name}"], check=False, timeout=30)


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    return (
        f"{1000 * statistics.median(values):.0f} "
        f"({1000 * min(values):.0f}-{1000 * max(values):.0f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default="half,whole")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--modes", default="slurm jobs,slurm steps,local")
    parser.add_argument("--baseline-python", metavar="PY", help="also run steps with PY's rocmenv")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from tests.support.fakegpu import build_fake_host
    from tests.support.testenv import slurm_gpu_root

    s = slurm_gpu_root()
    slurm_env = {"ROCMENV_SYSFS_ROOT": str(s / "sys"), "ROCMENV_DEV_ROOT": str(s / "dev")}
    local_env = build_fake_host(
        Path(tempfile.mkdtemp(prefix="bench-host-")), char_devices=True
    ).env()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.baseline_python:
        modes.append(BASELINE)
    rows, doc = [], {}
    for shape in [x.strip() for x in args.shapes.split(",") if x.strip()]:
        free, spec = scaled(shape, args.scale)
        jobs = _jobs(spec)
        times = {j.name: j.estimate for j in jobs}
        lb = lower_bound(jobs, times, free)
        sim = max(slot.end for slot in simulate(jobs, times, free))
        samples: dict[str, list[Sample]] = {m: [] for m in modes}
        loads: list[float] = []
        with blocker(8 - free):
            for _ in range(args.repeats):
                for mode in modes:
                    samples[mode].append(
                        run_once(
                            shape,
                            mode,
                            local_env if mode == "local" else slurm_env,
                            args.scale,
                            args.baseline_python if mode == BASELINE else sys.executable,
                        )
                    )
                    loads.append(os.getloadavg()[0])
        for mode in modes:
            spans = [x.makespan for x in samples[mode]]
            walls = [x.wall for x in samples[mode]]
            slurm = [v for x in samples[mode] for v in x.slurm]
            container = [v for x in samples[mode] for v in x.container]
            med = statistics.median(spans)
            rows.append(
                (f"{shape} x{args.scale:g}", mode, f"{free}/8", f"{lb:.1f}", f"{sim:.1f}", f"{med:.1f}",
                 f"{min(spans):.1f}-{max(spans):.1f}", f"{med / lb:.2f}",
                 f"{statistics.median(walls):.1f}", _ms(slurm), _ms(container),
                 f"{statistics.median(loads):.2f}")
            )  # fmt: skip
            doc[f"{shape}x{args.scale:g}/{mode}"] = {
                "lower_bound": lb, "simulated": sim, "makespans": spans, "walls": walls,
                "median_over_lb": med / lb, "load": loads, "per_test_slurm": slurm,
                "per_test_container": container,
            }  # fmt: skip
    if args.json:
        print(json.dumps(doc))
        return 0
    print(
        table(rows, ("shape", "mode", "free GPUs", "lower bound (s)", "simulated (s)",
                     "makespan median (s)", "min-max (s)", "median/LB", "wall median (s)",
                     "per test: Slurm (ms)", "per test: container (ms)", "load 1-min"))
    )  # fmt: skip
    print(
        "per test (median, min-max over every test of every repeat): Slurm = the test's wall "
        "minus the node's run time (step creation and end, the hand-over to the runner, the "
        "node's planning); container = the node's run time minus the command's own time "
        "(create, start, exit; for local the whole overhead)"
    )
    print(machine_note())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
