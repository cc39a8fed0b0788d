"""The Slurm backend's default packing: the suite's GPUs held by one allocation, each test a
job step in it, started by rocmenv's own packer (``[slurm] packing = "rocmenv"``).

With one job per test (``packing = "slurm"``, :class:`~rocmenv.suite.slurm.SlurmBackend`) a
test that does not start when it is submitted waits for Slurm's scheduler: at Slurm's
defaults the main loop stops at the first pending job of a partition that does not fit and
runs every ``sched_interval`` (60 s), backfill every ``bf_interval`` (30 s). A job step
inside an allocation is not scheduled: ``srun --jobid=J`` creates it in ~50 ms. So
:func:`hold` asks once (``salloc --no-shell``) for G GPUs on one node — as many as the suite
can use at once, no more than a node has free now, at least its biggest test's — and the
packer hands out G slots; each test is ``srun --jobid=J --exact --ntasks=1 --gres=gpu:K``
(``--gres=none`` for a test without GPUs, which would otherwise get every GPU of the job).
Slurm still picks the step's GPUs and its device cgroup still holds exactly them; on the
node ``rocmenv suite slurm-exec`` maps ``SLURM_STEP_GPUS`` (:mod:`rocmenv.suite.allocation`).

Stopping a test: ``scancel --signal=TERM J.S`` (a plain ``scancel`` of a step is SIGKILL at
once, and the node side could not remove its container), repeated while it runs, SIGKILL
after :data:`STEP_KILL_AFTER` asks; srun is terminated only while it has no step yet. The allocation is released (``scancel J``, waited out)
when the suite ends, however it ends — an interrupt while it is still pending included.
The price: GPUs of the allocation that the suite's tail cannot use stay held until the end.
"""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from rocmenv.container.render import refuse_control
from rocmenv.errors import SlurmError
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.drive import Cancel, Outcome
from rocmenv.suite.packer import Job
from rocmenv.suite.slurm import (
    SlurmBackend,
    _node_command,
    gpu_args,
    job_args,
    time_limit,
    wait_job_gone,
)

SALLOC_OUTPUT = 64 * 1024  # bytes of salloc's messages kept for an error
# ``scancel J.S`` SIGKILLs a step at once (a job gets SIGTERM and KillWait): the node-side
# rocmenv would leave its container behind. A stopped step gets SIGTERM, again each time it
# is asked (about every second), and SIGKILL only after this many asks.
STEP_KILL_AFTER = 30
WARM_READY_WAIT = 5.0  # seconds the first steps wait for the warm runner to listen


@dataclass(frozen=True, kw_only=True)
class NodeGres:
    name: str
    gpus: int  # configured
    free: int  # not allocated now


def _gpu_count(field: str, gres_type: str | None) -> int:
    """``gpu:mi300x:8,gpu:mi250:2`` → 10 (only ``gres_type`` when set); ``(IDX:…)`` ignored."""
    total = 0
    for kind, count in re.findall(r"gpu(?::([^:(,\s]+))?:([0-9]+)", field):
        if gres_type is None or kind == gres_type:
            total += int(count)
    return total


def cluster_nodes(env: Mapping[str, str], settings: SlurmSettings) -> list[NodeGres] | None:
    """Every usable node of the partition with its GPUs and how many are free (``sinfo``),
    None when it cannot be told."""
    argv = ["sinfo", "-h", "-N", "-O", "NodeHost:|,Gres:|,GresUsed:|,StateCompact:|"]
    if settings.partition:
        argv.insert(1, f"--partition={settings.partition}")
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=20, check=False, env=dict(env)
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nodes(out, settings.gres_type)


def parse_nodes(text: str, gres_type: str | None) -> list[NodeGres] | None:
    nodes: dict[str, NodeGres] = {}
    for line in text.splitlines()[:10_000]:
        fields = line.split("|")
        if len(fields) < 4:
            continue
        name, gres, used, state = (f.strip() for f in fields[:4])
        total = _gpu_count(gres, gres_type)
        usable = state.rstrip("*~#%$@^-!") in ("idle", "mix", "mixed")
        free = max(0, total - _gpu_count(used, gres_type)) if usable else 0
        nodes[name] = NodeGres(name=name, gpus=total, free=free)  # a node in two partitions
    return list(nodes.values()) or None


def allocation_size(
    jobs: Sequence[Job], nodes: Sequence[NodeGres] | None, max_parallel: int | None = None
) -> int:
    """GPUs to hold: what the suite can use at once (every test side by side, ``--max-parallel``
    of the biggest), capped by the most a node has free now, never below the biggest test."""
    sizes = sorted((j.gpus for j in jobs), reverse=True)
    biggest = sizes[0] if sizes else 0
    useful = sum(sizes[:max_parallel] if max_parallel is not None else sizes)
    if nodes:
        useful = min(useful, max(n.gpus for n in nodes), max(n.free for n in nodes))
    return max(biggest, useful)


def allocation_tasks(jobs: Sequence[Job], gpus: int, max_parallel: int | None = None) -> int:
    """Tasks (a step's CPU share) to hold: one per test that can run at once."""
    with_gpus = sorted(j.gpus for j in jobs if j.gpus > 0)
    fit = 0
    while fit < len(with_gpus) and sum(with_gpus[: fit + 1]) <= gpus:
        fit += 1
    count = fit + sum(1 for j in jobs if j.gpus == 0)
    if max_parallel is not None:
        count = min(count, max_parallel)
    return max(1, count)


def allocation_seconds(settings: SlurmSettings, jobs: Sequence[Job], gpus: int) -> float:
    """The allocation's time limit: the packer's schedule on ``gpus`` GPUs with every attempt
    of every test at its own limit, doubled (list scheduling with shorter actual times can
    take longer, never twice as long), and never more than all of them one after another.
    Tight enough for a partition's ``MaxTime``; the allocation ends with the suite anyway."""
    from rocmenv.suite.packer import simulate

    worst: dict[str, float] = {}
    for job in jobs:
        retries = job.policy.retries if job.policy is not None else 0
        wait = job.policy.retry_wait if job.policy is not None else 0.0
        per_attempt = 60 * int(time_limit(settings, job.estimate))
        worst[job.name] = per_attempt * (1 + retries) + wait * retries
    serial = sum(worst.values())
    if not jobs:
        return serial
    planned = max(slot.end for slot in simulate(jobs, worst, max(gpus, 1)))
    return min(serial, 2 * planned)


@dataclass(frozen=True, kw_only=True)
class Held:
    job_id: str
    name: str
    gpus: int
    warm: str | None = None  # the warm runner's socket directory on the node (None: none)
    runner: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)
    ready: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def warm_dir(self) -> str | None:
        """The runner's directory while it answers steps: running, and it said it listens;
        None when steps should run their node-side rocmenv themselves."""
        if self.warm is None or self.runner is None or self.runner.poll() is not None:
            return None
        return self.warm if self.ready.is_set() else None


def salloc_argv(settings: SlurmSettings, jobs: Sequence[Job], *, name: str, gpus: int,
                tasks: int) -> list[str]:  # fmt: skip
    return [
        "salloc", "--no-shell", f"--job-name={name}",
        *job_args(settings, gpus, time_seconds=None, ntasks=tasks),
        f"--time={max(1, math.ceil(allocation_seconds(settings, jobs, gpus) / 60))}",
    ]  # fmt: skip


@contextlib.contextmanager
def hold(
    backend: SlurmBackend, jobs: Sequence[Job], stop: threading.Event,
    max_parallel: int | None = None, nodes: Sequence[NodeGres] | None = None,
) -> Iterator[Held | None]:  # fmt: skip
    """One allocation for the suite (None: interrupted while it was pending); released on
    the way out, whatever happens inside. ``nodes``: :func:`cluster_nodes`, when asked
    already."""
    env = dict(backend.ctx.env)
    nodes = nodes if nodes is not None else cluster_nodes(env, backend.settings)
    gpus = allocation_size(jobs, nodes, max_parallel)
    tasks = allocation_tasks(jobs, gpus, max_parallel)
    name = f"rocmenv-{backend.session}-suite"
    argv = salloc_argv(backend.settings, jobs, name=name, gpus=gpus, tasks=tasks)
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        cwd=backend.ctx.cwd, env=env, start_new_session=True,
    )  # fmt: skip
    held: Held | None = None
    try:
        partition = backend.settings.partition
        where = f" in partition {partition}" if partition else ""
        held = _granted(proc, name, f"{gpus} GPU(s){where}", gpus, stop, env)
        if held is not None:
            held = start_warm(backend, held, stop)
        yield held
    finally:
        if held is not None:  # steps still ending finish removing their containers first
            wait_steps_gone(held.job_id, None, env, but=warm_name(held))
        if held is not None and held.runner is not None:
            stop_warm(held, held.runner, env)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        subprocess.run(["scancel", f"--name={name}"], env=env, capture_output=True, timeout=30,
                       check=False)  # fmt: skip
        wait_job_gone(name, env)
        proc.wait()


def _granted(
    proc: subprocess.Popen[bytes], name: str, asked: str, gpus: int, stop: threading.Event,
    env: Mapping[str, str],
) -> Held | None:  # fmt: skip
    output = bytearray()

    def read() -> None:
        import os

        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 4096), b""):
            if len(output) < SALLOC_OUTPUT:
                output.extend(chunk[: SALLOC_OUTPUT - len(output)])

    reader = threading.Thread(target=read, name="salloc-output", daemon=True)
    reader.start()
    while proc.poll() is None:
        if stop.wait(0.1):
            return None
    reader.join(5)
    text = output.decode("utf-8", "replace")
    match = re.search(r"[Gg]ranted job allocation ([0-9]+)", text)
    if proc.returncode != 0 or match is None:
        raise SlurmError(
            f"salloc could not allocate {asked} for the suite (exit {proc.returncode}): "
            + (text.strip().splitlines() or ["no message"])[-1],
            hint='check [slurm] partition/account/extra-args, or use packing = "slurm"',
        )
    return Held(job_id=match.group(1), name=name, gpus=gpus)


def warm_name(held: Held) -> str:
    return f"{held.name}-warm"


def start_warm(backend: SlurmBackend, held: Held, stop: threading.Event) -> Held:
    """The allocation's warm runner (:mod:`rocmenv.suite.warm`): a step without GPUs that
    shares the allocation's CPUs (``--overlap``), waited for until it listens (it imports
    the run path and warms up after that, while the first steps are created) — at most
    :data:`WARM_READY_WAIT` s. A runner that has not said it listens by then, or that ended,
    gets no steps: they run as before, each its own node-side rocmenv. (Starting the first
    steps without waiting measured no faster: their containers then start while Slurm
    still sets up the runner's and their steps, on the same CPUs.)"""
    import os
    import tempfile

    from rocmenv.suite.warm import READY

    directory = os.path.join(tempfile.gettempdir(), f"rocmenv-{backend.session}-warm")
    node = ["suite", "slurm-warm", "--socket-dir", directory]
    if backend.flags.untrusted:  # it runs only untrusted steps then
        node.append("--untrusted")
    argv = [
        "srun", f"--jobid={held.job_id}", f"--job-name={warm_name(held)}", "--quiet",
        "--overlap", "--nodes=1", "--ntasks=1", "--gres=none",
        *_node_command(backend.ctx, node),
    ]  # fmt: skip
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=backend.ctx.cwd, env=dict(backend.ctx.env), start_new_session=True,
        )  # fmt: skip
    except OSError:
        return held
    ready = threading.Event()

    def read() -> None:  # until it ends: its pipe must never fill
        assert proc.stdout is not None
        for line in iter(lambda: proc.stdout.readline(4096), b""):  # type: ignore[union-attr]
            if line.decode("utf-8", "replace").strip() == READY:
                ready.set()

    threading.Thread(target=read, name="slurm-warm", daemon=True).start()
    since = time.monotonic()
    while not ready.is_set() and proc.poll() is None and time.monotonic() < since + WARM_READY_WAIT:
        if stop.wait(0.01):
            break
    ready.wait(0.05)  # the reader may still be on its way to the line
    return Held(
        job_id=held.job_id, name=held.name, gpus=held.gpus, warm=directory, runner=proc,
        ready=ready,
    )  # fmt: skip


def stop_warm(held: Held, proc: subprocess.Popen[bytes], env: Mapping[str, str]) -> None:
    """SIGTERM to the warm runner's step (a plain ``scancel`` of a step is SIGKILL), then
    its end; it waits for children still removing containers."""
    for step in step_ids(held.job_id, warm_name(held), env):
        subprocess.run(["scancel", "--signal=TERM", step], env=dict(env), capture_output=True,
                       timeout=30, check=False)  # fmt: skip
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()


def step_args(settings: SlurmSettings, count: int, *, time_seconds: float) -> list[str]:
    out = ["--nodes=1", "--ntasks=1", "--exact"]
    out += gpu_args(settings, count) if count else ["--gres=none"]
    out.append(f"--time={time_limit(settings, time_seconds)}")
    refuse_control(out, "the Slurm step's arguments")
    return out


@dataclass(frozen=True, kw_only=True)
class StepBackend:
    """Each attempt a job step of the held allocation (its log, markers and stopping as
    :class:`~rocmenv.suite.slurm.SlurmBackend`'s)."""

    jobs: SlurmBackend
    held: Held

    def argv(self, job: Job, name: str) -> list[str]:
        node = self.jobs.node_argv(job)
        warm = self.held.warm_dir()
        if warm is not None:
            from rocmenv.suite.warm import client_argv

            node = client_argv(node[0], warm, node)
        return [
            "srun", f"--jobid={self.held.job_id}", f"--job-name={name}", "--quiet",
            *step_args(self.jobs.settings, job.gpus, time_seconds=job.estimate),
            *node,
        ]  # fmt: skip

    def launch(self, job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        name = self.jobs.job_name(job)
        env = dict(self.jobs.ctx.env)

        asked = [0]

        def stop() -> bool:  # True: Slurm stops the step (srun is left to see it end)
            asked[0] += 1
            signal = ["--signal=TERM"] if asked[0] <= STEP_KILL_AFTER else []
            steps = step_ids(self.held.job_id, name, env)
            for step in steps:
                subprocess.run(["scancel", *signal, step], env=env, capture_output=True,
                               timeout=30, check=False)  # fmt: skip
            return bool(steps)

        return self.jobs.run_srun(
            job, self.argv(job, name), cancel, stop,
            gone=lambda: wait_steps_gone(self.held.job_id, name, env),
        )  # fmt: skip


def wait_steps_gone(
    job_id: str, name: str | None, env: Mapping[str, str], timeout: float = 60.0,
    but: str | None = None,
) -> None:  # fmt: skip
    """Until the job has no step named ``name`` (None: no step at all but one named
    ``but``): a step being cancelled is still removing its container, which ``scancel`` of
    the job would cut short."""
    deadline = time.monotonic() + timeout
    while step_ids(job_id, name, env, but=but) and time.monotonic() < deadline:
        time.sleep(0.25)


def step_ids(
    job_id: str, name: str | None, env: Mapping[str, str], but: str | None = None
) -> list[str]:
    """The ids (``J.S``) of the job's steps named ``name`` (None: every step but one named
    ``but``)."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-s", f"--jobs={job_id}", "-o", "%i|%j"], capture_output=True,
            text=True, env=dict(env), timeout=30, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    ids = []
    for line in out.splitlines():
        step, _, step_name = line.partition("|")
        if step_name.strip() == but:
            continue
        if name in (None, step_name.strip()) and re.fullmatch(r"[0-9]+\.[0-9]+", step.strip()):
            ids.append(step.strip())
    return ids
