"""The container-engine protocol and the values that cross it.

Adapters: ``docker-api`` (:mod:`rocmenv.engine.docker_api`, the Engine API over the socket,
docker-py for pulls) and ``docker-cli`` / ``podman`` (:mod:`rocmenv.engine.cli_engine`,
the binary run directly). Choosing one is :mod:`rocmenv.engine.select`; a run's
container, from create to removal, is :class:`rocmenv.engine.container.Container`. This
module imports nothing heavy: the CLI's argument parsers read :data:`ENGINE_NAMES` here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping

from rocmenv.errors import StartFailure
from rocmenv.record import record

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Protocol

    from rocmenv.container.runspec import RunSpec
    from rocmenv.settings.choices import EngineKind
else:
    from rocmenv.typecheck import Protocol


@record
class EngineInfo:
    kind: EngineKind
    version: str
    api_version: str = ""
    os: str = ""
    name: str = ""  # the daemon's host name


@record
class ImageInfo:
    id: str
    repo_digests: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    def digest_for(self, repository: str) -> str | None:
        """The content digest recorded for ``repository`` (or any, when it has one only)."""
        digests = [d.split("@", 1) for d in self.repo_digests if "@" in d]
        for name, digest in digests:
            if name == repository or name.split("/", 1)[-1] == repository.split("/", 1)[-1]:
                return digest
        return digests[0][1] if len(digests) == 1 else None


@record
class LocalImage:
    """An image in the engine's store (what ``gc --images`` and the disk budget need)."""

    id: str
    repo_tags: tuple[str, ...] = ()
    repo_digests: tuple[str, ...] = ()
    size: int = 0  # bytes on disk as the engine counts them (shared layers counted in each)
    created: str = ""
    layers: tuple[str, ...] = ()  # RootFS diff ids (uncompressed layer digests)


@record
class StoreInfo:
    """Where the engine keeps images; ``local``: that path is on this machine's file system."""

    data_root: str
    local: bool


@record
class ContainerInfo:
    id: str
    name: str
    state: str  # created | running | exited | paused | dead | removing
    labels: tuple[tuple[str, str], ...] = ()
    image: str = ""

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@record
class VolumeInfo:
    """A volume of the engine's (the overlay's scratch volumes: ``rocmenv gc``)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()


@record
class PullEvent:
    layer: str
    status: str
    current: int | None = None
    total: int | None = None


@record
class CaptureResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


class Attachment(Protocol):
    """A created container's streams, attached before it starts: :meth:`start` starts it and
    copies its output live to our stdout/stderr (and our stdin to it when asked)."""

    def start(self) -> None:
        """Start the container; raises :class:`EngineStartError` when the engine refuses
        (the CLI adapters learn that when the CLI ends: :meth:`exit_code` raises it)."""

    def join(self, timeout: float | None = None) -> None:
        """Wait until the container's streams end (or ``timeout``)."""

    def close(self) -> None:
        """Stop copying (idempotent); restores the terminal if it was put in raw mode."""

    def exit_code(self) -> int | None:
        """After :meth:`join`: the container's exit code when the attach channel knows it
        (None: ask :meth:`Engine.wait`). Raises :class:`EngineStartError` when the
        container never started."""


class Engine(Protocol):
    kind: EngineKind

    def ping(self) -> EngineInfo: ...

    def image_info(self, image: str) -> ImageInfo | None:
        """Inspect a local image; None when it is not present."""

    def image_exists(self, image: str) -> bool: ...

    def image_env(self, image: str) -> dict[str, str]:
        """The ``Env`` of the image's config (raises EngineError when absent)."""

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None: ...

    def load(self, archive: Iterable[bytes]) -> None:
        """``docker load`` / ``podman load`` of a ``docker save`` archive streamed from
        ``archive`` (:mod:`rocmenv.cache.archive`); an exception from ``archive`` aborts the
        load (the engine then loads nothing) and is raised."""

    def store_info(self) -> StoreInfo:
        """The engine's data root (``DockerRootDir`` / podman's graph root)."""

    def list_images(self) -> list[LocalImage]:
        """Every image in the store, with its layers' diff ids."""

    def remove_image(self, image: str) -> None:
        """Remove an image (by id or reference); a missing one is not an error."""

    def create(
        self,
        spec: RunSpec,
        *,
        tty: bool = False,
        stdin_open: bool = False,
        name: str | None = None,
        console_size: tuple[int, int] | None = None,
    ) -> str:
        """Create (not start) the container; returns its id. ``console_size``: (rows,
        columns) of the terminal a ``tty`` container starts with (Docker honours it on Linux
        from API 1.42; older daemons get the size right after the start)."""

    def start(self, container_id: str) -> None:
        """Start detached; raises :class:`EngineStartError` when the engine refuses."""

    def attach(
        self,
        container_id: str,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None = None,
        tty: bool = False,
    ) -> Attachment:
        """Attach to a created container (stdout and stderr separately unless tty); nothing
        runs until :meth:`Attachment.start`."""

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        """The container's exit code once it is not running (EngineError on timeout)."""

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None: ...

    def remove(self, container_id: str, *, force: bool = True) -> None:
        """Remove; a container already gone is not an error."""

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        """All stdout and stderr written so far."""

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        """Containers (any state) carrying every label (``None``: any value)."""

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        """The engine's inspect document (Docker's shape)."""

    def export(self, container_id: str, path: str) -> Iterator[bytes]:
        """The files under ``path`` of a (stopped) container as a tar stream, as it arrives
        (``--output``: :mod:`rocmenv.run.output`); closing the iterator ends the transfer."""

    def create_volume(self, name: str, labels: Mapping[str, str]) -> str:
        """Create an empty ``local`` volume; returns its data directory on the engine's host
        (an overlay's upper or work directory: :mod:`rocmenv.engine.overlay`)."""

    def remove_volume(self, name: str) -> None:
        """Remove a volume; one already gone is not an error."""

    def list_volumes(self, *, labels: Mapping[str, str | None]) -> list[VolumeInfo]:
        """Volumes carrying every label (``None``: any value)."""


_RLIMITS = (
    "cpu", "fsize", "data", "stack", "core", "rss", "nproc", "nofile", "memlock", "as",
    "locks", "sigpending", "msgqueue", "nice", "rtprio", "rttime",
)  # fmt: skip


def explain_start_failure(text: str, spec: RunSpec | None = None) -> StartFailure:
    """Turn an OCI runtime / daemon error into a message naming the option at fault."""
    low = text.lower()
    match = re.search(r"error setting rlimit type (\d+)", low)
    if match:
        index = int(match.group(1))
        name = _RLIMITS[index] if index < len(_RLIMITS) else f"type {index}"
        value = next((u.render() for u in (spec.ulimits if spec else ()) if u.name == name), None)
        option = f"--ulimit {value}" if value else f"--ulimit {name}=…"
        return StartFailure(
            message=f"the engine refused {option}: the limit is above what the engine's own "
            f"process may grant (its hard RLIMIT_{name.upper()})",
            option=option,
        )
    if "unable to apply caps" in low or ("privileged" in low and "not permitted" in low):
        option = "--privileged" if spec and spec.privileged else "--cap-add"
        if spec and not spec.privileged and spec.cap_add:
            option = "--cap-add " + ",".join(spec.cap_add)
        return StartFailure(
            message=f"the engine refused {option}: capabilities are restricted where the engine "
            "runs (a rootless or nested engine, or a restricted runner)",
            option=option,
        )
    match = re.search(
        r"error gathering device information while adding custom device \"([^\"]+)\"", text
    )
    if match:
        return StartFailure(
            message=f"the engine refused --device {match.group(1)}: it does not exist or is "
            "not a device on the engine's host",
            option=f"--device {match.group(1)}",
        )
    match = re.search(r"bind source path does not exist: (\S+)", text)
    if match:
        return StartFailure(
            message=f"the engine refused the mount of {match.group(1)}: it does not exist on "
            "the engine's host",
            option=f"--mount source={match.group(1)}",
        )
    if "failed to mount local volume" in low and "overlay" in low:
        return StartFailure(
            message="the engine could not mount the checkout's copy-on-write view (an "
            "overlay volume; untrusted mode): " + _tail(text),
            option="--untrusted (the checkout's view)",
        )
    match = re.search(r"unable to find group ([^:\s]+)", low)
    if match:
        return StartFailure(
            message=f"the engine refused --group-add {match.group(1)}: the image has no such "
            "group and the host has none of that name either",
            option=f"--group-add {match.group(1)}",
        )
    if "executable file not found" in low or ("no such file or directory" in low and "exec" in low):
        return StartFailure(
            message="the command was not found in the image: " + _tail(text), exit_code=127
        )
    if "permission denied" in low and "exec" in low:
        return StartFailure(message="the command is not executable: " + _tail(text), exit_code=126)
    return StartFailure(message="the engine could not start the container: " + _tail(text))


def _tail(text: str) -> str:
    text = text.strip().splitlines()[-1] if text.strip() else text
    for marker in ("unable to start container process: ", "OCI runtime create failed: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    # podman appends its classification of the runtime's error
    for suffix in (": unknown", ": OCI runtime attempted to invoke a command that was not found",
                   ": OCI permission denied", ": OCI runtime error"):  # fmt: skip
        text = text.removesuffix(suffix)
    return text
