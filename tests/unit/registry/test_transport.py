"""The urllib3 transport against one-shot loopback servers: gzip bodies, size caps on decoded
bytes (a gzip bomb), 408 retried."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
from collections.abc import Iterator

import pytest

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings


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


def transport(**settings: object) -> Transport:
    return Transport(
        RegistrySettings(**settings), {"ROCMENV_REGISTRY_BACKOFF": "0"}, lambda s: None
    )  # type: ignore[arg-type]


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
    from rocmenv.registry.transport import _unresolved

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
    from rocmenv.registry.transport import _short

    assert _short("x" * 200) == "x" * 200
    assert _short("x" * 201) == "x" * 200 + "…"
    assert _short("to https://user:hunter2-pw@r.example/") == "to https://***@r.example/"


def test_an_oversized_answer_names_its_kind_url_and_the_limit_to_raise() -> None:
    from rocmenv.registry.transport import _too_large

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
        used._first = False  # as after its first request
        used.close()
        assert key not in connect._dials
    finally:
        connect.discard_predials()
        listener.close()
