"""Engine API transports: how the docker-api adapter sends a request.

* :class:`UnixWire` — HTTP/1.1 over a local unix socket with the standard library only
  (one connection per request, ``Connection: close``; chunked bodies; the hijacked attach
  stream). Importing docker-py costs ~0.15 s (requests, urllib3), more than all the rest of
  ``rocmenv run``; the local socket, by far the common case, does not need it.
* :class:`DockerPyWire` — docker-py's session, for ``tcp://`` (TLS) and ``ssh://`` hosts, or
  when ``ROCMENV_DOCKER_API_TRANSPORT=docker-py`` asks for it.

Both return ``(status, headers, body)`` and raise :class:`WireUnavailable` when the engine
cannot be reached; the adapter maps statuses and messages to rocmenv errors.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote, urlencode

Query = Mapping[str, str | int | bool]


class WireUnavailable(Exception):
    """The engine could not be reached at all (refused, missing socket, TLS failure)."""


class WireTimeout(Exception):
    """The engine did not answer within the timeout."""


class Wire(Protocol):
    where: str

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        timeout: float | None = 60.0,
    ) -> tuple[int, dict[str, str], bytes]: ...

    def hijack(self, path: str, *, query: Query | None = None) -> tuple[Any, bytes]:
        """POST ``path`` asking for a raw stream; returns a connected socket and any stream
        bytes already read past the response headers."""


def quote_ref(text: str) -> str:
    """A name or reference as a URL path segment (Docker's router takes ``/`` and ``:``)."""
    return quote(text, safe="/:@")


def _encode_query(query: Query | None) -> str:
    if not query:
        return ""
    items = {k: ("1" if v is True else "0" if v is False else str(v)) for k, v in query.items()}
    return "?" + urlencode(items)


class UnixWire:
    """The Engine API over a local unix socket, standard library only."""

    def __init__(self, path: str, *, api_version: str | None = None) -> None:
        self.path = path
        self.where = f"unix://{path}"
        self._prefix = f"/v{api_version}" if api_version else None

    def _connect(self, timeout: float | None) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.path)
        except OSError as err:
            sock.close()
            raise WireUnavailable(f"{self.where}: {err.strerror or err}") from None
        return sock

    def _version_prefix(self) -> str:
        if self._prefix is None:
            status, headers, _ = self._raw("GET", "/_ping", None, None, 10.0)
            version = headers.get("api-version", "")
            # Speak the daemon's own version (our requests use long-stable fields only).
            self._prefix = f"/v{version}" if status == 200 and version else ""
        return self._prefix

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        timeout: float | None = 60.0,
    ) -> tuple[int, dict[str, str], bytes]:
        return self._raw(
            method, self._version_prefix() + path + _encode_query(query), body, None, timeout
        )

    def _send(
        self,
        sock: socket.socket,
        method: str,
        target: str,
        body: Any,
        extra: Mapping[str, str] | None,
    ) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {target} HTTP/1.1", "Host: docker", "User-Agent: rocmenv"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        elif method in ("POST", "PUT"):
            head.append("Content-Length: 0")
        for key, value in (extra or {"Connection": "close"}).items():
            head.append(f"{key}: {value}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)

    def _raw(
        self,
        method: str,
        target: str,
        body: Any,
        extra: Mapping[str, str] | None,
        timeout: float | None,
    ) -> tuple[int, dict[str, str], bytes]:
        sock = self._connect(timeout)
        try:
            self._send(sock, method, target, body, extra)
            status, headers, rest = _read_head(sock)
            return status, headers, _read_body(sock, headers, rest)
        except TimeoutError:
            raise WireTimeout(
                f"{self.where}: no answer to {method} {target} in {timeout} s"
            ) from None
        except ConnectionError as err:
            raise WireUnavailable(f"{self.where}: {err}") from None
        finally:
            sock.close()

    def hijack(self, path: str, *, query: Query | None = None) -> tuple[Any, bytes]:
        target = self._version_prefix() + path + _encode_query(query)
        sock = self._connect(60.0)
        try:
            self._send(sock, "POST", target, None, {"Connection": "Upgrade", "Upgrade": "tcp"})
            status, headers, rest = _read_head(sock)
            if status >= 400:
                body = _read_body(sock, headers, rest)
                sock.close()
                raise WireStatus(status, _message(body))
        except (TimeoutError, ConnectionError) as err:
            sock.close()
            raise WireUnavailable(f"{self.where}: {err}") from None
        sock.settimeout(None)
        return sock, rest


class WireStatus(Exception):
    """An error status from a hijacked request (attach)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()
    return str(doc.get("message", doc)) if isinstance(doc, dict) else str(doc)


def _read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the engine closed the connection before answering")
        data += chunk
        if len(data) > 1 << 20:
            raise ConnectionError("response headers too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers, rest


def _read_body(sock: socket.socket, headers: Mapping[str, str], rest: bytes) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return _dechunk(sock, rest)
    if "content-length" in headers:
        size = int(headers["content-length"])
        data = rest
        while len(data) < size:
            chunk = sock.recv(max(65536, size - len(data)))
            if not chunk:
                break
            data += chunk
        return data[:size]
    data = rest
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _dechunk(sock: socket.socket, buffered: bytes) -> bytes:
    out = bytearray()
    buf = buffered

    def fill(need: int) -> None:
        nonlocal buf
        while len(buf) < need:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the engine closed the connection mid-response")
            buf += chunk

    while True:
        while b"\r\n" not in buf:
            fill(len(buf) + 1)
        line, _, buf = buf.partition(b"\r\n")
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        fill(size + 2)
        out += buf[:size]
        buf = buf[size + 2 :]


class DockerPyWire:
    """The same requests through docker-py's session (tcp/TLS, ssh, or on request)."""

    def __init__(self, env: Mapping[str, str], timeout: float = 60.0) -> None:
        import docker
        import docker.errors

        kwargs = docker.utils.kwargs_from_env(environment=dict(env))
        self.where = str(kwargs.get("base_url") or "unix:///var/run/docker.sock")
        try:
            self.api = docker.APIClient(version="auto", timeout=int(timeout), **kwargs)
        except docker.errors.DockerException as err:
            raise WireUnavailable(f"{self.where}: {err}") from None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        timeout: float | None = 60.0,
    ) -> tuple[int, dict[str, str], bytes]:
        import requests

        url = self.api._url("/{0}", path.lstrip("/"))  # docker-py's versioned URL builder
        params = {
            k: ("1" if v is True else "0" if v is False else str(v))
            for k, v in (query or {}).items()
        }
        try:
            resp = self.api.request(
                method, url, params=params, json=body if body is not None else None, timeout=timeout
            )
        except requests.exceptions.Timeout:
            raise WireTimeout(
                f"{self.where}: no answer to {method} {path} in {timeout} s"
            ) from None
        except requests.exceptions.ConnectionError as err:
            if "timed out" in str(err):  # a read timeout surfacing as a connection error
                raise WireTimeout(
                    f"{self.where}: no answer to {method} {path} in {timeout} s"
                ) from None
            raise WireUnavailable(f"{self.where}: {err}") from None
        return resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content

    def hijack(self, path: str, *, query: Query | None = None) -> tuple[Any, bytes]:
        import docker.errors

        container = path.split("/")[2]
        params = {k: int(v) if isinstance(v, bool) else v for k, v in (query or {}).items()}
        try:
            sock = self.api.attach_socket(container, params=params)
        except docker.errors.APIError as err:
            raise WireStatus(err.status_code or 500, str(err.explanation or err)) from None
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(None)
        return raw, b""
