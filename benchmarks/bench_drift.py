"""Drift benchmark: `rocmenv drift` over N pinned images vs a sequential `skopeo inspect` loop.

    .venv/bin/python benchmarks/bench_drift.py [--images 20] [--runs 7] [--latency-ms 30]

Setup: N scratch repositories in the local registry, each holding the demo image under a
nightly tag, pinned into a temporary rocmenv.lock (one `rocmenv pin` of N references).
Two scenarios: the registry on loopback as is, and behind a proxy that delays every request
by --latency-ms (a remote registry's round trip; 0 skips it). Both tools go through it.

Measures (interleaved runs, median wall time; ratio < 1 means rocmenv is faster):
- `rocmenv drift --json`            (concurrent, default --jobs 8: a HEAD of every tag, plus
                                    the tag list of every repository for "newer")
- `rocmenv drift --json --jobs 1`   (the same work, one image at a time)
- `skopeo inspect --no-tags` loop   (one process per image, sequential: what a shell script does)
Target (issue 5): rocmenv drift ≤ 0.5x the skopeo loop.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import interleaved, machine_note, median_ms, rocmenv_cmd, table
from tests.support import testenv
from tests.support.faultproxy import FaultProxy, Match, delay

SKOPEO = ["skopeo", "--override-os", "linux", "--override-arch", "amd64"]
TAG = "v0.5.8-rocm700-mi30x-20260215"


def make_repos(registry: str, count: int) -> list[str]:
    """N scratch repositories holding the demo image under :data:`TAG`."""
    source = testenv.load_family()["demo"].ref
    repos = []
    for i in range(count):
        repo = testenv.unique_repo(f"bench-drift-{i:02d}")
        testenv.push_manifest_copy(source, repo, TAG, registry=registry)
        repos.append(repo)
    return repos


def scenario(host: str, repos: list[str], runs: int, env: dict[str, str]) -> dict[str, list[float]]:
    """Pin ``host/<repo>:TAG`` for every repo into a fresh lock, then time the cases."""
    refs = [f"{host}/{repo}:{TAG}" for repo in repos]
    rocmenv = rocmenv_cmd()
    with tempfile.TemporaryDirectory(prefix="rocmenv-bench-drift-") as tmp:
        project = Path(tmp)
        (project / ".git").mkdir()  # the config search stops here
        subprocess.run(
            [*rocmenv, "pin", *refs], cwd=project, env=env, check=True, capture_output=True
        )
        loop = "; ".join(
            shlex.join([*SKOPEO, "inspect", "--tls-verify=false", "--no-tags", f"docker://{r}"])
            + " >/dev/null || exit 1"
            for r in refs
        )
        cases = {
            "rocmenv drift": [*rocmenv, "drift", "--json"],
            "rocmenv drift --jobs 1": [*rocmenv, "drift", "--json", "--jobs", "1"],
            "skopeo inspect loop": ["sh", "-c", loop],
        }
        check = subprocess.run(
            cases["rocmenv drift"], cwd=project, env=env, capture_output=True, text=True
        )
        report = json.loads(check.stdout or "{}")
        if check.returncode != 0 or report["summary"]["images"] != len(refs):
            raise SystemExit(f"drift did not run cleanly ({check.returncode}): {check.stderr}")
        print(
            f"  rocmenv drift: {report['stats']['round_trips']} round trips (a HEAD and a tag list per image)"
        )
        return interleaved(cases, runs, env, project)


def show(samples: dict[str, list[float]]) -> float:
    medians = {name: median_ms(s) for name, s in samples.items()}
    base = medians["skopeo inspect loop"]
    rows = [
        [name, f"{ms:.0f}", f"{ms / base:.2f}x", f"{min(samples[name]) * 1000:.0f}"]
        for name, ms in medians.items()
    ]
    print(table(rows, ["case", "median ms", "vs skopeo loop", "min ms"]))
    ratio = medians["rocmenv drift"] / base
    verdict = "meets" if ratio <= 0.5 else "MISSES"
    print(f"ratio rocmenv drift / skopeo loop = {ratio:.2f} ({verdict} the <= 0.5x target)\n")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--registry", default=testenv.OPEN_REGISTRY)
    args = parser.parse_args()

    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "ROCMENV_REGISTRY_BACKOFF": "0.05",
    }
    repos = make_repos(args.registry, args.images)
    print(f"{args.images} pinned images, {args.runs} interleaved runs (+1 warm-up each)\n")
    print(f"registry on loopback ({args.registry}):")
    ratios = [show(scenario(args.registry, repos, args.runs, env))]
    if args.latency_ms > 0:
        with FaultProxy(upstream=args.registry) as proxy:
            proxy.add_rule(Match(), delay(args.latency_ms / 1000), times=None)
            print(f"registry {args.latency_ms:g} ms away (delaying proxy {proxy.host}):")
            ratios.append(show(scenario(proxy.host, repos, args.runs, env)))
    print(machine_note())
    return 0 if all(r <= 0.5 for r in ratios) else 1


if __name__ == "__main__":
    sys.exit(main())
