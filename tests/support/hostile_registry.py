"""A hostile (or badly broken) registry for tests: one loopback HTTP/1.1 server whose answers
are built to hurt a client, and a credential-capturing listener.

::

    with HostileRegistry("huge-length") as reg:
        rocmenv tags list {reg.host}/x/y       # must end with exit 3, bounded memory

Modes (every path gets the same treatment):

* ``huge-length`` — ``200`` with ``Content-Length: 99999999999999`` and a few bytes;
* ``chunked-400mb`` — a chunked body of 400 MB of ``[`` (never valid JSON);
* ``drip`` — a ``Content-Length: 1000`` body sent one byte every 0.5 s;
* ``drip-headers`` — an endless response head (``X-Pad`` header lines), one byte every 0.5 s;
* ``endless-links`` — every tag page valid, with a ``Link`` to a distinct next page;
* ``md5-index`` — an image index whose ``linux/amd64`` entry has an ``md5:`` digest (HEAD
  answers with the index's real digest, GET with the index);
* ``capture`` — answers 401 with a Basic challenge and records every ``Authorization`` header
  it was sent (:attr:`HostileRegistry.authorizations`).
* ``token-429`` — a bearer challenge whose realm (``/token`` on the same server) always
  answers 429 without ``Retry-After`` ("too many failed login attempts");
* ``oauth`` — a bearer challenge whose realm accepts only an OAuth2 ``refresh_token`` POST
  (recorded in :attr:`HostileRegistry.forms`) and then serves an empty tag list.

Standard library only; the server counts requests (:attr:`HostileRegistry.requests`).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from types import TracebackType

MODES = (
    "huge-length",
    "chunked-400mb",
    "drip",
    "endless-links",
    "md5-index",
    "capture",
    "token-429",
    "oauth",
    "drip-headers",
)
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


class HostileRegistry:
    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.requests = 0
        self.authorizations: list[str] = []
        self.forms: list[dict[str, list[str]]] = []
        self.token_requests = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> HostileRegistry:
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            reader = conn.makefile("rb")
            while not self._stop.is_set():
                line = reader.readline(65536)
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    h = reader.readline(65536)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length") or 0)
                body = reader.read(length) if length else b""
                with self._lock:
                    self.requests += 1
                    if "authorization" in headers:
                        self.authorizations.append(headers["authorization"])
                if self.mode in ("token-429", "oauth"):
                    self._bearer(conn, method, target, headers, body)
                    continue
                self._answer(conn, method, target, headers)
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def _bearer(
        self, conn: socket.socket, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> None:
        import urllib.parse

        if target.startswith("/token"):
            with self._lock:
                self.token_requests += 1
            if self.mode == "token-429":
                data = b'{"details":"too many failed login attempts"}'
                conn.sendall(
                    self._head("429 Too Many Requests", {"Content-Length": str(len(data))}) + data
                )
                return
            form = urllib.parse.parse_qs(body.decode())
            with self._lock:
                self.forms.append(form)
            if method != "POST" or form.get("grant_type") != ["refresh_token"]:
                data = b'{"details":"refresh token grant required"}'
                conn.sendall(
                    self._head("401 Unauthorized", {"Content-Length": str(len(data))}) + data
                )
                return
            data = json.dumps({"access_token": "granted-access", "expires_in": 60}).encode()
            conn.sendall(self._head("200 OK", {"Content-Length": str(len(data))}) + data)
            return
        if headers.get("authorization") == "Bearer granted-access":
            data = json.dumps({"name": "x/y", "tags": ["v1"]}).encode()
            conn.sendall(
                self._head(
                    "200 OK", {"Content-Type": "application/json", "Content-Length": str(len(data))}
                )
                + data
            )
            return
        realm = f"http://{self.host}/token"
        challenge = f'Bearer realm="{realm}",service="hostile",scope="repository:x/y:pull"'
        data = b'{"errors":[{"code":"UNAUTHORIZED"}]}'
        conn.sendall(
            self._head(
                "401 Unauthorized",
                {"WWW-Authenticate": challenge, "Content-Length": str(len(data))},
            )
            + data
        )

    @staticmethod
    def _head(status: str, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _answer(
        self, conn: socket.socket, method: str, target: str, headers: dict[str, str]
    ) -> None:
        json_type = {"Content-Type": "application/json"}
        if self.mode == "capture":
            body = b'{"errors":[{"code":"UNAUTHORIZED"}]}'
            conn.sendall(
                self._head(
                    "401 Unauthorized",
                    {
                        **json_type,
                        "WWW-Authenticate": 'Basic realm="capture"',
                        "Content-Length": str(len(body)),
                    },
                )
                + body
            )
            return
        if target == "/v2/" or target.startswith("/v2/?"):
            conn.sendall(self._head("200 OK", {**json_type, "Content-Length": "2"}) + b"{}")
            return
        if self.mode == "huge-length":
            conn.sendall(self._head("200 OK", {**json_type, "Content-Length": "99999999999999"}))
            conn.sendall(b'{"tags":[')
            time.sleep(2)
            return
        if self.mode == "chunked-400mb":
            conn.sendall(self._head("200 OK", {**json_type, "Transfer-Encoding": "chunked"}))
            chunk = b"[" * (1 << 20)
            framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
            for _ in range(400):
                conn.sendall(framed)
            conn.sendall(b"0\r\n\r\n")
            return
        if self.mode == "drip-headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for _ in range(100000):
                if self._stop.is_set():
                    return
                conn.sendall(b"X")
                time.sleep(0.5)
            return
        if self.mode == "drip":
            conn.sendall(self._head("200 OK", {**json_type, "Content-Length": "1000"}))
            for _ in range(1000):
                if self._stop.is_set():
                    return
                conn.sendall(b" ")
                time.sleep(0.5)
            return
        if self.mode == "endless-links":
            n = self.requests
            body = json.dumps({"name": "x/y", "tags": [f"t{n}"]}).encode()
            path = target.split("?", 1)[0]
            conn.sendall(
                self._head(
                    "200 OK",
                    {
                        **json_type,
                        "Content-Length": str(len(body)),
                        "Link": f'<{path}?last=t{n}&n=1>; rel="next"',
                    },
                )
                + body
            )
            return
        if self.mode == "md5-index":
            index = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": OCI_INDEX,
                    "manifests": [
                        {
                            "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "digest": "md5:" + hashlib.md5(b"x").hexdigest(),
                            "size": 1,
                            "platform": {"os": "linux", "architecture": "amd64"},
                        }
                    ],
                }
            ).encode()
            digest = "sha256:" + hashlib.sha256(index).hexdigest()
            head = {
                "Content-Type": OCI_INDEX,
                "Content-Length": str(len(index)),
                "Docker-Content-Digest": digest,
            }
            conn.sendall(self._head("200 OK", head) + (b"" if method == "HEAD" else index))
            return
