"""The fault-injecting proxy, tested against a tiny in-process upstream (no registry)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.faultproxy import (
    Blackhole,
    FaultProxy,
    Match,
    Unreachable,
    auth_challenge,
    corrupt_body,
    delay,
    drop,
    hang,
    http_date,
    non_json,
    rewrite_headers,
    status,
    too_many_requests,
    truncate,
)

MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"digest": "sha256:" + "ab" * 32, "size": 7},
        "layers": [],
    },
    indent=3,
).encode()
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
TAGS = [f"t{i:05d}" for i in range(3000)]


# --------------------------------------------------------------------------- upstream


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int


@dataclass
class Upstream:
    host: str
    seen: list[Seen] = field(default_factory=list)


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
            body = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.upstream.seen.append(
            Seen(self.command, self.path, dict(self.headers.items()), body, self.client_address[1])
        )
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        if self.command in ("PUT", "POST", "PATCH"):
            self._reply(
                201,
                body,
                {
                    "X-Echo-Method": self.command,
                    "X-Echo-Host": self.headers.get("Host", ""),
                    "X-Echo-Query": url.query,
                    "Location": f"/v2/echo/blobs/uploads/{len(body)}",
                    "Docker-Content-Digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                },
            )
        elif url.path == "/v2/":
            self._reply(200, b"{}", {"Docker-Distribution-Api-Version": "registry/2.0"})
        elif re.fullmatch(r"/v2/.+/manifests/.+", url.path):
            self._reply(
                200,
                MANIFEST,
                {
                    "Content-Type": "application/vnd.docker.distribution.manifest.v2+json",
                    "Docker-Content-Digest": MANIFEST_DIGEST,
                    "X-Multi": "one",
                },
            )
        elif m := re.fullmatch(r"/v2/(.+)/tags/list", url.path):
            n = int(q.get("n", ["100"])[0])
            last = q.get("last", [""])[0]
            rest = [t for t in TAGS if t > last]
            page = rest[:n]
            headers = {"Content-Type": "application/json"}
            if len(rest) > n:
                headers["Link"] = f'</v2/{m.group(1)}/tags/list?last={page[-1]}&n={n}>; rel="next"'
            self._reply(200, json.dumps({"name": m.group(1), "tags": page}).encode(), headers)
        elif m := re.fullmatch(r"/blob/(\d+)", url.path):
            self._reply(200, bytes(i % 251 for i in range(int(m.group(1)))))
        elif url.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello ", b"chunked ", b"world"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif url.path == "/multi":
            self.send_response(200)
            self.send_header("Set-Cookie", "a=1")
            self.send_header("Set-Cookie", "b=2")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._reply(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}')

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _UpstreamHandler)
    server.daemon_threads = True
    up = Upstream(host=f"127.0.0.1:{server.server_address[1]}")
    server.upstream = up  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield up
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=upstream.host) as p:
        yield p


# --------------------------------------------------------------------------- client


@dataclass
class R:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    host: str,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
    conn: http.client.HTTPConnection | None = None,
) -> R:
    c = conn or http.client.HTTPConnection(host, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        resp = c.getresponse()
        return R(resp.status, resp.headers, resp.read())
    finally:
        if conn is None:
            c.close()


# --------------------------------------------------------------------------- forwarding


def test_forwarding_preserves_get_status_headers_and_body(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    direct = call(upstream.host, "GET", "/v2/a/b/manifests/latest")
    via = call(proxy.host, "GET", "/v2/a/b/manifests/latest")
    assert via.status == direct.status == 200
    assert via.body == direct.body == MANIFEST
    for name in ("Content-Type", "Docker-Content-Digest", "Content-Length", "X-Multi"):
        assert via.headers[name] == direct.headers[name]
    missing = call(proxy.host, "GET", "/v2/nope/tags/list/x")
    assert missing.status == 404
    assert missing.json() == {"errors": [{"code": "NAME_UNKNOWN"}]}
    assert call(proxy.host, "GET", "/multi").headers.get_all("Set-Cookie") == ["a=1", "b=2"]


def test_forwarding_preserves_head_headers_without_body(proxy: FaultProxy) -> None:
    r = call(proxy.host, "HEAD", "/v2/a/manifests/v1")
    assert r.status == 200
    assert r.body == b""
    assert r.headers["Content-Length"] == str(len(MANIFEST))
    assert r.headers["Docker-Content-Digest"] == MANIFEST_DIGEST


def test_forwarding_preserves_put_method_query_headers_host_and_body(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    payload = bytes(range(256)) * 40
    r = call(
        proxy.host,
        "PUT",
        "/v2/a/blobs/uploads/123?digest=sha256%3Aabc&x=1",
        body=payload,
        headers={"Content-Type": "application/octet-stream", "Authorization": "Bearer sekrit"},
    )
    assert r.status == 201
    assert r.body == payload
    assert r.headers["X-Echo-Method"] == "PUT"
    assert r.headers["X-Echo-Query"] == "digest=sha256%3Aabc&x=1"
    assert r.headers["X-Echo-Host"] == proxy.host  # Location built by upstream points back at us
    seen = upstream.seen[-1]
    assert (seen.method, seen.body) == ("PUT", payload)
    assert seen.headers["Authorization"] == "Bearer sekrit"  # forwarded…
    assert seen.headers["Content-Type"] == "application/octet-stream"
    entry = proxy.log[-1]
    assert entry.header("Authorization") == "Bearer ***"  # …but never logged
    assert "sekrit" not in repr(proxy.log)
    assert entry.body_size == len(payload)
    assert (entry.query, entry.outcome, entry.rule) == (
        "digest=sha256%3Aabc&x=1",
        "forwarded",
        None,
    )


def test_forwarding_handles_chunked_bodies_both_ways(proxy: FaultProxy, upstream: Upstream) -> None:
    r = call(proxy.host, "GET", "/chunked")
    assert (r.status, r.body) == (200, b"hello chunked world")
    assert r.headers["Content-Length"] == str(len(b"hello chunked world"))

    c = http.client.HTTPConnection(proxy.host, timeout=5)
    c.putrequest("PATCH", "/v2/a/blobs/uploads/1")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    c.send(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    resp = c.getresponse()
    assert (resp.status, resp.read()) == (201, b"abcde")
    c.close()
    assert upstream.seen[-1].body == b"abcde"


def test_keep_alive_reuses_one_upstream_connection(proxy: FaultProxy, upstream: Upstream) -> None:
    conn = http.client.HTTPConnection(proxy.host, timeout=5)
    for _ in range(5):
        assert call(proxy.host, "GET", "/v2/", conn=conn).status == 200
    conn.close()
    ports = {s.client_port for s in upstream.seen}
    assert len(upstream.seen) == 5
    assert len(ports) == 1


def test_unreachable_upstream_gives_502_and_is_logged(upstream: Upstream) -> None:
    with Unreachable() as nowhere, FaultProxy(upstream=nowhere.host) as p:
        r = call(p.host, "GET", "/v2/")
        assert r.status == 502
        assert r.json()["errors"][0]["code"] == "FAULTPROXY_UPSTREAM"
        assert p.count(outcome="upstream_error") == 1


# --------------------------------------------------------------------------- rules


def test_status_fault_answers_without_upstream_and_times_is_honoured(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    rule = proxy.add_rule(
        Match(method="HEAD", path=r"/v2/.*/manifests/.*"), too_many_requests(1), times=2
    )
    got = [call(proxy.host, "HEAD", "/v2/a/manifests/v1") for _ in range(3)]
    assert [r.status for r in got] == [429, 429, 200]
    assert got[0].headers["Retry-After"] == "1"
    assert len(upstream.seen) == 1
    assert (rule.hits, rule.remaining, rule.spent) == (2, 0, True)
    assert call(proxy.host, "GET", "/v2/a/manifests/v1").status == 200  # other method untouched
    assert [e.rule for e in proxy.log] == ["status(429)", "status(429)", None, None]


@pytest.mark.parametrize("code", [500, 502, 503])
def test_status_fault_returns_server_errors(proxy: FaultProxy, code: int) -> None:
    proxy.add_rule(Match(path=r"/v2/"), status(code, {"X-Why": "test"}, b"oops"), times=1)
    r = call(proxy.host, "GET", "/v2/")
    assert (r.status, r.body, r.headers["X-Why"]) == (code, b"oops", "test")
    assert call(proxy.host, "GET", "/v2/").status == 200


def test_retry_after_can_be_an_http_date(proxy: FaultProxy) -> None:
    when = http_date(5)
    proxy.add_rule(None, too_many_requests(when), times=1)
    r = call(proxy.host, "GET", "/v2/")
    assert r.status == 429
    assert r.headers["Retry-After"] == when
    assert when.endswith(" GMT")


def test_rules_apply_in_order_and_match_method_path_and_query(proxy: FaultProxy) -> None:
    proxy.add_rule(
        Match(method=("GET", "HEAD"), path=r"/v2/x/tags/list", query=r"last="), status(500)
    )
    proxy.add_rule(Match(path=r"/v2/x/tags/list"), status(503), times=1)
    proxy.add_rule(Match(path=r"/v2/x/tags/list"), status(502))
    assert call(proxy.host, "GET", "/v2/x/tags/list?n=5&last=t1").status == 500
    assert call(proxy.host, "GET", "/v2/x/tags/list?n=5").status == 503
    assert call(proxy.host, "GET", "/v2/x/tags/list").status == 502
    # the path regex must match the whole path
    assert call(proxy.host, "GET", "/v2/xx/tags/list").status == 200
    proxy.clear_rules()
    assert call(proxy.host, "GET", "/v2/x/tags/list").status == 200


def test_hang_sends_nothing_longer_than_the_client_timeout(proxy: FaultProxy) -> None:
    proxy.add_rule(Match(path=r"/v2/"), hang(60), times=1)
    with pytest.raises(TimeoutError):  # the client gave up: nothing came within its 0.3 s
        call(proxy.host, "GET", "/v2/", timeout=0.3)
    assert call(proxy.host, "GET", "/v2/").status == 200


def test_hang_closes_the_connection_after_its_time(proxy: FaultProxy) -> None:
    proxy.add_rule(None, hang(0.3), times=1)
    with pytest.raises(http.client.RemoteDisconnected):  # closed, long before the 30 s timeout
        call(proxy.host, "GET", "/v2/", timeout=30)
    deadline = time.monotonic() + 30  # a poll: the ceiling only catches a hang
    while not proxy.log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.log[0].status is None
    assert proxy.log[0].rule == "hang(0.3)"


def test_truncate_sends_real_length_then_fewer_bytes_and_closes(proxy: FaultProxy) -> None:
    proxy.add_rule(Match(method="GET", path=r"/blob/.*"), truncate(100), times=1)
    c = http.client.HTTPConnection(proxy.host, timeout=5)
    c.request("GET", "/blob/5000")
    resp = c.getresponse()
    assert resp.status == 200
    assert resp.headers["Content-Length"] == "5000"
    with pytest.raises(http.client.IncompleteRead) as err:
        resp.read()
    assert len(err.value.partial) == 100
    assert err.value.partial == bytes(i % 251 for i in range(100))
    c.close()
    assert len(call(proxy.host, "GET", "/blob/5000").body) == 5000


def test_corrupt_body_keeps_digest_and_length_but_not_the_bytes(proxy: FaultProxy) -> None:
    proxy.add_rule(Match(path=r"/v2/.*/manifests/.*"), corrupt_body(), times=1)
    r = call(proxy.host, "GET", "/v2/a/manifests/v1")
    assert r.status == 200
    assert r.headers["Docker-Content-Digest"] == MANIFEST_DIGEST
    assert r.headers["Content-Length"] == str(len(MANIFEST))
    assert len(r.body) == len(MANIFEST)
    assert r.body != MANIFEST
    assert "sha256:" + hashlib.sha256(r.body).hexdigest() != MANIFEST_DIGEST
    assert json.loads(r.body)["schemaVersion"] == 2  # still JSON: only the digest check fails
    assert call(proxy.host, "GET", "/v2/a/manifests/v1").body == MANIFEST


def test_corrupt_body_at_offset_flips_that_byte(proxy: FaultProxy) -> None:
    proxy.add_rule(None, corrupt_body(offset=7), times=1)
    original = bytes(i % 251 for i in range(64))
    got = call(proxy.host, "GET", "/blob/64").body
    assert [i for i in range(64) if got[i] != original[i]] == [7]


def test_non_json_answers_html_with_200(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_rule(Match(path=r"/v2/.*/tags/list"), non_json(), times=1)
    r = call(proxy.host, "GET", "/v2/a/tags/list")
    assert r.status == 200
    assert r.headers["Content-Type"] == "text/html"
    assert r.body.startswith(b"<html>")
    with pytest.raises(ValueError):
        r.json()
    assert upstream.seen == []


def test_drop_closes_without_a_response(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_rule(None, drop(), times=1)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        call(proxy.host, "GET", "/v2/")
    assert call(proxy.host, "GET", "/v2/").status == 200
    assert [e.status for e in proxy.log] == [None, 200]
    assert len(upstream.seen) == 1


def test_delay_forwards_after_waiting(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_rule(None, delay(5), times=1)
    with pytest.raises(TimeoutError):  # nothing within 0.3 s: the proxy is waiting …
        call(proxy.host, "GET", "/v2/", timeout=0.3)
    assert len(upstream.seen) == 0  # … and has not forwarded yet
    deadline = time.monotonic() + 60  # a ceiling that only catches "never forwarded"
    while len(upstream.seen) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(upstream.seen) == 1  # then it forwards
    assert call(proxy.host, "GET", "/v2/").status == 200


def test_rewrite_headers_sets_and_removes_response_headers(proxy: FaultProxy) -> None:
    proxy.add_rule(
        Match(path=r"/v2/.*/tags/list"),
        rewrite_headers(set={"Link": "<garbage"}, remove=["Docker-Distribution-Api-Version"]),
        times=1,
    )
    r = call(proxy.host, "GET", "/v2/a/tags/list?n=10")
    assert r.headers.get_all("Link") == ["<garbage"]
    assert len(r.json()["tags"]) == 10


# --------------------------------------------------------------------------- counting


def test_count_tells_round_trips_of_a_paginated_listing(proxy: FaultProxy) -> None:
    path, pages = "/v2/rocm/sgl-dev/tags/list?n=1000", []
    conn = http.client.HTTPConnection(proxy.host, timeout=5)
    while path:
        r = call(proxy.host, "GET", path, conn=conn)
        pages.append(r.json()["tags"])
        link = r.headers.get("Link")
        path = link[1 : link.index(">")] if link else ""
    conn.close()
    assert sum(len(p) for p in pages) == 3000
    assert proxy.count(method="GET", path=r"/v2/.*/tags/list") == 3
    assert proxy.count(method="HEAD") == 0
    assert proxy.count() == 3
    assert len(proxy.entries(path=r"/v2/rocm/sgl-dev/tags/list", status=200)) == 3
    proxy.reset_log()
    assert proxy.count() == 0


# --------------------------------------------------------------------------- auth


def _token(proxy: FaultProxy, *scopes: str, creds: tuple[str, str] | None = None) -> R:
    q = urllib.parse.urlencode([("service", "faultproxy")] + [("scope", s) for s in scopes])
    headers = {}
    if creds:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(creds).encode()).decode()
    return call(proxy.host, "GET", f"/token?{q}", headers=headers)


def test_auth_challenge_runs_the_bearer_flow_against_an_open_upstream(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.add_rule(Match(path=r"/v2/.*"), auth_challenge())
    r = call(proxy.host, "GET", "/v2/a/b/tags/list")
    assert r.status == 401
    challenge = r.headers["WWW-Authenticate"]
    assert challenge == (
        f'Bearer realm="{proxy.token_url}",service="faultproxy",scope="repository:a/b:pull"'
    )
    assert call(proxy.host, "GET", "/v2/").headers["WWW-Authenticate"] == (
        f'Bearer realm="{proxy.token_url}",service="faultproxy"'
    )
    assert upstream.seen == []

    tok = _token(proxy, "repository:a/b:pull")
    assert tok.status == 200
    token = tok.json()["token"]
    assert tok.json()["access_token"] == token
    auth = {"Authorization": f"Bearer {token}"}
    assert call(proxy.host, "GET", "/v2/a/b/tags/list", headers=auth).status == 200
    assert call(proxy.host, "GET", "/v2/", headers=auth).status == 200
    assert len(upstream.seen) == 2

    push = call(proxy.host, "PUT", "/v2/a/b/manifests/v1", body=b"{}", headers=auth)
    assert push.status == 401
    assert 'scope="repository:a/b:pull,push"' in push.headers["WWW-Authenticate"]
    assert 'error="insufficient_scope"' in push.headers["WWW-Authenticate"]
    other = call(proxy.host, "GET", "/v2/c/tags/list", headers=auth)
    assert 'error="insufficient_scope"' in other.headers["WWW-Authenticate"]
    forged = call(proxy.host, "GET", "/v2/a/b/tags/list", headers={"Authorization": "Bearer x"})
    assert 'error="invalid_token"' in forged.headers["WWW-Authenticate"]

    assert proxy.count(outcome="token") == 1
    assert proxy.count(rule="auth_challenge()") == 5
    assert proxy.count(outcome="forwarded") == 2
    assert [t.scopes for t in proxy.tokens] == [("repository:a/b:pull",)]


def test_token_endpoint_can_require_basic_credentials(upstream: Upstream) -> None:
    with FaultProxy(upstream=upstream.host, token_users={"ci": "pw"}) as p:
        assert _token(p, "repository:a:pull").status == 401
        assert _token(p, "repository:a:pull", creds=("ci", "nope")).status == 401
        ok = _token(p, "repository:a:pull", creds=("ci", "pw"))
        assert ok.status == 200
        assert p.tokens[0].user == "ci"
        assert p.log[-1].header("Authorization") == "Basic ***"
        form = urllib.parse.urlencode(
            {"grant_type": "password", "username": "ci", "password": "pw", "scope": "x:y:pull"}
        ).encode()
        post = call(
            p.host,
            "POST",
            "/token",
            body=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert post.status == 200
        assert p.tokens[-1].scopes == ("x:y:pull",)


def test_expired_proxy_tokens_are_challenged_again(upstream: Upstream) -> None:
    with FaultProxy(upstream=upstream.host, token_expires_in=-1) as p:
        p.add_rule(None, auth_challenge())
        token = _token(p, "repository:a:pull").json()["token"]
        r = call(p.host, "GET", "/v2/a/tags/list", headers={"Authorization": f"Bearer {token}"})
        assert r.status == 401
        assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]


def test_auth_challenge_with_external_realm_accepts_any_bearer(proxy: FaultProxy) -> None:
    proxy.add_rule(None, auth_challenge("http://127.0.0.1:1/token", service="reg"), times=1)
    r = call(proxy.host, "GET", "/v2/a/tags/list")
    assert r.headers["WWW-Authenticate"].startswith('Bearer realm="http://127.0.0.1:1/token"')
    assert 'service="reg"' in r.headers["WWW-Authenticate"]
    ok = call(proxy.host, "GET", "/v2/a/tags/list", headers={"Authorization": "Bearer opaque"})
    assert ok.status == 200
    # passing requests did not spend the rule: only the challenged one did
    assert proxy.rules[0].hits == 1


# --------------------------------------------------------------------------- unreachable


def test_unreachable_port_refuses_connections() -> None:
    with Unreachable() as u, pytest.raises(ConnectionRefusedError):
        call(u.host, "GET", "/v2/", timeout=2)
    assert FaultProxy.unreachable().url.startswith("http://127.0.0.1:")


def test_blackhole_accepts_but_never_answers() -> None:
    with Blackhole() as b:
        with pytest.raises(TimeoutError):
            call(b.host, "GET", "/v2/", timeout=0.3)
        assert b.connections == 1
        deadline = time.monotonic() + 30  # a poll: the ceiling only catches a hang
        while b"GET /v2/" not in b.received and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b.received.startswith(b"GET /v2/ HTTP/1.1")


def test_close_is_prompt_even_while_a_request_hangs(upstream: Upstream) -> None:
    p = FaultProxy(upstream=upstream.host).start()
    p.add_rule(None, hang(60))
    errors: list[BaseException] = []

    def client() -> None:
        try:
            call(p.host, "GET", "/v2/", timeout=30)
        except BaseException as exc:
            errors.append(exc)

    port = p.port
    t = threading.Thread(target=client)
    t.start()
    deadline = time.monotonic() + 30  # a poll: the ceiling only catches a hang
    while p.rules[0].hits == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.close()
    t.join(timeout=30)  # a ceiling that only catches a hang: the rule hangs for 60 s
    assert not t.is_alive()
    assert errors and isinstance(errors[0], (http.client.RemoteDisconnected, OSError))
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    assert p.host == f"127.0.0.1:{port}"  # the address stays readable after close
