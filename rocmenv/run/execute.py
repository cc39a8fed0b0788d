"""``rocmenv run`` / ``shell``: one container from a profile, streamed, never leaked.

A run goes through the stages of :mod:`rocmenv.run.stages` — start-up (settings, plan,
engine) → image (check; pull when needed) → create (labelled) → attach → start → running →
stopping (after a signal) → removing → cleanup (for an untrusted run, the second line's
sweep of the checkout: :mod:`rocmenv.run.planted`; before the removal, ``--output``'s copy:
:mod:`rocmenv.run.output`) — and every transition and every wait reads
the one signal state of :mod:`rocmenv.run.interrupt`. A SIGINT/SIGTERM/SIGHUP before the
container runs ends the run at the next transition (at once while the image is checked or
pulled), the container, if created, removed. While it runs the signal is forwarded to it;
if it is still running ``STOP_GRACE`` seconds later, or at a second signal, it is killed,
then removed. Exit status: the command's own (signals as 128+N); 128+N of the signal
rocmenv itself received when interrupted; 127/126 when the command is missing/not
executable; 125 when rocmenv or the engine failed before the command ran.
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` adds enum conversions and ``selectors`` (~2.5 ms a run)
import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from rocmenv.container.gpu import family_mismatch
from rocmenv.container.labels import Identity
from rocmenv.container.plan import Plan, PlanRequest, plan
from rocmenv.container.runspec import LauncherMount, Overrides, RunSpec
from rocmenv.context import Context
from rocmenv.engine.container import Container
from rocmenv.engine.protocol import Attachment, Engine, ImageInfo
from rocmenv.engine.select import choose_engine, in_container, make_engine
from rocmenv.errors import EngineError, EngineStartError, RocmenvError, RunNotStarted
from rocmenv.record import field, record, replace
from rocmenv.run.interrupt import Interrupted, Job, SignalWatch
from rocmenv.run.stages import Stage, Stages
from rocmenv.settings.resolve import Flags, Settings, settings_for

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Protocol

    from rocmenv.joblog import ChildOutput
else:
    from rocmenv.typecheck import Protocol

STOP_GRACE = 3.0  # seconds between the forwarded signal and SIGKILL
EXIT_WAIT = 10.0  # seconds to wait for the container to go after SIGKILL
# The shell starts once the terminal has its size (at most a second): a Docker daemon older
# than API 1.42 sets it only after the start (podman, and newer daemons, before).
_SIZED = (
    'i=0; while [ "$(stty size 2>/dev/null)" = "0 0" ] && [ $i -lt 20 ]; '
    "do sleep 0.05; i=$((i+1)); done; "
)
SHELL_COMMAND = (
    "sh", "-c", _SIZED + "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"
)  # fmt: skip


@record
class RunRequest:
    flags: Flags = field(default_factory=Flags)  # profile, engine, pull, shims, untrusted
    overrides: Overrides = field(default_factory=Overrides)
    keep: bool = False
    interactive: bool = False  # attach stdin
    tty: bool | None = None  # None: when stdin and stdout are terminals
    shell: bool = False
    output: Path | None = None  # --output: where the container's output directory goes


@record
class Terminal:
    """How the container meets ours: a TTY (of ``size``: rows, columns) and stdin or not."""

    tty: bool
    interactive: bool
    size: tuple[int, int] | None = None


def _fileno(stream: Any, default: int) -> int:
    try:
        return int(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return default


class Reporter(Protocol):
    """How :func:`execute` tells the user things (the CLI prints them; tests collect them)."""

    def note(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def pull(self, settings: Settings, engine: Engine, image: str) -> object:
        """Pull ``image`` with ``settings``' registry and disk reserve (the CLI: :func:`rocmenv.run.progress.pull_with_display` — progress,
        retries, disk budget, the record for ``gc --images``)."""


def ensure_image(
    engine: Engine, image: str, settings: Settings, reporter: Reporter
) -> tuple[ImageInfo, str | None]:
    """The image's info, and the engine's name for it when that is not ``image`` (the id of
    an image the runner image cache loaded)."""
    policy = settings.pull
    info = None if policy == "always" else engine.image_info(image)
    if info is not None:
        return info, None
    if policy == "never":
        raise RunNotStarted(
            f"image {image} is not present on the engine and --pull is never",
            hint="pull it (`docker pull`, or --pull missing), or check the reference",
        )
    result = reporter.pull(settings, engine, image)
    # the runner image cache loads the image: the engine knows it by its id, not by the
    # pinned repo@digest (rocmenv.cache.present), and containers are created from that id
    present_as = getattr(result, "present_as", None)
    info = engine.image_info(image)
    if info is not None:
        return info, None
    info = engine.image_info(present_as) if isinstance(present_as, str) else None
    if info is None:
        raise RunNotStarted(f"image {image} is still absent after pulling it")
    return info, info.id


def execute(
    ctx: Context,
    request: RunRequest,
    reporter: Reporter,
    *,
    on_created: Callable[[str], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
) -> int:
    """Run the request; returns the exit status (see the module docstring). ``on_exit``
    gets the command's status as soon as it is known, before the container's removal — for
    a trusted run only (an untrusted one's cleanup still reports into its streams)."""
    with SignalWatch() as watch:
        stages = Stages(watch, ctx.env, timings=ctx.flag("ROCMENV_TIMINGS"))
        status = 0  # replaced by the run's, or by 128+N below
        try:
            stages.enter(Stage.STARTUP)
            status = _run(ctx, request, reporter, stages, on_created, on_exit)
        except Interrupted:
            pass  # the status is the signal's, below
        except RocmenvError:
            if watch.first() is None:
                raise  # else e.g. a CLI child that the terminal's Ctrl-C reached too
        if stages.timings.enabled:
            reporter.note(stages.timings.summary())
        signum = watch.first()
        return status if signum is None else 128 + signum  # interrupted at any stage


def _run(
    ctx: Context,
    request: RunRequest,
    reporter: Reporter,
    stages: Stages,
    on_created: Callable[[str], None] | None,
    on_exit: Callable[[int], None] | None,
) -> int:
    """Start-up, then the image, then the container's life."""
    settings = settings_for(ctx, request.flags)
    choice = choose_engine(ctx, settings.engine)
    command = SHELL_COMMAND if request.shell else request.overrides.command
    overrides = replace(
        request.overrides, command=tuple(command), output=request.output is not None
    )
    if request.output is not None:
        from rocmenv.run.output import check_destination

        check_destination(request.output, ctx.checkout)
    planned = plan(ctx, settings, PlanRequest(overrides=overrides))
    try:
        engine = make_engine(choice.kind, ctx, api_offered=choice.api_offered)
    except EngineError as err:
        raise RunNotStarted(err.what, hint=err.hint) from err
    stages.enter(Stage.IMAGE)
    (info, present_as), launcher = _image_and_launcher(
        ctx, stages, engine, planned, settings, reporter
    )
    identity = Identity.current()
    spec = _complete(planned, info, launcher, identity, reporter, present_as)
    hint = (
        stages.watch.start(lambda: _sibling_note(engine), name="sibling")
        if spec.mounts and in_container()
        else None
    )
    terminal = _terminal(ctx, request)
    also = (", then `rocmenv gc` (its checkout view's scratch volumes)"
            if any(m.kind == "overlay" for m in spec.mounts) else "")  # fmt: skip
    box = Container(
        engine, spec, name=identity.container_name, tty=terminal.tty,
        stdin_open=terminal.interactive, keep=request.keep, console_size=terminal.size,
        on_kept=lambda cid: reporter.note(
            f"kept container {cid[:12]} (--keep); remove it with `docker rm -f {cid[:12]}`"
            + also
        ),
    )  # fmt: skip
    collect = _collector(ctx, request, settings, reporter, stages)
    return _container_life(
        ctx, reporter, stages, box, terminal, (on_created, on_exit, collect), hint
    )


def _collector(
    ctx: Context, request: RunRequest, settings: Settings, reporter: Reporter, stages: Stages
) -> Callable[[Container], None] | None:
    """``--output``: the container's output directory copied out once the command has
    exited (:mod:`rocmenv.run.output`), not after an interrupt; what went wrong is warned."""
    dest = request.output
    if dest is None:
        return None

    def collect(box: Container) -> None:
        from rocmenv.container.runspec import OUTPUT_ENV
        from rocmenv.run.output import copy_out, summary
        from rocmenv.settings.policy import policy_bytes

        if stages.watch.first() is not None:
            return
        source = box.spec.env_values[OUTPUT_ENV]
        policy = settings.policy if box.spec.untrusted else None
        limit = policy_bytes(policy.output_size, None) if policy is not None else None
        try:
            copied = copy_out(
                box.engine, box.id, source, dest, checkout=ctx.checkout, limit=limit,
                stopped=lambda: stages.watch.first() is not None,
            )  # fmt: skip
        except (RocmenvError, OSError) as err:
            reporter.warning(f"output: could not copy {source} out to {dest}: {err}")
            return
        note, warnings = summary(copied, dest)
        reporter.note(note)
        for text in warnings:
            reporter.warning(text)

    return collect


def _image_and_launcher(
    ctx: Context,
    stages: Stages,
    engine: Engine,
    planned: Plan,
    settings: Settings,
    reporter: Reporter,
) -> tuple[tuple[ImageInfo, str | None], LauncherMount | None]:
    """The image check (a CLI process for docker-cli, a pull maybe) on a thread while this
    one prepares the shim launcher; a signal meanwhile ends the wait at once."""
    assert planned.image is not None  # a run needs an image (choose_image says so otherwise)
    image = planned.image.image
    check = stages.watch.start(
        lambda: ensure_image(engine, image, settings, reporter), name="image"
    )
    launcher = _launcher_mount(ctx) if settings.shims else None
    try:
        return stages.watch.result(check), launcher
    except EngineError as err:
        if isinstance(err, RunNotStarted):
            raise
        raise RunNotStarted(err.what, hint=err.hint) from err


def _complete(
    planned: Plan,
    info: ImageInfo,
    launcher: LauncherMount | None,
    identity: Identity,
    reporter: Reporter,
    present_as: str | None = None,
) -> RunSpec:
    """The planned draft completed with what the image and this run add; its notes told.
    ``present_as``: the engine's name for the image when not the reference."""
    choice = planned.image
    assert choice is not None
    spec = planned.complete(
        identity=identity,
        image_digest=choice.digest or info.digest_for(choice.repository) or info.id,
        image_env=info.env_map(),
        launcher=launcher,
        engine_image=present_as,
    )
    for text in spec.warnings:
        reporter.warning(text)
    if planned.facts.inventory is not None:
        mismatch = family_mismatch(choice.gpu_family, planned.facts.inventory)
        if mismatch:
            reporter.warning(mismatch)
    for text in spec.notes:
        reporter.note(text)
    return spec


def _terminal(ctx: Context, request: RunRequest) -> Terminal:
    tty = request.tty
    if tty is None:
        tty = ctx.stdin_is_tty and ctx.stdout_is_tty
    interactive = request.interactive or request.shell or (tty and ctx.stdin_is_tty)
    size = None
    if tty:
        with contextlib.suppress(OSError):
            columns, rows = os.get_terminal_size(_fileno(ctx.stdout, 1))
            size = (rows, columns) if rows and columns else None
    return Terminal(tty=tty, interactive=interactive, size=size)


def _container_life(
    ctx: Context,
    reporter: Reporter,
    stages: Stages,
    box: Container,
    terminal: Terminal,
    hooks: tuple[
        Callable[[str], None] | None,
        Callable[[int], None] | None,
        Callable[[Container], None] | None,
    ],
    hint: Job[str | None] | None,
) -> int:
    """Create → … → removing → cleanup: the container is :class:`Container`'s, removed (or
    kept) when the ``with`` ends, whatever ended it. ``hooks``: told the container's id once
    created, its status once it has exited (a trusted run: before the removal), and the
    exited container (``--output``: before the status is told)."""
    on_created, on_exit, collect = hooks
    stages.enter(Stage.CREATE)
    try:
        # fenced in GitHub Actions when untrusted; the container is removed before the fence ends
        with ctx.child_output(untrusted=box.spec.untrusted) as out, box:
            try:
                status = _attached_run(
                    ctx, reporter, stages, box, terminal, (on_created, hint), out
                )
                if collect is not None:
                    collect(box)
                if on_exit is not None and not box.spec.untrusted:
                    on_exit(status)
                return status
            finally:
                stages.enter(Stage.REMOVING)
    finally:
        stages.enter(Stage.CLEANUP)  # after the container is gone, before the status returns
        if box.spec.untrusted:  # what the host would honour, neutralised
            from rocmenv.run.planted import sweep_after

            sweep_after(box.spec, reporter)


def _attached_run(
    ctx: Context,
    reporter: Reporter,
    stages: Stages,
    box: Container,
    terminal: Terminal,
    hooks: tuple[Callable[[str], None] | None, Job[str | None] | None],
    out: ChildOutput,
) -> int:
    """Attach → start → running (→ stopping): from a created container to its exit status;
    its output to ``out`` (:meth:`rocmenv.context.Context.child_output`)."""
    on_created, hint = hooks
    stages.enter(Stage.ATTACH)
    if on_created is not None:
        on_created(box.id)
    if hint is not None and stages.watch.wait(hint.finished, timeout=2.0, since=0):
        note = hint.result()
        if note:
            reporter.note(note)
    for stream in (ctx.stdout, ctx.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        attachment = box.attach(
            stdout_fd=out.stdout_fd,
            stderr_fd=out.stderr_fd,
            stdin_fd=_fileno(ctx.stdin, 0) if terminal.interactive else None,
        )
        stages.enter(Stage.START)
        attachment.start()
    except EngineStartError as err:
        return _start_failed(reporter, err)
    except EngineError as err:
        raise RunNotStarted(err.what, hint=err.hint) from err
    stages.enter(Stage.RUNNING)
    return _supervise(reporter, stages, box, attachment)


def _supervise(reporter: Reporter, stages: Stages, box: Container, attachment: Attachment) -> int:
    """Running: the container's exit status, or — at a signal — stopping, then 128+N."""
    watch = stages.watch
    exited = watch.start(lambda: _exit_code(box.engine, box.id, attachment), name="wait")
    watch.wait(exited.finished, since=0)  # any signal, also one from before, ends it
    signum = watch.first()
    if signum is None:
        try:
            return exited.result()
        except EngineStartError as err:
            return _start_failed(reporter, err)
    stages.enter(Stage.STOPPING)
    _stop(watch, box, signum, exited)
    return 128 + signum


def _exit_code(engine: Engine, container_id: str, attachment: Attachment) -> int:
    """Once the output has ended: from the attach channel, else the engine's wait."""
    attachment.join()
    code = attachment.exit_code()
    return engine.wait(container_id) if code is None else code


def _stop(watch: SignalWatch, box: Container, signum: int, exited: Job[int]) -> None:
    """Stopping: the signal forwarded; SIGKILL after ``STOP_GRACE`` or at the next signal;
    then up to ``EXIT_WAIT`` for the engine to confirm (removal follows either way)."""
    import signal  # its names: only once interrupted

    _quietly(box.engine.kill, box.id, signal.Signals(signum).name)
    if watch.wait(exited.finished, timeout=STOP_GRACE, since=1):  # a second signal: no grace
        return
    _quietly(box.engine.kill, box.id, "SIGKILL")
    deadline = time.monotonic() + EXIT_WAIT
    while not exited.finished() and time.monotonic() < deadline:  # more signals: no matter
        watch.wait(exited.finished, timeout=deadline - time.monotonic(), since=watch.count())


def _launcher_mount(ctx: Context) -> LauncherMount:
    from rocmenv.shims.bundle import prepare_launcher

    bundle = prepare_launcher(ctx)
    return LauncherMount(
        host_dir=str(bundle.host_dir),
        container_dir=bundle.container_dir,
        pycache_dir=bundle.pycache_dir,
    )


def _sibling_note(engine: Engine) -> str | None:
    """Inside a container, is it one of the engine's own (the socket mounted in, as on
    runners that start sibling containers)? Then bind sources are the engine host's paths.
    The engine knows our container by our host name (its short id) when that is the case."""
    try:
        doc = engine.inspect_container(_socket.gethostname())
    except RocmenvError:
        return None
    name = str(doc.get("Name", "")).lstrip("/") or _socket.gethostname()
    return (
        f"rocmenv runs in container {name}, a sibling of the one it starts: bind-mount "
        "sources are paths on the engine's host, not in this container"
    )


def _start_failed(reporter: Reporter, err: EngineStartError) -> int:
    if err.failure.exit_code in (126, 127):
        reporter.note(err.failure.message)
        return err.failure.exit_code
    raise RunNotStarted(
        err.failure.message,
        hint="change that option in the profile (see `rocmenv options`), or run where the "
        "engine allows it",
    )


def _quietly(fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RocmenvError):
        fn(*args)
