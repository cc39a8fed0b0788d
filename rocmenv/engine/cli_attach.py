"""The CLI adapters and the terminal.

* ``docker|podman start --attach`` as a child process: the docker-cli/podman adapter's
  :class:`~rocmenv.engine.Attachment` (stdout straight to our fd, stderr through a small pump
  that tells the CLI's own start errors from the container's output);
* :func:`run_on_terminal`: a CLI command whose stdout is a pseudo-terminal of a given size —
  ``docker create -t`` sends its stdout's size as the container's ``ConsoleSize``, as
  ``docker run`` does from a terminal, so that is how the docker-cli adapter passes ours.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence

from rocmenv.engine.protocol import Engine, explain_start_failure
from rocmenv.errors import EngineError, EngineStartError, EngineUnavailable

_NEVER_STARTED = "0001-01-01T00:00:00Z"
_CLI_ERROR_PREFIXES = (b"Error response from daemon", b"Error: ")  # docker, podman


class CliAttachment:
    """``docker start --attach`` as a child process, run by :meth:`start`; stderr goes
    through a small pump.

    Without a TTY the CLI runs in its own session: a terminal's Ctrl-C reaches only rocmenv,
    which forwards it once (the CLI would proxy it a second time otherwise). With a TTY it
    stays in ours: it needs the terminal (raw mode, ``SIGWINCH`` for resizes).
    """

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None,
        tty: bool,
    ) -> None:
        self._engine = engine
        self._cid = container_id
        self._argv, self._env = list(argv), dict(env)
        self._stdout_fd, self._stderr_fd, self._stdin_fd = stdout_fd, stderr_fd, stdin_fd
        self._tty = tty
        self._proc: subprocess.Popen[bytes] | None = None
        self._held = b""
        self._pump: threading.Thread | None = None

    def start(self) -> None:
        """Run ``start --attach``; a refused start shows in :meth:`exit_code`."""
        try:
            self._proc = subprocess.Popen(
                self._argv,
                env=self._env,
                stdin=self._stdin_fd if self._stdin_fd is not None else subprocess.DEVNULL,
                stdout=self._stdout_fd,
                stderr=self._stderr_fd if self._tty else subprocess.PIPE,
                start_new_session=not self._tty,
            )
        except OSError as err:
            raise EngineUnavailable(
                f"{self._engine.kind}: cannot run {self._argv[0]}: {err}"
            ) from None
        if self._proc.stderr is not None:
            self._pump = threading.Thread(target=self._copy_err, name="rocmenv-stderr", daemon=True)
            self._pump.start()

    def _copy_err(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        first = True
        holding = False
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            if first:
                first = False
                holding = data.startswith(_CLI_ERROR_PREFIXES)
            if holding:
                self._held += data
                continue
            _write_all(self._stderr_fd, data)

    def join(self, timeout: float | None = None) -> None:
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        if self._pump is not None:
            self._pump.join(timeout)

    def exit_code(self) -> int | None:
        """The container's exit code, from ``docker start --attach``; raises
        :class:`EngineStartError` when the container never started."""
        if self._proc is None:
            return None
        code = self._proc.poll()
        if code is None:
            return None
        if code == 0:
            self._flush_held()
            return 0
        try:
            doc = self._engine.inspect_container(self._cid)
        except EngineError:
            self._flush_held()
            return None
        state = doc.get("State") or {}
        if str(state.get("StartedAt") or _NEVER_STARTED).startswith("0001-01-01"):
            text = str(state.get("Error") or self._held.decode(errors="replace"))
            failure = explain_start_failure(text)
            self._held = b""
            raise EngineStartError(failure.message, failure=failure)
        self._flush_held()
        if state.get("Running"):
            return None
        return int(state.get("ExitCode", code))

    def _flush_held(self) -> None:
        if self._held:
            _write_all(self._stderr_fd, self._held)
            self._held = b""

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._flush_held()


def run_on_terminal(
    argv: Sequence[str],
    env: Mapping[str, str],
    size: tuple[int, int],
    timeout: float | None,
    *,
    kind: str,
) -> tuple[int, str, str]:
    """``argv`` with stdout on a pseudo-terminal of ``size`` (rows, columns), stdin empty,
    stderr captured, in a session of its own: (exit status, stdout, stderr); -1 on timeout."""
    import fcntl
    import pty
    import struct
    import termios

    primary, secondary = pty.openpty()
    try:
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
        try:
            proc = subprocess.Popen(
                argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=secondary,
                stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            raise EngineUnavailable(f"{kind}: cannot run {argv[0]}: {err}") from None
        os.close(secondary)
        secondary = -1
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -1, "", f"timed out after {timeout} s"
        out = _read_all(primary)
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    text = out.decode(errors="replace").replace("\r\n", "\n")
    return proc.returncode, text, stderr.decode(errors="replace").strip()


def _read_all(fd: int) -> bytes:
    """What a pseudo-terminal's primary side holds after the secondary side closed (EIO then;
    a few seconds' bound should something else still hold the secondary open)."""
    import select

    out = bytearray()
    while select.select([fd], [], [], 5.0)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: nothing more, the other side is closed
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:
            return
