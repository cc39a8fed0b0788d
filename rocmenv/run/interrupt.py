"""Signals during a run: caught once, seen at every stage transition and in every wait.

``SIGINT``/``SIGTERM``/``SIGHUP`` get a Python handler that only has to exist: what counts is
the C-level handler behind it, which writes the signal's number to a pipe
(:func:`signal.set_wakeup_fd`) whichever thread the kernel delivered the signal to. The main
thread of a run never blocks on a lock, a join or a queue: it waits in ``select()`` on that
pipe, and work handed to a thread (:class:`Job`: the image check or pull, the wait for the
container's exit) writes a zero byte to it when it finishes. A signal therefore always wakes
the main thread, and the bytes read from the pipe are the one record of what was received.

Why not a queue filled by a Python handler (the old way): the kernel may deliver a
process-directed signal to any thread that does not block it, and a Python handler runs only
in the main thread; a main thread blocked in ``Thread.join()`` or ``Queue.get()`` is not woken
by a signal another thread took, so the interrupt waited until the container ended by itself
(``sleep 300``: five minutes; issue 18's lost Ctrl-C).

Off the main thread (a caller running a run on a thread of its own) no handler is installed:
waits still wake when work finishes, and signals stay the caller's business.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    import signal as _signal  # typeshed has no _signal
    from typing import Any, Final, Generic, TypeVar
else:
    import _signal  # the C module: ``signal``'s enum conversions cost ~0.5 ms a run

    from rocmenv.typecheck import Generic, TypeVar

FORWARDED: Final = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
_NUMBERS: Final = frozenset(int(s) for s in FORWARDED)  # the pipe also gets SIGWINCH's
_WORK_DONE: Final = b"\0"  # signal numbers are never 0

T = TypeVar("T")


class Interrupted(Exception):
    """A signal ended the run before its container ran (the run returns 128 + ``signum``)."""

    def __init__(self, signum: int) -> None:
        import signal  # its names: only once interrupted

        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _handler(_signum: int, _frame: FrameType | None) -> None:
    """Nothing: the wakeup pipe records the signal (see the module docstring)."""


class _Channel:
    """The pipe a watch waits on and what was read from it (shared by nested watches)."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        os.set_blocking(self.read, False)
        os.set_blocking(self.write, False)
        self.lock = threading.Lock()  # a Job never writes to a closed (reused) descriptor
        self.closed = False
        self.received: list[int] = []  # every signal, in order of arrival

    def drain(self) -> None:
        if self.closed:
            return
        while True:
            try:
                data = os.read(self.read, 512)
            except BlockingIOError:
                return
            if not data:
                return
            self.received += [b for b in data if b in _NUMBERS]

    def wake(self) -> None:
        with self.lock:
            if not self.closed:
                with contextlib.suppress(BlockingIOError):  # full: the waiter wakes anyway
                    os.write(self.write, _WORK_DONE)

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                os.close(self.read)
                os.close(self.write)


_installed: list[SignalWatch] = []  # the main thread's installed watch (at most one)


def pending() -> int | None:
    """The first signal the installed watch has recorded (None: none, or no watch)."""
    return _installed[0].first() if _installed else None


class SignalWatch:
    """``with SignalWatch() as watch:`` — the run's signal state and its only way to wait.

    A watch entered on the main thread while another is installed joins it (same pipe, same
    record): ``rocmenv run`` starts one before its imports (a ``KeyboardInterrupt`` raised
    in an import can be swallowed as "unraisable", e.g. in importlib's module-lock
    callback), and the run's own watch then sees what arrived meanwhile.
    """

    def __init__(self, *, until_exit: bool = False) -> None:
        """``until_exit``: leaving keeps the handlers (and the pipe) until the process ends —
        for the program itself, whose exit status a late signal must not turn into a
        ``KeyboardInterrupt`` while it shuts down."""
        self._until_exit = until_exit
        self._channel: _Channel | None = None
        self._owner = False
        self._previous: dict[int, Any] = {}
        self._previous_fd: int | None = None

    @property
    def _ch(self) -> _Channel:
        assert self._channel is not None, "SignalWatch used outside its `with`"
        return self._channel

    # -- life -------------------------------------------------------------------------------
    def __enter__(self) -> SignalWatch:
        main = threading.current_thread() is threading.main_thread()
        if main and _installed:
            self._channel = _installed[0]._ch
            return self
        self._channel, self._owner = _Channel(), True
        if main:
            try:
                # the pipe first: a signal between the two steps is still written down
                self._previous_fd = _signal.set_wakeup_fd(self._ch.write, warn_on_full_buffer=False)
                for sig in FORWARDED:
                    self._previous[sig] = _signal.signal(sig, _handler)
            except BaseException:  # e.g. a KeyboardInterrupt from the handler being replaced
                self._leave()
                raise
            _installed.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave()

    def _leave(self) -> None:
        if not self._owner or self._until_exit:
            return  # a joined watch: the outer one restores and closes
        for sig, old in self._previous.items():
            _signal.signal(sig, old)
        self._previous.clear()
        if self._previous_fd is not None:
            _signal.set_wakeup_fd(self._previous_fd)
            self._previous_fd = None
        if self in _installed:
            _installed.remove(self)
        self._ch.close()

    # -- the signal state -------------------------------------------------------------------
    @property
    def received(self) -> tuple[int, ...]:
        """Every signal received so far, in order of arrival."""
        self._ch.drain()
        return tuple(self._ch.received)

    def first(self) -> int | None:
        """The first signal received so far (None: none yet)."""
        received = self.received
        return received[0] if received else None

    def count(self) -> int:
        return len(self.received)

    def wake(self) -> None:
        """Wake the waiting main thread (any thread may call it)."""
        self._ch.wake()

    # -- waiting ----------------------------------------------------------------------------
    def wait(self, ready: Callable[[], bool], timeout: float | None = None, *, since: int) -> bool:
        """Until more than ``since`` signals in all (False, also when ``ready()`` holds too),
        ``ready()`` (True), or ``timeout`` (False). ``since`` is explicit: a count taken here
        would miss a signal that arrived between the caller's last look and this call."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.count() > since:
                return False
            if ready():
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            select.select([self._ch.read], [], [], left)

    def start(self, fn: Callable[[], T], *, name: str) -> Job[T]:
        """``fn()`` on a thread (a :class:`Job`) that wakes this watch when it finishes."""
        return Job(self, fn, name=name)

    def result(self, job: Job[T]) -> T:
        """The job's result once it finishes; a signal first (or before) raises
        :class:`Interrupted` at once, the job left to finish on its own."""
        if self.wait(job.finished, since=0):
            return job.result()
        raise Interrupted(self.received[0])


class Job(Generic[T]):
    """``fn()`` on a daemon thread that wakes ``watch`` when it finishes."""

    def __init__(self, watch: SignalWatch, fn: Callable[[], T], *, name: str) -> None:
        self._watch, self._fn = watch, fn
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name=f"rocmenv-{name}", daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as err:  # handed to whoever asks for the result
            self._error = err
        finally:
            self._done.set()
            self._watch.wake()

    def finished(self) -> bool:
        return self._done.is_set()

    def result(self) -> T:
        """The value, or the exception ``fn`` raised; only once :meth:`finished`."""
        assert self._done.is_set(), "Job.result() before the job finished"
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
