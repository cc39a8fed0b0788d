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
* ``hostile-tags`` — one tag page of :data:`HOSTILE_TAGS`: a real tag among tags that print
  workflow commands, newlines, terminal escapes and bidirectional overrides;
* ``md5-index`` — an image index whose ``linux/amd64`` entry has an ``md5:`` digest (HEAD
  answers with the index's real digest, GET with the index);
* ``capture`` — answers 401 with a Basic challenge and records every ``Authorization`` header
  it was sent (:attr:`HostileRegistry.authorizations`).
* ``token-429`` — a bearer challenge whose realm (``/token`` on the same server) always
  answers 429 without ``Retry-After`` ("too many failed login attempts");
* ``oauth`` — a bearer challenge whose realm accepts only an OAuth2 ``refresh_token`` POST
  (recorded in :attr:`HostileRegistry.forms`) and then serves an empty tag list.

Image modes serve one ``linux/amd64`` image under every repository and tag (``HEAD``/``GET``
of its manifest, its config and layer blobs, ``Range`` honoured), its layers made by
:mod:`tests.support.hostile_layers`:

* ``gzip-bomb`` — one layer, ~21 MB of gzip'd zeros expanding to a 20 GiB file;
* ``pyvenv-flood`` — one layer of 100 ``pyvenv.cfg`` files of 4 MiB each;
* ``metadata-40k`` — a Python layer of 20,000 ``*.dist-info/METADATA`` files and a second
  layer of 20,000 more;
* ``pth-flood`` — a Python layer whose ``flood.pth`` adds 20,000 directories to ``sys.path``,
  next to 20,000 ``METADATA`` files;
* ``bomb-and-flood`` — the ``gzip-bomb`` layer, then the ``pyvenv-flood`` layer;
* ``planted-digest`` — the layer's digest is ``sha256:`` + a path (``planted=``, default
  ``/some/path/planted``); no blob is served for it;
* ``size-lie`` — a small Python layer whose descriptor gives half its real size;
* ``drip-layer`` — a small Python layer sent one byte every 0.5 s.

:attr:`HostileRegistry.blob_requests` lists the paths of the blob requests received.

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
    "hostile-tags",
    "md5-index",
    "capture",
    "token-429",
    "oauth",
    "drip-headers",
)
IMAGE_MODES = (
    "gzip-bomb",
    "pyvenv-flood",
    "bomb-and-flood",
    "metadata-40k",
    "pth-flood",
    "planted-digest",
    "size-lie",
    "drip-layer",
)
#: What the ``hostile-tags`` mode lists (JSON carries any string as a tag).
HOSTILE_TAGS = (
    "v0.5.8-rocm700-mi30x-20260215",
    "::set-output name=image::PWNED-tag",
    "ok\n::add-mask::PWNED-newline",
    "x\r::error::PWNED-cr",
    "##[set-output name=digest;]PWNED-v1",
    "  ::stop-commands::pwnedtags",
    "\x1b]0;PWNED-title\x07\x1b[2J\x1b]8;;http://127.0.0.1:9/\x1b\\link\x1b]8;;\x1b\\",
    "\u202eevil-bidi\u202c",
    "\x9b31mc1-csi",
)
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
SITE = "usr/local/lib/python3.11/dist-packages"
BOMB_SIZE = 20 << 30


class HostileRegistry:
    def __init__(self, mode: str, *, planted: str = "/some/path/planted") -> None:
        if mode not in MODES + IMAGE_MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.requests = 0
        self.blob_requests: list[str] = []
        self._manifest, self._blobs = _image(mode, planted) if mode in IMAGE_MODES else (b"", {})
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
                if self.mode in IMAGE_MODES:
                    self._image_answer(conn, method, target, headers)
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
        if self.mode == "hostile-tags":
            body = json.dumps({"name": "x/y", "tags": list(HOSTILE_TAGS)}).encode()
            conn.sendall(
                self._head("200 OK", {**json_type, "Content-Length": str(len(body))}) + body
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

    def _image_answer(
        self, conn: socket.socket, method: str, target: str, headers: dict[str, str]
    ) -> None:
        path = target.split("?", 1)[0]
        status, head, data = "404 Not Found", {"Content-Type": "application/json"}, b"{}"
        if path == "/v2/":
            status, data = "200 OK", b"{}"
        elif "/manifests/" in path:
            status, data = "200 OK", self._manifest
            head = {
                "Content-Type": DOCKER_MANIFEST,
                "Docker-Content-Digest": _sha256(self._manifest),
            }
        elif "/blobs/" in path:
            with self._lock:
                self.blob_requests.append(path)
            digest = path.split("/blobs/", 1)[1]
            blob = self._blobs.get(digest)
            config = json.loads(self._manifest)["config"]["digest"]
            if blob is not None and self.mode == "drip-layer" and digest != config:
                self._drip(conn, method, blob)
                return
            if blob is not None:
                start = 0
                if headers.get("range", "").startswith("bytes="):
                    start = int(headers["range"][6:].split("-", 1)[0])
                status = "206 Partial Content" if start else "200 OK"
                head, data = {"Content-Type": "application/octet-stream"}, blob[start:]
        head["Content-Length"] = str(len(data))
        conn.sendall(self._head(status, head))
        if method != "HEAD":
            view = memoryview(data)
            for i in range(0, len(view), 1 << 20):
                if self._stop.is_set():
                    return
                conn.sendall(view[i : i + (1 << 20)])

    def _drip(self, conn: socket.socket, method: str, blob: bytes) -> None:
        conn.sendall(self._head("200 OK", {"Content-Length": str(len(blob))}))
        if method == "HEAD":
            return
        for i in range(len(blob)):
            if self._stop.is_set():
                return
            conn.sendall(blob[i : i + 1])
            time.sleep(0.5)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _python() -> list[tuple[str, bytes | str]]:
    return [("usr/bin/python3", "python3.11"), ("usr/lib/python3.11/os.py", b"# os\n")]


def _metadata(name: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\nA package.\n".encode()


def _layers(mode: str) -> list[bytes]:
    from tests.support.hostile_layers import tar_gz, zero_bomb

    if mode == "gzip-bomb":
        return [zero_bomb(BOMB_SIZE)]
    if mode in ("pyvenv-flood", "bomb-and-flood"):
        line = b"include-system-site-packages = false\n"
        cfg = (line * ((4 << 20) // len(line) + 1))[: 4 << 20]
        flood = tar_gz((f"opt/venv{i:03d}/pyvenv.cfg", cfg) for i in range(100))
        return [zero_bomb(BOMB_SIZE), flood] if mode == "bomb-and-flood" else [flood]
    if mode in ("size-lie", "drip-layer"):
        return [tar_gz([*_python(), (f"{SITE}/a-1.0.dist-info/METADATA", _metadata("a"))])]
    many = [
        (f"{SITE}/pkg_a{i}-1.0.dist-info/METADATA", _metadata(f"pkg-a{i}")) for i in range(20000)
    ]
    if mode == "metadata-40k":
        more = [
            (f"{SITE}/pkg_b{i}-1.0.dist-info/METADATA", _metadata(f"pkg-b{i}"))
            for i in range(20000)
        ]
        return [tar_gz(_python() + many), tar_gz(more)]
    flood = "".join(f"/opt/flood/d{i}\n" for i in range(20000)).encode()
    return [tar_gz([*_python(), (f"{SITE}/flood.pth", flood), *many])]


def _image(mode: str, planted: str) -> tuple[bytes, dict[str, bytes]]:
    """The manifest and the blobs (digest -> bytes) of the image a mode serves."""
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": []},
        }
    ).encode()
    blobs = {_sha256(config): config}
    layers = []
    if mode == "planted-digest":
        layers.append({"mediaType": DOCKER_LAYER, "size": 1024, "digest": f"sha256:{planted}"})
    else:
        for blob in _layers(mode):
            blobs[_sha256(blob)] = blob
            size = len(blob) // 2 if mode == "size-lie" else len(blob)
            layers.append({"mediaType": DOCKER_LAYER, "size": size, "digest": _sha256(blob)})
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "size": len(config), "digest": _sha256(config)},
        "layers": layers,
    }
    return json.dumps(manifest).encode(), blobs
