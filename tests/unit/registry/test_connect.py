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


# -- dialled ahead (issue 20: the first connection overlaps urllib3's import) -----------------


def _accepted(server: socket.socket) -> list[socket.socket]:
    """Every connection the listening ``server`` has queued (none left after 0.3 s)."""
    out = []
    server.settimeout(0.3)
    with contextlib.suppress(TimeoutError):
        while True:
            out.append(server.accept()[0])
    return out


@contextlib.contextmanager
def listening() -> Iterator[tuple[socket.socket, int]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server, server.getsockname()[1]
    finally:
        server.close()


def test_the_first_connection_to_a_host_takes_the_socket_dialled_ahead_and_only_it() -> None:
    from rocmenv.registry.connect import pool_classes, predial

    https = pool_classes()["https"].ConnectionCls
    with listening() as (server, port):
        predial("127.0.0.1", port, 5.0)
        predial("127.0.0.1", port, 5.0)  # once per host and port
        first = https("127.0.0.1", port, timeout=5.0)._new_conn()
        second = https("127.0.0.1", port, timeout=5.0)._new_conn()
        peers = _accepted(server)
        try:
            assert len(peers) == 2  # the one dialled ahead, then a fresh one
            assert first.getsockname() == peers[0].getpeername()
            assert second.getsockname() == peers[1].getpeername()
            assert first.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # urllib3's option
            assert first.gettimeout() == 5.0
        finally:
            for s in (first, second, *peers):
                s.close()


def test_an_attempt_ahead_that_failed_is_the_connections_failure_not_a_second_try() -> None:
    from urllib3.exceptions import NewConnectionError

    from rocmenv.registry.connect import pool_classes, predial

    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, not listening: connection refused
    try:
        port = refused.getsockname()[1]
        predial("127.0.0.1", port, 5.0)
        with pytest.raises(NewConnectionError, match="refused"):
            pool_classes()["https"].ConnectionCls("127.0.0.1", port, timeout=5.0)._new_conn()
    finally:
        refused.close()


def test_a_socket_dialled_ahead_and_not_taken_is_closed_when_the_transport_closes() -> None:
    from rocmenv.registry import connect

    with listening() as (server, port):
        connect.predial("localhost.", port, 5.0)
        (peer,) = _accepted(server)
        try:
            connect.discard_predials()
            peer.settimeout(2)
            assert peer.recv(1) == b""  # closed by us
            assert connect._dials == {}
        finally:
            peer.close()


def test_a_first_request_through_a_proxy_is_not_dialled_ahead() -> None:
    from rocmenv.errors import RegistryUnavailable
    from rocmenv.registry import connect
    from rocmenv.registry.transport import Transport
    from rocmenv.settings.registry import RegistrySettings

    with listening() as (registry, port), listening() as (proxy, proxy_port):
        proxied = Transport(
            RegistrySettings(retries=0, timeout=1, proxy=f"http://127.0.0.1:{proxy_port}"),
            {"ROCMENV_REGISTRY_BACKOFF": "0"},
        )
        with pytest.raises(RegistryUnavailable):
            proxied.send_with_retries("GET", f"https://127.0.0.1:{port}/v2/", {}, "ping")
        assert connect._dials == {}
        assert _accepted(registry) == []  # never contacted directly
        for peer in _accepted(proxy):
            peer.close()
