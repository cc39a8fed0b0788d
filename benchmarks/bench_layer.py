"""Reading one large layer: rocmenv's layer index vs ``gzip -dc`` / ``zstd -dc`` of the same
blob, side by side (issue 22: decompression of a large layer at >= 50 MB/s on this machine).

    .venv/bin/python benchmarks/bench_layer.py [--mb 1024] [--rounds 3] [--baseline REV]… [--clean]

The layer: ``--mb`` MB of real files from this machine (``benchmarks/_layers.py``), gzip'd at
level 6 and zstd'd at level 3, made once and cached. Cases, interleaved ``--rounds`` times
(after one warm-up each, so the page cache holds the blobs for all of them):

- ``gzip -dc BLOB > /dev/null`` (and ``zstd -dc``): the baseline;
- rocmenv: :func:`rocmenv.contents.layer.index_layer` over the blob read in 1 MiB chunks, in
  a fresh process, timed around the call (decompress + walk the tar + keep the index);
- with ``--baseline REV`` (e.g. ``main``; repeatable): the same call of that revision,
  exported by ``git archive`` and run from ``PYTHONPATH``.

Throughput is uncompressed tar bytes per second; the ratio is rocmenv's time over the
baseline tool's. The target: rocmenv >= 50 MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine_note, table
from benchmarks._layers import clean, export_revision, real_layer

MEDIA = {
    "gzip": "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
}
#: run in a fresh interpreter: time index_layer over the blob, print seconds and what it kept
_WORKER = """
import json, sys, time
from rocmenv.contents.layer import index_layer
path, media = sys.argv[1], sys.argv[2]
def chunks():
    with open(path, "rb") as f:
        while data := f.read(1 << 20):
            yield data
start = time.perf_counter()
index = index_layer("sha256:" + "0" * 64, media, chunks(), ["aiter.ops.shuffle"])
print(json.dumps({"seconds": time.perf_counter() - start, "files": len(index["files"])}))
"""


def tool_seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def rocmenv_seconds(blob: Path, media: str, pythonpath: Path | None) -> float:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    with tempfile.TemporaryDirectory() as cwd:  # not the checkout: PYTHONPATH decides
        done = subprocess.run(
            [sys.executable, "-c", _WORKER, str(blob), media],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            check=True,
        )
    return float(json.loads(done.stdout)["seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="uncompressed layer size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--baseline", metavar="REV", action="append", default=[], help="also time this git revision"
    )
    parser.add_argument("--clean", action="store_true", help="remove the cached layers after")
    args = parser.parse_args()
    print(f"making (or reusing) a {args.mb} MB layer of real files …", flush=True)
    layer = real_layer(args.mb)
    size = layer.size
    print(
        f"layer: {size / 1e6:.0f} MB tar, gzip {layer.gzip.stat().st_size / 1e6:.0f} MB, "
        f"zstd {layer.zstd.stat().st_size / 1e6:.0f} MB; {machine_note()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        bases = {
            rev: export_revision(rev, Path(tmp) / f"base-{i}")
            for i, rev in enumerate(args.baseline)
        }
        cases: dict[str, Callable[[], float]] = {}
        for kind, blob in (("gzip", layer.gzip), ("zstd", layer.zstd)):
            cases[f"{kind} -dc"] = lambda b=blob, k=kind: tool_seconds([k, "-dc", str(b)])
            cases[f"rocmenv {kind}"] = lambda b=blob, k=kind: rocmenv_seconds(b, MEDIA[k], None)
            for rev, base in bases.items():
                cases[f"{rev} {kind}"] = lambda b=blob, k=kind, p=base: rocmenv_seconds(
                    b, MEDIA[k], p
                )
        times: dict[str, list[float]] = {name: [] for name in cases}
        for warm_up in cases.values():  # the page cache, imports
            warm_up()
        loads = []
        for _ in range(args.rounds):
            for name, run in cases.items():
                times[name].append(run())
                print(f"  {name}: {times[name][-1]:.2f} s", flush=True)
            loads.append(os.getloadavg()[0])
    if args.clean:
        clean()
    rows = []
    for name, samples in times.items():
        median = sorted(samples)[len(samples) // 2]
        tool = f"{'zstd' if 'zstd' in name else 'gzip'} -dc"
        ratio = median / sorted(times[tool])[len(times[tool]) // 2]
        rows.append(
            [
                name,
                f"{median:.2f} s",
                f"{size / median / 1e6:.0f} MB/s",
                "" if name == tool else f"{ratio:.2f}x",
                " ".join(f"{s:.2f}" for s in samples),
            ]
        )
    print()
    print(table(rows, ["case", "median", "throughput", "vs the tool", "samples"]))
    print(f"load average during the rounds: {min(loads):.1f}–{max(loads):.1f}")
    print(machine_note())
    return 0


if __name__ == "__main__":
    sys.exit(main())
