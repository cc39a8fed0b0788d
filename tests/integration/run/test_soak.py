"""The interrupt soak: many ``rocmenv run``s interrupted at random moments, under CPU load.

Not part of the default run (``-m soak`` selects it; minutes per engine)::

    .venv/bin/pytest -m soak -p no:cacheprovider tests/integration/run/test_soak.py -s

Each run starts a command that would last five minutes (``sleep 300``, which as PID 1
ignores SIGINT/SIGTERM, or a shell that traps them), is sent SIGINT or SIGTERM after a
random 0–2 s — to rocmenv alone or, as a terminal does, to its whole process group —
sometimes a second one, while three CPU-bound processes compete for the cores. A lost
interrupt is a run still going :data:`LOST` seconds after its signal; a leftover is any
container of the run's label afterwards. Both must be zero; the figures (runs, interrupts,
leftovers, the worst time from the first signal to rocmenv's exit) are printed and written
to ``$ROCMENV_SOAK_REPORT`` when set. ``ROCMENV_SOAK_RUNS`` sets the runs per engine (30).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import pytest

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    every_engine,
    project_fixture,
    python_startup_interrupted,
    remove_containers,
)

pytestmark = pytest.mark.soak

LOST = 60.0  # grace (3 s) + kill + removal is seconds even on a loaded machine
TRAPPING = 'trap "echo got-$1; exit 7" INT TERM; while :; do sleep 0.1; done'


def _spin() -> None:
    while True:
        pass


@pytest.fixture
def cpu_load() -> Iterator[None]:
    """Three CPU-bound processes beside the test (scripts/under-load.sh does the same)."""
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(3)]
    for proc in busy:
        proc.start()
    try:
        yield
    finally:
        for proc in busy:
            proc.kill()
            proc.join()


@dataclass
class Figures:
    engine: str
    runs: int = 0
    interrupts: int = 0
    lost: int = 0
    leftovers: int = 0
    worst_seconds: float = 0.0
    codes: dict[str, int] = field(default_factory=dict)


def _allowed(code: int, first: int, stderr: str) -> bool:
    if code in (128 + first, -first):  # -N: interrupted before Python handled signals
        return True
    return code == 1 and python_startup_interrupted(stderr)


@every_engine
def test_interrupts_at_random_moments_are_never_lost(
    project: Project, engine: str, cpu_load: None, request: pytest.FixtureRequest
) -> None:
    seed = int(os.environ.get("ROCMENV_SOAK_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    figures = Figures(engine=str(request.node.callspec.params["engine"]))
    failures: list[str] = []
    for _ in range(int(os.environ.get("ROCMENV_SOAK_RUNS", "30"))):
        command = ("sleep", "300") if rng.random() < 0.5 else ("sh", "-c", TRAPPING, "sh", "x")
        group = rng.random() < 0.5
        first = rng.choice((signal.SIGINT, signal.SIGTERM))
        second = rng.random() < 0.2
        proc = project.popen(
            "run", "--engine", engine, "--profile", "plain", "--image", project.image,
            "--", *command, start_new_session=group, env={"PYTHONFAULTHANDLER": "1"},
        )  # fmt: skip
        time.sleep(rng.uniform(0.0, 2.0))
        sent = time.monotonic()
        (os.killpg if group else os.kill)(proc.pid, first)
        figures.interrupts += 1
        if second:
            time.sleep(rng.uniform(0.0, 0.5))
            if proc.poll() is None:
                (os.killpg if group else os.kill)(proc.pid, signal.SIGINT)
                figures.interrupts += 1
        try:
            _, err = proc.communicate(timeout=LOST)
        except subprocess.TimeoutExpired:
            figures.lost += 1
            proc.send_signal(signal.SIGABRT)  # the fault handler prints every thread's stack
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            failures.append(
                f"lost: {command[0]} signal {first} after the start, group={group}; "
                f"its threads:\n{err[-4000:]}"
            )
        figures.runs += 1
        figures.worst_seconds = max(figures.worst_seconds, time.monotonic() - sent)
        figures.codes[str(proc.returncode)] = figures.codes.get(str(proc.returncode), 0) + 1
        if not _allowed(proc.returncode, first, err):
            failures.append(f"exit {proc.returncode} after signal {first}: {err[-500:]}")
        left = project.containers()
        if left:
            figures.leftovers += len(left)
            failures.append(f"{len(left)} container(s) left after a run: {left}")
            remove_containers(left)
    figures.worst_seconds = round(figures.worst_seconds, 2)
    report = json.dumps({**asdict(figures), "seed": seed})
    print(f"\nsoak: {report}")
    if os.environ.get("ROCMENV_SOAK_REPORT"):
        with open(os.environ["ROCMENV_SOAK_REPORT"], "a", encoding="utf-8") as out:
            out.write(report + "\n")
    assert not failures, "\n".join(failures)
    assert figures.lost == 0 and figures.leftovers == 0
