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


def _auth(
    tmp_path: Path, realm: str, settings: RegistrySettings | None = None, **env: str
) -> RegistryAuth:
    path = tmp_path / "c.json"
    ChallengeCache(path).put("reg.example", realm, "svc")
    ctx = Context(env={"HOME": str(tmp_path), **env})
    transport = Transport(settings or RegistrySettings(), ctx.env)
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


def test_an_insecure_registry_s_remembered_cleartext_realm_is_asked(tmp_path: Path) -> None:
    """As a fresh challenge's: plain HTTP off loopback only for a registry listed insecure."""
    realm = "http://192.0.2.1:9/token"  # TEST-NET: never answers; the ask only fails
    insecure = RegistrySettings(insecure=("reg.example",), retries=0)
    auth = _auth(tmp_path, realm, insecure, ROCMENV_REGISTRY_BACKOFF="0")
    assert auth.fetch_ahead("reg.example", "repository:a:pull") == realm
    assert ChallengeCache(tmp_path / "c.json").get("reg.example") == (realm, "svc")


def test_a_host_that_holds_a_token_or_answers_basic_asks_nothing_ahead(tmp_path: Path) -> None:
    realm = "https://127.0.0.1:9/token"
    auth = _auth(tmp_path, realm, ROCMENV_REGISTRY_BACKOFF="0")
    auth._tokens[("reg.example", "repository:a:pull")] = "held"
    assert auth.fetch_ahead("reg.example", "repository:a:pull") is None
    auth._tokens.clear()
    auth._basic["reg.example"] = "Basic eDp5"
    assert auth.fetch_ahead("reg.example", "repository:a:pull") is None
    assert auth._ahead == {}


# -- bounds: what is at the limit is kept, what is over it is not ------------------------------


def test_fields_at_their_limit_are_kept_a_service_over_it_is_not(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    at, over = "x" * MAX_FIELD, "x" * (MAX_FIELD + 1)
    challenges = {
        "at": {"realm": at, "service": at},
        "long-service": {"realm": REALM, "service": over},
        "no-service": {"realm": REALM, "service": ""},
    }
    path.write_text(json.dumps({"version": 1, "challenges": challenges}))
    cache = ChallengeCache(path)
    assert cache.get("at") == (at, at)
    assert cache.get("long-service") is None
    assert cache.get("no-service") == (REALM, "")


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    doc = {"version": 1, "challenges": {"r": {"realm": REALM, "service": "s"}}, "pad": ""}
    doc["pad"] = "x" * (MAX_FILE - len(json.dumps(doc)))
    path.write_text(json.dumps(doc))
    assert path.stat().st_size == MAX_FILE
    assert ChallengeCache(path).get("r") == (REALM, "s")


def test_at_most_max_entries_hosts_are_read_and_written(tmp_path: Path) -> None:
    from rocmenv.registry.challenge_cache import MAX_ENTRIES

    path = tmp_path / "c.json"
    hosts = [f"h{i:04d}" for i in range(MAX_ENTRIES + 1)]
    entry = {"realm": REALM, "service": "s"}
    path.write_text(json.dumps({"version": 1, "challenges": {h: entry for h in hosts}}))
    cache = ChallengeCache(path)
    assert cache.get(hosts[MAX_ENTRIES - 1]) == (REALM, "s")
    assert cache.get(hosts[MAX_ENTRIES]) is None  # the first MAX_ENTRIES, in file order
    cache.put("a-new-host", REALM, "s")  # sorted first: the last one no longer fits
    written = json.loads(path.read_text())["challenges"]
    assert len(written) == MAX_ENTRIES
    assert "a-new-host" in written and hosts[MAX_ENTRIES - 1] not in written


def test_a_token_asked_ahead_is_its_answer_or_its_error_once_done() -> None:
    import threading

    from rocmenv.registry.challenge_cache import AskAhead
    from rocmenv.registry.response import Response

    answer = Response(status=200, headers={}, body=b"{}", url=REALM)
    ahead = AskAhead(lambda: answer)
    ahead.start()
    assert ahead.result(5) is answer
    gate = threading.Event()
    slow = AskAhead(lambda: (gate.wait(5), answer)[1])
    slow.start()
    assert slow.result(0.05) is None and slow.result(-1) is None  # not yet: a missed chance
    gate.set()
    assert slow.result(5) is answer

    def refused() -> Response:
        raise RegistryAuthError("the realm refused")

    failed = AskAhead(refused)
    failed.start()
    with pytest.raises(RegistryAuthError, match="the realm refused"):
        failed.result(5)

    def bug() -> Response:
        raise KeyError("a bug")

    broken = AskAhead(bug)
    broken.start()
    assert broken.result(5) is None  # anything else: asked again in the ordinary way


def test_a_cache_inside_a_checkout_never_writes_through_its_links(tmp_path: Path) -> None:
    checkout, outside = tmp_path / "checkout", tmp_path / "outside"
    checkout.mkdir()
    outside.mkdir()
    (checkout / ".cache").symlink_to(outside)  # planted by the checkout
    cache = ChallengeCache(checkout / ".cache" / "registry-challenges.json", within=checkout)
    cache.put("reg.example", "https://auth.example/token", "svc")
    assert list(outside.iterdir()) == []


def test_a_cache_file_that_never_ends_is_read_only_up_to_its_cap() -> None:
    assert ChallengeCache(Path("/dev/zero")).get("reg.example") is None


def test_a_bad_entry_beside_good_ones_is_dropped_and_the_rest_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "registry-challenges.json"
    good = {"realm": "https://auth.example/token", "service": "svc"}
    doc = {"version": 1, "challenges": {"a.example": good, "b.example": {"realm": 7}}}
    path.write_text(json.dumps(doc))
    cache = ChallengeCache(path)
    assert cache.get("b.example") is None
    cache.put("c.example", "https://auth.example/token", "svc")
    again = ChallengeCache(path)
    assert again.get("a.example") == ("https://auth.example/token", "svc")
    assert again.get("c.example") == ("https://auth.example/token", "svc")
    assert again.get("b.example") is None


def test_a_valid_file_one_byte_over_the_cap_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    doc = {"version": 1, "challenges": {"r": {"realm": REALM, "service": "s"}}, "pad": ""}
    doc["pad"] = "x" * (MAX_FILE + 1 - len(json.dumps(doc)))
    path.write_text(json.dumps(doc))
    assert path.stat().st_size == MAX_FILE + 1
    assert ChallengeCache(path).get("r") is None


def test_dropping_a_host_not_remembered_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    cache = ChallengeCache(path)
    cache.put("reg.example", REALM, "svc")
    path.write_text("{}")  # would be replaced by a write
    cache.drop("other.example")  # two threads dropping one host: the second finds nothing
    assert path.read_text() == "{}"


def test_the_file_is_written_with_sorted_keys_and_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sorted keys (a stable file, as every file rocmenv writes); no fsync: a cache lost in a
    crash is only slower, and an fsync per command is not."""
    import os

    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    path = tmp_path / "c.json"
    ChallengeCache(path).put("reg.example", REALM, "svc")
    assert synced == []
    text = path.read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True)
    assert text.startswith('{"challenges": ')


def test_a_relative_cache_path_inside_a_checkout_is_only_slower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``XDG_CACHE_HOME=relative``: a path the checkout guard cannot vouch for is not written
    (the guard refuses it with a ValueError), and the command goes on."""
    monkeypatch.chdir(tmp_path)
    cache = ChallengeCache(Path("relative") / "c.json", within=tmp_path)
    cache.put("reg.example", REALM, "svc")  # no error
    assert cache.get("reg.example") == (REALM, "svc")
    assert not (tmp_path / "relative").exists()


def test_a_token_asked_ahead_is_not_waited_for_once_the_deadline_has_passed() -> None:
    import threading
    import time

    from rocmenv.registry.challenge_cache import AskAhead

    gate = threading.Event()
    slow = AskAhead(lambda: (gate.wait(5), None)[1])  # type: ignore[arg-type,return-value]
    slow.start()
    start = time.monotonic()
    assert slow.result(0.0) is None and slow.result(-3) is None
    assert time.monotonic() - start < 0.5  # not a second each
    gate.set()
