"""An interrupt at every stage boundary of ``rocmenv run``, on every engine.

The test-only hook ``ROCMENV_TEST_PARK=STAGE:FILE`` parks the run at the start of a stage
(rocmenv.run.stages); the test sees FILE, checks what exists on the engine at that moment,
signals rocmenv, and expects 128+N and no container — deterministic, no sleeping. SIGINT
and SIGTERM alternate over stages and engines, so each stage meets both."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rocmenv.run.stages import Stage
from tests.support.run_project import (  # noqa: F401 - fixtures
    ENGINES,
    Project,
    engine_fixture,
    every_engine,
    inspect,
    project_fixture,
    wait_for,
)

HANG = 120.0  # a ceiling that only catches a hang
STAGES = [stage.value for stage in Stage]
READY = "trap-ready"  # written in the working directory (the checkout, mounted)
TRAPPING = f'trap "echo got-$1; exit 7" INT TERM; touch {READY}; while :; do sleep 0.1; done'
# what exists on the engine while the run is parked at the start of each stage
NO_CONTAINER, CREATED, RUNNING = "none", "created", "running"
STATE_AT = {"start-up": NO_CONTAINER, "image": NO_CONTAINER, "create": NO_CONTAINER,
            "attach": CREATED, "start": CREATED, "running": RUNNING}  # fmt: skip


def _state(project: Project) -> str:
    found = project.containers()
    if not found:
        return NO_CONTAINER
    assert len(found) == 1, found
    return RUNNING if inspect(found[0])["State"]["Running"] else CREATED


def _command(stage: str) -> tuple[str, ...]:
    if stage == "running":
        return ("sh", "-c", TRAPPING, "sh", "sig")  # shows that the signal reached it
    if stage in ("removing", "cleanup"):
        return ("sh", "-c", "exit 3")  # reached without a signal: the command ends by itself
    return ("sleep", "300")  # PID 1 without a handler: ignores SIGINT/SIGTERM


@pytest.mark.parametrize("stage", STAGES)
@every_engine
def test_an_interrupt_at_each_stage_ends_the_run_and_leaves_no_container(
    project: Project, engine: str, stage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    param = request.node.callspec.params["engine"]
    sig = (signal.SIGINT, signal.SIGTERM)[(STAGES.index(stage) + ENGINES.index(param)) % 2]
    parked = tmp_path / "parked"
    proc = project.popen(
        "run", "--engine", engine, "--profile", "plain", "--image", project.image,
        "--", *_command(stage), env={"ROCMENV_TEST_PARK": f"{stage}:{parked}"},
    )  # fmt: skip
    first = sig
    try:
        if stage == "stopping":  # reached through a first signal while the command runs
            assert wait_for(lambda: _state(project) == RUNNING, HANG), "it never ran"
            first = signal.SIGTERM if sig == signal.SIGINT else signal.SIGINT
            proc.send_signal(first)
        assert wait_for(parked.exists, HANG, interval=0.02), f"never parked at {stage}"
        assert parked.read_text().split()[0] == stage
        if stage in STATE_AT:
            assert _state(project) == STATE_AT[stage]
        if stage == "running":  # the signal must meet the trap, however slow the start
            assert wait_for((project.cwd / READY).exists, HANG), "the trap was never installed"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + first, err
    assert "Traceback" not in err
    if stage == "running":
        assert "got-sig" in out  # the container's trap ran: the signal was forwarded
    assert project.containers() == []


def test_the_park_switch_is_checked_like_any_input(project: Project) -> None:
    done = project.run(
        "run", "--engine", "docker-api", "--profile", "plain", "--image", project.image,
        "--", "true", env={"ROCMENV_TEST_PARK": "nosuchstage:/tmp/x"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "ROCMENV_TEST_PARK" in done.stderr and "running" in done.stderr
    assert "Traceback" not in done.stderr
    assert project.containers() == []


def test_unset_the_hook_is_invisible(project: Project) -> None:
    done = project.run(
        "run", "--engine", "docker-api", "--profile", "plain", "--image", project.image,
        "--", "sh", "-c", "echo ran",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr
    assert "park" not in done.stderr.lower()
