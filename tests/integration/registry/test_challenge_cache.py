"""Remembered challenges (issue 20 item 2): with the token cache cold, the realm a registry sent
us to last time is asked while the first request travels — and never gets credentials, and
never decides which token the registry receives.

Against the TLS hub (tests/support/hub_server.py: registry and realm on two host names) and the
token-auth registry (credentials); a poisoned challenge points at a recording token server of
the test's own on loopback. Server-side facts come from the servers' own logs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.grammar.reference import parse
from rocmenv.registry.client import RegistryClient
from rocmenv.registry.response import Response
from rocmenv.settings.registry import RegistrySettings
from tests.integration.registry.test_registry_tls import REPO, rocmenv
from tests.support import testenv

pytestmark = [pytest.mark.integration, pytest.mark.serial]


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]]

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, "authorization": self.headers.get("Authorization")})
        body = json.dumps({"token": "poisoned-token", "expires_in": 300}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def poisoned_realm() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A token server on 127.0.0.1 (the auth registry's own host name, another port) that
    records every request and hands out a token no registry accepts."""
    seen: list[dict[str, Any]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token", seen
    finally:
        server.shutdown()
        server.server_close()


def remember(cache: Path, host: str, realm: str, service: str) -> None:
    (cache / "rocmenv").mkdir(parents=True, exist_ok=True)
    (cache / "rocmenv" / "registry-challenges.json").write_text(
        json.dumps({"version": 1, "challenges": {host: {"realm": realm, "service": service}}})
    )


def test_a_cold_token_cache_asks_the_remembered_realm_while_the_first_request_travels(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {"ROCMENV_TOKEN_CACHE": "1", "XDG_CACHE_HOME": str(cache)}
    first = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", **env)
    assert first.returncode == 0, first.stderr
    remembered = json.loads((cache / "rocmenv" / "registry-challenges.json").read_text())
    port = hub.registry.rsplit(":", 1)[1]
    assert remembered == {
        "version": 1,
        "challenges": {
            hub.registry: {
                "realm": f"https://auth.rocmenv.test:{port}/token",
                "service": "hub.rocmenv.test",
            }
        },
    }  # realm and service only: no token, no scope
    (cache / "rocmenv" / "registry-tokens.json").unlink()  # the token cache gone cold

    ctx = Context(
        env={"HOME": str(tmp_path), "XDG_CACHE_HOME": str(cache), "ROCMENV_TOKEN_CACHE": "1"}
    )
    client = RegistryClient(ctx, RegistrySettings(), token_cache=True)
    sent: list[tuple[str, str, bool]] = []  # (thread, URL, with Authorization)
    send = client.transport.send

    def recording_send(method: str, url: str, headers: Any, *args: Any, **kw: Any) -> Response:
        sent.append((threading.current_thread().name, url, "Authorization" in headers))
        return send(method, url, headers, *args, **kw)

    client.transport.send = recording_send  # type: ignore[method-assign]
    with client:
        tags = client.list_tags(parse(f"{hub.registry}/{REPO}"))
    assert len(tags) > 2000
    # (the shared hub's log also holds other sessions' requests: counted here, client-side)
    token_requests = [who for who, url, _ in sent if "/token?" in url]
    # asked once, on its own thread, while the first listing request was on its way
    assert token_requests == ["rocmenv-token-ahead"]
    listings = [authorized for _, url, authorized in sent if "/tags/list" in url]
    assert listings[:2] == [False, True]


def test_a_changed_challenge_wins_over_the_remembered_one(
    hub: testenv.HubTLS, tmp_path: Path, poisoned_realm: tuple[str, list[dict[str, Any]]]
) -> None:
    """A stale or poisoned memory costs at most one anonymous request: the registry's 401
    names its real realm, whose token is the one sent; the memory is corrected."""
    realm, seen = poisoned_realm
    cache = tmp_path / "cache"
    remember(cache, hub.registry, realm, "hub.rocmenv.test")
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{hub.registry}/{REPO}",
        "--json",
        ROCMENV_TOKEN_CACHE="1",
        XDG_CACHE_HOME=str(cache),
    )
    # the poisoned token would be refused (exit 3, "not found, or private"): the live
    # realm's was sent
    assert out.returncode == 0, out.stderr
    assert all(e["authorization"] is None for e in seen)  # anonymous, if asked at all
    stats = json.loads(out.stdout)["stats"]["by_kind"]
    assert stats["token"] == len(seen) + 1  # the remembered realm's, then the live one's
    assert stats["tags"] == 2  # the 401, then the listing (2,849 tags: one page)
    port = hub.registry.rsplit(":", 1)[1]
    remembered = json.loads((cache / "rocmenv" / "registry-challenges.json").read_text())
    assert remembered["challenges"][hub.registry]["realm"] == (
        f"https://auth.rocmenv.test:{port}/token"
    )


def test_a_poisoned_challenge_never_receives_credentials(
    auth_registry: testenv.AuthRegistry,
    tmp_path: Path,
    poisoned_realm: tuple[str, list[dict[str, Any]]],
) -> None:
    """The attack: the challenge file names a realm on the registry's own host name (where a
    fresh challenge's realm would get the login), but another port. Credentials never follow
    a remembered challenge: the poisoned server hears nothing, the real realm gets the login."""
    realm, seen = poisoned_realm
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(
        testenv.docker_config_json(
            {auth_registry.host: (auth_registry.username, auth_registry.password)}
        )
    )
    cache = tmp_path / "cache"
    remember(cache, auth_registry.host, realm, auth_registry.service)
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{auth_registry.host}/{auth_registry.private_repo}",
        ROCMENV_TOKEN_CACHE="1",
        XDG_CACHE_HOME=str(cache),
        DOCKER_CONFIG=str(config),
    )
    assert out.returncode == 0, out.stderr
    assert seen == []
    assert auth_registry.password not in out.stdout + out.stderr


def test_an_untrusted_run_neither_reads_nor_writes_challenges(
    hub: testenv.HubTLS, tmp_path: Path, poisoned_realm: tuple[str, list[dict[str, Any]]]
) -> None:
    realm, seen = poisoned_realm
    cache = tmp_path / "cache"
    remember(cache, hub.registry, realm, "hub.rocmenv.test")
    before = (cache / "rocmenv" / "registry-challenges.json").read_text()
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{hub.registry}/{REPO}",
        ROCMENV_UNTRUSTED="1",
        ROCMENV_TOKEN_CACHE="1",
        XDG_CACHE_HOME=str(cache),
    )
    assert out.returncode == 0, out.stderr
    assert seen == []
    assert (cache / "rocmenv" / "registry-challenges.json").read_text() == before


class _Unavailable(BaseHTTPRequestHandler):
    """A registry on loopback whose token server (same host, ``/token``) is down (503)."""

    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        port = self.server.server_port  # type: ignore[attr-defined]
        if self.path.startswith("/token"):
            self.send_response(503)
            self.send_header("Content-Length", "0")
        else:
            self.send_response(401)
            realm = f'Bearer realm="http://127.0.0.1:{port}/token",service="down"'
            self.send_header("WWW-Authenticate", realm)
            self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_token_server_that_is_down_is_asked_once_not_twice(tmp_path: Path) -> None:
    """The ask ahead is the request the 401 calls for: its failure is reported, after one
    round of retries, not followed by a second round."""
    seen: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Down", (_Unavailable,), {"seen": seen}))
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    cache = tmp_path / "cache"
    remember(cache, host, f"http://{host}/token", "down")
    try:
        out = rocmenv(
            tmp_path,
            "tags",
            "list",
            f"{host}/some/repo",
            ROCMENV_TOKEN_CACHE="1",
            XDG_CACHE_HOME=str(cache),
            ROCMENV_REGISTRY_RETRIES="2",
        )
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr and "503" in out.stderr
    assert len([p for p in seen if p.startswith("/token")]) == 3  # 1 + 2 retries, once
