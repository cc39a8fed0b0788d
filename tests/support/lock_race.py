"""Deterministic races for tests of ``rocmenv.lock`` (a barrier inside the writer).

:func:`install` is called in a child process before it writes the lockfile. It wraps
``fcntl.flock`` and ``rocmenv.image.lock.write_lock`` so that a writer about to write waits until
the *other* writer either is blocked on the lock or has also reached the write:

* with the lock working, the first writer sees the second blocked and goes on; the second
  then reads what the first wrote: both entries land;
* with the lock broken (removed, or taken on the wrong file), both writers have read the old
  file before either writes: one entry is lost, every time.

:func:`kill_mid_write` makes the next large write to any file stop halfway (flushed to
disk), print ``half`` and sleep, so a test can ``kill -9`` a writer with half of its bytes
written: an atomic writer leaves the old file intact, a writer that writes in place does not.

Test-support code: standard library only (plus the module under test).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys
import time
from pathlib import Path
from typing import Any


def _wait_for(paths: tuple[Path, ...], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(p.exists() for p in paths):
        if time.monotonic() > deadline:
            sys.stderr.write(f"lock_race: barrier timed out waiting for {paths}\n")
            raise SystemExit(98)
        time.sleep(0.005)


def install(rendezvous: Path, me: str, other: str, *, timeout: float = 60.0) -> None:
    import fcntl

    import rocmenv.image.lock as lock_module

    real_flock = fcntl.flock
    real_write = lock_module.write_lock

    def flock(fd: Any, operation: int) -> None:
        if not operation & fcntl.LOCK_NB:
            (rendezvous / f"{me}.blocked").touch()  # a blocking call may wait: say so first
        try:
            real_flock(fd, operation)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EACCES):
                (rendezvous / f"{me}.blocked").touch()
            raise

    def write_lock(path: Path, lock: Any, **kwargs: Any) -> None:
        (rendezvous / f"{me}.writing").touch()
        _wait_for((rendezvous / f"{other}.blocked", rendezvous / f"{other}.writing"), timeout)
        real_write(path, lock, **kwargs)

    fcntl.flock = flock
    lock_module.write_lock = write_lock


class _HalfWriter:
    """A file object whose first large write stops halfway and waits to be killed."""

    def __init__(self, inner: Any, threshold: int) -> None:
        self._inner = inner
        self._threshold = threshold

    def write(self, data: Any) -> int:
        if len(data) >= self._threshold:
            half = len(data) // 2
            self._inner.write(data[:half])
            self._inner.flush()
            os.fsync(self._inner.fileno())
            print("half", flush=True)
            time.sleep(120)
        return int(self._inner.write(data))

    def __enter__(self) -> _HalfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def kill_mid_write(threshold: int = 4096) -> None:
    """Make every file opened for writing stop halfway through its first large write."""
    real_open = io.open
    real_fdopen = os.fdopen

    def wrap(opener: Any) -> Any:
        def opened(*args: Any, **kwargs: Any) -> Any:
            handle = opener(*args, **kwargs)
            mode = str(kwargs.get("mode", args[1] if len(args) > 1 else "r"))
            return _HalfWriter(handle, threshold) if ("w" in mode or "a" in mode) else handle

        return opened

    builtins.open = io.open = wrap(real_open)
    os.fdopen = wrap(real_fdopen)
