"""The one terminal decision (:attr:`rocmenv.context.Context.live`): a live display draws on
a real terminal (a pty) unless ``TERM=dumb`` or inside GitHub Actions; ``NO_COLOR`` keeps the
redraw and drops the styling. The suite board takes it (``tests/integration/cli/
test_terminal.py`` runs pull, drift and the board as processes)."""

from __future__ import annotations

import io
import os
import pty
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, TextIO

import pytest

from rocmenv.cli.suite import _EventPrinter
from rocmenv.context import Context


@pytest.fixture
def terminal() -> Iterator[tuple[TextIO, int]]:
    """A real terminal's slave end as a text stream, and the master to read it back from."""
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        yield stream, master
    finally:
        stream.close()
        os.close(master)


def _read(master: int) -> bytes:
    import select

    data = b""
    while select.select([master], [], [], 0.2)[0]:
        chunk = os.read(master, 65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize(
    ("env", "live", "styled"),
    [
        ({"TERM": "xterm-256color"}, True, True),
        ({}, True, True),
        ({"TERM": "dumb"}, False, False),
        ({"TERM": "xterm", "GITHUB_ACTIONS": "true"}, False, False),
        ({"TERM": "xterm", "NO_COLOR": "1"}, True, False),
        ({"TERM": "xterm", "NO_COLOR": ""}, True, True),  # no-color.org: set and not empty
    ],
)
def test_a_terminal_is_live_unless_dumb_or_in_actions(
    terminal: tuple[TextIO, int], env: dict[str, str], live: bool, styled: bool
) -> None:
    ctx = Context(env=env, stderr=terminal[0])
    assert (ctx.live, ctx.styled) == (live, styled)


def test_a_pipe_or_file_is_never_live() -> None:
    read, write = os.pipe()
    with os.fdopen(write, "w") as pipe:
        assert not Context(env={"TERM": "xterm"}, stderr=pipe).live
    os.close(read)
    assert not Context(env={"TERM": "xterm"}, stderr=io.StringIO()).live


def _event(kind: str, name: str = "t1") -> Any:
    result = SimpleNamespace(status="passed", exit_code=0, wall=0.1, message="", attempts=[])
    return SimpleNamespace(kind=kind, name=name, assigned=(0,), attempt=1, result=result)


@pytest.mark.parametrize(
    ("env", "redraw", "reverse"),
    [
        ({"TERM": "xterm"}, True, True),
        ({"TERM": "dumb"}, False, False),
        ({"TERM": "xterm", "NO_COLOR": "1"}, True, False),
    ],
)
def test_the_suite_board_follows_the_terminal_decision(
    terminal: tuple[TextIO, int], env: dict[str, str], redraw: bool, reverse: bool
) -> None:
    stream, master = terminal
    board = _EventPrinter(Context(env=env, stderr=stream))
    board(_event("start"))
    board(_event("end"))
    board.close()
    written = _read(master)
    assert b"rocmenv suite: passed t1" in written
    assert (b"\x1b[K" in written) == redraw
    assert (b"\x1b[7m" in written) == reverse
    if not redraw:  # plain lines: nothing but text and line ends (the pty adds \r to \n)
        assert b"\x1b" not in written and b"\r" not in written.replace(b"\r\n", b"\n")
