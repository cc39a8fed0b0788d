"""What podman needs to mean what docker means: ``render_docker``'s arguments adjusted
(proxy variables, ``--shm-size`` with host IPC, zero memory limits, ulimits — podman 4.3
fails on RLIMIT_NPROC without explicit limits — and the untrusted checkout's copy-on-write
view as podman's own overlay volume, ``-v SRC:DST:O``) and pull progress read from its
stderr.
"""

from __future__ import annotations

from collections.abc import Sequence

from rocmenv.container.runspec import RunSpec
from rocmenv.engine.overlay import overlays, podman_volume
from rocmenv.engine.protocol import PullEvent


def podman_events(line: str, seen: Sequence[str]) -> list[PullEvent]:
    """``Copying blob sha256:<hex>`` starts a blob; ``Copying config`` comes after all."""
    if line.startswith("Copying blob "):
        blob = line.split()[2].split(":")[-1][:12]
        return [PullEvent(layer=blob, status="Downloading")]
    if line.startswith("Copying config "):
        blobs = [s.split()[2].split(":")[-1][:12] for s in seen if s.startswith("Copying blob ")]
        return [PullEvent(layer=b, status="Pull complete") for b in blobs]
    return []


def _pid_max() -> int | None:
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def podman_args(args: Sequence[str], spec: RunSpec) -> list[str]:
    """``render_docker``'s arguments as podman needs them to mean the same (module docstring)."""
    # podman copies the host's proxy variables into every container (containers.conf
    # http_proxy = true); rocmenv passes exactly the variables the profile declares
    out = [*args, "--http-proxy=false"]
    # the untrusted checkout's copy-on-write view: podman's own overlay volume
    views = {f"--mount={m.render_mount()}": podman_volume(m) for m in overlays(spec)}
    out = [views.get(a, a) for a in out]
    if spec.ipc == "host":  # docker ignores --shm-size with the host's IPC; podman refuses it
        out = [a for a in out if not a.startswith("--shm-size=")]
    if spec.memory in (None, "0"):  # 0 = no limit (docker); podman refuses a lone swap limit
        out = [a for a in out if not a.startswith(("--memory=", "--memory-swap="))]
    if not spec.ulimits:
        return [*out, "--ulimit=host"]
    import resource

    named = {u.name for u in spec.ulimits}
    for name, number, cap in (
        ("nofile", resource.RLIMIT_NOFILE, None),
        ("nproc", resource.RLIMIT_NPROC, _pid_max()),
    ):
        if name in named:
            continue
        hard = resource.getrlimit(number)[1]
        limits = [n for n in (cap, None if hard == resource.RLIM_INFINITY else hard) if n]
        if limits:  # what a docker container would inherit, explicitly
            out.append(f"--ulimit={name}={min(limits)}:{min(limits)}")
    return out
