"""The allocation's warm runner and the step's client, without Slurm: a real runner process
(``serve`` with a test handler) and real ``stepclient.py`` processes over the Unix socket
(``tests/integration/suite/test_slurm.py`` runs them as job steps on the test bed)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv.suite import stepclient
from rocmenv.suite.warm import READY, _node_args, client_argv

# the handler a test step runs in the runner's child: what the step asked, through the
# step's own streams, environment and directory
RUNNER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from rocmenv.suite.warm import serve

    def handle(argv, peer):
        mode = os.environ.get("MODE", "")
        print("child", os.getpid(), "argv", " ".join(argv), "cwd", os.getcwd(), flush=True)
        sys.stderr.write("to stderr\\n")
        if mode == "check":
            try:
                peer.check_access(os.environ["CHECK_PATHS"].split(":"))
                print("access ok", flush=True)
            except Exception as err:
                print("access refused:", err, flush=True)
        if mode == "raise":
            raise KeyError("a bug")
        if mode == "early":  # the status first, then a slow removal (signals ignored, as
            signal.signal(signal.SIGTERM, lambda *_: None)  # the run's signal watch does)
            peer.exit(5)
            print("after the exit", flush=True)
            time.sleep(1.5)
            Path(os.environ["DONE_FILE"]).write_text("removed")
            return 0
        if mode == "wait-term":
            got = []
            signal.signal(signal.SIGTERM, lambda *_: got.append(1))
            Path(os.environ["READY_FILE"]).write_text("waiting")
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                time.sleep(0.05)
            Path(os.environ["READY_FILE"]).write_text("terminated" if got else "timeout")
            return 143 if got else 99
        return int(os.environ.get("CODE", "0"))

    sys.exit(serve(Path(sys.argv[1]), handle, lambda line: print(line, flush=True)))
    """
)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "warm"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == READY
    try:
        yield directory
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert not directory.exists()  # the runner removes its directory when it ends


def _fallback(marker: str = "fallback ran") -> list[str]:
    # what a step runs when no runner answers; the runner only accepts slurm-exec argv
    return [sys.executable, "-I", "-m", "rocmenv", "suite", "slurm-exec", "--", marker]


def _step(directory: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        client_argv(sys.executable, str(directory), _fallback()), cwd=cwd, text=True,
        capture_output=True, env={**os.environ, **env}, timeout=60, check=False,
    )  # fmt: skip


def test_a_step_runs_in_the_runner_with_its_streams_environment_directory_and_status(
    runner: Path, tmp_path: Path
) -> None:
    done = _step(runner, tmp_path, CODE="7")
    assert done.returncode == 7
    assert f"argv suite slurm-exec -- fallback ran cwd {tmp_path}" in done.stdout
    assert "to stderr" in done.stderr
    child = int(done.stdout.split()[1])
    assert child != os.getpid()


def test_the_step_ends_at_the_tests_exit_and_the_runner_waits_for_the_removal(
    tmp_path: Path,
) -> None:
    directory, removed = tmp_path / "warm", tmp_path / "removed"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == READY
    try:
        done = _step(directory, tmp_path, MODE="early", DONE_FILE=str(removed))
        assert done.returncode == 5  # the status told, not the child's later one
        assert "after the exit" not in done.stdout  # nothing reaches the ended step
        assert not removed.exists()  # the step did not wait for the removal
    finally:
        proc.send_signal(signal.SIGTERM)  # the allocation ends at once
        assert proc.wait(timeout=30) == 0
    assert removed.read_text() == "removed"  # the runner waited for its child


def test_a_bug_in_the_runners_child_is_told_in_the_log_and_exits_70(
    runner: Path, tmp_path: Path
) -> None:
    done = _step(runner, tmp_path, MODE="raise")
    assert done.returncode == 70
    assert "the warm runner's step failed: KeyError('a bug')" in done.stderr


def test_the_device_check_happens_in_the_step_and_an_eperm_refuses(
    runner: Path, tmp_path: Path
) -> None:
    readable = tmp_path / "node"
    readable.write_text("")
    assert "access ok" in _step(runner, tmp_path, MODE="check", CHECK_PATHS=str(readable)).stdout
    # the step's answer for a node its device cgroup forbids, spoken by a raw peer
    out_r, out_w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(runner / "sock"))
        env = {**os.environ, "MODE": "check", "CHECK_PATHS": "/dev/dri/renderD131"}
        header = json.dumps({"argv": _fallback(), "env": env, "cwd": str(tmp_path)}) + "\n"
        socket.send_fds(sock, [header.encode()], [out_w, out_w])
        os.close(out_w)
        reader = sock.makefile("rb")
        assert reader.readline() == b'CHECK ["/dev/dri/renderD131"]\n'
        sock.sendall(b"ACCESS EPERM /dev/dri/renderD131\n")
        assert reader.readline() == b"EXIT 0\n"
    with os.fdopen(out_r) as out:
        text = out.read()
    assert "access refused: /dev/dri/renderD131 was mapped from this job's allocation" in text


@pytest.mark.root_only  # runs the check as another user: only root can
def test_the_step_answers_eperm_for_a_node_it_may_not_open(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run the check as another user")
    # as root a file mode cannot refuse an open: the check runs as nobody, from a copy of
    # the client it can read, against a root-only file
    shared = Path(tempfile.mkdtemp(prefix="stepclient-"))
    try:
        shared.chmod(0o755)
        client = shared / "stepclient.py"
        shutil.copy(Path(stepclient.__file__), client)
        client.chmod(0o644)
        locked, free = shared / "locked", shared / "free"
        locked.write_text("")
        locked.chmod(0o600)
        free.write_text("")
        free.chmod(0o644)
        code = (
            "import sys; sys.path[:0] = [sys.argv[1]]; import stepclient as c; "
            "print(c._access(sys.argv[2:]))"
        )
        python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
        run = functools.partial(subprocess.run, capture_output=True, text=True, user=65534,
                                cwd="/", check=False)  # fmt: skip
        done = run([python, "-c", code, str(shared), str(free), str(locked)])
        assert done.stdout.strip() == f"ACCESS EPERM {locked}", done.stderr
        done = run([python, "-c", code, str(shared), str(free), "/nonexistent"])
        assert done.stdout.strip() == "ACCESS ok", done.stderr
    finally:
        shutil.rmtree(shared)


def test_sigterm_to_the_step_reaches_the_runners_child(runner: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        client_argv(sys.executable, str(runner), _fallback()), cwd=tmp_path,
        env={**os.environ, "MODE": "wait-term", "READY_FILE": str(ready)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _until(lambda: ready.exists() and ready.read_text() == "waiting")
    proc.send_signal(signal.SIGTERM)  # what `scancel --signal=TERM J.S` does
    assert proc.wait(timeout=30) == 143
    assert ready.read_text() == "terminated"


def test_a_step_killed_outright_still_stops_its_child(runner: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        client_argv(sys.executable, str(runner), _fallback()), cwd=tmp_path,
        env={**os.environ, "MODE": "wait-term", "READY_FILE": str(ready)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _until(lambda: ready.exists() and ready.read_text() == "waiting")
    proc.kill()  # SIGKILL: the client cannot pass anything on; the lost peer is the signal
    proc.wait(timeout=10)
    _until(lambda: ready.read_text() == "terminated")


@pytest.mark.parametrize(
    ("mode", "owner"),
    # another user's directory: only root can make one (scripts/test.sh's ordinary-user pass
    # leaves it out)
    [(0o755, None), (0o770, None), pytest.param(0o700, 65534, marks=pytest.mark.root_only)],
)
def test_a_directory_others_may_enter_is_not_trusted_and_the_step_runs_itself(
    tmp_path: Path, mode: int, owner: int | None
) -> None:
    # another user who made (or can write) the directory could listen there and receive
    # the step's environment, secrets included
    planted = tmp_path / "warm"
    planted.mkdir()
    planted.chmod(mode)
    if owner is not None:
        if os.getuid() != 0:
            pytest.skip("needs root to plant a directory of another user")
        os.chown(planted, owner, -1)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(planted / "sock"))
    listener.listen(1)
    listener.settimeout(0.5)
    try:
        done = subprocess.run(
            client_argv(sys.executable, str(planted), [sys.executable, "-c", "print('itself')"]),
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        assert done.stdout.strip() == "itself"
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody connected
    finally:
        listener.close()


def test_no_runner_means_the_step_runs_its_node_side_rocmenv(tmp_path: Path) -> None:
    done = subprocess.run(
        client_argv(sys.executable, str(tmp_path / "absent"),
                    [sys.executable, "-c", "import sys; sys.exit(5)"]),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 5


def test_a_step_created_before_the_runner_listens_waits_for_it(tmp_path: Path) -> None:
    # the suite does not wait for the runner: the first steps start while it starts
    directory = tmp_path / "warm"
    step = subprocess.Popen(
        client_argv(sys.executable, str(directory), _fallback()), cwd=tmp_path, text=True,
        env={**os.environ, "CODE": "4"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    time.sleep(0.5)
    assert step.poll() is None  # waiting, not running the fallback
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(directory)], stdout=subprocess.DEVNULL
    )
    try:
        out, _err = step.communicate(timeout=60)
        assert step.returncode == 4
        assert out.startswith("child ")  # the runner's child ran it
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=30)


def test_the_runner_refuses_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "warm").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "warm")], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and READY not in done.stdout
    assert "cannot create the warm runner's directory" in done.stderr


def test_a_malformed_request_is_hung_up_on_and_the_runner_keeps_serving(
    runner: Path, tmp_path: Path
) -> None:
    for junk in (b"not json\n", b"[1, 2]\n", b"x" * 70_000):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(runner / "sock"))
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(15)
            assert sock.recv(100) == b""  # no descriptors, no request: closed, nothing run
    assert _step(runner, tmp_path, CODE="3").returncode == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-m", "rocmenv", "suite", "slurm-exec"],  # not isolated
        ["python", "-I", "-m", "rocmenv", "run", "--", "sh"],  # not a suite step
        ["python", "-I", "-c", "import os"],
        "python -I -m rocmenv suite slurm-exec",
        ["python", "-I", "-m", "rocmenv", 3],
    ],
)
def test_the_runner_runs_only_suite_steps(argv: object) -> None:
    assert _node_args(argv) is None


def test_the_runner_takes_the_arguments_after_rocmenv() -> None:
    argv = ["py", "-I", "-m", "rocmenv", "--config", "/c.toml", "suite", "slurm-exec", "--", "x"]
    assert _node_args(argv) == ["--config", "/c.toml", "suite", "slurm-exec", "--", "x"]


def _until(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_an_untrusted_suites_runner_runs_only_untrusted_steps() -> None:
    head = ["py", "-I", "-m", "rocmenv", "suite", "slurm-exec"]
    assert _node_args([*head, "--untrusted", "--", "x"], untrusted=True) is not None
    assert _node_args([*head, "--", "x"], untrusted=True) is None
    assert _node_args([*head, "--", "--untrusted"], untrusted=True) is None  # the command's
    assert _node_args([*head, "--", "x"]) is not None


@pytest.mark.root_only  # connects as another user: only root can
def test_the_runner_hangs_up_on_another_users_step() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to connect as another user")
    # the directory keeps others out; were it opened up, the peer's uid still is checked
    shared = Path(tempfile.mkdtemp(prefix="warm-peer-"))
    shared.chmod(0o755)
    directory = shared / "warm"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == READY
        directory.chmod(0o755)
        (directory / "sock").chmod(0o777)
        code = (
            "import json, os, socket, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "head = json.dumps({'argv': sys.argv[2:], 'env': {'CODE': '0'}, 'cwd': '/'})\n"
            "s.settimeout(15)\n"
            "try:\n"
            "    socket.send_fds(s, [head.encode() + b'\\n'], [1, 2])\n"
            "    print(repr(s.recv(100)))\n"
            "except (BrokenPipeError, ConnectionResetError):\n"  # hung up before or after
            "    print('reset')\n"
        )
        python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
        done = subprocess.run(
            [python, "-c", code, str(directory / "sock"), *_fallback()], capture_output=True,
            text=True, user=65534, cwd="/", timeout=60, check=False,
        )  # fmt: skip
        assert done.stdout.strip() in ("b''", "reset"), (done.stdout, done.stderr)  # hung up
        assert "child" not in done.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(shared, ignore_errors=True)


def test_a_runner_killed_outright_leaves_a_directory_the_next_runner_removes(
    tmp_path: Path,
) -> None:
    """SIGKILL runs no ``finally``: its socket directory stays in /tmp. The next runner
    removes such directories — this user's, old, with nobody listening — and no other."""
    from rocmenv.suite.warm import STALE_AFTER, sweep_stale

    old = time.time() - STALE_AFTER - 5

    def made(name: str, *, listening: bool | None, age: float = old) -> Path:
        path = tmp_path / name
        path.mkdir(mode=0o700)
        if listening is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path / "sock"))
            if listening:
                sock.listen(1)
                keep.append(sock)
            else:
                sock.close()  # the file stays, as after a SIGKILL: connecting is refused
        os.utime(path, (age, age))
        return path

    keep: list[socket.socket] = []
    try:
        killed = made("rocmenv-aaa-warm", listening=False)
        empty = made("rocmenv-bbb-warm", listening=None)
        live = made("rocmenv-ccc-warm", listening=True)
        starting = made("rocmenv-ddd-warm", listening=False, age=time.time())
        other = made("rocmenv-eee-warm", listening=False)
        (other / "notes").write_text("not a runner's")
        os.utime(other, (old, old))
        unrelated = made("rocmenv-fff", listening=False)
        (tmp_path / "target").mkdir()
        (tmp_path / "rocmenv-ggg-warm").symlink_to(tmp_path / "target")
        removed = sweep_stale(tmp_path)
    finally:
        for sock in keep:
            sock.close()
    assert sorted(removed) == [killed, empty]
    assert not killed.exists() and not empty.exists()
    for kept in (live, starting, other, unrelated):
        assert kept.is_dir()
    assert (other / "sock").exists() and (live / "sock").exists()
    assert (tmp_path / "rocmenv-ggg-warm").is_symlink() and (tmp_path / "target").is_dir()


def test_the_runner_sweeps_its_directory_s_parent_before_it_listens(tmp_path: Path) -> None:
    stale = tmp_path / "rocmenv-old-warm"
    stale.mkdir(mode=0o700)
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path / "rocmenv-new-warm")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == READY
        assert not stale.exists() and (tmp_path / "rocmenv-new-warm" / "sock").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
