"""The cache as a registry on 127.0.0.1, for the engine to pull one image from.

Why (measured in ``benchmarks/bench_image_cache.py``): ``docker load`` unpacks the whole
archive to a temporary directory before it extracts the first layer, so a load cannot begin
before the last byte is fetched; a pull extracts each layer as soon as it has arrived while
the next ones download. Serving the cache as a registry lets the engine pull *while* the
cache fetches: the first job on an empty cache costs about what the engine's own pull costs.

What it serves, and nothing else: ``GET /v2/``, and ``HEAD``/``GET`` of the manifests and
blobs of the one image being presented (any other digest or path is 404). A blob is sent
as its bytes land in the cache (``sendfile`` from the file being fetched, which becomes the
verified blob when its digest matches), so the engine downloads and extracts each layer at
the pace of the network, exactly as a direct pull would; the engine checks every blob
against its digest, so a fetch that fails or sends other bytes fails the pull (the cache then
keeps nothing unverified, and the image is not loaded). Plain HTTP on a loopback port chosen by the kernel, for
the duration of one pull: Docker pulls from ``127.0.0.0/8`` over HTTP without an
``insecure-registries`` entry. Podman does not (it needs ``--tls-verify=false``), and an
engine whose loopback is not ours (a daemon reached through a mounted socket from inside a
container) cannot reach it: those load the image instead (:mod:`rocmenv.cache.archive`).
Standard library only (``http.server``): a few routes on loopback, no dependency.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rocmenv.cache.store import BlobCache

WAIT = 0.02  # seconds between two looks at a file still being fetched


class CacheRegistry:
    """``with CacheRegistry(cache, manifests, blobs, failed) as port: …``."""

    def __init__(
        self,
        cache: BlobCache,
        manifests: Mapping[str, str],  # digest -> media type
        blobs: Mapping[str, int],  # digest -> size
        failed: Callable[[], bool],
    ) -> None:
        self.cache, self.manifests, self.blobs, self.failed = cache, manifests, blobs, failed
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> int:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_HEAD(self) -> None:
                owner._answer(self, body=False)

            def do_GET(self) -> None:
                owner._answer(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return int(self._server.server_address[1])

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = handler.path.split("?", 1)[0]
        if path in ("/v2", "/v2/"):
            return self._send(handler, 200, b"{}", "application/json", body)
        kind, digest = _route(path)
        if kind == "manifests" and digest in self.manifests:
            data = self.cache.read_small(digest)
            if data is not None:
                handler_headers = {"Docker-Content-Digest": digest}
                return self._send(handler, 200, data, self.manifests[digest], body,
                                  handler_headers)  # fmt: skip
        if kind == "blobs" and digest in self.blobs:
            size = self.blobs[digest]
            fd = self._open(digest)
            if fd is None:
                return self._send(handler, 404, b"", "text/plain", body)
            try:
                handler.send_response(200)
                handler.send_header("Content-Type", "application/octet-stream")
                handler.send_header("Content-Length", str(size))
                handler.send_header("Docker-Content-Digest", digest)
                handler.end_headers()
                if body:
                    with contextlib.suppress(OSError):
                        self._stream(handler, fd, size)
            finally:
                os.close(fd)
            return None
        return self._send(handler, 404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}',
                          "application/json", body)  # fmt: skip

    def _open(self, digest: str) -> int | None:
        """The blob's file, or the partial file being fetched (the same inode, renamed into
        ``blobs/`` once verified); None when the fetch failed first."""
        while True:
            for path in (self.cache.blob_path(digest), self.cache.partial_path(digest)):
                with contextlib.suppress(OSError):
                    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            if self.failed():
                return None
            time.sleep(WAIT)

    def _stream(self, handler: BaseHTTPRequestHandler, fd: int, size: int) -> None:
        """``size`` bytes of ``fd`` to the engine as they land in the file (``sendfile``);
        the engine checks them against the digest. A fetch that fails ends the answer."""
        sock = handler.connection
        sent = 0
        while sent < size:
            n = os.sendfile(sock.fileno(), fd, sent, size - sent)
            if n:
                sent += n
                continue
            if self.failed():
                return
            time.sleep(WAIT)

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        media_type: str,
        body: bool,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", media_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            with contextlib.suppress(OSError):
                handler.wfile.write(data)


def _route(path: str) -> tuple[str, str]:
    """``/v2/<name>/(manifests|blobs)/<digest>`` → (kind, digest); else ("", "")."""
    head, _, digest = path.rpartition("/")
    kind = head.rpartition("/")[2]
    if kind in ("manifests", "blobs") and digest.startswith("sha256:"):
        return kind, digest
    return "", ""
