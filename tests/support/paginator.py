"""A tag-list paginator in front of a registry, for tests.

Distribution 2.8 (Debian's ``docker-registry``) returns every tag in one response and
ignores ``n=``; registries such as Docker Hub, GHCR and Distribution 3 paginate with
``n``/``last`` and a ``Link: <…>; rel="next"`` header (OCI distribution spec, "Listing
Tags"). This server forwards ``GET /v2/<name>/tags/list`` to the real registry and pages
the real answer the way the spec says: tags in lexical order, ``last`` exclusive, at most
``n`` per page (or ``default_page`` when the client sends no ``n``), a ``Link`` to the next
page while tags remain. Other requests are forwarded unchanged.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


class Paginator:
    def __init__(
        self, upstream: str, *, default_page: int | None = None, max_page: int | None = None
    ) -> None:
        self.upstream = upstream
        self.default_page = default_page
        self.max_page = max_page
        self.requests: list[str] = []
        paginator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                paginator.requests.append(self.path)
                split = urllib.parse.urlsplit(self.path)
                if split.path.startswith("/v2/") and split.path.endswith("/tags/list"):
                    self._tags(split)
                else:
                    self._forward("GET")

            def do_HEAD(self) -> None:
                paginator.requests.append(self.path)
                self._forward("HEAD")

            def _upstream(self, method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(paginator.upstream, timeout=30)
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                conn.request(method, path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                return resp.status, resp.getheaders(), body

            def _forward(self, method: str) -> None:
                status, headers, body = self._upstream(method, self.path)
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(body)

            def _tags(self, split: urllib.parse.SplitResult) -> None:
                status, _headers, body = self._upstream("GET", split.path)
                if status != 200:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                data = json.loads(body)
                tags = sorted(data.get("tags") or [])
                query = dict(urllib.parse.parse_qsl(split.query))
                n = int(query["n"]) if "n" in query else paginator.default_page
                if n is not None and paginator.max_page is not None:
                    n = min(n, paginator.max_page)
                last = query.get("last")
                if last is not None:
                    tags = [t for t in tags if t > last]
                page = tags if n is None else tags[:n]
                out = json.dumps({"name": data.get("name"), "tags": page}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if n is not None and len(tags) > n:
                    nxt = urllib.parse.urlencode({"last": page[-1], "n": n})
                    self.send_header("Link", f'<{split.path}?{nxt}>; rel="next"')
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )  # shutdown() waits up to one poll: 0.5 s by default, per test

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Paginator:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def tag_requests(self) -> list[str]:
        return [r for r in self.requests if "/tags/list" in r]
