"""Docker Hub's personality over TLS, in front of the open Distribution registry, for tests.

Started by ``scripts/lib/registry_tls.sh`` (from ``scripts/setup.sh``)::

    python tests/support/hub_server.py --listen 127.0.0.1:5443 --upstream 127.0.0.1:5000 \\
        --cert DIR/server.crt --key DIR/server.key

One TLS port answers for several host names (all in ``/etc/hosts`` → 127.0.0.1; the
certificate, signed by the test CA, names them all), told apart by ``Host``:

* ``registry.rocmenv.test`` / ``hub.rocmenv.test`` — the registry. Every ``/v2/`` request
  needs a bearer token (401 + ``WWW-Authenticate: Bearer realm="https://auth.rocmenv.test…"``);
  with one, requests go to the upstream registry, with Hub's habits:

  - a repository the upstream does not know is **401** (``UNAUTHORIZED``), never 404;
  - ``tags/list`` ignores ``n`` and sends every tag in one answer without ``Link``;
  - manifest answers carry ``ratelimit-limit: 100;w=21600`` and ``ratelimit-remaining``,
    which only manifest **GET**s decrease (as Hub counts pulls);
  - blob GETs are answered ``307`` to ``https://cdn.rocmenv.test…/blobs/<digest>?…&sig=…``;
  - ``paged/<repo>`` is ``<repo>`` with ``n`` honoured and **absolute** ``Link`` URLs;
  - ``limited/<repo>`` is ``<repo>`` whose every other manifest request is ``429`` without
    ``Retry-After``.
* ``auth.rocmenv.test`` — the token service: an anonymous token for any repository (opaque,
  ``expires_in: 300``); ``POST`` (refresh-token grants) answered too.
* ``cdn.rocmenv.test`` — blob storage: serves a blob for a valid signature only.

Every request is logged (``GET /_hub/log?since=N`` → JSON entries with ``seq``, ``host``,
``method``, ``path``, ``authorization`` (present or not, never the value), ``peer`` (the
client's port, one per connection)) so tests count
manifest GETs and prove that credentials never reached the CDN or the token service.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import secrets
import ssl
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNING_KEY = secrets.token_bytes(16)
RATE_LIMIT = 100


class HubState:
    def __init__(self, upstream: str, port: int) -> None:
        self.upstream = upstream
        self.port = port
        self.lock = threading.Lock()
        self.tokens: set[str] = set()
        self.log: list[dict[str, Any]] = []
        self.remaining = RATE_LIMIT
        self.limited_counter = 0

    def record(self, **entry: Any) -> None:
        with self.lock:
            entry["seq"] = len(self.log) + 1
            self.log.append(entry)
            if len(self.log) > 200_000:
                del self.log[:100_000]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        # the TLS handshake happens here, in the connection's thread: a client that connects
        # and says nothing cannot hold up the accept loop
        self.request.settimeout(30)
        self.request.do_handshake()
        super().setup()

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def state(self) -> HubState:
        return self.server.state

    def _host(self) -> str:
        return (self.headers.get("Host") or "").rsplit(":", 1)[0].lower()

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drain(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        body = self._drain()
        host = self._host()
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/_hub/seq":
            with self.state.lock:
                seq = self.state.log[-1]["seq"] if self.state.log else 0
            self._send(200, json.dumps({"seq": seq}).encode())
            return
        if parts.path == "/_hub/log":
            since = int(urllib.parse.parse_qs(parts.query).get("since", ["0"])[0])
            with self.state.lock:
                entries = [e for e in self.state.log if e["seq"] > since]
            self._send(200, json.dumps(entries).encode())
            return
        self.state.record(
            host=host,
            method=self.command,
            path=self.path,
            authorization="authorization" in {k.lower() for k in self.headers},
            peer=self.client_address[1],  # the client's port: one per TCP connection
        )
        if host == "auth.rocmenv.test":
            self._token(parts, body)
        elif host == "cdn.rocmenv.test":
            self._cdn(parts)
        else:
            self._registry(parts)

    # -- token service ----------------------------------------------------------------------

    def _token(self, parts: urllib.parse.SplitResult, body: bytes) -> None:
        if parts.path != "/token":
            self._send(404, b'{"details":"not found"}')
            return
        token = secrets.token_urlsafe(24)
        with self.state.lock:
            self.state.tokens.add(token)
        payload = {"token": token, "access_token": token, "expires_in": 300}
        self._send(200, json.dumps(payload).encode())

    # -- CDN --------------------------------------------------------------------------------

    def _cdn(self, parts: urllib.parse.SplitResult) -> None:
        query = urllib.parse.parse_qs(parts.query)
        digest = parts.path.rsplit("/", 1)[-1]
        repo = query.get("repo", [""])[0]
        want = _sign(repo, digest)
        if not hmac.compare_digest(query.get("sig", [""])[0], want):
            self._send(
                403, b"<Error><Code>AccessDenied</Code></Error>", {"Content-Type": "text/xml"}
            )
            return
        status, _, data = self._upstream("GET", f"/v2/{repo}/blobs/{digest}")
        self._send(status, data, {"Content-Type": "application/octet-stream"})

    # -- registry ---------------------------------------------------------------------------

    def _challenge(self, scope: str | None) -> dict[str, str]:
        realm = f"https://auth.rocmenv.test:{self.state.port}/token"
        value = f'Bearer realm="{realm}",service="hub.rocmenv.test"'
        if scope:
            value += f',scope="{scope}"'
        return {"WWW-Authenticate": value, "Docker-Distribution-API-Version": "registry/2.0"}

    def _registry(self, parts: urllib.parse.SplitResult) -> None:
        path = parts.path
        if not path.startswith("/v2/"):
            self._send(404, b"{}")
            return
        rest = path[len("/v2/") :]
        repo = None
        for marker in ("/tags/list", "/manifests/", "/blobs/"):
            if marker in rest:
                repo = rest[: rest.index(marker)]
                break
        scope = f"repository:{repo}:pull" if repo else None
        if not self._authorized():
            self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', self._challenge(scope))
            return
        if repo is None:
            self._send(200, b"{}", {"Docker-Distribution-API-Version": "registry/2.0"})
            return
        mode = ""
        upstream_repo = repo
        for prefix in ("paged/", "limited/"):
            if repo.startswith(prefix):
                mode, upstream_repo = prefix[:-1], repo[len(prefix) :]
        if "/blobs/" in rest and self.command == "GET":
            self._redirect_blob(upstream_repo, rest.rsplit("/", 1)[-1])
            return
        extra: dict[str, str] = {}
        if "/manifests/" in rest:
            rate = self._count_manifest(mode)
            if rate is None:
                self._send(429, b'{"errors":[{"code":"TOOMANYREQUESTS"}]}')
                return
            extra = rate
        if "/tags/list" in rest and mode == "paged":
            self._paged_tags(repo, "/v2/" + upstream_repo + "/tags/list", parts.query)
            return
        query = "" if "/tags/list" in rest else parts.query  # Hub ignores n
        upstream_path = "/v2/" + upstream_repo + rest[len(repo) :]
        self._relay(upstream_path + (f"?{query}" if query else ""), scope, extra)

    def _authorized(self) -> bool:
        auth = self.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        with self.state.lock:
            return token in self.state.tokens

    def _redirect_blob(self, upstream_repo: str, digest: str) -> None:
        location = f"https://cdn.rocmenv.test:{self.state.port}/blobs/{digest}?" + (
            urllib.parse.urlencode({"repo": upstream_repo, "sig": _sign(upstream_repo, digest)})
        )
        self._send(307, b"", {"Location": location})

    def _count_manifest(self, mode: str) -> dict[str, str] | None:
        """The rate-limit headers of a manifest request (``None``: this one is limited)."""
        with self.state.lock:
            limited = False
            if mode == "limited":
                self.state.limited_counter += 1
                limited = self.state.limited_counter % 2 == 1
            if not limited and self.command == "GET":
                self.state.remaining = max(0, self.state.remaining - 1)
            remaining = self.state.remaining
        if limited:
            return None
        return {
            "ratelimit-limit": f"{RATE_LIMIT};w=21600",
            "ratelimit-remaining": f"{remaining};w=21600",
        }

    def _relay(self, upstream: str, scope: str | None, extra: dict[str, str]) -> None:
        status, headers, data = self._upstream(self.command, upstream, self.headers.get("Accept"))
        if status == 404 and b"NAME_UNKNOWN" in data:
            self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', self._challenge(scope))
            return
        out = {**extra}
        for name in ("Content-Type", "Docker-Content-Digest"):
            if headers.get(name.lower()):
                out[name] = headers[name.lower()]
        if self.command == "HEAD":
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", **out}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", headers.get("content-length", "0"))
            self.end_headers()
            return
        self._send(status, data, out)

    def _paged_tags(self, repo: str, upstream_path: str, query: str) -> None:
        """Pages as the OCI spec has them (``n``, ``last``), with absolute ``Link`` URLs;
        ``n`` above 1000 is Distribution 3's ``400 PAGINATION_NUMBER_INVALID``."""
        params = urllib.parse.parse_qs(query)
        n_text = params.get("n", ["100"])[0]
        if not n_text.isdigit() or not 0 < int(n_text) <= 1000:
            self._send(400, b'{"errors":[{"code":"PAGINATION_NUMBER_INVALID"}]}')
            return
        n, last = int(n_text), params.get("last", [""])[0]
        status, _, data = self._upstream("GET", upstream_path)
        if status != 200:
            self._send(status, data)
            return
        tags = sorted(json.loads(data).get("tags") or [])
        rest = [t for t in tags if t > last] if last else tags
        page = rest[:n]
        headers = {}
        if len(rest) > n:
            own = self.headers.get("Host") or ""
            nxt = urllib.parse.urlencode({"last": page[-1], "n": n})
            headers["Link"] = f'<https://{own}/v2/{repo}/tags/list?{nxt}>; rel="next"'
        self._send(200, json.dumps({"name": repo, "tags": page}).encode(), headers)

    def _upstream(
        self, method: str, path: str, accept: str | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.state.upstream, timeout=30)
        try:
            conn.request(method, path, headers={"Accept": accept} if accept else {})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()


def _sign(repo: str, digest: str) -> str:
    return hmac.new(SIGNING_KEY, f"{repo}@{digest}".encode(), hashlib.sha256).hexdigest()


class HubServer(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up before or during the TLS handshake (a readiness probe that
        only connects, a benchmark's killed run) is not a server error: no traceback for it."""
        err = sys.exc_info()[1]
        if isinstance(err, (ssl.SSLError, ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:5443")
    parser.add_argument("--upstream", default="127.0.0.1:5000")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument(
        "--public-port",
        type=int,
        help="the port clients reach it on, in realm and CDN URLs (behind a TCP proxy)",
    )
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    server = HubServer((host, int(port)), Handler)
    server.state = HubState(args.upstream, args.public_port or int(port))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.serve_forever()


if __name__ == "__main__":
    main()
