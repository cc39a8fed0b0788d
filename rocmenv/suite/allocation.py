"""The node side of a Slurm job: which GPUs Slurm allocated, as render nodes and rocmenv
GPU indices.

Slurm exports the allocation as indices (``SLURM_STEP_GPUS``, else ``SLURM_JOB_GPUS``) into
the node's ``gres.conf`` ``File=`` list in file order — not PCI order, not the device
minor. Each index becomes that ``File=`` path, matched to rocmenv's GPU inventory by device
number (then name), and the container gets exactly those render nodes: Docker containers
live outside the job's device cgroup, so the visible-device variables alone would let a
test reach every GPU. An allocated node the job cannot open (EPERM from the device cgroup)
means gres.conf and Slurm disagree: an error.

``rocmenv run --gpus slurm`` (what ``--backend slurm`` and ``options --format sbatch`` run
on the node) and ``rocmenv suite slurm-exec`` use :func:`allocated_gpus`.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmenv.context import Context
from rocmenv.errors import ConfigError, SlurmError
from rocmenv.settings.resolve import Flags, Settings

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


def allocated_gpus(
    ctx: Context, settings: Settings, gres_conf: Path | None = None,
    check: Callable[[Sequence[str]], None] | None = None,
) -> NodeGpus:  # fmt: skip
    """This job's GPUs, from Slurm's indices through gres.conf to rocmenv's inventory
    (``check``: the device access check, where the step's process is)."""
    from rocmenv.container.gpu import discover

    conf = gres_conf or settings.slurm.gres_conf or default_gres_conf(ctx.env)
    try:
        text = conf.read_text()
    except OSError as err:
        raise ConfigError(
            f"cannot read {conf}: {err.strerror}", hint="set gres-conf in [slurm]"
        ) from None
    devices = parse_gres_conf(text, node=socket.gethostname().split(".")[0])
    inventory = discover(settings.host.sysfs_root, settings.host.dev_root)
    node = map_allocation(allocated_indices(ctx.env), devices, inventory)
    (check or check_access)(node.paths)
    return node


def describe(node: NodeGpus, env: Mapping[str, str] | None = None) -> str:
    env = env or {}
    step = ".".join(env[k] for k in ("SLURM_JOB_ID", "SLURM_STEP_ID") if env.get(k))
    return (
        f"slurm={','.join(map(str, node.slurm)) or 'none'} "
        f"host={','.join(map(str, node.host)) or 'none'} "
        f"files={','.join(node.paths) or 'none'} node={socket.gethostname()} step={step or '?'}"
    )


def warm_up_node(ctx: Context, *, untrusted: bool = False) -> None:
    """A dry pass of a step's first work — settings, the GPU inventory, the default
    profile's plan (no registry or engine asked) — done once by the warm runner: its
    children inherit what it compiled and cached (a step's planning: ~25 ms cold, ~5 warm).
    Best effort: the steps do it properly anyway."""
    from rocmenv.container.gpu import discover
    from rocmenv.container.plan import PlanRequest, plan
    from rocmenv.container.runspec import Overrides
    from rocmenv.errors import RocmenvError
    from rocmenv.settings.resolve import settings_for

    with contextlib.suppress(RocmenvError, OSError, ValueError):
        settings = settings_for(ctx, Flags(untrusted=untrusted))
        discover(settings.host.sysfs_root, settings.host.dev_root)
        request = PlanRequest(
            overrides=Overrides(gpus="none", command=("true",)), resolve_constraints=False
        )
        plan(ctx, settings, request)


def exec_on_node(
    ctx: Context,
    *,
    flags: Flags,
    gres_conf: Path | None,
    command: tuple[str, ...],
    no_gpus: bool = False,
    check: Callable[[Sequence[str]], None] | None = None,
    on_exit: Callable[[int], None] | None = None,
    output: Path | None = None,
) -> int:
    """``rocmenv suite slurm-exec``: the test's container with exactly Slurm's GPUs (none with
    ``no_gpus``: a test that asked for none), between two marker lines the submitting side
    reads (allocation; run time and exit code). The second is written as soon as the
    command's status is known, then ``on_exit`` gets it (the warm runner ends the step there,
    and removes the container after)."""
    from rocmenv.settings.resolve import settings_for
    from rocmenv.suite.local import gpus_arg, run_in_container

    if no_gpus:
        node = NodeGpus(slurm=(), paths=(), host=())
    else:
        node = allocated_gpus(ctx, settings_for(ctx, flags), gres_conf, check)
    via = " via=warm" if check is not None else ""  # handed over by the warm runner
    ctx.stderr.write(f"{MARKER} {describe(node, ctx.env)}{via}\n")
    ctx.stderr.flush()
    t0 = time.monotonic()
    told: list[int] = []

    def exited(code: int) -> None:
        told.append(code)
        ctx.stdout.flush()
        ctx.stderr.write(f"{MARKER} runtime={time.monotonic() - t0:.3f} exit={code}\n")
        ctx.stderr.flush()
        if on_exit is not None:
            on_exit(code)

    code = run_in_container(
        ctx, profile=flags.profile, gpus=gpus_arg(node.host), command=command, flags=flags,
        log=ctx.stdout, on_created=lambda _cid: None, on_exit=exited, output=output,
    )  # fmt: skip
    if not told:  # an untrusted run: after its cleanup
        exited(code)
    return told[0]
