"""The sweep after an untrusted run (``rocmenv/run/planted.py``) on a generated checkout.

Every untrusted container's run ends with a walk of the checkout (one ``lstat`` per entry,
directories opened without following links). Side by side, interleaved, median wall time:

* ``import``: the Python process and ``import rocmenv.run.planted`` alone (the floor of the
  ``sweep`` row, which pays it too);
* ``sweep``: that process sweeping the checkout (nothing to change: the common case; the
  default policy drops SETFCAP, so no file capability is looked for);
* ``sweep+caps``: the same, also reading each executable's ``security.capability`` (a
  policy that allows SETFCAP);
* ``find``: ``find ROOT ( -perm -4000 -o -perm -2000 -o -type b -o -type c )`` — the same
  question asked by the tool one would reach for (it only finds; it does not change);
* ``container``: ``docker run --rm IMAGE true``, what every test pays anyway.

    .venv/bin/python benchmarks/bench_sweep.py [--rounds 7] [--files 50000] [--no-container]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, interleaved, machine_note, median_ms, table

FIND_QUESTION = ["(", "-perm", "-4000", "-o", "-perm", "-2000", "-o", "-type", "b", "-o",
                 "-type", "c", ")"]  # fmt: skip


def make_checkout(root: Path, files: int) -> None:
    """``files`` small files in directories of 100, one in ten executable, four levels deep."""
    for i in range(files):
        sub = (
            root
            / f"a{i // 100000}"
            / f"b{i // 10000 % 10}"
            / f"c{i // 1000 % 10}"
            / f"d{i // 100 % 10}"
        )
        if i % 100 == 0:
            sub.mkdir(parents=True, exist_ok=True)
        path = sub / f"f{i}.py"
        path.write_bytes(b"x = 1\n")
        if i % 10 == 0:
            os.chmod(path, 0o755)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--no-container", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmenv-bench-sweep-") as scratch:
        co = Path(scratch) / "checkout"
        make_checkout(co, args.files)
        python = [sys.executable, "-c"]
        sweep = (
            "from rocmenv.run.planted import sweep; assert not sweep({!r}, file_caps={}).changed"
        )
        cases = {
            "import": [*python, "import rocmenv.run.planted"],
            "sweep": [*python, sweep.format(str(co), False)],
            "sweep+caps": [*python, sweep.format(str(co), True)],
            "find": ["find", str(co), *FIND_QUESTION],
        }
        if not args.no_container:
            sys.path.insert(0, str(ROOT))
            from tests.support.testenv import load_family

            image = load_family()["demo"].ref
            cases["container"] = ["docker", "run", "--rm", "--network=none", image, "true"]
        samples = interleaved(cases, args.rounds, cwd=ROOT)
        base = median_ms(samples["find"])
        rows = [
            [name, f"{median_ms(s):.0f}", f"{median_ms(s) / base:.2f}x"]
            for name, s in samples.items()
        ]
        print(f"checkout: {args.files} files, {args.files // 100} directories")
        print(table(rows, ["variant", "median ms", "vs find"]))
        walk = median_ms(samples["sweep"]) - median_ms(samples["import"])
        print(f"the walk itself: {walk:.0f} ms ({walk / args.files * 1000:.1f} us per file)")
        print(machine_note())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
