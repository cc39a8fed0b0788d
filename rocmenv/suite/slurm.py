"""The Slurm backend: each test a Slurm job asking for its GPU count, run on the allocated
node with exactly the GPUs Slurm allocated (see :mod:`rocmenv.suite.allocation`). This is
``[slurm] packing = "slurm"``; the default packs the tests as job steps of one allocation
(:mod:`rocmenv.suite.steps`, which uses this module's node command, log and markers).

Submitting side (:class:`SlurmBackend`): ``srun --gres=gpu[:TYPE]:K`` (or ``--gpus=K``),
``--time`` = estimate x ``time-factor`` (at least ``min-time``), partition, account and
extra arguments from ``[slurm]``; the job runs ``rocmenv suite slurm-exec`` on the node and
its output streams back into the test's log. Stopping a test is ``scancel`` of its job
(by its unique name), then srun's end. Nothing assumes one node: the container engine is
the allocated node's own.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmenv.container.render import refuse_control
from rocmenv.context import Context
from rocmenv.errors import EngineUnavailable, UsageError
from rocmenv.settings.resolve import Flags
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.allocation import MARKER
from rocmenv.suite.drive import Cancel, Outcome, Status
from rocmenv.suite.packer import Job

# -- submitting side ---------------------------------------------------------------------------


def slurm_pool(jobs: Sequence[Job]) -> tuple[int, ...]:
    """Slurm packs the cluster itself: a virtual pool big enough to submit every test."""
    return tuple(range(sum(max(j.gpus, 1) for j in jobs)))


def gpu_args(settings: SlurmSettings, count: int) -> list[str]:
    if count == 0:
        return []
    if settings.gpu_request == "gpus":
        kind = f"{settings.gres_type}:" if settings.gres_type else ""
        return [f"--gpus={kind}{count}"]
    kind = f"{settings.gres_type}:" if settings.gres_type else ""
    return [f"--gres=gpu:{kind}{count}"]


def time_limit(settings: SlurmSettings, estimate: float) -> str:
    seconds = max(settings.min_time, estimate * settings.time_factor)
    return str(max(1, math.ceil(seconds / 60)))


def node_gpu_capacity(env: Mapping[str, str]) -> int | None:
    """The most GPUs any node offers (``sinfo`` GRES), None when it cannot be told."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%G"], capture_output=True, text=True, timeout=20,
            check=False, env=dict(env),
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    counts = [int(m) for m in re.findall(r"gpu(?::[^:(,\s]+)?:([0-9]+)", out)]
    return max(counts) if counts else None


@dataclass(frozen=True, kw_only=True)
class SlurmBackend:
    ctx: Context
    profile: str | None
    flags: Flags  # engine, untrusted: passed on to the node
    commands: dict[str, tuple[str, ...]]
    log_dir: Path
    settings: SlurmSettings
    session: str = field(default_factory=lambda: os.urandom(4).hex())
    output: Path | None = None  # --output: each test's output directory to output/TEST

    def check(self, jobs: Sequence[Job], capacity: int | None = None) -> None:
        """A Slurm submit host, and no test bigger than the biggest node (``capacity``: its
        GPUs, when the caller has asked ``sinfo`` already)."""
        if shutil.which("srun", path=self.ctx.env.get("PATH")) is None:
            raise EngineUnavailable(
                "srun is not on PATH: this is not a Slurm submit host",
                hint="install the Slurm client (slurm-client) or use --backend local",
            )
        if capacity is None:
            capacity = node_gpu_capacity(self.ctx.env)
        if capacity is not None:
            too_big = [j for j in jobs if j.gpus > capacity]
            if too_big:
                names = ", ".join(f"{j.name} ({j.gpus})" for j in too_big)
                raise UsageError(
                    f"{len(too_big)} test(s) need more GPUs than any Slurm node has ({capacity}): {names}"
                )

    def node_argv(self, job: Job) -> list[str]:
        """``rocmenv suite slurm-exec … -- CMD`` as the node runs it (``python -I``)."""
        node = ["suite", "slurm-exec"]
        if self.profile:
            node += ["--profile", self.profile]
        if self.flags.engine:
            node += ["--engine", self.flags.engine]
        if self.flags.untrusted:
            node.append("--untrusted")
        if self.settings.gres_conf is not None:
            node += ["--gres-conf", str(self.settings.gres_conf)]
        if job.gpus == 0:
            node.append("--no-gpus")
        if self.output is not None:
            from rocmenv.suite.local import output_for

            node += ["--output", str(output_for(self.output, job))]
        return _node_command(self.ctx, [*node, "--", *self.commands[job.name]])

    def argv(self, job: Job, name: str) -> list[str]:
        return [
            "srun", f"--job-name={name}", "--quiet",
            *job_args(self.settings, job.gpus, time_seconds=job.estimate),
            *self.node_argv(job),
        ]  # fmt: skip

    def job_name(self, job: Job) -> str:
        """The attempt's Slurm name (its job's, or its step's): unique per session."""
        from rocmenv.suite.local import log_name

        return f"rocmenv-{self.session}-{log_name(job.name, job.attempt)[: -len('.log')]}"

    def launch(self, job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        name = self.job_name(job)
        env = dict(self.ctx.env)

        def stop() -> None:
            subprocess.run(["scancel", f"--name={name}"], env=env, capture_output=True,
                           timeout=30, check=False)  # fmt: skip

        return self.run_srun(
            job, self.argv(job, name), cancel, stop, gone=lambda: wait_job_gone(name, env)
        )

    def run_srun(
        self,
        job: Job,
        argv: list[str],
        cancel: Cancel,
        stop_slurm: Callable[[], bool | None],
        *,
        gone: Callable[[], None],
    ) -> Outcome:
        """Run one attempt's ``srun`` into its log (a job, or a step of
        :mod:`rocmenv.suite.steps`). ``stop_slurm`` cancels what it made; srun is terminated
        too unless it returns True (Slurm's own stop is under way). After a cancel, ``gone``
        waits until Slurm has ended it (the node side removes its container meanwhile)."""
        from rocmenv.suite.local import log_name, open_log

        log_path = self.log_dir / log_name(job.name, job.attempt)
        with open_log(log_path, self.ctx) as log:
            if cancel.requested:
                return Outcome(status="cancelled", log=str(log_path))
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.ctx.cwd, env=dict(self.ctx.env), start_new_session=True,
            )  # fmt: skip

            def stop() -> None:
                if stop_slurm() is not True and proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()

            cancel.on_cancel(stop)
            cancel.started()
            code = proc.wait()
            if cancel.requested:
                gone()
        assigned, runtime = _markers(log_path)
        status: Status = "passed" if code == 0 else ("cancelled" if cancel.requested else "failed")
        return Outcome(
            status=status, exit_code=code, log=str(log_path), assigned=assigned, runtime=runtime
        )


def wait_job_gone(name: str, env: Mapping[str, str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", f"--name={name}", "-o", "%i"], capture_output=True, text=True,
            env=dict(env), timeout=30, check=False,
        ).stdout  # fmt: skip
        if not out.strip():
            return
        time.sleep(0.5)


def _markers(log_path: Path) -> tuple[tuple[int, ...] | None, float | None]:
    assigned: tuple[int, ...] | None = None
    runtime: float | None = None
    with contextlib.suppress(OSError), log_path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.startswith(MARKER):
                continue
            fields = dict(f.split("=", 1) for f in line[len(MARKER) :].split() if "=" in f)
            if "host" in fields and fields["host"] != "none":
                with contextlib.suppress(ValueError):
                    assigned = tuple(int(x) for x in fields["host"].split(","))
            if "runtime" in fields:
                with contextlib.suppress(ValueError):
                    runtime = float(fields["runtime"])
    return assigned, runtime


# -- one command as a Slurm job (`rocmenv run --backend slurm`, `options --format sbatch`) ----


def gpu_count(ctx: Context, selection: str) -> int:
    """How many GPUs a ``--gpus`` selection names (Slurm picks which): indices and ranges
    count one per GPU, a UUID or PCI address one; ``all`` is a whole node."""
    from rocmenv.container.gpu import parse_gpus

    request = parse_gpus(selection)
    if request.kind == "none":
        return 0
    if request.kind == "all":
        capacity = node_gpu_capacity(ctx.env)
        if capacity is None:
            raise UsageError(
                "--gpus all with Slurm means a whole node, but sinfo reports no GPU nodes",
                hint="name a count instead, e.g. --gpus 0-3 for 4 GPUs",
            )
        return capacity
    return sum(len(item.indices) if item.kind == "index" else 1 for item in request.items)


def _node_command(ctx: Context, node_args: Sequence[str]) -> list[str]:
    # -I: `python -m` would put the working directory (the checkout) first on sys.path, so a
    # fork's committed argparse.py would run on the node before rocmenv does
    argv = [sys.executable, "-I", "-m", "rocmenv"]
    if ctx.config_path is not None:
        argv += ["--config", str(ctx.config_path.resolve())]
    return [*argv, *node_args]


def job_args(
    settings: SlurmSettings, count: int, *, time_seconds: float | None, ntasks: int = 1
) -> list[str]:
    out = ["--nodes=1", f"--ntasks={ntasks}", *gpu_args(settings, count)]
    if time_seconds is not None:
        out.append(f"--time={time_limit(settings, time_seconds)}")
    if settings.partition:
        out.append(f"--partition={settings.partition}")
    if settings.account:
        out.append(f"--account={settings.account}")
    out += settings.extra_args
    refuse_control(out, "the Slurm job's arguments")  # [slurm] is checked; site config too
    return out


def run_as_job(
    ctx: Context,
    settings: SlurmSettings,
    *,
    count: int,
    node_args: Sequence[str],
    untrusted: bool = False,
) -> int:
    """``srun`` the node-side ``rocmenv run --gpus slurm …`` with this terminal's output
    (``untrusted``: fenced in GitHub Actions, :meth:`rocmenv.context.Context.child_output` —
    it carries the container's); SIGINT/SIGTERM ``scancel`` the job (the node-side rocmenv
    then removes its container)."""
    if shutil.which("srun", path=ctx.env.get("PATH")) is None:
        raise EngineUnavailable(
            "srun is not on PATH: this is not a Slurm submit host",
            hint="install the Slurm client, or run without --backend slurm",
        )
    name = f"rocmenv-run-{os.urandom(4).hex()}"
    argv = ["srun", f"--job-name={name}", "--quiet",
            *job_args(settings, count, time_seconds=None),
            *_node_command(ctx, node_args)]  # fmt: skip
    for stream in (ctx.stdout, ctx.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with ctx.child_output(untrusted=untrusted) as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out.stdout_fd, stderr=out.stderr_fd,
            cwd=ctx.cwd, env=dict(ctx.env), start_new_session=True,
        )  # fmt: skip
        return _wait_job(ctx, proc, name)


def _wait_job(ctx: Context, proc: subprocess.Popen[bytes], name: str) -> int:
    """The job's exit status; SIGINT/SIGTERM/SIGHUP meanwhile ``scancel`` it (128+N)."""
    import signal
    import threading

    received: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        received.append(signum)
        subprocess.run(["scancel", f"--name={name}"], env=dict(ctx.env), capture_output=True,
                       timeout=30, check=False)  # fmt: skip

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, stop)
    try:
        code = proc.wait()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if received:
        wait_job_gone(name, ctx.env)
        return 128 + received[0]
    return code


def render_sbatch(
    ctx: Context, settings: SlurmSettings, *, count: int, profile: str, node_args: Sequence[str]
) -> str:
    """A batch script for users who submit by hand: ``sbatch job.sh CMD…``."""
    import shlex

    config = ["--config", str(ctx.config_path.resolve())] if ctx.config_path is not None else []
    refuse_control([str(ctx.cwd), *config, *node_args], "options --format sbatch")
    lines = [
        "#!/bin/bash",
        f"# rocmenv: profile {profile} with {count} GPU(s); submit with: sbatch THIS_FILE CMD…",
        "# The job's container gets exactly the GPUs Slurm allocates (rocmenv run --gpus slurm).",
        f"#SBATCH --job-name=rocmenv-{profile}",
        *(f"#SBATCH {arg}" for arg in job_args(settings, count, time_seconds=None)),
        "set -euo pipefail",
        f"cd {shlex.quote(str(ctx.cwd))}",
        "exec rocmenv " + shlex.join(config + list(node_args)) + ' "$@"',
    ]
    return "\n".join(lines) + "\n"
