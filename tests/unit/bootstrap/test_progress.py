"""How bootstrap's steps follow each other: disabled, failed, skipped, always."""

from __future__ import annotations

from typing import Any

import pytest

from rocmenv.bootstrap.progress import SKIPPED, Progress, off
from rocmenv.errors import ConfigError, StepFailed


class Done:
    def __init__(self, text: str) -> None:
        self.text = text

    def summary(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text}


class Clock:
    """Each reading is one second after the last."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def must_not_run() -> Done:
    pytest.fail("the step ran")


def test_a_step_that_succeeds_is_reported_with_its_outcome_and_clock_time() -> None:
    progress = Progress(clock=Clock())
    assert progress.run("one", off(True, "--no-one"), lambda: Done("fine")) is not None
    (step,) = progress.steps
    assert (step.name, step.status, step.summary, step.details) == (
        "one", "ok", "fine", {"text": "fine"})  # fmt: skip
    assert step.duration_s == 1.0


def test_a_disabled_step_does_not_run_and_says_why() -> None:
    progress = Progress(clock=Clock())
    assert progress.run("one", off(False, "--no-one"), must_not_run) is None
    assert [(s.status, s.summary) for s in progress.steps] == [("disabled", "--no-one")]
    assert progress.error is None


def test_a_failure_skips_the_later_steps_but_not_one_that_always_runs() -> None:
    def fails() -> Done:
        raise StepFailed("git fetch failed\nthe output", details={"commands": ["git"]})

    progress = Progress(clock=Clock())
    progress.run("one", None, fails)
    progress.run("two", None, must_not_run)
    progress.run("three", off(False, "--no-three"), must_not_run)  # skipped wins
    data = progress.always("report", lambda: ({"x": 1}, "ok", "reported", {}))
    assert data == {"x": 1}
    assert [(s.name, s.status) for s in progress.steps] == [
        ("one", "failed"), ("two", "skipped"), ("three", "skipped"), ("report", "ok")]  # fmt: skip
    failed = progress.steps[0]
    assert failed.summary == "git fetch failed"  # the first line; the rest is in the error
    assert failed.details == {"commands": ["git"]}
    assert progress.steps[1].summary == SKIPPED
    assert isinstance(progress.error, StepFailed)


def test_a_failure_that_is_not_a_step_failure_has_no_details() -> None:
    def fails() -> Done:
        raise ConfigError("cannot write the launcher")

    progress = Progress(clock=Clock())
    progress.run("shims", None, fails)
    assert progress.steps[0].details == {}
    assert progress.error is not None and progress.error.exit_code == 2


def test_an_unexpected_exception_is_not_swallowed() -> None:
    def bug() -> Done:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        Progress(clock=Clock()).run("one", None, bug)
