"""AMD GPU discovery from the KFD topology and ``/dev/dri``, and ``--gpus`` selection.

Sources (both roots are configurable, see :class:`rocmenv.settings.host.HostSettings`)::

    <sysfs>/class/kfd/kfd/topology/nodes/<N>/properties   one "key value" per line;
        simd_count 0 = a CPU node; gfx_target_version, drm_render_minor, location_id,
        domain, unique_id describe a GPU (or one partition of it)
    <sysfs>/class/drm/renderD<minor>/device, card<N>/device   symlinks to the PCI device;
        a card and a render node belong together when they point at the same device
    <dev>/kfd, <dev>/dri/renderD<minor>, <dev>/dri/card<N>   the nodes passed to containers

**GPU index** = position in PCI-address order (domain, bus, device, function; partitions of
one device by render minor). That is the order ``rocm-smi`` and the ROCm runtime use on
ordinary hosts; KFD node numbers and DRM minors are never taken as indices. When in doubt,
select by UUID (``GPU-<16 hex digits>`` from ``unique_id``), by PCI address or by render
node path (``/dev/dri/renderD128``).

**The pool** is the GPUs this runner may hand out (:mod:`rocmenv.container.pool` decides it):
those whose render node exists under the dev root — sysfs shows every GPU of the machine,
an ARC runner pod's ``/dev`` only its own — narrowed by a device list file when one
applies. ``all`` is the pool; a GPU outside it cannot be selected.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from rocmenv.errors import GpuSelectionError
from rocmenv.lazy import Pattern
from rocmenv.record import record, replace

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Literal

    SelectionKind = Literal["all", "none", "subset"]

CONTAINER_KFD = "/dev/kfd"
CONTAINER_DRI = "/dev/dri"
#: The variables that name the GPUs a process sees (HIP, the ROCm runtime, CUDA-compatible code).
VISIBLE_DEVICE_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

# GPU families in image tags and the gfx targets they are built for.
GPU_FAMILY_TARGETS: dict[str, tuple[str, ...]] = {
    "mi30x": ("gfx942",),
    "mi35x": ("gfx950",),
}


def gfx_target_name(version: int) -> str:
    """Decode KFD ``gfx_target_version`` (major*10000 + minor*100 + stepping) to ``gfxNNN``.

    Minor and stepping are printed in hex: 90402 → gfx942, 90010 → gfx90a, 90500 → gfx950,
    110501 → gfx1151.
    """
    if version <= 0:
        raise ValueError(f"gfx_target_version {version} is not a GPU target")
    major, rest = divmod(version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


@record
class Gpu:
    index: int  # position in PCI-address order
    node: int  # KFD topology node number (informational only)
    gfx: str  # e.g. "gfx942"
    gfx_target_version: int
    pci_address: str  # "0000:c1:00.0"
    unique_id: int | None
    render_minor: int
    render_node: Path  # host path of renderD<minor>
    card_node: Path | None  # host path of card<N>, when found (and it exists)
    present: bool = True  # the render node exists under the dev root

    @property
    def uuid(self) -> str | None:
        return None if self.unique_id is None else f"GPU-{self.unique_id:016x}"

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "node": self.node,
            "gfx": self.gfx,
            "gfx_target_version": self.gfx_target_version,
            "pci_address": self.pci_address,
            "uuid": self.uuid,
            "render_node": str(self.render_node),
            "render_minor": self.render_minor,
            "card_node": None if self.card_node is None else str(self.card_node),
            "present": self.present,
        }


@record
class GpuInventory:
    sysfs_root: Path
    dev_root: Path
    kfd_node: Path  # host path of /dev/kfd
    kfd_present: bool
    topology_present: bool
    gpus: tuple[Gpu, ...]
    notes: tuple[str, ...] = ()  # nodes skipped and why
    # the GPUs this runner may use (rocmenv.container.pool); None: every GPU (no pool applied:
    # rendering for another host)
    pool_indices: tuple[int, ...] | None = None
    pool_source: str | None = None  # what narrowed it: a device list file, or absent nodes

    @property
    def dri_dir(self) -> Path:
        return self.dev_root / "dri"

    @property
    def pool(self) -> tuple[Gpu, ...]:
        if self.pool_indices is None:
            return self.gpus
        return tuple(g for g in self.gpus if g.index in self.pool_indices)

    @property
    def restricted(self) -> bool:
        """The pool is narrower than the host's GPUs: ``all`` means the pool's own nodes,
        never the whole ``/dev/dri``."""
        return self.pool_indices is not None and len(self.pool_indices) < len(self.gpus)

    @property
    def gfx_targets(self) -> tuple[str, ...]:
        return tuple(sorted({g.gfx for g in self.gpus}))

    def to_json(self) -> dict[str, object]:
        return {
            "sysfs_root": str(self.sysfs_root),
            "dev_root": str(self.dev_root),
            "kfd": str(self.kfd_node) if self.kfd_present else None,
            "gpus": [{**g.to_json(), "in_pool": g in self.pool} for g in self.gpus],
            "pool": {"indices": [g.index for g in self.pool], "source": self.pool_source},
            "notes": list(self.notes),
        }


def _read_properties(path: Path) -> dict[str, int]:
    props: dict[str, int] = {}
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            props[key] = int(value.strip())
        except ValueError:
            continue
    return props


def _pci_from_location(domain: int, location_id: int) -> str:
    bus, devfn = divmod(location_id, 256)
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


def _device_of(drm_entry: Path) -> str | None:
    """The PCI address a ``class/drm/<name>/device`` link points at (its last component)."""
    link = drm_entry / "device"
    try:
        target = os.readlink(link)
    except OSError:
        return None
    name = Path(target).name
    return (
        name.lower()
        if re.fullmatch(r"[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", name)
        else None
    )


def _cards_by_pci(drm_dir: Path) -> dict[str, int]:
    cards: dict[str, int] = {}
    try:
        entries = list(drm_dir.iterdir())
    except OSError:
        return cards
    for entry in entries:
        match = re.fullmatch(r"card([0-9]+)", entry.name)
        if not match:
            continue
        pci = _device_of(entry)
        if pci is not None and (pci not in cards or int(match.group(1)) < cards[pci]):
            cards[pci] = int(match.group(1))
    return cards


def _pci_sort_key(pci: str) -> tuple[int, ...]:
    domain, bus, devfn = pci.split(":")
    dev, fn = devfn.split(".")
    return (int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16))


def discover(sysfs_root: Path, dev_root: Path) -> GpuInventory:
    """Read the KFD topology and DRM nodes under the given roots. Never raises for a host
    without GPUs (an empty inventory); problems with individual nodes become ``notes``."""
    topology = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    drm_dir = sysfs_root / "class" / "drm"
    notes: list[str] = []
    found: list[tuple[str, int, Gpu]] = []
    cards = _cards_by_pci(drm_dir)
    node_dirs: list[Path] = []
    with contextlib.suppress(OSError):
        node_dirs = [p for p in topology.iterdir() if p.name.isascii() and p.name.isdigit()]
    for node_dir in sorted(node_dirs, key=lambda p: int(p.name)):
        try:
            props = _read_properties(node_dir / "properties")
        except OSError as err:
            notes.append(f"KFD node {node_dir.name}: cannot read properties ({err.strerror})")
            continue
        if props.get("simd_count", 0) == 0:
            continue  # a CPU node
        version = props.get("gfx_target_version", 0)
        minor = props.get("drm_render_minor", -1)
        if version <= 0 or minor < 0:
            notes.append(
                f"KFD node {node_dir.name}: no gfx target or render node "
                f"(gfx_target_version={version}, drm_render_minor={minor}); skipped"
            )
            continue
        render_entry = drm_dir / f"renderD{minor}"
        pci = _device_of(render_entry) or _pci_from_location(
            props.get("domain", 0), props.get("location_id", 0)
        )
        card = cards.get(pci)
        card_node = None if card is None else dev_root / "dri" / f"card{card}"
        render_node = dev_root / "dri" / f"renderD{minor}"
        unique = props.get("unique_id")
        found.append(
            (
                pci,
                minor,
                Gpu(
                    index=-1,
                    node=int(node_dir.name),
                    gfx=gfx_target_name(version),
                    gfx_target_version=version,
                    pci_address=pci,
                    unique_id=unique if unique else None,
                    render_minor=minor,
                    render_node=render_node,
                    # a node the dev root lacks (a pod's /dev) cannot be passed to a container
                    card_node=card_node if card_node is not None and card_node.exists() else None,
                    present=render_node.exists(),
                ),
            )
        )
    found.sort(key=lambda item: (_pci_sort_key(item[0]), item[1]))
    gpus = tuple(replace(gpu, index=i) for i, (_, _, gpu) in enumerate(found))
    kfd = dev_root / "kfd"
    return GpuInventory(
        sysfs_root=sysfs_root,
        dev_root=dev_root,
        kfd_node=kfd,
        kfd_present=kfd.exists(),
        topology_present=topology.is_dir(),
        gpus=gpus,
        notes=tuple(notes),
    )


# -- selection --------------------------------------------------------------------------------


_INDEX_RE = Pattern(r"[0-9]+", re.ASCII)
_RANGE_RE = Pattern(r"([0-9]+)-([0-9]+)", re.ASCII)
#: The largest GPU index ``--gpus`` accepts before looking at the host (KFD numbers nodes
#: in the hundreds at most): ``0-99999999999`` is refused, not expanded.
MAX_GPU_INDEX = 1023
_UUID_RE = Pattern(r"(?i)(?:GPU-|0x)?([0-9a-f]{16})")
_PCI_RE = Pattern(r"(?i)(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
#: A GPU's device node by path (``/dev/dri/renderD128``, ``/dev/dri/card1``).
NODE_RE = Pattern(r"/[!-~]{0,4000}/dri/(?:renderD|card)[0-9]{1,6}", re.ASCII)

_GPUS_HINT = (
    "use all, none, indices (0,1), ranges (0-3), UUIDs (GPU-<16 hex>), PCI addresses or "
    "render node paths (/dev/dri/renderD128)"
)


@record
class SelectionItem:
    kind: Literal["index", "uuid", "pci", "node"]
    text: str
    indices: tuple[int, ...] = ()  # for index and range items
    value: str = ""  # normalised uuid hex / PCI address / node path


@record
class GpuRequest:
    """A parsed ``--gpus`` value, before it is matched against a host."""

    kind: SelectionKind
    text: str
    items: tuple[SelectionItem, ...] = ()


def parse_gpus(text: str) -> GpuRequest:
    """Check the syntax of a ``--gpus`` value (no host needed)."""
    raw = text.strip()
    if raw.lower() in ("all", "none"):
        return GpuRequest(kind="all" if raw.lower() == "all" else "none", text=raw.lower())
    if not raw:
        raise GpuSelectionError("--gpus is empty", hint=_GPUS_HINT)
    items: list[SelectionItem] = []
    for part in raw.split(","):
        item = part.strip()
        if not item:
            raise GpuSelectionError(f"--gpus {text!r} has an empty item", hint=_GPUS_HINT)
        if item.lower() in ("all", "none"):
            raise GpuSelectionError(
                f"--gpus {text!r}: {item!r} cannot be combined with other items", hint=_GPUS_HINT
            )
        numbers = _INDEX_RE.fullmatch(item) or _RANGE_RE.fullmatch(item)
        if numbers and any(
            len(n) > 4 or int(n) > MAX_GPU_INDEX for n in numbers.groups() or (item,)
        ):
            raise GpuSelectionError(
                f"--gpus {_shown(text)!r}: {_shown(item)!r} goes past GPU {MAX_GPU_INDEX}",
                hint="GPU indices count the host's GPUs from 0 (see `rocmenv gpus`)",
            )
        if item.startswith("/"):
            if not NODE_RE.fullmatch(item) or "/../" in item or "/./" in item:
                raise GpuSelectionError(
                    f"--gpus {_shown(text)!r}: {_shown(item)!r} is not a render or card node "
                    "path", hint=_GPUS_HINT,
                )  # fmt: skip
            items.append(SelectionItem(kind="node", text=item, value=item))
            continue
        if _INDEX_RE.fullmatch(item):
            items.append(SelectionItem(kind="index", text=item, indices=(int(item),)))
            continue
        range_match = _RANGE_RE.fullmatch(item)
        if range_match:
            lo, hi = int(range_match.group(1)), int(range_match.group(2))
            if lo > hi:
                raise GpuSelectionError(
                    f"--gpus {text!r}: range {item!r} runs backwards", hint=f"write {hi}-{lo}"
                )
            items.append(SelectionItem(kind="index", text=item, indices=tuple(range(lo, hi + 1))))
            continue
        pci_match = _PCI_RE.fullmatch(item)
        if pci_match:
            domain = pci_match.group(1) or "0000"
            value = f"{domain}:{pci_match.group(2)}:{pci_match.group(3)}.{pci_match.group(4)}"
            items.append(SelectionItem(kind="pci", text=item, value=value.lower()))
            continue
        uuid_match = _UUID_RE.fullmatch(item)
        if uuid_match:
            items.append(SelectionItem(kind="uuid", text=item, value=uuid_match.group(1).lower()))
            continue
        raise GpuSelectionError(
            f"--gpus {text!r}: {item!r} is not an index, range, UUID or PCI address",
            hint=_GPUS_HINT,
        )
    return GpuRequest(kind="subset", text=raw, items=tuple(items))


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


@record
class GpuSelection:
    kind: SelectionKind
    gpus: tuple[Gpu, ...] = ()  # for "subset" (in the order given) and "all" (when known)
    restricted: bool = False  # chosen from a pool narrower than the host (GpuInventory)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)


def select(request: GpuRequest, inventory: GpuInventory) -> GpuSelection:
    """Match a request against the host's GPUs, within the pool; raises with what is wrong
    and what exists."""
    if request.kind == "none":
        return GpuSelection(kind="none")
    restricted = inventory.restricted
    if request.kind == "all":
        if restricted and not inventory.pool:
            raise GpuSelectionError(
                f"--gpus all: no GPU of this host is in the pool ({inventory.pool_source})",
                hint="see `rocmenv gpus`: which GPUs have device nodes here, which the list names",
            )
        return GpuSelection(kind="all", gpus=inventory.pool, restricted=restricted)
    chosen: list[Gpu] = []
    seen: dict[int, str] = {}
    for item in request.items:
        for gpu in _matched(request.text, item, inventory):
            if gpu.index in seen:
                raise GpuSelectionError(
                    f"--gpus {request.text!r}: GPU {gpu.index} is selected twice "
                    f"(by {seen[gpu.index]!r} and {item.text!r})",
                    hint="list each GPU once",
                )
            if gpu not in inventory.pool:
                why = "its render node does not exist here" if not gpu.present else (
                    f"not named by {inventory.pool_source}"
                )  # fmt: skip
                raise GpuSelectionError(
                    f"--gpus {request.text!r}: GPU {gpu.index} ({gpu.render_node.name}) is not "
                    f"in this runner's pool: {why}",
                    hint="see `rocmenv gpus` (column POOL)",
                )
            seen[gpu.index] = item.text
            chosen.append(gpu)
    return GpuSelection(kind="subset", gpus=tuple(chosen), restricted=restricted)


def _matched(text: str, item: SelectionItem, inventory: GpuInventory) -> list[Gpu]:
    """The GPUs one ``--gpus`` item names (at least one, else :class:`GpuSelectionError`)."""
    count = len(inventory.gpus)
    have = f"this host has {count} GPU{'s' if count != 1 else ''}" + (
        f" (0-{count - 1})" if count else ""
    )
    if item.kind == "index":
        for index in item.indices:
            if index >= count:
                raise GpuSelectionError(
                    f"--gpus {text!r}: GPU index {index} is out of range; {have}",
                    hint="see `rocmenv gpus`",
                )
        return [inventory.gpus[i] for i in item.indices]
    if item.kind == "uuid":
        matched = [g for g in inventory.gpus
                   if g.unique_id is not None and f"{g.unique_id:016x}" == item.value]  # fmt: skip
        what, hint = f"has UUID {item.text!r}", "see `rocmenv gpus` for the UUIDs"
    elif item.kind == "node":
        matched = [g for g in inventory.gpus
                   if item.value in (str(g.render_node), str(g.card_node))]  # fmt: skip
        what = f"has the node {_shown(item.value)!r}"
        hint = f"see `rocmenv gpus` for the nodes (under the dev root {inventory.dev_root})"
    else:
        matched = [g for g in inventory.gpus if g.pci_address == item.value]
        what, hint = f"at PCI address {item.value}", "see `rocmenv gpus` for the PCI addresses"
    if not matched:
        raise GpuSelectionError(f"--gpus {_shown(text)!r}: no GPU {what}; {have}", hint=hint)
    return matched


def family_mismatch(gpu_family: str | None, inventory: GpuInventory) -> str | None:
    """A warning when an image built for ``gpu_family`` (``mi30x``…) meets other gfx targets."""
    if not gpu_family or not inventory.gpus:
        return None
    wanted = GPU_FAMILY_TARGETS.get(gpu_family.lower())
    if wanted is None:
        return None
    other = [t for t in inventory.gfx_targets if t not in wanted]
    if not other:
        return None
    return (
        f"the image is built for {gpu_family} ({', '.join(wanted)}) but this host's GPUs are "
        f"{', '.join(inventory.gfx_targets)}; kernels may be missing or fail to load"
    )
