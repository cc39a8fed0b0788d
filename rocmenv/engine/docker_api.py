"""The Engine API adapter: ``DOCKER_HOST`` or ``/var/run/docker.sock``, no docker CLI needed.

Works where only the socket is mounted, as on runners that start sibling containers.
Requests go through a transport (:mod:`rocmenv.engine.wire`): the standard library for a
local unix socket, docker-py's session for ``tcp://``/``ssh://`` hosts (TLS from
``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``) or when ``ROCMENV_DOCKER_API_TRANSPORT=docker-py``.
Pulls always use docker-py (registry credentials from the Docker config and its helpers).
The request bodies are what the docker CLI sends for the same options (capabilities as
``CAP_…``, ulimits sorted by name), so ``docker inspect`` shows the same container either way.

Output is read from the attach stream (multiplexed stdout/stderr frames, or one raw stream
with a TTY) and written to our file descriptors as it arrives.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence

from rocmenv.container.render import create_body
from rocmenv.container.runspec import RunSpec
from rocmenv.engine import volumes
from rocmenv.engine.attach import STDERR, AttachStream, demux
from rocmenv.engine.overlay import prepare, release
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
from rocmenv.engine.wire import (
    DockerPyWire,
    Query,
    UnixWire,
    Wire,
    WireStatus,
    WireTimeout,
    WireUnavailable,
    decode_json,
    quote_ref,
)
from rocmenv.errors import EngineError, EngineProtocolError, EngineStartError, EngineUnavailable
from rocmenv.redact import redact

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

    from rocmenv.settings.choices import EngineKind


def make(kind: EngineKind, options: EngineOptions) -> DockerApiEngine:
    return DockerApiEngine(options)


def _env_pairs(items: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items or ():
        name, _, value = item.partition("=")
        out.append((name, value))
    return tuple(out)


def _unreachable_hint(error: str, env: Mapping[str, str]) -> str:
    from rocmenv.engine.hints import unreachable_hint  # only when the engine does not answer

    return unreachable_hint(error, env)


def _message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()
    return str(doc.get("message", doc)) if isinstance(doc, dict) else str(doc)


class DockerApiEngine:
    kind: EngineKind = "docker-api"

    def __init__(self, options: EngineOptions) -> None:
        self._env = dict(options.env)
        self._timeout = options.timeout
        self._scratch: dict[str, tuple[str, ...]] = {}  # container id -> its overlay's volumes
        host = self._env.get("DOCKER_HOST", "") or "unix:///var/run/docker.sock"
        forced = self._env.get("ROCMENV_DOCKER_API_TRANSPORT", "") == "docker-py"
        tls = bool(self._env.get("DOCKER_TLS_VERIFY") or self._env.get("DOCKER_CERT_PATH"))
        self.wire: Wire
        try:
            if host.startswith("unix://") and not forced and not tls:
                self.wire = UnixWire(host[len("unix://") :], offered=options.api_offered)
            else:
                self.wire = DockerPyWire(self._env, options.timeout)
        except WireUnavailable as err:
            raise EngineUnavailable(
                f"the Docker engine does not answer: {redact(str(err))}",
                hint=_unreachable_hint(str(err), self._env),
            ) from None

    @property
    def transport(self) -> str:
        return "stdlib" if isinstance(self.wire, UnixWire) else "docker-py"

    # -- requests --------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        timeout: float | None = 60.0,
        ok: tuple[int, ...] = (200, 201, 204, 304),
        action: str = "",
    ) -> tuple[int, bytes]:
        try:
            status, _, data = self.wire.request(
                method, path, query=query, body=body, timeout=timeout
            )
        except WireUnavailable as err:
            raise EngineUnavailable(
                f"the Docker engine does not answer: {redact(str(err))}",
                hint=_unreachable_hint(str(err), self._env),
            ) from None
        except WireTimeout as err:
            raise EngineError(f"docker-api: {action or path}: {err}") from None
        if status not in ok:
            raise WireStatus(status, _message(data))
        return status, data

    def _json(
        self, method: str, path: str, *, action: str, kind: type | None = None, **kw: Any
    ) -> Any:
        try:
            _, data = self._call(method, path, action=action, **kw)
        except WireStatus as err:
            raise EngineError(
                f"docker-api: {action} failed at {self.wire.where}: {redact(err.message)}"
            ) from None
        if not data and kind is None:
            return None
        return decode_json(data, action, self.wire.where, kind)

    # -- images --------------------------------------------------------------------------
    def ping(self) -> EngineInfo:
        version = self._json("GET", "/version", action="asking the version", kind=dict)
        info = self._json("GET", "/info", action="asking for engine information", kind=dict)
        return EngineInfo(
            kind=self.kind,
            version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            os=str(info.get("OperatingSystem", "")),
            name=str(info.get("Name", "")),
        )

    def image_info(self, image: str) -> ImageInfo | None:
        try:
            _, data = self._call(
                "GET", f"/images/{quote_ref(image)}/json", action="inspecting the image"
            )
        except WireStatus as err:
            if err.status == 404:
                return None
            raise EngineError(
                f"docker-api: inspecting image {image} failed: {redact(err.message)}"
            ) from None
        doc = decode_json(data, "inspecting the image", self.wire.where, dict)
        return ImageInfo(
            id=str(doc.get("Id", "")),
            repo_digests=tuple(doc.get("RepoDigests") or ()),
            env=_env_pairs((doc.get("Config") or {}).get("Env")),
        )

    def image_exists(self, image: str) -> bool:
        return self.image_info(image) is not None

    def image_env(self, image: str) -> dict[str, str]:
        info = self.image_info(image)
        if info is None:
            raise EngineError(f"docker-api: image {image} is not present", hint="pull it first")
        return info.env_map()

    def pull(self, image: str, *, progress: Callable[[PullEvent], None] | None = None) -> None:
        """Through docker-py: registry credentials come from the Docker config and helpers."""
        import docker.errors

        wire = (
            self.wire
            if isinstance(self.wire, DockerPyWire)
            else DockerPyWire(self._env, self._timeout)
        )
        hint = "check the reference, registry access and credentials (`docker login`)"
        try:
            for event in wire.api.pull(image, stream=True, decode=True):
                if "error" in event:
                    raise EngineError(
                        f"docker-api: pulling {image} failed: {redact(str(event['error']))}",
                        hint=hint,
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
                f"docker-api: pulling {image} failed: {redact(str(err.explanation or err))}",
                hint=hint,
            ) from None

    def load(self, archive: Iterable[bytes]) -> None:
        """``POST /images/load`` with the archive as a chunked body (docker-py's session for
        a remote daemon). The daemon answers 200 and reports a failure inside its JSON
        stream: that is read too."""
        try:
            if isinstance(self.wire, UnixWire):
                status, _, body = self.wire.upload("/images/load", archive, query={"quiet": "1"})
            else:
                assert isinstance(self.wire, DockerPyWire)
                stream = self.wire.api.load_image(data=archive, quiet=True)  # type: ignore[no-untyped-call]
                body = b"\n".join(json.dumps(item).encode() for item in stream or ())
                status = 200
        except WireUnavailable as err:
            raise EngineUnavailable(
                f"the Docker engine does not answer: {redact(str(err))}",
                hint=_unreachable_hint(str(err), self._env),
            ) from None
        except WireTimeout as err:
            raise EngineError(f"docker-api: loading an image: {err}") from None
        text = body.decode(errors="replace")
        problems = [line for line in text.splitlines() if '"error' in line]
        if status != 200 or problems:
            raise EngineError(
                f"docker-api: loading an image failed ({status}): "
                f"{redact((problems or [_message(body)])[-1])[:2000]}"
            )

    def store_info(self) -> StoreInfo:
        info = self._json("GET", "/info", action="asking for engine information")
        root = str(info.get("DockerRootDir") or "")
        return StoreInfo(data_root=root, local=isinstance(self.wire, UnixWire) and bool(root))

    def list_images(self) -> list[LocalImage]:
        items = self._json("GET", "/images/json", action="listing images") or []
        out = []
        for item in items:
            image_id = str(item.get("Id", ""))
            try:
                _, data = self._call("GET", f"/images/{image_id}/json", action="inspecting")
            except WireStatus:
                continue  # removed meanwhile
            doc = json.loads(data)
            out.append(
                LocalImage(
                    id=image_id,
                    repo_tags=tuple(t for t in doc.get("RepoTags") or () if t != "<none>:<none>"),
                    repo_digests=tuple(doc.get("RepoDigests") or ()),
                    size=int(doc.get("Size") or item.get("Size") or 0),
                    created=str(doc.get("Created", "")),
                    layers=tuple((doc.get("RootFS") or {}).get("Layers") or ()),
                )
            )
        return out

    def remove_image(self, image: str) -> None:
        try:
            self._call(
                "DELETE",
                f"/images/{quote_ref(image)}",
                query={"force": "1"},  # several names: the caller checked nothing uses it
                action=f"removing image {image}",
            )
        except WireStatus as err:
            if err.status == 404:
                return
            raise EngineError(
                f"docker-api: removing image {image} failed: {redact(err.message)}",
                hint="an image used by a container cannot be removed; remove the container first",
            ) from None

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
        body = create_body(spec, tty=tty, stdin_open=stdin_open)
        if tty and console_size is not None:
            # what `docker create -t` sends from a terminal; honoured on Linux from API 1.42
            body["HostConfig"]["ConsoleSize"] = list(console_size)
        prepared = prepare(self, spec)  # the checkout's copy-on-write view (untrusted)
        body["HostConfig"]["Mounts"] = prepared.api_mounts(spec, body["HostConfig"]["Mounts"])
        try:
            cid = self._create(spec, body, name)
        except BaseException:
            release(self, prepared.volumes)
            raise
        if prepared.volumes:
            self._scratch[cid] = prepared.volumes
        return cid

    def _create(self, spec: RunSpec, body: dict[str, Any], name: str | None) -> str:
        try:
            _, data = self._call(
                "POST",
                "/containers/create",
                query={"name": name} if name else None,
                body=body,
                action="creating the container",
            )
        except WireStatus as err:
            if err.status == 404 and "image" in err.message.lower():
                raise EngineError(
                    f"docker-api: image {spec.image} is not present",
                    hint="pull it (--pull missing)",
                ) from None
            failure = explain_start_failure(err.message, spec)
            raise EngineError(
                f"docker-api: creating the container failed: {failure.message}"
            ) from None
        doc = decode_json(data, "creating the container", self.wire.where, dict)
        if not isinstance(doc.get("Id"), str) or not doc["Id"]:
            raise EngineProtocolError(
                f"docker-api: creating the container at {self.wire.where}: the answer has no Id"
            )
        return str(doc["Id"])

    def start(self, container_id: str) -> None:
        try:
            self._call("POST", f"/containers/{container_id}/start", action="starting")
        except WireStatus as err:
            failure = explain_start_failure(err.message)
            raise EngineStartError(failure.message, failure=failure) from None

    def attach(
        self,
        container_id: str,
        *,
        stdout_fd: int,
        stderr_fd: int,
        stdin_fd: int | None = None,
        tty: bool = False,
    ) -> AttachStream:
        query = {"stream": 1, "stdout": 1, "stderr": 1, "stdin": 1 if stdin_fd is not None else 0}
        try:
            sock, initial = self.wire.hijack(f"/containers/{container_id}/attach", query=query)
        except WireUnavailable as err:
            raise EngineUnavailable(
                f"the Docker engine does not answer: {redact(str(err))}",
                hint=_unreachable_hint(str(err), self._env),
            ) from None
        except WireStatus as err:
            raise EngineError(f"docker-api: attaching failed: {redact(err.message)}") from None
        return AttachStream(
            sock,
            initial,
            stdout_fd=stdout_fd,
            stderr_fd=stderr_fd,
            stdin_fd=stdin_fd,
            tty=tty,
            start=lambda: self.start(container_id),
            resize=lambda h, w: self.resize(container_id, height=h, width=w),
        )

    def wait(self, container_id: str, timeout: float | None = None) -> int:
        try:
            _, data = self._call(
                "POST", f"/containers/{container_id}/wait", timeout=timeout, action="waiting"
            )
        except WireStatus as err:
            raise EngineError(
                f"docker-api: waiting for {container_id[:12]} failed: {err.message}"
            ) from None
        except EngineError as err:
            if timeout is not None and "no answer" in err.what:
                raise EngineError(
                    f"docker-api: container {container_id[:12]} still running after {timeout} s"
                ) from None
            raise
        code = decode_json(data, "waiting", self.wire.where, dict).get("StatusCode", -1)
        if not isinstance(code, int) or isinstance(code, bool):
            raise EngineProtocolError(
                f"docker-api: waiting for {container_id[:12]}: StatusCode {code!r} is not a number"
            )
        return code

    def kill(self, container_id: str, signal: str = "SIGKILL") -> None:
        try:
            self._call(
                "POST", f"/containers/{container_id}/kill", query={"signal": signal}, action="kill"
            )
        except WireStatus as err:
            if err.status in (404, 409):  # gone, or not running
                return
            raise EngineError(
                f"docker-api: sending {signal} to {container_id[:12]} failed: {err.message}"
            ) from None

    def remove(self, container_id: str, *, force: bool = True) -> None:
        """Remove the container (its anonymous volumes too), then the scratch volumes of its
        overlay (:mod:`rocmenv.engine.overlay`)."""
        try:
            self._call(
                "DELETE",
                f"/containers/{container_id}",
                query={"force": force, "v": True},
                action="remove",
            )
        except WireStatus as err:
            if err.status != 404 and "already in progress" not in err.message:
                raise EngineError(
                    f"docker-api: removing {container_id[:12]} failed: {err.message}"
                ) from None
        release(self, self._scratch.pop(container_id, ()))

    # -- volumes and files: rocmenv.engine.volumes ----------------------------------------
    create_volume = volumes.api_create_volume
    remove_volume = volumes.api_remove_volume
    list_volumes = volumes.api_list_volumes
    export = volumes.api_export

    def resize(self, container_id: str, *, height: int, width: int) -> None:
        with contextlib.suppress(EngineError, WireStatus):
            self._call(
                "POST",
                f"/containers/{container_id}/resize",
                query={"h": height, "w": width},
                action="resize",
            )

    def logs(self, container_id: str) -> tuple[bytes, bytes]:
        try:
            _, data = self._call(
                "GET",
                f"/containers/{container_id}/logs",
                query={"stdout": 1, "stderr": 1},
                action="logs",
            )
        except WireStatus as err:
            raise EngineError(
                f"docker-api: reading logs of {container_id[:12]} failed: {err.message}"
            ) from None
        out, err_parts = bytearray(), bytearray()
        for stream, chunk in demux(data):
            (err_parts if stream == STDERR else out).extend(chunk)
        return bytes(out), bytes(err_parts)

    def list_containers(self, *, labels: Mapping[str, str | None]) -> list[ContainerInfo]:
        filters = json.dumps({"label": [k if v is None else f"{k}={v}" for k, v in labels.items()]})
        items = self._json(
            "GET",
            "/containers/json",
            query={"all": 1, "filters": filters},
            action="listing containers",
            kind=list,
        )
        if not all(isinstance(c, dict) and isinstance(c.get("Id"), str) for c in items):
            raise EngineProtocolError(
                f"docker-api: listing containers at {self.wire.where}: an entry is not a "
                "container (no Id)"
            )
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
        doc = self._json(
            "GET",
            f"/containers/{container_id}/json",
            action=f"inspecting {container_id[:12]}",
            kind=dict,
        )
        return dict(doc)
