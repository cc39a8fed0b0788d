"""How a pull looks: a live display on a terminal, a few plain lines in a CI log.

On a terminal: one line per layer being downloaded (at most :data:`MAX_LAYER_LINES`) and a
total line (bytes, rate, ETA), redrawn in place at most ten times a second. Every line fits
the terminal's width, read at each redraw (so a resize is followed): the image reference is
shortened (its digest to 12 hex digits, then its name in the middle), never the numbers. A
redraw moves up by the rows the last frame occupies at the current width (a terminal that
re-wraps lines on a resize — tmux, VTE, kitty, iTerm2 — may have made one line two) and
erases to the end of the screen. Whether stderr is such a terminal is :attr:`Context.live`'s
call (``TERM=dumb`` gets the plain lines below). Hand-written
rather than ``rich``: the display is a dozen lines of ANSI, and ``rich`` (not otherwise a
dependency) would add a package and ~60 ms of imports to every ``run`` that pulls.

Off a terminal: one line at most every :data:`PLAIN_INTERVAL` seconds and at each 10 %
(``bytes done/total (pct), rate, ETA``), a line per retry saying what failed, and a final
line with the size and time; inside GitHub Actions all of it sits in a
``::group::``/``::endgroup::`` block, so the log shows one collapsed line per pull.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TextIO

from rocmenv.context import Context
from rocmenv.engine.protocol import Engine, PullEvent
from rocmenv.escape import shown
from rocmenv.joblog import joblog
from rocmenv.run.pull import (
    Failure,
    PullPlan,
    PullProgress,
    PullResult,
    RetryPolicy,
    human_bytes,
    human_seconds,
)
from rocmenv.settings.resolve import Settings

PLAIN_INTERVAL = 15.0
TTY_INTERVAL = 0.1
MAX_LAYER_LINES = 6
MIN_REFERENCE = 16  # characters of a shortened reference below which the prefix goes first
_KIND = {
    "rate-limit": "rate limited by the registry (429)",
    "server": "registry server error",
    "connection": "connection failed",
    "fatal": "failed",
}


class PullDisplay:
    """A :class:`rocmenv.run.pull.PullObserver` writing to ``stream``."""

    def __init__(
        self,
        stream: TextIO,
        image: str,
        *,
        tty: bool,
        github: bool,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
        interval: float = PLAIN_INTERVAL,
        ticker: bool = False,
        columns: Callable[[], int] | None = None,
    ) -> None:
        self.stream, self.image = stream, image
        self.quiet = quiet
        self.tty, self.github = tty and not github and not quiet, github and not quiet
        self.clock, self.interval = clock, interval
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker = ticker and not self.tty and not quiet
        self.progress = PullProgress(plan=PullPlan(image=image), clock=clock)
        self.last_line = 0.0
        self.last_decile = 0
        self.drawn: list[int] = []  # the lengths of the live display's lines on screen
        self.grouped = False
        self._columns = columns or self._terminal_columns

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

    def _tick(self) -> None:
        """Off a terminal, a line at least every ``interval`` even when the engine is silent
        (the docker CLI prints nothing while a layer downloads)."""
        while not self._stop.wait(self.interval / 3):
            with self._lock:
                if self.clock() - self.last_line >= self.interval:
                    self.last_line = self.clock()
                    self._write(f"rocmenv: pulling {self.image}: {self.summary()}\n")

    # -- observer ---------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self._clear()
        self._write(f"rocmenv: {shown(text)}\n")

    def begin(self, plan: PullPlan) -> None:
        self.progress = PullProgress(plan=plan, clock=self.clock)
        self.last_line = self.clock()
        present = sum(1 for layer in plan.layers if layer.present)
        what = (
            f" ({human_bytes(plan.missing_bytes)} to download in "
            f"{len(plan.layers) - present} of {len(plan.layers)} layers)"
            if plan.layers
            else ""
        )
        if self.quiet:
            return
        if self.github:
            with self._lock:
                joblog(self.stream).command("group", f"rocmenv: pulling {self.image}{what}")
            self.grouped = True
        else:
            self._write(self._line("rocmenv: pulling ", what) + "\n")
        if self._ticker:
            threading.Thread(target=self._tick, daemon=True).start()

    def event(self, event: PullEvent) -> None:
        with self._lock:
            self._event(event)

    def _event(self, event: PullEvent) -> None:
        self.progress.feed(event)
        if self.quiet:
            return
        now = self.clock()
        if event.status.lower().startswith("retrying"):
            self.note(f"layer {event.layer}: {event.status} (the engine retries it)")
        if self.tty:
            if now - self.last_line >= TTY_INTERVAL:
                self.last_line = now
                self._draw()
            return
        fraction = self.progress.fraction
        decile = int(fraction * 10) if fraction is not None else 0
        if decile > self.last_decile or now - self.last_line >= self.interval:
            self.last_decile = max(decile, self.last_decile)
            self.last_line = now
            self._write(f"rocmenv: pulling {self.image}: {self.summary()}\n")

    def retrying(self, attempt: int, failure: Failure, delay: float) -> None:
        self.note(
            f"pull attempt {attempt} of {self.image} failed ({_KIND[failure.kind]}): "
            f"{failure.message}; retrying in {delay:.0f}s (finished layers are kept)"
        )

    def done(self, result: PullResult) -> None:
        if self.quiet:
            self.close()
            return
        self._clear()
        size = human_bytes(result.missing_bytes or self.progress.total)
        rate = (result.missing_bytes or self.progress.total) / max(result.seconds, 1e-6)
        tries = f", {result.attempts} attempts" if result.attempts > 1 else ""
        took = f": {size} in {human_seconds(result.seconds)} ({human_bytes(rate)}/s{tries})"
        self._write(self._line("rocmenv: pulled ", took) + "\n")
        self.close()

    def close(self) -> None:
        """Stop the ticker, end the group (also when the pull failed)."""
        self._stop.set()
        self._clear()
        if self.grouped:
            with self._lock:
                joblog(self.stream).command("endgroup")
            self.grouped = False

    # -- rendering --------------------------------------------------------------------------
    def summary(self) -> str:
        p = self.progress
        pct = f" ({100 * p.fraction:.0f}%)" if p.fraction is not None else ""
        total = human_bytes(p.total) if p.total else "?"
        return (
            f"{human_bytes(p.done)}/{total}{pct}, {human_bytes(p.rate)}/s, "
            f"ETA {human_seconds(p.eta)}"
        )

    def _terminal_columns(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, ValueError, OSError):
            return 80

    def _line(self, prefix: str, rest: str) -> str:
        """``prefix`` + the image + ``rest``: fitted on a terminal, whole in a log."""
        if not self.tty:
            return f"{prefix}{self.image}{rest}"
        return fit_line(prefix, self.image, rest, self._columns())

    def _clear(self) -> None:
        if self.tty and self.drawn:
            width = self._columns()
            rows = sum(max(1, -(-n // width)) for n in self.drawn)  # as wrapped now
            up = f"\x1b[{rows - 1}A" if rows > 1 else ""
            self._write(f"\r{up}\x1b[J")
            self.drawn = []

    def _draw(self) -> None:
        width = self._columns()
        lines = []
        for layer, (done, total) in self.progress.layers.items():
            if total and done >= total:
                continue
            status = self.progress.last_status.get(layer, "waiting").split(" ", 1)[0]
            size = f"{human_bytes(done)}/{human_bytes(total)}" if total else ""
            lines.append(fit_layer(layer, status, size, width))
        extra = len(lines) - MAX_LAYER_LINES
        lines = lines[:MAX_LAYER_LINES] + ([f"  … {extra} more"] if extra > 0 else [])
        lines.append(fit_line("rocmenv: pulling ", self.image, f": {self.summary()}", width))
        self._clear()
        self._write("\n".join(lines))
        self.drawn = [len(line) for line in lines]


def fit_reference(reference: str, room: int) -> str:
    """``reference`` in at most ``room`` characters: its digest cut to 12 hex digits, else
    the digest left out (``@…``), else the name shortened in the middle."""
    if len(reference) <= room:
        return reference
    name, at, digest = reference.partition("@")
    if at:
        algorithm, _, hexa = digest.partition(":")
        for short in (f"{name}@{algorithm}:{hexa[:12]}…", f"{name}@…"):
            if len(short) <= room:
                return short
    if room < 3:
        return reference[: max(room, 0)]
    head = room // 2
    return name[:head] + "…" + name[len(name) - (room - 1 - head) :]


def fit_line(prefix: str, reference: str, rest: str, width: int) -> str:
    """``prefix`` + ``reference`` + ``rest`` in under ``width`` columns (the last column
    would wrap on some terminals): the reference shortened first, the prefix dropped next,
    ``rest`` (the numbers) cut only when nothing else is left."""
    limit = max(width - 1, 1)
    for lead in (prefix, ""):
        room = limit - len(lead) - len(rest)
        if room >= min(MIN_REFERENCE, len(reference)):
            return lead + fit_reference(reference, room) + rest
    return rest.removeprefix(": ")[:limit]


def fit_layer(layer: str, status: str, size: str, width: int) -> str:
    """A layer's line: id, state, bytes; the state column goes before the bytes do."""
    limit = max(width - 1, 1)
    for line in (f"  {layer}  {status:<12} {size}", f"  {layer} {size}"):
        if len(line.rstrip()) <= limit:
            return line.rstrip()
    return f"  {layer} {size}"[:limit]


def pull_with_display(
    ctx: Context,
    settings: Settings,
    engine: Engine,
    image: str,
    *,
    quiet: bool = False,
    retry: RetryPolicy | None = None,
) -> PullResult:
    """:func:`rocmenv.run.pull.fetch` with the display on stderr (nothing but retries and
    failures when ``quiet``); the registry is asked for the plan with ``settings``' registry
    settings, and the disk reserve is theirs."""
    from rocmenv.image.pinning import make_client
    from rocmenv.run.pull import fetch

    display = PullDisplay(
        ctx.stderr,
        image,
        tty=ctx.live,
        github=ctx.in_github_actions,
        quiet=quiet,
        ticker=True,
    )
    if settings.images.cache is not None:  # the runner image cache (issue 32)
        from rocmenv.run.cache_pull import pull_through_cache

        try:
            return pull_through_cache(ctx, settings, engine, image, display)
        finally:
            display.close()
    client = make_client(ctx, settings)
    try:
        return fetch(
            ctx, engine, image, observer=display, client=client,
            reserve=settings.disk_reserve, retry=retry,
        )  # fmt: skip
    finally:
        display.close()
        client.close()
