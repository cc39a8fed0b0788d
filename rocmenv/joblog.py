"""The job log: the one writer of workflow commands, and the fence around untrusted output.

GitHub's runner reads every line a step writes, on stdout and on stderr, and acts on the
workflow commands among them (actions/runner, ``ActionCommandManager``/``ActionCommand``): a
line that begins, after white space, with ``::name props::data``, or that holds
``##[name props]data`` anywhere — ``set-output``, ``add-mask``, ``stop-commands``, ``error``,
``group``, ``echo``… Two facts of the runner shape this module:

* after ``::stop-commands::TOKEN`` it ignores every command until a line ``::TOKEN::``;
  while stopped only that token counts, and another ``stop-commands`` is an ordinary line.
  A fence opened with a fresh 128-bit token therefore cannot be closed, reopened or
  extended by the text inside it, and commands written after the token are read again;
* it reads stdout and stderr on two threads into two queues and handles a batch's stderr
  lines before its stdout lines (``ProcessInvoker``): nothing orders a line of one pipe
  against a line of the other. A fence holds for the lines of its own pipe, in order.

Hence one stream owns the job log — rocmenv's stderr, where its annotations go — and
:class:`JobLog` is its one writer of commands (:meth:`JobLog.command`, :meth:`JobLog.mask`)
and of untrusted output (:meth:`JobLog.untrusted`). Under its lock untrusted bytes are
always inside a fence (opened first when none is) and a command is always outside one (the
fence resumed first, after a newline when the untrusted text stopped mid-line, so that the
token begins a line of its own). An untrusted container's stdout and stderr reach it through
one pipe (:meth:`JobLog.child_output`), fenced, in the order the container wrote them; a
stdout redirected to a regular file (which the runner does not read) gets the container's
stdout unchanged. Text rocmenv writes to the stream itself is whole lines of its own, whose
outside strings are shown through :func:`rocmenv.escape.shown` (no command can start in
them); a command's message and properties pass it too.

Not covered: problem matchers another step registered still read fenced lines (the runner
applies them to every line that is not a command); only the workflow can remove them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

from rocmenv.escape import shown

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    import weakref
    from typing import TextIO

PUMP_GRACE = 5.0  # seconds the output may still arrive after the container's end
CHUNK = 65536

# (``weakref`` is imported on first use: a run that writes no command needs none, ~0.5 ms)
_logs: weakref.WeakKeyDictionary[object, JobLog] | None = None
_logs_lock = threading.Lock()


def joblog(stream: TextIO) -> JobLog:
    """The :class:`JobLog` of ``stream``: one per stream, for the life of the stream."""
    global _logs
    with _logs_lock:
        if _logs is None:
            import weakref

            _logs = weakref.WeakKeyDictionary()
        log = _logs.get(stream)
        if log is None:
            log = _logs[stream] = JobLog(stream)
        return log


def child_output(
    stdout: TextIO, stderr: TextIO, *, fence: bool
) -> AbstractContextManager[ChildOutput]:
    """:meth:`JobLog.child_output` of ``stderr``'s job log; without ``fence`` simply the two
    streams' descriptors (the run's usual path: no job log is made)."""
    if not fence:
        return nullcontext(ChildOutput(_fileno(stdout, 1), _fileno(stderr, 2)))
    return joblog(stderr).child_output(stdout, fence=True)


def command_line(name: str, message: str = "", properties: Mapping[str, str] | None = None) -> str:
    """``::name k=v,…::message`` with GitHub's escapes (``%``, CR, LF in the message; also
    ``:`` and ``,`` in property values); message and values shown (:func:`shown`) first."""
    props = ",".join(
        f"{key}={_escape_property(shown(value))}" for key, value in (properties or {}).items()
    )
    head = f"{name} {props}" if props else name
    return f"::{head}::{_escape_data(shown(message, lines=True))}\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class ChildOutput:
    """File descriptors for a child's stdout and stderr (:meth:`JobLog.child_output`)."""

    def __init__(self, stdout_fd: int, stderr_fd: int) -> None:
        self.stdout_fd, self.stderr_fd = stdout_fd, stderr_fd
        self.closed = False  # once set (under the log's lock), late bytes are dropped


class JobLog:
    """The writer of one stream's workflow commands and untrusted output (module docstring)."""

    def __init__(self, stream: TextIO) -> None:
        import weakref

        self._stream = weakref.ref(stream)  # the registry's key: no strong reference back
        self._lock = threading.RLock()
        self._token: str | None = None  # the open fence's resume token
        self._line_start = True  # the last byte written through here ended a line

    @property
    def stream(self) -> TextIO:
        stream = self._stream()
        assert stream is not None, "a JobLog outlived its stream"
        return stream

    @property
    def fenced(self) -> bool:
        return self._token is not None

    @property
    def reaches_runner(self) -> bool:
        """Whether the runner may read this stream: anything but a regular file."""
        return not _regular_file(self.stream)

    # -- rocmenv's commands -------------------------------------------------------------------
    def command(self, name: str, message: str = "", **properties: str) -> None:
        """Write the workflow command ``name`` (``error``, ``warning``, ``group``…), outside
        any fence."""
        self._command(command_line(name, message, properties))

    def mask(self, value: str) -> None:
        """``::add-mask::value``: the value exactly as a tool will print it (only ``%``, CR
        and LF escaped, as the runner unescapes them), outside any fence."""
        self._command(f"::add-mask::{_escape_data(value)}\n")

    def _command(self, line: str) -> None:
        stream = self.stream
        with self._lock:
            self._resume()
            stream.write(line)
            stream.flush()
            self._line_start = True

    def end_untrusted(self) -> None:
        """Close an open fence now (the end of a child's output)."""
        with self._lock:
            self._resume()

    def _resume(self) -> None:
        if self._token is None:
            return
        newline = "" if self._line_start else "\n"
        self.stream.write(f"{newline}::{self._token}::\n")
        self.stream.flush()
        self._token = None
        self._line_start = True

    # -- untrusted output ---------------------------------------------------------------------
    def untrusted(self, data: bytes) -> None:
        """Write ``data`` (a container's output, unchanged) inside a fence."""
        if data:
            with self._lock:
                self._untrusted(data)

    def _untrusted(self, data: bytes) -> None:
        stream = self.stream
        if self._token is None:
            import secrets  # (only when a fence opens)

            token = secrets.token_hex(16)
            newline = "" if self._line_start else "\n"
            stream.write(f"{newline}::stop-commands::{token}\n")
            self._token = token
        stream.flush()
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:  # a text-only stream (tests): as the runner decodes it
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()
        self._line_start = data.endswith((b"\n", b"\r"))

    @contextmanager
    def child_output(self, stdout: TextIO, *, fence: bool) -> Iterator[ChildOutput]:
        """File descriptors for a child's (a container's, ``srun``'s) stdout and stderr: ours
        unchanged unless ``fence``; with ``fence``, when this stream may reach the runner, one
        pipe whose bytes :meth:`untrusted` writes here (stdout too, unless ``stdout`` is a
        regular file). When the block ends the pipe's write end becomes ``/dev/null`` (a
        writer still running writes nowhere, and its descriptor number is never reused under
        it), the output is drained for up to :data:`PUMP_GRACE` seconds (later bytes are
        dropped) and the fence is closed."""
        if not (fence and self.reaches_runner):
            yield ChildOutput(_fileno(stdout, 1), _fileno(self.stream, 2))
            return
        read_fd, write_fd = os.pipe()
        out = ChildOutput(_fileno(stdout, 1) if _regular_file(stdout) else write_fd, write_fd)
        pump = threading.Thread(
            target=self._pump, args=(read_fd, out), name="rocmenv-fence", daemon=True
        )
        pump.start()
        try:
            yield out
        finally:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, write_fd)  # (kept open: a late writer may hold the number)
            os.close(devnull)
            pump.join(PUMP_GRACE)
            with self._lock:
                out.closed = True
                self._resume()

    def _pump(self, fd: int, out: ChildOutput) -> None:
        try:
            while data := os.read(fd, CHUNK):
                with self._lock:
                    if not out.closed:
                        self._untrusted(data)
        except OSError:
            pass
        finally:
            os.close(fd)


def _fileno(stream: object, default: int) -> int:
    try:
        return int(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return default


def _regular_file(stream: object) -> bool:
    import stat

    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False
