"""Makespan of a suite on one 8-GPU host: the reference CI's static two-partition split vs
rocmenv's dynamic GPU-slot packing vs the lower bound max(sum time x GPUs / 8, longest).

Two shapes: ``all-4`` (the reference CI's stage: 8 tests at 4 GPUs, 9,300 s of estimates)
and ``mixed`` (1/2/4/8-GPU tests). Per shape, 10 draws of actual times uniformly within
±30 % of the estimates. The 10 draws are computed with the packer itself
(:func:`rocmenv.suite.packer.simulate`, the state machine ``suite run`` drives); the static
split is ``suite plan --partitions 2``, each partition a 4-GPU runner running its tests one
after another (8-GPU tests, which no 4-GPU runner can take, run after both partitions).

``--real``: draw 0 of each shape is also run for real — every test a container sleeping
its actual time scaled down 100x, on the fake 8-GPU host, through ``rocmenv suite run``
(local) and, with ``--slurm``, ``--backend slurm`` on the Slurm test bed — and the measured
makespan is compared with the simulated one (the difference per test is the scheduling
and container overhead).

    .venv/bin/python benchmarks/bench_suite.py [--draws 10] [--real] [--slurm] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import machine_note, table  # noqa: E402
from rocmenv.suite.packer import Job, lower_bound, simulate  # noqa: E402

SCALE = 100.0
ALL4 = [(4, e) for e in (1600, 1500, 1400, 1300, 1100, 1000, 800, 600)]  # 9,300 s
MIXED = [
    (8, 900), (4, 1600), (4, 1200), (4, 700), (2, 1400), (2, 1000), (2, 800), (2, 500),
    (1, 1500), (1, 1100), (1, 900), (1, 600), (1, 400), (1, 300), (8, 400), (1, 200),
]  # fmt: skip
SHAPES = {"all-4": ALL4, "mixed": MIXED}


def jobs_of(shape: list[tuple[int, int]]) -> list[Job]:
    return [Job(name=f"t{i:02d}", gpus=g, estimate=float(e)) for i, (g, e) in enumerate(shape)]


def draw(jobs: list[Job], seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    return {j.name: j.estimate * rng.uniform(0.7, 1.3) for j in jobs}


def static_split(jobs: list[Job], actual: dict[str, float]) -> float:
    """``suite plan --partitions 2``: each partition a 4-GPU runner, one test at a time."""
    from pathlib import Path as _P

    from rocmenv.suite.history import History
    from rocmenv.suite.model import Suite, SuiteTest
    from rocmenv.suite.plan import estimates, partitions

    fits = [j for j in jobs if j.gpus <= 4]
    suite = Suite(
        name="s",
        profile=None,
        tests=tuple(
            SuiteTest(name=j.name, path=j.name, gpus=j.gpus, est_time=j.estimate, command=())
            for j in fits
        ),
    )
    parts = partitions(estimates(suite, History(path=_P("-")), "p"), 2)
    runners = max(sum(actual[t.name] for t in p.tests) for p in parts)
    return runners + sum(actual[j.name] for j in jobs if j.gpus > 4)


def simulated(jobs: list[Job], actual: dict[str, float]) -> float:
    return max(s.end for s in simulate(jobs, actual, 8))


# -- real runs ---------------------------------------------------------------------------------


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
"""


def real_run(
    shape: str, jobs: list[Job], actual: dict[str, float], backend: str, host_env: dict[str, str]
) -> float:
    from tests.support.testenv import load_family

    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        root = Path(tmp)
        (root / ".git").mkdir()
        rows = ",\n".join(
            f'  {{ path = "{j.name}", gpus = {j.gpus}, est-time = {j.estimate}, '
            f'cmd = ["sleep", "{actual[j.name] / SCALE:.2f}"] }}'
            for j in jobs
        )
        text = PROFILE.format(image=load_family()["demo"].ref, token=os.urandom(6).hex())
        text += f'\n[suites.{shape}]\nprofile = "bench"\ntests = [\n{rows}\n]\n'
        (root / "rocmenv.toml").write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
        env.update(host_env)
        argv = [sys.executable, "-m", "rocmenv", "suite", "run", shape, "--json", "--no-learn"]
        argv += ["--backend", backend]
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"suite run ({backend}) failed:\n{done.stderr[-3000:]}")
        return float(json.loads(done.stdout)["makespan"])  # first start to last end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--real", action="store_true", help="also run draw 0 in containers")
    parser.add_argument("--slurm", action="store_true", help="and on the Slurm test bed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, summary, real_rows = [], [], []
    doc: dict[str, object] = {}
    for shape, spec in SHAPES.items():
        jobs = jobs_of(spec)
        ratios, wins = [], 0
        for seed in range(args.draws):
            actual = draw(jobs, seed)
            st, dyn, lb = (
                static_split(jobs, actual),
                simulated(jobs, actual),
                lower_bound(jobs, actual, 8),
            )
            ratios.append(dyn / lb)
            wins += dyn <= st
            rows.append(
                (shape, str(seed), f"{st:.0f}", f"{dyn:.0f}", f"{lb:.0f}", f"{dyn / lb:.3f}",
                 f"{dyn / st:.3f}")
            )  # fmt: skip
        summary.append(
            (shape, f"{sum(e for _, e in spec)}", f"{wins}/{args.draws}",
             f"{statistics.median(ratios):.3f}", f"{max(ratios):.3f}")
        )  # fmt: skip
        doc[shape] = {"dynamic_not_slower": wins, "median_dyn_over_lb": statistics.median(ratios)}
        if args.real:
            from tests.support.fakegpu import build_fake_host

            actual = draw(jobs, 0)
            sim = simulated(jobs, actual) / SCALE
            backends: list[tuple[str, dict[str, str]]] = []
            tmp = Path(tempfile.mkdtemp(prefix="bench-host-"))
            host = build_fake_host(tmp, char_devices=True)
            backends.append(("local", host.env()))
            if args.slurm:
                from tests.support.testenv import slurm_gpu_root

                s = slurm_gpu_root()
                backends.append(
                    (
                        "slurm",
                        {"ROCMENV_SYSFS_ROOT": str(s / "sys"), "ROCMENV_DEV_ROOT": str(s / "dev")},
                    )
                )
            for backend, host_env in backends:
                measured = real_run(shape, jobs, actual, backend, host_env)
                per_test = (measured - sim) / len(jobs)
                real_rows.append(
                    (shape, backend, f"{measured:.1f}", f"{sim:.1f}", f"{measured / sim:.3f}",
                     f"{per_test:.2f}")
                )  # fmt: skip
    if args.json:
        print(json.dumps({"shapes": doc, "draws": rows, "real": real_rows}))
        return 0
    print(table(rows, ("shape", "draw", "static 2x4 (s)", "dynamic (s)", "lower bound (s)",
                       "dyn/LB", "dyn/static")))  # fmt: skip
    print()
    print(table(summary, ("shape", "sum of estimates (s)", "dynamic <= static", "median dyn/LB",
                          "worst dyn/LB")))  # fmt: skip
    if real_rows:
        print()
        print(table(real_rows, ("shape", "backend", "measured (s, /100)", "simulated (s, /100)",
                                "ratio", "overhead per test (s)")))  # fmt: skip
    print(machine_note())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
