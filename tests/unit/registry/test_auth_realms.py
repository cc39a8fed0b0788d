"""Which token realm may receive a registry's credentials (rocmenv.registry.auth, issue 34):
only the registry's own host name (any port; Docker Hub's ``auth.docker.io`` for Docker Hub),
over HTTPS — a realm on another HTTPS host gets an anonymous request, never the login. The
token requests are recorded at the transport (what would go on the wire: URL and headers);
the same against the TLS hub's real token server: tests/integration/registry/
test_registry_tls.py::test_credentials_do_not_follow_a_realm_on_another_host."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from rocmenv.registry.auth import HUB_HOSTS, RegistryAuth
from rocmenv.registry.response import Response
from tests.unit.registry.test_auth import SCOPE, bearer, login, make_auth

SECRET = "s3cret-pass-word"


class Recorded:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []

    def send(self, method: str, url: str, headers: dict[str, str], *_a: Any, **_k: Any) -> Response:
        self.requests.append((url, dict(headers)))
        body = json.dumps({"token": "tok-" + "7" * 20, "expires_in": 300}).encode()
        return Response(status=200, headers={}, body=body, url=url)


def auth_for(
    tmp_path: Path, registry: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[RegistryAuth, Recorded]:
    key = "https://index.docker.io/v1/" if registry in HUB_HOSTS else registry  # docker login's
    auth = make_auth(tmp_path, {key: login("alice", SECRET)})
    recorded = Recorded()
    monkeypatch.setattr(auth.transport, "send_with_retries", recorded.send)
    return auth, recorded


def sent_credentials(recorded: Recorded) -> bool:
    ((url, headers),) = recorded.requests
    basic = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    with_login = headers.get("Authorization") == f"Basic {basic}"
    assert with_login == ("account=alice" in url)  # the login and the account travel together
    return with_login


@pytest.mark.parametrize(
    ("registry", "realm"),
    [
        ("registry.example.com", "https://auth.example.com/token"),  # a sibling name
        ("registry.example.com", "https://registry.example.com.evil.test/token"),
        ("registry.example.com:5443", "https://127.0.0.1:5443/token"),  # same port, not host
        ("ghcr.io", "https://auth.docker.io/token"),  # Docker Hub's service, not ghcr's
        ("mirror.example", "https://auth.docker.io/token"),
    ],
)
def test_credentials_are_withheld_from_a_realm_on_another_https_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: str, realm: str
) -> None:
    auth, recorded = auth_for(tmp_path, registry, monkeypatch)
    auth.authenticate(registry, SCOPE, bearer(realm), "https")
    assert not sent_credentials(recorded)
    assert recorded.requests[0][0].startswith(realm + "?")  # asked there, anonymously


@pytest.mark.parametrize(
    ("registry", "realm"),
    [
        ("registry.example.com", "https://registry.example.com/token"),
        ("registry.example.com:5443", "https://registry.example.com/token"),  # any port
        ("registry.example.com", "https://REGISTRY.example.com:8443/token"),  # any case
        ("registry-1.docker.io", "https://auth.docker.io/token"),
        ("docker.io", "https://auth.docker.io/token"),
    ],
)
def test_credentials_go_to_the_registrys_own_realm_over_https(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: str, realm: str
) -> None:
    auth, recorded = auth_for(tmp_path, registry, monkeypatch)
    auth.authenticate(registry, SCOPE, bearer(realm), "https")
    assert sent_credentials(recorded)


def test_credentials_are_withheld_from_the_own_host_over_plain_http_off_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = make_auth(tmp_path, {"registry.example.com": login("alice", SECRET)},
                     insecure=("registry.example.com",))  # fmt: skip
    recorded = Recorded()
    monkeypatch.setattr(auth.transport, "send_with_retries", recorded.send)
    auth.authenticate("registry.example.com", SCOPE,
                      bearer("http://registry.example.com/token"), "https")  # fmt: skip
    assert not sent_credentials(recorded)
