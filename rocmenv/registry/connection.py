"""A small HTTP/1.1 client over one keep-alive socket.

Why not ``http.client``: importing it (it pulls in the ``email`` package) costs ~35 ms on our
CI machines, more than a whole ``skopeo list-tags`` on loopback; every ``rocmenv tags``,
``resolve`` and ``validate`` pays it. The registry API needs little: request line and
headers out; status, headers and a ``Content-Length``, chunked or read-to-close body back;
keep-alive; a timeout on every socket operation; TLS through :mod:`ssl` (imported only for
HTTPS). Anything else is an error, not a silent guess.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

MAX_LINE = 65536
MAX_HEADERS = 200


class TransportError(Exception):
    """The connection failed: refused, reset, timed out, TLS, or a malformed response."""


class Truncated(TransportError):
    """The server closed the connection before the whole body arrived."""

    def __init__(self, received: int, expected: int | None) -> None:
        if expected is None:
            text = f"connection closed in the middle of a chunked body after {received} bytes"
        else:
            text = f"connection closed after {received} of {expected} bytes"
        super().__init__(text + " (truncated response)")
        self.received = received
        self.expected = expected


class StaleConnection(TransportError):
    """A reused keep-alive connection was closed by the server before it answered."""


def split_host(netloc: str, default_port: int) -> tuple[str, int]:
    if netloc.startswith("["):
        end = netloc.index("]")
        host, rest = netloc[1:end], netloc[end + 1 :]
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    if ":" in netloc:
        host, port = netloc.rsplit(":", 1)
        return host, int(port)
    return netloc, default_port


class Connection:
    def __init__(self, scheme: str, netloc: str, timeout: float, ssl_context: Any = None) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._sock: socket.socket | None = None
        self._reader: Any = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(OSError):
                self._reader.close()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        self._reader = None

    def _connect(self) -> None:
        host, port = split_host(self.netloc, 443 if self.scheme == "https" else 80)
        sock = socket.create_connection((host, port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            sock = self.ssl_context.wrap_socket(sock, server_hostname=host)
        self._sock = sock
        self._reader = sock.makefile("rb")

    def request(
        self, method: str, path: str, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request and read the whole response. Raises :class:`TransportError`."""
        reused = self._sock is not None
        try:
            if self._sock is None:
                self._connect()
            assert self._sock is not None
            lines = [f"{method} {path} HTTP/1.1", f"Host: {self.netloc}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            status, version, hdrs = self._read_head(reused)
            body = self._read_body(method, status, hdrs)
        except TimeoutError as err:
            self.close()
            raise TransportError(f"no answer within {self.timeout:g} s") from err
        except TransportError:
            self.close()
            raise
        except OSError as err:  # refused, reset, broken pipe, TLS errors (ssl.SSLError)
            self.close()
            if reused and isinstance(err, (ConnectionResetError, BrokenPipeError)):
                raise StaleConnection(str(err)) from err
            raise TransportError(err.strerror or str(err) or type(err).__name__) from err
        if version == "HTTP/1.0" or hdrs.get("connection", "").lower() == "close":
            self.close()
        return status, hdrs, body

    def _readline(self) -> bytes:
        line: bytes = self._reader.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise TransportError("response line too long")
        return line

    def _read_head(self, reused: bool) -> tuple[int, str, dict[str, str]]:
        while True:
            line = self._readline()
            if not line:
                if reused:
                    raise StaleConnection("server closed the idle connection")
                raise TransportError("server closed the connection without answering")
            parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise TransportError(f"not an HTTP response: {line[:40]!r}")
            status = int(parts[1])
            hdrs: dict[str, str] = {}
            for _ in range(MAX_HEADERS):
                raw = self._readline()
                if raw in (b"\r\n", b"\n", b""):
                    break
                name, sep, value = raw.decode("latin-1").partition(":")
                if not sep:
                    raise TransportError(f"malformed header line {raw[:40]!r}")
                key = name.strip().lower()
                value = value.strip()
                hdrs[key] = f"{hdrs[key]}, {value}" if key in hdrs else value
            else:
                raise TransportError("too many response headers")
            if 100 <= status < 200:
                continue  # 100 Continue and friends: the real answer follows
            return status, parts[0], hdrs

    def _read_body(self, method: str, status: int, hdrs: dict[str, str]) -> bytes:
        if method == "HEAD" or status in (204, 304):
            return b""
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            return self._read_chunked()
        length = hdrs.get("content-length")
        if length is not None:
            try:
                size = int(length.split(",")[0])
            except ValueError:
                raise TransportError(f"bad Content-Length {length!r}") from None
            data: bytes = self._reader.read(size)
            if len(data) < size:
                raise Truncated(len(data), size)
            return data
        rest: bytes = self._reader.read()
        self.close()
        return rest

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        received = 0
        while True:
            line = self._readline()
            if not line:
                raise Truncated(received, None)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"bad chunk size line {line[:20]!r}") from None
            if size == 0:
                while self._readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            data = self._reader.read(size)
            received += len(data)
            if len(data) < size:
                raise Truncated(received, None)
            chunks.append(data)
            self._readline()  # CRLF after the chunk
