"""The stages of a run and the transitions between them.

A run (:func:`rocmenv.run.execute.execute`) goes through :class:`Stage` in order::

    start-up → image → create → attach → start → running → stopping → removing → cleanup

(``stopping`` only after a signal or a container that outlived its wait; ``removing`` and
``cleanup`` always, once a container exists). Every transition goes through
:meth:`Stages.enter`, which reads the signal state: before the container runs (``image`` …
``start``) a signal received so far raises :class:`~rocmenv.run.interrupt.Interrupted`; from
``running`` on, the supervisor forwards it, and the last three stages run whatever arrives —
they are how the run ends. ``cleanup`` is the place for work after the container is gone and
before the exit status is returned.

**The test hook.** ``ROCMENV_TEST_PARK=STAGE:FILE`` parks the run at the start of ``STAGE``:
it writes ``FILE`` (the stage's name and rocmenv's pid) and waits there — in the run's one
signal-aware wait — until a signal arrives (at most :data:`PARK_LIMIT` seconds), so a test
can interrupt exactly at that boundary on every engine. Unset, it costs one dictionary
lookup per run.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Mapping
from pathlib import Path

from rocmenv.errors import UsageError
from rocmenv.hostfs import write_atomic
from rocmenv.record import record
from rocmenv.run.interrupt import Interrupted, SignalWatch

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Final

PARK_VARIABLE: Final = "ROCMENV_TEST_PARK"
PARK_LIMIT: Final = 120.0  # seconds a parked run waits for its signal before going on


class Stage(enum.Enum):
    STARTUP = "start-up"
    IMAGE = "image"
    CREATE = "create"
    ATTACH = "attach"
    START = "start"
    RUNNING = "running"
    STOPPING = "stopping"
    REMOVING = "removing"
    CLEANUP = "cleanup"


#: Entering these raises Interrupted when a signal has arrived: nothing runs yet.
BEFORE_RUNNING: Final = frozenset(
    {Stage.STARTUP, Stage.IMAGE, Stage.CREATE, Stage.ATTACH, Stage.START}
)


@record
class Park:
    """Where the test hook parks the run, and the file that says it is parked there."""

    stage: Stage
    path: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Park | None:
        value = env.get(PARK_VARIABLE)
        if not value:
            return None
        name, sep, path = value.partition(":")
        stages = {s.value: s for s in Stage}
        if name not in stages or not sep or not path:
            raise UsageError(
                f"{PARK_VARIABLE}={value!r} is not STAGE:FILE",
                hint=f"a test-only switch; STAGE is one of {', '.join(stages)} (or unset it)",
            )
        return cls(stage=stages[name], path=Path(path))


class Timings:
    """``ROCMENV_TIMINGS=1``: how long each stage took (one note at the end of the run)."""

    __slots__ = ("enabled", "marks", "start")

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.perf_counter()
        self.marks: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        if self.enabled:
            self.marks.append((name, time.perf_counter()))

    def summary(self) -> str:
        """Each stage's time, from entering it to entering the next (or now)."""
        end = time.perf_counter()
        times = [t for _, t in self.marks] + [end]
        parts = [
            f"{name} {1000 * (times[i + 1] - t):.0f}ms" for i, (name, t) in enumerate(self.marks)
        ]
        return f"timings: {', '.join(parts)}; total {1000 * (end - self.start):.0f}ms"


class Stages:
    """The run's current stage; every transition reads the signal state (module docstring)."""

    def __init__(self, watch: SignalWatch, env: Mapping[str, str], *, timings: bool) -> None:
        self.watch = watch
        self.park = Park.from_env(env)
        self.timings = Timings(enabled=timings)
        self.current = Stage.STARTUP

    def enter(self, stage: Stage) -> None:
        self.current = stage
        self.timings.mark(stage.value)
        if self.park is not None and self.park.stage is stage:
            self._parked()
        if stage in BEFORE_RUNNING:
            signum = self.watch.first()
            if signum is not None:
                raise Interrupted(signum)

    def _parked(self) -> None:
        assert self.park is not None
        before = self.watch.count()  # the test signals once it sees the file
        # atomic: the test sees the whole line or nothing
        write_atomic(self.park.path, f"{self.park.stage.value} {os.getpid()}\n", durable=False)
        self.watch.wait(lambda: False, timeout=PARK_LIMIT, since=before)
