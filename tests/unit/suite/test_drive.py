"""Attempts driven through a stand-in backend: timeouts stop the attempt, retries are new
attempts after their wait on freed GPUs, every attempt is kept, fail-fast waits for the
final failure."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rocmenv.suite.drive import Cancel, Outcome, RunOptions, SuiteEvent, run_packed
from rocmenv.suite.packer import Job
from rocmenv.suite.policy import TIMEOUT_EXIT, RunPolicy

Script = dict[str, list[tuple[str, float]]]  # test -> per attempt: (pass|fail|hang, seconds)


class Backend:
    def __init__(self, tmp: Path, script: Script) -> None:
        self.tmp, self.script = tmp, script
        self.starts: list[tuple[str, int, float, tuple[int, ...]]] = []
        self.lock = threading.Lock()

    def launch(self, job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        with self.lock:
            self.starts.append((job.name, job.attempt, time.monotonic(), gpus))
        cancel.started()
        what, seconds = self.script[job.name][job.attempt - 1]
        log = self.tmp / f"{job.name}.{job.attempt}.log"
        log.write_text(f"{job.name} attempt {job.attempt}: {what}\n"
                       + ("AssertionError: accuracy too low\n" if what == "fail" else ""))  # fmt: skip
        deadline = time.monotonic() + (3600 if what == "hang" else seconds)
        while time.monotonic() < deadline:
            if cancel.requested:
                return Outcome(status="cancelled", exit_code=137, log=str(log))
            time.sleep(0.01)
        code = 0 if what == "pass" else 1
        return Outcome(status="passed" if code == 0 else "failed", exit_code=code, log=str(log))


def _run(backend: Backend, jobs: list[Job], pool: list[int], **kw: object):
    events: list[SuiteEvent] = []
    results = run_packed(jobs, pool, backend.launch, threading.Event(),
                         RunOptions(on_event=events.append, **kw))  # type: ignore[arg-type]  # fmt: skip
    return {r.name: r for r in results}, events


def test_a_test_over_its_timeout_is_stopped_and_reported_as_timeout(tmp_path: Path) -> None:
    backend = Backend(tmp_path, {"hang": [("hang", 0)], "quick": [("pass", 0.05)]})
    jobs = [
        Job(name="hang", gpus=1, estimate=1, timeout=0.3),
        Job(name="quick", gpus=1, estimate=1, timeout=5),
    ]
    t0 = time.monotonic()
    results, _ = _run(backend, jobs, [0, 1])
    assert time.monotonic() - t0 < 5
    hang = results["hang"]
    assert (hang.status, hang.exit_code) == ("timeout", TIMEOUT_EXIT)
    assert hang.message.startswith("killed after its timeout")
    assert 0.25 < hang.wall < 3
    assert results["quick"].status == "passed"


def test_fail_once_then_pass_is_a_flaky_pass_with_both_attempts(tmp_path: Path) -> None:
    backend = Backend(
        tmp_path, {"flaky": [("fail", 0.05), ("pass", 0.05)], "other": [("pass", 0.1)]}
    )
    policy = RunPolicy(retries=1, retry_wait=0.4, retry_on="AssertionError")
    jobs = [
        Job(name="flaky", gpus=1, estimate=10, policy=policy),
        Job(name="other", gpus=1, estimate=1),
    ]
    results, events = _run(backend, jobs, [0])
    flaky = results["flaky"]
    assert flaky.status == "passed" and flaky.flaky
    assert [(a.number, a.status) for a in flaky.attempts] == [(1, "failed"), (2, "passed")]
    assert flaky.attempts[0].log != flaky.attempts[1].log
    assert [e.kind for e in events if e.name == "flaky"] == ["start", "retry", "start", "end"]
    # the one GPU was given back during the wait: "other" ran between the two attempts
    order = [(name, attempt) for name, attempt, _, _ in backend.starts]
    assert order == [("flaky", 1), ("other", 1), ("flaky", 2)]
    first, second = backend.starts[0][2], backend.starts[2][2]
    assert second - first >= 0.4


def test_no_retry_when_the_log_does_not_match_retry_on(tmp_path: Path) -> None:
    backend = Backend(tmp_path, {"t": [("fail", 0.01), ("pass", 0.01)]})
    policy = RunPolicy(retries=1, retry_wait=0, retry_on="CUDA error")
    results, _ = _run(backend, [Job(name="t", gpus=1, estimate=1, policy=policy)], [0])
    assert results["t"].status == "failed" and len(results["t"].attempts) == 1


def test_a_timeout_is_retried_and_every_attempt_is_kept(tmp_path: Path) -> None:
    backend = Backend(tmp_path, {"t": [("hang", 0), ("hang", 0)]})
    policy = RunPolicy(retries=1, retry_wait=0)
    results, _ = _run(backend, [Job(name="t", gpus=1, estimate=1, timeout=0.2, policy=policy)], [0])
    t = results["t"]
    assert t.status == "timeout" and [a.status for a in t.attempts] == ["timeout", "timeout"]


def test_fail_fast_stops_at_the_final_failure_not_at_a_retried_one(tmp_path: Path) -> None:
    backend = Backend(tmp_path, {
        "flaky": [("fail", 0.05), ("pass", 0.05)], "long": [("pass", 0.5)], "later": [("pass", 0)],
    })  # fmt: skip
    jobs = [
        Job(name="long", gpus=1, estimate=100),
        Job(name="flaky", gpus=1, estimate=50, policy=RunPolicy(retries=1, retry_wait=0)),
        Job(name="later", gpus=2, estimate=1),
    ]
    results, _ = _run(backend, jobs, [0, 1], fail_fast=True)
    assert results["flaky"].status == "passed"  # the failed first attempt did not stop the run
    backend2 = Backend(tmp_path, {"bad": [("fail", 0.05), ("fail", 0.05)], "long": [("hang", 0)],
                                  "later": [("pass", 0)]})  # fmt: skip
    jobs2 = [
        Job(name="long", gpus=1, estimate=100),
        Job(name="bad", gpus=1, estimate=50, policy=RunPolicy(retries=1, retry_wait=0)),
        Job(name="later", gpus=2, estimate=1),
    ]
    results2, _ = _run(backend2, jobs2, [0, 1], fail_fast=True)
    assert results2["bad"].status == "failed" and len(results2["bad"].attempts) == 2
    assert results2["long"].status == "cancelled" and results2["later"].status == "skipped"


def test_a_stop_while_a_retry_waits_keeps_its_last_attempt(tmp_path: Path) -> None:
    backend = Backend(tmp_path, {"t": [("fail", 0.01), ("pass", 0.01)]})
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    results = run_packed([Job(name="t", gpus=1, estimate=1, policy=RunPolicy(retries=1, retry_wait=30))],
                         [0], backend.launch, stop, RunOptions())  # fmt: skip
    (t,) = results
    assert t.status == "failed" and len(t.attempts) == 1


def test_a_new_stop_token_is_neither_requested_nor_timed_out() -> None:
    """``timed_out`` is a bool from the start (results and events carry it), not a falsy None."""
    cancel = Cancel(timeout=5)
    assert cancel.timed_out is False and cancel.requested is False


def test_a_stop_action_registered_after_the_cancel_runs_at_once() -> None:
    cancel, ran = Cancel(), []
    cancel.on_cancel(lambda: ran.append("before"))
    assert ran == []
    cancel.cancel()
    cancel.on_cancel(lambda: ran.append("after"))
    assert ran == ["before", "after"] and cancel.requested


def test_a_stop_action_that_fails_with_our_error_or_an_os_error_does_not_stop_the_others() -> None:
    import pytest

    from rocmenv.errors import EngineError

    cancel, ran = Cancel(), []

    def engine_gone() -> None:
        raise EngineError("the engine went away")

    def no_such_process() -> None:
        raise ProcessLookupError(3, "No such process")

    for action in (engine_gone, no_such_process, lambda: ran.append("kill")):
        cancel.on_cancel(action)
    cancel.cancel()
    assert ran == ["kill"]

    def bug() -> None:
        raise ValueError("a bug is not swallowed")

    stopped = Cancel()
    stopped.cancel()
    with pytest.raises(ValueError, match="a bug is not swallowed"):
        stopped.on_cancel(bug)


def test_a_timed_out_attempt_is_asked_to_stop_again_until_it_has() -> None:
    """A kill that raced the container's start is repeated, every CANCEL_RETRY seconds."""
    cancel, asked = Cancel(timeout=0.05), threading.Event()
    calls: list[float] = []

    def stop() -> None:
        calls.append(time.monotonic())
        if len(calls) >= 2:
            asked.set()

    cancel.on_cancel(stop)
    cancel.started()
    again = asked.wait(10)
    cancel.finish()
    assert again and cancel.timed_out, calls
    assert calls[1] - calls[0] >= 0.9  # spaced by CANCEL_RETRY (1 s), not a busy loop


def test_retry_on_reads_the_logs_last_bytes_decoded_leniently(tmp_path: Path) -> None:
    from rocmenv.suite.drive import _log_tail
    from rocmenv.suite.policy import RETRY_LOG_TAIL

    assert _log_tail(None) == "" and _log_tail(str(tmp_path / "gone.log")) == ""
    small = tmp_path / "small.log"
    small.write_bytes(b"HIP error \xff\n")
    assert _log_tail(str(small)) == "HIP error \ufffd\n"
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * 100 + "é".encode() + b"y" * (RETRY_LOG_TAIL - 1))
    assert _log_tail(str(big)) == "\ufffd" + "y" * (RETRY_LOG_TAIL - 1)  # cut inside the é


def test_the_timeout_clock_starts_once_on_a_daemon_thread_that_says_what_it_is() -> None:
    """Started twice (a backend's retried start), one stop request, not two; the clock never
    holds the interpreter's exit up; a thread dump names it."""
    cancel, calls = Cancel(timeout=0.05), []
    cancel.on_cancel(lambda: calls.append(1))
    before = set(threading.enumerate())
    cancel.started()
    cancel.started()
    (clock,) = set(threading.enumerate()) - before
    assert clock.name == "suite-timeout"
    assert clock.daemon
    time.sleep(0.5)  # within CANCEL_RETRY (1 s) of the timeout: the first request only
    cancel.finish()
    assert calls == [1]


def test_a_launch_that_fails_is_that_tests_error_with_what_went_wrong() -> None:
    from rocmenv.errors import EngineError

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        if job.name == "ours":
            raise EngineError("the engine went away")
        raise KeyError("a bug")

    jobs = [Job(name="ours", gpus=0, estimate=1), Job(name="bug", gpus=0, estimate=1)]
    results = run_packed(jobs, [], launch, threading.Event(), RunOptions())
    by = {r.name: (r.status, r.message) for r in results}
    assert by == {"ours": ("error", "the engine went away"), "bug": ("error", "KeyError: 'a bug'")}


def test_a_test_that_passes_after_its_timeout_fired_stays_passed() -> None:
    """The stop came too late to matter: the command had passed (the container's exit won)."""

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        cancel.started()
        deadline = time.monotonic() + 5
        while not cancel.timed_out and time.monotonic() < deadline:
            time.sleep(0.01)
        return Outcome(status="passed", exit_code=0)

    (result,) = run_packed([Job(name="t", gpus=0, estimate=1, timeout=0.05)], [], launch,
                           threading.Event(), RunOptions())  # fmt: skip
    assert (result.status, result.exit_code) == ("passed", 0)


def test_max_parallel_limits_the_tests_running_at_once(tmp_path: Path) -> None:
    backend = Backend(tmp_path, {n: [("pass", 0.05)] for n in ("a", "b", "c")})
    jobs = [Job(name=n, gpus=1, estimate=1) for n in ("a", "b", "c")]
    _, events = _run(backend, jobs, [0, 1, 2], max_parallel=1)
    running, most = 0, 0
    for event in events:
        running += {"start": 1, "end": -1}[event.kind]
        most = max(most, running)
    assert most == 1 and len(events) == 6


def test_each_attempt_runs_on_a_daemon_thread_named_for_its_test() -> None:
    """A thread dump names the test; a stuck launch never holds the interpreter's exit up."""
    seen: list[tuple[str, bool]] = []

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        seen.append((threading.current_thread().name, threading.current_thread().daemon))
        return Outcome(status="passed", exit_code=0)

    run_packed([Job(name="t.py", gpus=0, estimate=1)], [], launch, threading.Event(), RunOptions())
    assert seen == [("suite:t.py", True)]


def test_a_retry_runs_first_on_its_own_lane_and_every_start_says_gpus_and_attempt(
    tmp_path: Path,
) -> None:
    backend = Backend(tmp_path, {"a": [("pass", 0.5)], "b": [("fail", 0.02), ("pass", 0.02)],
                                 "c": [("pass", 0.02)]})  # fmt: skip
    jobs = [Job(name="a", gpus=1, estimate=100), Job(name="c", gpus=1, estimate=40),
            Job(name="b", gpus=1, estimate=50, policy=RunPolicy(retries=1, retry_wait=0))]  # fmt: skip
    t0 = time.time()
    results, events = _run(backend, jobs, [0, 1])
    starts = [(e.name, e.assigned, e.attempt) for e in events if e.kind == "start"]
    assert starts == [("a", (0,), 1), ("b", (1,), 1), ("b", (1,), 2), ("c", (1,), 1)]
    assert all(r.started is not None and t0 <= r.started <= time.time()
               for r in results.values())  # fmt: skip
    assert results["b"].started == results["b"].attempts[0].started
    assert [a.assigned for a in results["b"].attempts] == [(1,), (1,)]
    (retry,) = [e for e in events if e.kind == "retry"]
    assert retry.result is not None
    assert (retry.name, retry.assigned, retry.attempt, retry.result.status) == (
        "b", (1,), 1, "failed"
    )  # fmt: skip
    ends = {e.name: (e.assigned, e.result and e.result.status) for e in events if e.kind == "end"}
    assert ends == {"a": ((0,), "passed"), "b": ((1,), "passed"), "c": ((1,), "passed")}


def test_the_gpus_a_backend_reports_are_the_ones_recorded() -> None:
    """Slurm's allocation, not the pool's indices the packer handed out."""

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        return Outcome(status="passed", exit_code=0, assigned=(7,))

    (r,) = run_packed([Job(name="t", gpus=1, estimate=1)], [0], launch, threading.Event(),
                      RunOptions())  # fmt: skip
    assert r.assigned == (7,) and [a.assigned for a in r.attempts] == [(7,)]


def test_a_stop_asks_each_running_test_again_each_second_and_skips_the_rest() -> None:
    stop, asked = threading.Event(), []

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        cancel.on_cancel(lambda: asked.append(time.monotonic()))
        stop.set()
        time.sleep(1.5)  # ignores the first request, and the second
        return Outcome(status="failed", exit_code=137)

    results = run_packed([Job(name="a", gpus=1, estimate=2), Job(name="b", gpus=1, estimate=1)],
                         [0], launch, stop, RunOptions())  # fmt: skip
    assert {r.name: (r.status, r.gpus) for r in results} == {
        "a": ("cancelled", 1), "b": ("skipped", 1)
    }  # fmt: skip
    assert 1 <= len(asked) <= 3, asked  # at 0 s and ~1 s, not every 0.2 s turn of the loop


def test_a_stop_before_a_queued_retry_started_keeps_its_last_attempt(tmp_path: Path) -> None:
    """The retry was due and queued, but its GPU was busy when the stop came."""
    backend = Backend(tmp_path, {"flaky": [("fail", 0.02), ("pass", 0.02)], "long": [("hang", 0)],
                                 "later": [("pass", 0)]})  # fmt: skip
    stop = threading.Event()
    threading.Timer(0.8, stop.set).start()
    jobs = [Job(name="flaky", gpus=1, estimate=100, policy=RunPolicy(retries=1, retry_wait=0.3)),
            Job(name="long", gpus=1, estimate=50), Job(name="later", gpus=1, estimate=1)]  # fmt: skip
    results = run_packed(jobs, [0], backend.launch, stop, RunOptions())
    by = {r.name: (r.status, len(r.attempts)) for r in results}
    assert by == {"flaky": ("failed", 1), "long": ("cancelled", 1), "later": ("skipped", 0)}


def test_results_keep_the_estimate_timeout_and_last_log_and_a_stopped_error_is_cancelled(
    tmp_path: Path,
) -> None:
    from rocmenv.errors import EngineError

    stop = threading.Event()
    log = tmp_path / "a.log"
    log.write_text("a\n")

    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        if job.name == "ok":
            return Outcome(status="passed", exit_code=0, log=str(log))
        stop.set()
        while not cancel.requested:
            time.sleep(0.01)
        raise EngineError("the container was removed under us")  # the stop's doing

    jobs = [Job(name="ok", gpus=1, estimate=9, timeout=30), Job(name="stopped", gpus=1, estimate=8),
            Job(name="left", gpus=1, estimate=7, timeout=20)]  # fmt: skip
    results = {r.name: r for r in run_packed(jobs, [0], launch, stop, RunOptions())}
    ok, left = results["ok"], results["left"]
    assert (ok.estimate, ok.timeout, ok.log) == (9, 30, str(log))
    assert results["stopped"].status == "cancelled"
    assert (left.status, left.estimate, left.timeout) == ("skipped", 7, 20)


def test_the_runtime_learned_is_the_commands_own_and_each_retry_names_its_attempt(
    tmp_path: Path,
) -> None:
    def launch(job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        return Outcome(status="passed", exit_code=0, runtime=2.5 if job.name == "timed" else None)

    jobs = [Job(name="timed", gpus=0, estimate=1), Job(name="plain", gpus=0, estimate=1)]
    by = {r.name: r for r in run_packed(jobs, [], launch, threading.Event(), RunOptions())}
    assert by["timed"].runtime == 2.5
    assert by["plain"].runtime == by["plain"].attempts[-1].wall
    backend = Backend(tmp_path, {"t": [("fail", 0.01), ("fail", 0.01), ("pass", 0.01)]})
    policy = RunPolicy(retries=2, retry_wait=0)
    _, events = _run(backend, [Job(name="t", gpus=1, estimate=1, policy=policy)], [0])
    assert [e.attempt for e in events if e.kind == "retry"] == [1, 2]
