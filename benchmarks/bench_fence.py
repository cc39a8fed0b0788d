"""The job log's fence (issue 31): a child's output straight to the job log's pipe, against the
same output through :meth:`rocmenv.joblog.JobLog.child_output` (one pipe, the pump thread,
the lock, ``stop-commands`` around it).

    .venv/bin/python benchmarks/bench_fence.py [--rounds 9] [--mib 200]

A child (``head -c`` of ``yes`` lines, a chatty test's log) writes ``--mib`` MiB; a reader
thread drains the "runner's" pipe. Interleaved rounds; printed: median wall time and CPU
time (this process's user + system, where the pump runs) per case, the ratio of medians and
the median of the per-round ratios, the load average before and after.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rocmenv.joblog import JobLog


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def one(mib: int, fenced: bool) -> tuple[float, float, int]:
    read_fd, write_fd = os.pipe()
    got = [0]

    def drain() -> None:
        while data := os.read(read_fd, 1 << 16):
            got[0] += len(data)
        os.close(read_fd)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stream = open(write_fd, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    argv = ["sh", "-c", f"yes 'a line of a test log, 0123456789abcdef' | head -c {mib << 20}"]
    t0, c0 = time.perf_counter(), _cpu()
    if fenced:
        with JobLog(stream).child_output(io.StringIO(), fence=True) as out:
            subprocess.run(argv, stdout=out.stdout_fd, stderr=out.stderr_fd, check=True)
    else:
        subprocess.run(argv, stdout=write_fd, stderr=write_fd, check=True)
    stream.close()
    reader.join()
    return time.perf_counter() - t0, _cpu() - c0, got[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--mib", type=int, default=200)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results: dict[str, list[tuple[float, float]]] = {"direct": [], "fenced": []}
    for r in range(args.rounds):
        for case in ("direct", "fenced") if r % 2 else ("fenced", "direct"):
            wall, cpu, size = one(args.mib, case == "fenced")
            assert size >= args.mib << 20
            results[case].append((wall, cpu))
    print(f"{args.mib} MiB per run, {args.rounds} interleaved rounds; load {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} CPUs")  # fmt: skip
    for case, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {case:<8} wall {wall * 1000:7.0f} ms ({args.mib / wall:6.0f} MiB/s)  "
              f"cpu (this process) {cpu * 1000:6.0f} ms")  # fmt: skip
    per_round = [f[0] / d[0] for f, d in zip(results["fenced"], results["direct"], strict=True)]
    ratio = statistics.median(w for w, _ in results["fenced"]) / statistics.median(
        w for w, _ in results["direct"]
    )
    print(
        f"  fenced / direct: {ratio:.2f}x (per round: median {statistics.median(per_round):.2f}x)"
    )


if __name__ == "__main__":
    main()
