"""The urllib3 transport against one-shot loopback servers: gzip bodies, size caps on decoded
bytes (a gzip bomb), 408 retried."""

from __future__ import annotations

import base64
import contextlib
import gzip
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.redact import redact
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings
from tests.support.scripted_http import Answer, Request, ScriptedServer


@contextlib.contextmanager
def serve(answers: list[bytes]) -> Iterator[int]:
    """A loopback port answering each connection with the next of ``answers``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def run() -> None:
        for answer in answers:
            conn, _ = server.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            conn.sendall(answer)
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def response(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    return head.encode() + body


def transport(**settings: Any) -> Transport:
    return Transport(
        RegistrySettings(**settings), {"ROCMENV_REGISTRY_BACKOFF": "0"}, lambda s: None
    )


def test_gzip_content_encoding_is_decoded() -> None:
    body = b'{"tags": ["a", "b"]}'
    with serve([response(gzip.compress(body), extra="Content-Encoding: gzip\r\n")]) as port:
        resp = transport().send("GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags")
        assert resp.body == body


def test_the_size_cap_applies_to_decoded_bytes_a_gzip_bomb_is_refused() -> None:
    bomb = gzip.compress(b"0" * (64 * 1024 * 1024))  # ~64 KB on the wire
    with (
        serve([response(bomb, extra="Content-Encoding: gzip\r\n")]) as port,
        pytest.raises(RegistryProtocolError, match="limit of 1048576 bytes"),
    ):
        transport(limits=(("tags", 1024 * 1024),)).send(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )


def test_408_is_retried() -> None:
    ok = response(b"{}")
    with serve([response(b"", "408 Request Timeout"), ok]) as port:
        resp = transport(retries=2).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
        )
        assert resp.status == 200


@pytest.mark.parametrize("value", ["abc", "nan", "-1", "1e9"])
def test_a_bad_backoff_is_a_config_error_not_a_traceback(value: str) -> None:
    from rocmenv.errors import ConfigError

    with pytest.raises(ConfigError, match="ROCMENV_REGISTRY_BACKOFF"):
        Transport(RegistrySettings(), {"ROCMENV_REGISTRY_BACKOFF": value})


def test_a_streamed_body_is_retried_until_its_head_then_read_as_sent() -> None:
    body = gzip.compress(b"layer bytes " * 10000)  # sent as is: no decoding of a blob
    with serve([response(b"busy", "503 Service Unavailable"), response(body)]) as port:
        stream = transport(retries=2).stream_with_retries(
            f"http://127.0.0.1:{port}/v2/x/blobs/sha256:00", {}, "blob-stream"
        )
        assert stream.status == 200
        assert b"".join(stream.chunks(4096)) == body


def test_a_streamed_body_stops_at_the_command_deadline_not_the_request_deadline() -> None:
    """Each byte comes within the read timeout; only the command's deadline can end it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        while not stop.is_set():
            conn.sendall(b"x")
            stop.wait(0.05)
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    slow = Transport(
        RegistrySettings(timeout=5, request_deadline=0.2, command_deadline=2),
        {"ROCMENV_REGISTRY_BACKOFF": "0"},
        lambda s: None,
    )
    try:
        stream = slow.stream_with_retries(
            f"http://127.0.0.1:{server.getsockname()[1]}/v2/x/blobs/sha256:00", {}, "blob-stream"
        )
        received = 0
        with pytest.raises(RegistryUnavailable, match=r"command's deadline \(2 s\)"):
            for chunk in stream.chunks():
                received += len(chunk)
    finally:
        stop.set()
        server.close()
    assert 8 < received < 1000  # went on well past request-deadline (~4 bytes), stopped


def test_a_name_that_does_not_resolve_is_not_retried_a_refused_connection_is() -> None:
    from rocmenv.errors import RegistryUnavailable

    slept: list[float] = []
    settings = RegistrySettings(retries=4)
    client = Transport(settings, {"ROCMENV_REGISTRY_BACKOFF": "0"}, slept.append)
    with pytest.raises(RegistryUnavailable, match="does not resolve") as unresolved:
        client.send_with_retries("GET", "https://nosuch.invalid/v2/", {}, "ping")
    assert slept == []  # offline or misspelt: a retry changes neither
    assert "offline" in (unresolved.value.hint or "")
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, not listening: connection refused
    try:
        port = refused.getsockname()[1]
        with pytest.raises(RegistryUnavailable, match="after 5 attempts"):
            client.send_with_retries("GET", f"http://127.0.0.1:{port}/v2/", {}, "ping")
    finally:
        refused.close()
    assert len(slept) == 4


# -- what a failure says ------------------------------------------------------------------------


def test_an_unresolved_name_is_reported_by_the_resolver_s_reason() -> None:
    from rocmenv.registry.failures import unresolved as _unresolved

    cause = OSError("[Errno -2] Name or service not known")
    wrapped = RuntimeError("HTTPSConnection(host='x'): Failed to resolve 'x' ([Errno -3] other)")
    wrapped.__cause__ = cause
    err = _unresolved("reg.example", wrapped)
    assert err.what == "reg.example: the name does not resolve (Name or service not known)"
    assert err.hint == (
        "check the name, the DNS and the network (is this machine offline?); a mirror "
        "([registry] mirrors) or a proxy (HTTPS_PROXY) that resolves it may help"
    )
    alone = _unresolved("proxy p", ValueError("lookup] failed for x] no such name"))
    assert alone.what == "proxy p: the name does not resolve (no such name)"


def test_a_long_reason_is_cut_at_200_characters_and_redacted() -> None:
    from rocmenv.registry.failures import short as _short

    assert _short("x" * 200) == "x" * 200
    assert _short("x" * 201) == "x" * 200 + "…"
    assert _short("to https://user:hunter2-pw@r.example/") == "to https://***@r.example/"


def test_an_oversized_answer_names_its_kind_url_and_the_limit_to_raise() -> None:
    from rocmenv.registry.failures import too_large as _too_large

    more = _too_large("r.example", "https://r.example/v2/", "tags", 10, "sent more")
    assert more.what == (
        "r.example: the tags response to https://r.example/v2/ sent more than its limit of 10 bytes"
    )
    assert more.hint == (
        "a hostile or broken registry, mirror or proxy; if the registry is right, raise "
        "[registry] limits.tags"
    )
    announced = _too_large("r.example", "https://r.example/v2/", "index", 10, "announces 99 bytes")
    assert announced.what == (
        "r.example: the index response to https://r.example/v2/ announces 99 bytes, "
        "over its limit of 10 bytes"
    )


def test_an_answer_announcing_more_than_its_cap_is_refused_before_reading() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n"
    with (
        serve([head + b"x" * 10]) as port,
        pytest.raises(RegistryProtocolError, match="announces 5000 bytes, over its limit of 100"),
    ):
        transport(limits=(("tags", 100),)).send(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )


def test_a_dripping_answer_is_stopped_at_the_request_deadline_and_says_so() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        while not stop.is_set():
            conn.sendall(b"x")
            stop.wait(0.05)
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    port = server.getsockname()[1]
    try:
        with pytest.raises(RegistryUnavailable) as err:
            transport(timeout=5, request_deadline=0.3, command_deadline=60, retries=0).send(
                "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
            )
    finally:
        stop.set()
        server.close()
    assert err.value.what.startswith(
        f"127.0.0.1:{port}: the answer to http://127.0.0.1:{port}/v2/x/tags/list was still "
        "arriving after 0.3 s ("
    )
    assert err.value.what.endswith(" bytes so far); gave up")
    assert err.value.hint == (
        "the registry or a proxy on the way is stalling; raise [registry] request-deadline or "
        "command-deadline (ROCMENV_REGISTRY_DEADLINE) if it is only slow"
    )


def test_every_round_trip_is_counted_by_its_kind() -> None:
    with serve([response(b"{}"), response(b"{}")]) as port:
        t = transport()
        t.send("GET", f"http://127.0.0.1:{port}/v2/", {}, "ping")
        t.send("HEAD", f"http://127.0.0.1:{port}/v2/", {}, "manifest-head")
    assert dict(t.stats.by_kind) == {"ping": 1, "manifest-head": 1}


def test_closing_an_unused_transport_leaves_other_transports_dials_alone() -> None:
    from rocmenv.registry import connect

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    key = ("127.0.0.1", listener.getsockname()[1])
    try:
        connect.predial(*key, 1.0)
        transport().close()  # made no request: dialled nothing, discards nothing
        assert key in connect._dials
        used = transport()
        used._dialled = True  # as after dialling ahead for its first request
        used.close()
        assert key not in connect._dials
    finally:
        connect.discard_predials()
        listener.close()


# -- the retry policy ---------------------------------------------------------------------------


def scripted(*answers: tuple[int, dict[str, str], bytes]) -> ScriptedServer:
    """Each request gets the next answer; the last one repeats."""
    queue = list(answers)

    def answer(req: Request) -> Answer:
        status, headers, body = queue.pop(0) if len(queue) > 1 else queue[0]
        return Answer(status, headers, body)

    return ScriptedServer(answer)


def waiting(slept: list[float], **settings: object) -> Transport:
    return Transport(RegistrySettings(**settings), {"ROCMENV_REGISTRY_BACKOFF": "1"}, slept.append)  # type: ignore[arg-type]


def test_failures_are_retried_with_exponential_backoff_and_jitter_then_named() -> None:
    slept: list[float] = []
    with scripted((503, {}, b"busy")) as srv, pytest.raises(RegistryUnavailable) as err:
        waiting(slept, retries=4).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert len(srv.requests) == 5
    assert [0.5 * 2**i <= w <= 2**i for i, w in enumerate(slept)] == [True] * 4
    assert err.value.what == (
        f"GET http://{srv.host}/v2/ failed after 5 attempts: HTTP 503 from {srv.host}"
    )
    assert err.value.hint == (
        "check that the registry is up and reachable (network, proxy, firewall); "
        "set [registry] timeout/retries or ROCMENV_REGISTRY_TIMEOUT to adjust"
    )


def test_a_backoff_is_capped_at_30_s_and_by_the_command_s_deadline() -> None:
    slept: list[float] = []
    t = Transport(RegistrySettings(retries=8), {"ROCMENV_REGISTRY_BACKOFF": "10"}, slept.append)
    with scripted((502, {}, b"")) as srv, pytest.raises(RegistryUnavailable):
        t.send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert max(slept) <= 30 and min(slept[2:]) >= 15  # 10 s, then 20 s, then the cap
    slept.clear()
    short = Transport(RegistrySettings(retries=2, command_deadline=3), {}, slept.append)
    with scripted((500, {}, b"")) as srv, pytest.raises(RegistryUnavailable):
        short.send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert len(slept) == 2 and all(w <= 3 for w in slept)


def test_retry_after_is_honoured_and_a_wait_beyond_120_s_fails_at_once() -> None:
    slept: list[float] = []
    with scripted((429, {"Retry-After": "7"}, b""), (200, {}, b"ok")) as srv:
        resp = waiting(slept).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert (resp.status, slept) == (200, [7.0])
    with (
        scripted((503, {"Retry-After": "121"}, b"")) as srv,
        pytest.raises(RegistryUnavailable) as err,
    ):
        waiting(slept).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert len(srv.requests) == 1
    assert err.value.what == (
        f"http://{srv.host}/v2/: rate limited (HTTP 503); the registry asks to wait 121 s"
    )
    assert err.value.hint == (
        "try again later, authenticate (`docker login`) for higher limits, or configure a mirror"
    )
    with scripted((429, {"Retry-After": "120"}, b""), (200, {}, b"")) as srv:
        waiting(slept).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert slept[-1] == 120.0


def test_a_rate_limit_that_outlives_the_retries_says_so() -> None:
    slept: list[float] = []
    with (
        scripted((429, {"Retry-After": "1"}, b"")) as srv,
        pytest.raises(RegistryUnavailable) as err,
    ):
        waiting(slept, retries=2).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert err.value.what == (
        f"http://{srv.host}/v2/: still rate limited (HTTP 429) after 3 attempts"
    )
    assert err.value.hint == (
        "try again later, authenticate (`docker login`) for higher limits, or configure a "
        "mirror ([registry] mirrors)"
    )
    assert slept == [1.0, 1.0]


def test_statuses_named_not_to_retry_are_returned_at_once() -> None:
    with scripted((429, {}, b"")) as srv:
        resp = waiting([]).send_with_retries(
            "GET", f"http://{srv.host}/v2/", {}, "token", no_retry=(429,)
        )
    assert resp.status == 429 and len(srv.requests) == 1


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_each_transient_status_is_retried(status: int) -> None:
    with scripted((status, {}, b""), (200, {}, b"ok")) as srv:
        resp = transport(retries=1).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert resp.status == 200 and len(srv.requests) == 2


@pytest.mark.parametrize("status", [401, 404, 501])
def test_other_statuses_are_answers_not_retried(status: int) -> None:
    with scripted((status, {}, b"")) as srv:
        resp = transport(retries=3).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert resp.status == status and len(srv.requests) == 1


def test_an_insecure_registry_without_tls_is_spoken_to_over_plain_http() -> None:
    with scripted((200, {}, b"plain")) as srv:
        t = transport(insecure=(srv.host,), retries=0)
        assert t.scheme_for(srv.host) == "https"
        resp = t.send_with_retries("GET", f"https://{srv.host}/v2/", {}, "ping")
        assert (resp.status, resp.body, resp.url) == (200, b"plain", f"http://{srv.host}/v2/")
        assert t.scheme_for(srv.host) == "http"


# -- what is sent, what is kept -----------------------------------------------------------------


def test_a_request_says_who_it_is_asks_for_gzip_and_keeps_the_ratelimit() -> None:
    headers = {"RateLimit-Limit": "100;w=21600", "RateLimit-Remaining": "7;w=21600"}
    with scripted((200, headers, b"")) as srv:
        t = transport()
        t.send(
            "GET", f"http://{srv.host}/v2/", {"Accept": "x/y"}, "ping", registry_host="reg.example"
        )
    (req,) = srv.requests
    assert req.headers["user-agent"] == "rocmenv (+https://github.com/rocmenv)"
    assert req.headers["accept-encoding"] == "gzip" and req.headers["accept"] == "x/y"
    assert "x-rocmenv-deadline" not in req.headers
    limit = t.ratelimits["reg.example"]
    assert (limit.limit, limit.remaining, limit.window) == (100, 7, 21600)


def test_a_command_past_its_deadline_sends_nothing_more() -> None:
    now = [0.0]
    t = Transport(RegistrySettings(command_deadline=10), {}, lambda s: None, clock=lambda: now[0])
    now[0] = 10.0
    with scripted((200, {}, b"")) as srv, pytest.raises(RegistryUnavailable) as err:
        t.send("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert srv.requests == []
    assert err.value.what == (
        "the registry requests of this command took longer than its deadline (10 s); "
        f"stopped before GET http://{srv.host}/v2/"
    )
    assert err.value.hint == (
        "the registry or a proxy on the way is too slow or stalling; raise [registry] "
        "command-deadline or ROCMENV_REGISTRY_DEADLINE if it is just slow"
    )


@pytest.mark.parametrize(
    ("kind", "content_type", "status", "cap"),
    [
        ("manifest-get", "application/vnd.oci.image.manifest.v1+json", 200, "manifest"),
        ("manifest-get", "application/vnd.oci.image.index.v1+json; x=1", 200, "index"),
        ("manifest-get", "application/vnd.docker.distribution.manifest.list.v2+json", 200, "index"),
        ("token", "application/json", 200, "token"),
        ("blob", "application/json", 200, "config"),
        ("tags", "application/json", 404, "error"),
        ("ping", "application/json", 200, "error"),
    ],
)
def test_each_answer_is_capped_by_its_kind(
    kind: str, content_type: str, status: int, cap: str
) -> None:
    body = b"x" * 101
    with scripted((status, {"Content-Type": content_type}, body)) as srv:
        t = transport(limits=((cap, 100),))
        with pytest.raises(RegistryProtocolError, match=f"the {cap} response to .* announces 101"):
            t.send("GET", f"http://{srv.host}/v2/", {}, kind)
        ok = transport(limits=((cap, 101),)).send("GET", f"http://{srv.host}/v2/", {}, kind)
    assert ok.body == body


def test_a_truncated_answer_is_retried_then_named_with_what_arrived() -> None:
    with (
        scripted((200, {"Content-Length": "50"}, b"x" * 20)) as srv,
        pytest.raises(RegistryUnavailable) as err,
    ):
        transport(retries=1).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "tags")
    assert len(srv.requests) == 2
    assert err.value.what.endswith(
        f"{srv.host}: the answer was truncated (20 bytes received, 50 announced)"
    )


def test_a_refused_connection_is_named_as_such() -> None:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    try:
        with pytest.raises(RegistryUnavailable) as err:
            transport(retries=0).send_with_retries(
                "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
            )
    finally:
        refused.close()
    assert err.value.what == (
        f"GET http://127.0.0.1:{port}/v2/ failed after 1 attempts: 127.0.0.1:{port}: cannot "
        f"connect: [Errno 111] Connection refused (127.0.0.1 port {port})"
    )


def test_a_server_that_never_answers_is_named_by_the_read_timeout() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        with pytest.raises(RegistryUnavailable) as err:
            transport(retries=0, timeout=0.2).send_with_retries(
                "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
            )
    finally:
        server.close()
    assert err.value.what.endswith(f"127.0.0.1:{port}: no answer within 0.2 s")


def test_a_dead_proxy_is_named_without_its_password() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    env = {"ROCMENV_REGISTRY_BACKOFF": "0", "HTTPS_PROXY": f"http://u:pr0xy-pw@127.0.0.1:{port}"}
    try:
        with pytest.raises(RegistryUnavailable) as err:
            Transport(RegistrySettings(retries=0), env, lambda s: None).send_with_retries(
                "GET", "https://reg.example/v2/", {}, "ping"
            )
    finally:
        closed.close()
    prefix = f"reg.example: through proxy http://***@127.0.0.1:{port}: "
    assert prefix in err.value.what and "pr0xy-pw" not in str(err.value)
    assert "Connection refused" in err.value.what.split(prefix, 1)[1]  # and why it is dead


# -- where and how ------------------------------------------------------------------------------


def test_loopback_registries_speak_plain_http_unless_they_have_a_certs_d(tmp_path: Path) -> None:
    (tmp_path / "127.0.0.1:5443").mkdir()
    env = {"ROCMENV_CERTS_D": str(tmp_path)}
    t = Transport(RegistrySettings(insecure=("localhost:5000",)), env)
    assert t.scheme_for("127.0.0.1:5000") == "http"
    assert t.scheme_for("localhost") == "http"
    assert t.scheme_for("127.0.0.1:5443") == "https"
    assert t.scheme_for("localhost:5000") == "https"  # insecure: HTTPS first, as Docker
    assert t.scheme_for("reg.example") == "https"
    assert t.is_insecure("localhost:5000") and not t.is_insecure("localhost")


@pytest.mark.parametrize(("value", "backoff"), [(None, 0.5), ("", 0.5), ("0", 0.0), ("60", 60.0)])
def test_the_backoff_comes_from_the_environment_within_0_to_60_s(
    value: str | None, backoff: float
) -> None:
    env = {} if value is None else {"ROCMENV_REGISTRY_BACKOFF": value}
    assert Transport(RegistrySettings(), env)._backoff == backoff


def test_a_bad_backoff_names_the_value_and_the_range() -> None:
    from rocmenv.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        Transport(RegistrySettings(), {"ROCMENV_REGISTRY_BACKOFF": "60.5"})
    assert (
        err.value.what == "ROCMENV_REGISTRY_BACKOFF='60.5' is not a number of seconds from 0 to 60"
    )


def test_proxy_credentials_go_in_a_header_unquoted_and_are_redacted() -> None:
    with scripted((200, {}, b"via proxy")) as proxy:
        word = uuid.uuid4().hex  # new to this process
        env = {"HTTP_PROXY": f"http://us%40er:p%3A{word}@{proxy.host}"}
        resp = Transport(RegistrySettings(retries=0), env).send(
            "GET", "http://reg.example/v2/", {}, "ping"
        )
    (req,) = proxy.requests
    assert resp.body == b"via proxy" and req.path == "http://reg.example/v2/"
    expected = base64.b64encode(f"us@er:p:{word}".encode()).decode()
    assert req.headers["proxy-authorization"] == f"Basic {expected}"
    assert word not in redact(f"the proxy said: p%3A{word}")  # as the URL spells it
    assert word not in redact(f"the proxy said: p:{word}")  # and as it was sent


def test_a_proxy_url_keeps_its_host_and_port_and_drops_its_credentials() -> None:
    t = Transport(RegistrySettings(), {})
    v6 = t._manager("http://u:pw-v6-secret@[::1]:3128")
    assert str(v6.proxy) == "http://[::1]:3128"
    bare = t._manager("http://u@proxy.example")
    assert str(bare.proxy) == "http://proxy.example:80"
    assert bare.proxy_headers["proxy-authorization"] == (  # type: ignore[attr-defined]
        "Basic " + base64.b64encode(b"u:").decode()
    )
    plain = t._manager(None)
    assert t._manager(None) is plain and t._manager("http://u@proxy.example") is bare


def test_one_tls_context_per_set_of_trust_inputs() -> None:
    t = Transport(RegistrySettings(), {})
    a = t._ssl_context("a.example", "a.example", True)
    assert t._ssl_context("b.example", "b.example", True) is a
    unverified = t._ssl_context("a.example", "a.example", False)
    assert unverified is not a and t._ssl_context("c.example", "c.example", False) is unverified


def _write_ca(path: Path, name: str) -> None:
    """A self-signed CA certificate named ``name`` (PEM) at ``path``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_a_realm_s_connection_trusts_its_registry_s_certs_d_too(tmp_path: Path) -> None:
    """The token realm (or blob storage) of a registry with its own CA is verified with it, as
    Docker's one transport per registry does."""
    (tmp_path / "reg.example").mkdir()
    _write_ca(tmp_path / "reg.example" / "ca.crt", "rocmenv test registry CA")
    t = Transport(RegistrySettings(), {"ROCMENV_CERTS_D": str(tmp_path)})
    for_registry = t._ssl_context("auth.example", "reg.example", True)
    names = [
        dict(x[0] for x in c["subject"]).get("commonName")  # type: ignore[misc]
        for c in for_registry.get_ca_certs()
    ]
    assert "rocmenv test registry CA" in names
    alone = t._ssl_context("auth.example", "auth.example", True)
    assert "rocmenv test registry CA" not in [
        dict(x[0] for x in c["subject"]).get("commonName")  # type: ignore[misc]
        for c in alone.get_ca_certs()
    ]


def test_a_verified_context_checks_the_certificate_an_insecure_one_does_not() -> None:
    import ssl

    t = Transport(RegistrySettings(), {})
    verified = t._ssl_context("a.example", "a.example", True)
    assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname
    assert t._ssl_context("b.example", "b.example", False).verify_mode == ssl.CERT_NONE


def test_a_streamed_answer_s_head_may_come_after_the_request_deadline() -> None:
    """A layer's CDN may be slow to start: the head of a streamed GET is bounded by the read
    timeout and the command's deadline, not by ``request-deadline``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def late() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        threading.Event().wait(0.6)
        conn.sendall(response(b"layer"))
        conn.close()

    threading.Thread(target=late, daemon=True).start()
    t = transport(retries=0, timeout=5, request_deadline=0.2, command_deadline=30)
    try:
        stream = t.stream_with_retries(
            f"http://127.0.0.1:{server.getsockname()[1]}/v2/x/blobs/sha256:00", {}, "blob-stream"
        )
        assert stream.status == 200 and b"".join(stream.chunks()) == b"layer"
    finally:
        server.close()


def test_an_unresolved_name_without_a_resolver_code_keeps_its_whole_reason() -> None:
    from rocmenv.registry.failures import unresolved as _unresolved

    err = _unresolved("reg.example", OSError("no such host"))
    assert err.what == "reg.example: the name does not resolve (no such host)"
    coded = _unresolved("reg.example", OSError("[Errno -2] Name or service not known"))
    assert coded.what == "reg.example: the name does not resolve (Name or service not known)"


def test_a_streamed_get_that_outlives_its_retries_is_named_as_a_get() -> None:
    with serve([response(b"busy", "503 Service Unavailable")] * 2) as port:
        url = f"http://127.0.0.1:{port}/v2/x/blobs/sha256:00"
        with pytest.raises(RegistryUnavailable) as err:
            transport(retries=1).stream_with_retries(url, {}, "blob-stream")
    assert err.value.what == (f"GET {url} failed after 2 attempts: HTTP 503 from 127.0.0.1:{port}")


def test_only_verified_https_without_a_proxy_is_dialled_ahead() -> None:
    """Dialling ahead takes the first connection's TCP (and TLS) off the import's time; an
    insecure registry or a plain-HTTP one is left to urllib3 (it may fall back, or not use TLS)."""
    from rocmenv.registry import connect

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    here = f"127.0.0.1:{port}"
    t = Transport(RegistrySettings(insecure=("insecure.example",)), {})
    other = Transport(RegistrySettings(insecure=(here,)), {})
    try:
        t.dial_ahead(f"http://{here}/v2/")
        t.dial_ahead(f"https://{here}/v2/", registry_host="insecure.example")
        other.dial_ahead(f"https://{here}/v2/", registry_host="reg.example")
        t.dial_ahead("https:///v2/")
        assert connect._dials == {}
        t.dial_ahead(f"https://{here}/v2/", registry_host="reg.example")
        t.dial_ahead("https://localhost/v2/")
        assert set(connect._dials) == {("127.0.0.1", port), ("localhost", 443)}
        other.close()  # never dialled: leaves the dials alone
        assert set(connect._dials) == {("127.0.0.1", port), ("localhost", 443)}
        t.close()
        assert connect._dials == {}
    finally:
        connect.discard_predials()
        server.close()


@pytest.mark.parametrize(("method", "status"), [("HEAD", 200), ("GET", 204), ("GET", 304)])
def test_an_answer_without_a_body_is_not_held_to_its_content_length(
    method: str, status: int
) -> None:
    """A HEAD's ``Content-Length`` is the manifest's size, not a body to refuse or wait for;
    204 and 304 answers have none either."""
    big = {"Content-Length": "5000", "Content-Type": "application/json"}
    with scripted((status, big, b"")) as srv:
        resp = transport(limits=(("manifest", 100), ("error", 100))).send(
            method, f"http://{srv.host}/v2/x/manifests/1", {}, "manifest-get"
        )
    assert (resp.status, resp.body, resp.headers["content-length"]) == (status, b"", "5000")


@pytest.mark.parametrize(("draw", "factor"), [(0.0, 0.5), (1.0, 1.0)])
def test_the_jitter_spans_half_to_the_whole_backoff_and_the_cap_is_30_s(
    monkeypatch: pytest.MonkeyPatch, draw: float, factor: float
) -> None:
    import random

    monkeypatch.setattr(random, "random", lambda: draw)
    slept: list[float] = []
    with scripted((503, {}, b"")) as srv, pytest.raises(RegistryUnavailable):
        waiting(slept, retries=4).send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert slept == [factor * 2**i for i in range(4)]
    slept.clear()
    t = Transport(RegistrySettings(retries=3), {"ROCMENV_REGISTRY_BACKOFF": "10"}, slept.append)
    with scripted((503, {}, b"")) as srv, pytest.raises(RegistryUnavailable):
        t.send_with_retries("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert slept == [factor * 10, factor * 20, factor * 30]


def test_a_retried_request_sends_its_body_counts_its_kind_and_keeps_its_registry_s_ratelimit() -> (
    None
):
    headers = {"RateLimit-Limit": "100;w=60", "RateLimit-Remaining": "99;w=60"}
    with scripted((200, headers, b"{}")) as srv:
        t = transport()
        t.send_with_retries(
            "POST", f"http://{srv.host}/token", {}, "token", registry_host="reg.example",
            body=b"grant_type=refresh_token",
        )  # fmt: skip
    (req,) = srv.requests
    assert req.body == b"grant_type=refresh_token"
    assert t.stats.by_kind == {"token": 1}
    assert list(t.ratelimits) == ["reg.example"]


def test_the_fall_back_to_plain_http_keeps_the_whole_url() -> None:
    """Only the scheme changes, also when the query holds another URL."""
    with scripted((200, {}, b"plain")) as srv:
        t = transport(insecure=(srv.host,), retries=0)
        url = f"https://{srv.host}/v2/x/tags/list?last=https://y/z&n=2"
        resp = t.send_with_retries("GET", url, {}, "tags")
    assert resp.url == f"http://{srv.host}/v2/x/tags/list?last=https://y/z&n=2"
    assert [r.path for r in srv.requests][-1] == "/v2/x/tags/list?last=https://y/z&n=2"


def test_no_backoff_is_slept_once_the_command_s_deadline_has_passed() -> None:
    import time

    late, slept = [0.0], list[float]()  # the clock runs as the connection's does, plus ``late``

    def busy_then_late(req: Request) -> Answer:
        late[0] = 11.0  # the answer came after the command's deadline (10 s)
        return Answer(503, {}, b"")

    t = Transport(
        RegistrySettings(command_deadline=10, retries=2),
        {},
        slept.append,
        clock=lambda: time.monotonic() + late[0],
    )
    with ScriptedServer(busy_then_late) as srv, pytest.raises(RegistryUnavailable) as err:
        t.send_with_retries("HEAD", f"http://{srv.host}/v2/", {}, "ping")  # no body to wait for
    assert slept == [0.0] and len(srv.requests) == 1
    assert "took longer than its deadline (10 s)" in err.value.what


def test_only_the_first_request_dials_ahead_within_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rocmenv.registry import connect

    dialled: list[tuple[str, int, float | None]] = []
    real = connect.predial

    def recording(host: str, port: int, timeout: float | None, tls: object = None) -> None:
        dialled.append((host, port, timeout))
        real(host, port, timeout, tls)  # type: ignore[arg-type]

    monkeypatch.setattr(connect, "predial", recording)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    t = transport(retries=0, timeout=0.3)
    try:
        for _ in range(2):  # a TCP server that never speaks TLS: each request times out
            with pytest.raises(RegistryUnavailable):
                t.send_with_retries("GET", f"https://127.0.0.1:{port}/v2/", {}, "ping")
    finally:
        t.close()
        connect.discard_predials()
        server.close()
    assert dialled == [("127.0.0.1", port, 0.3)]


def test_a_300_answer_is_capped_as_an_error_a_manifest_without_a_type_as_a_manifest() -> None:
    with scripted((300, {}, b"x" * 50)) as srv:
        t = transport(limits=(("tags", 1000), ("error", 10)))
        with pytest.raises(RegistryProtocolError, match=r"the error response to .* announces 50"):
            t.send("GET", f"http://{srv.host}/v2/x/tags/list", {}, "tags")
    with scripted((200, {}, b"{}")) as srv:  # no Content-Type at all
        resp = transport(limits=(("manifest", 10),)).send(
            "GET", f"http://{srv.host}/v2/x/manifests/1", {}, "manifest-get"
        )
    assert resp.body == b"{}"


def test_a_chunked_answer_without_a_length_is_read_and_an_announced_one_refused_by_name() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    )
    with serve([chunked]) as port:
        resp = transport(limits=(("tags", 10),)).send(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )
    assert resp.body == b"{}"
    with scripted((200, {}, b"x" * 11)) as srv, pytest.raises(RegistryProtocolError) as err:
        transport(limits=(("tags", 10),)).send("GET", f"http://{srv.host}/v2/t", {}, "tags")
    assert err.value.what == (
        f"{srv.host}: the tags response to http://{srv.host}/v2/t announces 11 bytes, over its "
        "limit of 10 bytes"
    )


def test_each_read_waits_only_for_what_is_left_of_the_deadline() -> None:
    """After a chunk, the next read's timeout is the time left before the deadline, not the
    whole read timeout: a stall just before the deadline is named at the deadline."""
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    late, stop = threading.Event(), threading.Event()

    def one_byte_then_stall() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        stop.wait(0.3)
        late.set()  # from now on the transport's clock reads ~0.2 s before the deadline
        conn.sendall(b"x")
        stop.wait(30)
        conn.close()

    threading.Thread(target=one_byte_then_stall, daemon=True).start()
    port = server.getsockname()[1]
    settings = RegistrySettings(timeout=5, request_deadline=30, command_deadline=60, retries=0)

    def clock() -> float:
        return time.monotonic() + (29.5 if late.is_set() else 0.0)

    t = Transport(settings, {}, lambda s: None, clock=clock)
    start = time.monotonic()
    try:
        with pytest.raises(RegistryUnavailable, match=r"\(1 bytes (received|so far)\)"):
            t.send_with_retries("GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags")
    finally:
        stop.set()
        server.close()
    assert time.monotonic() - start < 3  # ~0.5 s; the whole read timeout would be 5 s more


@contextlib.contextmanager
def stalling(head: bytes = b"") -> Iterator[int]:
    """A loopback port whose first connection gets ``head`` once its request is read (none:
    not even that), then nothing more until the test is over."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def run() -> None:
        conn, _ = server.accept()
        if head:
            conn.recv(4096)
            conn.sendall(head)
        stop.wait(30)
        conn.close()

    threading.Thread(target=run, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()


HEAD_OF_10 = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"

# -- issue 21: the transport's mutants that survived its whole-module run ----------------------


def _clocked(times: list[float], **settings: object) -> Transport:
    """A transport whose clock reads ``times`` (seconds from now) one call after another,
    the last one staying: its construction, the request's start, then one read of the body
    per call. From now: the connection holds the request to its deadline on the real clock."""
    import time

    base = time.monotonic()
    left = list(times)

    def clock() -> float:
        return base + (left.pop(0) if len(left) > 1 else left[0])

    return Transport(
        RegistrySettings(**settings),  # type: ignore[arg-type]
        {"ROCMENV_REGISTRY_BACKOFF": "0"},
        lambda s: None,
        clock=clock,
    )


def test_a_deadline_that_passes_between_two_reads_is_named_with_what_arrived() -> None:
    """The check before each read, not a read's timeout: the first read gets the body, the
    clock then reads past the deadline."""
    with scripted((200, {}, b"abc")) as srv, pytest.raises(RegistryUnavailable) as err:
        _clocked([0.0, 0.0, 0.0, 1000.0], request_deadline=30, retries=0).send(
            "GET", f"http://{srv.host}/v2/x/tags/list", {}, "tags"
        )
    assert err.value.what == (
        f"{srv.host}: the answer to http://{srv.host}/v2/x/tags/list was still arriving after "
        "30 s (3 bytes so far); gave up"
    )


def test_a_read_is_not_begun_at_the_deadline_itself_but_is_just_before_it() -> None:
    with scripted((200, {}, b"abc")) as srv:
        url = f"http://{srv.host}/v2/x/tags/list"
        with pytest.raises(RegistryUnavailable, match=r"\(0 bytes so far\); gave up"):
            _clocked([0.0, 0.0, 30.0], request_deadline=30, retries=0).send("GET", url, {}, "tags")
        resp = _clocked([0.0, 0.0, 29.5], request_deadline=30, retries=0).send(
            "GET", url, {}, "tags"
        )
    assert resp.body == b"abc"


def test_a_stall_well_before_the_deadline_is_retried_after_what_is_left_not_a_1_s_floor() -> None:
    """0.2 s before the deadline, a body that stalls is given up on after those 0.2 s (the
    read timeout's floor is 10 ms, for the last instants), and as a stall to retry: the
    deadline is not reached yet."""
    import time

    t = _clocked([0.0, 0.0, 29.8], timeout=5, request_deadline=30, retries=0)
    start = time.monotonic()
    with stalling(HEAD_OF_10) as port, pytest.raises(RegistryUnavailable) as err:
        t.send_with_retries("GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags")
    took = time.monotonic() - start
    assert err.value.what == (
        f"GET http://127.0.0.1:{port}/v2/x/tags/list failed after 1 attempts: "
        f"127.0.0.1:{port}: the answer stalled (0 bytes received)"
    )
    assert took < 0.9, took  # 0.2 s and the connection; a 1 s floor would be over 1 s


def test_an_answer_without_a_length_that_runs_over_its_cap_is_named_by_what_it_sent() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"c\r\n0123456789ab\r\n0\r\n\r\n"
    )
    with serve([chunked]) as port, pytest.raises(RegistryProtocolError) as err:
        transport(limits=(("tags", 10),), retries=0).send(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )
    assert err.value.what == (
        f"127.0.0.1:{port}: the tags response to http://127.0.0.1:{port}/v2/x/tags/list sent "
        "more than its limit of 10 bytes"
    )


def test_a_truncated_answer_without_a_length_says_more_was_announced() -> None:
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n100\r\nabc"
    with serve([cut]) as port, pytest.raises(RegistryUnavailable) as err:
        transport(retries=0).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )
    assert err.value.what.endswith(
        f"127.0.0.1:{port}: the answer was truncated (3 bytes received, more announced)"
    )


def test_an_answer_that_breaks_off_says_how() -> None:
    """Not a truncation: a gzip body that does not decode."""
    bad = response(b"not gzip at all", extra="Content-Encoding: gzip\r\n")
    with serve([bad]) as port, pytest.raises(RegistryUnavailable) as err:
        transport(retries=0).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )
    prefix = (
        f"GET http://127.0.0.1:{port}/v2/x/tags/list failed after 1 attempts: "
        f"127.0.0.1:{port}: the answer broke off: "
    )
    assert err.value.what.startswith(prefix)
    assert "content-encoding: gzip, but failed to decode it" in err.value.what[len(prefix) :]


def test_a_head_that_never_comes_is_waited_for_until_the_request_deadline_not_the_timeout() -> None:
    import time

    start = time.monotonic()
    with stalling() as port, pytest.raises(RegistryUnavailable) as err:
        transport(timeout=5, request_deadline=0.3, retries=0).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/x/tags/list", {}, "tags"
        )
    assert "was still arriving after 0.3 s (0 bytes so far)" in err.value.what
    assert time.monotonic() - start < 3  # 0.3 s; the read timeout would be 5


@contextlib.contextmanager
def full_backlog() -> Iterator[int]:
    """A loopback port whose listen queue is full: a connection is never accepted, its SYN
    goes unanswered (a firewall that drops, a host gone away)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        server.close()


def test_a_connection_that_is_never_answered_is_named_by_the_connect_timeout() -> None:
    """Not urllib3's text (its connection object's repr and the address)."""
    with full_backlog() as port, pytest.raises(RegistryUnavailable) as err:
        transport(timeout=0.3, retries=0).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
        )
    assert err.value.what == (
        f"GET http://127.0.0.1:{port}/v2/ failed after 1 attempts: 127.0.0.1:{port}: cannot "
        "connect: no connection within 0.3 s"
    )


def test_tls_spoken_to_a_plain_http_server_is_a_tls_error_not_a_certificate_nor_plain_http() -> (
    None
):
    """Only an insecure registry falls back to plain HTTP; for the others the handshake's
    failure is named as it is (retried: a proxy or a load balancer may be at fault)."""
    with scripted((200, {}, b"plain")) as srv, pytest.raises(RegistryUnavailable) as err:
        transport(retries=0).send_with_retries("GET", f"https://{srv.host}/v2/", {}, "ping")
    assert err.value.what.startswith(
        f"GET https://{srv.host}/v2/ failed after 1 attempts: {srv.host}: TLS error: "
        "[SSL: WRONG_VERSION_NUMBER] wrong version number"
    )
    assert srv.requests == []  # nothing was sent over plain HTTP


def test_a_proxy_whose_name_does_not_resolve_is_named_without_its_password() -> None:
    env = {"ROCMENV_REGISTRY_BACKOFF": "0", "HTTPS_PROXY": "http://u:pr0xy-pw@nosuch.invalid:3128"}
    slept: list[float] = []
    with pytest.raises(RegistryUnavailable) as err:
        Transport(RegistrySettings(retries=3), env, slept.append).send_with_retries(
            "GET", "https://reg.example/v2/", {}, "ping"
        )
    assert err.value.what.startswith(
        "proxy http://***@nosuch.invalid:3128: the name does not resolve ("
    )
    assert err.value.what != "proxy http://***@nosuch.invalid:3128: the name does not resolve ()"
    assert "None" not in err.value.what and "pr0xy-pw" not in str(err.value)
    assert slept == []  # not retried, as a registry's own name


def _closing_server(answer: bytes | None) -> tuple[socket.socket, int]:
    """A loopback server that reads one request, then sends ``answer`` (None: nothing) and
    hangs up."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def run() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        if answer is not None:
            conn.sendall(answer)
        conn.close()

    threading.Thread(target=run, daemon=True).start()
    return server, server.getsockname()[1]


def test_a_server_that_hangs_up_without_answering_is_retried_and_named() -> None:
    server, port = _closing_server(None)
    try:
        with pytest.raises(RegistryUnavailable) as err:
            _clocked([0.0], request_deadline=30, retries=0).send_with_retries(
                "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
            )
    finally:
        server.close()
    assert err.value.what == (
        f"GET http://127.0.0.1:{port}/v2/ failed after 1 attempts: 127.0.0.1:{port}: "
        "('Connection aborted.', RemoteDisconnected('Remote end closed connection without "
        "response'))"
    )


def test_a_hang_up_at_the_deadline_is_the_stall_it_ends() -> None:
    """The request's deadline has come when the server hangs up: named as a stall, at once."""
    server, port = _closing_server(None)
    try:
        with pytest.raises(RegistryUnavailable) as err:
            _clocked([0.0, 0.0, 1000.0], request_deadline=30, retries=3).send_with_retries(
                "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
            )
    finally:
        server.close()
    assert err.value.what == (
        f"127.0.0.1:{port}: the answer to http://127.0.0.1:{port}/v2/ was still arriving after "
        "30 s (0 bytes so far); gave up"
    )


@pytest.mark.parametrize(
    ("later", "stalled"),
    [(0.0, False), (29.5, False), (1000.0, True)],
    ids=["long-before", "half-a-second-before", "after"],
)
def test_a_head_not_come_within_the_read_timeout_is_retried_unless_the_deadline_is_here(
    later: float, stalled: bool
) -> None:
    """The clock reads ``later`` when the read times out (0.2 s): before the request's
    deadline the server is slow (retried, named by the timeout), at it the answer stalled."""
    with stalling() as port, pytest.raises(RegistryUnavailable) as err:
        _clocked([0.0, 0.0, later], timeout=0.2, request_deadline=30, retries=0).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
        )
    if stalled:
        assert err.value.what == (
            f"127.0.0.1:{port}: the answer to http://127.0.0.1:{port}/v2/ was still arriving "
            "after 30 s (0 bytes so far); gave up"
        )
    else:
        assert err.value.what == (
            f"GET http://127.0.0.1:{port}/v2/ failed after 1 attempts: 127.0.0.1:{port}: no "
            "answer within 0.2 s"
        )


def test_a_redirect_is_returned_to_the_caller_not_followed() -> None:
    """The client decides where a redirect may go, and with which credentials."""
    with scripted((302, {"Location": "/elsewhere"}, b""), (200, {}, b"followed")) as srv:
        resp = transport(retries=0).send("GET", f"http://{srv.host}/v2/", {}, "ping")
    assert resp.status == 302 and [r.path for r in srv.requests] == ["/v2/"]


@pytest.mark.parametrize("insecure", [True, False], ids=["insecure", "secure"])
def test_only_an_insecure_registry_that_refuses_https_is_tried_over_plain_http(
    insecure: bool,
) -> None:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, not listening
    host = f"127.0.0.1:{refused.getsockname()[1]}"
    try:
        with pytest.raises(RegistryUnavailable) as err:
            transport(retries=0, insecure=(host,) if insecure else ()).send_with_retries(
                "GET", f"https://{host}/v2/", {}, "ping"
            )
    finally:
        refused.close()
    scheme = "http" if insecure else "https"  # Docker's order for an insecure registry
    assert err.value.what.startswith(f"GET {scheme}://{host}/v2/ failed after 1 attempts: ")
    assert "cannot connect: [Errno 111] Connection refused" in err.value.what


def test_an_insecure_registry_over_plain_http_that_refuses_is_not_tried_again() -> None:
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    host = f"127.0.0.1:{refused.getsockname()[1]}"
    try:
        with pytest.raises(RegistryUnavailable, match="cannot connect"):
            transport(retries=0, insecure=(host,)).send_with_retries(
                "GET", f"http://{host}/v2/", {}, "ping"
            )
    finally:
        refused.close()


def test_a_registry_name_that_does_not_resolve_is_named_with_the_resolver_s_reason() -> None:
    with pytest.raises(RegistryUnavailable) as err:
        transport(retries=3).send_with_retries("GET", "https://nosuch.invalid/v2/", {}, "ping")
    assert err.value.what.startswith("nosuch.invalid: the name does not resolve (")
    assert "None" not in err.value.what and not err.value.what.endswith("()")


def test_a_url_without_a_host_is_refused_by_name() -> None:
    with pytest.raises(RegistryUnavailable) as err:
        transport(retries=0).send_with_retries("GET", "http:///v2/", {}, "ping")
    assert err.value.what == "GET http:///v2/ failed after 1 attempts: : No host specified."


def test_a_hang_up_half_a_second_before_the_deadline_is_retried() -> None:
    server, port = _closing_server(None)
    try:
        with pytest.raises(RegistryUnavailable) as err:
            _clocked([0.0, 0.0, 29.5], request_deadline=30, retries=0).send_with_retries(
                "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
            )
    finally:
        server.close()
    assert "RemoteDisconnected" in err.value.what and "failed after 1 attempts" in err.value.what


def test_a_read_timeout_at_the_deadline_is_the_stall() -> None:
    with stalling() as port, pytest.raises(RegistryUnavailable) as err:
        _clocked([0.0, 0.0, 30.0], timeout=0.2, request_deadline=30, retries=0).send(
            "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
        )
    assert "was still arriving after 30 s (0 bytes so far)" in err.value.what


def test_a_body_that_stalls_into_the_deadline_is_the_stall_not_a_retry() -> None:
    """The last read (0.1 s left) times out; the clock then reads the deadline."""
    with stalling(HEAD_OF_10) as port, pytest.raises(RegistryUnavailable) as err:
        _clocked([0.0, 0.0, 29.9, 30.0], request_deadline=30, retries=3).send_with_retries(
            "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
        )
    assert err.value.what == (
        f"127.0.0.1:{port}: the answer to http://127.0.0.1:{port}/v2/ was still arriving after "
        "30 s (0 bytes so far); gave up"
    )
