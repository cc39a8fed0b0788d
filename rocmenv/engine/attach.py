"""The Engine API's attach stream: multiplexed stdout/stderr frames (8-byte headers), or one
raw stream with a TTY; written to our file descriptors as it arrives. With a TTY the local
terminal goes to raw mode (restored on close), stdin is forwarded and resizes are passed on.
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` adds enum conversions and ``selectors`` (~2.5 ms a run)
import contextlib
import os
import threading
from collections.abc import Callable

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    import signal as _signal  # typeshed has no _signal
    from typing import Any
else:
    import _signal  # the C module: ``signal``'s enum conversions cost ~0.5 ms a run


STDOUT, STDERR = 1, 2


def demux(data: bytes) -> list[tuple[int, bytes]]:
    """Split a multiplexed stream (8-byte frame headers) that is complete in ``data``."""
    frames = []
    pos = 0
    while pos + 8 <= len(data):
        stream, size = data[pos], int.from_bytes(data[pos + 4 : pos + 8], "big")
        frames.append((stream, data[pos + 8 : pos + 8 + size]))
        pos += 8 + size
    return frames


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return False
        except InterruptedError:
            continue
        view = view[written:]
    return True


class AttachStream:
    """Copies an attach stream to our fds; with a TTY also stdin, raw mode and resizes.

    Made attached to a created container (:meth:`rocmenv.engine.docker_api.DockerApiEngine.attach`);
    :meth:`start` starts it. With a TTY the local terminal goes to raw mode *before* the
    container starts, without discarding what was typed meanwhile (``TCSANOW``, not the
    default ``TCSAFLUSH``): the first line typed reaches the shell.
    """

    def __init__(
        self,
        sock: Any,
        initial: bytes,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None,
        tty: bool,
        start: Callable[[], None],
        resize: Callable[[int, int], None],
    ) -> None:
        self._start_container = start
        self._resize_to = resize
        self._sock = sock
        self._buffer = initial
        self._out, self._err, self._in = stdout_fd, stderr_fd, stdin_fd
        self._tty = tty
        self._reader: threading.Thread | None = None
        self._closed = False
        self._saved_term: Any = None
        self._old_winch: Any = None

    def start(self) -> None:
        """Start the container, then copy its streams (raises what starting raises)."""
        if self._tty:
            self._raw_terminal()
        self._start_container()
        self._reader = threading.Thread(target=self._copy_out, name="rocmenv-attach", daemon=True)
        self._reader.start()
        if self._in is not None:
            threading.Thread(
                target=self._copy_in, args=(self._in,), name="rocmenv-stdin", daemon=True
            ).start()
        if self._tty:
            self._follow_resizes()

    def _recv(self) -> bytes:
        if self._buffer:
            data, self._buffer = self._buffer, b""
            return data
        try:
            return bytes(self._sock.recv(65536))
        except OSError:
            return b""

    def _copy_out(self) -> None:
        ok = {STDOUT: True, STDERR: True}
        if self._tty:
            while data := self._recv():
                ok[STDOUT] = ok[STDOUT] and _write_all(self._out, data)
            return
        pending = bytearray()  # += on bytes would copy: quadratic on a large frame
        while data := self._recv():
            pending += data
            while len(pending) >= 8:
                stream, size = pending[0], int.from_bytes(pending[4:8], "big")
                if len(pending) < 8 + size:
                    break
                chunk = bytes(pending[8 : 8 + size])
                del pending[: 8 + size]
                target = STDERR if stream == STDERR else STDOUT
                fd = self._err if target == STDERR else self._out
                ok[target] = ok[target] and _write_all(fd, chunk)
        if pending:  # never silently short: the stream ended inside a frame
            _write_all(
                self._err,
                f"rocmenv: the engine's output stream ended inside a frame "
                f"({len(pending)} bytes of the container's output lost)\n".encode(),
            )

    def _copy_in(self, fd: int) -> None:
        try:
            while data := os.read(fd, 65536):
                self._sock.sendall(data)
            if not self._tty:
                self._sock.shutdown(_socket.SHUT_WR)
        except OSError:
            return

    def _raw_terminal(self) -> None:
        fd = self._in
        if fd is None or not os.isatty(fd):
            return
        import termios
        import tty

        try:
            saved = termios.tcgetattr(fd)
            tty.setraw(fd, termios.TCSANOW)
        except termios.error:
            return
        self._saved_term = (fd, saved)

    def _follow_resizes(self) -> None:
        """The size now (a daemon older than API 1.42 ignores the create's ``ConsoleSize``
        on Linux), then at every SIGWINCH."""
        self._resize()
        if threading.current_thread() is threading.main_thread():
            self._old_winch = _signal.signal(_signal.SIGWINCH, lambda *_: self._resize())

    def _resize(self) -> None:
        try:
            size = os.get_terminal_size(self._out)
        except OSError:
            return
        self._resize_to(size.lines, size.columns)

    def join(self, timeout: float | None = None) -> None:
        if self._reader is not None:
            self._reader.join(timeout)

    def exit_code(self) -> int | None:
        return None  # the attach stream does not carry it: Engine.wait does

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._saved_term is not None:
            import termios

            fd, attrs = self._saved_term
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, attrs)
        if self._old_winch is not None:
            with contextlib.suppress(ValueError):
                _signal.signal(_signal.SIGWINCH, self._old_winch)
        with contextlib.suppress(Exception):
            self._sock.shutdown(_socket.SHUT_RDWR)  # wakes a reader still in recv()
        with contextlib.suppress(Exception):
            self._sock.close()
