"""Reading one HTTP/1.1 answer of the Engine API strictly (:mod:`rocmenv.engine.wire`'s
standard-library transport): a status line, ``Content-Length`` or chunk size that does not
parse, a body shorter than announced, a body over :data:`MAX_BODY`, headers over
:data:`MAX_HEAD` are an :class:`~rocmenv.errors.EngineProtocolError` (exit 4), never a
``ValueError`` or a short body. :meth:`AnswerReader.stream` gives a body as it arrives (a
container's files as a tar stream: ``--output``), its size the caller's to cap.
"""

from __future__ import annotations

import _socket
from collections.abc import Iterator, Mapping

from rocmenv.errors import EngineProtocolError
from rocmenv.lazy import Pattern

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Final

#: The largest answer body read into memory (container inspect, image lists: kilobytes).
MAX_BODY: Final = 64 << 20
MAX_HEAD: Final = 1 << 20

_STATUS_LINE = Pattern(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: .*)?")
_CHUNK_SIZE = Pattern(rb"[0-9a-fA-F]{1,15}")


class AnswerReader:
    """Reads one HTTP/1.1 answer strictly: anything malformed or short is an
    :class:`EngineProtocolError` naming the request (``what``)."""

    def __init__(self, sock: _socket.socket, what: str) -> None:
        self.sock = sock
        self.what = what
        self.buf = bytearray()  # += on bytes would copy: quadratic on a large body

    def bad(self, detail: str) -> EngineProtocolError:
        return EngineProtocolError(
            f"{self.what}: malformed answer from the engine: {detail}",
            hint="the socket may not be a Docker Engine API (check DOCKER_HOST), or a proxy in "
            "front of it broke the answer; retry, then restart the engine",
        )

    def _recv(self, limit: int = 65536) -> bytes:
        return self.sock.recv(max(1, min(limit, 1 << 20)))

    def head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buf:
            chunk = self._recv()
            if not chunk:
                if not self.buf:
                    raise ConnectionError("the engine closed the connection before answering")
                raise self.bad("the connection closed inside the headers")
            self.buf += chunk
            if len(self.buf) > MAX_HEAD and b"\r\n\r\n" not in self.buf[:MAX_HEAD]:
                raise self.bad(f"headers over {MAX_HEAD} bytes")
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        self.buf = bytearray(rest)
        lines = bytes(head).split(b"\r\n")
        match = _STATUS_LINE.fullmatch(lines[0])
        if match is None:
            raise self.bad(f"status line {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, colon, value = line.decode("latin-1").partition(":")
            if not colon or not key.strip() or key != key.strip():
                raise self.bad(f"header line {line[:80]!r}")
            name = key.lower()
            if name in headers and name == "content-length" and headers[name] != value.strip():
                raise self.bad("two different Content-Length headers")
            headers[name] = value.strip()
        return int(match.group(1)), headers

    def body(self, headers: Mapping[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return self._dechunk()
        if "content-length" in headers:
            text = headers["content-length"]
            if not text.isascii() or not text.isdigit() or len(text) > 18:
                raise self.bad(f"Content-Length {text[:40]!r}")
            size = int(text)
            if size > MAX_BODY:
                raise self.bad(f"a body of {size} bytes (more than {MAX_BODY})")
            self._fill(size, f"the body ends after {{have}} of {size} bytes")
            data = bytes(self.buf[:size])
            del self.buf[:size]
            return data
        while True:  # no length: the body runs until the engine closes (Connection: close)
            chunk = self._recv()
            if not chunk:
                data = bytes(self.buf)
                self.buf.clear()
                return data
            self.buf += chunk
            if len(self.buf) > MAX_BODY:
                raise self.bad(f"a body over {MAX_BODY} bytes")

    def _fill(self, need: int, short: str) -> None:
        while len(self.buf) < need:
            chunk = self._recv(need - len(self.buf))
            if not chunk:
                raise self.bad(short.format(have=len(self.buf)))
            self.buf += chunk

    def _dechunk(self) -> bytes:
        out = bytearray()
        for data in self._chunks(MAX_BODY):
            out += data
        return bytes(out)

    def _chunks(self, limit: int | None) -> Iterator[bytes]:
        """The data of each chunk of a chunked body, in order (``limit``: the most bytes in
        all, else :class:`EngineProtocolError`)."""
        total = 0
        while True:
            while b"\r\n" not in self.buf:
                if len(self.buf) > 4096:
                    raise self.bad("a chunk-size line over 4096 bytes")
                chunk = self._recv()
                if not chunk:
                    raise self.bad("the connection closed before the last chunk")
                self.buf += chunk
            end = self.buf.index(b"\r\n")
            line = bytes(self.buf[:end])
            del self.buf[: end + 2]
            text = line.split(b";", 1)[0].strip()
            if _CHUNK_SIZE.fullmatch(text) is None:
                raise self.bad(f"chunk size {line[:40]!r}")
            size = int(text, 16)
            if size == 0:
                return  # trailers, if any, are not read (Connection: close)
            total += size
            if limit is not None and total > limit:
                raise self.bad(f"a body over {limit} bytes")
            self._fill(size + 2, f"a chunk of {size} bytes ends early")
            if self.buf[size : size + 2] != b"\r\n":
                raise self.bad(f"chunk of {size} bytes not followed by CRLF")
            yield bytes(self.buf[:size])
            del self.buf[: size + 2]

    def stream(self, headers: Mapping[str, str]) -> Iterator[bytes]:
        """The body as it arrives, without a size limit (the caller caps what it keeps):
        chunked, of a ``Content-Length``, or until the engine closes."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            yield from self._chunks(None)
            return
        length = headers.get("content-length")
        if length is not None:
            if not length.isascii() or not length.isdigit() or len(length) > 18:
                raise self.bad(f"Content-Length {length[:40]!r}")
            left = int(length)
            while left > 0:
                if not self.buf:
                    chunk = self._recv(left)
                    if not chunk:
                        raise self.bad(f"the body ends {left} bytes short")
                    self.buf += chunk
                data = bytes(self.buf[:left])
                del self.buf[: len(data)]
                left -= len(data)
                yield data
            return
        while True:
            if self.buf:
                data = bytes(self.buf)
                self.buf.clear()
                yield data
            chunk = self._recv()
            if not chunk:
                return
            self.buf += chunk
