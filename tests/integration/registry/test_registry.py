"""The registry client against the real Distribution registry, directly and through the
fault-injecting proxy (429/5xx/hang/truncation/corruption/auth)."""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.errors import (
    DigestMismatch,
    RegistryAuthError,
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnavailable,
)
from rocmenv.grammar.reference import parse
from rocmenv.registry.client import RegistryClient
from rocmenv.registry.manifest import INDEX_TYPES
from rocmenv.settings.registry import RegistrySettings
from tests.support import testenv
from tests.support.faultproxy import (
    FaultProxy,
    Match,
    auth_challenge,
    corrupt_body,
    drop,
    hang,
    non_json,
    status,
    too_many_requests,
    truncate,
)
from tests.support.paginator import Paginator

pytestmark = pytest.mark.integration

MANIFEST = r"/v2/.*/manifests/.*"
TAGS = r"/v2/.*/tags/list"


def client(
    env: dict[str, str] | None = None, **settings: Any
) -> tuple[RegistryClient, list[float]]:
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(min(seconds, 0.05))

    ctx = Context(env={"HOME": "/nonexistent", "ROCMENV_REGISTRY_BACKOFF": "0.01", **(env or {})})
    return RegistryClient(ctx, RegistrySettings(**settings), sleep=sleep), waits


def skopeo_digest(ref: str) -> str:
    out = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--no-tags", "--raw", f"docker://{ref}"],
        check=True,
        capture_output=True,
    ).stdout
    import hashlib

    return "sha256:" + hashlib.sha256(out).hexdigest()


# -- listing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page_size", "default_page"), [(None, None), (None, 100), (1000, None), (250, None), (97, 40)]
)
def test_tag_listing_follows_pagination_at_any_page_size(
    registry: Any, tagset: Any, page_size: int | None, default_page: int | None
) -> None:
    """``n=``/``Link`` paging (the Debian registry doesn't page, so a spec-following paginator
    sits in front of it; ``default_page`` pages even without ``n``, like Docker Hub;
    ``max_page`` < n makes the server cap the page size)."""
    c, _ = client()
    with Paginator(registry.host, default_page=default_page, max_page=default_page) as pager:
        tags = c.list_tags(parse(f"{pager.host}/rocm/sgl-dev"), page_size=page_size)
        requests = pager.tag_requests()
    assert set(tagset.tags) <= set(tags)
    assert len(tags) == len(set(tags)), "no tag listed twice"
    per_page = (
        min(x for x in (page_size, default_page) if x is not None)
        if (page_size or default_page)
        else None
    )
    expected = 1 if per_page is None else math.ceil(len(tags) / per_page)
    assert len(requests) == expected
    assert c.stats.by_kind["tags"] == expected
    if page_size:
        assert f"n={page_size}" in requests[0]


def test_listing_round_trips_match_skopeo(registry: Any) -> None:
    """No more round trips than skopeo list-tags on the same paginating registry."""
    with Paginator(registry.host, default_page=500) as pager:
        c, _ = client()
        ours = c.list_tags(parse(f"{pager.host}/rocm/sgl-dev"))
        mine = len(pager.tag_requests())
        pager.requests.clear()
        out = subprocess.run(
            ["skopeo", "list-tags", "--tls-verify=false", f"docker://{pager.host}/rocm/sgl-dev"],
            check=True,
            capture_output=True,
        ).stdout
        theirs = len(pager.tag_requests())
    assert sorted(json.loads(out)["Tags"]) == sorted(ours)
    assert mine <= theirs


def test_listing_twice_in_one_command_fetches_once(registry: Any) -> None:
    c, _ = client()
    ref = parse(f"{registry.host}/rocm/sgl-dev")
    first = c.list_tags(ref)
    assert c.list_tags(ref) == first
    assert c.stats.by_kind["tags"] == 1


def test_unknown_repository_is_not_found(registry: Any) -> None:
    c, _ = client()
    with pytest.raises(RegistryNotFound) as info:
        c.list_tags(parse(f"{registry.host}/rocm/does-not-exist"))
    assert "rocm/does-not-exist" in str(info.value) and info.value.exit_code == 3


# -- digests and platforms ----------------------------------------------------------------------


def test_head_digest_matches_skopeo_and_the_bytes(registry: Any, family: Any) -> None:
    image = family["demo"]
    c, _ = client()
    ref = parse(image.ref)
    _, head = c.head_manifest(ref)
    assert head.digest == skopeo_digest(image.ref)
    resolved = c.resolve_platform(ref)  # GET verifies the bytes against the digest
    assert c.stats.by_kind["manifest-head"] == 1
    # what resolve_platform found, checked by the test-support client (not rocmenv)
    with testenv.registry_client(registry.host) as raw:
        top = raw.get_manifest(image.repository, image.tag)
        platform = top
        if top.is_index:
            (child,) = [m for m in top.json()["manifests"]
                        if m.get("platform") == {"architecture": "amd64", "os": "linux"}]  # fmt: skip
            platform = raw.get_manifest(image.repository, child["digest"])
    assert resolved.digest == head.digest == top.digest
    assert resolved.media_type == top.media_type
    assert resolved.platform == "linux/amd64"
    assert resolved.platform_digest == platform.digest
    assert resolved.platform_media_type == platform.media_type
    assert resolved.config_digest == platform.json()["config"]["digest"]


def test_release_tag_index_resolves_to_linux_amd64(registry: Any, tagset: Any) -> None:
    release = next(e for e in tagset if e.family == "release" and e.index)
    c, _ = client()
    ref = parse(f"{registry.host}/rocm/sgl-dev:{release.tag}")
    image = c.resolve_platform(ref)
    assert image.media_type in INDEX_TYPES
    assert image.platform_digest != image.digest
    assert image.platform == "linux/amd64"
    before = c.stats.requests
    assert c.resolve_platform(ref) == image
    assert c.stats.requests == before, "a second resolution must not hit the registry again"


def test_unknown_tag_is_not_found_with_hint(registry: Any) -> None:
    c, _ = client()
    with pytest.raises(RegistryNotFound) as info:
        c.head_manifest(parse(f"{registry.host}/rocm/sgl-dev:no-such-tag"))
    assert "no-such-tag" in str(info.value)
    assert "rocmenv tags list" in (info.value.hint or "")


# -- faults ------------------------------------------------------------------------------------


def test_429_with_retry_after_is_honoured(registry: Any, family: Any) -> None:
    c, waits = client(retries=4)
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(method="HEAD", path=MANIFEST), too_many_requests(1), times=2)
        ref = parse(family["demo"].ref.replace(registry.host, proxy.host))
        _, head = c.head_manifest(ref)
        assert proxy.count("HEAD", MANIFEST) == 3
    assert head.digest.startswith("sha256:")
    assert waits == [1.0, 1.0]


def test_429_storm_gives_up_with_registry_error(registry: Any, family: Any) -> None:
    c, waits = client(retries=3)
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(method="HEAD", path=MANIFEST), too_many_requests(2))
        with pytest.raises(RegistryUnavailable) as info:
            c.head_manifest(parse(family["demo"].ref.replace(registry.host, proxy.host)))
        assert proxy.count("HEAD", MANIFEST) == 4
    assert "rate limited" in str(info.value) and info.value.exit_code == 3
    assert waits == [2.0, 2.0, 2.0]


def test_retry_after_far_in_the_future_fails_fast(registry: Any, family: Any) -> None:
    c, waits = client(retries=4)
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(method="HEAD", path=MANIFEST), too_many_requests(3600))
        with pytest.raises(RegistryUnavailable, match=r"wait 3600 s"):
            c.head_manifest(parse(family["demo"].ref.replace(registry.host, proxy.host)))
        assert proxy.count("HEAD", MANIFEST) == 1
    assert waits == []


@pytest.mark.parametrize("fault", [status(500), status(503), drop()], ids=["500", "503", "drop"])
def test_transient_failures_are_retried_with_backoff(
    registry: Any, family: Any, fault: Any
) -> None:
    c, waits = client(retries=3)
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(path=TAGS), fault, times=2)
        tags = c.list_tags(parse(f"{proxy.host}/rocm/sgl-dev"))
        assert proxy.count("GET", TAGS) == 3
    assert tags
    assert len(waits) == 2 and waits[1] > 0


def test_hanging_registry_times_out_per_request(registry: Any) -> None:
    c, _ = client(timeout=0.5, retries=1)
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(path=TAGS), hang(30))
        start = time.monotonic()
        with pytest.raises(RegistryUnavailable) as info:
            c.list_tags(parse(f"{proxy.host}/rocm/sgl-dev"))
        elapsed = time.monotonic() - start
        attempts = proxy.rules[0].hits  # requests that reached the hang (none completes)
    assert "within 0.5 s" in str(info.value)
    assert attempts == 2  # the first attempt and one retry, each cut off
    # a ceiling that only catches a hang: one attempt without its timeout takes 30 s
    # (the cut-off's real figure is measured in benchmarks/bench_timings.py)
    assert elapsed < 25, "an attempt was not cut off by the timeout"


def test_truncated_body_is_retried_then_reported(registry: Any, family: Any) -> None:
    c, _ = client(retries=2)
    with FaultProxy(upstream=registry.host) as proxy:
        ref = parse(family["demo"].ref.replace(registry.host, proxy.host))
        proxy.add_rule(Match(method="GET", path=MANIFEST), truncate(10), times=1)
        c.resolve_platform(ref)  # one truncation: the retry gets the whole body
        c2, _ = client(retries=1)
        proxy.add_rule(Match(method="GET", path=MANIFEST), truncate(10))
        with pytest.raises(RegistryUnavailable, match="truncated"):
            c2.resolve_platform(ref)


def test_manifest_bytes_that_do_not_match_their_digest_are_refused(
    registry: Any, family: Any
) -> None:
    c, _ = client()
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(method="GET", path=MANIFEST), corrupt_body())
        with pytest.raises(DigestMismatch) as info:
            c.resolve_platform(parse(family["demo"].ref.replace(registry.host, proxy.host)))
    assert "hash to" in str(info.value)


def test_non_json_tag_list_is_a_protocol_error(registry: Any) -> None:
    c, _ = client()
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(path=TAGS), non_json())
        with pytest.raises(RegistryProtocolError, match="not JSON"):
            c.list_tags(parse(f"{proxy.host}/rocm/sgl-dev"))


def test_unreachable_registry_is_a_registry_error() -> None:
    c, _ = client(retries=1, timeout=1.0)
    with FaultProxy.unreachable() as hole, pytest.raises(RegistryUnavailable) as info:
        c.list_tags(parse(f"{hole.host}/rocm/sgl-dev"))
    assert "refused" in str(info.value).lower()


def test_blackhole_registry_times_out() -> None:
    c, _ = client(retries=0, timeout=0.5)
    with FaultProxy.blackhole() as hole, pytest.raises(RegistryUnavailable, match=r"within 0\.5 s"):
        c.list_tags(parse(f"{hole.host}/rocm/sgl-dev"))


# -- auth --------------------------------------------------------------------------------------


def test_bearer_challenge_flow_gets_one_token_per_scope(registry: Any, family: Any) -> None:
    c, _ = client()
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(path=r"/v2/.+"), auth_challenge())
        ref = parse(family["demo"].ref.replace(registry.host, proxy.host))
        c.head_manifest(ref)
        c.resolve_platform(ref)
        c.list_tags(ref)
        assert proxy.count("GET", r"/token") == 1
    assert c.stats.by_kind["token"] == 1


def test_auth_registry_refuses_anonymous_with_login_hint(auth_registry: Any) -> None:
    # Docker Hub's way: an anonymous token is granted for any name, then the registry says 401;
    # that is "not found, or private", not "wrong credentials".
    c, _ = client()
    with pytest.raises(RegistryNotFound) as info:
        c.list_tags(parse(f"{auth_registry.host}/rocm/sgl-dev"))
    assert "not found, or private: check the name, or log in" in info.value.what
    assert f"docker login {auth_registry.host}" in (info.value.hint or "")
    assert info.value.exit_code == 3


def test_auth_registry_works_with_docker_config_credentials(
    auth_registry: Any, docker_config_dir: Path
) -> None:
    c, _ = client(env={"DOCKER_CONFIG": str(docker_config_dir)})
    ref = parse(f"{auth_registry.host}/rocm/sgl-dev")
    tags = c.list_tags(ref)
    assert tags
    c.head_manifest(ref.with_tag(tags[0]))
    assert c.stats.by_kind["token"] == 1


def test_wrong_credentials_are_named_but_not_printed(auth_registry: Any, tmp_path: Path) -> None:
    import base64

    secret = "definitely-wrong-password-42"
    auth = base64.b64encode(f"{auth_registry.username}:{secret}".encode()).decode()
    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {auth_registry.host: {"auth": auth}}})
    )
    c, _ = client(env={"DOCKER_CONFIG": str(tmp_path)})
    with pytest.raises(RegistryAuthError) as info:
        c.list_tags(parse(f"{auth_registry.host}/rocm/sgl-dev"))
    from rocmenv.redact import redact

    text = redact(str(info.value))
    assert auth_registry.username in text
    assert secret not in text and auth not in text


# -- mirrors ----------------------------------------------------------------------------------


def test_mirrors_are_tried_in_order_and_the_answering_one_is_recorded(
    registry: Any, family: Any
) -> None:
    image = family["demo"]
    path = parse(image.ref).path
    with FaultProxy.unreachable() as dead, FaultProxy(upstream=registry.host) as proxy:
        c, _ = client(retries=0, mirrors=(("docker.io", (dead.host, proxy.host)),))
        resolved = c.resolve_platform(parse(f"docker.io/{path}:{parse(image.ref).tag}"))
        assert proxy.count("GET", MANIFEST) >= 1
    assert resolved.registry == proxy.host


def test_persistent_5xx_is_unavailable_after_the_retries(registry: Any) -> None:
    c, waits = client(retries=2)
    with FaultProxy(upstream=registry.host) as proxy:
        proxy.add_rule(Match(path=TAGS), status(503))
        with pytest.raises(RegistryUnavailable) as info:
            c.list_tags(parse(f"{proxy.host}/rocm/sgl-dev"))
        assert proxy.count("GET", TAGS) == 3
    assert "HTTP 503" in str(info.value) and "3 attempts" in str(info.value)
    assert len(waits) == 2
