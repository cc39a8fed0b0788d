"""A Slurm job step's own process when the allocation's warm runner answers
(:mod:`rocmenv.suite.warm`): run as ``python -I -S stepclient.py DIR -- FALLBACK…``, it
imports nothing of rocmenv (standard library only, ~20 ms to start instead of ~0.3 s for
the node-side rocmenv), hands its stdout/stderr, environment and working directory to the
runner's socket in DIR, and stays the step's process until the test ends:

* the runner asks it to open the step's GPU nodes (``CHECK``): the step's device cgroup is
  here, not in the runner's step, so a wrong gres.conf mapping is still an EPERM;
* SIGTERM/SIGINT/SIGHUP (``scancel --signal=TERM J.S``) are passed on (``TERM``): the
  runner's child stops and removes the container as the node-side rocmenv would;
* the test's exit status comes back (``EXIT N``) and is this process's.

DIR must be a directory of this user that nobody else may enter (the socket gets the
step's environment, secrets included); when it is not, or nobody answers, the step runs
``FALLBACK`` (``python -I -m rocmenv … suite slurm-exec …``) itself, as without a runner.
"""

import contextlib
import json
import os
import signal
import socket
import stat
import sys
import time

HEADER_MAX = 1 << 20  # the runner reads no more than this of the request
STARTING_WAIT = 5.0  # seconds to wait for a runner that is still starting
REPLY_MAX = 64 * 1024  # a line from the runner


def _usable(directory: str) -> bool:
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and stat.S_IMODE(st.st_mode) & 0o077 == 0
    )


def _connect(directory: str, wait: float) -> "socket.socket | None":
    """The runner's socket; a runner still starting (no directory or socket yet) is waited
    for up to ``wait`` seconds. A directory that is not safe is never used."""
    deadline = time.monotonic() + wait
    while True:
        if os.path.lexists(directory) and not _usable(directory):
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5.0)
            sock.connect(os.path.join(directory, "sock"))
            if _usable(directory):  # still ours after the connect
                return sock
        except OSError:
            pass
        sock.close()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _access(paths: "list[str]") -> str:
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except PermissionError:
            return "ACCESS EPERM " + path
        except OSError:
            continue  # no driver behind the node: the cgroup let us through
        os.close(fd)
    return "ACCESS ok"


def _serve(sock: socket.socket, fallback: "list[str]") -> int:
    header = json.dumps({"argv": fallback, "env": dict(os.environ), "cwd": os.getcwd()})
    data = header.encode("utf-8") + b"\n"
    if len(data) > HEADER_MAX:
        return -1  # before anything was sent: the fallback runs it
    sock.settimeout(None)
    sock.sendmsg([data[:4096]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fds())])
    if len(data) > 4096:
        sock.sendall(data[4096:])

    def forward(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            sock.sendall(b"TERM\n")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    reader = sock.makefile("rb")
    while True:
        line = reader.readline(REPLY_MAX)
        if not line:
            sys.stderr.write("rocmenv: the allocation's runner ended before the test did\n")
            return 1
        word, _, rest = line.decode("utf-8", "replace").strip().partition(" ")
        if word == "EXIT":
            try:
                return int(rest)
            except ValueError:
                return 1
        if word == "CHECK":
            try:
                paths = [str(p) for p in json.loads(rest)]
            except ValueError:
                paths = []
            sock.sendall((_access(paths) + "\n").encode("utf-8"))


def _fds() -> bytes:
    import array

    return array.array("i", [1, 2]).tobytes()


def main(argv: "list[str]") -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: stepclient.py DIR -- FALLBACK…\n")
        return 2
    directory, fallback = argv[0], argv[2:]
    sock = _connect(directory, STARTING_WAIT)
    if sock is not None:
        try:
            status = _serve(sock, fallback)
        except OSError as err:  # the runner went away mid-test
            sys.stderr.write(f"rocmenv: lost the allocation's runner: {err}\n")
            return 1
        if status >= 0:
            return status
    os.execv(fallback[0], fallback)  # no runner: the node-side rocmenv, as before
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
