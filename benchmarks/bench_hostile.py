"""Hostile-input parsers: the PR-body parser, new (one linear scan) vs the regular expression
it replaced (adjacent ``\\s*`` runs that backtrack quadratically), on lines of N spaces and of
N bullet characters; and ``redact()`` (run on every message) on N characters of "a.a.a…" and
of "authorization:" + spaces, new vs its old URL and Authorization patterns (the engine
socket reader is covered by tests/unit/engine/test_wire.py).

Usage: .venv/bin/python benchmarks/bench_hostile.py [--sizes 5000,20000,50000]
Target: the new parser linear (10x the input, ~10x the time) and under 10 ms at 50,000
characters; the old one is shown for the record (quadratic: 17 s at 50,000 spaces).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine_note, table
from rocmenv.bootstrap.refs import parse_pr_body

OLD = re.compile(
    r"""^\s*(?:(?:[-*+]|\d+[.)]|>)\s*)*
        [`'"]*\s*ci-(sglang|megatron)-pr\s*[`'"]*\s*:\s*(.*)$""",
    re.IGNORECASE | re.VERBOSE,
)


def timed(fn: object, arg: str) -> float:
    start = time.perf_counter()
    fn(arg)  # type: ignore[operator]
    return time.perf_counter() - start


def _old(pattern: re.Pattern[str], text: str, size: int, args: argparse.Namespace) -> str:
    if size > args.old_limit:
        return "-"
    start = time.perf_counter()
    pattern.sub("x", text)
    return f"{(time.perf_counter() - start) * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,10000,20000,50000")
    parser.add_argument("--old-limit", type=int, default=20000, help="skip the old regex above")
    args = parser.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for shape, line in (("spaces", " " * size), ("'- ' bullets", "- " * (size // 2))):
            new = min(timed(parse_pr_body, line) for _ in range(3))
            old = timed(OLD.match, line) if size <= args.old_limit else float("nan")
            rows.append(
                [f"{size:,}", shape, f"{new * 1000:.2f} ms",
                 "-" if old != old else f"{old * 1000:.0f} ms"]
            )  # fmt: skip
    from rocmenv.redact import redact

    old_url = re.compile(r"(?i)([a-z][a-z0-9+.-]*://)[^/@\s:]+:[^/@\s]+@")
    old_auth = re.compile(r"(?i)(authorization\s*[:=]\s*)(bearer|basic)?\s*[^\s,;'\"]+")
    for size in (int(s) for s in args.sizes.split(",")):
        for shape, text, old_re in (
            ("redact 'a.a.a…'", "a." * (size // 2), old_url),
            ("redact 'authorization:   …'", "authorization:" + " " * size, old_auth),
        ):
            new = min(timed(redact, text) for _ in range(3))
            rows.append(
                [f"{size:,}", shape, f"{new * 1000:.2f} ms", _old(old_re, text, size, args)]
            )
    print(table(rows, ["chars", "input", "new", "old"]))
    print(machine_note())


if __name__ == "__main__":
    main()
