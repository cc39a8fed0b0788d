"""The CLI adapter: the ``docker`` CLI (contexts, remote hosts) or ``podman``, run directly.

Every call is the CLI itself through :mod:`subprocess` — image inspect, create, start
--attach, kill, rm, ps, logs, pull: ``create`` gets the very arguments ``rocmenv options
--format docker`` prints, variables taken from the host reach it through its environment
(``--env NAME``), never on the command line. (python-on-whales once served ``ps`` and
``logs`` here; its import with pydantic cost 160–260 ms on a quiet machine and over a
second under load, against calls no faster than the CLI run directly:
``benchmarks/bench_engine_cli.py``. It went.)

Attached runs start ``docker start --attach`` with our own stdout as its stdout, so output
reaches the terminal or log unbuffered (partial lines, progress bars) and stdout/stderr stay
separate. Without a TTY the CLI runs in its own session: a terminal's Ctrl-C reaches only
rocmenv, which forwards it once (the CLI would proxy it a second time otherwise).

The CLI reports a start failure (e.g. a refused ulimit) on its stderr before the container
has written anything; a first stderr chunk that looks like the CLI's error is held back
until we know whether the container started, so the user sees rocmenv's explanation
instead of the raw OCI text.

podman renders ulimits differently from docker: a container without ``--ulimit`` gets
podman's ``default_ulimits`` (not the engine's inherited limits, as with docker), and a
container with any ``--ulimit`` also gets ``RLIMIT_NPROC`` set to podman's own limit, which
``RLIMIT_NOFILE`` to podman's defaults, which its runtime (under conmon, whose limits are
capped at ``kernel.pid_max`` for nproc) may not be allowed to set.
:func:`rocmenv.engine.podman.podman_args` renders a profile for podman so it means what it means for docker.
``--shm-size`` with ``--ipc=host`` (docker ignores it, podman refuses it) and
``--memory=0``/``--memory-swap=0`` (docker: no limit; podman refuses a swap limit without a
memory limit) are left out. Ulimits: no ulimits → ``--ulimit=host`` (inherit); ulimits without ``nofile``/``nproc`` →
those two explicitly at the host's hard limit (``nproc`` capped at ``kernel.pid_max``: no
process count can exceed it anyway), which is what a docker container inherits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rocmenv.container.render import render_docker
from rocmenv.container.runspec import RunSpec
from rocmenv.engine import volumes
from rocmenv.engine.cli_attach import CliAttachment, run_on_terminal
from rocmenv.engine.cli_command import CliError, run_command
from rocmenv.engine.hints import cli_unreachable, unreachable_hint
from rocmenv.engine.overlay import Prepared, prepare, release
from rocmenv.engine.podman import podman_args, podman_events
from rocmenv.engine.protocol import (
    ContainerInfo,
    EngineInfo,
    ImageInfo,
    LocalImage,
    PullEvent,
    StoreInfo,
    explain_start_failure,
)
from rocmenv.engine.select import EngineOptions
from rocmenv.errors import EngineError, EngineStartError, EngineUnavailable
from rocmenv.redact import redact
from rocmenv.settings.choices import EngineKind


def make(kind: EngineKind, options: EngineOptions) -> CliEngine:
    return CliEngine(kind, options)


def _full_id(image_id: str) -> str:
    """``sha256:<hex>``: podman prints the bare hex of the config digest."""
    return f"sha256:{image_id}" if image_id and ":" not in image_id else image_id


def _docker_events(line: str) -> list[PullEvent]:
    layer, sep, status = line.partition(": ")
    if not sep or " " in layer:
        layer, status = "", line
    return [PullEvent(layer=layer, status=status)]


_GONE = ("No such container", "no container with", "no such container")
_IMAGE_GONE = ("No such image", "no such image", "image not known")  # docker, podman


def _image_gone(stderr: str) -> bool:
    return any(text in stderr for text in _IMAGE_GONE)


_NOT_RUNNING = ("is not running", "can only kill running containers")  # docker, podman


class CliEngine:
    def __init__(self, kind: EngineKind, options: EngineOptions) -> None:
        self.kind: EngineKind = kind
        binary = "podman" if kind == "podman" else "docker"
        path = shutil.which(binary, path=options.env.get("PATH", os.defpath))
        if path is None:
            raise EngineUnavailable(
                f"{kind}: the {binary} command is not on PATH",
                hint=f"install {binary}, or choose another engine with --engine",
            )
        self._binary = path
        # The CLI reads DOCKER_HOST / DOCKER_CONTEXT / DOCKER_CONFIG from its environment.
        self._env = dict(options.env)
        self._cmd: list[str] = [path]
        self._scratch: dict[str, tuple[str, ...]] = {}  # container id -> its overlay's volumes

    def _cli(
        self, *args: str, timeout: float | None = 120, console: tuple[int, int] | None = None
    ) -> str:
        """The CLI's stdout. ``console``: stdout is a pseudo-terminal of that size (rows,
        columns) — ``docker create -t`` then sends it as the container's ``ConsoleSize``."""
        if console is not None:
            argv = [*self._cmd, *args]
            code, out, err = run_on_terminal(argv, self._env, console, timeout, kind=self.kind)
            if code != 0:
                raise CliError(argv, code, err)
            return out
        return self._run(*args, timeout=timeout).stdout.decode(errors="replace")

    def _run(self, *args: str, timeout: float | None = 120) -> subprocess.CompletedProcess[bytes]:
        """The CLI with ``args``: its stdout and stderr as bytes; :class:`CliError` unless it
        exits 0. In a session of its own: a terminal's Ctrl-C reaches rocmenv alone, which
        decides (a `docker create` cut short by it could leave a container nobody knows of)."""
        return run_command([*self._cmd, *args], self._env, timeout, kind=self.kind)

    def _fail(self, action: str, err: CliError) -> EngineError:
        text = redact(err.stderr.strip() or str(err))
        if cli_unreachable(text):
            hint = unreachable_hint(text, self._env)
            return EngineUnavailable(f"{self.kind}: {action} failed: {text}", hint=hint)
        return EngineError(f"{self.kind}: {action} failed: {text}")

    # -- images --------------------------------------------------------------------------
    def ping(self) -> EngineInfo:
        # One `info` call in JSON (no model parsing): docker and podman shape it differently.
        try:
            info = json.loads(self._cli("info", "--format", "{{json .}}"))
            errors = "; ".join(str(e) for e in info.get("ServerErrors") or ())
            if errors:  # the docker CLI may exit 0 with only its own half of `info`
                raise CliError(["docker", "info"], 0, errors)
        except CliError as err:
            raise EngineUnavailable(
                f"{self.kind}: the engine does not answer: {redact(err.stderr)}",
                hint=unreachable_hint(err.stderr, self._env),
            ) from None
        host = info.get("host") or {}
        version = info.get("version") or {}
        os_name = info.get("OperatingSystem") or (host.get("distribution") or {}).get(
            "distribution"
        )
        return EngineInfo(
            kind=self.kind,
            version=str(info.get("ServerVersion") or version.get("Version") or ""),
            api_version=str(version.get("APIVersion") or ""),
            os=str(os_name or ""),
            name=str(info.get("Name") or host.get("hostname") or ""),
        )

    def image_info(self, image: str) -> ImageInfo | None:
        try:
            docs = json.loads(self._cli("image", "inspect", image))
        except CliError as err:
            if _image_gone(err.stderr):
                return None
            raise self._fail(f"inspecting image {image}", err) from None
        doc = docs[0]
        env = []
        for item in (doc.get("Config") or {}).get("Env") or ():
            name, _, value = item.partition("=")
            env.append((name, value))
        return ImageInfo(
            id=_full_id(str(doc.get("Id", ""))),
            repo_digests=tuple(doc.get("RepoDigests") or ()),
            env=tuple(env),
        )

    def image_exists(self, image: str) -> bool:
        return self.image_info(image) is not None

    def image_env(self, image: str) -> dict[str, str]:
        info = self.image_info(image)
        if info is None:
            raise EngineError(f"{self.kind}: image {image} is not present", hint="pull it first")
        return info.env_map()

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None:
        """``docker pull`` / ``podman pull`` (not quiet): each progress line becomes a
        :class:`PullEvent`.

        Off a terminal the docker CLI prints one line per layer state change on stdout
        (``<id>: Pull complete``), podman a ``Copying blob sha256:…`` line per blob on
        stderr; neither gives byte counts: :mod:`rocmenv.run.pull` adds the layer sizes from the
        manifest."""
        argv = [*self._cmd, "pull", image]
        try:
            proc = subprocess.Popen(
                argv,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as err:
            raise EngineUnavailable(f"{self.kind}: cannot run {argv[0]}: {err}") from None
        podman = self.kind == "podman"
        events, other = (proc.stderr, proc.stdout) if podman else (proc.stdout, proc.stderr)
        assert events is not None and other is not None
        rest: list[bytes] = []
        reader = threading.Thread(target=lambda: rest.append(other.read()), daemon=True)
        reader.start()
        lines: list[str] = []
        for raw in events:
            line = raw.decode(errors="replace").strip()
            lines.append(line)
            if progress is None or not line:
                continue
            for event in podman_events(line, lines) if podman else _docker_events(line):
                progress(event)
        code = proc.wait()
        reader.join()
        if code != 0:
            text = "\n".join(lines[-5:]) if podman else b"".join(rest).decode(errors="replace")
            raise EngineError(
                f"{self.kind}: pulling {image} failed: {redact(text.strip())}",
                hint="check the reference, registry access and credentials (`docker login`)",
            ) from None

    def load(self, archive: Iterable[bytes]) -> None:
        """``docker load`` / ``podman load`` with the archive on stdin; an error from
        ``archive`` closes stdin early (a truncated archive loads nothing) and is raised."""
        argv = [*self._cmd, "load"]
        try:
            proc = subprocess.Popen(
                argv, env=self._env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            raise EngineUnavailable(f"{self.kind}: cannot run {argv[0]}: {err}") from None
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out: list[bytes] = []
        readers = [
            threading.Thread(target=lambda s=s: out.append(s.read()), daemon=True)
            for s in (proc.stdout, proc.stderr)
        ]
        for reader in readers:
            reader.start()
        failed: BaseException | None = None
        try:
            for chunk in archive:
                proc.stdin.write(chunk)
        except BrokenPipeError:
            pass  # the engine stopped reading: its exit status says why
        except BaseException as err:  # the archive failed: the engine must load nothing
            failed = err
            proc.kill()
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        code = proc.wait()
        for reader in readers:
            reader.join()
        if failed is not None:
            raise failed
        if code != 0:
            text = b"".join(out).decode(errors="replace").strip()
            raise EngineError(f"{self.kind}: loading an image failed: {redact(text[-2000:])}")

    def store_info(self) -> StoreInfo:
        try:
            info = json.loads(self._cli("info", "--format", "{{json .}}"))
        except CliError as err:
            raise self._fail("asking for engine information", err) from None
        root = str(info.get("DockerRootDir") or (info.get("store") or {}).get("graphRoot") or "")
        host = self._env.get("DOCKER_HOST", "") or self._env.get("CONTAINER_HOST", "")
        remote = bool(host) and not host.startswith("unix://")
        return StoreInfo(data_root=root, local=bool(root) and not remote)

    def list_images(self) -> list[LocalImage]:
        """Every image. One listed and removed (by another job on the engine) before it was
        inspected is left out: ``image inspect`` of several fails whole when one is gone, so
        the listing is taken again (twice at most), then the images inspected one by one."""
        try:
            for _ in range(3):
                ids = sorted(set(self._cli("images", "--all", "--quiet", "--no-trunc").split()))
                try:
                    docs = json.loads(self._cli("image", "inspect", *ids)) if ids else []
                    break
                except CliError as err:
                    if not _image_gone(err.stderr):
                        raise
            else:
                docs = [doc for image in ids for doc in self._inspect_if_present(image)]
        except CliError as err:
            raise self._fail("listing images", err) from None
        return [
            LocalImage(
                id=_full_id(str(d.get("Id", ""))),
                repo_tags=tuple(t for t in d.get("RepoTags") or () if t != "<none>:<none>"),
                repo_digests=tuple(d.get("RepoDigests") or ()),
                size=int(d.get("Size") or 0),
                created=str(d.get("Created", "")),
                layers=tuple((d.get("RootFS") or {}).get("Layers") or ()),
            )
            for d in docs
        ]

    def _inspect_if_present(self, image: str) -> list[dict[str, Any]]:
        try:
            docs: list[dict[str, Any]] = json.loads(self._cli("image", "inspect", image))
        except CliError as err:
            if _image_gone(err.stderr):
                return []
            raise
        return docs

    def remove_image(self, image: str) -> None:
        try:
            self._cli("image", "rm", "--force", image)  # the caller checked nothing uses it
        except CliError as err:
            if _image_gone(err.stderr):
                return
            raise self._fail(f"removing image {image}", err) from None

    # -- containers ----------------------------------------------------------------------
    def create(
        self,
        spec: RunSpec,
        *,
        tty: bool = False,
        stdin_open: bool = False,
        name: str | None = None,
        console_size: tuple[int, int] | None = None,
    ) -> str:
        # The options renderer's arguments; host-taken variables (--env NAME) are resolved by
        # the CLI from its environment, which is ours: values never appear on a command line.
        args = [a for a in render_docker(spec) if not a.startswith("--env=")]
        prepared = Prepared()
        if self.kind == "podman":
            args = podman_args(args, spec)
        else:  # the checkout's copy-on-write view (untrusted): rocmenv.engine.overlay
            prepared = prepare(self, spec)
            args = prepared.cli_args(spec, args)
        try:
            cid = self._create(spec, args, tty, stdin_open, name, console_size)
        except BaseException:
            release(self, prepared.volumes)
            raise
        if prepared.volumes:
            self._scratch[cid] = prepared.volumes
        return cid

    def _create(
        self,
        spec: RunSpec,
        args: list[str],
        tty: bool,
        stdin_open: bool,
        name: str | None,
        console_size: tuple[int, int] | None,
    ) -> str:
        for var in spec.env:
            if var.value is None:
                continue
            args.append(f"--env={var.name}" if var.from_host else f"--env={var.name}={var.value}")
        if tty:
            args.append("--tty")
        if stdin_open:
            args.append("--interactive")
        if name:
            args.append(f"--name={name}")
        # podman has no console size at create: `podman start --attach` sets it before the
        # command runs. The docker CLI sends its stdout's size: give it a terminal that size.
        console = console_size if tty and self.kind == "docker-cli" else None
        try:
            out = self._cli(
                "create", "--pull=never", *args, spec.image, *spec.command, console=console
            )
        except CliError as err:
            text = redact(err.stderr)
            if "Cannot connect to the Docker daemon" in text:
                raise self._fail("creating the container", err) from None
            if _image_gone(text):
                raise EngineError(
                    f"{self.kind}: image {spec.image} is not present",
                    hint="pull it (--pull missing)",
                ) from None
            failure = explain_start_failure(text, spec)
            raise EngineError(
                f"{self.kind}: creating the container failed: {failure.message}"
            ) from None
        return out.strip().splitlines()[-1]

    def start(self, container_id: str) -> None:
        try:
            self._cli("start", container_id)
        except CliError as err:
            failure = explain_start_failure(redact(err.stderr))
            raise EngineStartError(failure.message, failure=failure) from None

    def attach(
        self,
        container_id: str,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None = None,
        tty: bool = False,
    ) -> CliAttachment:
        """``docker|podman start --attach`` is both: :meth:`CliAttachment.start` runs it."""
        argv = [*self._cmd, "start", "--attach"]
        if stdin_fd is not None:
            argv.append("--interactive")
        argv.append(container_id)
        return CliAttachment(
            self, container_id, argv, env=self._env, stdout_fd=stdout_fd, stderr_fd=stderr_fd,
            stdin_fd=stdin_fd, tty=tty,
        )  # fmt: skip

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        try:
            out = self._cli("wait", container_id, timeout=timeout)
        except CliError as err:
            if err.returncode == -1:
                raise EngineError(
                    f"{self.kind}: container {container_id[:12]} still running after {timeout} s"
                ) from None
            raise self._fail(f"waiting for {container_id[:12]}", err) from None
        return int(out.strip().splitlines()[-1])

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None:
        try:
            self._cli("kill", f"--signal={signal}", container_id, timeout=30)
        except CliError as err:
            if any(t in err.stderr for t in _NOT_RUNNING) or any(g in err.stderr for g in _GONE):
                return
            raise self._fail(f"sending {signal} to {container_id[:12]}", err) from None

    def remove(self, container_id: str, *, force: bool = True) -> None:
        """Remove the container (its anonymous volumes too), then the scratch volumes of its
        overlay (:mod:`rocmenv.engine.overlay`)."""
        try:
            self._cli("rm", "--volumes", *(["--force"] if force else []), container_id)
        except CliError as err:
            if not any(g in err.stderr for g in _GONE) and "already in progress" not in err.stderr:
                raise self._fail(f"removing {container_id[:12]}", err) from None
        release(self, self._scratch.pop(container_id, ()))

    # -- volumes and files: rocmenv.engine.volumes ----------------------------------------
    create_volume = volumes.cli_create_volume
    remove_volume = volumes.cli_remove_volume
    list_volumes = volumes.cli_list_volumes
    export = volumes.cli_export

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        """The container's stdout and stderr, apart (the CLI writes each to its own)."""
        try:
            done = self._run("logs", container_id)
        except CliError as err:
            raise self._fail(f"reading logs of {container_id[:12]}", err) from None
        return done.stdout, done.stderr

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        filters = [f"--filter=label={k if v is None else f'{k}={v}'}" for k, v in labels.items()]
        try:
            found = self._cli("ps", "--all", "--quiet", "--no-trunc", *filters).split()
        except CliError as err:
            raise self._fail("listing containers", err) from None
        if not found:
            return []
        try:
            docs = json.loads(self._cli("container", "inspect", *found))
        except CliError:  # one of them went away meanwhile: one by one
            docs = []
            for cid in found:
                with contextlib.suppress(CliError):
                    docs += json.loads(self._cli("container", "inspect", cid))
        return [
            ContainerInfo(
                id=str(d["Id"]),
                name=str(d.get("Name", "")).lstrip("/"),
                state=str((d.get("State") or {}).get("Status", "")),
                labels=tuple(sorted(((d.get("Config") or {}).get("Labels") or {}).items())),
                image=str((d.get("Config") or {}).get("Image", "")),
            )
            for d in docs
        ]

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        try:
            docs = json.loads(self._cli("container", "inspect", container_id))
        except CliError as err:
            raise self._fail(f"inspecting {container_id[:12]}", err) from None
        return dict(docs[0])


__all__ = ["CliEngine", "make"]
