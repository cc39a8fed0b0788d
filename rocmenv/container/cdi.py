"""CDI (the Container Device Interface), as the AMD Container Toolkit uses it: GPUs named for
the engine as ``amd.com/gpu=<index>`` (and ``amd.com/gpu=all``) by a spec under
``/etc/cdi``, which the engine (podman ≥ 4.1; Docker ≥ 25 with its ``cdi`` feature) turns
into device nodes.

:func:`generate_spec` writes that spec from the KFD topology (:mod:`rocmenv.container.gpu`): one
device per GPU, named by rocmenv's GPU index (PCI-address order, what ``--gpus`` selects),
holding the GPU's render and card nodes; ``all`` holding every GPU's; ``/dev/kfd`` as the
spec-wide node every device brings. ``cdiVersion`` is the lowest version that has what the
spec uses (as the CDI library's ``MinimumRequiredVersion``): ``0.3.0``, or ``0.5.0`` when a
node's host path differs from its container path (a host whose ``/dev`` is elsewhere), so
the spec loads in every engine that supports CDI at all. A profile's ``gpu-devices = "cdi"``
makes ``run`` and ``options`` name the selected GPUs this way
(:func:`rocmenv.container.builder.gpu_devices`) — the names are rocmenv's indices, so generate the
spec with ``rocmenv cdi generate``.
"""

from __future__ import annotations

import re
from typing import Any, Final

from rocmenv.container.gpu import CONTAINER_DRI, CONTAINER_KFD, GpuInventory

CDI_KIND: Final = "amd.com/gpu"
CDI_DIRS: Final = ("/etc/cdi", "/var/run/cdi")
#: The engines' CDI support: (kind, first version).
CDI_MIN_VERSIONS: Final = {"podman": (4, 1), "docker": (25, 0)}


def cdi_name(index: int | str) -> str:
    """``amd.com/gpu=2``; ``amd.com/gpu=all``."""
    return f"{CDI_KIND}={index}"


def generate_spec(inventory: GpuInventory) -> dict[str, Any]:
    """The CDI spec for the host's GPUs (see the module docstring)."""
    devices: list[dict[str, Any]] = []
    every: list[dict[str, str]] = []
    for gpu in inventory.gpus:
        nodes = [_node(str(n), f"{CONTAINER_DRI}/{n.name}")
                 for n in (gpu.render_node, gpu.card_node) if n is not None]  # fmt: skip
        every += nodes
        devices.append({"name": str(gpu.index), "containerEdits": {"deviceNodes": nodes}})
    if devices:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": every}})
    kfd = _node(str(inventory.kfd_node), CONTAINER_KFD)
    moved = any("hostPath" in n for n in [*every, kfd])
    return {
        "cdiVersion": "0.5.0" if moved else "0.3.0",
        "kind": CDI_KIND,
        "devices": devices,
        "containerEdits": {"deviceNodes": [kfd]},
    }


def _node(host: str, container: str) -> dict[str, str]:
    node = {"path": container}
    if host != container:
        node["hostPath"] = host
    return node


def cdi_support(engine: str, version: str) -> tuple[bool, str]:
    """Whether an engine (``podman``, ``docker-api``/``docker-cli``) of ``version`` can take
    CDI device names, and why."""
    family = "podman" if engine == "podman" else "docker"
    least = CDI_MIN_VERSIONS[family]
    match = re.match(r"v?([0-9]+)\.([0-9]+)", version)
    have = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    least_text = ".".join(map(str, least))
    if have < least:
        return False, f"{family} {version} is older than {least_text}: no CDI device names"
    if family == "podman":
        return True, f"podman {version} ≥ {least_text} (specs in {', '.join(CDI_DIRS)})"
    return True, (
        f"docker {version} ≥ {least_text}: with the daemon's `cdi` feature on "
        '(daemon.json "features": {"cdi": true}; specs in ' + ", ".join(CDI_DIRS) + ")"
    )
