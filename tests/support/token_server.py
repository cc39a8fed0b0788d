"""A Docker Registry v2 token server for tests (the ``auth.token`` realm of Distribution).

Two ways to use it:

* as a program, for the shared test environment::

      python tests/support/token_server.py init --dir DIR
      python tests/support/token_server.py serve --dir DIR --listen 127.0.0.1:5002 \\
          --users alice:secret,bob:hunter2

* in-process, for tests that need a private auth setup::

      with TokenServer(dir, users={"alice": "secret"}) as ts:
          ts.realm            # "http://127.0.0.1:PORT/token"
          ts.requests         # Counter{("GET /token", "granted"): 1, ...}
          ts.count(scope="repository:private/x:pull")

``init`` writes ``DIR/key.pem`` (EC P-256 by default, or RSA) and a self-signed
``DIR/cert.pem`` — the file the registry's ``rootcertbundle`` points at. Tokens are
JWS-signed JWTs (ES256/RS256) whose header names the key either by ``kid`` (libtrust
key-ID format, the default) or by ``x5c`` (the certificate chain); Distribution 2.8
accepts both (tests/support/test_token_server.py proves it against the real binary).

Grants: a valid user gets every action it asks for, on everything it asks for;
an anonymous caller gets ``pull`` on repositories under ``public/`` only (the token is
issued with an empty ``access`` list otherwise, as Docker Hub does); wrong credentials
get 401 with a JSON error. Passwords and tokens never appear in log lines (``***``).

Self-contained: standard library plus ``cryptography`` (a dev dependency).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import collections
import datetime as _dt
import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

__all__ = [
    "DEFAULT_ISSUER",
    "DEFAULT_SERVICE",
    "AccessEntry",
    "KeyPair",
    "Scope",
    "TokenRequest",
    "TokenServer",
    "init_keys",
    "libtrust_key_id",
    "load_keys",
    "main",
    "parse_scopes",
    "parse_users",
]

DEFAULT_SERVICE = "rocmenv-test-registry"
DEFAULT_ISSUER = "rocmenv-test-token-server"
KEY_FILE = "key.pem"
CERT_FILE = "cert.pem"
MASK = "***"

log = logging.getLogger("tests.support.token_server")

KeyType = Literal["ec", "rsa"]
HeaderMode = Literal["kid", "x5c"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
AccessPolicy = Callable[[str | None, "Scope"], Sequence[str]]
"""``policy(user_or_None, requested_scope) -> granted actions`` (empty = nothing)."""


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True, kw_only=True)
class KeyPair:
    """The signing key, its self-signed certificate and the derived identifiers."""

    key: PrivateKey
    cert: x509.Certificate
    key_path: Path
    cert_path: Path

    @property
    def alg(self) -> str:
        """JWS algorithm for this key (ES256 for P-256, RS256 for RSA)."""
        return "ES256" if isinstance(self.key, ec.EllipticCurvePrivateKey) else "RS256"

    @property
    def kid(self) -> str:
        """The libtrust key ID Distribution uses to look up keys from ``rootcertbundle``."""
        return libtrust_key_id(self.cert.public_key())

    @property
    def x5c(self) -> list[str]:
        """The certificate chain as the JWS ``x5c`` header wants it (std base64 DER)."""
        der = self.cert.public_bytes(serialization.Encoding.DER)
        return [base64.b64encode(der).decode("ascii")]


def libtrust_key_id(public_key: Any) -> str:
    """Key ID in docker/libtrust format.

    SHA-256 of the DER SubjectPublicKeyInfo, first 240 bits, base32 (no padding),
    in 12 colon-separated groups of 4 characters.
    """
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    digest = hashlib.sha256(der).digest()[:30]
    b32 = base64.b32encode(digest).decode("ascii").rstrip("=")
    return ":".join(b32[i : i + 4] for i in range(0, len(b32), 4))


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _self_signed(key: PrivateKey, common_name: str) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _dt.datetime.now(_dt.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(days=1))
        .not_valid_after(now + _dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )


def _same_public_key(key: PrivateKey, cert: x509.Certificate) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(key.public_key().public_bytes(*fmt) == cert.public_key().public_bytes(*fmt))


def init_keys(directory: str | os.PathLike[str], *, key_type: KeyType = "ec") -> KeyPair:
    """Create ``key.pem`` and ``cert.pem`` in ``directory`` unless they already exist.

    Idempotent: existing files are kept (a missing certificate is re-made from the
    existing key). A key and certificate that do not belong together are an error.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key_path, cert_path = d / KEY_FILE, d / CERT_FILE
    if key_path.exists():
        key = _load_private_key(key_path)
    else:
        if key_type == "ec":
            key = ec.generate_private_key(ec.SECP256R1())
        elif key_type == "rsa":
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        else:
            raise ValueError(f"unknown key type {key_type!r}: use 'ec' or 'rsa'")
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        _atomic_write(key_path, pem, 0o600)
        cert_path.unlink(missing_ok=True)  # a cert for some other key is useless now
    if not cert_path.exists():
        cert = _self_signed(key, DEFAULT_ISSUER)
        _atomic_write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return load_keys(d)


def _load_private_key(path: Path) -> PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"{path}: EC key must be P-256 (ES256), got {key.curve.name}")
        return key
    if isinstance(key, rsa.RSAPrivateKey):
        return key
    raise ValueError(f"{path}: unsupported key type {type(key).__name__}; use EC P-256 or RSA")


def load_keys(directory: str | os.PathLike[str]) -> KeyPair:
    """Load ``key.pem``/``cert.pem`` from ``directory`` (run :func:`init_keys` first)."""
    d = Path(directory)
    key_path, cert_path = d / KEY_FILE, d / CERT_FILE
    if not key_path.exists() or not cert_path.exists():
        raise FileNotFoundError(
            f"{d}: {KEY_FILE} and {CERT_FILE} are needed; run "
            f"`python tests/support/token_server.py init --dir {d}` first"
        )
    key = _load_private_key(key_path)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    if not _same_public_key(key, cert):
        raise ValueError(f"{d}: {CERT_FILE} does not belong to {KEY_FILE}; delete both and re-init")
    return KeyPair(key=key, cert=cert, key_path=key_path, cert_path=cert_path)


# --------------------------------------------------------------------------- JWT


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _sign(key: PrivateKey, data: bytes) -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")  # JWS wants raw r||s
    return key.sign(data, padding.PKCS1v15(), hashes.SHA256())


def _rfc3339(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- scopes


@dataclass(frozen=True, kw_only=True)
class Scope:
    """One requested scope, ``type:name:action,action`` (e.g. ``repository:a/b:pull``)."""

    type: str
    name: str
    actions: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.type}:{self.name}:{','.join(self.actions)}"


@dataclass(frozen=True, kw_only=True)
class AccessEntry:
    """One entry of the JWT ``access`` claim."""

    type: str
    name: str
    actions: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "actions": list(self.actions)}


def parse_scopes(values: Iterable[str]) -> list[Scope]:
    """Parse ``scope`` parameters (repeated and/or space-separated, as clients send them).

    The type is up to the first ``:``, the actions after the last one, the name is what
    lies between (so ``repository:localhost:5000/x:pull`` works). Raises ``ValueError``.
    """
    out: list[Scope] = []
    for value in values:
        for item in value.split():
            first, last = item.find(":"), item.rfind(":")
            if first <= 0 or last == first or last == len(item) - 1:
                raise ValueError(f"malformed scope {item!r}; want type:name:actions")
            actions = tuple(a for a in item[last + 1 :].split(",") if a)
            if not actions:
                raise ValueError(f"malformed scope {item!r}; no actions")
            out.append(Scope(type=item[:first], name=item[first + 1 : last], actions=actions))
    return out


def parse_users(spec: str) -> dict[str, str]:
    """``"alice:pw1,bob:pw2"`` → ``{"alice": "pw1", "bob": "pw2"}`` (split at the first ``:``)."""
    users: dict[str, str] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        user, sep, password = part.partition(":")
        if not sep or not user:
            raise ValueError(f"bad user entry {user or part!r}: want USER:PASSWORD")
        users[user] = password
    return users


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, kw_only=True)
class TokenRequest:
    """One request the token server answered (never holds a password or token)."""

    method: str
    endpoint: str  # "GET /token", "POST /token", or "GET /other" for unknown paths
    outcome: str  # granted | anonymous | denied | bad_request | not_found
    status: int
    user: str | None
    account: str | None
    service: str | None
    scopes: tuple[str, ...]
    granted: tuple[AccessEntry, ...] = ()
    time: float = field(default_factory=time.time)


# --------------------------------------------------------------------------- server


class _Unauthorized(Exception):
    pass


class _BadRequest(Exception):
    pass


class TokenServer:
    """In-process token server; a context manager that serves on a background thread.

    ``port=0`` (the default) binds a free port; ``ts.url``/``ts.realm`` tell you which.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        users: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        service: str = DEFAULT_SERVICE,
        issuer: str = DEFAULT_ISSUER,
        expires_in: int = 300,
        header: HeaderMode = "kid",
        anonymous_prefixes: Collection[str] = ("public/",),
        policy: AccessPolicy | None = None,
        key_type: KeyType = "ec",
        create_keys: bool = True,
    ) -> None:
        self.keys = init_keys(directory, key_type=key_type) if create_keys else load_keys(directory)
        self.users: dict[str, str] = dict(users or {})
        self.service = service
        self.issuer = issuer
        self.expires_in = expires_in
        self.header = header
        self.anonymous_prefixes = tuple(anonymous_prefixes)
        self.policy = policy
        self._bind = (host, port)
        self._lock = threading.Lock()
        self._log: list[TokenRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle

    def start(self) -> TokenServer:
        if self._httpd is not None:
            return self
        handler = type("_BoundHandler", (_Handler,), {"server_ref": self})
        httpd = ThreadingHTTPServer(self._bind, handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def serve_forever(self) -> None:
        """Serve in the calling thread (the ``serve`` command)."""
        handler = type("_BoundHandler", (_Handler,), {"server_ref": self})
        httpd = ThreadingHTTPServer(self._bind, handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._port = int(httpd.server_address[1])
        try:
            httpd.serve_forever(poll_interval=0.2)
        finally:
            httpd.server_close()
            self._httpd = None

    def __enter__(self) -> TokenServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- addresses

    @property
    def port(self) -> int:
        """The bound port (still readable after :meth:`stop`)."""
        if self._port is None:
            raise RuntimeError("TokenServer was never started; use it as a context manager")
        return self._port

    @property
    def host(self) -> str:
        """``"127.0.0.1:PORT"``."""
        return f"{self._bind[0]}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def realm(self) -> str:
        """The value for the registry's ``auth.token.realm``."""
        return f"{self.url}/token"

    @property
    def cert_path(self) -> Path:
        """The value for the registry's ``auth.token.rootcertbundle``."""
        return self.keys.cert_path

    # ---- records

    @property
    def log(self) -> list[TokenRequest]:
        """Every request answered so far, oldest first (a copy)."""
        with self._lock:
            return list(self._log)

    @property
    def requests(self) -> collections.Counter[tuple[str, str]]:
        """Counts by ``(endpoint, outcome)``, e.g. ``{("GET /token", "granted"): 2}``."""
        with self._lock:
            return collections.Counter((r.endpoint, r.outcome) for r in self._log)

    def count(
        self,
        *,
        endpoint: str | None = None,
        outcome: str | None = None,
        user: str | None = None,
        scope: str | None = None,
    ) -> int:
        """Requests matching every filter given (``scope`` = one exact requested scope)."""
        return sum(
            1
            for r in self.log
            if (endpoint is None or r.endpoint == endpoint)
            and (outcome is None or r.outcome == outcome)
            and (user is None or r.user == user)
            and (scope is None or scope in r.scopes)
        )

    def reset(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._log.clear()

    def _record(self, rec: TokenRequest) -> None:
        with self._lock:
            self._log.append(rec)

    # ---- tokens

    def grant(self, user: str | None, scopes: Sequence[Scope]) -> list[AccessEntry]:
        """What ``user`` (``None`` = anonymous) gets for the requested scopes."""
        out: list[AccessEntry] = []
        for sc in scopes:
            if self.policy is not None:
                actions = tuple(self.policy(user, sc))
            elif user is not None:
                actions = sc.actions
            elif sc.type == "repository" and sc.name.startswith(self.anonymous_prefixes):
                actions = tuple(a for a in sc.actions if a == "pull")
            else:
                actions = ()
            if actions:
                out.append(AccessEntry(type=sc.type, name=sc.name, actions=actions))
        return out

    def mint(
        self,
        *,
        subject: str = "",
        access: Sequence[AccessEntry] = (),
        audience: str | None = None,
        issuer: str | None = None,
        expires_in: int | None = None,
        not_before: float | None = None,
        header: HeaderMode | None = None,
        now: float | None = None,
    ) -> str:
        """Sign a JWT directly — tests use it for expired/foreign/odd tokens."""
        now = time.time() if now is None else now
        ttl = self.expires_in if expires_in is None else expires_in
        hdr: dict[str, Any] = {"typ": "JWT", "alg": self.keys.alg}
        if (header or self.header) == "x5c":
            hdr["x5c"] = self.keys.x5c
        else:
            hdr["kid"] = self.keys.kid
        claims: dict[str, Any] = {
            "iss": self.issuer if issuer is None else issuer,
            "sub": subject,
            "aud": self.service if audience is None else audience,
            "exp": int(now) + ttl,
            "nbf": int(now) - 1 if not_before is None else int(not_before),
            "iat": int(now),
            "jti": secrets.token_hex(16),
            "access": [a.to_json() for a in access],
        }
        signing_input = (
            _b64url(json.dumps(hdr, separators=(",", ":")).encode())
            + "."
            + _b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        sig = _sign(self.keys.key, signing_input.encode("ascii"))
        return signing_input + "." + _b64url(sig)

    def authenticate(self, username: str | None, password: str | None) -> str | None:
        """``None`` for anonymous; the user name if valid; raises ``_Unauthorized`` otherwise."""
        if username is None:
            return None
        expected = self.users.get(username)
        if expected is None or not hmac.compare_digest(
            expected.encode("utf-8"), (password or "").encode("utf-8")
        ):
            raise _Unauthorized(f"invalid credentials for user {username!r}")
        return username


def _first(params: Mapping[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


class _Handler(BaseHTTPRequestHandler):
    server_ref: TokenServer
    protocol_version = "HTTP/1.1"
    server_version = "rocmenv-test-token-server/1"

    # quiet default access log: our own log lines carry no secrets
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send_json(
        self, status: int, payload: Mapping[str, Any], extra: Mapping[str, str] = {}
    ) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _basic(self) -> tuple[str | None, str | None]:
        auth = self.headers.get("Authorization")
        if not auth:
            return None, None
        kind, _, value = auth.partition(" ")
        if kind.lower() != "basic":
            raise _Unauthorized(f"unsupported Authorization scheme {kind!r}")
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise _Unauthorized("malformed Basic credentials") from exc
        user, sep, password = decoded.partition(":")
        if not sep:
            raise _Unauthorized("malformed Basic credentials")
        return user, password

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/token":
            self._not_found(url.path)
            return
        q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        self._issue(
            method="GET",
            basic_fn=self._basic,
            service=_first(q, "service"),
            account=_first(q, "account"),
            raw_scopes=q.get("scope", []),
            oauth=False,
        )

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if url.path != "/token":
            self._not_found(url.path)
            return
        form = urllib.parse.parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)

        def first(name: str) -> str | None:
            return _first(form, name)

        grant_type = first("grant_type")
        if grant_type != "password":
            self._finish_error(
                "POST",
                400,
                "bad_request",
                {
                    "error": "unsupported_grant_type",
                    "error_description": f"grant_type {grant_type!r} is not supported; use password",
                },
                user=first("username"),
                account=None,
                service=first("service"),
                scopes=(),
            )
            return
        username, password = first("username"), first("password")

        def basic_fn() -> tuple[str | None, str | None]:
            if username is None:
                return self._basic()
            return username, password

        self._issue(
            method="POST",
            basic_fn=basic_fn,
            service=first("service"),
            account=username,
            raw_scopes=form.get("scope", []),
            oauth=True,
        )

    def _not_found(self, path: str) -> None:
        self._finish_error(
            self.command,
            404,
            "not_found",
            {"errors": [{"code": "NOT_FOUND", "message": f"no such endpoint {path}"}]},
            user=None,
            account=None,
            service=None,
            scopes=(),
            endpoint=f"{self.command} {path}",
        )

    def _finish_error(
        self,
        method: str,
        status: int,
        outcome: str,
        payload: Mapping[str, Any],
        *,
        user: str | None,
        account: str | None,
        service: str | None,
        scopes: Sequence[str],
        endpoint: str | None = None,
        extra: Mapping[str, str] = {},
    ) -> None:
        ts = self.server_ref
        ts._record(
            TokenRequest(
                method=method,
                endpoint=endpoint or f"{method} /token",
                outcome=outcome,
                status=status,
                user=user,
                account=account,
                service=service,
                scopes=tuple(scopes),
            )
        )
        log.info(
            "%s %s user=%s password=%s -> %d %s",
            method,
            endpoint or "/token",
            user,
            MASK,
            status,
            outcome,
        )
        self._send_json(status, payload, extra)

    def _issue(
        self,
        *,
        method: str,
        basic_fn: Callable[[], tuple[str | None, str | None]],
        service: str | None,
        account: str | None,
        raw_scopes: Sequence[str],
        oauth: bool,
    ) -> None:
        ts = self.server_ref
        user: str | None = None
        try:
            username, password = basic_fn()
            user = username
            try:
                scopes = parse_scopes(raw_scopes)
            except ValueError as exc:
                raise _BadRequest(str(exc)) from exc
            if service is not None and service != ts.service:
                raise _BadRequest(
                    f"unknown service {service!r}; this server signs for {ts.service!r}"
                )
            authed = ts.authenticate(username, password)
        except _Unauthorized as exc:
            self._finish_error(
                method,
                401,
                "denied",
                {
                    "errors": [{"code": "UNAUTHORIZED", "message": str(exc)}],
                    "details": "incorrect username or password",
                },
                user=user,
                account=account,
                service=service,
                scopes=raw_scopes,
                extra={"WWW-Authenticate": f'Basic realm="{ts.issuer}"'},
            )
            return
        except _BadRequest as exc:
            self._finish_error(
                method,
                400,
                "bad_request",
                {"errors": [{"code": "BAD_REQUEST", "message": str(exc)}]},
                user=user,
                account=account,
                service=service,
                scopes=raw_scopes,
            )
            return
        granted = ts.grant(authed, scopes)
        now = time.time()
        token = ts.mint(subject=authed or "", access=granted, now=now)
        outcome = "granted" if authed is not None else "anonymous"
        ts._record(
            TokenRequest(
                method=method,
                endpoint=f"{method} /token",
                outcome=outcome,
                status=200,
                user=authed,
                account=account,
                service=service,
                scopes=tuple(str(s) for s in scopes),
                granted=tuple(granted),
            )
        )
        log.info(
            "%s /token user=%s password=%s scopes=%s granted=%s -> 200 token=%s",
            method,
            authed or "(anonymous)",
            MASK,
            " ".join(str(s) for s in scopes) or "-",
            " ".join(f"{a.type}:{a.name}:{','.join(a.actions)}" for a in granted) or "-",
            MASK,
        )
        payload: dict[str, Any] = {
            "access_token": token,
            "expires_in": ts.expires_in,
            "issued_at": _rfc3339(now),
        }
        if oauth:
            payload["scope"] = " ".join(str(s) for s in scopes)
        else:
            payload["token"] = token
        self._send_json(HTTPStatus.OK, payload)


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="token_server.py", description="Docker Registry v2 token server for tests."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_init = sub.add_parser("init", help="create DIR/key.pem and DIR/cert.pem (idempotent)")
    p_init.add_argument("--dir", required=True, type=Path)
    p_init.add_argument("--key-type", choices=["ec", "rsa"], default="ec")
    p_serve = sub.add_parser("serve", help="serve /token in the foreground")
    p_serve.add_argument("--dir", required=True, type=Path)
    p_serve.add_argument("--listen", default="127.0.0.1:5002", help="HOST:PORT")
    p_serve.add_argument("--users", default="", help="USER:PASSWORD[,USER:PASSWORD...]")
    p_serve.add_argument("--users-file", type=Path, help="file with one USER:PASSWORD per line")
    p_serve.add_argument("--service", default=DEFAULT_SERVICE)
    p_serve.add_argument("--issuer", default=DEFAULT_ISSUER)
    p_serve.add_argument("--expires-in", type=int, default=300)
    p_serve.add_argument("--header", choices=["kid", "x5c"], default="kid")
    p_serve.add_argument(
        "--anonymous-prefix",
        action="append",
        help="repository prefix anonymous callers may pull (repeatable; default public/)",
    )
    p_serve.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s token-server %(levelname)s %(message)s",
    )
    try:
        if args.command == "init":
            kp = init_keys(args.dir, key_type=args.key_type)
            log.info("keys ready: %s %s (kid %s)", kp.key_path, kp.cert_path, kp.kid)
            return 0
        users = parse_users(args.users)
        if args.users_file is not None:
            for line in args.users_file.read_text().splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    users.update(parse_users(line.strip()))
        host, sep, port = args.listen.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"--listen {args.listen!r}: want HOST:PORT")
        ts = TokenServer(
            args.dir,
            users=users,
            host=host or "127.0.0.1",
            port=int(port),
            service=args.service,
            issuer=args.issuer,
            expires_in=args.expires_in,
            header=args.header,
            anonymous_prefixes=tuple(args.anonymous_prefix or ["public/"]),
        )
        log.info(
            "serving %s/token for service %s, users %s, password=%s",
            f"http://{args.listen}",
            args.service,
            ",".join(sorted(users)) or "(none)",
            MASK,
        )
        ts.serve_forever()
        return 0
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
