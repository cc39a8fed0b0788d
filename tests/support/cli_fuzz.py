"""Shared by the CLI fuzz tests (tests/unit/cli/test_fuzz_cli.py, tests/integration/
test_fuzz_constraints.py): the property "exit code from the docs/commands.md table, no traceback, no
internal error", an in-process runner, and odd inputs."""

from __future__ import annotations

import io
import os
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import strategies as st

from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.errors import EXIT_INTERNAL

COMMANDS_DOC = (Path(__file__).resolve().parents[2] / "docs" / "commands.md").read_text()
EXAMPLES = int(os.environ.get("ROCMENV_FUZZ_EXAMPLES", "60"))


def _documented_exit_codes() -> frozenset[int]:
    section = COMMANDS_DOC.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return frozenset(int(row.strip("|").split("|")[0]) for row in rows)


EXIT_CODES = _documented_exit_codes()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CLOSED = f"127.0.0.1:{_closed_port()}"


def run_cli(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env=env, cwd=cwd, stdin=io.StringIO(""), stdout=out, stderr=err)
    real_err, real_out = sys.stderr, sys.stdout
    sys.stderr, sys.stdout = err, out  # argparse's own usage errors and --help
    try:
        code = main(argv, ctx=ctx)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 2
    finally:
        sys.stderr, sys.stdout = real_err, real_out
    return code, err.getvalue()


def check(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    """The property: a documented exit code, no traceback, no Python exception text."""
    try:
        code, err = run_cli(argv, cwd, env)
    except Exception as exc:  # that is the finding
        pytest.fail(f"rocmenv {argv!r} raised {exc!r} (env {env!r})")
    assert code in EXIT_CODES, f"exit {code} for {argv!r}: {err[-800:]}"
    assert "Traceback (most recent call last)" not in err, f"{argv!r}:\n{err[-2000:]}"
    assert code != EXIT_INTERNAL, f"internal error (a bug) for {argv!r}:\n{err[-2000:]}"


ODD = [
    "\x00", " ", "-", "--", "", "\n", "\r\n", "\t", "\x1b[31m", "é", "\u202e", "\ud7ff",
    "\uffff", "0", "-1", "1e400", "nan", "inf", "99999999999999999999", "a" * 300, ":", "::",
    "@", "@sha256:", "/", "//", "..", "~", "~nouser/x", "${HOME}", "$(id)", "`id`", "'", '"',
    "[::1", "[::1]:5000", "127.0.0.1:abc", "a" * 64 + ".com", "#1", "%00", "%", "GPU-",
    "0-99999999999", "all", "none", "0,0", "0-3", "3-0", "rocm/sgl-dev", "rocm/sgl-dev:latest",
    f"{CLOSED}/x/y:v1", f"{CLOSED}/x/y@sha256:" + "a" * 64, "sha256:" + "0" * 64, "md5:00",
    "v0.5.8-rocm700-mi30x-20260215", "miles-rocm720-mi35x", ">=0.5.8", "7.2", "mi30x",
    "19991231", "docker.io=" + CLOSED, "https://u:p@h/x", "/dev/kfd", "/:/host", "SYS_ADMIN",
]  # fmt: skip
TEXT = st.one_of(
    st.sampled_from(ODD),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=30),
    st.lists(st.sampled_from(ODD), min_size=2, max_size=4).map("".join),
)
ARG = TEXT.filter(lambda s: "\x00" not in s)  # a NUL cannot be in a real argv
