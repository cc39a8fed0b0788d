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
