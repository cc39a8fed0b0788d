"""The GPU pool: which of the host's GPUs this runner may hand out.

Sysfs shows every GPU of the machine; a Kubernetes pod (an ARC runner of sglang's AMD CI)
has only its own device nodes in ``/dev`` and lists them in a file its launcher passes to
``docker run`` verbatim (``DEVICE_FLAG=$(cat /etc/podinfo/gha-render-devices)``). So the
pool (:attr:`rocmenv.container.gpu.GpuInventory.pool`) is

* the GPUs whose render node exists under the dev root, and
* of those, the ones a **device list file** names, when one applies: ``gpus-from``
  (``[host] gpus-from``, ``ROCMENV_GPUS_FROM``; it must exist), else the pod's list
  (``[host] podinfo-devices``, ``ROCMENV_PODINFO_DEVICES``; default
  ``/etc/podinfo/gha-render-devices``) when that file exists. Both are settings of
  :mod:`rocmenv.settings.host`, read when called.

**The file format** is what the pod's annotation holds and a shell splits on whitespace:
``--device PATH`` (the path may be on the next line), ``--device=PATH``, or a bare ``PATH``;
``#`` starts a comment. A ``PATH`` is a render or card node under the dev root's ``dri/``
(``/dev/dri/renderD128``, ``/dev/dri/card1``), or ``/dev/dri`` itself ("every GPU present",
the annotation of a pod not yet pinned to GPUs). A pod's list that is empty (its
annotation unset: the downward API writes the file anyway) applies no list, with a note.

**The file is hostile input**: at most :data:`MAX_LIST_BYTES`, a regular file (a FIFO would
block), text; anything else — another flag (``--privileged``, ``--cpuset-cpus``), a device
mapping (``HOST:CONTAINER``), a node outside the dev root, ``/dev/kfd`` — is refused with
``FILE:LINE``, exit 2. And it only *selects*: what a container gets are the paths of
rocmenv's own inventory, never the file's text, so a list can narrow the pool, not widen it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from rocmenv.container.gpu import Gpu, GpuInventory, discover
from rocmenv.errors import ConfigError
from rocmenv.record import record, replace

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Final

    from rocmenv.settings.host import HostSettings

MAX_LIST_BYTES: Final = 64 * 1024
_HINT: Final = (
    "the file holds --device flags or device paths, one render or card node each "
    "(--device /dev/dri/renderD128 --device /dev/dri/renderD136); see docs/gpus.md"
)


@record
class DeviceList:
    """A device list file, read: the node names it gives (``renderD128``, ``card1``), or
    ``None`` for ``/dev/dri`` (every GPU present)."""

    path: Path
    names: frozenset[str] | None
    notes: tuple[str, ...] = ()


def host_inventory(host: HostSettings, *, with_pool: bool = True) -> GpuInventory:
    """The host's GPUs with this runner's pool (``with_pool=False``: no pool, for a
    rendering meant for another host)."""
    inventory = discover(host.sysfs_root, host.dev_root)
    return apply_pool(inventory, device_list(host)) if with_pool else inventory


def apply_pool(inventory: GpuInventory, listed: DeviceList | None) -> GpuInventory:
    """The inventory with its pool: GPUs present, narrowed by ``listed``."""
    notes = list(inventory.notes)
    present = [g for g in inventory.gpus if g.present]
    source = None if len(present) == len(inventory.gpus) else "the device nodes present"
    pool = present
    if listed is not None:
        notes += listed.notes
        if listed.names is not None:
            known = {n.name for g in inventory.gpus for n in (g.render_node, g.card_node) if n}
            unknown = sorted(listed.names - known, key=_natural)
            if unknown:
                notes.append(f"{listed.path} names {', '.join(unknown)}: no GPU of this host")
            pool = [g for g in present if _names(g) & listed.names]
            absent = [g for g in inventory.gpus if not g.present and _names(g) & listed.names]
            if absent:
                notes.append(
                    f"{listed.path} names {', '.join(g.render_node.name for g in absent)}, "
                    f"which do not exist under {inventory.dri_dir}: not in the pool"
                )
        source = str(listed.path)
    return replace(
        inventory, pool_indices=tuple(g.index for g in pool), pool_source=source,
        notes=tuple(notes),
    )  # fmt: skip


def _names(gpu: Gpu) -> set[str]:
    return {n.name for n in (gpu.render_node, gpu.card_node) if n is not None}


def _natural(name: str) -> tuple[str, int]:
    match = re.fullmatch(r"([a-zA-Z]+)([0-9]+)", name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)


def device_list(host: HostSettings) -> DeviceList | None:
    """The device list file that applies (module docstring), read; ``None``: none does."""
    if host.gpus_from is not None:
        listed = read_device_list(host.gpus_from, host.dev_root, setting="gpus-from")
        if listed.names is not None and not listed.names:
            raise ConfigError(f"{host.gpus_from} (gpus-from) names no device", hint=_HINT)
        return listed
    path = host.podinfo_devices
    if path is None or not os.path.lexists(path):
        return None
    listed = read_device_list(path, host.dev_root, setting="podinfo-devices")
    if listed.names is not None and not listed.names:
        note = f"{path} is empty (the pod's annotation is unset): every GPU present is the pool"
        return DeviceList(path=path, names=None, notes=(note,))
    return listed


def read_device_list(path: Path, dev_root: Path, *, setting: str) -> DeviceList:
    """Read and check one device list file (hostile input: module docstring)."""
    data = _read_capped(path, setting)
    dri = f"{dev_root}/dri"
    node = re.compile(re.escape(dri) + r"/((?:renderD|card)[0-9]{1,6})", re.ASCII)
    names: set[str] = set()
    whole = False
    pending: int | None = None  # the line of a --device still waiting for its path
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").split("#", 1)[0]
        except UnicodeDecodeError:
            raise _bad(path, number, "is not UTF-8 text") from None
        for token in line.split():
            if pending is None and token == "--device":
                pending = number
                continue
            value = token
            if pending is None and token.startswith("--device="):
                value = token.removeprefix("--device=")
            elif pending is None and not token.startswith("/"):
                raise _bad(path, number, f"{_shown(token)!r} is not a --device flag or a path")
            pending = None
            if ":" in value:
                raise _bad(path, number, f"{_shown(value)!r} maps a device (HOST:CONTAINER): "
                           "name each node once, by its path")  # fmt: skip
            match = node.fullmatch(value)
            if value == dri:
                whole = True
            elif match is None:
                raise _bad(path, number,
                           f"{_shown(value)!r} is not a render or card node under {dri}")  # fmt: skip
            else:
                names.add(match.group(1))
    if pending is not None:
        raise _bad(path, pending, "--device without a path")
    return DeviceList(path=path, names=None if whole else frozenset(names))


def _read_capped(path: Path, setting: str) -> bytes:
    """At most :data:`MAX_LIST_BYTES` of a regular file (links followed: the downward API's
    files are links), without blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(
            f"cannot read {path} ({setting}): {err.strerror}",
            hint="fix the path, or unset the setting",
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path} ({setting}) is not a regular file", hint=_HINT)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_LIST_BYTES:
            chunk = os.read(fd, MAX_LIST_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise ConfigError(f"cannot read {path} ({setting}): {err.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_LIST_BYTES:
        raise ConfigError(
            f"{path} ({setting}) is larger than {MAX_LIST_BYTES // 1024} KiB: not a device list",
            hint=_HINT,
        )
    return data


def _bad(path: Path, line: int, what: str) -> ConfigError:
    return ConfigError(f"{path}:{line}: {what}", hint=_HINT)


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
