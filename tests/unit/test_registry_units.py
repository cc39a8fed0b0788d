"""Pure pieces of the registry client: challenges, Retry-After, Link headers, host splitting."""

from __future__ import annotations

import email.utils
import time

import pytest

from rocmenv.registry.auth import parse_challenge
from rocmenv.registry.client import _next_link
from rocmenv.registry.connection import split_host
from rocmenv.registry.manifest import pick_platform
from rocmenv.registry.transport import _retry_after


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
    ("netloc", "expected"),
    [
        ("127.0.0.1:5000", ("127.0.0.1", 5000)),
        ("registry.example", ("registry.example", 443)),
        ("[::1]:5000", ("::1", 5000)),
        ("[::1]", ("::1", 443)),
    ],
)
def test_split_host(netloc: str, expected: tuple[str, int]) -> None:
    assert split_host(netloc, 443) == expected
