"""``rocmenv shell`` and ``run -t`` on a terminal, on every engine.

Under a pseudo-terminal that is rocmenv's controlling terminal (as a login's is), at two
sizes: the container's shell has a TTY (``tty`` names a ``/dev/pts`` device, the shell is
interactive), the terminal's size from its first prompt, and later resizes; the first line
typed — once, as soon as the prompt shows — is run; the shell's exit code comes back. The
same read off a real terminal's screen in tmux at 80×24 and 200×50. ``run -t`` creates the
container with the terminal's size (Docker's ``ConsoleSize``; podman sets it before the
command starts)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from tests.support import testenv
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    every_engine,
    inspect,
    project_fixture,
    remove_containers,
    wait_for,
)
from tests.support.tmux import Pane

HANG = 120.0  # a ceiling that only catches a hang
# A42B appears only when the shell ran the line, never in the echo of what was typed.
COMMAND = b"echo A$((6*7))B tty=$(tty) size=$(stty size) interactive=$-\r"
SIZE = b"echo S$((1+1))Z $(stty size)\r"
SIZES = [(37, 111), (50, 200)]


class _Screen:
    """What a pseudo-terminal's program wrote, read as it comes."""

    def __init__(self, fd: int) -> None:
        self.fd, self.seen = fd, b""

    def until(self, pattern: bytes, deadline: float, *, after: int = 0) -> re.Match[bytes]:
        """The first match of ``pattern`` in what was written from offset ``after`` on."""
        while (found := re.compile(pattern).search(self.seen, after)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} never appeared; got {self.seen[-2000:]!r}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: the other side closed
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{pattern!r} never appeared; got {self.seen[-2000:]!r}")
                self.seen += chunk
        return found


def _on_terminal(
    project: Project, rows: int, cols: int, *args: str
) -> tuple[subprocess.Popen[bytes], int]:
    """``rocmenv ARGS`` with a new pseudo-terminal of that size as its controlling terminal."""
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmenv", *args],
        cwd=project.cwd, env={**project.env(), "TERM": "xterm"},
        stdin=secondary, stdout=secondary, stderr=secondary, start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )  # fmt: skip
    os.close(secondary)
    return proc, primary


@pytest.mark.parametrize(("rows", "cols"), SIZES)
@every_engine
def test_shell_on_a_terminal_has_its_size_from_the_first_prompt_and_runs_the_first_line(
    project: Project, engine: str, rows: int, cols: int
) -> None:
    proc, primary = _on_terminal(project, rows, cols, "shell", "--engine", engine, "--profile",
                                 "plain", "--image", project.image)  # fmt: skip
    deadline = time.monotonic() + HANG
    screen = _Screen(primary)
    try:
        screen.until(rb"# ", deadline)  # the container's root prompt
        os.write(primary, COMMAND)  # once: the first line typed must run
        ran_at = screen.until(rb"A42B [^\r\n]*\r?\n", deadline).end()
        fcntl.ioctl(primary, termios.TIOCSWINSZ, struct.pack("HHHH", rows - 7, cols - 9, 0, 0))
        # a resize arrives as a signal: ask the shell until the new size shows there
        resized = f"S2Z {rows - 7} {cols - 9}".encode()
        after = ran_at
        while resized not in screen.seen[ran_at:]:
            os.write(primary, SIZE)
            after = screen.until(rb"S2Z [^\r\n]*\r?\n", deadline, after=after).end()
        os.write(primary, b"exit 5\r")
        assert proc.wait(timeout=HANG) == 5
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    out = screen.seen
    text = out.decode(errors="replace")
    ran = re.search(r"A42B tty=(\S+) size=(\d+ \d+) interactive=(\S+)", text)
    assert ran is not None, text
    assert ran.group(1).startswith("/dev/pts/"), text  # the container's shell has a terminal
    assert ran.group(2) == f"{rows} {cols}", text  # the terminal's size, at the first prompt
    assert "i" in ran.group(3), text  # an interactive shell
    assert "echo A$((6*7))B" in text  # the terminal echoed what was typed
    assert project.containers() == []


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_shell_in_tmux_shows_the_right_size_and_runs_the_first_line(
    project: Project, engine: str, width: int, height: int
) -> None:
    testenv.need_tool("tmux", hint="scripts/setup.sh installs it")
    argv = [sys.executable, "-m", "rocmenv", "shell", "--engine", engine, "--profile", "plain",
            "--image", project.image]  # fmt: skip
    env = {k: v for k, v in project.env().items() if k != "TERM"}
    with Pane(width, height, argv, env=env, cwd=project.cwd) as pane:
        # the root prompt (capture-pane drops the space after "#")
        assert wait_for(lambda: pane.screen()[-1].endswith("#"), HANG), pane.text()
        pane.keys("echo A$((6*7))B $(stty size)", "Enter")  # once
        assert wait_for(lambda: f"A42B {height} {width}" in pane.text(), HANG), pane.text()
        pane.resize(width - 10, height - 4)
        want = f"A42B {height - 4} {width - 10}"
        for _ in range(int(HANG)):  # the resize travels as a signal: ask until it shows
            pane.keys("echo A$((6*7))B $(stty size)", "Enter")
            if wait_for(lambda: want in pane.text(), 1.0):
                break
        assert want in pane.text(), pane.text()
        pane.keys("exit 3", "Enter")
        assert wait_for(lambda: pane.exit_status() is not None, HANG), pane.text()
        assert pane.exit_status() == 3
    assert project.containers() == []


@pytest.mark.parametrize(("rows", "cols"), SIZES)
@every_engine
def test_run_with_a_tty_creates_the_container_with_the_terminals_size(
    project: Project, engine: str, rows: int, cols: int
) -> None:
    proc, primary = _on_terminal(project, rows, cols, "run", "-t", "--keep", "--engine", engine,
                                 "--profile", "plain", "--image", project.image, "--",
                                 "stty", "size")  # fmt: skip
    screen = _Screen(primary)
    try:
        screen.until(rb"--keep", time.monotonic() + HANG)  # the note on the kept container
        assert proc.wait(timeout=HANG) == 0, screen.seen
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    out = screen.seen
    (container,) = project.containers()
    try:
        doc = inspect(container)
    finally:
        remove_containers([container])
    if engine == "podman":  # no ConsoleSize: `podman start --attach` sizes the terminal
        if f"{rows} {cols}".encode() not in out:
            # podman 4.3 resizes after attaching, racing the command's start: a command that
            # reads the size at once may see 0 0 (`shell` waits for it; `run -t CMD` cannot
            # without wrapping CMD). Known and open: the closing note of stop 24.
            pytest.xfail(f"podman sized the terminal after the command read it: {out!r}")
    else:  # honoured on Linux from API 1.42 (Docker 23); older daemons resize after the start
        assert doc["HostConfig"]["ConsoleSize"] == [rows, cols], json.dumps(doc["HostConfig"])
