"""Registry benchmark: rocmenv vs skopeo on the same local registry, side by side.

    .venv/bin/python benchmarks/bench_registry.py [--runs N] [--registry HOST:PORT]

Measures (interleaved runs, median wall time; ratios < 1 mean rocmenv is faster):
- `rocmenv tags list REPO --json`     vs `skopeo list-tags docker://REPO` (the large tag set)
- `rocmenv resolve REPO:TAG --digest` vs `skopeo inspect --no-tags docker://REPO:TAG`
- HTTP round trips of each, counted by a proxy in front of the registry
- `rocmenv --help` start-up vs `python -c pass`
Targets (issue 2): no more round trips than skopeo; wall time within 1.5x of skopeo;
`rocmenv --help` under 150 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import interleaved, machine_note, median_ms, rocmenv_cmd, table, time_once
from tests.support.faultproxy import FaultProxy

SKOPEO = ["skopeo", "--override-os", "linux", "--override-arch", "amd64"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--registry", default="127.0.0.1:5000")
    parser.add_argument("--repo", default="rocm/sgl-dev")
    parser.add_argument("--tag", default="v0.5.8-rocm700-mi30x-20260215")
    args = parser.parse_args()

    repo = f"{args.registry}/{args.repo}"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    cwd = Path("/")  # no rocmenv.toml on the way up
    rocmenv = rocmenv_cmd()

    def cases(r: str) -> dict[str, list[str]]:
        return {
            "rocmenv tags list": [*rocmenv, "tags", "list", r, "--json"],
            "skopeo list-tags": [*SKOPEO, "list-tags", "--tls-verify=false", f"docker://{r}"],
            "rocmenv resolve --digest": [*rocmenv, "resolve", f"{r}:{args.tag}", "--digest"],
            "skopeo inspect --no-tags": [
                *SKOPEO,
                "inspect",
                "--tls-verify=false",
                "--no-tags",
                f"docker://{r}:{args.tag}",
            ],
            "rocmenv --help": [*rocmenv, "--help"],
            "python -c pass": [sys.executable, "-c", "pass"],
        }

    samples = interleaved(cases(repo), args.runs, env, cwd)
    trips: dict[str, int] = {}
    with FaultProxy(upstream=args.registry) as proxy:
        for name, argv in cases(f"{proxy.host}/{args.repo}").items():
            if name.startswith(("rocmenv tags", "skopeo", "rocmenv resolve")):
                proxy.reset_log()
                time_once(argv, env, cwd)
                trips[name] = proxy.count()

    med = {name: median_ms(s) for name, s in samples.items()}
    pairs = [
        ("tag listing", "rocmenv tags list", "skopeo list-tags"),
        ("digest lookup", "rocmenv resolve --digest", "skopeo inspect --no-tags"),
        ("start-up", "rocmenv --help", "python -c pass"),
    ]
    rows = []
    for label, ours, base in pairs:
        rows.append(
            [
                label,
                f"{med[ours]:.1f}",
                f"{med[base]:.1f} ({base})",
                f"{med[ours] / med[base]:.2f}x",
                f"{trips.get(ours, '-')} vs {trips.get(base, '-')}",
            ]
        )
    print(f"registry benchmark: {repo}, {args.runs} interleaved runs each, median wall time")
    print(machine_note())
    print(table(rows, ["what", "rocmenv ms", "baseline ms", "ratio", "round trips"]))
    ok_trips = (
        trips["rocmenv tags list"] <= trips["skopeo list-tags"]
        and trips["rocmenv resolve --digest"] <= trips["skopeo inspect --no-tags"]
    )
    print(
        f"targets: round trips <= skopeo: {'met' if ok_trips else 'MISSED'}; "
        f"wall <= 1.5x skopeo: tags {med['rocmenv tags list'] / med['skopeo list-tags']:.2f}x, "
        f"digest {med['rocmenv resolve --digest'] / med['skopeo inspect --no-tags']:.2f}x; "
        f"--help {med['rocmenv --help']:.0f} ms (< 150 ms: {'met' if med['rocmenv --help'] < 150 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
