"""The Slurm backend: each test a Slurm job asking for its GPU count; on the allocated node
the test's container gets exactly the GPUs Slurm allocated.

Submitting side (:class:`SlurmBackend`): ``srun --gres=gpu[:TYPE]:K`` (or ``--gpus=K``),
``--time`` = estimate x ``time-factor`` (at least ``min-time``), partition, account and
extra arguments from ``[slurm]``; the job runs ``rocmenv suite slurm-exec`` on the node and
its output streams back into the test's log. Stopping a test is ``scancel`` of its job
(by its unique name), then srun's end.

Node side (:func:`exec_on_node`): Slurm exports the allocation as indices
(``SLURM_STEP_GPUS``, else ``SLURM_JOB_GPUS``) into the node's ``gres.conf`` ``File=`` list
in file order — not PCI order, not the device minor. Each index becomes that ``File=``
path, matched to rocmenv's GPU inventory by device number (then name), and the container
gets exactly those render nodes: Docker containers live outside the job's device cgroup, so
the visible-device variables alone would let a test reach every GPU. An allocated node the
job cannot open (EPERM from the device cgroup) means gres.conf and Slurm disagree: an error.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmenv.context import Context
from rocmenv.engine import EngineName
from rocmenv.errors import ConfigError, EngineUnavailable, SlurmError, UsageError
from rocmenv.suite.model import SlurmSettings
from rocmenv.suite.packer import Cancel, Job, Outcome, Status

MARKER = "rocmenv-suite-slurm:"
DEFAULT_GRES_CONF = Path("/etc/slurm/gres.conf")


# -- gres.conf ---------------------------------------------------------------------------------


def _expand(text: str) -> list[str]:
    """``/dev/dri/renderD[128-130,140]`` → the paths; ``a,b`` lists; no brackets → as is."""
    out: list[str] = []
    for part in re.split(r",(?![^\[]*\])", text):
        match = re.fullmatch(r"(.*)\[([0-9,\-]+)\](.*)", part)
        if not match:
            out.append(part)
            continue
        head, body, tail = match.groups()
        for item in body.split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{n:0{width}d}{tail}")
    return [p for p in out if p]


@dataclass(frozen=True, kw_only=True)
class GresDevice:
    index: int  # Slurm's index on this node: position in gres.conf order
    type: str | None
    path: str


def parse_gres_conf(text: str, *, node: str | None = None) -> list[GresDevice]:
    """The node's ``Name=gpu`` devices in file order (``NodeName=`` lines for other nodes are
    skipped; ``File=`` ranges and lists expanded)."""
    paths: list[tuple[str | None, str]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields: dict[str, str] = {}
        for token in line.split():
            k, eq, v = token.partition("=")
            if eq:
                fields[k.lower()] = v
        if fields.get("name") != "gpu" or "file" not in fields:
            continue
        if node is not None and "nodename" in fields and node not in _expand(fields["nodename"]):
            continue
        for path in _expand(fields["file"]):
            paths.append((fields.get("type"), path))
    return [GresDevice(index=i, type=t, path=p) for i, (t, p) in enumerate(paths)]


def default_gres_conf(env: Mapping[str, str]) -> Path:
    if env.get("SLURM_CONF"):
        return Path(env["SLURM_CONF"]).parent / "gres.conf"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
        match = re.search(r"^SLURM_CONF\s*=\s*(\S+)", out, re.M)
        if match:
            return Path(match.group(1)).parent / "gres.conf"
    return DEFAULT_GRES_CONF


def allocated_indices(env: Mapping[str, str]) -> tuple[int, ...]:
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        text = env.get(name, "").strip()
        if text:
            try:
                return tuple(int(x) for x in text.split(","))
            except ValueError:
                raise SlurmError(f"{name}={text!r} is not a list of GPU indices") from None
    raise SlurmError(
        "Slurm allocated no GPUs to this job (neither SLURM_STEP_GPUS nor SLURM_JOB_GPUS is set)",
        hint="run through `rocmenv suite run --backend slurm`, which asks for --gres=gpu:K",
    )


@dataclass(frozen=True, kw_only=True)
class NodeGpus:
    slurm: tuple[int, ...]  # Slurm's indices
    paths: tuple[str, ...]  # the gres.conf File= entries
    host: tuple[int, ...]  # rocmenv's GPU indices (PCI order) of the same nodes


def map_allocation(
    indices: Sequence[int], devices: Sequence[GresDevice], inventory: object
) -> NodeGpus:
    """Slurm indices → gres.conf paths → rocmenv GPU indices (by device number, then name)."""
    gpus = getattr(inventory, "gpus", ())
    by_rdev: dict[int, int] = {}
    by_name: dict[str, int] = {}
    for gpu in gpus:
        by_name[gpu.render_node.name] = gpu.index
        with contextlib.suppress(OSError):
            st = os.stat(gpu.render_node)
            if st.st_rdev:
                by_rdev[st.st_rdev] = gpu.index
    paths: list[str] = []
    host: list[int] = []
    for i in indices:
        if not 0 <= i < len(devices):
            raise SlurmError(
                f"Slurm allocated GPU index {i} but gres.conf lists {len(devices)} GPU files",
                hint="gres.conf on this node must match the one slurmd read",
            )
        path = devices[i].path
        found: int | None = None
        with contextlib.suppress(OSError):
            st = os.stat(path)
            found = by_rdev.get(st.st_rdev) if st.st_rdev else None
        if found is None:
            found = by_name.get(Path(path).name)
        if found is None:
            raise SlurmError(
                f"gres.conf File={path} (Slurm GPU {i}) is none of this host's GPUs",
                hint="see `rocmenv gpus`; gres.conf should list render nodes (/dev/dri/renderD*)",
            )
        paths.append(path)
        host.append(found)
    return NodeGpus(slurm=tuple(indices), paths=tuple(paths), host=tuple(host))


def check_access(paths: Sequence[str]) -> None:
    """An allocated node that the job's device cgroup forbids means a wrong mapping."""
    import errno

    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as err:
            if err.errno == errno.EPERM:
                raise SlurmError(
                    f"{path} was mapped from this job's allocation but the job may not open it",
                    hint="gres.conf's File= order differs from the one slurmd uses",
                ) from None
            continue  # ENXIO etc.: no driver behind the node; the cgroup let us through
        os.close(fd)


def exec_on_node(
    ctx: Context,
    *,
    profile: str | None,
    engine: EngineName | None,
    gres_conf: Path | None,
    command: tuple[str, ...],
) -> int:
    from rocmenv.config import load_config
    from rocmenv.gpu import discover
    from rocmenv.suite.local import gpus_arg, run_in_container

    conf = gres_conf or default_gres_conf(ctx.env)
    try:
        text = conf.read_text()
    except OSError as err:
        raise ConfigError(
            f"cannot read {conf}: {err.strerror}", hint="set [slurm] gres-conf"
        ) from None
    devices = parse_gres_conf(text, node=socket.gethostname().split(".")[0])
    config = load_config(ctx)
    inventory = discover(config.host.sysfs_root, config.host.dev_root)
    node = map_allocation(allocated_indices(ctx.env), devices, inventory)
    check_access(node.paths)
    ctx.stderr.write(
        f"{MARKER} slurm={','.join(map(str, node.slurm))} host={gpus_arg(node.host)} "
        f"files={','.join(node.paths)} node={socket.gethostname()}\n"
    )
    ctx.stderr.flush()
    t0 = time.monotonic()
    code = run_in_container(
        ctx, profile=profile, gpus=gpus_arg(node.host), command=command, engine=engine,
        log=ctx.stdout, on_created=lambda _cid: None,
    )  # fmt: skip
    ctx.stdout.flush()
    ctx.stderr.write(f"{MARKER} runtime={time.monotonic() - t0:.3f} exit={code}\n")
    return code


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
