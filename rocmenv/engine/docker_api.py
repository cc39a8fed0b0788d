"""The docker-py adapter: the Engine API over ``DOCKER_HOST`` or ``/var/run/docker.sock``.

Needs nothing but the socket (no docker CLI), which is what runners that start sibling
containers have. Output is read from the attach stream (multiplexed stdout/stderr frames,
or one raw stream with a TTY) and written to our file descriptors as it arrives.
"""

from __future__ import annotations

import contextlib
import os
import signal as signals
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import docker
import docker.errors
import docker.types
from docker.utils.socket import STDERR, frames_iter

from rocmenv.engine import (
    START_HINT,
    CaptureResult,
    ContainerInfo,
    EngineInfo,
    EngineKind,
    EngineOptions,
    EngineStartError,
    ImageInfo,
    PullEvent,
    capture,
    explain_start_failure,
)
from rocmenv.errors import EngineError, EngineUnavailable
from rocmenv.redact import redact
from rocmenv.runspec import BindMount, RunSpec


def make(kind: EngineKind, options: EngineOptions) -> DockerApiEngine:
    return DockerApiEngine(options)


def _explanation(err: docker.errors.APIError) -> str:
    return str(err.explanation or err)


def _cap(name: str) -> str:
    """Capabilities as the docker CLI sends them (``CAP_SYS_PTRACE``; ``ALL`` stays)."""
    upper = name.upper()
    return upper if upper == "ALL" or upper.startswith("CAP_") else f"CAP_{upper}"


def _env_pairs(items: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items or ():
        name, _, value = item.partition("=")
        out.append((name, value))
    return tuple(out)


class DockerApiEngine:
    kind: EngineKind = "docker-api"

    def __init__(self, options: EngineOptions) -> None:
        kwargs = docker.utils.kwargs_from_env(environment=dict(options.env))
        self._where = kwargs.get("base_url") or "unix:///var/run/docker.sock"
        try:
            self.api = docker.APIClient(version="auto", timeout=int(options.timeout), **kwargs)
        except docker.errors.DockerException as err:
            raise EngineUnavailable(
                f"the Docker engine at {self._where} does not answer: {redact(str(err))}",
                hint=START_HINT,
            ) from None

    # -- helpers -------------------------------------------------------------------------
    def _fail(self, action: str, err: Exception) -> EngineError:
        text = _explanation(err) if isinstance(err, docker.errors.APIError) else str(err)
        return EngineError(f"docker-api: {action} failed at {self._where}: {redact(text)}")

    # -- images --------------------------------------------------------------------------
    def ping(self) -> EngineInfo:
        try:
            version = self.api.version()
            info = self.api.info()
        except Exception as err:
            raise EngineUnavailable(
                f"the Docker engine at {self._where} does not answer: {redact(str(err))}",
                hint=START_HINT,
            ) from None
        return EngineInfo(
            kind=self.kind,
            version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            os=str(info.get("OperatingSystem", "")),
            name=str(info.get("Name", "")),
        )

    def image_info(self, image: str) -> ImageInfo | None:
        try:
            data = self.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as err:
            if err.status_code == 404:
                return None
            raise self._fail(f"inspecting image {image}", err) from None
        config = data.get("Config") or {}
        return ImageInfo(
            id=str(data.get("Id", "")),
            repo_digests=tuple(data.get("RepoDigests") or ()),
            env=_env_pairs(config.get("Env")),
        )

    def image_exists(self, image: str) -> bool:
        return self.image_info(image) is not None

    def image_env(self, image: str) -> dict[str, str]:
        info = self.image_info(image)
        if info is None:
            raise EngineError(f"docker-api: image {image} is not present", hint="pull it first")
        return info.env_map()

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None:
        try:
            for event in self.api.pull(image, stream=True, decode=True):
                if "error" in event:
                    raise EngineError(
                        f"docker-api: pulling {image} failed: {redact(str(event['error']))}",
                        hint="check the reference, registry access and credentials "
                        "(`docker login`)",
                    )
                if progress is not None:
                    detail = event.get("progressDetail") or {}
                    progress(
                        PullEvent(
                            layer=str(event.get("id", "")),
                            status=str(event.get("status", "")),
                            current=detail.get("current"),
                            total=detail.get("total"),
                        )
                    )
        except docker.errors.APIError as err:
            raise EngineError(
                f"docker-api: pulling {image} failed: {redact(_explanation(err))}",
                hint="check the reference, registry access and credentials (`docker login`)",
            ) from None

    # -- containers ----------------------------------------------------------------------
    def create(
        self,
        spec: RunSpec,
        *,
        tty: bool = False,
        stdin_open: bool = False,
        name: str | None = None,
    ) -> str:
        host_config = self.api.create_host_config(
            devices=[f"{d.host}:{d.container}:{d.permissions}" for d in spec.devices] or None,
            group_add=list(spec.group_add) or None,
            cap_add=[_cap(c) for c in spec.cap_add] or None,
            cap_drop=[_cap(c) for c in spec.cap_drop] or None,
            security_opt=list(spec.security_opt) or None,
            privileged=spec.privileged,
            ipc_mode=spec.ipc,
            network_mode=spec.network,
            shm_size=spec.shm_size,
            mem_limit=spec.memory,
            memswap_limit=spec.memory_swap,
            ulimits=[  # sorted by name, as the docker CLI sends them
                docker.types.Ulimit(name=u.name, soft=u.soft, hard=u.hard)
                for u in sorted(spec.ulimits, key=lambda u: u.name)
            ]
            or None,
            mounts=[
                docker.types.Mount(
                    target=m.target, source=m.source, type="bind", read_only=m.readonly
                )
                for m in spec.mounts
            ]
            or None,
        )
        try:
            created = self.api.create_container(
                spec.image,
                command=list(spec.command) or None,
                environment=[f"{k}={v}" for k, v in spec.env_values.items()] or None,
                working_dir=spec.workdir,
                labels=spec.label_map,
                host_config=host_config,
                tty=tty,
                stdin_open=stdin_open,
                name=name,
                use_config_proxy=False,  # proxies pass only when the profile keeps them
            )
        except docker.errors.ImageNotFound:
            raise EngineError(
                f"docker-api: image {spec.image} is not present", hint="pull it (--pull missing)"
            ) from None
        except docker.errors.APIError as err:
            failure = explain_start_failure(_explanation(err), spec)
            raise EngineError(
                f"docker-api: creating the container failed: {failure.message}"
            ) from None
        return str(created["Id"])

    def start(self, container_id: str) -> None:
        try:
            self.api.start(container_id)
        except docker.errors.APIError as err:
            failure = explain_start_failure(_explanation(err))
            raise EngineStartError(failure.message, failure=failure) from None

    def start_attached(
        self,
        container_id: str,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None = None,
        tty: bool = False,
    ) -> _Attachment:
        params = {"stdout": 1, "stderr": 1, "stream": 1, "stdin": 1 if stdin_fd is not None else 0}
        try:
            sock = self.api.attach_socket(container_id, params=params)
        except docker.errors.APIError as err:
            raise self._fail("attaching", err) from None
        attachment = _Attachment(
            self.api, container_id, sock, stdout_fd=stdout_fd, stderr_fd=stderr_fd, tty=tty
        )
        try:
            self.start(container_id)
        except BaseException:
            attachment.close()
            raise
        attachment.begin(stdin_fd)
        return attachment

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        try:
            result = self.api.wait(container_id, timeout=timeout)
        except docker.errors.APIError as err:
            raise self._fail(f"waiting for {container_id[:12]}", err) from None
        except Exception as err:
            raise EngineError(
                f"docker-api: container {container_id[:12]} still running after {timeout} s"
                if timeout is not None
                else f"docker-api: lost the engine while waiting: {err}"
            ) from None
        return int(result.get("StatusCode", -1))

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None:
        try:
            self.api.kill(container_id, signal=signal)
        except docker.errors.APIError as err:
            if err.status_code in (404, 409):  # gone, or not running
                return
            raise self._fail(f"sending {signal} to {container_id[:12]}", err) from None

    def remove(self, container_id: str, *, force: bool = True) -> None:
        try:
            self.api.remove_container(container_id, force=force, v=True)
        except docker.errors.APIError as err:
            if err.status_code == 404 or "already in progress" in _explanation(err):
                return
            raise self._fail(f"removing {container_id[:12]}", err) from None

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        try:
            out = self.api.logs(container_id, stdout=True, stderr=False)
            err = self.api.logs(container_id, stdout=False, stderr=True)
        except docker.errors.APIError as error:
            raise self._fail(f"reading logs of {container_id[:12]}", error) from None
        return bytes(out), bytes(err)

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
        try:
            items = self.api.containers(all=True, filters={"label": filters})
        except docker.errors.APIError as err:
            raise self._fail("listing containers", err) from None
        return [
            ContainerInfo(
                id=str(c["Id"]),
                name=str((c.get("Names") or ["?"])[0]).lstrip("/"),
                state=str(c.get("State", "")),
                labels=tuple(sorted((c.get("Labels") or {}).items())),
                image=str(c.get("Image", "")),
            )
            for c in items
        ]

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        try:
            return dict(self.api.inspect_container(container_id))
        except docker.errors.APIError as err:
            raise self._fail(f"inspecting {container_id[:12]}", err) from None

    def run_capture(
        self,
        image: str,
        argv: Sequence[str],
        *,
        mounts: Sequence[BindMount] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        workdir: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> CaptureResult:
        return capture(
            self,
            image,
            argv,
            mounts=mounts,
            env=env,
            timeout=timeout,
            workdir=workdir,
            labels=labels,
        )


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError:
            return False
        except InterruptedError:
            continue
        view = view[written:]
    return True


class _Attachment:
    """Copies the attach stream to our fds; with a TTY also stdin, raw mode and resizes."""

    def __init__(
        self, api: Any, container_id: str, sock: Any, *, stdout_fd: int, stderr_fd: int, tty: bool
    ) -> None:
        self._api = api
        self._cid = container_id
        self._sock = sock
        self._raw = getattr(sock, "_sock", sock)
        with contextlib.suppress(Exception):
            self._raw.settimeout(None)
        self._out, self._err = stdout_fd, stderr_fd
        self._tty = tty
        self._reader: threading.Thread | None = None
        self._closed = False
        self._saved_term: Any = None
        self._old_winch: Any = None

    def begin(self, stdin_fd: int | None) -> None:
        self._reader = threading.Thread(target=self._copy_out, name="rocmenv-attach", daemon=True)
        self._reader.start()
        if self._tty:
            self._setup_terminal(stdin_fd)
        if stdin_fd is not None:
            threading.Thread(
                target=self._copy_in, args=(stdin_fd,), name="rocmenv-stdin", daemon=True
            ).start()

    def _copy_out(self) -> None:
        out_ok = err_ok = True
        try:
            for stream, data in frames_iter(self._sock, self._tty):
                if not data:
                    continue
                if stream == STDERR:
                    err_ok = err_ok and _write_all(self._err, data)
                else:
                    out_ok = out_ok and _write_all(self._out, data)
        except Exception:
            return

    def _copy_in(self, fd: int) -> None:
        try:
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                self._raw.sendall(data)
            if not self._tty:
                self._raw.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def _setup_terminal(self, stdin_fd: int | None) -> None:
        if stdin_fd is not None and os.isatty(stdin_fd):
            import termios
            import tty

            try:
                self._saved_term = (stdin_fd, termios.tcgetattr(stdin_fd))
                tty.setraw(stdin_fd)
            except termios.error:
                self._saved_term = None
        self._resize()
        if threading.current_thread() is threading.main_thread():
            self._old_winch = signals.signal(signals.SIGWINCH, lambda *_: self._resize())

    def _resize(self) -> None:
        try:
            size = os.get_terminal_size(self._out)
            self._api.resize(self._cid, height=size.lines, width=size.columns)
        except Exception:
            return

    def join(self, timeout: float | None = None) -> None:
        if self._reader is not None:
            self._reader.join(timeout)

    def exit_code(self) -> int | None:
        return None  # the attach stream does not carry it: Engine.wait does

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._saved_term is not None:
            import termios

            fd, attrs = self._saved_term
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, attrs)
        if self._old_winch is not None:
            with contextlib.suppress(ValueError):
                signals.signal(signals.SIGWINCH, self._old_winch)
        with contextlib.suppress(Exception):
            self._sock.close()
