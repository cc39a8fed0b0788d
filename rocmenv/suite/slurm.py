"""The Slurm backend: each test a Slurm job asking for its GPU count, run on the allocated
node with exactly the GPUs Slurm allocated (see :mod:`rocmenv.suite.allocation`).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmenv.context import Context
from rocmenv.engine import EngineName
from rocmenv.errors import EngineUnavailable, UsageError
from rocmenv.suite.allocation import MARKER
from rocmenv.suite.model import SlurmSettings
from rocmenv.suite.packer import Cancel, Job, Outcome, Status

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
    suite: str
    profile: str | None
    engine: EngineName | None
    commands: dict[str, tuple[str, ...]]
    estimates: dict[str, float]
    log_dir: Path
    settings: SlurmSettings
    session: str = field(default_factory=lambda: os.urandom(4).hex())

    def check(self, jobs: Sequence[Job]) -> None:
        if shutil.which("srun", path=self.ctx.env.get("PATH")) is None:
            raise EngineUnavailable(
                "srun is not on PATH: this is not a Slurm submit host",
                hint="install the Slurm client (slurm-client) or use --backend local",
            )
        capacity = node_gpu_capacity(self.ctx.env)
        if capacity is not None:
            too_big = [j for j in jobs if j.gpus > capacity]
            if too_big:
                names = ", ".join(f"{j.name} ({j.gpus})" for j in too_big)
                raise UsageError(
                    f"{len(too_big)} test(s) need more GPUs than any Slurm node has ({capacity}): {names}"
                )

    def argv(self, job: Job, name: str) -> list[str]:
        s = self.settings
        argv = ["srun", f"--job-name={name}", "--nodes=1", "--ntasks=1", "--quiet",
                f"--time={time_limit(s, job.estimate)}", *gpu_args(s, job.gpus)]  # fmt: skip
        if s.partition:
            argv.append(f"--partition={s.partition}")
        if s.account:
            argv.append(f"--account={s.account}")
        argv += list(s.extra_args)
        argv += [sys.executable, "-m", "rocmenv"]
        if self.ctx.config_path is not None:
            argv += ["--config", str(self.ctx.config_path.resolve())]
        argv += ["suite", "slurm-exec"]
        if self.profile:
            argv += ["--profile", self.profile]
        if self.engine:
            argv += ["--engine", self.engine]
        if s.gres_conf is not None:
            argv += ["--gres-conf", str(s.gres_conf)]
        return [*argv, "--", *self.commands[job.name]]

    def launch(self, job: Job, gpus: tuple[int, ...], cancel: Cancel) -> Outcome:
        from rocmenv.suite.local import log_name

        name = f"rocmenv-{self.session}-{log_name(job.name)[: -len('.log')]}"
        log_path = self.log_dir / log_name(job.name)
        env = dict(self.ctx.env)
        with log_path.open("w", encoding="utf-8") as log:
            if cancel.requested:
                return Outcome(status="cancelled", log=str(log_path))
            proc = subprocess.Popen(
                self.argv(job, name), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=self.ctx.cwd, env=env, start_new_session=True,
            )  # fmt: skip

            def stop() -> None:
                subprocess.run(["scancel", f"--name={name}"], env=env, capture_output=True,
                               timeout=30, check=False)  # fmt: skip
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()

            cancel.on_cancel(stop)
            code = proc.wait()
            if cancel.requested:
                _wait_job_gone(name, env)
        assigned, runtime = _markers(log_path)
        status: Status = "passed" if code == 0 else ("cancelled" if cancel.requested else "failed")
        return Outcome(
            status=status, exit_code=code, log=str(log_path), assigned=assigned, runtime=runtime
        )


def _wait_job_gone(name: str, env: Mapping[str, str], timeout: float = 60.0) -> None:
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
