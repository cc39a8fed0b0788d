"""Happy-eyeballs connection set-up (rocmenv.registry.connect), on real loopback sockets."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from rocmenv.registry.connect import interleave, race


@contextlib.contextmanager
def blackhole() -> Iterator[tuple[str, int]]:
    """A loopback port whose accept queue is full: further SYNs are dropped, connect() hangs
    (what a black-holed route looks like to the client)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    addr = server.getsockname()
    try:
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(addr)
            fillers.append(s)
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(addr)
        except TimeoutError:
            pass
        else:
            pytest.skip("this kernel does not drop SYNs to a full accept queue")
        finally:
            probe.close()
        yield addr
    finally:
        for s in fillers:
            s.close()
        server.close()


def info(addr: tuple[str, int]) -> tuple[int, int, int, str, tuple[str, int]]:
    return (socket.AF_INET, socket.SOCK_STREAM, 6, "", addr)


def test_a_black_holed_first_address_does_not_cost_the_connect_timeout() -> None:
    good = socket.socket()
    good.bind(("127.0.0.1", 0))
    good.listen(8)
    try:
        with blackhole() as dead:
            # tried one after another, the first address would eat the whole 3 s timeout
            sock = race([info(dead), info(good.getsockname())], timeout=3.0)
            assert sock.getpeername() == good.getsockname()
            sock.close()
    finally:
        good.close()


def test_all_addresses_refused_raises_the_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = s.getsockname()
    s.close()  # nothing listens there any more: connection refused
    with pytest.raises(OSError):
        race([info(addr)], timeout=2.0)


def test_families_are_interleaved_in_resolver_order() -> None:
    v6a, v6b = (socket.AF_INET6, 1, 6, "", ("::1", 1)), (socket.AF_INET6, 1, 6, "", ("::2", 1))
    v4a, v4b = (
        (socket.AF_INET, 1, 6, "", ("1.1.1.1", 1)),
        (socket.AF_INET, 1, 6, "", ("2.2.2.2", 1)),
    )
    assert interleave([v6a, v6b, v4a, v4b]) == [v6a, v4a, v6b, v4b]


def test_the_private_deadline_header_is_never_sent() -> None:
    import threading

    from rocmenv.registry.connect import DEADLINE_HEADER
    from rocmenv.registry.transport import Transport
    from rocmenv.settings.registry import RegistrySettings

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        seen.append(data)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        port = server.getsockname()[1]
        resp = Transport(RegistrySettings(), {}).send(
            "GET", f"http://127.0.0.1:{port}/v2/", {}, "ping"
        )
    finally:
        thread.join(5)
        server.close()
    assert resp.status == 200 and resp.body == b"{}"
    assert seen and DEADLINE_HEADER.lower().encode() not in seen[0].lower()
