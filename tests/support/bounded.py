"""Run a command as a real subprocess under an address-space limit (``RLIMIT_AS``) and a time
limit, and report its exit code, output, peak RSS and wall time: the harness for attacks that
would otherwise take the test machine down with them (a gzip bomb, a flood of kept files).

The limit is set by a small Python wrapper on itself, which then runs the command as its child
(inheriting the limit and the output pipes) and writes the child's own ``ru_maxrss`` from
``os.wait4`` to a file. The wrapper is in between because Linux carries a process's peak RSS
across ``fork`` and ``exec``: a command forked straight from the test process would report
pytest's own RSS as its floor. On timeout the whole process group is killed and
:attr:`Bounded.timed_out` is set.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_WRAPPER = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[3], sys.argv[3:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "with open(sys.argv[1], 'w') as report:\n"
    "    report.write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}')\n"
)


@dataclass(frozen=True, kw_only=True)
class Bounded:
    code: int  # the exit code; -N for a signal
    stdout: str
    stderr: str
    peak_rss_mb: float
    seconds: float
    timed_out: bool

    def describe(self) -> str:
        """One paragraph for an assertion message."""
        tail = self.stderr[-1500:]
        return (
            f"exit {self.code}, {self.seconds:.1f} s, peak RSS {self.peak_rss_mb:.0f} MB"
            f"{', TIMED OUT' if self.timed_out else ''}; stderr: {tail}"
        )


def run_bounded(
    argv: Sequence[str],
    *,
    address_space: int,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Bounded:
    """``argv`` (``argv[0]`` a path) with ``RLIMIT_AS = address_space`` bytes, killed after
    ``timeout`` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report"
        done = _run(argv, report, address_space=address_space, timeout=timeout, env=env, cwd=cwd)
        code, peak = (int(x) for x in report.read_text().split()) if report.exists() else (-9, 0)
    return Bounded(
        code=code,
        stdout=done.stdout,
        stderr=done.stderr,
        peak_rss_mb=peak / 1024,
        seconds=done.seconds,
        timed_out=done.timed_out,
    )


@dataclass(frozen=True, kw_only=True)
class _Done:
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


def _run(
    argv: Sequence[str],
    report: Path,
    *,
    address_space: int,
    timeout: float,
    env: Mapping[str, str] | None,
    cwd: Path | None,
) -> _Done:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, str(report), str(address_space), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
    )
    out: dict[str, bytes] = {}

    def drain(name: str) -> None:
        stream = getattr(proc, name)
        out[name] = stream.read()
        stream.close()

    readers = [threading.Thread(target=drain, args=(n,)) for n in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    start = time.monotonic()
    timer.start()
    try:
        proc.wait()
    finally:
        timer.cancel()
    seconds = time.monotonic() - start
    for reader in readers:
        reader.join()
    return _Done(
        stdout=out["stdout"].decode("utf-8", "replace"),
        stderr=out["stderr"].decode("utf-8", "replace"),
        seconds=seconds,
        timed_out=timed_out.is_set(),
    )
