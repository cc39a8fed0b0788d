"""An in-memory container engine for the run pipeline's unit tests.

It implements the whole :class:`rocmenv.engine.protocol.Engine` protocol and runs the engine
contract suite (``tests/integration/engine/test_engine_api.py``) beside the real engines, so
it cannot drift from them. What a container does is a tiny program model of its command:
``true``, ``false``, ``sleep N``, ``echo …``, ``id`` and ``sh -c`` scripts made of those
plus ``exit N`` and ``>&2``; any other command is "not found" (exit 127) as in an image
without it. Time is real (``sleep 60`` runs until killed or waited out); a program is its
container's PID 1 without signal handlers, so, as the kernel does for PID 1, only SIGKILL
ends it (with 137): SIGINT/SIGTERM/SIGHUP are ignored. A ulimit above this host's hard
limit is refused at start as Docker refuses it.

Fault knobs for the run tests: ``create_error`` (and ``leave_behind``: the failed create
still made a container), ``start_error``, ``exit_code`` (overrides the program's); what
the run asked of it: ``created``, ``terminals`` (tty, console size), ``kills``, ``removed``.
An overlay mount gets its scratch volumes as the docker adapters make them
(:func:`rocmenv.engine.overlay.prepare`, released with the container: ``volumes``), and
``export`` gives ``archives[path]`` (tar bytes a test put there) for any container.
"""

from __future__ import annotations

import os
import resource
import shlex
import signal as signals
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocmenv.container.runspec import RunSpec
from rocmenv.engine.protocol import (
    ContainerInfo,
    EngineInfo,
    ImageInfo,
    LocalImage,
    PullEvent,
    StoreInfo,
    VolumeInfo,
)
from rocmenv.errors import EngineError, EngineStartError, StartFailure
from rocmenv.settings.choices import EngineKind

COMMANDS = ("true", "false", "sleep", "echo", "id", "sh")
_RLIMIT = {"memlock": resource.RLIMIT_MEMLOCK, "nofile": resource.RLIMIT_NOFILE,
           "stack": resource.RLIMIT_STACK, "nproc": resource.RLIMIT_NPROC}  # fmt: skip


@dataclass
class Program:
    """What a container's command does: output, then an exit code or a run time."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0
    runs_for: float = 0.0  # seconds before it exits by itself (sleep)


def interpret(argv: tuple[str, ...]) -> Program:
    """The program model (module docstring)."""
    if not argv:
        return Program()
    if argv[0] == "sh" and len(argv) >= 3 and argv[1] == "-c":
        return _script(argv[2])
    return _simple(list(argv), Program())


def _script(text: str) -> Program:
    program = Program()
    for part in text.split(";"):
        words = shlex.split(part)
        if not words:
            continue
        if words[0] == "exit":
            program.exit_code = int(words[1]) if len(words) > 1 else 0
            return program
        program = _simple(words, program)
        if program.exit_code == 127:
            return program
    return program


def _simple(words: list[str], program: Program) -> Program:
    to_stderr = words[-1] == ">&2"
    words = words[:-1] if to_stderr else words
    command, args = words[0], words[1:]
    if command not in COMMANDS:
        program.stderr += f"sh: 1: {command}: not found\n".encode()
        program.exit_code = 127
    elif command == "echo":
        line = (" ".join(args) + "\n").encode()
        if to_stderr:
            program.stderr += line
        else:
            program.stdout += line
        program.exit_code = 0
    elif command == "sleep":
        program.runs_for += float(args[0]) if args else 0.0
        program.exit_code = 0
    elif command == "id":
        program.stdout += b"uid=0(root) gid=0(root) groups=0(root)\n"
        program.exit_code = 0
    else:
        program.exit_code = 1 if command == "false" else 0
    return program


@dataclass
class FakeContainer:
    id: str
    name: str | None
    spec: RunSpec
    state: str = "created"  # created | running | exited
    program: Program = field(default_factory=Program)
    started: float = 0.0
    exit_code: int | None = None

    def settle(self) -> None:
        """A running program that has run its time exits by itself."""
        if self.state == "running" and time.monotonic() - self.started >= self.program.runs_for:
            self.state, self.exit_code = "exited", self.program.exit_code


class FakeAttachment:
    def __init__(self, engine: FakeEngine, box: FakeContainer, stdout_fd: int,
                 stderr_fd: int) -> None:  # fmt: skip
        self.engine, self.box, self.closed = engine, box, False
        self.stdout_fd, self.stderr_fd = stdout_fd, stderr_fd
        self.error: BaseException | None = None

    def start(self) -> None:
        if (
            isinstance(self.engine.start_error, EngineStartError)
            and self.engine.start_error.failure.exit_code == 125
        ):
            raise self.engine.start_error
        self.error = self.engine.start_error
        if self.error is None:
            try:
                self.engine.start(self.box.id)
            except EngineStartError as err:
                self.error = err
        if self.error is None:
            os.write(self.stdout_fd, self.box.program.stdout) if self.box.program.stdout else None
            os.write(self.stderr_fd, self.box.program.stderr) if self.box.program.stderr else None

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.box.state == "running":
            if deadline is not None and time.monotonic() >= deadline:
                return
            self.engine.tick.wait(0.01)
            self.box.settle()

    def close(self) -> None:
        self.closed = True

    def exit_code(self) -> int | None:
        if self.error is not None:
            raise self.error
        return self.box.exit_code


class FakeEngine:
    kind: EngineKind = "docker-api"

    def __init__(self, images: Mapping[str, ImageInfo] | None = None,
                 registry: Mapping[str, ImageInfo] | None = None) -> None:  # fmt: skip
        self.images: dict[str, ImageInfo] = dict(images or {})
        self.registry: dict[str, ImageInfo] = dict(registry or {})  # what a pull can fetch
        self.containers: dict[str, FakeContainer] = {}
        self.created: dict[str, RunSpec] = {}  # every container ever created (tests read it)
        self.names: dict[str, str | None] = {}
        self.terminals: dict[str, tuple[bool, tuple[int, int] | None]] = {}  # tty, console size
        self.kills: list[tuple[str, str]] = []  # (container id, signal) as asked
        self.removed: list[str] = []
        self.pulled: list[str] = []
        self.present = True  # False: no image is present (the run tests' pull paths)
        self.create_error: EngineError | None = None
        self.leave_behind = False  # a failed create that still made a container
        self.exit_code: int | None = None  # overrides the program's exit code
        self.start_error: BaseException | None = None
        self.tick = threading.Event()  # never set: a sleep that wakes early on nothing
        self.volumes: dict[str, dict[str, str]] = {}  # name -> labels
        self.scratch: dict[str, tuple[str, ...]] = {}  # container id -> its overlay's volumes
        self.archives: dict[str, bytes] = {}  # path -> what export gives (a tar)

    # -- images -----------------------------------------------------------------------------
    def ping(self) -> EngineInfo:
        return EngineInfo(kind=self.kind, version="0-fake", api_version="1.45", os="linux",
                          name="fake-engine")  # fmt: skip

    def image_info(self, image: str) -> ImageInfo | None:
        return self.images.get(image) if self.present else None

    def image_exists(self, image: str) -> bool:
        return self.image_info(image) is not None

    def image_env(self, image: str) -> dict[str, str]:
        info = self.image_info(image)
        if info is None:
            raise EngineError(f"image {image} is not present on the engine")
        return info.env_map()

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None:
        self.pulled.append(image)
        info = self.registry.get(image) or (self.images.get(image) if not self.present else None)
        if info is None:
            raise EngineError(f"pulling {image}: manifest unknown")
        if progress is not None:
            progress(PullEvent(status="Pull complete", layer=info.id[7:19]))
        self.images[image] = info
        self.present = True

    def load(self, archive: Iterable[bytes]) -> None:
        """Reads the archive to its end (an error in it is raised, as the real engines do)."""
        self.loaded = sum(len(chunk) for chunk in archive)

    def store_info(self) -> StoreInfo:
        return StoreInfo(data_root="/var/lib/fake-engine", local=False)

    def list_images(self) -> list[LocalImage]:
        return [LocalImage(id=i.id, repo_tags=(ref,), repo_digests=i.repo_digests)
                for ref, i in self.images.items()]  # fmt: skip

    def remove_image(self, image: str) -> None:
        for ref, info in list(self.images.items()):
            if image in (ref, info.id):
                del self.images[ref]

    # -- containers -------------------------------------------------------------------------
    def create(self, spec: RunSpec, *, tty: bool = False, stdin_open: bool = False,
               name: str | None = None, console_size: tuple[int, int] | None = None,
               ) -> str:  # fmt: skip
        cid = f"{len(self.created):04x}" + "0" * 60
        if self.create_error is not None:
            if self.leave_behind:
                self._add(cid, name, spec)
            raise self.create_error
        if self.image_info(spec.image) is None:
            raise EngineError(f"No such image: {spec.image}")
        from rocmenv.engine.overlay import prepare

        prepared = prepare(self, spec)
        self._add(cid, name, spec)
        self.scratch[cid] = prepared.volumes
        self.terminals[cid] = (tty, console_size)
        return cid

    def _add(self, cid: str, name: str | None, spec: RunSpec) -> None:
        self.containers[cid] = FakeContainer(id=cid, name=name, spec=spec,
                                             program=interpret(spec.command))  # fmt: skip
        self.created[cid], self.names[cid] = spec, name

    def _box(self, container_id: str) -> FakeContainer:
        box = self.containers.get(container_id)
        if box is None:
            raise EngineError(f"No such container: {container_id}")
        box.settle()
        return box

    def start(self, container_id: str) -> None:
        box = self._box(container_id)
        refused = self._refused(box.spec)
        if refused is not None:
            raise EngineStartError(refused.message, failure=refused)
        if isinstance(self.start_error, EngineStartError):
            raise self.start_error
        if box.program.exit_code == 127:
            failure = StartFailure(message=f"the command {box.spec.command[0]!r} was not found "
                                   "in the image", exit_code=127)  # fmt: skip
            box.state, box.exit_code = "exited", 127
            raise EngineStartError(failure.message, failure=failure)
        box.state, box.started = "running", time.monotonic()
        if self.exit_code is not None:
            box.program.exit_code = self.exit_code
        box.settle()

    def _refused(self, spec: RunSpec) -> StartFailure | None:
        """A ulimit above this host's hard limit cannot be set (Docker refuses the start)."""
        for ulimit in spec.ulimits:
            limit = _RLIMIT.get(ulimit.name)
            if limit is None:
                continue
            hard = resource.getrlimit(limit)[1]
            wanted = resource.RLIM_INFINITY if ulimit.hard < 0 else ulimit.hard
            if hard != resource.RLIM_INFINITY and (
                wanted == resource.RLIM_INFINITY or wanted > hard
            ):
                return StartFailure(message=f"the engine refused --ulimit {ulimit.render()}: "
                                    "operation not permitted",
                                    option=f"--ulimit {ulimit.render()}")  # fmt: skip
        return None

    def attach(self, container_id: str, *, stdout_fd: int, stderr_fd: int,
               stdin_fd: int | None = None, tty: bool = False) -> FakeAttachment:  # fmt: skip
        return FakeAttachment(self, self._box(container_id), stdout_fd, stderr_fd)

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        box = self._box(container_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while box.state == "running":
            if deadline is not None and time.monotonic() >= deadline:
                raise EngineError(
                    f"container {container_id[:12]} is still running after {timeout}s"
                )
            self.tick.wait(0.01)
            box.settle()
        return box.exit_code if box.exit_code is not None else 0

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None:
        self.kills.append((container_id, signal))
        box = self._box(container_id)
        if box.state == "running" and signal == "SIGKILL":  # PID 1 ignores the others
            box.state, box.exit_code = "exited", 128 + int(signals.Signals[signal])

    def remove(self, container_id: str, *, force: bool = True) -> None:
        from rocmenv.engine.overlay import release

        if self.containers.pop(container_id, None) is not None:
            self.removed.append(container_id)
        release(self, self.scratch.pop(container_id, ()))

    def export(self, container_id: str, path: str) -> Iterator[bytes]:
        self._box(container_id)
        data = self.archives.get(path.removesuffix("/."), b"")
        return iter([data[i : i + 7] for i in range(0, len(data), 7)])  # small chunks

    def create_volume(self, name: str, labels: Mapping[str, str]) -> str:
        self.volumes[name] = dict(labels)
        return f"/var/lib/fake-engine/volumes/{name}/_data"

    def remove_volume(self, name: str) -> None:
        self.volumes.pop(name, None)

    def list_volumes(self, *, labels: Mapping[str, str | None]) -> list[VolumeInfo]:
        return [VolumeInfo(name=n, labels=tuple(sorted(have.items())))
                for n, have in self.volumes.items()
                if all(k in have and (v is None or have[k] == v) for k, v in labels.items())]  # fmt: skip

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        box = self._box(container_id)
        return (box.program.stdout, box.program.stderr) if box.state != "created" else (b"", b"")

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        out = []
        for box in self.containers.values():
            box.settle()
            have = box.spec.label_map
            if all(k in have and (v is None or have[k] == v) for k, v in labels.items()):
                out.append(ContainerInfo(id=box.id, name=box.name or "", state=box.state,
                                         labels=box.spec.labels))  # fmt: skip
        return out

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        box = self._box(container_id)
        return {
            "Id": box.id,
            "Name": f"/{box.name or box.id[:12]}",
            "State": {
                "Running": box.state == "running",
                "Status": box.state,
                "ExitCode": box.exit_code or 0,
            },
            "Config": {"Image": box.spec.image, "Labels": box.spec.label_map},
        }

    # -- what the run tests read ------------------------------------------------------------
    @property
    def alive(self) -> set[str]:
        return set(self.containers)
