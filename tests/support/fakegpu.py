"""A fake AMD GPU host: a KFD topology + DRM sysfs tree and a /dev root with device nodes.

Modelled on an 8 x MI300X server: two CPU KFD nodes (0, 1), GPU nodes 2-9 probed in
"socket" order (so KFD node numbers and render minors do NOT follow PCI order), card0 is
the BMC's VGA device (no KFD node, no render node), the GPUs are card1-card8.

With ``char_devices=True`` (needs root) the /dev entries are real character devices made
with ``mknod`` (majors: kfd 511, DRM 226), so Docker's ``--device`` accepts them; without
root they are plain files (enough for discovery tests).

:func:`fake_pod` turns such a host into what an ARC runner pod of sglang's AMD CI sees: sysfs
still shows all eight GPUs, ``/dev`` holds only the pod's nodes, and a podinfo file lists
them as ``docker run`` flags (``/etc/podinfo/gha-render-devices``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

MI300X = 90402
MI355X = 90500
PCI_BUSES = ("05", "26", "46", "65", "85", "a6", "c6", "e5")
# KFD/DRM probe order: node 2 is the GPU at PCI_BUSES[4], … (second socket first).
PROBE_ORDER = (4, 5, 6, 7, 0, 1, 2, 3)
KFD_MAJOR = 511
DRM_MAJOR = 226


@dataclass(frozen=True, kw_only=True)
class FakeGpu:
    index: int  # expected rocmenv index (PCI order)
    node: int
    pci_address: str
    unique_id: int
    render_minor: int
    card: int

    @property
    def uuid(self) -> str:
        return f"GPU-{self.unique_id:016x}"

    @property
    def render_name(self) -> str:
        return f"renderD{self.render_minor}"

    @property
    def card_name(self) -> str:
        return f"card{self.card}"


@dataclass(frozen=True, kw_only=True)
class FakeHost:
    root: Path
    sysfs_root: Path
    dev_root: Path
    gpus: tuple[FakeGpu, ...]  # in index order

    def env(self) -> dict[str, str]:
        """The environment overrides that point rocmenv at this host (and at no pod's device
        list: a test on an ARC runner must not read the runner's own)."""
        return {
            "ROCMENV_SYSFS_ROOT": str(self.sysfs_root),
            "ROCMENV_DEV_ROOT": str(self.dev_root),
            "ROCMENV_PODINFO_DEVICES": str(self.root / "podinfo" / "absent"),
        }


def _props(lines: dict[str, int]) -> str:
    return "".join(f"{k} {v}\n" for k, v in lines.items())


def _node(path: Path, major: int, minor: int, *, char_devices: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if char_devices:
        os.mknod(path, stat.S_IFCHR | 0o660, os.makedev(major, minor))
    else:
        path.write_bytes(b"")


def build_fake_host(
    root: Path,
    *,
    gpus: int = 8,
    gfx_target_version: int = MI300X,
    char_devices: bool | None = None,
    with_kfd: bool = True,
    with_drm_sysfs: bool = True,
) -> FakeHost:
    """Create the tree under ``root`` (``root/sys``, ``root/dev``) and describe it."""
    if char_devices is None:
        char_devices = os.geteuid() == 0
    if not 0 <= gpus <= len(PCI_BUSES):
        raise ValueError(f"gpus must be 0..{len(PCI_BUSES)}")
    sysfs, dev = root / "sys", root / "dev"
    nodes_dir = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"
    drm_dir = sysfs / "class" / "drm"
    pci_root = sysfs / "devices" / "pci0000:00"
    for cpu in (0, 1):
        (nodes_dir / str(cpu)).mkdir(parents=True, exist_ok=True)
        (nodes_dir / str(cpu) / "properties").write_text(
            _props({"cpu_cores_count": 96, "simd_count": 0, "gfx_target_version": 0})
        )
    (dev / "dri").mkdir(parents=True, exist_ok=True)
    if with_drm_sysfs:
        # card0: the BMC's VGA controller, no KFD node, no render node.
        bmc = pci_root / "0000:02:00.0"
        bmc.mkdir(parents=True, exist_ok=True)
        (drm_dir / "card0").mkdir(parents=True, exist_ok=True)
        _link(drm_dir / "card0" / "device", "../../../devices/pci0000:00/0000:02:00.0")
    _node(dev / "dri" / "card0", DRM_MAJOR, 0, char_devices=char_devices)
    made: list[FakeGpu] = []
    probe = [p for p in PROBE_ORDER if p < gpus] if gpus < len(PCI_BUSES) else list(PROBE_ORDER)
    for probe_pos, pci_pos in enumerate(probe):
        node = 2 + probe_pos
        bus = PCI_BUSES[pci_pos]
        pci = f"0000:{bus}:00.0"
        unique_id = 0x5A3C_0000_0000_0000 + 0x1111 * (pci_pos + 1)
        minor = 128 + probe_pos
        card = 1 + probe_pos
        (nodes_dir / str(node)).mkdir(parents=True, exist_ok=True)
        (nodes_dir / str(node) / "properties").write_text(
            _props(
                {
                    "cpu_cores_count": 0,
                    "simd_count": 1216,
                    "gfx_target_version": gfx_target_version,
                    "vendor_id": 4098,
                    "device_id": 29857,
                    "location_id": int(bus, 16) << 8,
                    "domain": 0,
                    "drm_render_minor": minor,
                    "unique_id": unique_id,
                    "num_xcc": 8,
                }
            )
        )
        if with_drm_sysfs:
            (pci_root / pci).mkdir(parents=True, exist_ok=True)
            for name in (f"renderD{minor}", f"card{card}"):
                (drm_dir / name).mkdir(parents=True, exist_ok=True)
                _link(drm_dir / name / "device", f"../../../devices/pci0000:00/{pci}")
            # connectors look like cards but are not
            (drm_dir / f"card{card}-DP-1").mkdir(exist_ok=True)
        _node(dev / "dri" / f"renderD{minor}", DRM_MAJOR, minor, char_devices=char_devices)
        _node(dev / "dri" / f"card{card}", DRM_MAJOR, card, char_devices=char_devices)
        made.append(
            FakeGpu(
                index=pci_pos,
                node=node,
                pci_address=pci,
                unique_id=unique_id,
                render_minor=minor,
                card=card,
            )
        )
    if with_kfd:
        _node(dev / "kfd", KFD_MAJOR, 0, char_devices=char_devices)
    made.sort(key=lambda g: g.index)
    # indices are positions among the GPUs that exist
    made = [replace(g, index=i) for i, g in enumerate(made)]
    return FakeHost(root=root, sysfs_root=sysfs, dev_root=dev, gpus=tuple(made))


def _link(path: Path, target: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


@dataclass(frozen=True, kw_only=True)
class FakePod:
    host: FakeHost
    podinfo: Path  # the pod's device list (what /etc/podinfo/gha-render-devices holds)
    gpus: tuple[FakeGpu, ...]  # the pod's GPUs (rocmenv indices of the whole host)

    @property
    def render_names(self) -> frozenset[str]:
        return frozenset(g.render_name for g in self.gpus)

    def env(self) -> dict[str, str]:
        """The environment overrides that point rocmenv at this pod (its roots and list)."""
        return {**self.host.env(), "ROCMENV_PODINFO_DEVICES": str(self.podinfo)}


def fake_pod(
    host: FakeHost, indices: tuple[int, ...] = (2, 5), *, podinfo: Path | None = None
) -> FakePod:
    """Make ``host`` an ARC runner pod holding the GPUs ``indices``: every other GPU's render
    and card nodes leave the fake /dev (sysfs keeps them all), and the podinfo file names
    the pod's render nodes as sglang's launcher reads them (``--device PATH`` flags split on
    whitespace; one as ``--device=PATH``). Use the returned :meth:`FakePod.env` (it sets
    ``ROCMENV_PODINFO_DEVICES``; the file is not at /etc/podinfo)."""
    kept = tuple(g for g in host.gpus if g.index in indices)
    if len(kept) != len(set(indices)):
        raise ValueError(f"the fake host has no GPUs {indices}")
    for gpu in host.gpus:
        if gpu not in kept:
            for name in (gpu.render_name, gpu.card_name):
                (host.dev_root / "dri" / name).unlink(missing_ok=True)
    path = podinfo or host.root / "podinfo" / "gha-render-devices"
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = [f"--device {host.dev_root}/dri/{g.render_name}" for g in kept]
    if len(flags) > 1:
        flags[-1] = flags[-1].replace("--device ", "--device=")
    path.write_text(" ".join(flags) + "\n")
    return FakePod(host=host, podinfo=path, gpus=kept)
