"""The python-on-whales adapter: the ``docker`` CLI (contexts, remote hosts) or ``podman``.

Containers are created, started, inspected, listed and removed through python-on-whales.
Attached runs start ``docker start --attach`` with our own stdout as its stdout, so output
reaches the terminal or log unbuffered (partial lines, progress bars) and stdout/stderr stay
separate. Without a TTY the CLI runs in its own session: a terminal's Ctrl-C reaches only
rocmenv, which forwards it once (the CLI would proxy it a second time otherwise).

The CLI reports a start failure (e.g. a refused ulimit) on its stderr before the container
has written anything; a first stderr chunk that looks like the CLI's error is held back
until we know whether the container started, so the user sees rocmenv's explanation
instead of the raw OCI text. Secrets reach ``docker create`` through a private env file,
never on the command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException, NoSuchContainer, NoSuchImage
from python_on_whales.utils import run as run_cli

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
    StartFailure,
    capture,
    explain_start_failure,
)
from rocmenv.errors import EngineError, EngineUnavailable
from rocmenv.redact import redact
from rocmenv.runspec import BindMount, RunSpec

_NEVER_STARTED = "0001-01-01T00:00:00Z"
_CLI_ERROR_PREFIXES = (b"Error response from daemon", b"Error: ", b"Error ")


def make(kind: EngineKind, options: EngineOptions) -> WhalesEngine:
    return WhalesEngine(kind, options)


def _stderr(err: DockerException) -> str:
    return redact((err.stderr or str(err)).strip())


class WhalesEngine:
    def __init__(self, kind: EngineKind, options: EngineOptions) -> None:
        self.kind: EngineKind = kind
        binary = "podman" if kind == "podman" else "docker"
        path = shutil.which(binary, path=options.env.get("PATH", os.defpath))
        if path is None:
            raise EngineUnavailable(
                f"{kind}: the {binary} command is not on PATH",
                hint=f"install {binary}, or choose another engine with --engine",
            )
        self._binary = binary
        self.client = DockerClient(
            client_call=[path],
            host=options.env.get("DOCKER_HOST") or None,
            context=options.env.get("DOCKER_CONTEXT") or None,
        )
        self._cmd: list[str] = [str(x) for x in self.client.client_config.docker_cmd]

    def _fail(self, action: str, err: DockerException) -> EngineError:
        text = _stderr(err)
        if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
            return EngineUnavailable(f"{self.kind}: {action} failed: {text}", hint=START_HINT)
        return EngineError(f"{self.kind}: {action} failed: {text}")

    def _json(self, *args: str) -> Any:
        try:
            return json.loads(_run_text([*self._cmd, *args]))
        except DockerException as err:
            raise self._fail(" ".join(args[:2]), err) from None

    # -- images --------------------------------------------------------------------------
    def ping(self) -> EngineInfo:
        # One `info` call in JSON (no model parsing): docker and podman shape it differently.
        try:
            info = json.loads(_run_text([*self._cmd, "info", "--format", "{{json .}}"]))
        except DockerException as err:
            raise EngineUnavailable(
                f"{self.kind}: the engine does not answer: {_stderr(err)}", hint=START_HINT
            ) from None
        host = info.get("host") or {}
        version = info.get("version") or {}
        return EngineInfo(
            kind=self.kind,
            version=str(info.get("ServerVersion") or version.get("Version") or ""),
            api_version=str(version.get("APIVersion") or ""),
            os=str(
                info.get("OperatingSystem")
                or (host.get("distribution") or {}).get("distribution")
                or ""
            ),
            name=str(info.get("Name") or host.get("hostname") or ""),
        )

    def image_info(self, image: str) -> ImageInfo | None:
        try:
            img = self.client.image.inspect(image)
        except NoSuchImage:
            return None
        except DockerException as err:
            if "No such image" in (err.stderr or "") or "image not known" in (err.stderr or ""):
                return None
            raise self._fail(f"inspecting image {image}", err) from None
        env = []
        for item in (img.config.env if img.config else None) or ():
            name, _, value = item.partition("=")
            env.append((name, value))
        return ImageInfo(id=str(img.id), repo_digests=tuple(img.repo_digests or ()), env=tuple(env))

    def image_exists(self, image: str) -> bool:
        return self.image_info(image) is not None

    def image_env(self, image: str) -> dict[str, str]:
        info = self.image_info(image)
        if info is None:
            raise EngineError(f"{self.kind}: image {image} is not present", hint="pull it first")
        return info.env_map()

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None:
        if progress is not None:
            progress(PullEvent(layer="", status="pulling"))
        try:
            self.client.image.pull(image, quiet=True)
        except DockerException as err:
            raise EngineError(
                f"{self.kind}: pulling {image} failed: {_stderr(err)}",
                hint="check the reference, registry access and credentials (`docker login`)",
            ) from None
        if progress is not None:
            progress(PullEvent(layer="", status="done"))

    # -- containers ----------------------------------------------------------------------
    def create(
        self,
        spec: RunSpec,
        *,
        tty: bool = False,
        stdin_open: bool = False,
        name: str | None = None,
    ) -> str:
        env_values = spec.env_values
        secret_names = {e.name for e in spec.env if e.source == "secret" and e.value is not None}
        plain = {k: v for k, v in env_values.items() if k not in secret_names}
        env_dir = tempfile.mkdtemp(prefix="rocmenv-env-") if secret_names else None
        env_files: list[str] = []
        try:
            if env_dir is not None:
                path = os.path.join(env_dir, "env")
                lines = []
                for key in sorted(secret_names):
                    value = env_values[key]
                    if "\n" in value or "\r" in value:
                        raise EngineError(
                            f"{self.kind}: secret {key} contains a line break, which the CLI's "
                            "env files cannot carry",
                            hint="use --engine docker-api for such values",
                        )
                    lines.append(f"{key}={value}\n")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.writelines(lines)
                env_files.append(path)
            container = self.client.container.create(
                spec.image,
                list(spec.command),
                devices=[f"{d.host}:{d.container}:{d.permissions}" for d in spec.devices],
                groups_add=list(spec.group_add),
                cap_add=list(spec.cap_add),
                cap_drop=list(spec.cap_drop),
                security_options=list(spec.security_opt),
                privileged=spec.privileged,
                ipc=spec.ipc,
                networks=[spec.network] if spec.network else [],
                shm_size=spec.shm_size,
                memory=spec.memory,
                memory_swap=spec.memory_swap,
                ulimit=[u.render() for u in spec.ulimits],
                mounts=[m.mount_fields() for m in spec.mounts],
                envs=plain,
                env_files=env_files,
                labels=spec.label_map,
                workdir=spec.workdir,
                tty=tty,
                interactive=stdin_open,
                name=name,
                pull="never",  # pulling is rocmenv's decision, made before
            )
        except DockerException as err:
            text = _stderr(err)
            if "Cannot connect to the Docker daemon" in text:
                raise self._fail("creating the container", err) from None
            if "No such image" in text or "image not known" in text:
                raise EngineError(
                    f"{self.kind}: image {spec.image} is not present",
                    hint="pull it (--pull missing)",
                ) from None
            failure = explain_start_failure(text, spec)
            raise EngineError(
                f"{self.kind}: creating the container failed: {failure.message}"
            ) from None
        finally:
            if env_dir is not None:
                shutil.rmtree(env_dir, ignore_errors=True)
        return str(container.id)

    def start(self, container_id: str) -> None:
        try:
            self.client.container.start(container_id)
        except DockerException as err:
            failure = explain_start_failure(_stderr(err))
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
        argv = [*self._cmd, "start", "--attach"]
        if stdin_fd is not None:
            argv.append("--interactive")
        argv.append(container_id)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL,
                stdout=stdout_fd,
                stderr=stderr_fd if tty else subprocess.PIPE,
                start_new_session=not tty,
            )
        except OSError as err:
            raise EngineUnavailable(f"{self.kind}: cannot run {argv[0]}: {err}") from None
        return _Attachment(self, container_id, proc, stderr_fd=stderr_fd)

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        argv = [*self._cmd, "wait", container_id]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise EngineError(
                f"{self.kind}: container {container_id[:12]} still running after {timeout} s"
            ) from None
        if done.returncode != 0:
            raise EngineError(
                f"{self.kind}: waiting for {container_id[:12]} failed: "
                f"{redact(done.stderr.decode(errors='replace').strip())}"
            )
        return int(done.stdout.decode().strip().splitlines()[-1])

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None:
        try:
            self.client.container.kill(container_id, signal=signal)
        except NoSuchContainer:
            return
        except DockerException as err:
            text = err.stderr or ""
            if "is not running" in text or "No such container" in text or "no container" in text:
                return
            raise self._fail(f"sending {signal} to {container_id[:12]}", err) from None

    def remove(self, container_id: str, *, force: bool = True) -> None:
        try:
            self.client.container.remove(container_id, force=force, volumes=True)
        except NoSuchContainer:
            return
        except DockerException as err:
            text = err.stderr or ""
            if (
                "No such container" in text
                or "already in progress" in text
                or "no container" in text
            ):
                return
            raise self._fail(f"removing {container_id[:12]}", err) from None

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        out: list[bytes] = []
        err_parts: list[bytes] = []
        try:
            stream = cast(
                Iterable[tuple[str, bytes]], self.client.container.logs(container_id, stream=True)
            )
            for source, data in stream:
                (err_parts if source == "stderr" else out).append(data)
        except DockerException as err:
            raise self._fail(f"reading logs of {container_id[:12]}", err) from None
        return b"".join(out), b"".join(err_parts)

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        filters = [("label", k if v is None else f"{k}={v}") for k, v in labels.items()]
        try:
            found = self.client.container.list(all=True, filters=cast(Any, filters))
        except DockerException as err:
            raise self._fail("listing containers", err) from None
        if not found:
            return []
        try:
            docs = json.loads(
                _run_text([*self._cmd, "container", "inspect", *[c.id for c in found]])
            )
        except DockerException:
            # one of them went away meanwhile: inspect one by one
            docs = []
            for c in found:
                with contextlib.suppress(DockerException):
                    docs += json.loads(_run_text([*self._cmd, "container", "inspect", c.id]))
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
        docs = self._json("container", "inspect", container_id)
        return dict(docs[0])

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


class _Attachment:
    """``docker start --attach`` as a child process; stderr goes through a small pump."""

    def __init__(
        self,
        engine: WhalesEngine,
        container_id: str,
        proc: subprocess.Popen[bytes],
        *,
        stderr_fd: int,
    ) -> None:
        self._engine = engine
        self._cid = container_id
        self._proc = proc
        self._stderr_fd = stderr_fd
        self._held = b""
        self._pump: threading.Thread | None = None
        if proc.stderr is not None:
            self._pump = threading.Thread(target=self._copy_err, name="rocmenv-stderr", daemon=True)
            self._pump.start()

    def _copy_err(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        first = True
        holding = False
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            if first:
                first = False
                holding = data.startswith(_CLI_ERROR_PREFIXES)
            if holding:
                self._held += data
                continue
            _write_all(self._stderr_fd, data)

    def join(self, timeout: float | None = None) -> None:
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        if self._pump is not None:
            self._pump.join(timeout)

    def exit_code(self) -> int | None:
        """The container's exit code, from ``docker start --attach``; raises
        :class:`EngineStartError` when the container never started."""
        code = self._proc.poll()
        if code is None:
            return None
        if code == 0:
            self._flush_held()
            return 0
        try:
            doc = self._engine.inspect_container(self._cid)
        except EngineError:
            self._flush_held()
            return None
        state = doc.get("State") or {}
        if str(state.get("StartedAt") or _NEVER_STARTED).startswith("0001-01-01"):
            text = str(state.get("Error") or self._held.decode(errors="replace"))
            failure = explain_start_failure(text)
            self._held = b""
            raise EngineStartError(failure.message, failure=failure)
        self._flush_held()
        if state.get("Running"):
            return None
        return int(state.get("ExitCode", code))

    def _flush_held(self) -> None:
        if self._held:
            _write_all(self._stderr_fd, self._held)
            self._held = b""

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._flush_held()


def _run_text(argv: list[str]) -> str:
    return run_cli(argv, return_stderr=False)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:
            return


__all__ = ["StartFailure", "WhalesEngine", "make"]
