"""``rocmenv run`` vs the equivalent plain ``docker run --rm`` on a no-op command.

Both adapters (docker-api, docker-cli), interleaved so that machine load hits every
variant alike, median wall time over N rounds, printed as ratios to ``docker run``
(target ≤ 1.10×); plus ``rocmenv --help`` start-up (target < 150 ms).

The equivalent ``docker run`` uses the arguments ``rocmenv options --format docker``
renders for the same profile; "shims" variants add the launcher mount and PYTHONPATH that
``rocmenv run`` adds, so both sides create the same container.

    .venv/bin/python benchmarks/bench_run.py [--rounds 15] [--image REF] [--profile cpu] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rocmenv_bin() -> list[str]:
    exe = Path(sys.executable).parent / "rocmenv"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rocmenv"]


def _default_image() -> str:
    sys.path.insert(0, str(REPO))
    try:
        from tests.support.testenv import load_family

        return load_family()["demo"].ref
    except Exception:  # any image will do
        return "rocmenv-test/base:py311"


def _time(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(
            f"benchmark command failed ({done.returncode}): {' '.join(argv)}\n{done.stderr.decode()}"
        )
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--image", default=None)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    image = args.image or _default_image()
    rocmenv = _rocmenv_bin()
    work = Path(tempfile.mkdtemp(prefix="rocmenv-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
    env["ROCMENV_SHIMS_QUIET"] = "1"
    # Measure what an installed rocmenv does: with bytecode (the warm-up runs write it).
    # Without this a session with PYTHONDONTWRITEBYTECODE=1 compiles every module from
    # source on every run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        rendered = subprocess.run(
            [*rocmenv, "options", "--format", "docker", "--json", "--profile", args.profile],
            cwd=work, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        docker_args = json.loads(rendered.stdout)["args"]
        launcher = _launcher_args(rocmenv, image, work, env, args.profile)
        variants: dict[str, list[str]] = {
            "docker run": ["docker", "run", "--rm", *docker_args, image, "true"],
            "docker run +launcher": [
                "docker",
                "run",
                "--rm",
                *docker_args,
                *launcher,
                image,
                "true",
            ],
        }
        for engine in ("docker-api", "docker-cli"):
            base = [
                *rocmenv,
                "run",
                "--engine",
                engine,
                "--profile",
                args.profile,
                "--image",
                image,
            ]
            variants[f"rocmenv {engine} --no-shims"] = [*base, "--no-shims", "--", "true"]
            variants[f"rocmenv {engine}"] = [*base, "--", "true"]
        variants["rocmenv --help"] = [*rocmenv, "--help"]
        for argv in variants.values():  # warm caches (image layers, launcher bundle, .pyc)
            _time(argv, work, env)
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotate: interleaved
            for name in order:
                times[name].append(_time(variants[name], work, env))
        medians = {name: statistics.median(ts) for name, ts in times.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    plain, plain_l = medians["docker run"], medians["docker run +launcher"]
    rows = []
    for name, med in medians.items():
        if name == "rocmenv --help":
            continue
        ref = plain if "no-shims" in name or name == "docker run" else plain_l
        rows.append((name, med, med / ref))
    report = {
        "image": image,
        "profile": args.profile,
        "rounds": args.rounds,
        "median_seconds": medians,
        "ratios": {name: round(ratio, 3) for name, _, ratio in rows if name.startswith("rocmenv")},
        "help_ms": round(medians["rocmenv --help"] * 1000, 1),
        "load_average": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"image {image}, profile {args.profile}, {args.rounds} interleaved rounds, medians")
    for name, med, ratio in rows:
        print(f"  {name:32s} {med * 1000:7.0f} ms   {ratio:5.2f}x")
    print(
        f"  {'rocmenv --help':32s} {medians['rocmenv --help'] * 1000:7.0f} ms   (target < 150 ms)"
    )
    print(
        f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; ratios: rocmenv / docker run "
        "(shims variants against docker run +launcher); target <= 1.10x"
    )
    return 0


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
