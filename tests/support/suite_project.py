"""Helpers for the ``rocmenv suite`` integration tests: a suite whose tests record, from
inside their containers, the GPU device nodes they see and their start/end times, and the
checks every schedule must pass."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from tests.support.run_project import Project

# runs inside the container (the checkout is mounted at the same path)
RECORDER = """\
import json, os, sys, time
name, seconds, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
start = time.time()
dri = os.listdir("/dev/dri") if os.path.isdir("/dev/dri") else []  # none: a test without GPUs
nodes = sorted(n for n in dri if n.startswith("renderD"))
time.sleep(seconds)
out = {"name": name, "start": start, "end": time.time(), "render": nodes,
       "hip": os.environ.get("HIP_VISIBLE_DEVICES")}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", name + ".json"), "w") as fh:
    json.dump(out, fh)
print("recorded", name, nodes)
sys.exit(code)
"""


@dataclass(frozen=True, kw_only=True)
class Spec:
    name: str
    gpus: int
    est: float
    sleep: float
    code: int = 0


def write_suite(project: Project, suite: str, specs: Sequence[Spec], *, extra: str = "") -> Path:
    """Add ``[suites.SUITE]`` (profile ``suite-test``: gpu-test with the test image) and the
    recorder; returns the directory the records land in."""
    tests = project.root / "suite_tests"
    (tests / "out").mkdir(parents=True, exist_ok=True)
    (tests / "record.py").write_text(RECORDER)
    rows = ",\n".join(
        f'  {{ path = "suite_tests/{s.name}.py", name = "{s.name}", gpus = {s.gpus}, '
        f'est-time = {s.est}, cmd = ["python3", "{tests}/record.py", "{s.name}", "{s.sleep}", "{s.code}"] }}'
        for s in specs
    )
    config = project.root / "rocmenv.toml"
    text = config.read_text()
    if "[profiles.suite-test]" not in text:
        text += f'\n[profiles.suite-test]\nextends = "gpu-test"\nimage = "{project.image}"\n'
        text += 'gpu-env = ["HIP_VISIBLE_DEVICES"]\n'
    text += f'\n[suites.{suite}]\nprofile = "suite-test"\n{extra}tests = [\n{rows}\n]\n'
    config.write_text(text)
    return tests / "out"


def records(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def check_schedule(
    recs: Mapping[str, Mapping[str, Any]],
    specs: Sequence[Spec],
    report: Mapping[str, Any],
    render_of: Mapping[int, str],
    pool_size: int,
) -> None:
    """Every test saw exactly its GPUs; overlapping tests never shared one; the pool was
    never over-committed."""
    by_spec = {s.name: s for s in specs}
    tests = {str(t["name"]): t for t in report["tests"]}
    for name, rec in recs.items():
        seen = list(rec["render"])
        assigned = tests[name]["assigned"]
        assert len(seen) == by_spec[name].gpus, (name, seen)
        assert sorted(seen) == sorted(render_of[i] for i in assigned), (name, seen, assigned)
    for a, b in combinations(recs.values(), 2):
        if float(a["start"]) < float(b["end"]) and float(b["start"]) < float(a["end"]):
            assert not set(a["render"]) & set(b["render"]), (a, b)
    for rec in recs.values():
        t = float(rec["start"])
        busy = sum(
            len(o["render"]) for o in recs.values() if float(o["start"]) <= t < float(o["end"])
        )
        assert busy <= pool_size
