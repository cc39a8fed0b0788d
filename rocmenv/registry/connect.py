"""Happy-eyeballs connection set-up for the registry transport (RFC 8305, simplified).

urllib3 tries a host's addresses one after another, each with the full connect timeout: a
black-holed IPv6 route costs the whole timeout per connection. Here the addresses are
interleaved by family (IPv6, IPv4, IPv6, …, in resolver order) and a new attempt starts every
:data:`ATTEMPT_DELAY` seconds while earlier ones are still pending; the first to connect wins,
the others are closed. The connect timeout bounds the whole race, not each address.

:func:`pool_classes` gives urllib3 connection pools whose connections connect this way.

**Dialled ahead** (:func:`predial`): a command's first registry request starts its TCP
connection (name resolution included) on a thread *before* urllib3 is imported — ~40 ms of
CPU that the connection's round trips now overlap; for HTTPS the thread also makes the TLS
handshake with the transport's own SSL context (``tls``: built there, verifying as urllib3
would), so the handshake's round trip and crypto overlap the import too. The first
connection urllib3 opens to that host and port takes the socket — a TLS one only when it
would wrap it with that same context for that same host name (the context then hands it
back, :class:`rocmenv.registry.tls.ClientContext`) — or the error the TCP attempt met, so
failures read as before; a handshake that failed is left for urllib3 to make (and report)
itself. Unused sockets are closed by :func:`discard_predials`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ATTEMPT_DELAY = 0.25  # RFC 8305's recommended "Connection Attempt Delay"
#: a request header the transport sets and the connection removes before sending: the
#: monotonic time by which the response head must have arrived
DEADLINE_HEADER = "X-Rocmenv-Deadline"


class _Dial:
    """One connection made ahead of its use, on a daemon thread."""

    def __init__(
        self, host: str, port: int, timeout: float | None, tls: Callable[[], Any] | None
    ) -> None:
        self.done = threading.Event()
        self.sock: socket.socket | None = None
        self.error: OSError | None = None
        self.context: Any = None  # the SSL context of a handshake made ahead
        self.taken = False
        threading.Thread(
            target=self._connect,
            args=(host, port, timeout, tls),
            name="rocmenv-predial",
            daemon=True,
        ).start()

    def _connect(
        self, host: str, port: int, timeout: float | None, tls: Callable[[], Any] | None
    ) -> None:
        try:
            self.sock = happy_connect(host, port, timeout, socket_options=NODELAY)
        except OSError as err:  # gaierror, TimeoutError, refused: told when the socket is taken
            self.error = err
            self.done.set()
            return
        if tls is not None:
            try:
                context = tls()
                self.sock = context.wrap_socket(self.sock, server_hostname=host)
                self.context = context
            except Exception:  # urllib3 makes the handshake again, and reports what it meets
                self.sock.close()
                self.sock = None
        self.done.set()

    def close(self) -> None:
        """Close the socket whenever the attempt ends (now, or later on its thread)."""
        if self.done.is_set():
            if self.sock is not None:
                self.sock.close()
            return
        threading.Thread(target=self._close_when_done, daemon=True).start()

    def _close_when_done(self) -> None:
        self.done.wait()
        if self.sock is not None:
            self.sock.close()


#: urllib3's default socket options (``HTTPConnection.default_socket_options``)
NODELAY: list[tuple[int, int, int]] = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
_dials: dict[tuple[str, int], _Dial] = {}
_dials_lock = threading.Lock()


def predial(
    host: str, port: int, timeout: float | None, tls: Callable[[], Any] | None = None
) -> None:
    """Start connecting to ``host:port`` now (module docstring); once per host and port.
    ``tls``: gives the SSL context to make the handshake with, on the dialling thread."""
    key = (host.lower().rstrip("."), port)
    with _dials_lock:
        if key not in _dials:
            _dials[key] = _Dial(key[0], port, timeout, tls)


def take_predialed(
    host: str,
    port: int,
    timeout: float | None,
    socket_options: Any,
    source_address: Any,
    tls: Any = None,
) -> socket.socket | None:
    """The socket :func:`predial` made for ``host:port`` (waiting for it at most
    ``timeout``), or None when there is none or it was made with other options. Raises what
    the attempt met (``TimeoutError`` if it is still pending after ``timeout``). ``tls``: the
    SSL context the caller will wrap the socket with (None: it wants plain TCP); a socket
    whose handshake was made ahead is returned only for that very context."""
    with _dials_lock:
        dial = _dials.pop((host.lower().rstrip("."), port), None)
    if dial is None:
        return None
    if source_address or list(socket_options or ()) != NODELAY:
        dial.close()
        return None
    if not dial.done.wait(timeout):
        dial.close()
        raise TimeoutError(f"connecting to {host}:{port} timed out")
    if dial.error is not None:
        raise dial.error
    if dial.sock is None or (dial.context is not None and dial.context is not tls):
        dial.close()
        return None  # the handshake failed, or another context is wanted: urllib3 dials
    dial.sock.settimeout(timeout)
    return dial.sock


def discard_predials() -> None:
    """Close every socket dialled ahead and not taken."""
    with _dials_lock:
        dials = list(_dials.values())
        _dials.clear()
    for dial in dials:
        dial.close()


def interleave(infos: list[Any]) -> list[Any]:
    """Addresses alternating by family, keeping the resolver's order within each family."""
    by_family: dict[int, list[Any]] = {}
    for info in infos:
        by_family.setdefault(info[0], []).append(info)
    queues = list(by_family.values())
    out: list[Any] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


def happy_connect(
    host: str,
    port: int,
    timeout: float | None,
    socket_options: Any = None,
    source_address: tuple[str, int] | None = None,
) -> socket.socket:
    """A connected socket to ``host:port``; raises ``TimeoutError``/``OSError`` like
    :func:`socket.create_connection` (``socket.gaierror`` when the name does not resolve)."""
    infos = interleave(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
    if not infos:
        raise OSError(f"{host} resolves to no address")
    return race(infos, timeout, socket_options, source_address, f"{host}:{port}")


def race(
    infos: list[Any],
    timeout: float | None,
    socket_options: Any = None,
    source_address: tuple[str, int] | None = None,
    name: str = "",
) -> socket.socket:
    """Connect to the first of ``infos`` (getaddrinfo tuples) that answers, starting one
    attempt every :data:`ATTEMPT_DELAY` seconds; ``timeout`` bounds the whole race."""
    infos = list(infos)
    deadline = None if timeout is None else time.monotonic() + timeout
    pending: dict[socket.socket, Any] = {}
    errors: list[OSError] = []
    selector = selectors.DefaultSelector()
    next_start = time.monotonic()
    try:
        while infos or pending:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"connecting to {name} timed out")
            if infos and (now >= next_start or not pending):
                family, socktype, proto, _, addr = infos.pop(0)
                sock = socket.socket(family, socktype, proto)
                try:
                    for opt in socket_options or ():
                        sock.setsockopt(*opt)
                    if source_address:
                        sock.bind(source_address)
                    sock.setblocking(False)
                    code = sock.connect_ex(addr)
                except OSError as err:
                    sock.close()
                    errors.append(err)
                    continue
                if code == 0:
                    sock.setblocking(True)
                    sock.settimeout(timeout)
                    return sock
                if code not in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                    sock.close()
                    errors.append(OSError(code, f"{os.strerror(code)} ({addr[0]} port {addr[1]})"))
                    continue
                pending[sock] = addr
                selector.register(sock, selectors.EVENT_WRITE)
                next_start = now + ATTEMPT_DELAY
            wait = ATTEMPT_DELAY if infos else None
            if deadline is not None:
                left = deadline - time.monotonic()
                wait = left if wait is None else min(wait, left)
            for key, _ in selector.select(max(0.0, wait) if wait is not None else None):
                sock = key.fileobj  # type: ignore[assignment]
                selector.unregister(sock)
                addr = pending.pop(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code == 0:
                    sock.setblocking(True)
                    sock.settimeout(timeout)
                    return sock
                sock.close()
                errors.append(OSError(code, f"{os.strerror(code)} ({addr[0]} port {addr[1]})"))
        raise errors[-1] if errors else OSError(f"cannot connect to {name}")
    finally:
        for sock in pending:
            sock.close()
        selector.close()


def _handshake_context(conn: Any) -> Any:
    """The SSL context urllib3 will wrap ``conn``'s socket with, when it wraps it as the
    dialling thread did (directly, for the host dialled, verifying); else None."""
    if getattr(conn, "ssl_context", None) is None or conn.proxy is not None:
        return None
    if conn.assert_fingerprint or conn.assert_hostname is not None:
        return None
    if conn.server_hostname not in (None, conn.host):
        return None
    return conn.ssl_context


@functools.cache
def pool_classes() -> dict[str, Any]:
    """``{"http": …, "https": …}`` pool classes for ``PoolManager.pool_classes_by_scheme``."""
    import urllib3
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

    def new_conn(self: Any) -> socket.socket:
        try:
            sock = take_predialed(
                self._dns_host,
                self.port,
                self.timeout,
                self.socket_options,
                self.source_address,
                _handshake_context(self),
            ) or happy_connect(
                self._dns_host,
                self.port,
                self.timeout,
                socket_options=self.socket_options,
                source_address=self.source_address,
            )
        except socket.gaierror as e:
            raise NameResolutionError(self.host, self, e) from e
        except TimeoutError as e:
            raise ConnectTimeoutError(
                self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from e
        except OSError as e:
            raise NewConnectionError(self, f"Failed to establish a new connection: {e}") from e
        sys.audit("http.client.connect", self, self.host, self.port)
        return sock

    def request(
        self: Any, method: str, url: str, body: Any = None, headers: Any = None, **kw: Any
    ) -> None:
        headers = dict(headers or {})
        deadline = headers.pop(DEADLINE_HEADER, None)
        self._rocmenv_deadline = float(deadline) if deadline else None
        super(type(self), self).request(method, url, body=body, headers=headers, **kw)

    def getresponse(self: Any) -> Any:
        # The status line and headers are read by http.client with a per-read timeout: a
        # server dripping header bytes would never time out. A timer shuts the socket down
        # at the request's deadline; what was read by then is all there is.
        deadline = getattr(self, "_rocmenv_deadline", None)
        sock = self.sock
        timer = None
        if deadline is not None and sock is not None:
            left = deadline - time.monotonic()

            def stop() -> None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

            timer = threading.Timer(max(0.0, left), stop)
            timer.daemon = True
            timer.start()
        try:
            return super(type(self), self).getresponse()
        finally:
            if timer is not None:
                timer.cancel()

    class Http(HTTPConnection):
        _new_conn = new_conn

    class Https(HTTPSConnection):
        _new_conn = new_conn

    for cls in (Http, Https):
        cls.request = request  # type: ignore[method-assign]
        cls.getresponse = getresponse  # type: ignore[method-assign]

    class HttpPool(urllib3.HTTPConnectionPool):
        ConnectionCls = Http

    class HttpsPool(urllib3.HTTPSConnectionPool):
        ConnectionCls = Https

    return {"http": HttpPool, "https": HttpsPool}
