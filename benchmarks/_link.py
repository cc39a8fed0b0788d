"""Network and engine stand-ins for ``bench_image_cache.py`` (this kernel has no ``netem``).

- :class:`LinkProxy`: a TCP proxy whose downstream bytes share one token bucket (a link of
  ``rate`` bytes per second, whatever the number of connections) and cross a one-way delay;
  it counts every byte it carried towards the client ("bytes over the link").
- :class:`StallingMirror`: a TCP proxy (a LAN mirror: no rate limit) that carries
  ``stall_after`` bytes towards its clients and then stops sending anything, on every
  connection, old or new, while keeping them open: a mirror stalled under load.
- :class:`FreshEngine`: a Docker engine started for one job as a DinD pod has it: its own
  ``--data-root``, ``--exec-root``, socket, pidfile, containerd namespace and bridge
  (``ip link add … type bridge``, never ``--bridge=none``), ``--iptables=false``; stopped and
  wiped afterwards.
- :class:`Registry`: a Distribution registry (Debian's ``docker-registry``) on a free port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.down = 0  # bytes carried towards the clients
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port: int = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []

    def __enter__(self) -> _Proxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._sock.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._conns += [client, upstream]
            threading.Thread(target=self._pump_up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump_down, args=(upstream, client), daemon=True).start()

    def _pump_up(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _pump_down(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._send_down(dst, data):
                    return
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _send_down(self, dst: socket.socket, data: bytes) -> bool:
        dst.sendall(data)
        with self._lock:
            self.down += len(data)
        return True


class LinkProxy(_Proxy):
    """``rate`` bytes/s in each direction, shared by every connection (a token bucket per
    direction: each 16 kB piece takes its slot on the link in turn); ``one_way`` seconds of
    latency before an answer's first byte (a pipe's latency is paid once per answer, not per
    piece). ``up`` counts the bytes carried towards the registry."""

    def __init__(self, target: tuple[str, int], rate: float, one_way: float = 0.005) -> None:
        super().__init__(target)
        self.rate, self.one_way = rate, one_way
        self.up = 0
        self._next = time.monotonic()  # when the downstream link is free again
        self._next_up = time.monotonic()
        self._bucket = threading.Lock()

    def _pump_up(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                for i in range(0, len(data), 16384):
                    piece = data[i : i + 16384]
                    with self._bucket:
                        self._next_up = (
                            max(self._next_up, time.monotonic()) + len(piece) / self.rate
                        )
                        at = self._next_up
                    delay = at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    dst.sendall(piece)
                    with self._lock:
                        self.up += len(piece)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _pump_down(self, src: socket.socket, dst: socket.socket) -> None:
        first = True
        try:
            while data := src.recv(65536):
                if first:
                    time.sleep(self.one_way)
                    first = False
                self._send_down(dst, data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _send_down(self, dst: socket.socket, data: bytes) -> bool:
        for i in range(0, len(data), 16384):
            piece = data[i : i + 16384]
            with self._bucket:
                start = max(self._next, time.monotonic())
                self._next = start + len(piece) / self.rate
                at = self._next
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            dst.sendall(piece)
            with self._lock:
                self.down += len(piece)
        return True


class StallingMirror(_Proxy):
    """Carries ``stall_after`` bytes, then nothing more on any connection (held open)."""

    def __init__(self, target: tuple[str, int], stall_after: int) -> None:
        super().__init__(target)
        self.stall_after = stall_after
        self.stalled_at: float | None = None

    def _send_down(self, dst: socket.socket, data: bytes) -> bool:
        with self._lock:
            room = max(0, self.stall_after - self.down)
            piece = data[:room]
            self.down += len(piece)
            if len(piece) < len(data) and self.stalled_at is None:
                self.stalled_at = time.monotonic()
        if piece:
            dst.sendall(piece)
        if len(piece) < len(data):
            self._stop.wait()  # hold the connection: no byte, no close
            return False
        return True


class Registry:
    """``docker-registry serve`` on a free loopback port, its storage under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Registry:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.root / 'storage'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n  secret: h32-bench\n"
        )
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return self
            time.sleep(0.1)
        raise SystemExit("the benchmark registry did not start")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


BRIDGE = "h32bench0"


def ensure_bridge() -> None:
    """The fresh engines' bridge (their own, as a DinD pod's engine has): never docker0."""
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0:
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", "172.31.233.1/24", "dev", BRIDGE], check=False)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)


class FreshEngine:
    """A second dockerd, for one job: everything of its own, wiped at the end."""

    def __init__(self, base: Path, name: str) -> None:
        self.dir = base / name
        self.name = name
        self.socket = self.dir / "docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def __enter__(self) -> FreshEngine:
        ensure_bridge()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        log = (self.dir / "dockerd.log").open("wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(self.dir / "root"),
             "--exec-root", str(self.dir / "exec"), "-H", self.host,
             "--pidfile", str(self.dir / "docker.pid"),
             "--containerd-namespace", f"{self.name}", "--containerd-plugins-namespace",
             f"{self.name}-plugins", "--iptables=false", "--ip-masq=false",
             f"--bridge={BRIDGE}"],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        for _ in range(300):
            done = subprocess.run(
                ["docker", "-H", self.host, "version", "--format", "{{.Server.Version}}"],
                capture_output=True,
            )
            if done.returncode == 0:
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit(f"the fresh engine {self.name} did not start: see {self.dir}/dockerd.log")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        subprocess.run(["umount", "-R", str(self.dir / "root")], capture_output=True)
        subprocess.run(["umount", "-R", str(self.dir / "exec")], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def docker(self, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["docker", "-H", self.host, *args], check=True, **kw)  # type: ignore[call-overload, no-any-return]
