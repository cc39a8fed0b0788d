"""Engine choice, auto-detection and error translation (no Docker engine needed)."""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv.container.labels import Identity, process_start
from rocmenv.container.runspec import RunSpec
from rocmenv.context import Context
from rocmenv.engine.protocol import explain_start_failure
from rocmenv.engine.select import (
    START_HINT,
    EngineChoice,
    choose_engine,
    choose_engine_kind,
    detect_engine,
    ping,
    socket_answers,
)
from rocmenv.errors import EngineUnavailable, UsageError
from rocmenv.settings.profiles import Ulimit

# Error texts as Docker 20.10 / runc print them on this kind of host.
RLIMIT_MEMLOCK = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    "container process: error during container init: error setting rlimits for ready process: "
    "error setting rlimit type 8: operation not permitted: unknown"
)
RLIMIT_NOFILE = RLIMIT_MEMLOCK.replace("type 8", "type 7")
CAPS = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    "container process: unable to apply caps: operation not permitted: unknown"
)
NOT_FOUND = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    'container process: exec: "no-such-cmd": executable file not found in $PATH: unknown'
)
DEVICE = (
    'error gathering device information while adding custom device "/dev/kfd": no such file or '
    "directory"
)
GROUP = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start "
    "container process: error during container init: unable to find group render: no matching "
    "entries in group file: unknown"
)


def test_a_refused_ulimit_names_the_option_with_its_value() -> None:
    spec = RunSpec(
        image="i",
        ulimits=(
            Ulimit(name="memlock", soft=-1, hard=-1),
            Ulimit(name="nofile", soft=65535, hard=65535),
        ),
    )
    failure = explain_start_failure(RLIMIT_MEMLOCK, spec)
    assert failure.option == "--ulimit memlock=-1"
    assert "RLIMIT_MEMLOCK" in failure.message and "OCI" not in failure.message
    assert explain_start_failure(RLIMIT_NOFILE, spec).option == "--ulimit nofile=65535"
    assert explain_start_failure(RLIMIT_NOFILE).option == "--ulimit nofile=…"
    assert failure.exit_code == 125


def test_refused_capabilities_name_privileged_when_the_spec_is_privileged() -> None:
    assert explain_start_failure(CAPS, RunSpec(image="i", privileged=True)).option == "--privileged"
    assert explain_start_failure(CAPS, RunSpec(image="i", cap_add=("SYS_PTRACE",))).option == (
        "--cap-add SYS_PTRACE"
    )


def test_a_missing_command_exits_127_like_docker() -> None:
    failure = explain_start_failure(NOT_FOUND)
    assert failure.exit_code == 127
    assert "no-such-cmd" in failure.message and "not found" in failure.message


def test_missing_device_and_group_name_the_option() -> None:
    assert explain_start_failure(DEVICE).option == "--device /dev/kfd"
    assert explain_start_failure(GROUP).option == "--group-add render"


def test_an_unknown_error_keeps_the_useful_tail() -> None:
    failure = explain_start_failure("OCI runtime create failed: something odd happened: unknown")
    assert failure.message.endswith("something odd happened")


# -- choice and detection ------------------------------------------------------------------


@pytest.fixture
def ping_socket(tmp_path: Path) -> Iterator[Path]:
    """A unix socket answering GET /_ping like dockerd."""
    path = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nApi-Version: 1.41\r\n\r\nOK")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join()
    server.close()


def _bin_dir(tmp_path: Path, *names: str) -> str:
    directory = tmp_path / "bin"
    directory.mkdir(exist_ok=True)
    for name in names:
        exe = directory / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(directory)


def test_detection_keeps_the_api_version_the_ping_offered(ping_socket: Path) -> None:
    assert ping(str(ping_socket)) == "1.41"
    ctx = Context(env={"DOCKER_HOST": f"unix://{ping_socket}", "PATH": ""})
    assert choose_engine(ctx) == EngineChoice(kind="docker-api", api_offered="1.41")
    assert choose_engine(ctx, "docker-api") == EngineChoice(kind="docker-api")  # not asked


@pytest.mark.parametrize(
    ("answer", "offered"),
    [
        (b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nOK", ""),  # no header: the adapter asks
        (b"HTTP/1.0 200 OK\r\napi-version:  1.44 \r\n\r\nOK", "1.44"),
        (b"HTTP/1.0 200 OK\r\nApi-Version: latest\r\n\r\nOK", ""),  # asked again, strictly
        (b"HTTP/1.0 200 OK\r\nApi-Version: 1.2.3\r\n\r\nOK", ""),
        (b"HTTP/1.0 500 Oops\r\nApi-Version: 1.44\r\n\r\n", None),
    ],
)
def test_a_ping_offers_only_a_plain_version(
    tmp_path: Path, answer: bytes, offered: str | None
) -> None:
    path = tmp_path / "p.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert ping(str(path)) == offered
    finally:
        thread.join(5)
        server.close()


def test_a_socket_that_answers_ping_selects_docker_api(ping_socket: Path, tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{ping_socket}", "PATH": _bin_dir(tmp_path, "docker")}
    assert socket_answers(str(ping_socket))
    assert detect_engine(env) == "docker-api"


def test_without_a_socket_the_docker_cli_then_podman_is_chosen(tmp_path: Path) -> None:
    dead = f"unix://{tmp_path / 'nothing.sock'}"
    assert detect_engine({"DOCKER_HOST": dead, "PATH": _bin_dir(tmp_path, "docker", "podman")}) == (
        "docker-cli"
    )
    other = tmp_path / "other"
    other.mkdir()
    assert detect_engine({"DOCKER_HOST": dead, "PATH": _bin_dir(other, "podman")}) == "podman"


def test_no_engine_at_all_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable) as info:
        detect_engine({"DOCKER_HOST": f"unix://{tmp_path / 'x.sock'}", "PATH": str(tmp_path)})
    assert info.value.hint == START_HINT
    assert "systemctl start docker" in str(info.value)
    assert info.value.exit_code == 4


def test_a_docker_cli_context_selects_the_cli(
    ping_socket: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "dockercfg"
    config.mkdir()
    (config / "config.json").write_text('{"currentContext": "remote-box"}')
    env = {"DOCKER_CONFIG": str(config), "PATH": _bin_dir(tmp_path, "docker")}
    # the default socket answers: still the CLI, because the context points elsewhere
    monkeypatch.setattr("rocmenv.engine.select.DEFAULT_SOCKET", str(ping_socket))
    assert detect_engine(env) == "docker-cli"
    # the default context: the default socket decides (answers → API, silent → CLI)
    default = {**env, "DOCKER_CONTEXT": "default", "DOCKER_CONFIG": str(tmp_path)}
    assert detect_engine(default) == "docker-api"
    monkeypatch.setattr("rocmenv.engine.select.DEFAULT_SOCKET", str(tmp_path / "none.sock"))
    assert detect_engine(default) == "docker-cli"
    # DOCKER_CONTEXT=default wins over the config's currentContext (as in the docker CLI)
    monkeypatch.setattr("rocmenv.engine.select.DEFAULT_SOCKET", str(ping_socket))
    assert detect_engine({**env, "DOCKER_CONTEXT": "default"}) == "docker-api"
    assert detect_engine({**env, "DOCKER_CONTEXT": "remote-box"}) == "docker-cli"


def test_tcp_docker_host_selects_docker_api_without_probing(tmp_path: Path) -> None:
    assert (
        detect_engine({"DOCKER_HOST": "tcp://127.0.0.1:1", "PATH": str(tmp_path)}) == "docker-api"
    )


def test_engine_precedence_is_flag_environment_profile_file_auto(tmp_path: Path) -> None:
    """docs/configuration.md "Precedence": flag > ROCMENV_* environment > profile > project
    file > default."""
    from rocmenv.settings.choices import EngineName
    from rocmenv.settings.resolve import Flags, settings_for

    def engine_name(
        ctx: Context, *, flag: EngineName | None = None, profile: str = "auto", config: str = "auto"
    ) -> str:
        (tmp_path / ".git").mkdir(exist_ok=True)
        (tmp_path / "rocmenv.toml").write_text(
            f'engine = "{config}"\ndefault-profile = "p"\n[profiles.p]\nengine = "{profile}"\n'
        )
        return settings_for(ctx, Flags(engine=flag)).engine

    plain = Context(env={"DOCKER_HOST": "tcp://127.0.0.1:1", "PATH": str(tmp_path)}, cwd=tmp_path)
    env = Context(env={**plain.env, "ROCMENV_ENGINE": "podman"}, cwd=tmp_path)
    assert engine_name(env, flag="docker-cli", profile="docker-api", config="docker-api") == (
        "docker-cli"
    )
    assert engine_name(env, flag=None, profile="docker-cli", config="docker-api") == "podman"
    assert engine_name(env, flag="auto", profile="docker-cli") == "podman"
    assert engine_name(plain, flag=None, profile="docker-cli", config="podman") == "docker-cli"
    assert engine_name(plain, flag=None, profile="auto", config="podman") == "podman"
    assert engine_name(plain, profile="auto", config="auto") == "auto"
    assert choose_engine_kind(plain, "auto") == "docker-api"  # DOCKER_HOST=tcp://…
    assert choose_engine_kind(plain, "podman") == "podman"
    with pytest.raises(UsageError, match="ROCMENV_ENGINE"):
        engine_name(Context(env={"ROCMENV_ENGINE": "dockr"}, cwd=tmp_path))


def test_owner_labels_identify_this_process_and_its_start() -> None:
    labels = Identity.current().labels()
    assert labels["rocmenv.owner-pid"] == str(os.getpid())
    assert labels["rocmenv.owner-host"] == socket.gethostname()
    assert labels["rocmenv.owner-start"] == process_start(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_start(child.pid) is None  # reaped: gone
    assert process_start(2**22 + 12345) is None


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["shell", "--help"],
                                  ["options", "--help"], ["gpus", "--help"], ["gc", "--help"]])  # fmt: skip
def test_help_imports_neither_engine_library(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from rocmenv.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('docker', 'python_on_whales', 'pydantic', 'requests') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_pull_progress_redraws_in_place_on_a_terminal() -> None:
    from rocmenv.engine.protocol import PullEvent
    from rocmenv.run.progress import PullDisplay
    from rocmenv.run.pull import PullPlan, PullResult

    term = _Terminal()
    clock = iter(float(i) for i in range(100))
    display = PullDisplay(term, "img:1", tty=True, github=False, clock=lambda: next(clock))
    display.begin(PullPlan(image="img:1"))
    display.event(
        PullEvent(layer="a" * 12, status="Downloading", current=5_000_000, total=10_000_000)
    )
    display.done(PullResult(image="img:1", total_bytes=0, missing_bytes=0, seconds=2, attempts=1))
    text = term.getvalue()
    assert text.startswith("rocmenv: pulling img:1")
    assert "5.0 MB/10.0 MB (50%)" in text and "\r\x1b[1A\x1b[J" in text  # 2 rows erased
    assert text.endswith("rocmenv: pulled img:1: 10.0 MB in 2s (5.0 MB/s)\n")


def test_an_overlay_the_engine_cannot_mount_is_named_as_the_checkouts_view() -> None:
    """Issue 31: Docker mounts the view's overlay volume at the start; an engine host without
    overlayfs (or a lower directory it cannot use) says so in rocmenv's words."""
    text = (
        "Error response from daemon: error while mounting volume '/var/lib/docker/volumes/"
        "abc/_data': failed to mount local volume: mount overlay:/var/lib/docker/volumes/abc/"
        "_data, flags: 0x0, data: lowerdir=/w/repo,upperdir=/u,workdir=/w: invalid argument"
    )
    failure = explain_start_failure(text)
    assert failure.option == "--untrusted (the checkout's view)"
    assert "copy-on-write view" in failure.message and "invalid argument" in failure.message
