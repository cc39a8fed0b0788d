"""``rocmenv run`` / ``shell``: one container from a profile, streamed, never leaked.

Lifecycle (:func:`execute`): choose the image and engine → check/pull the image → build the
:class:`~rocmenv.spec.runspec.RunSpec` (+ shim launcher) → create (labelled) → attach → start →
wait → remove, with the removal in ``finally``, then (untrusted) the sweep of what the
container left in its writable mounts (:mod:`rocmenv.run.planted`), also after an interrupt.
SIGINT/SIGTERM/SIGHUP received meanwhile are forwarded to the container; if it is still
running ``STOP_GRACE`` seconds later it is killed, then removed. Exit status: the command's own (signals as 128+N); 128+N of the signal
rocmenv itself received when interrupted; 127/126 when the command is missing/not
executable; 125 when rocmenv or the engine failed before the command ran.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from rocmenv.context import Context
from rocmenv.engine.container import Container
from rocmenv.engine.protocol import Attachment, Engine, ImageInfo
from rocmenv.engine.select import choose_engine_kind, in_container, make_engine
from rocmenv.errors import EngineError, EngineStartError, RocmenvError, RunNotStarted
from rocmenv.run.planted import sweep_after
from rocmenv.settings.resolve import Flags, Settings, settings_for
from rocmenv.spec.gpu import family_mismatch
from rocmenv.spec.labels import Identity
from rocmenv.spec.plan import PlanRequest, plan
from rocmenv.spec.runspec import LauncherMount, Overrides, RunSpec

STOP_GRACE = 3.0  # seconds between the forwarded signal and SIGKILL
EXIT_WAIT = 10.0  # seconds to wait for the container to go after SIGKILL
SHELL_COMMAND = ("sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    flags: Flags = field(default_factory=Flags)  # profile, engine, pull, shims, untrusted
    overrides: Overrides = field(default_factory=Overrides)
    keep: bool = False
    interactive: bool = False  # attach stdin
    tty: bool | None = None  # None: when stdin and stdout are terminals
    shell: bool = False


@dataclass
class Timings:
    enabled: bool
    start: float = field(default_factory=time.perf_counter)
    marks: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, name: str) -> None:
        if self.enabled:
            self.marks.append((name, time.perf_counter()))

    def summary(self) -> str:
        last = self.start
        parts = []
        for name, t in self.marks:
            parts.append(f"{name} {1000 * (t - last):.0f}ms")
            last = t
        return f"timings: {', '.join(parts)}; total {1000 * (last - self.start):.0f}ms"


def _fileno(stream: Any, default: int) -> int:
    try:
        return int(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return default


class Reporter(Protocol):
    """How :func:`execute` tells the user things (the CLI prints them; tests collect them)."""

    def note(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def pull(self, settings: Settings, engine: Engine, image: str) -> None:
        """Pull ``image`` with ``settings``' registry and disk reserve (the CLI: :func:`rocmenv.run.progress.pull_with_display` — progress,
        retries, disk budget, the record for ``gc --images``)."""


def ensure_image(engine: Engine, image: str, settings: Settings, reporter: Reporter) -> ImageInfo:
    policy = settings.pull
    info = None if policy == "always" else engine.image_info(image)
    if info is not None:
        return info
    if policy == "never":
        raise RunNotStarted(
            f"image {image} is not present on the engine and --pull is never",
            hint="pull it (`docker pull`, or --pull missing), or check the reference",
        )
    reporter.pull(settings, engine, image)
    info = engine.image_info(image)
    if info is None:
        raise RunNotStarted(f"image {image} is still absent after pulling it")
    return info


@contextlib.contextmanager
def _forwarded_signals(events: queue.SimpleQueue[tuple[str, Any]]) -> Iterator[None]:
    """Signals become events on the queue (SimpleQueue.put is safe in a signal handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, _frame: Any) -> None:
        events.put(("signal", signum))

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def execute(
    ctx: Context,
    request: RunRequest,
    reporter: Reporter,
    *,
    on_created: Callable[[str], None] | None = None,
) -> int:
    """Run the request; returns the exit status (see the module docstring)."""
    timings = Timings(enabled=ctx.flag("ROCMENV_TIMINGS"))
    settings = settings_for(ctx, request.flags)
    kind = choose_engine_kind(ctx, settings.engine)
    timings.mark("config")
    command = SHELL_COMMAND if request.shell else request.overrides.command
    planned = plan(
        ctx, settings, PlanRequest(overrides=replace(request.overrides, command=tuple(command)))
    )
    assert planned.image is not None  # a run needs an image (choose_image says so otherwise)
    choice = planned.image
    timings.mark("host")
    try:
        engine = make_engine(kind, ctx)
    except EngineError as err:
        raise RunNotStarted(err.what, hint=err.hint) from err
    timings.mark("engine")
    # The image check (a CLI process for docker-cli, a pull maybe) runs on a thread while
    # this one prepares the shim launcher.
    image_check = _Background(lambda: ensure_image(engine, choice.image, settings, reporter))
    launcher = _launcher_mount(ctx) if settings.shims else None
    try:
        info: ImageInfo = image_check.result()
    except EngineError as err:
        if isinstance(err, RunNotStarted):
            raise
        raise RunNotStarted(err.what, hint=err.hint) from err
    timings.mark("image")
    identity = Identity.current()
    spec = planned.complete(
        identity=identity,
        image_digest=choice.digest or info.digest_for(choice.repository) or info.id,
        image_env=info.env_map(),
        launcher=launcher,
    )
    for text in spec.warnings:
        reporter.warning(text)
    if planned.facts.inventory is not None:
        mismatch = family_mismatch(choice.gpu_family, planned.facts.inventory)
        if mismatch:
            reporter.warning(mismatch)
    for text in spec.notes:
        reporter.note(text)
    hint = _Background(lambda: _sibling_note(engine)) if spec.mounts and in_container() else None
    timings.mark("spec")
    tty = request.tty
    if tty is None:
        tty = ctx.stdin_is_tty and ctx.stdout_is_tty
    interactive = request.interactive or request.shell or (tty and ctx.stdin_is_tty)
    status = _run_container(
        ctx, reporter, engine, spec, name=identity.container_name, tty=tty,
        interactive=interactive, keep=request.keep, timings=timings, on_created=on_created,
        hint=hint,
    )  # fmt: skip
    if timings.enabled:
        reporter.note(timings.summary())
    return status


class _Background:
    """A call on a daemon thread; :meth:`result` waits and re-raises its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as err:  # handed to the caller
            self._error = err

    def result(self, timeout: float | None = None) -> Any:
        """The value (None when ``timeout`` passed first)."""
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return self._value


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
        doc = engine.inspect_container(socket.gethostname())
    except RocmenvError:
        return None
    name = str(doc.get("Name", "")).lstrip("/") or socket.gethostname()
    return (
        f"rocmenv runs in container {name}, a sibling of the one it starts: bind-mount "
        "sources are paths on the engine's host, not in this container"
    )


def _run_container(
    ctx: Context,
    reporter: Reporter,
    engine: Engine,
    spec: RunSpec,
    *,
    name: str,
    tty: bool,
    interactive: bool,
    keep: bool,
    timings: Timings,
    on_created: Callable[[str], None] | None,
    hint: _Background | None = None,
) -> int:
    """Create, attach, start and supervise; the container is :class:`Container`'s."""
    events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def kept(container_id: str) -> None:
        reporter.note(
            f"kept container {container_id[:12]} (--keep); remove it with "
            f"`docker rm -f {container_id[:12]}`"
        )

    box = Container(
        engine, spec, name=name, tty=tty, stdin_open=interactive, keep=keep, on_kept=kept
    )
    with _forwarded_signals(events):
        try:
            with box:
                return _drive(ctx, reporter, engine, box, events, interactive, timings,
                              on_created, hint)  # fmt: skip
        except RunNotStarted:
            pending = None if box.id else _pending_signal(events)
            if pending is not None:  # the create failed: e.g. Ctrl-C reached a CLI child too
                return 128 + pending
            raise
        finally:  # the container is gone (or kept, stopped): also after an interrupt
            sweep_after(spec, reporter)


def _drive(
    ctx: Context,
    reporter: Reporter,
    engine: Engine,
    box: Container,
    events: queue.SimpleQueue[tuple[str, Any]],
    interactive: bool,
    timings: Timings,
    on_created: Callable[[str], None] | None,
    hint: _Background | None,
) -> int:
    """From a created container to its exit status, forwarding signals meanwhile."""
    timings.mark("create")
    if on_created is not None:
        on_created(box.id)
    if hint is not None:
        note = hint.result(timeout=2.0)
        if note:
            reporter.note(note)
    pending = _pending_signal(events)
    if pending is not None:
        return 128 + pending
    for stream in (ctx.stdout, ctx.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        attachment = box.start_attached(
            stdout_fd=_fileno(ctx.stdout, 1),
            stderr_fd=_fileno(ctx.stderr, 2),
            stdin_fd=_fileno(ctx.stdin, 0) if interactive else None,
        )
    except EngineStartError as err:
        return _start_failed(reporter, err)
    except EngineError as err:
        raise RunNotStarted(err.what, hint=err.hint) from err
    timings.mark("start")
    waiter = threading.Thread(
        target=_wait_for_exit, args=(engine, box.id, attachment, events), daemon=True
    )
    waiter.start()
    status, received = _supervise(engine, box.id, events)
    if isinstance(status, BaseException):
        if isinstance(status, EngineStartError):
            return _start_failed(reporter, status)
        raise status
    timings.mark("run")
    attachment.join(timeout=5.0)
    return 128 + received if received is not None else int(status)


def _start_failed(reporter: Reporter, err: EngineStartError) -> int:
    if err.failure.exit_code in (126, 127):
        reporter.note(err.failure.message)
        return err.failure.exit_code
    raise RunNotStarted(
        err.failure.message,
        hint="change that option in the profile (see `rocmenv options`), or run where the "
        "engine allows it",
    )


def _pending_signal(events: queue.SimpleQueue[tuple[str, Any]]) -> int | None:
    found = None
    while True:
        try:
            kind, value = events.get_nowait()
        except queue.Empty:
            return found
        if kind == "signal":
            found = int(value)


def _wait_for_exit(
    engine: Engine,
    container_id: str,
    attachment: Attachment,
    events: queue.SimpleQueue[tuple[str, Any]],
) -> None:
    try:
        attachment.join()
        code = attachment.exit_code()
        if code is None:
            code = engine.wait(container_id)
        events.put(("exit", code))
    except BaseException as err:
        events.put(("error", err))


def _supervise(
    engine: Engine, container_id: str, events: queue.SimpleQueue[tuple[str, Any]]
) -> tuple[Any, int | None]:
    """Wait for the exit event, forwarding signals; returns (exit code or error, signal)."""
    received: int | None = None
    deadline: float | None = None
    killed_at: float | None = None
    while True:
        timeout = None
        if deadline is not None:
            timeout = max(0.0, deadline - time.monotonic())
        try:
            kind, value = events.get(timeout=timeout)
        except queue.Empty:
            if killed_at is None:
                _quietly(engine.kill, container_id, "SIGKILL")
                killed_at = time.monotonic()
                deadline = killed_at + EXIT_WAIT
                continue
            return -1, received  # the engine did not confirm the exit: give up waiting
        if kind == "signal":
            signum = int(value)
            if received is None:
                received = signum
                _quietly(engine.kill, container_id, signal.Signals(signum).name)
                deadline = time.monotonic() + STOP_GRACE
            elif killed_at is None:  # a second signal: no more grace
                _quietly(engine.kill, container_id, "SIGKILL")
                killed_at = time.monotonic()
                deadline = killed_at + EXIT_WAIT
            continue
        return value, received


def _quietly(fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RocmenvError):
        fn(*args)
