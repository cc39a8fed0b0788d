"""rocmenv.run.execute's orchestration against an in-memory engine: what reaches the engine, which exit
status comes back, and that no container outlives the run. The same paths against the real
Docker engine are in tests/integration/test_run*.py; this file checks the decisions fast."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import signal
import struct
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocmenv.container.labels import LABEL_IMAGE_DIGEST, LABEL_OWNER_PID, LABEL_SESSION
from rocmenv.container.runspec import Overrides
from rocmenv.context import Context
from rocmenv.engine.protocol import ImageInfo
from rocmenv.errors import EngineError, EngineStartError, RunNotStarted, StartFailure
from rocmenv.run.execute import RunRequest, execute
from rocmenv.run.stages import Stage
from rocmenv.settings.resolve import Flags
from tests.support.fake_engine import FakeEngine

DIGEST = "sha256:" + "d" * 64
IMAGE = "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"


class Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.warnings: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def warning(self, text: str) -> None:
        self.warnings.append(text)

    def pull(self, settings: Any, engine: Any, image: str) -> None:
        self.notes.append(f"pulling {image}")
        engine.pull(image)
        self.notes.append(f"pulled {image}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "rocmenv.toml").write_text(
        'default-profile = "ci"\n[profiles.ci]\nextends = "cpu"\nimage = "rocm/sgl-dev"\n'
        'tag = "v0.5.8-rocm700-mi30x-20260215"\nmount-checkout = false\n'
    )
    return tmp_path


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine(
        images={
            IMAGE: ImageInfo(
                id="sha256:" + "1" * 64,
                repo_digests=(f"rocm/sgl-dev@{DIGEST}",),
                env=(("PYTHONPATH", "/image/lib"),),
            )
        }
    )
    kinds: list[str] = []

    def make(kind: str, _ctx: Context, **_options: object) -> FakeEngine:
        kinds.append(kind)
        return fake

    monkeypatch.setattr("rocmenv.run.execute.make_engine", make)
    fake.kinds = kinds  # type: ignore[attr-defined]
    return fake


def ctx_in(project: Path, **env: str) -> Context:
    return Context(
        env={"HOME": str(project), "XDG_CACHE_HOME": str(project / ".cache"), **env},
        cwd=project,
        stdin=io.StringIO(),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )


def run(project: Path, engine: FakeEngine, request: RunRequest | None = None, **env: str) -> int:
    return execute(ctx_in(project, **env), request or RunRequest(), Notes())


def test_the_engine_gets_the_complete_spec_once_labelled_named_and_with_the_launcher(
    project: Path, engine: FakeEngine
) -> None:
    assert run(project, engine, RunRequest(overrides=Overrides(command=("true",)))) == 0
    ((cid, spec),) = engine.created.items()
    labels = spec.label_map
    assert engine.names[cid] == f"rocmenv-{labels[LABEL_SESSION]}"
    assert labels[LABEL_IMAGE_DIGEST] == DIGEST  # from the engine's RepoDigests
    assert labels[LABEL_OWNER_PID].isdigit()
    assert spec.image == "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
    assert spec.command == ("true",)
    assert spec.env_values["PYTHONPATH"] == "/opt/rocmenv/launcher:/image/lib"
    assert any(m.target == "/opt/rocmenv/launcher" and m.readonly for m in spec.mounts)
    assert engine.alive == set()  # removed


def test_no_shims_means_no_launcher_and_the_image_pythonpath_untouched(
    project: Path, engine: FakeEngine
) -> None:
    assert run(project, engine, RunRequest(flags=Flags(shims=False))) == 0
    (spec,) = engine.created.values()
    assert "PYTHONPATH" not in spec.env_values
    assert not spec.mounts


def test_the_command_exit_status_is_returned(project: Path, engine: FakeEngine) -> None:
    engine.exit_code = 3
    assert run(project, engine) == 3
    assert engine.alive == set()


@pytest.mark.parametrize("untrusted", [False, True])
def test_the_exit_status_is_told_before_the_removal_unless_untrusted(
    project: Path, engine: FakeEngine, untrusted: bool
) -> None:
    engine.exit_code = 3
    told: list[tuple[int, set[str]]] = []
    request = RunRequest(flags=Flags(untrusted=untrusted))
    status = execute(
        ctx_in(project),
        request,
        Notes(),
        on_exit=lambda code: told.append((code, set(engine.alive))),
    )
    assert status == 3
    assert engine.alive == set()
    if untrusted:  # its cleanup sweep still reports: nothing is told early
        assert told == []
    else:
        ((code, alive),) = told
        assert code == 3
        assert alive == set(engine.created)  # the container still existed


def test_a_failed_create_is_exit_125_keeps_its_cause_and_sweeps_what_it_made(
    project: Path, engine: FakeEngine
) -> None:
    engine.create_error = EngineError("conflict: name in use")
    engine.leave_behind = True
    with pytest.raises(RunNotStarted) as info:
        run(project, engine)
    assert info.value.exit_code == 125
    assert info.value.__cause__ is engine.create_error  # --debug shows the engine's error
    assert engine.alive == set()  # the sweep by session label removed the leftover


@pytest.mark.parametrize("code", [126, 127])
def test_a_missing_or_non_executable_command_returns_its_code(
    project: Path, engine: FakeEngine, code: int
) -> None:
    engine.start_error = EngineStartError(
        "exec failed", failure=StartFailure(message="not found", exit_code=code)
    )
    assert run(project, engine) == code
    assert engine.alive == set()


def test_an_option_the_engine_refuses_at_start_is_exit_125_naming_it(
    project: Path, engine: FakeEngine
) -> None:
    engine.start_error = EngineStartError(
        "refused",
        failure=StartFailure(message="the engine refused --ulimit memlock=-1", option="--ulimit"),
    )
    with pytest.raises(RunNotStarted, match="memlock"):
        run(project, engine)
    assert engine.alive == set()


def test_keep_keeps_the_container_and_says_how_to_remove_it(
    project: Path, engine: FakeEngine
) -> None:
    reporter = Notes()
    assert execute(ctx_in(project), RunRequest(keep=True), reporter) == 0
    (cid,) = engine.alive
    assert any(f"docker rm -f {cid[:12]}" in n for n in reporter.notes)


def test_pull_policy_never_refuses_a_missing_image_and_missing_pulls_it(
    project: Path, engine: FakeEngine
) -> None:
    engine.present = False
    with pytest.raises(RunNotStarted, match="--pull is never"):
        run(project, engine, RunRequest(flags=Flags(pull="never")))
    assert engine.created == {}
    assert run(project, engine, RunRequest(flags=Flags(pull="missing"))) == 0
    assert engine.pulled == ["rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"]


def test_engine_choice_follows_the_precedence_rule(project: Path, engine: FakeEngine) -> None:
    kinds: list[str] = engine.kinds  # type: ignore[attr-defined]
    (project / "rocmenv.toml").write_text(
        (project / "rocmenv.toml").read_text() + 'engine = "docker-cli"\n'
    )
    run(project, engine, ROCMENV_ENGINE="podman")
    run(project, engine, RunRequest(flags=Flags(engine="docker-api")), ROCMENV_ENGINE="podman")
    run(project, engine)
    assert kinds == ["podman", "docker-api", "docker-cli"]


# -- interrupts: real signals, the stages of rocmenv.run.stages ----------------------------
HANG = 30.0  # a ceiling that only catches a hang


def _thread_id(name: str) -> int | None:
    """The id of the running thread of that name (None: none yet, or not running yet)."""
    for thread in threading.enumerate():
        if thread.name == name and thread.ident:
            return thread.ident
    return None


def _when(predicate: Callable[[], bool], then: Callable[[], None]) -> threading.Thread:
    """``then()`` on a helper thread once ``predicate()`` holds (polled; HANG at most)."""

    def watch() -> None:
        deadline = time.monotonic() + HANG
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.005)
        then()

    helper = threading.Thread(target=watch, daemon=True)
    helper.start()
    return helper


def _running(engine: FakeEngine) -> bool:
    return any(box.state == "running" for box in list(engine.containers.values()))


@pytest.mark.forked  # it signals its own process: the forked child, never pytest
def test_an_interrupt_the_image_thread_takes_ends_the_run_while_the_pull_still_runs(
    project: Path, engine: FakeEngine
) -> None:
    engine.present = False
    release = threading.Event()

    class SlowPull(Notes):
        def pull(self, settings: Any, engine: Any, image: str) -> None:
            # the kernel may hand the signal to this thread: the main thread must still wake
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            release.wait(HANG)

    try:
        status = execute(ctx_in(project), RunRequest(), SlowPull())
        pulling = not release.is_set()
    finally:
        release.set()
    assert status == 130
    assert pulling  # it did not wait for the pull to end
    assert engine.created == {}


@pytest.mark.forked  # it signals its own process: the forked child, never pytest
def test_an_interrupt_the_waiting_thread_takes_is_forwarded_then_the_container_killed(
    project: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rocmenv.run.execute.STOP_GRACE", 0.2)
    request = RunRequest(overrides=Overrides(command=("sleep", "60")))
    helper = _when(
        lambda: _running(engine) and _thread_id("rocmenv-wait") is not None,
        # to the thread waiting for the exit (the old design's lost interrupt)
        lambda: signal.pthread_kill(_thread_id("rocmenv-wait") or 0, signal.SIGTERM),
    )
    status = execute(ctx_in(project), request, Notes())
    helper.join(HANG)
    assert status == 143
    ((cid, _),) = engine.created.items()
    assert [s for c, s in engine.kills if c == cid] == ["SIGTERM", "SIGKILL"]  # sleep ignored it
    assert engine.alive == set()


@pytest.mark.forked  # it signals its own process: the forked child, never pytest
def test_a_second_interrupt_kills_at_once(
    project: Path, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rocmenv.run.execute.STOP_GRACE", HANG)  # only the second signal ends it
    request = RunRequest(overrides=Overrides(command=("sleep", "60")))

    def twice() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        while not engine.kills:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    helper = _when(lambda: _running(engine), twice)
    start = time.monotonic()
    status = execute(ctx_in(project), request, Notes())
    helper.join(HANG)
    assert status == 130
    assert [s for _, s in engine.kills] == ["SIGINT", "SIGKILL"]
    assert time.monotonic() - start < HANG  # not the grace period
    assert engine.alive == set()


STAGES = [stage.value for stage in Stage]


@pytest.mark.forked  # it signals its own process: the forked child, never pytest
@pytest.mark.parametrize("stage", STAGES)
def test_an_interrupt_parked_at_each_stage_ends_the_run_with_no_container_left(
    project: Path, engine: FakeEngine, tmp_path: Path, stage: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr("rocmenv.run.execute.STOP_GRACE", 0.2)
    parked = tmp_path / "parked"
    finishes = stage in ("removing", "cleanup")  # reached without a signal
    command = ("true",) if finishes else ("sleep", "60")

    def interrupt() -> None:
        if stage == "stopping":  # reached by a first signal while the command runs
            _when(lambda: _running(engine), lambda: os.kill(os.getpid(), signal.SIGTERM)).join()
        deadline = time.monotonic() + HANG
        while not parked.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=interrupt, daemon=True)
    helper.start()
    status = execute(
        ctx_in(project, ROCMENV_TEST_PARK=f"{stage}:{parked}"),
        RunRequest(overrides=Overrides(command=command)),
        Notes(),
    )
    helper.join(HANG)
    assert parked.read_text().split()[0] == stage  # it was parked there
    assert status == (143 if stage == "stopping" else 130)  # the first signal's
    assert engine.alive == set()
    created = stage not in ("start-up", "image", "create")
    assert bool(engine.created) == created


def test_the_timings_note_lists_every_stage_a_run_went_through(
    project: Path, engine: FakeEngine
) -> None:
    reporter = Notes()
    assert execute(ctx_in(project, ROCMENV_TIMINGS="1"), RunRequest(), reporter) == 0
    (line,) = [n for n in reporter.notes if n.startswith("timings:")]
    names = [part.split()[0] for part in line.removeprefix("timings: ").split("; ")[0].split(", ")]
    assert names == ["start-up", "image", "create", "attach", "start", "running", "removing",
                     "cleanup"]  # fmt: skip


def test_a_tty_container_is_created_with_the_terminals_size(
    project: Path, engine: FakeEngine
) -> None:
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 37, 111, 0, 0))
    with os.fdopen(secondary, "w") as terminal:
        ctx = replace(ctx_in(project), stdout=terminal, stdin=terminal)
        assert execute(ctx, RunRequest(tty=True), Notes()) == 0
    os.close(primary)
    assert list(engine.terminals.values()) == [(True, (37, 111))]
