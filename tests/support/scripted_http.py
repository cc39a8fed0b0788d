"""A loopback HTTP server answering from a Python function, recording every request: for unit
tests of the registry client that need an answer the real Distribution registry never gives
(a token server's refusal, a redirect without ``Location``, a manifest without a config).

    with ScriptedServer(lambda req: Answer(200, {"Content-Type": "text/plain"}, b"hi")) as srv:
        url = f"http://{srv.host}/v2/"
        ... srv.requests[0].headers["authorization"] ...

An answer that sets its own ``Content-Length`` is followed by closing the connection: a
longer announced length than the body sent is a connection dropped mid-body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True, kw_only=True)
class Request:
    method: str
    path: str  # with the query
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    header_lines: tuple[tuple[str, str], ...] = ()  # as sent, repeats kept


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class ScriptedServer:
    """``answer(request)`` decides each response; ``requests`` lists what arrived."""

    def __init__(self, answer: Callable[[Request], Answer]) -> None:
        self.requests: list[Request] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                req = Request(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                    header_lines=tuple(self.headers.items()),
                )
                owner.requests.append(req)
                out = answer(req)
                self.send_response(out.status)
                for name, value in out.headers.items():
                    self.send_header(name, value)
                if "Content-Length" in out.headers:  # a body cut short: then the line drops
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(out.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out.body)

            do_GET = do_HEAD = do_POST = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )  # shutdown() waits up to one poll: 0.5 s by default, per test

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
