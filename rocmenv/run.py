"""``rocmenv run`` / ``shell``: one container from a profile, streamed, never leaked.

Lifecycle (:func:`execute`): choose the image and engine → check/pull the image → build the
:class:`~rocmenv.runspec.RunSpec` (+ shim launcher) → create (labelled) → attach → start →
wait → remove, with the removal in ``finally``. SIGINT/SIGTERM/SIGHUP received meanwhile
are forwarded to the container; if it is still running ``STOP_GRACE`` seconds later it is
killed, then removed. Exit status: the command's own (signals as 128+N); 128+N of the signal
rocmenv itself received when interrupted; 127/126 when the command is missing/not
executable; 125 when rocmenv or the engine failed before the command ran.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from rocmenv.config import Config, Profile, PullPolicy, load_config
from rocmenv.context import Context
from rocmenv.engine import (
    Engine,
    EngineStartError,
    ImageInfo,
    PullEvent,
    choose_engine_kind,
    in_container,
    make_engine,
    owner_labels,
)
from rocmenv.errors import EXIT_RUN_NOT_STARTED, EngineError, RocmenvError, UsageError
from rocmenv.gpu import GpuInventory, discover, family_mismatch
from rocmenv.runspec import (
    LABEL_SESSION,
    HostFacts,
    Overrides,
    RunSpec,
    build_runspec,
    with_launcher,
)

STOP_GRACE = 3.0  # seconds between the forwarded signal and SIGKILL
EXIT_WAIT = 10.0  # seconds to wait for the container to go after SIGKILL
SHELL_COMMAND = ("sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class RunNotStarted(EngineError):
    """rocmenv or the engine failed before the command ran (exit 125, as ``docker run``)."""

    exit_code = EXIT_RUN_NOT_STARTED


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    profile: str | None = None
    overrides: Overrides = field(default_factory=Overrides)
    engine: str | None = None
    pull: PullPolicy | None = None
    keep: bool = False
    shims: bool | None = None  # None: the profile decides
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


def find_checkout(cwd: Path) -> Path:
    """The git top level containing ``cwd`` (a ``.git`` directory or file), else ``cwd``."""
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory
    return cwd


def host_group_gid(name: str) -> int | None:
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _fileno(stream: Any, default: int) -> int:
    try:
        return int(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return default


_GPU_FAMILY_RE = re.compile(r"(?:^|-)(mi[0-9]{2,3}x)(?:-|$)")


def _gpu_family_of(image: str) -> str | None:
    tag = image.rsplit("@", 1)[0]
    tag = tag.rsplit(":", 1)[1] if ":" in tag.rsplit("/", 1)[-1] else ""
    match = _GPU_FAMILY_RE.search(tag)
    return match.group(1) if match else None


@dataclass(frozen=True, kw_only=True)
class Chosen:
    image: str
    repository: str  # the image's name as the engine records it in RepoDigests
    digest: str | None
    gpu_family: str | None


def choose_image(ctx: Context, config: Config, profile: Profile, cli_image: str | None) -> Chosen:
    """``--image``, else the lock's digest, else the profile's tag (via :mod:`rocmenv.pinning`)."""
    from rocmenv.reference import parse

    if cli_image:
        ref = parse(cli_image)  # nothing unvalidated reaches the engine
        return Chosen(
            image=ref.familiar,
            repository=ref.familiar_name,
            digest=ref.digest,
            gpu_family=_gpu_family_of(ref.familiar),
        )
    if profile.image is None:
        raise UsageError(
            f"profile {profile.name!r} names no image",
            hint=f'pass --image REF, or set image = "rocm/sgl-dev" (+ tag) in [profiles.{profile.name}]',
        )
    from rocmenv.pinning import image_for_profile

    choice = image_for_profile(ctx, config, profile)
    ref = parse(choice.ref)
    return Chosen(
        image=ref.familiar,
        repository=ref.familiar_name,
        digest=choice.digest,
        gpu_family=choice.gpu_family,
    )


class Reporter(Protocol):
    """How :func:`execute` tells the user things (the CLI prints them; tests collect them)."""

    def note(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def pulling(self, image: str) -> Callable[[PullEvent], None]:
        """A pull begins; returns the progress callback."""

    def pulled(self, image: str) -> None: ...


def ensure_image(engine: Engine, image: str, policy: PullPolicy, reporter: Reporter) -> ImageInfo:
    info = None if policy == "always" else engine.image_info(image)
    if info is not None:
        return info
    if policy == "never":
        raise RunNotStarted(
            f"image {image} is not present on the engine and --pull is never",
            hint="pull it (`docker pull`, or --pull missing), or check the reference",
        )
    engine.pull(image, progress=reporter.pulling(image))
    reporter.pulled(image)
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
    config = load_config(ctx)
    profile = config.profile(request.profile)
    kind = choose_engine_kind(
        ctx, flag=request.engine, profile_engine=profile.engine, config_engine=config.engine
    )
    timings.mark("config")
    chosen = choose_image(ctx, config, profile, request.overrides.image)
    gpus_text = request.overrides.gpus if request.overrides.gpus is not None else profile.gpus
    inventory: GpuInventory | None = None
    if gpus_text.strip().lower() != "none":
        inventory = discover(config.host.sysfs_root, config.host.dev_root)
    checkout = find_checkout(ctx.cwd) if profile.mount_checkout else None
    timings.mark("host")
    try:
        engine = make_engine(kind, ctx)
    except EngineError as err:
        raise RunNotStarted(err.what, hint=err.hint) from None
    timings.mark("engine")
    # The image check (a CLI process for docker-cli, a pull maybe) runs on a thread while
    # this one prepares the shim launcher.
    image_check = _Background(
        lambda: ensure_image(engine, chosen.image, request.pull or profile.pull, reporter)
    )
    shims = request.shims if request.shims is not None else profile.shims
    bundle = _prepare_launcher(ctx) if shims else None
    try:
        info = image_check.result()
    except RunNotStarted:
        raise
    except EngineError as err:
        raise RunNotStarted(err.what, hint=err.hint) from None
    timings.mark("image")
    command = SHELL_COMMAND if request.shell else request.overrides.command
    overrides = replace(request.overrides, command=tuple(command))
    facts = HostFacts(
        env=ctx.env,
        cwd=ctx.cwd,
        checkout=checkout,
        inventory=inventory,
        group_gid=host_group_gid,
        path_exists=os.path.exists,
        check_host=True,
        session=os.urandom(6).hex(),
        owner_pid=os.getpid(),
        owner_host=socket.gethostname(),
        image_digest=chosen.digest or info.digest_for(chosen.repository) or info.id,
    )
    spec = build_runspec(profile, overrides, facts, image=chosen.image)
    spec = _with_owner_start(spec)
    if bundle is not None:
        spec = _add_launcher(spec, bundle, info)
    for text in spec.warnings:
        reporter.warning(text)
    if inventory is not None:
        mismatch = family_mismatch(chosen.gpu_family, inventory)
        if mismatch:
            reporter.warning(mismatch)
    for text in spec.notes:
        reporter.note(text)
    hint = _SiblingHint(engine) if spec.mounts and in_container() else None
    timings.mark("spec")
    interactive = request.interactive or request.shell
    tty = request.tty
    if tty is None:
        tty = _isatty(sys.stdin) and _isatty(sys.stdout)
    if tty:
        interactive = interactive or _isatty(sys.stdin)
    status = _run_container(
        ctx, reporter, engine, spec, tty=tty, interactive=interactive, keep=request.keep,
        timings=timings, on_created=on_created, hint=hint,
    )  # fmt: skip
    if timings.enabled:
        reporter.note(timings.summary())
    return status


def _with_owner_start(spec: RunSpec) -> RunSpec:
    labels = dict(spec.labels)
    labels.update(owner_labels(start_only=True))
    return replace(spec, labels=tuple(sorted(labels.items())))


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

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _prepare_launcher(ctx: Context) -> Any:
    try:
        from rocmenv.launcher_bundle import prepare_launcher
    except ImportError:  # the shim layer is not installed in this build
        return None
    return prepare_launcher(ctx)


def _add_launcher(spec: RunSpec, bundle: Any, info: ImageInfo) -> RunSpec:
    from rocmenv.launcher_bundle import merge_pythonpath

    base = spec.env_values.get("PYTHONPATH", info.env_map().get("PYTHONPATH"))
    return with_launcher(
        spec,
        host_dir=str(bundle.host_dir),
        container_dir=bundle.container_dir,
        pythonpath=merge_pythonpath(bundle.container_dir, base),
        pycache_dir=getattr(bundle, "pycache_dir", None),
    )


class _SiblingHint:
    """Inside a container, is it one of the engine's own (the socket mounted in, as on
    runners that start sibling containers)? Then bind sources are the engine host's paths.
    The engine knows our container by our host name (its short id) when that is the case.
    Asked on a thread, while the container is being made."""

    def __init__(self, engine: Engine) -> None:
        self._text: str | None = None
        self._thread = threading.Thread(target=self._ask, args=(engine,), daemon=True)
        self._thread.start()

    def _ask(self, engine: Engine) -> None:
        with contextlib.suppress(RocmenvError):
            doc = engine.inspect_container(socket.gethostname())
            name = str(doc.get("Name", "")).lstrip("/") or socket.gethostname()
            self._text = (
                f"rocmenv runs in container {name}, a sibling of the one it starts: bind-mount "
                "sources are paths on the engine's host, not in this container"
            )

    def say(self, reporter: Reporter) -> None:
        self._thread.join(timeout=2.0)
        if self._text:
            reporter.note(self._text)


def _run_container(
    ctx: Context,
    reporter: Reporter,
    engine: Engine,
    spec: RunSpec,
    *,
    tty: bool,
    interactive: bool,
    keep: bool,
    timings: Timings,
    on_created: Callable[[str], None] | None,
    hint: _SiblingHint | None = None,
) -> int:
    events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    session = spec.label_map.get(LABEL_SESSION, os.urandom(6).hex())
    name = f"rocmenv-{session}"
    create_failed = False
    container_id: str | None = None
    attachment = None
    received: int | None = None
    with _forwarded_signals(events):
        try:
            try:
                container_id = engine.create(spec, tty=tty, stdin_open=interactive, name=name)
            except EngineError as err:
                create_failed = True
                pending = _pending_signal(events)
                if pending is not None:  # e.g. Ctrl-C reached a CLI child too
                    return 128 + pending
                raise RunNotStarted(err.what, hint=err.hint) from None
            timings.mark("create")
            if on_created is not None:
                on_created(container_id)
            if hint is not None:
                hint.say(reporter)
            pending = _pending_signal(events)
            if pending is not None:
                return 128 + pending
            for stream in (ctx.stdout, ctx.stderr, sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            try:
                attachment = engine.start_attached(
                    container_id,
                    stdout_fd=_fileno(ctx.stdout, 1),
                    stderr_fd=_fileno(ctx.stderr, 2),
                    stdin_fd=_fileno(sys.stdin, 0) if interactive else None,
                    tty=tty,
                )
            except EngineStartError as err:
                return _start_failed(reporter, err)
            except EngineError as err:
                raise RunNotStarted(err.what, hint=err.hint) from None
            timings.mark("start")
            waiter = threading.Thread(
                target=_wait_for_exit, args=(engine, container_id, attachment, events), daemon=True
            )
            waiter.start()
            status, received = _supervise(engine, container_id, events)
            if isinstance(status, BaseException):
                if isinstance(status, EngineStartError):
                    return _start_failed(reporter, status)
                raise status
            timings.mark("run")
            attachment.join(timeout=5.0)
            return 128 + received if received is not None else status
        finally:
            if attachment is not None:
                attachment.close()
            if create_failed:
                _sweep(engine, session)
            if container_id is not None:
                if keep:
                    reporter.note(
                        f"kept container {container_id[:12]} (--keep); remove it with "
                        f"`docker rm -f {container_id[:12]}`"
                    )
                else:
                    with contextlib.suppress(EngineError):
                        engine.remove(container_id, force=True)
                    timings.mark("remove")


def _sweep(engine: Engine, session: str) -> None:
    """After a failed or interrupted create: remove whatever the engine made anyway."""
    with contextlib.suppress(RocmenvError):
        for found in engine.list_containers(labels={LABEL_SESSION: session}):
            engine.remove(found.id, force=True)


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
    engine: Engine, container_id: str, attachment: Any, events: queue.SimpleQueue[tuple[str, Any]]
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
