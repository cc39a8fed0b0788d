"""Pure pieces of the registry client: challenges, Retry-After, Link headers, host splitting."""

from __future__ import annotations

import email.utils
import time
from pathlib import Path

import pytest

from rocmenv.errors import ConfigError, RegistryProtocolError
from rocmenv.grammar.reference import is_loopback_host
from rocmenv.registry.auth import parse_challenge
from rocmenv.registry.manifest import pick_platform
from rocmenv.registry.proxy import proxy_for
from rocmenv.registry.response import retry_after as _retry_after
from rocmenv.registry.tag_list import next_link as _next_link


def test_bearer_challenge_parameters() -> None:
    c = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:rocm/sgl-dev:pull"'
    )
    assert c is not None and c.scheme == "bearer"
    assert c.params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:rocm/sgl-dev:pull",
    }


def test_challenge_with_commas_inside_quotes_and_unquoted_values() -> None:
    c = parse_challenge(
        'Bearer realm="https://x/token",scope="repository:a:pull,push", error=insufficient_scope'
    )
    assert c is not None
    assert c.params["scope"] == "repository:a:pull,push"
    assert c.params["error"] == "insufficient_scope"
    basic = parse_challenge('Basic realm="Registry Realm"')
    assert basic is not None and basic.scheme == "basic"


def test_retry_after_seconds_and_http_date() -> None:
    assert _retry_after("7") == 7.0
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (_retry_after(future) or 0) <= 31
    assert _retry_after("garbage") is None
    assert _retry_after(None) is None


def test_next_link_is_the_path_and_query() -> None:
    assert (
        _next_link('</v2/rocm/sgl-dev/tags/list?last=v1&n=100>; rel="next"')
        == "/v2/rocm/sgl-dev/tags/list?last=v1&n=100"
    )
    assert (
        _next_link('<https://r.example/v2/a/tags/list?n=5&last=x>; rel="next"')
        == "/v2/a/tags/list?n=5&last=x"
    )
    assert _next_link('</v2/a/tags/list?n=5>; rel="prev"') is None


def test_platform_pick_prefers_plain_amd64_and_skips_attestations() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:att", "platform": {"os": "unknown", "architecture": "unknown"}},
            {
                "digest": "sha256:v3",
                "platform": {"os": "linux", "architecture": "amd64", "variant": "v3"},
            },
            {"digest": "sha256:plain", "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
        ]
    }
    assert (pick_platform(index, "linux", "amd64") or {})["digest"] == "sha256:plain"
    assert pick_platform({"manifests": []}, "linux", "amd64") is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1:5000", True),
        ("127.1.2.3", True),
        ("[::1]:5000", True),
        ("localhost:5000", True),
        ("LOCALHOST", True),
        ("127.attacker.example", False),
        ("127.0.0.1.nip.io", False),
        ("localhost.attacker.example", False),
        ("10.0.0.1", False),
        ("registry-1.docker.io", False),
    ],
)
def test_loopback_is_decided_by_ipaddress_not_by_prefix(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    ("url", "env", "expected"),
    [
        ("https://r.example/v2/", {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
        (
            "https://r.example/v2/",
            {"https_proxy": "p:3128", "HTTPS_PROXY": "http://x:1"},
            "http://p:3128",
        ),
        ("http://r.example/v2/", {"HTTPS_PROXY": "http://p:3128"}, None),
        ("http://r.example/v2/", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
        ("https://r.example/v2/", {"ALL_PROXY": "http://a:1"}, "http://a:1"),
        ("https://r.example/v2/", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        (
            "https://r.example/v2/",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "ample"},
            "http://p:1",
        ),
        ("https://r.example/v2/", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example"}, None),
        ("https://a.r.example/v2/", {"HTTPS_PROXY": "http://p:1", "no_proxy": "r.example"}, None),
        (
            "https://r.example:5000/",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "r.example:5000"},
            None,
        ),
        (
            "https://r.example:5001/",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "r.example:5000"},
            "http://p:1",
        ),
        ("https://10.1.2.3/", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, None),
        (
            "https://11.1.2.3/",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"},
            "http://p:1",
        ),
        ("https://[::1]:5000/", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "::1/128"}, None),
        (
            "https://r.example/",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "a.example, r.example"},
            None,
        ),
    ],
)
def test_proxy_from_environment_as_requests_reads_it(
    url: str, env: dict[str, str], expected: str | None
) -> None:
    assert proxy_for(url, env) == expected


def test_proxy_from_config_wins_and_config_no_proxy_adds() -> None:
    env = {"HTTPS_PROXY": "http://env:1"}
    assert proxy_for("https://r.example/", env, "http://cfg:2") == "http://cfg:2"
    assert proxy_for("https://r.example/", env, "http://cfg:2", ("r.example",)) is None


def test_socks_proxy_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="SOCKS"):
        proxy_for("https://r.example/", {"ALL_PROXY": "socks5://p:1080"})


def test_next_link_absolute_same_host_and_other_host_refused() -> None:
    base = "https://r.example/v2/x/tags/list?n=2"
    link = '<https://r.example/v2/x/tags/list?last=b&n=2>; rel="next"'
    assert _next_link(link, base, "r.example") == "/v2/x/tags/list?last=b&n=2"
    with pytest.raises(RegistryProtocolError, match="another host"):
        _next_link('<https://evil.example/v2/x/tags/list?last=b>; rel="next"', base, "r.example")


def test_credentials_are_looked_up_by_the_host_contacted(tmp_path: Path) -> None:
    import base64
    import json

    from rocmenv.context import Context
    from rocmenv.registry.auth import RegistryAuth

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": b64("hub:hub-secret")},
                    "mirror.example:5000": {"auth": b64("m:mirror-secret")},
                }
            }
        )
    )
    from rocmenv.registry.transport import Transport
    from rocmenv.settings.registry import RegistrySettings

    env = {"DOCKER_CONFIG": str(tmp_path)}
    auth = RegistryAuth(Context(env=env), transport=Transport(RegistrySettings(), env))
    assert auth._credentials("registry-1.docker.io") == ("hub", "hub-secret")
    assert auth._credentials("mirror.example:5000") == ("m", "mirror-secret")
    assert auth._credentials("other-mirror.example:5000") is None  # never the Hub's
