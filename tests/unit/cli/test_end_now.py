"""A finished command's process ends without Python's shutdown only when nothing would be lost."""

from __future__ import annotations

import sys
import threading

import pytest

from rocmenv.cli import _only_daemon_threads_left


def test_a_running_worker_thread_keeps_the_usual_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "coverage", raising=False)
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=False)
    worker.start()
    try:
        assert not _only_daemon_threads_left()
    finally:
        release.set()
        worker.join()
    daemon = threading.Thread(target=release.wait, daemon=True)
    daemon.start()
    assert _only_daemon_threads_left()


def test_a_process_measured_by_coverage_ends_the_usual_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "coverage", sys)
    assert not _only_daemon_threads_left()


def test_a_profiled_process_ends_the_usual_way(monkeypatch: pytest.MonkeyPatch) -> None:
    import cProfile

    monkeypatch.delitem(sys.modules, "coverage", raising=False)
    profile = cProfile.Profile()
    profile.enable()
    try:
        profiled = _only_daemon_threads_left()
    finally:
        profile.disable()
    assert not profiled
