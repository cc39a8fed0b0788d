"""``rocmenv shell`` on a terminal: run under a pseudo-terminal, it gives the container a TTY
(``tty`` names a ``/dev/pts`` device, the shell is interactive), echoes what is typed, passes
the terminal's size, and returns the shell's exit code."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    project_fixture,
)

HANG = 120.0  # a ceiling that only catches a hang
# A42B appears only when the shell ran the line, never in the echo of what was typed.
COMMAND = b"echo A$((6*7))B tty=$(tty) size=$(stty size) interactive=$-; exit 5\n"


def _read_until(fd: int, needle: bytes, deadline: float) -> bytes:
    seen = b""
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} never appeared; got {seen[-2000:]!r}")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_shell_on_a_pseudo_terminal_is_interactive_with_a_tty(
    project: Project, engine: str
) -> None:
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 111, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmenv", "shell", "--engine", engine, "--profile", "plain",
         "--image", project.image],
        cwd=project.cwd, env={**project.env(), "TERM": "xterm"},
        stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True,
    )  # fmt: skip
    os.close(secondary)
    deadline = time.monotonic() + HANG
    try:
        out = _read_until(primary, b"# ", deadline)  # the container's root prompt
        # Keys typed while the shell is still setting up its terminal can be dropped (bash
        # redraws its prompt after the size is applied): type again until the line runs.
        for _attempt in range(12):
            os.write(primary, COMMAND)
            try:
                out += _read_until(primary, b"A42B", time.monotonic() + 5)
                break
            except AssertionError as missed:
                out += str(missed).encode()
        out += _read_until(primary, b"\n", deadline)
        assert proc.wait(timeout=HANG) == 5
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    text = out.decode(errors="replace")
    ran = re.search(r"A42B tty=(\S+) size=(\d+ \d+) interactive=(\S+)", text)
    assert ran is not None, text
    assert ran.group(1).startswith("/dev/pts/"), text  # the container's shell has a terminal
    assert ran.group(2) == "37 111", text  # the host terminal's size reached it
    assert "i" in ran.group(3), text  # an interactive shell
    assert "echo A$((6*7))B" in text  # the terminal echoed what was typed
    assert project.containers() == []
