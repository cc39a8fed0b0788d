"""A fault-injecting reverse proxy to put in front of a registry in tests.

::

    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        proxy.add_rule(Match(method="HEAD", path=r"/v2/.*/manifests/.*"), status(429,
                       headers={"Retry-After": "1"}), times=2)
        client = RegistryClient(mirror=proxy.url)   # http://127.0.0.1:PORT
        ...
        assert proxy.count(method="HEAD", path=r"/v2/.*/manifests/.*") == 3

Requests are forwarded (method, path, query, headers including ``Host``, body) to the
upstream over a kept-alive connection and the response is returned as is, unless a
**rule** matches: rules are tried in the order added, the first one that matches and is
not spent fires its **fault**, and ``times`` (``None`` = forever) limits how often.
Every request is recorded in :attr:`FaultProxy.log` (``Authorization`` redacted), and
:meth:`FaultProxy.count` counts round trips.

The proxy also serves a tiny token endpoint (``/token``) issuing opaque bearer tokens,
so :func:`auth_challenge` can exercise the bearer flow in front of an open registry.

For "registry unreachable" tests: :class:`Unreachable` (a loopback port where nothing
listens — connection refused) and :class:`Blackhole` (accepts TCP, never answers).

Self-contained: standard library only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import email.utils
import hmac
import http.client
import json
import re
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

__all__ = [
    "AuthChallenge",
    "Blackhole",
    "CorruptBody",
    "Delay",
    "Drop",
    "Fault",
    "FaultProxy",
    "Hang",
    "IssuedToken",
    "LogEntry",
    "Match",
    "NonJson",
    "RewriteHeaders",
    "Rule",
    "Status",
    "Truncate",
    "Unreachable",
    "auth_challenge",
    "corrupt_body",
    "delay",
    "drop",
    "hang",
    "http_date",
    "non_json",
    "rewrite_headers",
    "status",
    "too_many_requests",
    "truncate",
]

MASK = "***"
Outcome = Literal["forwarded", "fault", "token", "upstream_error"]

# Hop-by-hop headers (RFC 9110 §7.6.1) plus the ones we recompute.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "content-length",
    }
)
_REPO_PATH = re.compile(r"/v2/(?P<name>.+?)/(?:tags/list|manifests/[^/]+|blobs/.+|referrers/[^/]+)")


def http_date(seconds_from_now: float) -> str:
    """An HTTP-date ``seconds_from_now`` in the future (for ``Retry-After``)."""
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


# --------------------------------------------------------------------------- faults


@dataclass(frozen=True, kw_only=True)
class Fault:
    """Base class of every fault."""

    def describe(self) -> str:
        return type(self).__name__.lower()


@dataclass(frozen=True, kw_only=True)
class Status(Fault):
    """Answer with ``code``, ``headers`` and ``body`` without asking the upstream."""

    code: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def describe(self) -> str:
        return f"status({self.code})"


@dataclass(frozen=True, kw_only=True)
class Hang(Fault):
    """Read the request, send nothing for ``seconds``, then close the connection."""

    seconds: float

    def describe(self) -> str:
        return f"hang({self.seconds:g})"


@dataclass(frozen=True, kw_only=True)
class Truncate(Fault):
    """Forward; send upstream's status and headers (real Content-Length) but only
    the first ``n_bytes`` of the body, then close the connection."""

    n_bytes: int

    def describe(self) -> str:
        return f"truncate({self.n_bytes})"


@dataclass(frozen=True, kw_only=True)
class CorruptBody(Fault):
    """Forward, but change body bytes; Content-Length and Docker-Content-Digest are kept.

    Default: if the body contains a ``sha256:<hex>`` digest, one hex character of the
    first one is changed (the JSON stays valid, only the digest no longer matches);
    otherwise the middle byte is bit-flipped. ``offset`` flips the byte at that offset.
    """

    offset: int | None = None

    def describe(self) -> str:
        return "corrupt_body()" if self.offset is None else f"corrupt_body({self.offset})"

    def apply(self, body: bytes) -> bytes:
        if not body:
            return body
        if self.offset is None:
            m = re.search(rb"sha256:[0-9a-f]{64}", body)
            if m is not None:
                i = m.end() - 1
                repl = b"0" if body[i : i + 1] != b"0" else b"1"
                return body[:i] + repl + body[i + 1 :]
            i = len(body) // 2
        else:
            i = self.offset % len(body)
        return body[:i] + bytes([body[i] ^ 0x5A]) + body[i + 1 :]


@dataclass(frozen=True, kw_only=True)
class NonJson(Fault):
    """Answer ``status`` with ``Content-Type`` ``content_type`` and ``body`` (not JSON)."""

    body: bytes = b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"
    content_type: str = "text/html"
    status: int = 200

    def describe(self) -> str:
        return f"non_json({self.status})"


@dataclass(frozen=True, kw_only=True)
class Drop(Fault):
    """Read the request and close the connection without any response."""

    def describe(self) -> str:
        return "drop()"


@dataclass(frozen=True, kw_only=True)
class Delay(Fault):
    """Wait ``seconds``, then forward normally."""

    seconds: float

    def describe(self) -> str:
        return f"delay({self.seconds:g})"


@dataclass(frozen=True, kw_only=True)
class RewriteHeaders(Fault):
    """Forward, then set (``set``) and/or remove (``remove``) response headers."""

    set: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()

    def describe(self) -> str:
        names = [k for k, _ in self.set] + [f"-{k}" for k in self.remove]
        return f"rewrite_headers({','.join(names)})"


@dataclass(frozen=True, kw_only=True)
class AuthChallenge(Fault):
    """Answer ``401`` + ``WWW-Authenticate: Bearer realm,service,scope`` until the request
    carries an acceptable ``Authorization: Bearer`` token; then it passes through.

    ``realm=None`` points at the proxy's own ``/token`` endpoint; then only tokens it
    issued, unexpired and covering the needed scope, are accepted (else 401 with
    ``error="invalid_token"`` or ``"insufficient_scope"``). With an external ``realm``
    any bearer token is accepted. Passing requests do not count against ``times``.
    """

    realm: str | None = None
    service: str = "faultproxy"

    def describe(self) -> str:
        return "auth_challenge()"


def status(code: int, headers: Mapping[str, str] | None = None, body: bytes = b"") -> Status:
    return Status(code=code, headers=tuple((headers or {}).items()), body=body)


def too_many_requests(retry_after: int | float | str | None = 1) -> Status:
    """429; ``retry_after`` seconds (number) or an HTTP-date string (see :func:`http_date`)."""
    headers = {"Content-Type": "application/json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
    body = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"rate limited"}]}'
    return status(429, headers, body)


def hang(seconds: float) -> Hang:
    return Hang(seconds=seconds)


def truncate(n_bytes: int) -> Truncate:
    return Truncate(n_bytes=n_bytes)


def corrupt_body(offset: int | None = None) -> CorruptBody:
    return CorruptBody(offset=offset)


def non_json(
    body: bytes = b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>",
    *,
    content_type: str = "text/html",
    status: int = 200,
) -> NonJson:
    return NonJson(body=body, content_type=content_type, status=status)


def drop() -> Drop:
    return Drop()


def delay(seconds: float) -> Delay:
    return Delay(seconds=seconds)


def rewrite_headers(
    set: Mapping[str, str] | None = None, remove: Iterable[str] = ()
) -> RewriteHeaders:
    return RewriteHeaders(set=tuple((set or {}).items()), remove=tuple(remove))


def auth_challenge(realm_url: str | None = None, service: str = "faultproxy") -> AuthChallenge:
    return AuthChallenge(realm=realm_url, service=service)


# --------------------------------------------------------------------------- rules & log


@dataclass(frozen=True, kw_only=True)
class Match:
    """Which requests a rule applies to; ``None`` fields match anything.

    ``method``: one method or several (case-insensitive). ``path``: a regex that must
    match the whole path (query excluded). ``query``: a regex searched in the raw query.
    """

    method: str | tuple[str, ...] | None = None
    path: str | None = None
    query: str | None = None

    def matches(self, method: str, path: str, query: str) -> bool:
        if self.method is not None:
            wanted = (self.method,) if isinstance(self.method, str) else self.method
            if method.upper() not in {m.upper() for m in wanted}:
                return False
        if self.path is not None and re.fullmatch(self.path, path) is None:
            return False
        return self.query is None or re.search(self.query, query) is not None


class Rule:
    """A match, a fault and how many more times it may fire (``None`` = forever)."""

    def __init__(self, match: Match, fault: Fault, times: int | None, name: str) -> None:
        if times is not None and times < 0:
            raise ValueError("times must be >= 0 or None")
        self.match = match
        self.fault = fault
        self.times = times
        self.name = name
        self.hits = 0

    @property
    def remaining(self) -> int | None:
        return None if self.times is None else max(0, self.times - self.hits)

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, {self.match!r}, hits={self.hits}, times={self.times})"


@dataclass(frozen=True, kw_only=True)
class LogEntry:
    """One request the proxy received."""

    seq: int
    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]  # as received, Authorization redacted
    body_size: int
    status: int | None  # None when no response was sent (drop, hang)
    outcome: Outcome
    rule: str | None  # name of the rule that fired, if any
    started: float
    duration: float

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None


@dataclass(frozen=True, kw_only=True)
class IssuedToken:
    token: str
    user: str | None
    scopes: tuple[str, ...]
    expires: float


def _redact_auth(value: str) -> str:
    scheme, _, _ = value.partition(" ")
    return f"{scheme} {MASK}" if scheme.lower() in ("basic", "bearer") else MASK


def _needed_scope(method: str, path: str) -> tuple[str, str, str] | None:
    """``(type, name, action)`` a request needs, or ``None`` (``/v2/``)."""
    if path.rstrip("/") in ("/v2", ""):
        return None
    if path.startswith("/v2/_catalog"):
        return ("registry", "catalog", "*")
    m = _REPO_PATH.fullmatch(path)
    if m is None:
        return None
    verb = method.upper()
    action = {"GET": "pull", "HEAD": "pull", "DELETE": "delete"}.get(verb, "push")
    return ("repository", m.group("name"), action)


def _covers(scopes: Iterable[str], need: tuple[str, str, str]) -> bool:
    typ, name, action = need
    for sc in scopes:
        first, last = sc.find(":"), sc.rfind(":")
        if first <= 0 or last <= first:
            continue
        actions = sc[last + 1 :].split(",")
        if (
            sc[:first] == typ
            and sc[first + 1 : last] == name
            and (action in actions or "*" in actions)
        ):
            return True
    return False


# --------------------------------------------------------------------------- proxy


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultProxy


class FaultProxy:
    """Threaded reverse proxy with fault rules; a context manager bound to 127.0.0.1:0.

    ``token_users``: ``None`` — the ``/token`` endpoint gives anyone a token for every
    scope asked; a mapping — Basic credentials are required (wrong/missing → 401).
    """

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream_timeout: float = 30.0,
        token_path: str = "/token",
        token_users: Mapping[str, str] | None = None,
        token_expires_in: int = 300,
    ) -> None:
        up = upstream.removeprefix("http://").rstrip("/")
        if "/" in up or ":" not in up:
            raise ValueError(f"upstream must be HOST:PORT (plain HTTP), got {upstream!r}")
        self.upstream = up
        self.upstream_timeout = upstream_timeout
        self.token_path = token_path
        self.token_users = dict(token_users) if token_users is not None else None
        self.token_expires_in = token_expires_in
        self._bind = (host, port)
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._log: list[LogEntry] = []
        self._tokens: dict[str, IssuedToken] = {}
        self._seq = 0
        self._closing = threading.Event()
        self._clients: set[socket.socket] = set()
        self._server: _Server | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle

    def start(self) -> FaultProxy:
        if self._server is not None:
            return self
        self._closing.clear()
        server = _Server(self._bind, _ProxyHandler)
        server.proxy = self
        self._server = server
        self._port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            clients = list(self._clients)
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound port (still readable after :meth:`close`)."""
        if self._port is None:
            raise RuntimeError("FaultProxy was never started; use it as a context manager")
        return self._port

    @property
    def host(self) -> str:
        """``"127.0.0.1:PORT"`` — use it as a registry host/mirror."""
        return f"{self._bind[0]}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def token_url(self) -> str:
        return f"{self.url}{self.token_path}"

    # ---- unreachable helpers

    @staticmethod
    def unreachable() -> Unreachable:
        """A loopback port where nothing listens (connection refused)."""
        return Unreachable()

    @staticmethod
    def blackhole() -> Blackhole:
        """A loopback port that accepts connections and never answers."""
        return Blackhole()

    # ---- rules

    def add_rule(
        self,
        match: Match | None,
        fault: Fault,
        times: int | None = None,
        *,
        name: str | None = None,
    ) -> Rule:
        """Add a rule (tried after the existing ones); ``match=None`` matches everything."""
        rule = Rule(match or Match(), fault, times, name or fault.describe())
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove_rule(self, rule: Rule) -> None:
        with self._lock:
            self._rules.remove(rule)

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def _select(self, method: str, path: str, query: str, authorization: str | None) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.spent or not rule.match.matches(method, path, query):
                    continue
                if isinstance(rule.fault, AuthChallenge) and (
                    path == self.token_path
                    or self._auth_ok_locked(rule.fault, method, path, authorization)
                ):
                    continue
                rule.hits += 1
                return rule
        return None

    def _auth_ok_locked(
        self, fault: AuthChallenge, method: str, path: str, authorization: str | None
    ) -> bool:
        return self._auth_problem_locked(fault, method, path, authorization) is None

    def _auth_problem_locked(
        self, fault: AuthChallenge, method: str, path: str, authorization: str | None
    ) -> str | None:
        """``None`` if the request may pass, else the ``error=`` value for the challenge."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return ""
        if fault.realm is not None:
            return None
        issued = self._tokens.get(token.strip())
        if issued is None or issued.expires < time.time():
            return "invalid_token"
        need = _needed_scope(method, path)
        if need is not None and not _covers(issued.scopes, need):
            return "insufficient_scope"
        return None

    # ---- log

    @property
    def log(self) -> list[LogEntry]:
        """Every request received, oldest first (a copy)."""
        with self._lock:
            return list(self._log)

    def entries(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        status: int | None = None,
        outcome: Outcome | None = None,
        rule: str | Rule | None = None,
    ) -> list[LogEntry]:
        """Logged requests matching every filter given (``path`` regex must match fully)."""
        rule_name = rule.name if isinstance(rule, Rule) else rule
        return [
            e
            for e in self.log
            if (method is None or e.method.upper() == method.upper())
            and (path is None or re.fullmatch(path, e.path) is not None)
            and (status is None or e.status == status)
            and (outcome is None or e.outcome == outcome)
            and (rule_name is None or e.rule == rule_name)
        ]

    def count(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        status: int | None = None,
        outcome: Outcome | None = None,
        rule: str | Rule | None = None,
    ) -> int:
        """How many requests matched (round trips, token fetches included unless filtered)."""
        return len(self.entries(method, path, status=status, outcome=outcome, rule=rule))

    def reset_log(self) -> None:
        with self._lock:
            self._log.clear()

    @property
    def tokens(self) -> list[IssuedToken]:
        """Tokens the built-in endpoint issued."""
        with self._lock:
            return list(self._tokens.values())

    def _record(self, **kw: Any) -> None:
        with self._lock:
            self._seq += 1
            self._log.append(LogEntry(seq=self._seq, **kw))

    def _register_client(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._clients.add(sock)
            else:
                self._clients.discard(sock)

    # ---- built-in token endpoint

    def _issue_token(
        self, authorization: str | None, query: str, form: bytes | None
    ) -> tuple[int, dict[str, Any]]:
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        user: str | None = None
        password: str | None = None
        if form is not None:
            fparams = urllib.parse.parse_qs(form.decode("utf-8", "replace"), keep_blank_values=True)
            for k, v in fparams.items():
                params.setdefault(k, []).extend(v)
            if "username" in fparams:
                user, password = fparams["username"][0], (fparams.get("password") or [""])[0]
        scheme, _, cred = (authorization or "").partition(" ")
        if user is None and scheme.lower() == "basic":
            try:
                user, _, password = (
                    base64.b64decode(cred.strip(), validate=True).decode("utf-8").partition(":")
                )
            except (binascii.Error, UnicodeDecodeError):
                return 401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]}
        if self.token_users is not None:
            expected = self.token_users.get(user or "")
            if (
                user is None
                or expected is None
                or not hmac.compare_digest(expected.encode(), (password or "").encode())
            ):
                return 401, {
                    "errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}],
                    "details": "incorrect username or password",
                }
        scopes = tuple(s for v in params.get("scope", []) for s in v.split())
        now = time.time()
        token = "fpt-" + secrets.token_hex(16)
        issued = IssuedToken(
            token=token, user=user, scopes=scopes, expires=now + self.token_expires_in
        )
        with self._lock:
            self._tokens[token] = issued
        return 200, {
            "token": token,
            "access_token": token,
            "expires_in": self.token_expires_in,
            "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        }


class _Abort(Exception):
    """Stop handling this request: send nothing more and close the connection."""


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "faultproxy/1"
    timeout = 120  # idle keep-alive connections from tests eventually close
    server: _Server
    _upstream_conn: http.client.HTTPConnection | None = None

    def setup(self) -> None:
        super().setup()
        self.server.proxy._register_client(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.proxy._register_client(self.connection, False)
            if self._upstream_conn is not None:
                self._upstream_conn.close()
                self._upstream_conn = None

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    # every method goes through one dispatcher
    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    # ---- request side

    def _read_body(self) -> bytes | None:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks: list[bytes] = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        n = int(length)
        return self.rfile.read(n) if n > 0 else b""

    def _dispatch(self) -> None:
        proxy = self.server.proxy
        started = time.time()
        split = urllib.parse.urlsplit(self.path)
        path, query = split.path or "/", split.query
        method = self.command
        authorization = self.headers.get("Authorization")
        body = self._read_body()
        logged_headers = tuple(
            (k, _redact_auth(v) if k.lower() in ("authorization", "proxy-authorization") else v)
            for k, v in self.headers.items()
        )
        rule = proxy._select(method, path, query, authorization)
        # The log entry is committed just before the response's first byte is written
        # (or when the connection is dropped), so a client that has its answer can
        # count on the entry being there.
        self._pending: dict[str, Any] | None = {
            "method": method,
            "path": path,
            "query": query,
            "headers": logged_headers,
            "body_size": len(body or b""),
            "outcome": "fault" if rule is not None else "forwarded",
            "rule": rule.name if rule is not None else None,
            "started": started,
        }
        try:
            if rule is not None:
                self._apply(rule.fault, method, path, body, authorization)
            elif path == proxy.token_path and method in ("GET", "POST"):
                code, payload = proxy._issue_token(
                    authorization, query, body if method == "POST" else None
                )
                self._send(
                    code, [("Content-Type", "application/json")], _json(payload), outcome="token"
                )
            else:
                self._forward(method, body)
        except _Abort:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._commit(None)

    def _commit(self, status: int | None, outcome: Outcome | None = None) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if outcome is not None:
            pending["outcome"] = outcome
        started = pending["started"]
        self.server.proxy._record(status=status, duration=time.time() - started, **pending)

    # ---- response side

    def _send(
        self,
        code: int,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        reason: str | None = None,
        send_bytes: int | None = None,
        content_length: int | None = None,
        outcome: Outcome | None = None,
    ) -> int:
        """Write a response; returns ``code``. ``send_bytes`` truncates the body written."""
        self._commit(code, outcome)
        self.send_response_only(code, reason)
        names = {k.lower() for k, _ in headers}
        for k, v in headers:
            self.send_header(k, v)
        if "date" not in names:
            self.send_header("Date", self.date_time_string())
        no_body = self.command == "HEAD" or code in (204, 304) or 100 <= code < 200
        if "content-length" not in names and not (code in (204, 304) or 100 <= code < 200):
            length = len(body) if content_length is None else content_length
            self.send_header("Content-Length", str(length))
        self.end_headers()
        if not no_body:
            self.wfile.write(body if send_bytes is None else body[:send_bytes])
        self.wfile.flush()
        return code

    def _upstream(self, fresh: bool) -> tuple[http.client.HTTPConnection, bool]:
        proxy = self.server.proxy
        reused = self._upstream_conn is not None and not fresh
        if not reused:
            if self._upstream_conn is not None:
                self._upstream_conn.close()
            self._upstream_conn = http.client.HTTPConnection(
                proxy.upstream, timeout=proxy.upstream_timeout
            )
        assert self._upstream_conn is not None
        return self._upstream_conn, reused

    def _fetch(
        self, method: str, body: bytes | None
    ) -> tuple[int, str, list[tuple[str, str]], bytes, bool]:
        """Forward to the upstream; ``(status, reason, headers, body, had_length)``."""
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body or b""))))
        for attempt in (0, 1):
            conn, reused = self._upstream(fresh=attempt > 0)
            try:
                conn.putrequest(method, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    conn.putheader(k, v)
                conn.endheaders(body if body else None)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._upstream_conn = None
                if reused and attempt == 0:
                    continue  # stale kept-alive upstream connection: retry once on a new one
                raise
            except BaseException:
                conn.close()
                self._upstream_conn = None
                raise
            if resp.will_close:
                conn.close()
                self._upstream_conn = None
            out = [
                (k, v)
                for k, v in resp.getheaders()
                if k.lower() not in _HOP_BY_HOP or k.lower() == "content-length"
            ]
            had_length = any(k.lower() == "content-length" for k, _ in out)
            return resp.status, resp.reason, out, data, had_length
        raise AssertionError("unreachable")

    def _forward(self, method: str, body: bytes | None) -> int:
        try:
            code, reason, headers, data, _ = self._fetch(method, body)
        except OSError as exc:
            payload = {
                "errors": [
                    {
                        "code": "FAULTPROXY_UPSTREAM",
                        "message": f"upstream {self.server.proxy.upstream}: {exc}",
                    }
                ]
            }
            self._send(
                502,
                [("Content-Type", "application/json")],
                _json(payload),
                outcome="upstream_error",
            )
            return 502
        return self._send(code, headers, data, reason=reason)

    def _apply(
        self, fault: Fault, method: str, path: str, body: bytes | None, authorization: str | None
    ) -> int | None:
        proxy = self.server.proxy
        if isinstance(fault, Status):
            return self._send(fault.code, list(fault.headers), fault.body)
        if isinstance(fault, NonJson):
            return self._send(fault.status, [("Content-Type", fault.content_type)], fault.body)
        if isinstance(fault, Drop):
            raise _Abort
        if isinstance(fault, Hang):
            proxy._closing.wait(fault.seconds)
            raise _Abort
        if isinstance(fault, AuthChallenge):
            return self._challenge(fault, method, path, authorization)
        if isinstance(fault, Delay):
            if proxy._closing.wait(fault.seconds):
                raise _Abort
            return self._forward(method, body)
        # the rest transform a real upstream response
        try:
            code, reason, headers, data, had_length = self._fetch(method, body)
        except OSError:
            return self._forward(method, body)  # reports 502 the usual way
        if isinstance(fault, Truncate):
            if not had_length:
                headers.append(("Content-Length", str(len(data))))
            self.close_connection = True
            return self._send(code, headers, data, reason=reason, send_bytes=fault.n_bytes)
        if isinstance(fault, CorruptBody):
            return self._send(code, headers, fault.apply(data), reason=reason)
        if isinstance(fault, RewriteHeaders):
            drop_names = {k.lower() for k, _ in fault.set} | {k.lower() for k in fault.remove}
            kept = [(k, v) for k, v in headers if k.lower() not in drop_names]
            return self._send(code, kept + list(fault.set), data, reason=reason)
        raise TypeError(f"unknown fault {fault!r}")

    def _challenge(
        self, fault: AuthChallenge, method: str, path: str, authorization: str | None
    ) -> int:
        proxy = self.server.proxy
        with proxy._lock:
            error = proxy._auth_problem_locked(fault, method, path, authorization)
        realm = fault.realm or proxy.token_url
        params = [f'realm="{realm}"', f'service="{fault.service}"']
        need = _needed_scope(method, path)
        if need is not None:
            params.append(
                f'scope="{need[0]}:{need[1]}:{need[2] if need[2] != "push" else "pull,push"}"'
            )
        if error:
            params.append(f'error="{error}"')
        payload = {
            "errors": [
                {
                    "code": "DENIED" if error == "insufficient_scope" else "UNAUTHORIZED",
                    "message": "authentication required",
                    "detail": None,
                }
            ]
        }
        headers = [
            ("Content-Type", "application/json; charset=utf-8"),
            ("Docker-Distribution-Api-Version", "registry/2.0"),
            ("WWW-Authenticate", "Bearer " + ",".join(params)),
        ]
        return self._send(401, headers, _json(payload))


def _json(payload: Mapping[str, Any]) -> bytes:
    return (json.dumps(payload) + "\n").encode("utf-8")


# --------------------------------------------------------------------------- unreachable


class Unreachable:
    """A loopback port where nothing listens: connecting is refused.

    The port stays bound (not listening) while the context is open, so nothing else
    can take it.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._addr: tuple[str, int] = self._sock.getsockname()

    @property
    def host(self) -> str:
        return f"{self._addr[0]}:{self._addr[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Unreachable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Blackhole:
    """Accepts TCP connections, reads whatever arrives, never answers.

    ``connections`` counts accepted connections; everything is closed on exit.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self._addr: tuple[str, int] = self._sock.getsockname()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self.connections = 0
        self.received = bytearray()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        self._sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                self._drain()
                continue
            except OSError:
                return
            conn.setblocking(False)
            with self._lock:
                self._conns.append(conn)
                self.connections += 1
            self._drain()
        self._drain()

    def _drain(self) -> None:
        with self._lock:
            for c in self._conns:
                try:
                    data = c.recv(65536)
                except (BlockingIOError, OSError):
                    continue
                self.received.extend(data)

    @property
    def host(self) -> str:
        return f"{self._addr[0]}:{self._addr[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        with self._lock:
            for c in self._conns:
                c.close()
            self._conns.clear()

    def __enter__(self) -> Blackhole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
