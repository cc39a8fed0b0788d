"""Issue 10 against the TLS test bed: a registry over TLS with its own CA and Docker Hub's habits
(tests/support/hub_server.py in front of the open registry), and tinyproxy in front of it.

Server-side facts (which host saw which request, with or without ``Authorization``) come from
the hub's request log, never from rocmenv's own counters.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.grammar.reference import parse
from rocmenv.registry.client import RegistryClient
from rocmenv.settings.registry import RegistrySettings
from tests.support import testenv

# alone: the tests count the requests and connections the shared TLS Hub and proxy saw
pytestmark = [pytest.mark.integration, pytest.mark.serial]

REPO = "rocm/sgl-dev"


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ROCMENV_REGISTRY_BACKOFF": "0.01",
        "ROCMENV_TOKEN_CACHE": "0",
    }
    env.update(extra)
    return env


def rocmenv(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        cwd=tmp_path,
        env=env_for(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def since(hub: testenv.HubTLS, seq: int, **match: Any) -> list[dict[str, Any]]:
    return [
        e
        for e in hub.log(seq)
        if all((v(e[k]) if callable(v) else e[k] == v) for k, v in match.items())
    ]


def client(
    env: dict[str, str] | None = None, **settings: Any
) -> tuple[RegistryClient, list[float]]:
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)

    ctx = Context(env={"HOME": "/nonexistent", "ROCMENV_REGISTRY_BACKOFF": "0.01", **(env or {})})
    return RegistryClient(ctx, RegistrySettings(**settings), sleep=sleep), waits


# -- TLS trust ----------------------------------------------------------------------------------


def test_tls_registry_trusted_through_docker_certs_d(hub: testenv.HubTLS, tmp_path: Path) -> None:
    ok = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", "--json")
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["tags"]) > 2000
    # the same command without the certs.d directory: the CA is not trusted
    no_certs_d = rocmenv(
        tmp_path, "tags", "list", f"{hub.registry}/{REPO}", ROCMENV_CERTS_D=str(tmp_path)
    )
    assert no_certs_d.returncode == 3
    assert "TLS certificate is not trusted" in no_certs_d.stderr
    assert "certs.d" in no_certs_d.stderr and "Traceback" not in no_certs_d.stderr


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
def test_tls_registry_trusted_through_a_ca_bundle_variable(
    hub: testenv.HubTLS, tmp_path: Path, variable: str
) -> None:
    untrusted = rocmenv(tmp_path, "tags", "list", f"{hub.registry_cafile}/{REPO}")
    assert untrusted.returncode == 3
    assert "TLS certificate is not trusted" in untrusted.stderr
    trusted = rocmenv(
        tmp_path, "tags", "list", f"{hub.registry_cafile}/{REPO}", **{variable: str(hub.ca_file)}
    )
    assert trusted.returncode == 0, trusted.stderr


def test_insecure_means_unverified_https_first(hub: testenv.HubTLS, tmp_path: Path) -> None:
    seq = hub.last_seq()
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{hub.registry_cafile}/{REPO}",
        ROCMENV_INSECURE_REGISTRIES=hub.registry_cafile,
    )
    assert out.returncode == 0, out.stderr
    # the hub speaks only TLS: requests it logged came over HTTPS, unverified
    assert since(hub, seq, host="hub.rocmenv.test", path=lambda p: "/tags/list" in p)


def test_insecure_falls_back_to_plain_http(registry: Any, tmp_path: Path) -> None:
    plain = "registry.rocmenv.test:" + registry.host.rsplit(":", 1)[1]  # the open registry
    refused = rocmenv(tmp_path, "tags", "list", f"{plain}/{REPO}", ROCMENV_REGISTRY_RETRIES="0")
    assert refused.returncode == 3  # HTTPS only for a non-loopback name
    ok = rocmenv(tmp_path, "tags", "list", f"{plain}/{REPO}", ROCMENV_INSECURE_REGISTRIES=plain)
    assert ok.returncode == 0, ok.stderr


# -- Docker Hub's habits -----------------------------------------------------------------------


def test_missing_repository_is_not_found_or_private_distinct_from_bad_credentials(
    hub: testenv.HubTLS, auth_registry: Any, tmp_path: Path
) -> None:
    missing = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/rocm/sgl-devv")
    assert missing.returncode == 3
    assert "not found, or private: check the name, or log in" in missing.stderr
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(
        testenv.docker_config_json({auth_registry.host: (auth_registry.username, "wrong")})
    )
    wrong = rocmenv(
        tmp_path, "tags", "list", f"{auth_registry.host}/{REPO}", DOCKER_CONFIG=str(config)
    )
    assert wrong.returncode == 3
    assert "not found, or private" not in wrong.stderr
    assert "refused user 'ci-bot'" in wrong.stderr


def test_blob_redirect_to_the_cdn_carries_no_credentials(hub: testenv.HubTLS) -> None:
    c, _ = client()
    ref = parse(f"{hub.registry}/{REPO}:v0.5.8-rocm700-mi30x-20260215")
    host, top = c.get_manifest(ref)
    if top.is_index:
        entry = top.data["manifests"][0]
        _, top = c.get_manifest(parse(f"{hub.registry}/{REPO}@{entry['digest']}"), host)
    seq = hub.last_seq()
    config = c.get_blob(ref, host, top.data["config"]["digest"])
    assert json.loads(config)
    registry_side = since(hub, seq, host="registry.rocmenv.test", path=lambda p: "/blobs/" in p)
    cdn_side = since(hub, seq, host="cdn.rocmenv.test")
    assert registry_side and all(e["authorization"] for e in registry_side)
    assert cdn_side and not any(e["authorization"] for e in cdn_side)


def test_credentials_do_not_follow_a_realm_on_another_host(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(
        testenv.docker_config_json({hub.registry: ("someone", "registry-secret")})
    )
    seq = hub.last_seq()
    out = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", DOCKER_CONFIG=str(config))
    assert out.returncode == 0, out.stderr
    tokens = since(hub, seq, host="auth.rocmenv.test")
    assert tokens and not any(e["authorization"] for e in tokens)


def test_ratelimit_headers_are_read(hub: testenv.HubTLS) -> None:
    c, _ = client(ratelimit_warning=1000)
    c.head_manifest(parse(f"{hub.registry}/{REPO}:v0.5.8-rocm700-mi30x-20260215"))
    (limit,) = c.ratelimits()
    assert limit["host"] == hub.registry and limit["limit"] == 100 and limit["window"] == 21600
    assert isinstance(limit["remaining"], int)
    assert c.ratelimit_warnings() and "ratelimit-remaining" in c.ratelimit_warnings()[0]


def test_429_without_retry_after_is_retried_with_backoff(hub: testenv.HubTLS) -> None:
    c, waits = client()
    seq = hub.last_seq()
    _, head = c.head_manifest(parse(f"{hub.registry}/limited/{REPO}:v0.5.8-rocm700-mi30x-20260215"))
    assert head.digest.startswith("sha256:")
    assert len(since(hub, seq, method="HEAD")) >= 2  # at least one 429, then the answer
    assert waits and all(w > 0 for w in waits)


def test_tag_list_that_ignores_n_and_sends_no_link(hub: testenv.HubTLS, tmp_path: Path) -> None:
    seq = hub.last_seq()
    out = rocmenv(
        tmp_path, "tags", "list", f"{hub.registry}/{REPO}", "--page-size", "100", "--json"
    )
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["tags"]) > 2000
    assert len(since(hub, seq, path=lambda p: "/tags/list" in p, authorization=True)) == 1


def test_absolute_link_urls_are_followed(hub: testenv.HubTLS, tmp_path: Path) -> None:
    seq = hub.last_seq()
    out = rocmenv(
        tmp_path, "tags", "list", f"{hub.registry}/paged/{REPO}", "--page-size", "1000", "--json"
    )
    assert out.returncode == 0, out.stderr
    direct = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", "--json")
    assert json.loads(out.stdout)["tags"] == json.loads(direct.stdout)["tags"]
    pages = since(hub, seq, path=lambda p: "/paged/" in p and "/tags/list" in p, authorization=True)
    assert len(pages) == 3  # 2,849 tags in pages of 1,000
    assert any("last=" in e["path"] for e in pages)


def test_page_size_above_1000_is_an_error_naming_the_limit(tmp_path: Path) -> None:
    out = rocmenv(tmp_path, "tags", "list", "127.0.0.1:5000/rocm/sgl-dev", "--page-size", "5000")
    assert out.returncode == 2
    assert "1 to 1000" in out.stderr


# -- the forward proxy --------------------------------------------------------------------------


def _proxy_log_lines(hub: testenv.HubTLS) -> int:
    try:
        return sum(
            "registry.rocmenv.test" in line for line in hub.proxy_log.read_text().splitlines()
        )
    except FileNotFoundError:
        return 0


def test_https_proxy_from_the_environment_is_used(hub: testenv.HubTLS, tmp_path: Path) -> None:
    before = _proxy_log_lines(hub)
    out = rocmenv(
        tmp_path, "tags", "list", f"{hub.registry}/{REPO}", HTTPS_PROXY=f"http://{hub.proxy}"
    )
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 60  # tinyproxy logs the tunnel once it closes: poll for it
    while _proxy_log_lines(hub) <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _proxy_log_lines(hub) > before


def test_a_dead_proxy_fails_and_no_proxy_bypasses_it(hub: testenv.HubTLS, tmp_path: Path) -> None:
    dead = {
        "HTTPS_PROXY": "http://someone:proxy-secret@127.0.0.1:9",
        "ROCMENV_REGISTRY_RETRIES": "0",
    }
    out = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", **dead)
    assert out.returncode == 3 and "proxy" in out.stderr
    assert "proxy-secret" not in out.stderr
    for no_proxy in (".rocmenv.test", "registry.rocmenv.test:5443,auth.rocmenv.test", "*"):
        ok = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", NO_PROXY=no_proxy, **dead)
        assert ok.returncode == 0, (no_proxy, ok.stderr)


def test_proxy_from_the_config_file(hub: testenv.HubTLS, tmp_path: Path) -> None:
    (tmp_path / "rocmenv.toml").write_text(
        '[registry]\nproxy = "http://127.0.0.1:9"\nretries = 0\n'
    )
    out = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}")
    assert out.returncode == 3 and "proxy" in out.stderr
    (tmp_path / "rocmenv.toml").write_text(f'[registry]\nproxy = "http://{hub.proxy}"\n')
    out = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}")
    assert out.returncode == 0, out.stderr


# -- anonymous token cache ----------------------------------------------------------------------


def test_anonymous_token_cache_skips_the_token_round_trip(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = {"ROCMENV_TOKEN_CACHE": "1", "XDG_CACHE_HOME": str(cache)}
    seq = hub.last_seq()
    first = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", **env)
    assert first.returncode == 0, first.stderr
    assert len(since(hub, seq, host="auth.rocmenv.test")) == 1
    path = cache / "rocmenv" / "registry-tokens.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    seq = hub.last_seq()
    second = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/{REPO}", **env)
    assert second.returncode == 0, second.stderr
    assert since(hub, seq, host="auth.rocmenv.test") == []
    # the cached token goes with the first request: no 401 round trip either
    (listing,) = since(hub, seq, path=lambda p: "/tags/list" in p)
    assert listing["authorization"]


def test_an_untrusted_run_leaves_no_token_for_a_trusted_one(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    """Issue 22 item 6: untrusted runs learn nothing; a cached token is reused by the next
    (trusted) command without asking the realm again."""
    cache = tmp_path / "cache"
    env = {"ROCMENV_TOKEN_CACHE": "1", "XDG_CACHE_HOME": str(cache)}
    ref = f"{hub.registry}/{REPO}:{NIGHTLY}"
    out = rocmenv(tmp_path, "resolve", ref, "--json", ROCMENV_UNTRUSTED="1", **env)
    assert out.returncode == 0, out.stderr
    assert not (cache / "rocmenv" / "registry-tokens.json").exists()
    out = rocmenv(tmp_path, "resolve", ref, "--json", **env)  # the control: trusted learns
    assert out.returncode == 0, out.stderr
    assert (cache / "rocmenv" / "registry-tokens.json").exists()


def test_a_refused_cached_token_is_replaced_not_reused(hub: testenv.HubTLS, tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "rocmenv"
    cache.mkdir(parents=True)
    realm = f"https://auth.rocmenv.test:{hub.registry.rsplit(':', 1)[1]}/token"
    key = "\x1f".join((realm, "hub.rocmenv.test", f"repository:{REPO}:pull"))
    (cache / "registry-tokens.json").write_text(
        json.dumps(
            {
                "version": 1,
                "tokens": {key: {"token": "revoked-token", "expires": time.time() + 3600}},
            }
        )
    )
    (cache / "registry-challenges.json").write_text(
        json.dumps(
            {
                "version": 1,
                "challenges": {hub.registry: {"realm": realm, "service": "hub.rocmenv.test"}},
            }
        )
    )
    seq = hub.last_seq()
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{hub.registry}/{REPO}",
        ROCMENV_TOKEN_CACHE="1",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    assert out.returncode == 0, out.stderr
    # the cached token was sent first (refused: 401), then one fresh token, then success
    listings = since(hub, seq, path=lambda p: "/tags/list" in p)
    assert [e["authorization"] for e in listings] == [True, True]
    assert len(since(hub, seq, host="auth.rocmenv.test")) == 1


def test_tokens_obtained_with_credentials_are_never_cached(
    auth_registry: Any, tmp_path: Path
) -> None:
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(
        testenv.docker_config_json(
            {auth_registry.host: (auth_registry.username, auth_registry.password)}
        )
    )
    cache = tmp_path / "cache"
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{auth_registry.host}/{REPO}",
        ROCMENV_TOKEN_CACHE="1",
        XDG_CACHE_HOME=str(cache),
        DOCKER_CONFIG=str(config),
    )
    assert out.returncode == 0, out.stderr
    assert not (cache / "rocmenv" / "registry-tokens.json").exists()


def test_realm_on_another_host_is_not_the_credentials_own() -> None:
    from rocmenv.registry.auth import _same_owner

    assert _same_owner("registry-1.docker.io", "auth.docker.io")
    assert not _same_owner(testenv.HUB_REGISTRY, "auth.rocmenv.test")
    assert not _same_owner("mirror.example", "auth.docker.io")
    assert _same_owner("127.0.0.1:5001", "127.0.0.1")


# -- rate limits: spared and shown --------------------------------------------------------------

NIGHTLY = "v0.5.8-rocm700-mi30x-20260215"


def _manifest_gets(hub: testenv.HubTLS, seq: int) -> list[dict[str, Any]]:
    return since(hub, seq, method="GET", path=lambda p: "/manifests/" in p)


def test_validate_pin_and_drift_do_no_manifest_get_when_head_matches_the_lock(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    (tmp_path / "rocmenv.toml").write_text(
        f'default-profile = "ci"\n[profiles.ci]\nextends = "rocm"\n'
        f'image = "{hub.registry}/{REPO}:{NIGHTLY}"\n'
    )
    seq = hub.last_seq()
    pinned = rocmenv(tmp_path, "pin")
    assert pinned.returncode == 0, pinned.stderr
    assert _manifest_gets(hub, seq)  # pinning reads and verifies the manifests once
    for args in (("validate",), ("pin", "--update"), ("drift",)):
        seq = hub.last_seq()
        out = (
            rocmenv(tmp_path, *args, "--json")
            if args[0] != "drift"
            else rocmenv(tmp_path, "drift", "--format", "json")
        )
        # drift exits 1 here: newer tags exist (that is not what this test is about)
        assert out.returncode in ((0, 1) if args[0] == "drift" else (0,)), (args, out.stderr)
        assert _manifest_gets(hub, seq) == [], args  # zero pulls counted
        assert since(hub, seq, method="HEAD", path=lambda p: "/manifests/" in p), args
        data = json.loads(out.stdout)
        (limit,) = data["ratelimit"]
        assert limit["host"] == hub.registry and limit["limit"] == 100
        assert "round_trips" not in data and "round_trips" in data["stats"]


def test_drift_and_doctor_show_ratelimit_remaining_and_warn_when_low(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    (tmp_path / "rocmenv.toml").write_text(
        f'default-profile = "ci"\n[registry]\nratelimit-warning = 1000\n'
        f'[profiles.ci]\nextends = "rocm"\nimage = "{hub.registry}/{REPO}:{NIGHTLY}"\n'
    )
    assert rocmenv(tmp_path, "pin").returncode == 0
    drift = rocmenv(tmp_path, "drift")
    assert "pulls left (ratelimit-remaining)" in drift.stdout, drift.stdout
    assert "warning" in drift.stderr and "ratelimit-remaining" in drift.stderr
    doctor = rocmenv(tmp_path, "doctor")
    assert f"pull limit {hub.registry}" in doctor.stdout, doctor.stdout
    assert "ratelimit-remaining" in doctor.stdout


def test_errors_under_json_are_one_json_object_on_stdout(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    out = rocmenv(tmp_path, "tags", "list", f"{hub.registry}/rocm/sgl-devv", "--json")
    assert out.returncode == 3
    error = json.loads(out.stdout)["error"]
    assert error["code"] == 3 and "not found, or private" in error["what"]
    assert "docker login" in error["hint"]
    assert "not found, or private" in out.stderr  # the text stays on stderr


# -- mirrors ------------------------------------------------------------------------------------


def test_any_mirror_error_falls_through_to_the_registry_naming_the_mirror(
    hub: testenv.HubTLS, registry: Any, tmp_path: Path
) -> None:
    # the first mirror answers 401 for every repository (a hostile/misconfigured mirror), the
    # second serves; Docker falls through on any error, and so does rocmenv
    from tests.support.hostile_registry import HostileRegistry

    with HostileRegistry("capture") as bad:
        out = rocmenv(
            tmp_path,
            "resolve",
            f"{hub.registry}/{REPO}:{NIGHTLY}",
            "--json",
            ROCMENV_MIRRORS=f"{hub.registry}={bad.host},{hub.registry}={registry.host}",
        )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["registry"] == registry.host
    assert f"mirror {bad.host} failed" in out.stderr


def test_a_lock_pinned_through_a_mirror_records_the_canonical_reference(
    hub: testenv.HubTLS, registry: Any, tmp_path: Path
) -> None:
    (tmp_path / "rocmenv.toml").write_text(
        f'default-profile = "ci"\n[registry]\nmirrors = {{ "{hub.registry}" = ["{registry.host}"] }}\n'
        f'[profiles.ci]\nextends = "rocm"\nimage = "{hub.registry}/{REPO}:{NIGHTLY}"\n'
    )
    out = rocmenv(tmp_path, "pin")
    assert out.returncode == 0, out.stderr
    entry = json.loads((tmp_path / "rocmenv.lock").read_text())["profiles"]["ci"]
    assert entry["repository"] == f"{hub.registry}/{REPO}"
    assert entry["registry"] == registry.host  # where it was resolved from: information
    options = rocmenv(tmp_path, "options", "--json", "--no-host-check")
    assert options.returncode == 0, options.stderr
    assert f"{hub.registry}/{REPO}@{entry['digest']}" in options.stdout
    assert f"{registry.host}/{REPO}@" not in options.stdout


def test_credentials_never_travel_in_cleartext_off_loopback(
    auth_registry: Any, tmp_path: Path
) -> None:
    # the token-auth registry, reached by a non-loopback name over plain HTTP (insecure)
    plain = "registry.rocmenv.test:" + auth_registry.host.rsplit(":", 1)[1]
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(
        testenv.docker_config_json({plain: (auth_registry.username, auth_registry.password)})
    )
    out = rocmenv(
        tmp_path,
        "tags",
        "list",
        f"{plain}/{REPO}",
        DOCKER_CONFIG=str(config),
        ROCMENV_INSECURE_REGISTRIES=plain,
    )
    assert out.returncode == 3
    assert "refusing to send them in cleartext" in out.stderr
    assert auth_registry.password not in out.stderr


def test_connections_are_reused_within_a_command(hub: testenv.HubTLS, tmp_path: Path) -> None:
    (tmp_path / "rocmenv.toml").write_text(
        f'default-profile = "ci"\n[profiles.ci]\nextends = "rocm"\n'
        f'image = "{hub.registry}/{REPO}:{NIGHTLY}"\n'
    )
    seq = hub.last_seq()
    out = rocmenv(tmp_path, "pin")  # 401, token, HEAD/GETs of the index and the image
    assert out.returncode == 0, out.stderr
    registry_side = since(hub, seq, host="registry.rocmenv.test")
    assert len(registry_side) >= 3
    assert len({e["peer"] for e in registry_side}) == 1  # one kept-alive connection
