"""The standard-library Engine API transport, against a unix socket serving canned replies,
and the create body the docker-api adapter sends."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv.engine.docker_api import create_body, demux, parse_bytes
from rocmenv.engine.wire import UnixWire, WireStatus, WireTimeout, WireUnavailable, quote_ref
from rocmenv.profiles import Ulimit
from rocmenv.runspec import BindMount, Device, EnvVar, RunSpec


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


def test_content_length_body_and_versioned_path(serve) -> None:  # type: ignore[no-untyped-def]
    wire, server = serve(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"Id":"ab"}')
    status, _headers, body = wire.request(
        "POST", "/containers/create", query={"name": "x"}, body={"Image": "i"}
    )
    assert (status, json.loads(body)) == (200, {"Id": "ab"})
    sent = server.requests[1]
    assert sent.startswith(b"POST /v1.41/containers/create?name=x HTTP/1.1\r\n")
    assert sent.endswith(b'{"Image": "i"}')


def test_chunked_body_is_decoded(serve) -> None:  # type: ignore[no-untyped-def]
    reply = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"Sta\r\nb;ext=1\r\ntusCode":3}\r\n0\r\n\r\n'
    )
    wire, _ = serve(reply)
    _, _, body = wire.request("POST", "/containers/x/wait")
    assert json.loads(body) == {"StatusCode": 3}


def test_body_until_close_and_error_status(serve) -> None:  # type: ignore[no-untyped-def]
    wire, _ = serve(b'HTTP/1.1 404 Not Found\r\n\r\n{"message":"No such image: x"}')
    status, _, body = wire.request("GET", "/images/x/json")
    assert status == 404 and b"No such image" in body


def test_hijack_keeps_stream_bytes_that_came_with_the_headers(serve) -> None:  # type: ignore[no-untyped-def]
    frame = b"\x01\x00\x00\x00\x00\x00\x00\x03hi\n"
    wire, server = serve(b"HTTP/1.1 101 UPGRADED\r\nUpgrade: tcp\r\n\r\n" + frame)
    sock, initial = wire.hijack("/containers/x/attach", query={"stream": 1, "stdout": 1})
    sock.close()
    assert initial == frame
    assert b"Upgrade: tcp" in server.requests[1]


def test_hijack_error_carries_the_message(serve) -> None:  # type: ignore[no-untyped-def]
    wire, _ = serve(
        b'HTTP/1.1 404 Not Found\r\nContent-Length: 28\r\n\r\n{"message":"No such cont x"}'
    )
    with pytest.raises(WireStatus) as info:
        wire.hijack("/containers/x/attach")
    assert info.value.status == 404 and info.value.message == "No such cont x"


def test_timeout_and_unreachable_socket(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
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
