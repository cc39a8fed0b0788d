"""``@record`` vs ``@dataclass(frozen=True, kw_only=True)``: what making the run path's classes
costs (``rocmenv.record``'s docstring quotes this benchmark).

    .venv/bin/python benchmarks/bench_record.py [--rounds 15] [--classes 48] [--fields 6]

Each round starts fresh interpreters, side by side and interleaved: one imports
``dataclasses`` and decorates N classes of F fields (a default, a ``default_factory``, a
``compare=False`` field among them), one does the same with ``rocmenv.record``, one does
nothing (``python -c pass`` + the same class bodies: the floor). Printed: the median and
interquartile range of the time each spends in the import and in making the classes
(measured inside the process after ``typing``, ``re`` and the ``rocmenv`` package, which
every command loads, so neither interpreter start-up nor those are counted), and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PROGRAM = """
import sys, time, typing, collections.abc, re, rocmenv  # loaded by every command anyway
t0 = time.perf_counter()
KIND = sys.argv[1]
if KIND == "dataclasses":
    from dataclasses import dataclass, field
    decorate = dataclass(frozen=True, kw_only=True)
elif KIND == "record":
    from rocmenv.record import field, record as decorate
else:
    decorate = lambda cls: cls
    field = lambda **kw: kw.get("default")
t1 = time.perf_counter()
for i in range({classes}):
    ns = {{"__annotations__": {{f"f{{j}}": "str" for j in range({fields})}}, "__module__": "__main__"}}
    ns["f1"] = ""
    ns["f2"] = field(default_factory=list) if KIND != "none" else None
    ns["f3"] = field(default="", compare=False)
    decorate(type(f"C{{i}}", (), ns))
t2 = time.perf_counter()
print((t1 - t0) * 1000, (t2 - t1) * 1000)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--classes", type=int, default=48)
    parser.add_argument("--fields", type=int, default=6)
    args = parser.parse_args()
    program = _PROGRAM.format(classes=args.classes, fields=args.fields)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    kinds = ("dataclasses", "record", "none")
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    load_before = os.getloadavg()[0]
    for r in range(args.rounds + 1):
        for kind in kinds[r % 3 :] + kinds[: r % 3]:
            out = subprocess.run([sys.executable, "-c", program, kind], env=env, cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
            if r:  # round 0 warms the caches and writes the bytecode
                imported, made = (float(x) for x in out.split())
                samples[kind].append((imported, made))
    print(f"{args.classes} classes of {args.fields} fields, {args.rounds} interleaved rounds, "
          f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")  # fmt: skip
    for kind in kinds:
        for i, what in enumerate(("import", "classes")):
            values = [s[i] for s in samples[kind]]
            q1, q2, q3 = statistics.quantiles(values, n=4)
            print(f"  {kind:12s} {what:8s} {q2:6.1f} ms (IQR {q1:.1f}-{q3:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
