"""Shared helpers for the side-by-side benchmarks: interleaved runs, medians, a table."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"


def rocmenv_cmd() -> list[str]:
    script = VENV_BIN / "rocmenv"
    if script.exists():
        return [str(script)]
    found = shutil.which("rocmenv")
    return [found] if found else [sys.executable, "-m", "rocmenv"]


def time_once(
    argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"benchmark command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr.decode()[-2000:]}"
        )
    return elapsed


def interleaved(
    cases: dict[str, Sequence[str]],
    runs: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, list[float]]:
    """Run every case ``runs`` times, alternating, after one warm-up each."""
    for argv in cases.values():
        time_once(argv, env, cwd)
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            out[name].append(time_once(argv, env, cwd))
    return out


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def machine_note() -> str:
    load = os.getloadavg()[0]
    return f"machine: {os.cpu_count()} cores, load average {load:.2f} (numbers are noisy above ~1)"
