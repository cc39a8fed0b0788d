"""python-on-whales on the docker-cli/podman adapter: what it cost against what it did.

It served two calls, ``container.logs`` and ``container.list`` (the rest of the adapter runs
the CLI itself). Measured side by side, interleaved, medians:

* its import (``python -c "import python_on_whales"``, with pydantic) against ``python -c
  pass`` — what any command paid the first time it touched either call;
* each of the two calls through python-on-whales against the same CLI command run directly
  (``docker|podman ps -a -q --no-trunc --filter label=…``, ``docker|podman logs ID``), the
  way the adapter now runs them.

    .venv/bin/python benchmarks/bench_engine_cli.py [--rounds 15] [--engine docker|podman]

Without python-on-whales installed (it is no longer a dependency) only the direct column is
printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._common import interleaved, median_ms, table

LABEL = "org.rocmenv.bench=engine-cli"


def _timed(fn: Callable[[], object], rounds: int) -> list[float]:
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--engine", choices=("docker", "podman"), default="docker")
    ap.add_argument("--image", default="127.0.0.1:5000/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215")
    args = ap.parse_args()
    binary = args.engine
    rows = []
    startup = interleaved({"pass": [sys.executable, "-c", "pass"],
                           "whales": [sys.executable, "-c", "import python_on_whales"]}, args.rounds)  # fmt: skip
    base, whales_import = median_ms(startup["pass"]), median_ms(startup["whales"])
    rows.append(
        ("import", f"{whales_import - base:.0f} ms (+{base:.0f} ms interpreter)", "0 ms", "")
    )
    cid = subprocess.run([binary, "run", "-d", "--label", LABEL, args.image, "sh", "-c",
                          "seq 1 2000; seq 1 500 >&2"], capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    subprocess.run([binary, "wait", cid], capture_output=True, check=True)
    try:

        def direct_list() -> object:
            return subprocess.run([binary, "ps", "-a", "-q", "--no-trunc", "--filter", f"label={LABEL}"],
                                  capture_output=True, check=True).stdout  # fmt: skip

        def direct_logs() -> object:
            return subprocess.run([binary, "logs", cid], capture_output=True, check=True)

        cases: dict[str, tuple[Callable[[], object], Callable[[], object] | None]] = {
            "list": (direct_list, None), "logs": (direct_logs, None),
        }  # fmt: skip
        try:
            from python_on_whales import DockerClient

            client = DockerClient(client_call=[binary])
            cases["list"] = (
                direct_list,
                lambda: client.container.list(all=True, filters=[("label", LABEL)]),
            )
            cases["logs"] = (direct_logs, lambda: list(client.container.logs(cid, stream=True)))
        except ImportError:
            pass
        for name, (direct, via_whales) in cases.items():
            d = statistics.median(_timed(direct, args.rounds)) * 1000
            w = statistics.median(_timed(via_whales, args.rounds)) * 1000 if via_whales else None
            rows.append(
                (name, f"{w:.1f} ms" if w else "-", f"{d:.1f} ms", f"{w / d:.2f}×" if w else "")
            )
    finally:
        subprocess.run([binary, "rm", "-f", cid], capture_output=True, check=False)
    print(f"engine: {binary}, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    print(table(rows, ("call", "python-on-whales", "CLI directly", "ratio")))


if __name__ == "__main__":
    main()
