"""``rocmenv run`` vs the equivalent plain ``docker run --rm`` on a no-op command (issue 20).

    .venv/bin/python benchmarks/bench_run.py [--rounds 15] [--image REF] [--profile cpu]
        [--engines auto,docker-api,docker-cli] [--baseline REV]… [--json]

Cases, interleaved (each round runs every case once, in a rotated order, so that machine
load hits every case alike):

- ``docker run --rm ARGS IMAGE true`` with the arguments ``rocmenv options --format docker``
  renders for the profile, and the same with the launcher mount, its ``__pycache__`` tmpfs
  and ``PYTHONPATH`` (what ``rocmenv run`` adds with shims): both sides create the same
  container;
- ``rocmenv run --profile P --pull never --image IMAGE -- true`` per engine (``auto``, the
  default, is what users get: docker-api where the socket answers), with shims
  (against ``docker run +launcher``) and ``--no-shims`` (against ``docker run``), with
  ``ROCMENV_TIMINGS=1``: the per-stage breakdown; "python + imports" is the wall time
  before the first stage;
- ``rocmenv --help`` (target < 60 ms);
- with ``--baseline REV`` (repeatable): the same rocmenv cases of that git revision,
  exported and byte-compiled, run by the same interpreter.

CPU: the median user + system time of the command itself (robust to load, unlike the wall
time; the engine daemon's work is not counted). Everything is byte-compiled first (``compileall``; the machines set
``PYTHONDONTWRITEBYTECODE``). Printed: median and interquartile range of every case, the
ratio of medians and the median and range of the per-round ratios, the stage medians, and
the load average before and after. Target: ``rocmenv run`` ≤ 1.10× ``docker run``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ROOT
from benchmarks._layers import export_revision

TIMINGS = re.compile(r"timings: (.*); total ([0-9]+)ms")


def _rocmenv_bin() -> list[str]:
    exe = Path(sys.executable).parent / "rocmenv"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rocmenv"]


def _default_image() -> str:
    try:
        from tests.support.testenv import load_family

        return load_family()["demo"].ref
    except Exception:  # any image will do
        return "rocmenv-test/base:py311"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds (and stderr); the child's CPU seconds go to ``_time.cpu``."""
    cpu0, t0 = _cpu(), time.perf_counter()
    done = subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - t0
    _time.cpu = _cpu() - cpu0  # type: ignore[attr-defined]
    if done.returncode != 0:
        raise SystemExit(
            f"benchmark command failed ({done.returncode}): {' '.join(argv)}\n{done.stderr.decode()}"
        )
    return elapsed, done.stderr.decode(errors="replace")


def _stages(stderr: str, wall: float) -> dict[str, float] | None:
    match = TIMINGS.search(stderr)
    if match is None:
        return None
    out = {"python + imports": wall * 1000 - float(match.group(2))}
    for part in match.group(1).split(", "):
        name, _, ms = part.rpartition(" ")
        out[name] = float(ms.removesuffix("ms"))
    return out


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 4:
        return min(values), statistics.median(values), max(values)
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--image", default=None)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument(
        "--engines", default="auto", help="comma-separated; auto: what `rocmenv run` picks"
    )
    parser.add_argument("--baseline", metavar="REV", action="append", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    image = args.image or _default_image()
    rocmenv = _rocmenv_bin()
    work = Path(tempfile.mkdtemp(prefix="rocmenv-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
    env["ROCMENV_SHIMS_QUIET"] = "1"
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed rocmenv runs from bytecode
    load_before = os.getloadavg()
    try:
        compileall.compile_dir(str(ROOT / "rocmenv"), quiet=1)
        trees = {"rocmenv": None} | {
            rev: export_revision(rev, work / f"base-{i}") for i, rev in enumerate(args.baseline)
        }
        for tree in trees.values():
            if tree is not None:
                compileall.compile_dir(str(tree), quiet=1)
        project = work / "project"
        project.mkdir()
        rendered = subprocess.run(
            [*rocmenv, "options", "--format", "docker", "--json", "--profile", args.profile],
            cwd=project, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        docker_args = json.loads(rendered.stdout)["args"]
        launcher = _launcher_args(rocmenv, image, project, env, args.profile)
        variants: dict[str, tuple[list[str], dict[str, str]]] = {
            "docker run": (["docker", "run", "--rm", *docker_args, image, "true"], env),
            "docker run +launcher": (
                ["docker", "run", "--rm", *docker_args, *launcher, image, "true"],
                env,
            ),
        }
        for label, tree in trees.items():
            tree_env = {**env, "ROCMENV_TIMINGS": "1"}
            if tree is not None:
                tree_env["PYTHONPATH"] = str(tree)
            for engine in args.engines.split(","):
                base = [*rocmenv, "run", "--engine", engine, "--profile", args.profile,
                        "--pull", "never", "--image", image]  # fmt: skip
                variants[f"{label} {engine} --no-shims"] = ([*base, "--no-shims", "--", "true"],
                                                            tree_env)  # fmt: skip
                variants[f"{label} {engine}"] = ([*base, "--", "true"], tree_env)
            help_env = {**env, "PYTHONPATH": str(tree)} if tree is not None else env
            variants[f"{label} --help"] = ([*rocmenv, "--help"], help_env)
        for argv, case_env in variants.values():  # warm: image layers, launcher bundle, .pyc
            _time(argv, project, case_env)
        times: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        stages: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotate: interleaved
            for name in order:
                argv, case_env = variants[name]
                wall, stderr = _time(argv, project, case_env)
                times[name].append(wall)
                cpu[name].append(_time.cpu * 1000)  # type: ignore[attr-defined]
                found = _stages(stderr, wall)
                if found is not None:
                    stages[name].append(found)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    report = _report(args, image, times, stages, load_before, load_after)
    for name, case in report["cases"].items():  # type: ignore[attr-defined]
        case["cpu_ms"] = round(statistics.median(cpu[name]), 1)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0


def _reference(name: str) -> str | None:
    if name.endswith("--help") or name.startswith("docker run"):
        return None
    return "docker run" if name.endswith("--no-shims") else "docker run +launcher"


def _report(
    args: argparse.Namespace,
    image: str,
    times: dict[str, list[float]],
    stages: dict[str, list[dict[str, float]]],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> dict[str, object]:
    cases = {}
    for name, samples in times.items():
        q1, med, q3 = _quartiles([s * 1000 for s in samples])
        case: dict[str, object] = {"median_ms": round(med, 1), "iqr_ms": [round(q1), round(q3)]}
        ref = _reference(name)
        if ref is not None:
            per_round = [a / b for a, b in zip(samples, times[ref], strict=True)]
            r1, rmed, r3 = _quartiles(per_round)
            case["ratio"] = round(med / (statistics.median(times[ref]) * 1000), 3)
            case["ratio_per_round"] = {
                "median": round(rmed, 3),
                "iqr": [round(r1, 3), round(r3, 3)],
            }
            case["against"] = ref
        if stages[name]:
            keys = list(stages[name][0])
            case["stages_ms"] = {
                k: round(statistics.median(s.get(k, 0.0) for s in stages[name]), 1) for k in keys
            }
        cases[name] = case
    return {
        "image": image,
        "profile": args.profile,
        "rounds": args.rounds,
        "cases": cases,
        "load_average": {"before": load_before, "after": load_after},
        "cpus": os.cpu_count(),
    }


def _print(report: dict[str, object]) -> None:
    cases = report["cases"]
    assert isinstance(cases, dict)
    loads = report["load_average"]
    assert isinstance(loads, dict)
    print(
        f"image {report['image']}, profile {report['profile']}, {report['rounds']} interleaved "
        f"rounds; load average {loads['before'][0]:.2f} before, {loads['after'][0]:.2f} after, "
        f"{report['cpus']} CPUs"
    )
    print(
        f"  {'case':34s} {'median':>7s} {'IQR':>11s} {'CPU':>6s}   ratio (per round: median, IQR)"
    )
    for name, case in cases.items():
        iqr = f"{case['iqr_ms'][0]}-{case['iqr_ms'][1]}"
        line = f"  {name:34s} {case['median_ms']:5.0f}ms {iqr:>11s} {case['cpu_ms']:4.0f}ms"
        if "ratio" in case:
            pr = case["ratio_per_round"]
            line += f"   {case['ratio']:.2f}x ({pr['median']:.2f}x, {pr['iqr'][0]:.2f}-{pr['iqr'][1]:.2f})"
        elif name.endswith("--help"):
            line += "   (target < 60 ms)"
        print(line)
    print("  stage medians (ROCMENV_TIMINGS=1), ms:")
    for name, case in cases.items():
        if "stages_ms" in case:
            parts = ", ".join(f"{k} {v:.0f}" for k, v in case["stages_ms"].items())
            print(f"    {name}: {parts}")
    print(
        "  ratio: rocmenv / docker run (shims against docker run +launcher); target <= 1.10x; "
        "CPU: the command's own user + system time (the daemon's not counted)"
    )


def _launcher_args(
    rocmenv: list[str], image: str, work: Path, env: dict[str, str], profile: str
) -> list[str]:
    """The launcher mount and PYTHONPATH rocmenv adds (read from a kept container)."""
    done = subprocess.run(
        [*rocmenv, "run", "--engine", "docker-api", "--profile", profile, "--image", image, "--keep", "--", "true"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    cid = done.stderr.split("kept container ", 1)[1].split()[0]
    doc = json.loads(
        subprocess.run(
            ["docker", "inspect", cid], capture_output=True, text=True, check=True
        ).stdout
    )[0]
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
    out = []
    for m in doc["HostConfig"].get("Mounts") or []:
        if m["Target"] == "/opt/rocmenv/launcher":
            out.append(f"--mount=type=bind,source={m['Source']},target={m['Target']},readonly")
    for target, options in (doc["HostConfig"].get("Tmpfs") or {}).items():
        out.append(f"--tmpfs={target}:{options}")
    for e in doc["Config"]["Env"]:
        if e.startswith("PYTHONPATH="):
            out.append(f"--env={e}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
