"""The remembered challenges file: what it keeps, how it is written, what it refuses to read."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from rocmenv.context import Context
from rocmenv.errors import RegistryAuthError, RegistryProtocolError
from rocmenv.registry.auth import RegistryAuth
from rocmenv.registry.challenge_cache import (
    MAX_FIELD,
    MAX_FILE,
    ChallengeCache,
    challenge_path,
)
from rocmenv.registry.token_cache import TokenCache, cache_path
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings

REALM = "https://auth.example/token"
#: ``user:…`` base64: the password is registered for redaction process-wide, so it must not
#: be a word other tests' messages contain
CREDENTIALS = "dXNlcjpoMjNiLXVubGlrZWx5LXNlY3JldC03ZjNh"


def test_the_file_sits_beside_the_token_cache_and_apart_from_it(tmp_path: Path) -> None:
    tokens = cache_path({"XDG_CACHE_HOME": str(tmp_path)})
    assert tokens is not None
    assert challenge_path(tokens) == tmp_path / "rocmenv" / "registry-challenges.json"
    assert challenge_path(tokens) != tokens


def test_realm_and_service_round_trip_written_private_and_atomic(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv" / "registry-challenges.json"
    ChallengeCache(path).put("reg.example", REALM, "reg.example")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {
        "version": 1,
        "challenges": {"reg.example": {"realm": REALM, "service": "reg.example"}},
    }
    assert ChallengeCache(path).get("reg.example") == (REALM, "reg.example")
    assert ChallengeCache(path).get("other.example") is None
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


def test_an_unchanged_challenge_is_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    cache = ChallengeCache(path)
    cache.put("reg.example", REALM, "svc")
    path.write_text("{}")  # would be replaced by a second write
    cache.put("reg.example", REALM, "svc")
    assert path.read_text() == "{}"
    cache.put("reg.example", REALM + "2", "svc")
    assert ChallengeCache(path).get("reg.example") == (REALM + "2", "svc")


def test_drop_forgets_a_host(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    ChallengeCache(path).put("reg.example", REALM, "svc")
    ChallengeCache(path).drop("reg.example")
    assert ChallengeCache(path).get("reg.example") is None


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        json.dumps({"version": 2, "challenges": {"r": {"realm": REALM, "service": ""}}}).encode(),
        json.dumps({"version": 1, "challenges": []}).encode(),
        json.dumps({"version": 1, "challenges": {"r": [REALM, "s"]}}).encode(),
        json.dumps({"version": 1, "challenges": {"r": {"realm": 1, "service": "s"}}}).encode(),
        json.dumps({"version": 1, "challenges": {"r": {"realm": "", "service": "s"}}}).encode(),
        json.dumps(
            {"version": 1, "challenges": {"r": {"realm": "x" * (MAX_FIELD + 1), "service": ""}}}
        ).encode(),
        b"\xff\xfe",
    ],
)
def test_a_malformed_file_is_an_empty_cache(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    assert ChallengeCache(path).get("r") is None


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    doc = {"version": 1, "challenges": {"r": {"realm": REALM, "service": "s"}}, "pad": ""}
    doc["pad"] = "x" * MAX_FILE
    path.write_text(json.dumps(doc))
    assert ChallengeCache(path).get("r") is None


def test_an_unwritable_cache_is_only_slower(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = ChallengeCache(blocker / "sub" / "c.json")
    cache.put("r", REALM, "s")  # no error
    assert cache.get("r") == (REALM, "s")


def _auth(tmp_path: Path, realm: str, **env: str) -> RegistryAuth:
    path = tmp_path / "c.json"
    ChallengeCache(path).put("reg.example", realm, "svc")
    ctx = Context(env={"HOME": str(tmp_path), **env})
    transport = Transport(RegistrySettings(), ctx.env)
    return RegistryAuth(
        ctx, transport, TokenCache(tmp_path / "t.json"), ChallengeCache(tmp_path / "c.json")
    )


@pytest.mark.parametrize(
    "realm",
    [
        "http://auth.example/token",  # cleartext off loopback
        "ftp://auth.example/token",
        "https:///token",
        "file:///etc/passwd",
    ],
)
def test_a_remembered_realm_a_fresh_challenge_could_not_name_is_dropped_unasked(
    tmp_path: Path, realm: str
) -> None:
    auth = _auth(tmp_path, realm)
    with pytest.raises((RegistryAuthError, RegistryProtocolError)):
        auth._checked_realm("reg.example", realm)  # what a fresh challenge would meet
    assert auth.fetch_ahead("reg.example", "repository:a:pull") is None
    assert ChallengeCache(tmp_path / "c.json").get("reg.example") is None


def test_a_host_with_credentials_never_asks_a_remembered_realm(tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(
        json.dumps({"auths": {"reg.example": {"auth": CREDENTIALS}}})
    )
    auth = _auth(tmp_path, "https://reg.example:9/token", DOCKER_CONFIG=str(docker))
    assert auth.fetch_ahead("reg.example", "repository:a:pull") is None
    assert auth._ahead == {}


def test_an_anonymous_host_asks_its_remembered_realm_once(tmp_path: Path) -> None:
    """The control of the two tests above: a valid realm and no credentials start one ask."""
    realm = "https://127.0.0.1:9/token"  # refused at once; the ask only fails
    auth = _auth(tmp_path, realm, ROCMENV_REGISTRY_BACKOFF="0")
    assert auth.fetch_ahead("reg.example", "repository:a:pull") == realm
    assert auth.fetch_ahead("reg.example", "repository:a:pull") is None  # already under way
    assert list(auth._ahead) == [(realm, "svc", "repository:a:pull")]
