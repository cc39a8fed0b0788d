"""The standard-library Engine API transport, against a unix socket serving canned replies,
and the create body the docker-api adapter sends."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv.container.render import create_body, parse_bytes
from rocmenv.container.runspec import BindMount, Device, EnvVar, RunSpec
from rocmenv.engine.answer import MAX_BODY
from rocmenv.engine.attach import demux
from rocmenv.engine.wire import (
    API_MAX,
    UnixWire,
    WireStatus,
    WireTimeout,
    WireUnavailable,
    quote_ref,
)
from rocmenv.errors import EngineError, EngineProtocolError
from rocmenv.settings.profiles import Ulimit


class Server:
    """Answers each connection with the next canned reply; records the requests."""

    def __init__(self, path: Path, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while self.replies:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        while len(body) < int(line.split(b":")[1]):
                            body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                reply = self.replies.pop(0)
                if reply == b"SLEEP":
                    threading.Event().wait(2)
                    continue
                with contextlib.suppress(OSError):  # the client may hang up on a bad answer
                    conn.sendall(reply)

    def close(self) -> None:
        self.sock.close()


PING = b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Length: 2\r\n\r\nOK"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[object]:
    servers: list[Server] = []

    def start(*replies: bytes) -> tuple[UnixWire, Server]:
        path = tmp_path / f"s{len(servers)}.sock"
        server = Server(path, [PING, *replies])
        servers.append(server)
        return UnixWire(str(path)), server

    yield start
    for s in servers:
        s.close()


def test_content_length_body_and_versioned_path(serve) -> None:
    wire, server = serve(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"Id":"ab"}')
    status, _headers, body = wire.request(
        "POST", "/containers/create", query={"name": "x"}, body={"Image": "i"}
    )
    assert (status, json.loads(body)) == (200, {"Id": "ab"})
    sent = server.requests[1]
    assert sent.startswith(b"POST /v1.41/containers/create?name=x HTTP/1.1\r\n")
    assert sent.endswith(b'{"Image": "i"}')


def test_chunked_body_is_decoded(serve) -> None:
    reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"Sta\r\nb;ext=1\r\ntusCode":3}\r\n0\r\n\r\n'
    )
    wire, _ = serve(reply)
    _, _, body = wire.request("POST", "/containers/x/wait")
    assert json.loads(body) == {"StatusCode": 3}


def test_body_until_close_and_error_status(serve) -> None:
    wire, _ = serve(b'HTTP/1.1 404 Not Found\r\n\r\n{"message":"No such image: x"}')
    status, _, body = wire.request("GET", "/images/x/json")
    assert status == 404 and b"No such image" in body


def test_hijack_keeps_stream_bytes_that_came_with_the_headers(serve) -> None:
    frame = b"\x01\x00\x00\x00\x00\x00\x00\x03hi\n"
    wire, server = serve(b"HTTP/1.1 101 UPGRADED\r\nUpgrade: tcp\r\n\r\n" + frame)
    sock, initial = wire.hijack("/containers/x/attach", query={"stream": 1, "stdout": 1})
    sock.close()
    assert initial == frame
    assert b"Upgrade: tcp" in server.requests[1]


def test_hijack_error_carries_the_message(serve) -> None:
    wire, _ = serve(
        b'HTTP/1.1 404 Not Found\r\nContent-Length: 28\r\n\r\n{"message":"No such cont x"}'
    )
    with pytest.raises(WireStatus) as info:
        wire.hijack("/containers/x/attach")
    assert info.value.status == 404 and info.value.message == "No such cont x"


def test_timeout_and_unreachable_socket(serve, tmp_path: Path) -> None:
    wire, _ = serve(b"SLEEP")
    with pytest.raises(WireTimeout):
        wire.request("POST", "/containers/x/wait", timeout=0.3)
    with pytest.raises(WireUnavailable):
        UnixWire(str(tmp_path / "absent.sock")).request("GET", "/version")


def test_references_keep_their_slashes_and_colons() -> None:
    assert quote_ref("127.0.0.1:5000/rocm/sgl-dev:v1") == "127.0.0.1:5000/rocm/sgl-dev:v1"
    assert quote_ref("r@sha256:ab") == "r@sha256:ab"
    assert quote_ref("a b") == "a%20b"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("32g", 32 << 30),
        ("512m", 512 << 20),
        ("1.5g", 3 << 29),
        ("64", 64),
        ("10kb", 10240),
    ],
)
def test_sizes_are_parsed_as_docker_does(text: str, size: int) -> None:
    assert parse_bytes(text) == size


def test_demux_splits_frames() -> None:
    data = b"\x01\x00\x00\x00\x00\x00\x00\x02ab" + b"\x02\x00\x00\x00\x00\x00\x00\x01c"
    assert demux(data) == [(1, b"ab"), (2, b"c")]


def test_create_body_matches_what_the_docker_cli_sends() -> None:
    spec = RunSpec(
        image="img:1",
        command=("python", "-V"),
        devices=(Device(host="/h/kfd", container="/dev/kfd"),),
        group_add=("44",),
        cap_add=("SYS_PTRACE", "all"),
        security_opt=("seccomp=unconfined",),
        ipc="host",
        shm_size="32g",
        memory="0",
        memory_swap="-1",
        ulimits=(Ulimit(name="stack", soft=1, hard=1), Ulimit(name="memlock", soft=-1, hard=-1)),
        mounts=(BindMount(source="/a", target="/b", readonly=True),),
        env=(EnvVar(name="A", value="1"), EnvVar(name="UNSET", value=None, source="host")),
        workdir="/w",
        labels=(("k", "v"),),
    )
    body = create_body(spec, tty=False, stdin_open=True)
    host = body["HostConfig"]
    assert body["Cmd"] == ["python", "-V"] and body["Env"] == ["A=1"] and body["WorkingDir"] == "/w"
    assert body["OpenStdin"] and body["StdinOnce"] and not body["Tty"]
    assert host["Devices"] == [
        {"PathOnHost": "/h/kfd", "PathInContainer": "/dev/kfd", "CgroupPermissions": "rwm"}
    ]
    assert host["CapAdd"] == ["CAP_SYS_PTRACE", "ALL"]
    assert [u["Name"] for u in host["Ulimits"]] == ["memlock", "stack"]
    assert host["ShmSize"] == 32 << 30 and host["Memory"] == 0 and host["MemorySwap"] == -1
    assert host["Mounts"] == [{"Type": "bind", "Source": "/a", "Target": "/b", "ReadOnly": True}]
    assert host["IpcMode"] == "host" and "NetworkMode" not in host


# ------------------------------------------------------------------ malformed answers

OK_HEAD = b"HTTP/1.1 200 OK\r\n"


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        (b"garbage\r\n\r\n", "status line"),
        (b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n", "status line"),
        (b"HTTP/1.1\r\n\r\n", "status line"),
        (b"HTTP/1.1 999 What\r\n\r\n", "status line"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
        (OK_HEAD + b"Content-Length: abc\r\n\r\n", "Content-Length"),
        (OK_HEAD + b"Content-Length: -5\r\n\r\n", "Content-Length"),
        (OK_HEAD + b"Content-Length: 1e3\r\n\r\n", "Content-Length"),
        (OK_HEAD + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nab", "Content-Length"),
        (OK_HEAD + b"Content-Length: 99999999999999\r\n\r\n{}", "bytes (more than"),
        (OK_HEAD + b"Content-Length: 100\r\n\r\n" + b"x" * 10, "ends after 10 of 100"),
        (OK_HEAD + b"No colon here\r\n\r\n", "header line"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", "chunk size"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n\r\n", "chunk size"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n\r\n\r\n", "chunk size"),
        (
            OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
            "chunk size",
        ),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\nfffffff\r\nab", "body over"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n10\r\nshort", "ends early"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n", "CRLF"),
        (OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\nab\r\n", "before the last"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "inside the headers"),
    ],
)
def test_a_malformed_answer_is_an_engine_error(serve, reply: bytes, detail: str) -> None:
    wire, _ = serve(reply)
    with pytest.raises(EngineProtocolError) as info:
        wire.request("GET", "/containers/x/json")
    assert isinstance(info.value, EngineError) and info.value.exit_code == 4
    assert detail in info.value.what
    assert "GET /v1.41/containers/x/json" in info.value.what  # names the request


def test_a_body_until_close_is_capped(serve) -> None:
    wire, _ = serve(OK_HEAD + b"\r\n" + b"x" * (MAX_BODY + 65536))
    with pytest.raises(EngineProtocolError, match="body over"):
        wire.request("GET", "/containers/x/logs")


def test_a_malformed_hijack_answer_is_an_engine_error(serve) -> None:
    wire, _ = serve(b"HTTP/1.1 1O1 UPGRADED\r\n\r\n")
    with pytest.raises(EngineProtocolError, match="status line"):
        wire.hijack("/containers/x/attach")


def _ping(version: bytes | None) -> bytes:
    header = b"Api-Version: " + version + b"\r\n" if version is not None else b""
    return b"HTTP/1.1 200 OK\r\n" + header + b"Content-Length: 2\r\n\r\nOK"


VERSION_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


@pytest.mark.parametrize(
    ("offered", "spoken"),
    [(b"1.41", "1.41"), (b"1.24", "1.24"), (API_MAX.encode(), API_MAX), (b"1.99", API_MAX),
     (b"2.0", API_MAX)],
)  # fmt: skip
def test_the_api_version_is_the_lower_of_ours_and_the_daemons(
    tmp_path: Path, offered: bytes, spoken: str
) -> None:
    server = Server(tmp_path / "v.sock", [_ping(offered), VERSION_OK])
    try:
        wire = UnixWire(str(tmp_path / "v.sock"))
        wire.request("GET", "/version")
        assert server.requests[1].startswith(f"GET /v{spoken}/version ".encode())
        assert wire.api_version == spoken
    finally:
        server.close()


def test_without_a_ping_header_the_version_comes_from_slash_version(tmp_path: Path) -> None:
    body = b'{"ApiVersion":"1.30"}'
    version = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server = Server(tmp_path / "v.sock", [_ping(None), version, VERSION_OK])
    try:
        wire = UnixWire(str(tmp_path / "v.sock"))
        wire.request("GET", "/info")
        assert server.requests[1].startswith(b"GET /version ")
        assert server.requests[2].startswith(b"GET /v1.30/info ")
    finally:
        server.close()


@pytest.mark.parametrize(("offered", "spoken"), [("1.41", "1.41"), ("1.99", API_MAX)])
def test_a_version_a_ping_already_offered_is_spoken_without_asking_again(
    tmp_path: Path, offered: str, spoken: str
) -> None:
    server = Server(tmp_path / "v.sock", [VERSION_OK])  # no /_ping
    try:
        wire = UnixWire(str(tmp_path / "v.sock"), offered=offered)
        wire.request("GET", "/version")
        assert server.requests[0].startswith(f"GET /v{spoken}/version ".encode())
    finally:
        server.close()


def test_a_too_old_version_a_ping_offered_is_refused_as_when_asked(tmp_path: Path) -> None:
    with pytest.raises(EngineProtocolError, match="older than"):
        UnixWire(str(tmp_path / "none.sock"), offered="1.12").request("GET", "/version")


@pytest.mark.parametrize("offered", [b"1.12", b"latest", b"1.2.3", b"1." + b"9" * 50])
def test_a_too_old_or_malformed_api_version_is_refused(tmp_path: Path, offered: bytes) -> None:
    server = Server(tmp_path / "v.sock", [_ping(offered)])
    try:
        with pytest.raises(EngineProtocolError, match="API"):
            UnixWire(str(tmp_path / "v.sock")).request("GET", "/version")
    finally:
        server.close()


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'"x"', b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000],
)
def test_the_adapter_turns_a_non_json_answer_into_an_engine_error(
    tmp_path: Path, body: bytes
) -> None:
    """Through the CLI: `rocmenv gc` against a socket that answers junk exits 4, no traceback."""
    import io

    from rocmenv.cli import main
    from rocmenv.context import Context

    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server = Server(tmp_path / "d.sock", [PING, reply, reply, reply])
    try:
        out, err = io.StringIO(), io.StringIO()
        env = {"DOCKER_HOST": f"unix://{tmp_path / 'd.sock'}", "PATH": "/usr/bin:/bin"}
        ctx = Context(env=env, cwd=tmp_path, stdout=out, stderr=err)
        code = main(["gc", "--engine", "docker-api"], ctx=ctx)
    finally:
        server.close()
    assert code == 4, err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert "docker-api: listing containers" in err.getvalue()


def test_an_attach_stream_ending_inside_a_frame_is_reported_not_dropped(tmp_path: Path) -> None:
    from rocmenv.engine.attach import AttachStream

    ours, theirs = socket.socketpair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    whole = b"\x01\x00\x00\x00\x00\x00\x00\x03hi\n"
    cut = b"\x02\x00\x00\x00\x00\x00\x01\x00" + b"x" * 10  # announces 256 bytes, sends 10
    stream = AttachStream(
        ours, whole, stdout_fd=out_w, stderr_fd=err_w, stdin_fd=None, tty=False,
        start=lambda: None, resize=lambda h, w: None,
    )  # fmt: skip
    stream.start()
    theirs.sendall(cut)
    theirs.close()
    stream.join(5)
    stream.close()
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
        assert out.read() == b"hi\n"
        assert b"ended inside a frame (18 bytes" in err.read()
