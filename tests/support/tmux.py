"""A real terminal for tests: a command in a tmux pane of a given size, read back with
``capture-pane`` (what is on the screen, as a user would see it).

::

    with Pane(80, 24, ["sh", "-c", "echo hi"]) as pane:
        assert wait_for(lambda: "hi" in pane.screen(), 10)

Each pane runs on a tmux server of its own (``-L``), so tests never see each other's (or a
developer's) sessions; the server is killed on exit. The command runs with exactly ``env``
(plus ``TERM=screen`` and ``PATH`` unless given; written to a script, not passed through
tmux's own environment handling), without tmux's status line, from an empty screen once
the pane has its size; the pane stays after the command ends (a ``sleep`` in the script:
tmux's ``remain-on-exit`` would scroll a line), so its last screen can be read.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType


class Pane:
    def __init__(
        self,
        width: int,
        height: int,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.width, self.height = width, height
        self._socket = f"rocmenv-test-{os.getpid()}-{os.urandom(4).hex()}"
        self._dir = Path(tempfile.mkdtemp(prefix="rocmenv-tmux-"))
        script = self._dir / "run.sh"
        lines = [
            "#!/bin/sh",
            # tmux sizes a new pane after its process started (and loses what came before):
            # wait for the asked size, then start from an empty screen
            f'until [ "$(stty size 2>/dev/null)" = "{height} {width}" ]; do sleep 0.02; done',
            "printf '\\033[H\\033[2J'",
            f"touch {shlex.quote(str(self._dir / 'started'))}",
        ]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()]
        if cwd is not None:
            lines.append(f"cd {shlex.quote(str(cwd))}")
        lines.append(shlex.join(argv))
        lines.append(f"echo $? > {shlex.quote(str(self._dir / 'status'))}")
        lines.append("exec sleep 3600")  # the pane stays, its screen untouched
        script.write_text("\n".join(lines) + "\n")
        script.chmod(0o755)
        self._script = script
        self._config = self._dir / "tmux.conf"
        self._config.write_text("set -g status off\n")

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self._socket, "-f", str(self._config), *args],
            capture_output=True, text=True, timeout=30, check=check,
        )  # fmt: skip

    def __enter__(self) -> Pane:
        self._tmux("new-session", "-d", "-s", "t", "-x", str(self.width), "-y", str(self.height),
                   "env", "-i", "TERM=screen", f"PATH={os.environ['PATH']}",
                   str(self._script))  # fmt: skip
        # the pane is handed over once its script is past the size wait: a resize before that
        # (a test's first step) would leave the script waiting for a size that never comes
        deadline = time.monotonic() + 60
        while not (self._dir / "started").exists():
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise TimeoutError(f"the tmux pane did not reach {self.width}x{self.height}")
            time.sleep(0.02)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._tmux("kill-server", check=False)
        shutil.rmtree(self._dir, ignore_errors=True)

    def screen(self, *, joined: bool = False, history: bool = False) -> list[str]:
        """The visible rows, empty ones at the bottom left out (``joined``: rows the terminal
        wrapped joined into one line; ``history``: the scrollback above them too)."""
        args = ["capture-pane", "-p", "-t", "t"] + (["-J"] if joined else [])
        args += ["-S", "-"] if history else []
        return self._tmux(*args).stdout.rstrip("\n").split("\n")

    def text(self) -> str:
        return "\n".join(self.screen())

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "t", *keys)

    def resize(self, width: int, height: int) -> None:
        """Resize the window; returns once the pane's terminal has the new size (tmux applies
        it to the pty in its event loop, after ``resize-window`` has answered: a key sent
        before would reach the program at the old size)."""
        self._tmux("resize-window", "-t", "t", "-x", str(width), "-y", str(height))
        self.width, self.height = width, height
        tty = self._tmux("display-message", "-p", "-t", "t", "#{pane_tty}").stdout.strip()
        deadline = time.monotonic() + 30
        while True:
            size = subprocess.run(["stty", "-F", tty, "size"], capture_output=True, text=True)
            if size.stdout.split() == [str(height), str(width)]:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the pane's terminal {tty} stayed {size.stdout.strip()}")
            time.sleep(0.02)

    def exit_status(self) -> int | None:
        """The command's exit status once it has ended (None: still running)."""
        try:
            return int((self._dir / "status").read_text())
        except (OSError, ValueError):
            return None
