"""``docker|podman start --attach`` as a child process: the docker-cli/podman adapter's
:class:`~rocmenv.engine.Attachment` (stdout straight to our fd, stderr through a small pump
that tells the CLI's own start errors from the container's output).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading

from rocmenv.engine.protocol import Engine, explain_start_failure
from rocmenv.errors import EngineError, EngineStartError

_NEVER_STARTED = "0001-01-01T00:00:00Z"
_CLI_ERROR_PREFIXES = (b"Error response from daemon", b"Error: ")  # docker, podman


class CliAttachment:
    """``docker start --attach`` as a child process; stderr goes through a small pump."""

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        proc: subprocess.Popen[bytes],
        *,
        stderr_fd: int,
    ) -> None:
        self._engine = engine
        self._cid = container_id
        self._proc = proc
        self._stderr_fd = stderr_fd
        self._held = b""
        self._pump: threading.Thread | None = None
        if proc.stderr is not None:
            self._pump = threading.Thread(target=self._copy_err, name="rocmenv-stderr", daemon=True)
            self._pump.start()

    def _copy_err(self) -> None:
        assert self._proc.stderr is not None
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
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        if self._pump is not None:
            self._pump.join(timeout)

    def exit_code(self) -> int | None:
        """The container's exit code, from ``docker start --attach``; raises
        :class:`EngineStartError` when the container never started."""
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
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._flush_held()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:
            return
