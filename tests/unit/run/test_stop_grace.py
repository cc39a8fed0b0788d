"""The grace period between the forwarded signal and SIGKILL (rocmenv.run.execute, issue 34):
a container that ends by itself within ``STOP_GRACE`` after the first signal is never killed;
one still running when it has passed is. Judged by what the engine was asked (no timed
assertion): the in-memory engine's program ends by itself after its ``sleep``. Forked: the
signal goes to this test's own process."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rocmenv.container.runspec import Overrides
from rocmenv.run.execute import RunRequest, execute
from tests.support.fake_engine import FakeEngine
from tests.unit.run.test_execute import (  # noqa: F401 - fixtures
    HANG,
    Notes,
    _running,
    _when,
    ctx_in,
    engine,
    project,
)

pytestmark = pytest.mark.forked


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_container_that_ends_within_the_grace_period_is_not_killed(
    project: Path,  # noqa: F811 - test_execute's fixture
    engine: FakeEngine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    sig: signal.Signals,
) -> None:
    monkeypatch.setattr("rocmenv.run.execute.STOP_GRACE", HANG)  # far more than it needs
    request = RunRequest(overrides=Overrides(command=("sleep", "0.5")))
    helper = _when(lambda: _running(engine), lambda: os.kill(os.getpid(), sig))
    status = execute(ctx_in(project), request, Notes())
    helper.join(HANG)
    assert status == 128 + sig  # the signal rocmenv received
    assert [s for _, s in engine.kills] == [sig.name]  # forwarded; no SIGKILL
    assert engine.alive == set()


def test_a_container_still_running_after_the_grace_period_is_killed(
    project: Path,  # noqa: F811 - test_execute's fixture
    engine: FakeEngine,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("rocmenv.run.execute.STOP_GRACE", 0.3)
    request = RunRequest(overrides=Overrides(command=("sleep", "60")))  # ignores SIGTERM (PID 1)
    helper = _when(lambda: _running(engine), lambda: os.kill(os.getpid(), signal.SIGTERM))
    status = execute(ctx_in(project), request, Notes())
    helper.join(HANG)
    assert status == 143
    assert [s for _, s in engine.kills] == ["SIGTERM", "SIGKILL"]
    assert engine.alive == set()
