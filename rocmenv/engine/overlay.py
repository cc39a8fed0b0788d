"""The untrusted checkout's copy-on-write view, as each engine makes it (the spec says
``kind = "overlay"``: :func:`rocmenv.spec.guard.Guard.apply`).

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
from collections.abc import Mapping, Sequence

from rocmenv.errors import EngineError
from rocmenv.record import record
from rocmenv.spec.labels import LABEL_PREFIX, LABEL_PURPOSE, LABEL_SESSION
from rocmenv.spec.runspec import BindMount, RunSpec, csv_field

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

    from rocmenv.engine.protocol import Engine

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
    """The scratch volumes of each overlay of ``spec`` (none: nothing to do); what was made
    is removed again when making the rest fails."""
    views = overlays(spec)
    if not views:
        return Prepared()
    labels = scratch_labels(spec)
    made: list[str] = []
    options = []
    try:
        for index, mount in enumerate(views):
            scratch = scratch_for(spec, index)
            dirs = []
            for name in scratch.names:
                dirs.append(engine.create_volume(name, labels))
                made.append(name)
            options.append((mount.target, tuple(driver_options(mount.source, *dirs).items())))
    except BaseException:
        release(engine, made)
        raise
    return Prepared(volumes=tuple(made), options=tuple(options),
                    labels=tuple(sorted(labels.items())))  # fmt: skip


def release(engine: Engine, names: Sequence[str]) -> None:
    """Remove the scratch volumes ``names`` (after their container): every one is tried;
    the first failure is raised after (``rocmenv gc`` removes what is left)."""
    failed: EngineError | None = None
    for name in names:
        try:
            engine.remove_volume(name)
        except EngineError as err:
            failed = failed or err
    if failed is not None:
        raise failed


def podman_volume(mount: BindMount) -> str:
    """podman's own overlay volume: ``--volume=SRC:DST:O``."""
    return f"--volume={mount.source}:{mount.target}:O"
