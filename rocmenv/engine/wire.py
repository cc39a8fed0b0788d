"""Engine API transports: how the docker-api adapter sends a request.

* :class:`UnixWire` — HTTP/1.1 over a local unix socket with the standard library only
  (one connection per request, ``Connection: close``; chunked bodies; the hijacked attach
  stream). Importing docker-py costs ~0.15 s (requests, urllib3), more than all the rest of
  ``rocmenv run``; the local socket, by far the common case, does not need it.
* :class:`DockerPyWire` — docker-py's session, for ``tcp://`` (TLS) and ``ssh://`` hosts, or
  when ``ROCMENV_DOCKER_API_TRANSPORT=docker-py`` asks for it.

Both return ``(status, headers, body)`` — or, from ``stream``, the body as it arrives (a
container's files as a tar stream) — and raise :class:`WireUnavailable` when the engine
cannot be reached; the adapter maps statuses and messages to rocmenv errors. An answer that
breaks HTTP/1.1 (a status line, ``Content-Length`` or chunk size that does not parse, a body
shorter than announced, a body over :data:`~rocmenv.engine.answer.MAX_BODY`) is an
:class:`~rocmenv.errors.EngineProtocolError` (exit 4), never a ``ValueError`` or a short body
(:mod:`rocmenv.engine.answer`).

**API version**: both speak the lower of :data:`API_MAX` (what rocmenv is written and tested
against) and the daemon's own ``ApiVersion`` (the ``Api-Version`` header of ``/_ping``, else
``/version``), as the Docker CLI negotiates; a daemon older than :data:`API_MIN` is refused.
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` adds enum conversions and ``selectors`` (~2.5 ms a run)
import json
from collections.abc import Iterator, Mapping
from urllib.parse import quote, urlencode

from rocmenv.engine.answer import AnswerReader
from rocmenv.errors import EngineProtocolError
from rocmenv.lazy import Pattern

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final, Protocol
else:
    from rocmenv.typecheck import Protocol

Query = Mapping[str, str | int | bool]

#: The newest Engine API version rocmenv speaks (docker-py 7's default) and the oldest.
API_MAX: Final = "1.45"
API_MIN: Final = "1.24"
_VERSION = Pattern(r"([1-9][0-9]{0,2})\.([0-9]{1,3})")


def _version_key(text: str) -> tuple[int, int]:
    match = _VERSION.fullmatch(text)
    if match is None:
        raise ValueError(text)
    return int(match.group(1)), int(match.group(2))


def negotiate_version(offered: str, *, where: str) -> str:
    """The API version to speak: the lower of :data:`API_MAX` and the daemon's ``offered``."""
    try:
        theirs = _version_key(offered.strip())
    except ValueError:
        raise EngineProtocolError(
            f"{where}: the engine announced API version {offered[:40]!r}, which is not N.M",
            hint="check DOCKER_HOST points at a Docker Engine API",
        ) from None
    if theirs < _version_key(API_MIN):
        raise EngineProtocolError(
            f"{where}: the engine speaks API {offered}, older than the {API_MIN} rocmenv needs",
            hint="upgrade the Docker engine (API 1.24 is Docker 1.12)",
        )
    return API_MAX if theirs >= _version_key(API_MAX) else offered.strip()


class WireUnavailable(Exception):
    """The engine could not be reached at all (refused, missing socket, TLS failure)."""


class WireTimeout(Exception):
    """The engine did not answer within the timeout."""


class Wire(Protocol):
    where: str

    @property
    def api_version(self) -> str:
        """The Engine API version spoken (negotiated on first use)."""

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

    def stream(
        self, path: str, *, query: Query | None = None, timeout: float | None = 60.0
    ) -> tuple[int, bytes, Iterator[bytes]]:
        """GET ``path``: the status, the body of an error answer (else ``b""``), and the body
        of a good one as it arrives (closing the iterator closes the connection)."""


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

    def __init__(
        self, path: str, *, api_version: str | None = None, offered: str | None = None
    ) -> None:
        """``api_version``: speak it; ``offered``: what the daemon's ``/_ping`` offered
        (negotiated without asking again); neither: asked on first use."""
        self.path = path
        self.where = f"unix://{path}"
        self._prefix = f"/v{api_version}" if api_version else None
        self._offered = offered

    def _connect(self, timeout: float | None) -> _socket.socket:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.path)
        except OSError as err:
            sock.close()
            raise WireUnavailable(f"{self.where}: {err.strerror or err}") from None
        return sock

    def _version_prefix(self) -> str:
        if self._prefix is None:
            offered = self._offered
            chosen = negotiate_version(offered, where=self.where) if offered else self.negotiate()
            self._prefix = f"/v{chosen}"
        return self._prefix

    @property
    def api_version(self) -> str:
        return self._version_prefix()[2:]

    def negotiate(self) -> str:
        """Ask the daemon which API version it offers and pick ours (see the module doc)."""
        status, headers, _ = self._raw("GET", "/_ping", None, None, 10.0)
        offered = headers.get("api-version", "") if status == 200 else ""
        if not offered:  # a proxy in front of the daemon may drop the header
            status, _, body = self._raw("GET", "/version", None, None, 10.0)
            try:
                doc = json.loads(body) if status == 200 else {}
            except (ValueError, RecursionError):
                doc = {}
            offered = str(doc.get("ApiVersion", "")) if isinstance(doc, dict) else ""
        return negotiate_version(offered, where=self.where) if offered else API_MIN

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
        sock: _socket.socket,
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
            reader = AnswerReader(sock, f"{self.where}: {method} {target.split('?', 1)[0]}")
            status, headers = reader.head()
            return status, headers, reader.body(headers)
        except TimeoutError:
            raise WireTimeout(
                f"{self.where}: no answer to {method} {target} in {timeout} s"
            ) from None
        except ConnectionError as err:
            raise WireUnavailable(f"{self.where}: {err}") from None
        finally:
            sock.close()

    def upload(
        self, path: str, chunks: Any, *, query: Query | None = None, timeout: float | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """``POST path`` with ``chunks`` (an iterable of bytes) as a chunked tar body; an error
        from ``chunks`` closes the connection before the body's end (the daemon then
        refuses the request) and is raised."""
        target = self._version_prefix() + path + _encode_query(query)
        sock = self._connect(timeout)
        try:
            head = [f"POST {target} HTTP/1.1", "Host: docker", "User-Agent: rocmenv",
                    "Content-Type: application/x-tar", "Transfer-Encoding: chunked",
                    "Connection: close"]  # fmt: skip
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            for chunk in chunks:
                if chunk:
                    sock.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
            reader = AnswerReader(sock, f"{self.where}: POST {path}")
            status, headers = reader.head()
            return status, headers, reader.body(headers)
        except TimeoutError:
            raise WireTimeout(f"{self.where}: no answer to POST {path} in {timeout} s") from None
        except ConnectionError as err:
            raise WireUnavailable(f"{self.where}: {err}") from None
        finally:
            sock.close()

    def hijack(self, path: str, *, query: Query | None = None) -> tuple[Any, bytes]:
        target = self._version_prefix() + path + _encode_query(query)
        sock = self._connect(60.0)
        try:
            self._send(sock, "POST", target, None, {"Connection": "Upgrade", "Upgrade": "tcp"})
            reader = AnswerReader(sock, f"{self.where}: POST {target.split('?', 1)[0]}")
            status, headers = reader.head()
            if status >= 400:
                body = reader.body(headers)
                sock.close()
                raise WireStatus(status, _message(body))
        except (TimeoutError, ConnectionError) as err:
            sock.close()
            raise WireUnavailable(f"{self.where}: {err}") from None
        except EngineProtocolError:
            sock.close()
            raise
        sock.settimeout(None)
        return sock, bytes(reader.buf)

    def stream(
        self, path: str, *, query: Query | None = None, timeout: float | None = 60.0
    ) -> tuple[int, bytes, Iterator[bytes]]:
        target = self._version_prefix() + path + _encode_query(query)
        sock = self._connect(timeout)
        what = f"{self.where}: GET {target.split('?', 1)[0]}"
        try:
            self._send(sock, "GET", target, None, None)
            reader = AnswerReader(sock, what)
            status, headers = reader.head()
            if status >= 400:
                body = reader.body(headers)
                sock.close()
                return status, body, iter(())
        except (TimeoutError, ConnectionError) as err:
            sock.close()
            raise WireUnavailable(f"{what}: {err}") from None
        except BaseException:
            sock.close()
            raise

        def answer() -> Iterator[bytes]:
            try:
                yield from reader.stream(headers)
            except TimeoutError:
                raise WireTimeout(f"{what}: no data in {timeout} s") from None
            except ConnectionError as err:
                raise WireUnavailable(f"{what}: {err}") from None
            finally:
                sock.close()

        return status, b"", answer()


class WireStatus(Exception):
    """An error status the engine answered (the adapter says what failed)."""

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


def decode_json(data: bytes, action: str, where: str, kind: type | None = None) -> Any:
    """The JSON document of an answer; anything else is an :class:`EngineProtocolError`."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError included; nested too deeply
        raise EngineProtocolError(
            f"docker-api: {action} at {where}: the engine's answer is not JSON ({data[:60]!r})",
            hint="check DOCKER_HOST points at a Docker Engine API",
        ) from None
    if kind is not None and not isinstance(doc, kind):
        raise EngineProtocolError(
            f"docker-api: {action} at {where}: expected a JSON {kind.__name__}, got "
            f"{type(doc).__name__}"
        )
    return doc


class DockerPyWire:
    """The same requests through docker-py's session (tcp/TLS, ssh, or on request)."""

    def __init__(self, env: Mapping[str, str], timeout: float = 60.0) -> None:
        import docker
        import docker.errors
        import docker.utils
        import requests

        self.where = env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        try:
            kwargs = docker.utils.kwargs_from_env(environment=dict(env))  # TLS files checked here
            self.where = str(kwargs.get("base_url") or self.where)
            self.api = docker.APIClient(version=API_MAX, timeout=int(timeout), **kwargs)
            offered = str(self.api.version(api_version=False).get("ApiVersion", ""))
        except docker.errors.DockerException as err:
            raise WireUnavailable(f"{self.where}: {err}") from None
        except requests.exceptions.RequestException as err:
            raise WireUnavailable(f"{self.where}: {err}") from None
        version = negotiate_version(offered, where=self.where) if offered else API_MIN
        if version != API_MAX:
            self.api.close()
            self.api = docker.APIClient(version=version, timeout=int(timeout), **kwargs)

    @property
    def api_version(self) -> str:
        return str(self.api.api_version)

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

        url = self._url(path)
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

    def _url(self, path: str) -> str:
        """The versioned URL as docker-py's own (private) ``APIClient._url`` builds it."""
        import urllib.parse

        quoted = urllib.parse.quote(path.lstrip("/"), safe="/:")
        return f"{self.api.base_url}/v{self.api.api_version}/{quoted}"

    def stream(
        self, path: str, *, query: Query | None = None, timeout: float | None = 60.0
    ) -> tuple[int, bytes, Iterator[bytes]]:
        import requests

        url = self._url(path)
        try:
            resp = self.api.get(url, params=dict(query or {}), stream=True, timeout=timeout)
        except requests.exceptions.RequestException as err:
            raise WireUnavailable(f"{self.where}: {err}") from None
        if resp.status_code >= 400:
            body = resp.content
            resp.close()
            return resp.status_code, body, iter(())

        def body_chunks() -> Iterator[bytes]:
            try:
                yield from resp.iter_content(chunk_size=1 << 16)
            except requests.exceptions.RequestException as err:
                raise WireUnavailable(f"{self.where}: {err}") from None
            finally:
                resp.close()

        return resp.status_code, b"", body_chunks()
