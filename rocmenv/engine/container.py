"""A container's life, owned by one context manager; and short-lived capture containers.

:class:`Container` creates the container (named and labelled by its spec) on enter, and on
exit removes it, or keeps it when asked. After a failed create it sweeps whatever the
engine made anyway under the run's session label. Everything between (attaching, starting,
supervising signals) is the caller's: :mod:`rocmenv.run.execute`, whose stages enter and
leave this context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from rocmenv.container.labels import LABEL_SESSION, capture_labels
from rocmenv.container.runspec import BindMount, EnvVar, RunSpec
from rocmenv.engine.protocol import Attachment, CaptureResult, Engine
from rocmenv.errors import EngineError, EngineStartError, RocmenvError, RunNotStarted

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:  # the probe's types: only `shims check` and `drift --inspect` capture
    from rocmenv.shims.probe import BindMount as ProbeMount


class Container:
    """``with Container(engine, spec, ...) as box:`` — created on enter, removed on exit.

    A failed create raises :class:`RunNotStarted` (exit 125) with the engine's error as its
    cause, after sweeping by the spec's session label.
    """

    def __init__(
        self,
        engine: Engine,
        spec: RunSpec,
        *,
        name: str | None,
        tty: bool = False,
        stdin_open: bool = False,
        keep: bool = False,
        on_kept: Callable[[str], None] | None = None,
        console_size: tuple[int, int] | None = None,
    ) -> None:
        self.engine, self.spec, self.name = engine, spec, name
        self.tty, self.stdin_open, self.keep, self.on_kept = tty, stdin_open, keep, on_kept
        self.console_size = console_size
        self.id = ""
        self.attachment: Attachment | None = None

    def __enter__(self) -> Container:
        try:
            self.id = self.engine.create(
                self.spec, tty=self.tty, stdin_open=self.stdin_open, name=self.name,
                console_size=self.console_size,
            )  # fmt: skip
        except EngineError as err:
            self.sweep()
            raise RunNotStarted(err.what, hint=err.hint) from err
        return self

    def attach(self, *, stdout_fd: int, stderr_fd: int, stdin_fd: int | None) -> Attachment:
        """Attach to the created container (:meth:`Attachment.start` starts it; closed on exit)."""
        self.attachment = self.engine.attach(
            self.id, stdout_fd=stdout_fd, stderr_fd=stderr_fd, stdin_fd=stdin_fd, tty=self.tty
        )
        return self.attachment

    def sweep(self) -> None:
        """Remove whatever the engine made under this run's session label: containers, then
        the scratch volumes of an overlay (:mod:`rocmenv.engine.overlay`)."""
        session = self.spec.label_map.get(LABEL_SESSION)
        if not session:
            return
        with contextlib.suppress(RocmenvError):
            for found in self.engine.list_containers(labels={LABEL_SESSION: session}):
                self.engine.remove(found.id, force=True)
        if any(m.kind == "overlay" for m in self.spec.mounts):
            with contextlib.suppress(RocmenvError):
                for volume in self.engine.list_volumes(labels={LABEL_SESSION: session}):
                    self.engine.remove_volume(volume.name)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.attachment is not None:
            self.attachment.close()
        if self.keep:
            if self.on_kept is not None:
                self.on_kept(self.id)
            return
        with contextlib.suppress(EngineError):
            self.engine.remove(self.id, force=True)


def capture(
    engine: Engine,
    image: str,
    argv: Sequence[str],
    *,
    mounts: Sequence[BindMount] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    workdir: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> CaptureResult:
    """Run ``argv`` in a short-lived, labelled container that is always removed."""
    spec = RunSpec(
        image=image,
        command=tuple(argv),
        profile="capture",
        mounts=tuple(mounts),
        env=tuple(EnvVar(name=k, value=v) for k, v in (env or {}).items()),
        workdir=workdir,
        labels=tuple(sorted(capture_labels(dict(labels or {})).items())),
    )
    cid = engine.create(spec)
    try:
        try:
            engine.start(cid)
        except EngineStartError as err:
            return CaptureResult(exit_code=err.failure.exit_code, stdout="", stderr=err.what)
        timed_out = False
        try:
            code = engine.wait(cid, timeout=timeout)
        except EngineError:
            timed_out = True
            engine.kill(cid)
            code = engine.wait(cid, timeout=30)
        out, err_bytes = engine.logs(cid)
        return CaptureResult(
            exit_code=code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err_bytes.decode("utf-8", "replace"),
            timed_out=timed_out,
        )
    finally:
        engine.remove(cid, force=True)


class EngineCapture:
    """:class:`rocmenv.shims.probe.CaptureEngine` on top of a :class:`rocmenv.engine.Engine` adapter."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def run_capture(
        self,
        image: str,
        argv: Sequence[str],
        *,
        mounts: Sequence[ProbeMount],
        env: Mapping[str, str],
        timeout: float,
    ) -> tuple[int, str, str]:
        binds = [BindMount(source=m.source, target=m.target, readonly=m.read_only) for m in mounts]
        out = capture(self._engine, image, argv, mounts=binds, env=dict(env), timeout=timeout)
        if getattr(out, "timed_out", False):
            raise EngineError(
                f"the launcher probe in {image} did not finish within {timeout:.0f}s",
                hint="is the engine overloaded? retry, or raise --timeout",
            )
        return int(out.exit_code), str(out.stdout), str(out.stderr)
