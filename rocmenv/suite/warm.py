"""The allocation's warm runner: the node-side rocmenv started once per suite, so that a job
step no longer pays Python's start-up, rocmenv's imports and its settings before its
container is created (``rocmenv suite slurm-warm``, an ``srun --overlap --gres=none`` step
of the suite's allocation, :mod:`rocmenv.suite.steps`).

Each test is still its own job step with exactly the GPUs Slurm gives it: the step's
process is :mod:`rocmenv.suite.stepclient` (standard library only), which passes its
stdout/stderr, environment and working directory over a Unix socket. The runner forks a
child per step — the runner itself is single-threaded, and has imported the run path
already — that becomes the step's ``rocmenv suite slurm-exec`` with the step's
environment (``SLURM_STEP_GPUS`` included) and streams, and sends the exit status back
as soon as the test's container has exited: the step ends (its GPUs free for the next one)
while the child removes the container. The runner waits for its children when the
allocation ends, so no container outlives it.
The device check runs in the step (its cgroup), the stop requests come from the step
(``scancel --signal=TERM J.S`` → the child gets SIGTERM, as the node-side rocmenv did), and
a step that disappears (SIGKILL) is a SIGTERM to its child, asked again every second.

Access: the socket is in a directory the runner creates with mode 0700 (an existing one is
refused), and a peer of another user is hung up on (``SO_PEERCRED``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from rocmenv.errors import EXIT_INTERNAL, SlurmError

HEADER_MAX = 1 << 20
HEADER_DEADLINE = 10.0  # seconds a peer may take to send its request
WARM_IMPORTS = (
    "rocmenv.suite.allocation",
    "rocmenv.suite.local",
    "rocmenv.settings.resolve",
    "rocmenv.container.plan",
    "rocmenv.container.gpu",
    "rocmenv.run.execute",
    "rocmenv.engine.select",
    "rocmenv.engine.docker_api",
    "rocmenv.engine.container",
)
READY = "rocmenv-warm: ready"


class Peer:
    """The child's link to its step: stop requests in, the device check and the exit out."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.replies: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.reader = threading.Thread(target=self._read, name="warm-peer", daemon=True)
        self.told = threading.Event()  # the step has its status: its end is no stop request

    def start(self) -> None:
        self.reader.start()

    def _read(self) -> None:
        stream = self.conn.makefile("rb")
        while True:
            try:
                line = stream.readline(64 * 1024)
            except OSError:
                line = b""
            if not line and self.told.is_set():
                return
            if not line:  # the step is gone: stop the test, and keep asking
                while True:
                    os.kill(os.getpid(), signal.SIGTERM)
                    threading.Event().wait(1.0)
            text = line.decode("utf-8", "replace").strip()
            if text == "TERM":
                os.kill(os.getpid(), signal.SIGTERM)
            elif text.startswith("ACCESS "):
                self.replies.put(text[len("ACCESS ") :])

    def check_access(self, paths: Sequence[str]) -> None:
        """:func:`rocmenv.suite.allocation.check_access`, done by the step's own process."""
        self.conn.sendall(f"CHECK {json.dumps(list(paths))}\n".encode())
        try:
            answer = self.replies.get(timeout=30)
        except queue.Empty:
            raise SlurmError("the job step did not answer the GPU access check") from None
        if answer.startswith("EPERM "):
            raise SlurmError(
                f"{answer[len('EPERM ') :]} was mapped from this job's allocation but the job "
                "may not open it",
                hint="gres.conf's File= order differs from the one slurmd uses",
            )

    def exit(self, status: int) -> None:
        """The step's status, which ends it; this child's output goes nowhere after (the
        step's pipes are let go first: Slurm ends a step once its output has ended)."""
        import sys

        if self.told.is_set():
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        self.told.set()
        with contextlib.suppress(OSError):
            self.conn.sendall(f"EXIT {status}\n".encode())


Handler = Callable[[list[str], Peer], int]


def serve(
    directory: Path, handle: Handler, announce: Callable[[str], None], *, untrusted: bool = False,
    warm_up: Callable[[], None] | None = None,
) -> int:  # fmt: skip
    """Accept steps until SIGTERM (the allocation ends); ``handle`` runs one step's
    ``suite slurm-exec`` arguments in a forked child (``untrusted``: only untrusted ones).
    The socket listens before the run path is imported and ``warm_up`` has run (a dry pass
    of a step's first work, so that each child inherits what it compiled and cached): the
    first steps wait in its backlog meanwhile, instead of each starting a rocmenv of its
    own."""
    import importlib

    sweep_stale(directory.parent)
    try:
        directory.mkdir(mode=0o700)
    except OSError as err:
        raise SlurmError(
            f"cannot create the warm runner's directory {directory}: {err.strerror}"
        ) from None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    children: set[int] = set()
    stopping = threading.Event()

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        listener.bind(str(directory / "sock"))
        listener.listen(64)
        listener.settimeout(0.2)
        announce(READY)
        for name in WARM_IMPORTS:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        if warm_up is not None:
            warm_up()
        while not stopping.is_set():
            _reap(children)
            try:
                conn, _addr = listener.accept()
            except OSError:  # the timeout included
                continue
            with conn:
                pid = _fork_step(conn, listener, handle, untrusted)
            if pid:
                children.add(pid)
        _end(children)
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            (directory / "sock").unlink()
        with contextlib.suppress(OSError):
            directory.rmdir()
    return 0


STALE_AFTER = 60.0  # seconds: a runner's directory older than this with no listener is left over


def sweep_stale(parent: Path, now: float | None = None) -> list[Path]:
    """Remove the directories of runners that were killed outright (SIGKILL, a node's OOM
    killer: no ``finally`` ran) from ``parent``: this user's own ``rocmenv-*-warm``
    directories, not links, older than :data:`STALE_AFTER`, whose socket nobody listens on.
    Best effort; returns what it removed."""
    import errno
    import stat
    import time

    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        candidates = list(parent.glob("rocmenv-*-warm"))
    except OSError:
        return removed
    for path in candidates:
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if now - st.st_mtime < STALE_AFTER:
            continue  # a runner that is still starting
        try:
            if {entry.name for entry in path.iterdir()} - {"sock"}:
                continue  # not only a runner's: left as it is
        except OSError:
            continue
        sock = path / "sock"
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(str(sock))
        except OSError as err:
            if err.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                continue  # a runner that is there but busy, or a socket we may not use
        else:
            continue  # a live runner
        finally:
            probe.close()
        with contextlib.suppress(OSError):
            sock.unlink()
        with contextlib.suppress(OSError):
            path.rmdir()  # only if nothing else is in it
            removed.append(path)
    return removed


def _reap(children: set[int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, _status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
        children.discard(pid)


def _end(children: set[int], timeout: float = 60.0) -> None:
    """Ask every child to stop (each removes its container), and wait for them."""
    import time

    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(0.1)


def _peer_uid(conn: socket.socket) -> int:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", raw)[1])


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    """The step's request and its stdout/stderr, or None (a malformed or oversized one)."""
    conn.settimeout(HEADER_DEADLINE)
    fds: list[int] = []
    data = bytearray()
    try:
        msg, fds, _flags, _addr = socket.recv_fds(conn, 4096, 2)
        data += msg
        while not data.endswith(b"\n") and len(data) <= HEADER_MAX:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        request = json.loads(data) if data.endswith(b"\n") else None
    except (OSError, ValueError):
        request = None
    if not isinstance(request, dict) or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    conn.settimeout(None)
    return request, fds


def _fork_step(
    conn: socket.socket, listener: socket.socket, handle: Handler, untrusted: bool
) -> int:
    """The child for one step (its pid; 0 when the request was refused)."""
    if _peer_uid(conn) != os.getuid():
        return 0
    received = _receive(conn)
    if received is None:
        return 0
    request, fds = received
    argv = _node_args(request.get("argv"), untrusted)
    env, cwd = request.get("env"), request.get("cwd")
    if argv is None or not isinstance(env, dict) or not isinstance(cwd, str):
        for fd in fds:
            os.close(fd)
        return 0
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    listener.close()  # the child: the step's rocmenv from here on
    status = 1
    try:
        status = _child(conn, fds, argv, {str(k): str(v) for k, v in env.items()}, cwd, handle)
    finally:
        os._exit(status)


def _node_args(argv: object, untrusted: bool = False) -> list[str] | None:
    """``[python, -I, -m, rocmenv, …suite slurm-exec…]`` → the arguments after ``rocmenv``;
    anything else is refused (the runner runs only steps of the suite; an untrusted
    suite's runner only steps with ``--untrusted`` before the command)."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None
    if argv[1:4] != ["-I", "-m", "rocmenv"] or "slurm-exec" not in argv[4:8]:
        return None
    options = argv[4 : argv.index("--")] if "--" in argv else argv[4:]
    if untrusted and "--untrusted" not in options:
        return None
    return argv[4:]


def _child(
    conn: socket.socket, fds: list[int], argv: list[str], env: dict[str, str], cwd: str,
    handle: Handler,
) -> int:  # fmt: skip
    import sys

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (null, *fds):
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    peer = Peer(conn)
    peer.start()
    try:
        status = handle(argv, peer)
    except SystemExit as end:  # argparse's usage error, say: already printed
        status = end.code if isinstance(end.code, int) else 1
    except Exception as err:  # a bug: said in the test's log, not lost with the child
        sys.stderr.write(f"rocmenv: error: the warm runner's step failed: {err!r}\n")
        status = EXIT_INTERNAL
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    peer.exit(status)
    return status


def client_argv(python: str, directory: str, fallback: Sequence[str]) -> list[str]:
    """A step's command with a warm runner at ``directory``: the standard-library client,
    which runs ``fallback`` itself when no runner answers."""
    client = Path(__file__).with_name("stepclient.py")
    return [python, "-I", "-S", str(client), directory, "--", *fallback]
