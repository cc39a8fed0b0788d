"""The untrusted checkout's copy-on-write view, as each engine makes it (the spec says
``kind = "overlay"``: :func:`rocmenv.container.guard.Guard.apply`).

The container sees the checkout at its own path and may write it; the writes land in an
upper directory the engine owns and go with the container. The host's checkout is the
overlay's lower directory: the kernel never writes a lower directory, so nothing the
container does — a file, a mode, a device node, a link, a ``sub/.git`` with ``gitdir:``
and ``core.fsmonitor`` — reaches it.

* **podman**: its own overlay volume, ``--volume=SRC:DST:O`` (upper and work directories in
  the container's storage, removed with it).
* **Docker** (both adapters): a ``local`` volume of type ``overlay`` mounted at the
  checkout's path (``--mount type=volume,…,volume-opt=type=overlay,volume-opt=o=lowerdir=…,
  upperdir=…,workdir=…``: an anonymous volume, removed with the container), whose upper and
  work directories are the data directories of two **scratch volumes** rocmenv creates
  first (``rocmenv-<session>-upper``/``-work``) and removes after the container. Docker's
  own volumes rather than host directories rocmenv makes: the daemon creates and deletes
  them as root (a file the container's root left in an upper directory is root's, which an
  unprivileged rocmenv could not delete), on the daemon's disk (not a ``/tmp`` that may be
  memory), and on the daemon's host (``DOCKER_HOST=ssh://…`` works as a bind mount does).
  They carry the run's labels, so ``rocmenv gc`` removes those of a run that was killed.

Only the docker adapters import the Docker part; :func:`podman_volume` is podman's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from rocmenv.container.labels import LABEL_PREFIX, LABEL_PURPOSE, LABEL_SESSION
from rocmenv.container.runspec import BindMount, RunSpec, csv_field
from rocmenv.record import record

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from rocmenv.engine.protocol import Engine

    T = TypeVar("T")

#: ``rocmenv.purpose`` of the scratch volumes (``rocmenv gc`` lists volumes by owner).
PURPOSE = "overlay"


@record
class Scratch:
    """The two scratch volumes of one container's overlay (names; data directories once
    created)."""

    upper: str
    work: str

    @property
    def names(self) -> tuple[str, str]:
        return self.upper, self.work


def overlays(spec: RunSpec) -> list[BindMount]:
    return [m for m in spec.mounts if m.kind == "overlay"]


def scratch_for(spec: RunSpec, index: int = 0) -> Scratch:
    """The scratch volumes' names: the run's session (``gc`` and a sweep find them by it),
    else random."""
    session = spec.label_map.get(LABEL_SESSION) or os.urandom(6).hex()
    base = f"rocmenv-{session}-{index}" if index else f"rocmenv-{session}"
    return Scratch(upper=f"{base}-upper", work=f"{base}-work")


def scratch_labels(spec: RunSpec) -> dict[str, str]:
    """The run's own labels (session, owner) and the purpose: what ``gc`` judges by."""
    labels = {k: v for k, v in spec.labels if k.startswith(LABEL_PREFIX)}
    labels[LABEL_PURPOSE] = PURPOSE
    return labels


def driver_options(lower: str, upper: str, work: str) -> dict[str, str]:
    """The ``local`` driver's options for an overlay of ``lower`` (the guard refused paths
    the ``o=`` string cannot carry: ``,``, ``:``, ``\\``)."""
    return {
        "type": "overlay",
        "device": "overlay",
        "o": f"lowerdir={lower},upperdir={upper},workdir={work}",
    }


def cli_mount(mount: BindMount, options: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """The docker CLI's ``--mount`` of the overlay volume (CSV: the ``o=`` value holds
    commas)."""
    fields = ["type=volume", csv_field(f"target={mount.target}"), "volume-driver=local"]
    fields += [csv_field(f"volume-opt={k}={v}") for k, v in options.items()]
    fields += [csv_field(f"volume-label={k}={v}") for k, v in sorted(labels.items())]
    return "--mount=" + ",".join(fields)


def api_mount(
    mount: BindMount, options: Mapping[str, str], labels: Mapping[str, str]
) -> dict[str, Any]:
    """The Engine API's ``HostConfig.Mounts`` entry of the overlay volume."""
    return {
        "Type": "volume",
        "Target": mount.target,
        "VolumeOptions": {
            "DriverConfig": {"Name": "local", "Options": dict(options)},
            "Labels": dict(labels),
        },
    }


@record
class Prepared:
    """One container's overlays, ready for its create: the scratch volumes made (removed
    after the container) and each overlay's driver options by target."""

    volumes: tuple[str, ...] = ()
    options: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()

    def api_mounts(self, spec: RunSpec, mounts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``HostConfig.Mounts`` with each overlay's stand-in replaced by its volume."""
        by_target = {t: dict(o) for t, o in self.options}
        views = {m.target: m for m in overlays(spec)}
        return [api_mount(views[m["Target"]], by_target[m["Target"]], dict(self.labels))
                if m.get("Target") in by_target else m for m in mounts]  # fmt: skip

    def cli_args(self, spec: RunSpec, args: list[str]) -> list[str]:
        """``docker create`` arguments with each overlay's stand-in replaced by its volume."""
        by_target = {t: dict(o) for t, o in self.options}
        swap = {f"--mount={m.render_mount()}": cli_mount(m, by_target[m.target],
                                                          dict(self.labels))
                for m in overlays(spec)}  # fmt: skip
        return [swap.get(a, a) for a in args]


def prepare(engine: Engine, spec: RunSpec) -> Prepared:
    """The scratch volumes of each overlay of ``spec`` (none: nothing to do), made at once
    (one engine round trip, not one per volume); what was made is removed again when
    making the rest fails."""
    views = overlays(spec)
    if not views:
        return Prepared()
    labels = scratch_labels(spec)
    names = [name for index in range(len(views)) for name in scratch_for(spec, index).names]
    done = _together([partial(engine.create_volume, name, labels) for name in names])
    failed = next((err for _dir, err in done if err is not None), None)
    if failed is not None:
        release(engine, [n for n, (_d, err) in zip(names, done, strict=True) if err is None])
        raise failed
    dirs = [str(d) for d, _err in done]
    options = tuple(
        (m.target, tuple(driver_options(m.source, dirs[2 * i], dirs[2 * i + 1]).items()))
        for i, m in enumerate(views)
    )
    return Prepared(volumes=tuple(names), options=options,
                    labels=tuple(sorted(labels.items())))  # fmt: skip


def release(engine: Engine, names: Sequence[str]) -> None:
    """Remove the scratch volumes ``names`` (after their container), all at once: every one
    is tried; the first failure is raised after (``rocmenv gc`` removes what is left)."""
    if not names:
        return
    done = _together([partial(engine.remove_volume, name) for name in names])
    failed = next((err for _r, err in done if err is not None), None)
    if failed is not None:
        raise failed


def _together(calls: Sequence[Callable[[], T]]) -> list[tuple[T | None, BaseException | None]]:
    """Each call's result or exception, the calls made side by side (the first on this
    thread): two volumes cost one engine round trip — one CLI process's time for docker-cli."""
    out: list[tuple[T | None, BaseException | None]] = [(None, None)] * len(calls)

    def one(index: int) -> None:
        try:
            out[index] = (calls[index](), None)
        except BaseException as err:  # handed to the caller, on its thread
            out[index] = (None, err)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(1, len(calls))]
    for thread in threads:
        thread.start()
    one(0)
    for thread in threads:
        thread.join()
    return out


def podman_volume(mount: BindMount) -> str:
    """podman's own overlay volume: ``--volume=SRC:DST:O``."""
    return f"--volume={mount.source}:{mount.target}:O"
