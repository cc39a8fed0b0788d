"""Driving the packer with real tests: one thread per running attempt, timeouts, retries,
cancellation.

:func:`run_packed` starts what :class:`~rocmenv.suite.packer.Packer` hands out, each attempt
through the backend's ``launch`` on its own thread with its own :class:`Cancel`:

* **timeout**: the backend calls :meth:`Cancel.started` when the test's command starts (the
  container exists); ``timeout`` seconds later the attempt is stopped — asked again every
  second until it has (the local backend sends SIGTERM, then SIGKILL; Slurm's ``scancel``) —
  and reported as ``timeout`` with exit code 124;
* **retries**: an attempt that failed or timed out, with retries left (and, with
  ``retry-on``, a log that matches), gives its GPUs back and is queued again ``retry-wait``
  seconds later, first in line; the retry is a new container. Every attempt is kept
  (:class:`Attempt`); the test's result is its last attempt's;
* **cancellation** (``--fail-fast`` at a test's final failure, SIGINT): every running attempt
  is told to stop, repeatedly until it has; tests not started are reported as skipped, and
  a test waiting for its retry keeps its last attempt's result.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

from rocmenv.errors import RocmenvError
from rocmenv.suite.packer import Job, Packer
from rocmenv.suite.policy import RETRY_LOG_TAIL, TIMEOUT_EXIT

Status = Literal["passed", "failed", "error", "cancelled", "skipped", "timeout"]
CANCEL_RETRY = 1.0  # seconds between repeated stop requests to a test still running
RETRYABLE: tuple[Status, ...] = ("failed", "timeout")
FAILING: tuple[Status, ...] = ("failed", "error", "timeout")


class Cancel:
    """A running attempt's stop token: backends register how to stop what they started, and
    say when the test's command started (its timeout runs from then)."""

    def __init__(self, timeout: float | None = None) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._actions: list[Callable[[], None]] = []
        self._timeout = timeout
        self._done = threading.Event()
        self._timer: threading.Thread | None = None
        self.timed_out = False

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def on_cancel(self, action: Callable[[], None]) -> None:
        with self._lock:
            self._actions.append(action)
            now = self._event.is_set()
        if now:
            _quietly(action)

    def cancel(self) -> None:
        """Ask (again) to stop; every registered action runs each time (they must be
        idempotent: a kill that raced a container's start is simply repeated)."""
        self._event.set()
        with self._lock:
            actions = list(self._actions)
        for action in actions:
            _quietly(action)

    def started(self) -> None:
        """The command runs: start the timeout's clock (once)."""
        if self._timeout is None or self._timer is not None:
            return
        self._timer = threading.Thread(target=self._expire, name="suite-timeout", daemon=True)
        self._timer.start()

    def finish(self) -> None:
        self._done.set()

    def _expire(self) -> None:
        assert self._timeout is not None
        if self._done.wait(self._timeout):
            return
        self.timed_out = True
        while True:
            self.cancel()
            if self._done.wait(CANCEL_RETRY):
                return


def _quietly(action: Callable[[], None]) -> None:
    with contextlib.suppress(RocmenvError, OSError):
        action()


@dataclass(frozen=True, kw_only=True)
class Outcome:
    status: Status
    exit_code: int | None = None
    message: str = ""
    log: str | None = None
    assigned: tuple[int, ...] | None = None  # the GPUs it really got (Slurm's allocation)
    runtime: float | None = None  # the command's own time, without queueing


@dataclass(frozen=True, kw_only=True)
class Attempt:
    number: int  # 1-based
    status: Status
    exit_code: int | None = None
    started: float = 0.0  # time.time()
    wall: float = 0.0
    message: str = ""
    log: str | None = None
    assigned: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TestResult:
    __test__: ClassVar[bool] = False  # not a pytest class
    name: str
    gpus: int
    assigned: tuple[int, ...] = ()
    status: Status
    exit_code: int | None = None
    started: float | None = None  # time.time() of the first attempt
    wall: float = 0.0  # seconds, every attempt
    estimate: float = 0.0
    message: str = ""
    log: str | None = None  # the last attempt's
    runtime: float | None = None  # the last attempt's own time (what the history learns)
    attempts: tuple[Attempt, ...] = ()  # every attempt, the last one included
    disabled: str | None = None  # skipped because disabled: the reason
    timeout: float | None = None  # the limit it ran under

    @property
    def flaky(self) -> bool:
        return self.status == "passed" and len(self.attempts) > 1


@dataclass(frozen=True, kw_only=True)
class SuiteEvent:
    kind: Literal["start", "end", "retry"]
    name: str
    assigned: tuple[int, ...] = ()
    result: TestResult | None = None
    attempt: int = 1


Launch = Callable[[Job, tuple[int, ...], Cancel], Outcome]


@dataclass
class _Running:
    job: Job
    gpus: tuple[int, ...]
    cancel: Cancel
    started: float
    t0: float
    thread: threading.Thread
    asked: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    max_parallel: int | None = None
    fail_fast: bool = False
    on_event: Callable[[SuiteEvent], None] = field(default=lambda _e: None)


def _log_tail(path: str | None) -> str:
    if not path:
        return ""
    with contextlib.suppress(OSError), Path(path).open("rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - RETRY_LOG_TAIL))
        return fh.read().decode("utf-8", "replace")
    return ""


def _attempt_body(job: Job, gpus: tuple[int, ...], cancel: Cancel, launch: Launch) -> Outcome:
    try:
        outcome = launch(job, gpus, cancel)
    except RocmenvError as err:
        outcome = Outcome(status="error", message=str(err))
    except Exception as err:  # a bug in one test's launch must not lose the others
        outcome = Outcome(status="error", message=f"{type(err).__name__}: {err}")
    finally:
        cancel.finish()
    if cancel.timed_out and outcome.status != "passed":
        return replace(
            outcome, status="timeout", exit_code=TIMEOUT_EXIT,
            message=f"killed after its timeout of {job.timeout:.0f}s",
        )  # fmt: skip
    if cancel.requested and outcome.status in ("failed", "error"):
        return replace(outcome, status="cancelled")
    return outcome


def _result(job: Job, attempts: Sequence[Attempt], outcome: Outcome) -> TestResult:
    last = attempts[-1]
    return TestResult(
        name=job.name, gpus=job.gpus, status=last.status, assigned=last.assigned,
        exit_code=last.exit_code, started=attempts[0].started,
        wall=sum(a.wall for a in attempts), estimate=job.estimate, message=last.message,
        log=last.log, runtime=outcome.runtime if outcome.runtime is not None else last.wall,
        attempts=tuple(attempts), timeout=job.timeout,
    )  # fmt: skip


def run_packed(
    jobs: Sequence[Job],
    pool: Sequence[int],
    launch: Launch,
    stop: threading.Event,
    options: RunOptions,
) -> list[TestResult]:
    """Run every job through ``launch`` as the packer allows. ``stop`` (set by a signal
    handler, say) cancels everything; results come in finishing order, then the skipped
    ones."""
    import queue

    packer = Packer(jobs, pool, max_parallel=options.max_parallel)
    done: queue.SimpleQueue[tuple[str, Outcome]] = queue.SimpleQueue()
    running: dict[str, _Running] = {}
    attempts: dict[str, list[Attempt]] = {}
    last: dict[str, Outcome] = {}
    waiting: list[tuple[float, Job, tuple[int, ...], Outcome]] = []  # retries not yet due
    results: list[TestResult] = []
    skipped: list[Job] = []
    stopping = False  # pragma: no mutate (None: as false, equivalent)

    def start(job: Job, gpus: tuple[int, ...]) -> None:
        cancel = Cancel(job.timeout)
        thread = threading.Thread(
            target=lambda: done.put((job.name, _attempt_body(job, gpus, cancel, launch))),
            name=f"suite:{job.name}", daemon=True,
        )  # fmt: skip
        running[job.name] = _Running(
            job=job, gpus=gpus, cancel=cancel, started=time.time(), t0=time.monotonic(),
            thread=thread,
        )  # fmt: skip
        options.on_event(
            SuiteEvent(kind="start", name=job.name, assigned=gpus, attempt=job.attempt)
        )
        thread.start()

    while not packer.finished or waiting:
        if not stopping and stop.is_set():
            stopping = True
        if stopping:
            now = time.monotonic()
            for r in running.values():
                if now - r.asked >= CANCEL_RETRY:
                    r.asked = now
                    r.cancel.cancel()
            skipped += packer.drain()
            for _due, job, _gpus, outcome in waiting:  # the last attempt's result stands
                results.append(_result(job, attempts[job.name], outcome))
            waiting.clear()
        else:
            now = time.monotonic()
            for item in [w for w in waiting if w[0] <= now]:
                waiting.remove(item)
                packer.requeue(replace(item[1], attempt=item[1].attempt + 1), item[2])
            for job, gpus in packer.take():
                start(job, gpus)
        try:
            name, outcome = done.get(timeout=0.2)
        except queue.Empty:
            continue
        r = running.pop(name)
        r.thread.join()
        packer.release(name)
        attempt = Attempt(
            number=r.job.attempt, status=outcome.status, exit_code=outcome.exit_code,
            started=r.started, wall=time.monotonic() - r.t0, message=outcome.message,
            log=outcome.log, assigned=outcome.assigned if outcome.assigned is not None else r.gpus,
        )  # fmt: skip
        attempts.setdefault(name, []).append(attempt)
        last[name] = outcome
        policy = r.job.policy
        if (
            not stopping
            and policy is not None
            and outcome.status in RETRYABLE
            and policy.should_retry(r.job.attempt, _log_tail(outcome.log))
        ):
            waiting.append((time.monotonic() + policy.retry_wait, r.job, r.gpus, outcome))
            options.on_event(
                SuiteEvent(kind="retry", name=name, assigned=r.gpus, attempt=r.job.attempt,
                           result=_result(r.job, attempts[name], outcome))
            )  # fmt: skip
            continue
        result = _result(r.job, attempts[name], outcome)
        results.append(result)
        options.on_event(SuiteEvent(kind="end", name=name, assigned=r.gpus, result=result))
        if options.fail_fast and outcome.status in FAILING:
            stopping = True
    for job in skipped:
        if job.name in attempts:  # a retry that never started: its last attempt stands
            results.append(_result(job, attempts[job.name], last[job.name]))
            continue
        results.append(
            TestResult(name=job.name, gpus=job.gpus, status="skipped", estimate=job.estimate,
                       timeout=job.timeout)
        )  # fmt: skip
    return results
