"""A TCP proxy that adds a fixed delay in each direction (this kernel has no ``netem``).

Every chunk read from one side is written to the other ``one_way`` seconds after it arrived,
in order, so pipelining and TLS work as over a long link: a round trip costs ``2 * one_way``.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from types import TracebackType


class DelayProxy:
    def __init__(self, target: tuple[str, int], one_way: float) -> None:
        self.target = target
        self.one_way = one_way
        self.connections = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()

    def __enter__(self) -> DelayProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # the SYN/SYN-ACK of the client's connection crossed the "link" too
        time.sleep(2 * self.one_way)
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        for a, b in ((client, upstream), (upstream, client)):
            a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            q: queue.Queue[tuple[float, bytes]] = queue.Queue()
            threading.Thread(target=self._read, args=(a, q), daemon=True).start()
            threading.Thread(target=self._write, args=(b, q), daemon=True).start()

    def _read(self, src: socket.socket, q: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            q.put((time.monotonic() + self.one_way, data))
            if not data:
                return

    def _write(self, dst: socket.socket, q: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, data = q.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return
