"""The test token server against the real Distribution registry (``docker-registry``).

A private registry with ``auth.token`` is started per module on a free loopback port
(config and storage in a temp dir) next to an in-process :class:`TokenServer`. Every
check talks plain HTTP with ``http.client`` — no rocmenv code is involved — so these
tests pin down the behaviour other tests rely on.

Skip rule: a missing ``docker-registry`` binary goes through
:func:`tests.support.testenv.missing_environment` (a failure under ROCMENV_REQUIRE_ENGINE=1).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import io
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.token_server import (
    DEFAULT_ISSUER,
    DEFAULT_SERVICE,
    AccessEntry,
    TokenServer,
    init_keys,
    libtrust_key_id,
    load_keys,
    parse_scopes,
)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN_SERVER_SCRIPT = REPO_ROOT / "tests" / "support" / "token_server.py"
USERS = {"alice": "s3cret-pw", "bob": "hunter2-pw"}
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def _require(binary: str) -> str:
    """Path of ``binary``; skip if absent, unless ROCMENV_REQUIRE_ENGINE demands it."""
    path = shutil.which(binary)
    if path is None:
        msg = f"{binary} not found on PATH (install it: scripts/testenv.sh, or apt-get install)"
        testenv.missing_environment(msg, kind="tool")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- plain HTTP


@dataclass(frozen=True, kw_only=True)
class Resp:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


def request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
) -> Resp:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, target, body=body, headers=dict(headers or {}))
        r = conn.getresponse()
        data = r.read()
        return Resp(status=r.status, headers={k.lower(): v for k, v in r.getheaders()}, body=data)
    finally:
        conn.close()


def basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def fetch_token(
    ts: TokenServer, *scopes: str, creds: tuple[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    query = urllib.parse.urlencode(
        [("service", DEFAULT_SERVICE)]
        + [("scope", s) for s in scopes]
        + ([("account", creds[0])] if creds else [])
    )
    r = request("GET", f"{ts.realm}?{query}", headers=basic(*creds) if creds else None)
    payload = r.json()
    assert isinstance(payload, dict)
    return r.status, payload


def jwt_parts(token: str) -> tuple[dict[str, object], dict[str, object]]:
    def dec(seg: str) -> dict[str, object]:
        value = json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))
        assert isinstance(value, dict)
        return value

    h, c, _sig = token.split(".")
    return dec(h), dec(c)


# --------------------------------------------------------------------------- fixtures


@dataclass(frozen=True, kw_only=True)
class Registry:
    url: str  # http://127.0.0.1:PORT
    log_path: Path
    bundle_dirs: tuple[Path, ...]  # key dirs whose certs are in the rootcertbundle


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"docker-registry exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not listen on {port}:\n{log_path.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    with TokenServer(tmp_path_factory.mktemp("tokenkeys"), users=USERS) as ts:
        yield ts


@pytest.fixture(scope="module")
def private_registry(
    tmp_path_factory: pytest.TempPathFactory, token_server: TokenServer
) -> Iterator[Registry]:
    binary = _require("docker-registry")
    root = tmp_path_factory.mktemp("registry")
    # Extra trusted keys (RSA and a second EC) to prove every key type / header mode.
    extra = (root / "keys-rsa", root / "keys-ec2")
    init_keys(extra[0], key_type="rsa")
    init_keys(extra[1], key_type="ec")
    bundle = root / "bundle.pem"
    bundle.write_bytes(
        b"".join(
            p.read_bytes()
            for p in (token_server.cert_path, extra[0] / "cert.pem", extra[1] / "cert.pem")
        )
    )
    port = _free_port()
    config = root / "config.yml"
    config.write_text(
        f"""version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root / "storage"}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
auth:
  token:
    realm: {token_server.realm}
    service: {DEFAULT_SERVICE}
    issuer: {DEFAULT_ISSUER}
    rootcertbundle: {bundle}
"""
    )
    log_path = root / "registry.log"
    with log_path.open("wb") as log_fh:
        proc = subprocess.Popen(
            [binary, "serve", str(config)], stdout=log_fh, stderr=subprocess.STDOUT
        )
    try:
        _wait_listening(port, proc, log_path)
        yield Registry(
            url=f"http://127.0.0.1:{port}",
            log_path=log_path,
            bundle_dirs=(token_server.keys.key_path.parent, *extra),
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- image push


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tiny_image(content: bytes) -> tuple[bytes, bytes, bytes]:
    """(layer, config, manifest) of a real one-file image."""
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = len(content)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(content))
    layer = gzip.compress(tar_buf.getvalue(), mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [_sha(tar_buf.getvalue())]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _sha(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": _sha(layer),
                }
            ],
        },
        indent=3,
    ).encode()
    return layer, config, manifest


def push_blob(reg: Registry, repo: str, token: str, blob: bytes) -> Resp:
    start = request("POST", f"{reg.url}/v2/{repo}/blobs/uploads/", headers=bearer(token), body=b"")
    if start.status != 202:
        return start
    location = urllib.parse.urljoin(reg.url, start.headers["location"])
    sep = "&" if "?" in location else "?"
    return request(
        "PUT",
        f"{location}{sep}digest={urllib.parse.quote(_sha(blob))}",
        headers={**bearer(token), "Content-Type": "application/octet-stream"},
        body=blob,
    )


def push_image(reg: Registry, repo: str, tag: str, token: str, content: bytes) -> str:
    layer, config, manifest = tiny_image(content)
    for blob in (layer, config):
        r = push_blob(reg, repo, token, blob)
        assert r.status == 201, (r.status, r.body)
    r = request(
        "PUT",
        f"{reg.url}/v2/{repo}/manifests/{tag}",
        headers={**bearer(token), "Content-Type": MANIFEST_V2},
        body=manifest,
    )
    assert r.status == 201, (r.status, r.body)
    assert r.headers["docker-content-digest"] == _sha(manifest)
    return _sha(manifest)


def user_token(ts: TokenServer, repo: str, actions: str = "pull,push") -> str:
    status, payload = fetch_token(
        ts, f"repository:{repo}:{actions}", creds=("alice", USERS["alice"])
    )
    assert status == 200, payload
    token = payload["token"]
    assert isinstance(token, str)
    return token


def get_manifest(reg: Registry, repo: str, ref: str, token: str | None) -> Resp:
    headers = {"Accept": MANIFEST_V2, **(bearer(token) if token else {})}
    return request("GET", f"{reg.url}/v2/{repo}/manifests/{ref}", headers=headers)


# --------------------------------------------------------------------------- tests


def test_registry_challenges_with_bearer_realm_and_service(
    private_registry: Registry, token_server: TokenServer
) -> None:
    r = request("GET", f"{private_registry.url}/v2/")
    assert r.status == 401
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'realm="{token_server.realm}"' in challenge
    assert f'service="{DEFAULT_SERVICE}"' in challenge

    r = request("GET", f"{private_registry.url}/v2/private/x/tags/list")
    assert r.status == 401
    assert 'scope="repository:private/x:pull"' in r.headers["www-authenticate"]


def test_user_token_pushes_and_pulls_a_tiny_image(
    private_registry: Registry, token_server: TokenServer
) -> None:
    token = user_token(token_server, "private/pushed")
    digest = push_image(private_registry, "private/pushed", "v1", token, b"hello\n")

    r = get_manifest(private_registry, "private/pushed", "v1", token)
    assert r.status == 200
    assert r.headers["docker-content-digest"] == digest
    assert _sha(r.body) == digest
    tags = request(
        "GET", f"{private_registry.url}/v2/private/pushed/tags/list", headers=bearer(token)
    )
    assert tags.status == 200
    assert tags.json() == {"name": "private/pushed", "tags": ["v1"]}


def test_token_response_has_docker_fields_and_signed_claims(token_server: TokenServer) -> None:
    status, payload = fetch_token(
        token_server, "repository:private/x:pull,push", creds=("bob", USERS["bob"])
    )
    assert status == 200
    assert payload["token"] == payload["access_token"]
    assert payload["expires_in"] == 300
    issued_at = payload["issued_at"]
    assert isinstance(issued_at, str) and issued_at.endswith("Z") and "T" in issued_at
    token = payload["token"]
    assert isinstance(token, str)
    header, claims = jwt_parts(token)
    assert header == {"typ": "JWT", "alg": "ES256", "kid": token_server.keys.kid}
    assert claims["iss"] == DEFAULT_ISSUER
    assert claims["aud"] == DEFAULT_SERVICE
    assert claims["sub"] == "bob"
    assert claims["access"] == [
        {"type": "repository", "name": "private/x", "actions": ["pull", "push"]}
    ]
    assert isinstance(claims["exp"], int) and isinstance(claims["iat"], int)
    assert claims["exp"] - claims["iat"] == 300
    assert isinstance(claims["nbf"], int) and claims["nbf"] <= claims["iat"]
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16


def test_anonymous_token_pulls_public_but_not_private(
    private_registry: Registry, token_server: TokenServer
) -> None:
    pub = push_image(
        private_registry, "public/x", "v1", user_token(token_server, "public/x"), b"pub\n"
    )
    push_image(
        private_registry, "private/x", "v1", user_token(token_server, "private/x"), b"priv\n"
    )

    status, payload = fetch_token(token_server, "repository:public/x:pull")
    assert status == 200
    anon_pub = payload["token"]
    assert isinstance(anon_pub, str)
    assert jwt_parts(anon_pub)[1]["sub"] == ""
    r = get_manifest(private_registry, "public/x", "v1", anon_pub)
    assert r.status == 200
    assert r.headers["docker-content-digest"] == pub

    # anonymous push to public/ is not granted (token issued with pull only)
    status, payload = fetch_token(token_server, "repository:public/x:pull,push")
    assert status == 200
    anon_push = payload["token"]
    assert isinstance(anon_push, str)
    assert jwt_parts(anon_push)[1]["access"] == [
        {"type": "repository", "name": "public/x", "actions": ["pull"]}
    ]
    r = push_blob(private_registry, "public/x", anon_push, b"nope")
    assert r.status == 401

    # private/: token issued but with no access, and the registry refuses it
    status, payload = fetch_token(token_server, "repository:private/x:pull")
    assert status == 200
    anon_priv = payload["token"]
    assert isinstance(anon_priv, str)
    assert jwt_parts(anon_priv)[1]["access"] == []
    r = get_manifest(private_registry, "private/x", "v1", anon_priv)
    assert r.status == 401
    assert 'error="insufficient_scope"' in r.headers["www-authenticate"]
    assert token_server.count(outcome="anonymous", scope="repository:private/x:pull") >= 1


def test_wrong_password_gets_401_json_from_token_server(token_server: TokenServer) -> None:
    token_server.reset()
    status, payload = fetch_token(
        token_server, "repository:private/x:pull", creds=("alice", "wrong-password")
    )
    assert status == 401
    assert "token" not in payload
    errors = payload["errors"]
    assert isinstance(errors, list) and errors[0]["code"] == "UNAUTHORIZED"
    status, _ = fetch_token(token_server, "repository:private/x:pull", creds=("mallory", "x"))
    assert status == 401
    assert token_server.requests == {("GET /token", "denied"): 2}


def test_requests_are_counted_by_endpoint_outcome_and_scope(token_server: TokenServer) -> None:
    token_server.reset()
    fetch_token(token_server, "repository:a/b:pull", creds=("alice", USERS["alice"]))
    fetch_token(token_server, "repository:a/b:pull", creds=("alice", USERS["alice"]))
    fetch_token(token_server, "repository:c/d:pull")
    fetch_token(token_server, "repository:c/d:pull", creds=("alice", "bad"))
    fetch_token(token_server, "not-a-scope")
    request("GET", f"{token_server.url}/nowhere")
    assert token_server.requests == {
        ("GET /token", "granted"): 2,
        ("GET /token", "anonymous"): 1,
        ("GET /token", "denied"): 1,
        ("GET /token", "bad_request"): 1,
        ("GET /nowhere", "not_found"): 1,
    }
    assert token_server.count(scope="repository:a/b:pull") == 2
    assert token_server.count(scope="repository:c/d:pull", outcome="anonymous") == 1
    assert token_server.count(user="alice", outcome="granted") == 2


def test_post_password_grant_issues_a_token_the_registry_accepts(
    private_registry: Registry, token_server: TokenServer
) -> None:
    body = urllib.parse.urlencode(
        {
            "grant_type": "password",
            "username": "alice",
            "password": USERS["alice"],
            "service": DEFAULT_SERVICE,
            "scope": "repository:private/post:pull,push registry:catalog:*",
            "client_id": "rocmenv-tests",
        }
    ).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = request("POST", token_server.realm, headers=form, body=body)
    assert r.status == 200, r.body
    payload = r.json()
    assert isinstance(payload, dict)
    assert payload["expires_in"] == 300
    token = payload["access_token"]
    push_image(private_registry, "private/post", "v1", token, b"post\n")
    cat = request("GET", f"{private_registry.url}/v2/_catalog", headers=bearer(token))
    assert cat.status == 200
    assert "private/post" in cat.body.decode()

    bad = body.replace(USERS["alice"].encode(), b"nope")
    assert request("POST", token_server.realm, headers=form, body=bad).status == 401
    other = body.replace(b"grant_type=password", b"grant_type=refresh_token")
    assert request("POST", token_server.realm, headers=form, body=other).status == 400


@pytest.mark.parametrize("header", ["kid", "x5c"])
@pytest.mark.parametrize("which", [0, 1, 2], ids=["ec", "rsa", "ec2"])
def test_registry_accepts_kid_and_x5c_tokens_for_ec_and_rsa_keys(
    private_registry: Registry, header: str, which: int
) -> None:
    signer = TokenServer(private_registry.bundle_dirs[which], create_keys=False)
    token = signer.mint(
        access=[AccessEntry(type="registry", name="catalog", actions=("*",))],
        header="x5c" if header == "x5c" else "kid",
    )
    hdr, _ = jwt_parts(token)
    assert hdr["alg"] == ("RS256" if which == 1 else "ES256")
    r = request("GET", f"{private_registry.url}/v2/_catalog", headers=bearer(token))
    assert r.status == 200, (r.status, r.body)


@pytest.mark.parametrize(
    "kind", ["expired", "wrong_audience", "wrong_issuer", "untrusted_key", "bad_signature"]
)
def test_registry_rejects_tokens_it_should_not_trust(
    private_registry: Registry, token_server: TokenServer, tmp_path: Path, kind: str
) -> None:
    """The registry really verifies what we sign — so the tests above can fail."""
    access = [AccessEntry(type="registry", name="catalog", actions=("*",))]
    signer = token_server
    if kind == "expired":
        token = signer.mint(access=access, now=time.time() - 3600, expires_in=60)
    elif kind == "wrong_audience":
        token = signer.mint(access=access, audience="someone-else")
    elif kind == "wrong_issuer":
        token = signer.mint(access=access, issuer="mallory")
    elif kind == "untrusted_key":
        token = TokenServer(tmp_path / "stranger").mint(access=access)
    else:
        good = signer.mint(access=access)
        head, claims, sig = good.split(".")
        forged = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
        forged["sub"] = "root"
        claims = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
        token = f"{head}.{claims}.{sig}"
    r = request("GET", f"{private_registry.url}/v2/_catalog", headers=bearer(token))
    assert r.status == 401


def test_logs_never_show_password_or_token(
    token_server: TokenServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tests.support.token_server")
    _, payload = fetch_token(token_server, "repository:a/b:pull", creds=("alice", USERS["alice"]))
    fetch_token(token_server, "repository:a/b:pull", creds=("alice", "wrong-secret-pw"))
    token = payload["token"]
    assert isinstance(token, str)
    text = caplog.text
    assert "alice" in text and "***" in text
    for secret in (USERS["alice"], "wrong-secret-pw", token, token.split(".")[2]):
        assert secret not in text


def test_key_id_is_libtrust_format_and_init_is_idempotent(tmp_path: Path) -> None:
    first = init_keys(tmp_path, key_type="rsa")
    key_bytes, cert_bytes = first.key_path.read_bytes(), first.cert_path.read_bytes()
    second = init_keys(tmp_path, key_type="ec")  # existing files win over the argument
    assert second.key_path.read_bytes() == key_bytes
    assert second.cert_path.read_bytes() == cert_bytes
    assert second.alg == "RS256"
    assert oct(first.key_path.stat().st_mode & 0o777) == "0o600"
    groups = first.kid.split(":")
    assert len(groups) == 12 and all(len(g) == 4 for g in groups)
    assert first.kid == libtrust_key_id(load_keys(tmp_path).cert.public_key())

    first.cert_path.unlink()  # a lost cert is re-made from the kept key
    third = init_keys(tmp_path)
    assert third.key_path.read_bytes() == key_bytes
    assert third.kid == first.kid


def test_scope_parser_keeps_colons_in_names() -> None:
    scopes = parse_scopes(["repository:localhost:5000/a/b:pull,push registry:catalog:*"])
    assert [str(s) for s in scopes] == [
        "repository:localhost:5000/a/b:pull,push",
        "registry:catalog:*",
    ]
    for bad in ("repository", "repository:x", "repository:x:", ":x:pull"):
        with pytest.raises(ValueError):
            parse_scopes([bad])


def test_cli_init_and_serve_issue_tokens_the_registry_accepts(
    private_registry: Registry, token_server: TokenServer, tmp_path: Path
) -> None:
    # `init` into the directory the registry already trusts: idempotent, keeps the keys.
    keydir = token_server.keys.key_path.parent
    before = token_server.cert_path.read_bytes()
    done = subprocess.run(
        [sys.executable, str(TOKEN_SERVER_SCRIPT), "init", "--dir", str(keydir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert token_server.cert_path.read_bytes() == before

    port = _free_port()
    err_path = tmp_path / "serve.log"
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(TOKEN_SERVER_SCRIPT),
                "serve",
                "--dir",
                str(keydir),
                "--listen",
                f"127.0.0.1:{port}",
                "--users",
                "carol:c4rol-pw,dave:d4ve:pw",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, "token server CLI did not start"
            time.sleep(0.05)
        realm = f"http://127.0.0.1:{port}/token"
        q = urllib.parse.urlencode({"service": DEFAULT_SERVICE, "scope": "registry:catalog:*"})
        r = request("GET", f"{realm}?{q}", headers=basic("dave", "d4ve:pw"))
        assert r.status == 200, r.body
        payload = r.json()
        assert isinstance(payload, dict)
        cat = request(
            "GET", f"{private_registry.url}/v2/_catalog", headers=bearer(payload["token"])
        )
        assert cat.status == 200
        assert request("GET", f"{realm}?{q}", headers=basic("carol", "bad")).status == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    text = err_path.read_text()
    assert "carol" in text and "***" in text
    assert "c4rol-pw" not in text and "d4ve:pw" not in text
    assert payload["token"] not in text


def test_skopeo_lists_and_inspects_through_the_token_flow(
    private_registry: Registry, token_server: TokenServer, tmp_path: Path
) -> None:
    """A real third-party client (skopeo) completes the bearer flow against our server."""
    skopeo = _require("skopeo")
    push_image(
        private_registry, "private/sko", "v1", user_token(token_server, "private/sko"), b"s\n"
    )
    push_image(private_registry, "public/sko", "v2", user_token(token_server, "public/sko"), b"p\n")
    host = private_registry.url.removeprefix("http://")
    env = {**os.environ, "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json"), "HOME": str(tmp_path)}
    base = [skopeo, "--tmpdir", str(tmp_path), "list-tags", "--tls-verify=false"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, timeout=60, env=env)

    token_server.reset()
    ok = run("--creds", f"alice:{USERS['alice']}", f"docker://{host}/private/sko")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["Tags"] == ["v1"]
    assert token_server.count(outcome="granted", scope="repository:private/sko:pull") >= 1

    anon = run(f"docker://{host}/public/sko")
    assert anon.returncode == 0, anon.stderr
    assert json.loads(anon.stdout)["Tags"] == ["v2"]

    denied = run(f"docker://{host}/private/sko")
    assert denied.returncode != 0
    wrong = run("--creds", "alice:wrong", f"docker://{host}/private/sko")
    assert wrong.returncode != 0
    assert token_server.count(outcome="denied") >= 1


def test_docker_login_completes_the_token_flow(
    private_registry: Registry, token_server: TokenServer, tmp_path: Path
) -> None:
    """The Docker daemon (the client CI really uses) logs in through our token server."""
    docker = _require("docker")
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker-config")}
    info = subprocess.run([docker, "info"], capture_output=True, text=True, timeout=60, env=env)
    if info.returncode != 0:
        testenv.missing_environment(f"the Docker engine is not reachable: {info.stderr.strip()}")
    host = private_registry.url.removeprefix("http://")

    def login(password: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [docker, "login", "-u", "bob", "--password-stdin", host],
            input=password,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )

    token_server.reset()
    ok = login(USERS["bob"])
    assert ok.returncode == 0, ok.stderr
    assert "Login Succeeded" in ok.stdout
    bad = login("not-bobs-password")
    assert bad.returncode != 0
    assert "incorrect username or password" in bad.stderr
    assert token_server.requests == {("GET /token", "granted"): 1, ("GET /token", "denied"): 1}
