"""Hostile-input parsers: the PR-body parser, new (one linear scan) vs the regular expression
it replaced (adjacent ``\\s*`` runs that backtrack quadratically), on lines of N spaces and of
N bullet characters; and ``redact()`` (run on every message) on N characters of "a.a.a…" and
of "authorization:" + spaces, new vs its old URL and Authorization patterns (the engine
socket reader is covered by tests/unit/engine/test_wire.py); and ``redact()`` with 40
secret values registered (what ``masking`` holds for ~10 secret environment variables) on N
characters of pip output with one of them in it, and with a registered "abab" on N
characters of "abab…" (every occurrence overlaps the next: the worst case of the merged
spans), new (one ``str.find`` pass per value, spans merged) vs the old ``str.replace`` per
value (linear too, but a secret overlapping another kept its tail).

Usage: .venv/bin/python benchmarks/bench_hostile.py [--sizes 5000,20000,50000]
Target: the new parser linear (10x the input, ~10x the time) and under 10 ms at 50,000
characters; the old one is shown for the record (quadratic: 17 s at 50,000 spaces);
redact() linear in every row.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from functools import partial
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


def _old_replace(values: list[str]) -> object:
    def old(text: str) -> str:
        for value in sorted(values, key=len, reverse=True):
            text = text.replace(value, "***")
        return text

    return old


def _registered_rows(args: argparse.Namespace, redact: object) -> list[list[str]]:
    import random
    import string

    from rocmenv.redact import _mask_values, masking

    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits
    values = ["".join(rng.choices(alphabet, k=rng.randint(20, 60))) for _ in range(40)]
    pip = "Collecting foo==1.2.3\n  Downloading https://files.example/foo-1.2.3.tar.gz (12 kB)\n"
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        text = (pip * (size // len(pip) + 1))[:size]
        text = text[: size // 2] + values[7] + text[size // 2 :]
        for shape, registered, sample in (
            ("40 values, pip output", values, text),
            ("'abab' in 'abab…'", ["abab"], "ab" * (size // 2)),
        ):
            with masking(registered):
                whole = min(timed(redact, sample) for _ in range(3))
            new = min(
                timed(partial(_mask_values, values=tuple(registered)), sample) for _ in range(3)
            )
            old = min(timed(_old_replace(registered), sample) for _ in range(3))
            rows.append([f"{size:,}", f"values: {shape}", f"{new * 1000:.2f} ms",
                         f"{old * 1000:.2f} ms"])  # fmt: skip
            rows.append([f"{size:,}", f"redact(): {shape}", f"{whole * 1000:.2f} ms", "-"])
    return rows


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
    rows += _registered_rows(args, redact)
    print(table(rows, ["chars", "input", "new", "old"]))
    print(machine_note())


if __name__ == "__main__":
    main()
