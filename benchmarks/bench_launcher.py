"""Interpreter start-up with the shim launcher vs without, inside one container.

Every Python process in a container pays for the launcher's ``sitecustomize``. This measures
``python3 -c pass`` (and ``python3 -I -c pass`` as a floor) inside ONE container, so docker's
own overhead does not count, interleaving the cases run by run:

* ``without``       no PYTHONPATH (the image's Debian sitecustomize still runs)
* ``empty dir``     an empty directory first on PYTHONPATH (the cost of one more path entry)
* ``1 shim``        the real launcher bundle (the catalogue: aiter-shuffle-scale)
* ``50 shims``      a bundle with 49 more shims whose targets are never imported
* ``1 shim, tmpfs pyc``  the bundle with a tmpfs on its ``__pycache__`` (LauncherBundle.pycache_dir):
                    the first process writes sitecustomize's .pyc, the others load it

The bundles are mounted read-only with PYTHONDONTWRITEBYTECODE=1, as ``rocmenv run`` mounts
them (no .pyc next to the sources: sitecustomize.py is compiled at every start).

Usage: .venv/bin/python benchmarks/bench_launcher.py [--image REF] [--runs 200]
Target: overhead (1 shim - without) < 3 ms, and no growth from 1 to 50 shims.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rocmenv.context import Context  # noqa: E402
from rocmenv.shims.bundle import prepare_launcher  # noqa: E402
from rocmenv.shims.catalogue import discover_shims, parse_shim_file  # noqa: E402

DEFAULT_IMAGE = "127.0.0.1:5000/rocmenv-test/aiter-old:py311"

RUNNER = r"""
import json, os, statistics, subprocess, sys, time

runs = int(sys.argv[1])
cases = json.loads(sys.argv[2])
base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}

def once(env, argv):
    t = time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    return time.perf_counter() - t

envs = {}
for name, (pythonpath, argv, write_pyc) in cases.items():
    env = dict(base)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if not write_pyc:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    envs[name] = (env, argv)
    once(env, argv)  # warm-up (page cache)
samples = {name: [] for name in cases}
for _ in range(runs):
    for name, (env, argv) in envs.items():
        samples[name].append(once(env, argv))
# where the time goes: sitecustomize's own import time (-X importtime), median of 30
import_us = {}
for name, (env, argv) in envs.items():
    if "-I" in argv:
        continue
    values = []
    for _ in range(30):
        err = subprocess.run(argv[:1] + ["-X", "importtime"] + argv[1:], env=env,
                             stderr=subprocess.PIPE, text=True).stderr
        for line in err.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[2].strip() == "sitecustomize":
                values.append(int(parts[1]))
    import_us[name] = statistics.median(values) if values else None
print(json.dumps({"samples": samples, "sitecustomize_us": import_us,
                  "python": sys.version.split()[0]}))
"""

DUMMY_BODY = """
def probe(module):
    return False


def static_probe(find_source):
    return False, "dummy"


def apply(module):
    pass
"""


def dummy_catalogue(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (directory / f"dummy_{i:02d}.py").write_text(
            f'"""Dummy shim {i} for the start-up benchmark.\n\nRetire: never."""\n\n'
            f"NAME = 'dummy-{i:02d}'\n"
            f"TARGET = 'rocmenv_bench_never_imported_{i:02d}.sub'\n"
            "DISTRIBUTIONS = ('rocmenv-bench-dummy',)\n"
            "SPECIFIER = '>=0'\n" + DUMMY_BODY
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--python", default="python3")
    parser.add_argument("--json", action="store_true", help="print the raw result as JSON too")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rocmenv-bench-launcher-") as tmp:
        work = Path(tmp)
        ctx = Context(env={})
        one = prepare_launcher(ctx, cache_dir=work / "cache")
        dummy_catalogue(work / "dummies", 49)
        dummies = [parse_shim_file(p) for p in sorted((work / "dummies").glob("*.py"))]
        fifty = prepare_launcher(
            ctx, cache_dir=work / "cache", shims=(*discover_shims(entry_points=False), *dummies)
        )
        assert len(fifty.shims) == 50, len(fifty.shims)
        (work / "empty").mkdir()
        (work / "runner.py").write_text(textwrap.dedent(RUNNER))
        py = args.python
        cases = {
            "without": ["", [py, "-c", "pass"], False],
            "empty dir": ["/bench/empty", [py, "-c", "pass"], False],
            "1 shim": ["/launcher1", [py, "-c", "pass"], False],
            "50 shims": ["/launcher50", [py, "-c", "pass"], False],
            "1 shim, tmpfs pyc": ["/launcher1p", [py, "-c", "pass"], True],
            "isolated (-I)": ["", [py, "-I", "-c", "pass"], False],
        }
        cmd = [
            "docker", "run", "--rm", "--network", "none",
            "-v", f"{work}:/bench:ro",
            "-v", f"{one.host_dir}:/launcher1:ro",
            "-v", f"{fifty.host_dir}:/launcher50:ro",
            "-v", f"{one.host_dir}:/launcher1p:ro", "--tmpfs", "/launcher1p/__pycache__:rw,size=1m",
            args.image, py, "/bench/runner.py", str(args.runs), json.dumps(cases),
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return 1
        result = json.loads(proc.stdout)

    import statistics

    med = {k: statistics.median(v) * 1000 for k, v in result["samples"].items()}
    base = med["without"]
    print(
        f"python3 -c pass in {args.image} (Python {result['python']}), "
        f"median of {args.runs} interleaved runs, bundles mounted read-only, no .pyc written "
        "(but in the tmpfs case)"
    )
    low = {k: min(v) * 1000 for k, v in result["samples"].items()}
    header = ("case", "median ms", "vs without", "overhead ms", "min ms", "sitecustomize import")
    rows = []
    for name, ms in med.items():
        us = result["sitecustomize_us"].get(name)
        rows.append(
            (
                name,
                f"{ms:.2f}",
                f"{ms / base:.3f}x",
                f"{ms - base:+.2f}",
                f"{low[name]:.2f}",
                "-" if us is None else f"{us / 1000:.2f} ms",
            )
        )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    overhead = med["1 shim"] - base
    growth = med["50 shims"] - med["1 shim"]
    print(
        f"\nlauncher overhead: {overhead:+.2f} ms (target < 3 ms); "
        f"1 -> 50 shims: {growth:+.2f} ms (target: no growth)"
    )
    if args.json:
        print(
            json.dumps(
                {"median_ms": med, "min_ms": low, "sitecustomize_us": result["sitecustomize_us"]}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
