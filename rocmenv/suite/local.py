"""The local backend: each test in its own container through the run pipeline.

:func:`run_in_container` is the one place the suite calls :mod:`rocmenv.run.execute`: the same
image choice (the lock's digest), shims, mounts and untrusted policy as ``rocmenv run``,
with the test's GPUs as ``--gpus 0,3`` (exactly those render nodes + visible-device
variables). The container's output and rocmenv's notes go to the test's log file.

Stopping: the container id arrives through ``on_created`` (the test's timeout starts then);
a cancelled or timed-out test's container gets SIGTERM, then SIGKILL when asked again a
second later (the run pipeline then removes it), and a test cancelled before its container
exists never starts one. Each attempt of a retried test is a new container with its own log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from rocmenv.context import Context
from rocmenv.errors import RocmenvError, SuiteTestCancelled
from rocmenv.settings.resolve import Flags
from rocmenv.suite.drive import Cancel, Outcome, Status
from rocmenv.suite.packer import Job


class LogReporter:
    """The run pipeline's notes and warnings, into the test's log."""

    def __init__(self, stream: TextIO, ctx: Context | None = None) -> None:
        self.stream = stream
        self.ctx = ctx or Context(stderr=stream)

    def note(self, text: str) -> None:
        self.stream.write(f"rocmenv: {text}\n")
        self.stream.flush()

    def warning(self, text: str) -> None:
        self.stream.write(f"rocmenv: warning: {text}\n")
        self.stream.flush()

    def pull(self, settings: Any, engine: Any, image: str) -> object:
        """Plain progress lines into the log (retries, disk budget: :mod:`rocmenv.run.pull`)."""
        from rocmenv.run.progress import pull_with_display

        return pull_with_display(self.ctx, settings, engine, image)


def run_in_container(
    ctx: Context,
    *,
    profile: str | None,
    gpus: str,
    command: tuple[str, ...],
    flags: Flags,
    log: TextIO,
    on_created: Callable[[str], None],
    on_exit: Callable[[int], None] | None = None,
    output: Path | None = None,
) -> int:
    """The adapter to the run pipeline (re-wire here when its API moves); ``on_exit``: the
    command's status before the container's removal (:func:`rocmenv.run.execute.execute`);
    ``output``: where the test's output directory goes (``--output``)."""
    from rocmenv.container.runspec import Overrides
    from rocmenv.run.execute import RunRequest, execute

    test_ctx = Context(
        env=ctx.env, cwd=ctx.cwd, stdout=log, stderr=log, debug=ctx.debug,
        config_path=ctx.config_path,
    )  # fmt: skip
    request = RunRequest(
        flags=replace(flags, profile=profile),
        overrides=Overrides(gpus=gpus, command=command),
        tty=False,
        interactive=False,
        output=output,
    )
    return execute(
        test_ctx, request, LogReporter(log, test_ctx), on_created=on_created, on_exit=on_exit
    )


def warm_launcher(ctx: Context) -> None:
    """Build the shim launcher bundle once, before tests start in parallel."""
    with contextlib.suppress(ImportError, RocmenvError, OSError):
        from rocmenv.shims.bundle import prepare_launcher

        prepare_launcher(ctx)


def gpus_arg(gpus: tuple[int, ...]) -> str:
    return ",".join(str(g) for g in gpus) if gpus else "none"


def open_log(path: Path, ctx: Context) -> TextIO:
    """A test's log, created anew without following a link the checkout planted (an old log
    or a link of that name is replaced, never written through: :mod:`rocmenv.hostfs`)."""
    import os

    from rocmenv.hostfs import create_file

    return os.fdopen(create_file(path, within=ctx.checkout), "w", encoding="utf-8")


def output_for(base: Path | None, job: Job) -> Path | None:
    """Where an attempt's output directory goes: ``base/<the log's name>`` (the same
    attempt's log is ``<name>.log``)."""
    return None if base is None else base / log_name(job.name, job.attempt)[: -len(".log")]


def log_name(test: str, attempt: int = 1) -> str:
    """``test/a.py`` → ``test__a.py.log``; a retry: ``test__a.py.attempt-2.log``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in test.replace("/", "__"))
    return f"{safe}.log" if attempt <= 1 else f"{safe}.attempt-{attempt}.log"


@dataclass(frozen=True, kw_only=True)
class LocalBackend:
    ctx: Context
    profile: str | None
    flags: Flags  # engine, untrusted
    commands: dict[str, tuple[str, ...]]  # test name -> command
    log_dir: Path
    kill_engine: Any
    output: Path | None = None  # --output: each test's output directory to output/TEST

    def launch(self, job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        log_path = self.log_dir / log_name(job.name, job.attempt)

        def created(container_id: str) -> None:
            if cancel.requested:
                raise SuiteTestCancelled(f"{job.name} was stopped before it started")
            cancel.started()  # the timeout runs from here (a pull does not count)
            asked = [0]

            def stop() -> None:  # SIGTERM first (a test may clean up), then SIGKILL
                asked[0] += 1
                self.kill_engine.kill(container_id, "SIGTERM" if asked[0] == 1 else "SIGKILL")

            cancel.on_cancel(stop)

        with open_log(log_path, self.ctx) as log:
            if cancel.requested:
                return Outcome(status="cancelled", log=str(log_path))
            try:
                code = run_in_container(
                    self.ctx, profile=self.profile, gpus=gpus_arg(gpus),
                    command=self.commands[job.name], flags=self.flags, log=log,
                    on_created=created, output=output_for(self.output, job),
                )  # fmt: skip
            except SuiteTestCancelled:
                return Outcome(status="cancelled", log=str(log_path))
            except RocmenvError as err:
                log.write(f"rocmenv: error: {err}\n")
                return Outcome(status="error", message=str(err), log=str(log_path))
        status: Status = "passed" if code == 0 else ("cancelled" if cancel.requested else "failed")
        return Outcome(status=status, exit_code=code, log=str(log_path))
