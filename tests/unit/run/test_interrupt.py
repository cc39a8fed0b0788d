"""The run's signal state (rocmenv.run.interrupt): real signals, sent to this process or to one
of its threads, never a mock. The regression at the heart of issue 18: a signal the kernel
delivers to a worker thread while the main thread waits must still wake the main thread.

Every test runs in a forked child (pytest-forked): "this process" is the child, so a signal
the code under test fails to catch ends that child — a failed test with its name — never
the test runner."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rocmenv.run.interrupt import Interrupted, SignalWatch

HANG = 30.0  # a ceiling that only catches a hang

pytestmark = pytest.mark.forked


def test_a_signal_delivered_to_a_worker_thread_wakes_the_waiting_main_thread() -> None:
    release = threading.Event()

    def work() -> str:
        # the worker takes the signal itself, as the kernel may choose: the main thread is
        # blocked meanwhile (a Thread.join()/Queue.get() there would never wake)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        release.wait(HANG)
        return "done"

    with SignalWatch() as watch:
        job = watch.start(work, name="test")
        with pytest.raises(Interrupted) as stopped:
            watch.result(job)
        assert not job.finished()  # the wait ended at the signal, not when the work did
        release.set()
    assert stopped.value.signum == signal.SIGINT


def test_a_signal_before_the_wait_is_not_missed_and_later_ones_are_counted() -> None:
    with SignalWatch() as watch:
        os.kill(os.getpid(), signal.SIGTERM)
        assert watch.first() == signal.SIGTERM
        job = watch.start(lambda: 1, name="test")
        with pytest.raises(Interrupted):  # a signal received earlier still interrupts
            watch.result(job)
        os.kill(os.getpid(), signal.SIGINT)
        assert watch.received == (signal.SIGTERM, signal.SIGINT)
        assert watch.first() == signal.SIGTERM


def test_a_finished_job_gives_its_value_or_raises_its_error() -> None:
    def fails() -> None:
        raise ValueError("from the job")

    with SignalWatch() as watch:
        assert watch.result(watch.start(lambda: 42, name="ok")) == 42
        with pytest.raises(ValueError, match="from the job"):
            watch.result(watch.start(fails, name="fails"))


def test_wait_ends_at_a_new_signal_at_the_timeout_or_when_ready() -> None:
    with SignalWatch() as watch:
        start = time.monotonic()
        assert watch.wait(lambda: False, timeout=0.05, since=0) is False
        assert time.monotonic() - start >= 0.05
        assert watch.wait(lambda: True, since=0) is True
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGHUP))
        timer.start()
        assert watch.wait(lambda: False, timeout=HANG, since=0) is False  # woken by the signal
        timer.join()
        assert watch.received == (signal.SIGHUP,)
        # a signal that came before the call counts when the caller says it has not seen it
        os.kill(os.getpid(), signal.SIGINT)
        assert watch.wait(lambda: False, timeout=HANG, since=1) is False
        assert watch.wait(lambda: False, timeout=0.01, since=2) is False  # the timeout


def test_a_terminal_resize_is_not_an_interrupt() -> None:
    resized = []
    old = signal.signal(signal.SIGWINCH, lambda *_: resized.append(1))
    try:
        with SignalWatch() as watch:
            os.kill(os.getpid(), signal.SIGWINCH)
            assert watch.wait(lambda: bool(resized), timeout=HANG, since=0)
            assert watch.first() is None
            assert watch.count() == 0
    finally:
        signal.signal(signal.SIGWINCH, old)


def test_leaving_restores_the_handlers_and_the_wakeup_descriptor() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with SignalWatch():
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]
    assert {sig: signal.getsignal(sig) for sig in before} == before
    assert signal.set_wakeup_fd(-1) == -1  # nothing left installed


def test_off_the_main_thread_nothing_is_installed_and_jobs_still_wake_the_wait() -> None:
    before = signal.getsignal(signal.SIGINT)  # pytest's, or SIG_IGN on an xdist worker
    out: list[object] = []

    def runner() -> None:
        with SignalWatch() as watch:
            out.append(signal.getsignal(signal.SIGINT))
            out.append(watch.result(watch.start(lambda: "value", name="inner")))

    thread = threading.Thread(target=runner)
    thread.start()
    thread.join(HANG)
    assert out == [before, "value"]
