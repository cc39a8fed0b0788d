"""Registry authentication: challenges, where logins are read from, which credentials go where,
and what a token server's answer means — against a scripted loopback token server."""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
import uuid
from pathlib import Path

import pytest

from rocmenv.context import Context
from rocmenv.errors import RegistryAuthError, RegistryProtocolError
from rocmenv.redact import redact
from rocmenv.registry.auth import RegistryAuth, _same_owner, parse_challenge
from rocmenv.registry.challenge_cache import ChallengeCache
from rocmenv.registry.credentials import (
    IDENTITY_TOKEN,
    credential_files,
    host_entries,
    secret_pair,
)
from rocmenv.registry.token_cache import TokenCache
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings
from tests.support.scripted_http import Answer, ScriptedServer

SCOPE = "repository:x/y:pull"


def make_auth(
    tmp_path: Path,
    logins: dict[str, dict[str, str]] | None = None,
    cache: TokenCache | None = None,
    challenges: ChallengeCache | None = None,
    **settings: object,
) -> RegistryAuth:
    env = {"HOME": str(tmp_path), "ROCMENV_REGISTRY_BACKOFF": "0"}
    if logins is not None:
        (tmp_path / "docker").mkdir(parents=True, exist_ok=True)
        (tmp_path / "docker" / "config.json").write_text(json.dumps({"auths": logins}))
        env["DOCKER_CONFIG"] = str(tmp_path / "docker")
    transport = Transport(RegistrySettings(**settings), env, lambda s: None)  # type: ignore[arg-type]
    return RegistryAuth(Context(env=env), transport, cache, challenges)


def login(user: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def token_server(status: int = 200, body: bytes = b'{"token": "tok-123456789"}') -> ScriptedServer:
    return ScriptedServer(lambda req: Answer(status, {"Content-Type": "application/json"}, body))


def bearer(realm: str, scope: str = SCOPE) -> str:
    return f'Bearer realm="{realm}",service="svc",scope="{scope}"'


# -- challenges ---------------------------------------------------------------------------------


def test_a_challenge_keeps_escaped_quotes_and_lowercases_keys_not_values() -> None:
    c = parse_challenge('  Bearer Realm="http://a/t\\"x" ,  Service=Reg,  scope="s" ')
    assert c is not None and c.scheme == "bearer"
    assert c.params == {"realm": 'http://a/t"x', "service": "Reg", "scope": "s"}


def test_an_empty_challenge_is_unreadable_and_a_bare_scheme_has_no_parameters() -> None:
    assert parse_challenge("   ") is None
    bare = parse_challenge("Basic")
    assert bare is not None and (bare.scheme, bare.params) == ("basic", {})
    cut = parse_challenge('Bearer realm="http://a/t",broken')
    assert cut is not None and cut.params == {"realm": "http://a/t"}


def test_an_unterminated_quoted_value_ends_the_challenge() -> None:
    c = parse_challenge('Bearer realm="http://a/t\\')
    assert c is not None and c.params == {"realm": "http://a/t\\"}


@pytest.mark.parametrize(
    ("value", "params"),
    [
        ("Bearer a=1,b=2,c=3", {"a": "1", "b": "2", "c": "3"}),
        ("Bearer a=b, ", {"a": "b"}),
        ("Bearer Xa=1", {"xa": "1"}),
        ('Bearer realm="a\\"', {"realm": 'a"'}),
        ('Bearer a="x"bc=d', {"a": "x", "bc": "d"}),
        ("Bearer realm=", {"realm": ""}),  # ends at the "=": an empty value, not a crash
        ('Bearer service="x",realm=', {"service": "x", "realm": ""}),
    ],
)
def test_a_challenge_s_parameters_are_split_as_written(value: str, params: dict[str, str]) -> None:
    c = parse_challenge(value)
    assert c is not None and c.params == params


# -- where logins are read ----------------------------------------------------------------------


def test_login_files_are_consulted_in_podman_then_docker_order() -> None:
    env = {
        "HOME": "/h",
        "REGISTRY_AUTH_FILE": "/a/auth.json",
        "XDG_RUNTIME_DIR": "/run/u",
        "XDG_CONFIG_HOME": "/cfg",
        "DOCKER_CONFIG": "/d",
    }
    assert credential_files(env) == [
        (Path("/a/auth.json"), "containers"),
        (Path("/run/u/containers/auth.json"), "containers"),
        (Path("/cfg/containers/auth.json"), "containers"),
        (Path("/d/config.json"), "docker"),
    ]
    assert credential_files({"HOME": "/h"}) == [
        (Path("/h/.config/containers/auth.json"), "containers"),
        (Path("/h/.docker/config.json"), "docker"),
    ]


def test_without_home_in_the_environment_login_files_are_under_the_users_home() -> None:
    home = Path.home()
    assert credential_files({}) == [
        (home / ".config" / "containers" / "auth.json", "containers"),
        (home / ".docker" / "config.json", "docker"),
    ]


def test_a_namespace_login_is_dropped_a_host_login_kept() -> None:
    raw: dict[str, object] = {
        "credsStore": "x",
        "auths": {
            "quay.io/org": {"auth": "a"},
            "quay.io/X": {"auth": "a2"},
            "https://reg.example/a://b": {"auth": "a3"},
            "https://quay.io/org/": {"auth": "b"},
            "quay.io": {"auth": "c"},
            "https://reg.example/": {"auth": "d"},
            "https://index.docker.io/v1/": {"auth": "e"},
        },
    }
    assert host_entries(raw) == {
        "credsStore": "x",
        "auths": {
            "quay.io": {"auth": "c"},
            "https://reg.example/": {"auth": "d"},
            "https://index.docker.io/v1/": {"auth": "e"},
        },
    }
    assert host_entries({"auths": "odd"}) == {"auths": "odd"}


@pytest.mark.parametrize(
    ("entry", "pair"),
    [
        ({"Username": "u", "Password": "p4ssw0rd-a"}, ("u", "p4ssw0rd-a")),
        ({"username": "u", "password": "p4ssw0rd-b"}, ("u", "p4ssw0rd-b")),
        ({"Username": "u", "Password": "p", "IdentityToken": "idtok-aaaa"}, (IDENTITY_TOKEN, "idtok-aaaa")),
        ({"identitytoken": "idtok-bbbb"}, (IDENTITY_TOKEN, "idtok-bbbb")),
        ({"Username": "u"}, None),
        ({"Password": "p4ssw0rd-c"}, None),
    ],
)  # fmt: skip
def test_a_login_entry_gives_user_and_password_or_the_identity_token(
    entry: dict[str, str], pair: tuple[str, str] | None
) -> None:
    assert secret_pair(entry) == pair


def test_every_secret_of_a_login_entry_is_redacted_even_unused_ones() -> None:
    pw, tok = f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"  # new to this process
    secret_pair({"Password": pw, "IdentityToken": tok})
    assert redact(f"pw {pw} tok {tok}") == "pw *** tok ***"
    secret_pair({"Username": "u"})  # nothing more to register: not the word "None"
    assert redact("value None") == "value None"


@pytest.mark.parametrize(("kind", "content"), [("docker", "{not json"), ("containers", "[1, 2]")])
def test_a_broken_login_file_is_an_error_naming_it_and_the_fix(
    tmp_path: Path, kind: str, content: str
) -> None:
    env = {"HOME": str(tmp_path)}
    if kind == "docker":
        path = tmp_path / ".docker" / "config.json"
    else:
        path = tmp_path / "auth.json"
        env["REGISTRY_AUTH_FILE"] = str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    auth = RegistryAuth(Context(env=env), Transport(RegistrySettings(), env))
    with pytest.raises(RegistryAuthError) as err:
        auth._credentials("reg.example")
    assert f"cannot read credentials for reg.example from {path}" in err.value.what
    if kind == "docker":
        assert (
            err.value.hint
            == "fix the Docker config (or its credential helper), or run `docker login`"
        )
    else:
        assert err.value.what == (
            f"cannot read credentials for reg.example from {path}: not a JSON object"
        )
        assert err.value.hint == f"fix {path} (podman/skopeo's auth.json), or run `podman login`"


def test_the_first_file_with_a_login_for_the_host_answers(tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"auths": {"other.example": login("o", "other-pw-1")}}))
    (tmp_path / ".docker").mkdir()
    (tmp_path / ".docker" / "config.json").write_text(
        json.dumps({"auths": {"reg.example": login("d", "docker-pw-1")}})
    )
    (tmp_path / "dir.json").mkdir()
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(first),
           "XDG_RUNTIME_DIR": str(tmp_path / "nowhere")}  # fmt: skip
    auth = RegistryAuth(Context(env=env), Transport(RegistrySettings(), env))
    assert auth._credentials("reg.example") == ("d", "docker-pw-1")
    assert auth.user_for("reg.example") == "d"
    assert auth._credentials("third.example") is None
    assert auth.user_for("third.example") is None


def test_docker_hub_hosts_find_the_login_kept_under_the_index_name(tmp_path: Path) -> None:
    auth = make_auth(tmp_path, {"https://index.docker.io/v1/": login("hubber", "hub-pw-1")})
    assert auth._credentials("registry-1.docker.io") == ("hubber", "hub-pw-1")
    assert auth._credentials("mirror.example") is None


def test_only_docker_hub_may_send_its_credentials_to_auth_docker_io() -> None:
    assert _same_owner("Registry-1.Docker.io", "AUTH.docker.io")
    assert _same_owner("docker.io", "auth.docker.io")
    assert _same_owner("reg.example:5000", "REG.example")
    assert not _same_owner("reg.example", "auth.docker.io")
    assert not _same_owner("registry-1.docker.io", "auth.docker.io.evil")


# -- answering a challenge ----------------------------------------------------------------------


def test_basic_auth_sends_the_login_and_registers_it_as_a_secret(tmp_path: Path) -> None:
    secret = f"basic-{uuid.uuid4().hex}"  # new to this process
    auth = make_auth(tmp_path, {"reg.example": login("alice", secret)})
    auth.authenticate("reg.example", SCOPE, 'Basic realm="r"', "https")
    value = "Basic " + base64.b64encode(f"alice:{secret}".encode()).decode()
    assert auth.header("reg.example", SCOPE) == {"Authorization": value}
    assert value.split()[1] not in redact(value.split()[1])


@pytest.mark.parametrize("logins", [{}, {"reg.example": {"identitytoken": "idtok-cccc"}}])
def test_basic_auth_without_a_password_names_the_login_to_run(
    tmp_path: Path, logins: dict[str, dict[str, str]]
) -> None:
    auth = make_auth(tmp_path, logins)
    with pytest.raises(RegistryAuthError) as err:
        auth.authenticate("reg.example", SCOPE, 'Basic realm="r"', "https")
    assert err.value.what == "reg.example requires credentials and none are configured"
    assert err.value.hint == (
        "run `docker login reg.example` or `podman login reg.example` (or set "
        "DOCKER_CONFIG / REGISTRY_AUTH_FILE to a file with them)"
    )
    assert auth.header("reg.example", SCOPE) == {}


def test_credentials_are_not_sent_in_cleartext_off_loopback(tmp_path: Path) -> None:
    auth = make_auth(tmp_path, {"reg.example": login("alice", "pw-cleartext")})
    with pytest.raises(RegistryAuthError, match="over plain HTTP; refusing") as err:
        auth.authenticate("reg.example", SCOPE, 'Basic realm="r"', "http")
    assert err.value.hint == (
        "serve the registry over HTTPS (credentials travel in cleartext only to loopback "
        "registries)"
    )


def test_credentials_may_go_in_cleartext_to_loopback(tmp_path: Path) -> None:
    auth = make_auth(tmp_path, {"127.0.0.1:5999": login("alice", "pw-loopback")})
    auth.authenticate("127.0.0.1:5999", SCOPE, 'Basic realm="r"', "http")
    assert auth.header("127.0.0.1:5999", SCOPE)["Authorization"].startswith("Basic ")


@pytest.mark.parametrize(
    ("challenge", "message"),
    [
        ("", "reg.example answered 401 with an unreadable challenge"),
        ('Digest realm="r"', "reg.example asked for an unsupported authentication scheme 'digest'"),
        ('Bearer service="s"', "unsupported authentication scheme 'bearer'"),
        ('Bearer realm="ftp://x/t"', "reg.example gave an invalid token realm 'ftp://x/t'"),
        ('Bearer realm="https:///t"', "gave an invalid token realm"),
    ],
)
def test_an_unusable_challenge_is_a_protocol_error(
    tmp_path: Path, challenge: str, message: str
) -> None:
    with pytest.raises(RegistryProtocolError, match=message):
        make_auth(tmp_path).authenticate("reg.example", SCOPE, challenge, "https")


def test_a_token_server_on_plain_http_off_loopback_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        RegistryAuthError, match=r"to a token server over plain HTTP \(http://"
    ) as err:
        make_auth(tmp_path).authenticate(
            "reg.example", SCOPE, bearer("http://auth.example/token"), "https"
        )
    assert err.value.hint == (
        "refusing to talk to a token server unencrypted; list the registry under "
        "[registry] insecure if this is intended"
    )


def test_an_insecure_registry_may_use_a_plain_http_token_server(tmp_path: Path) -> None:
    auth = make_auth(tmp_path, insecure=("reg.example",))
    # allowed: the request is made (and fails: the name does not resolve), no refusal
    with pytest.raises(Exception, match="does not resolve"):
        auth.authenticate("reg.example", SCOPE, bearer("http://auth.invalid/token"), "https")


def test_a_bearer_token_is_asked_for_with_service_scope_and_account(tmp_path: Path) -> None:
    with token_server() as srv:
        auth = make_auth(tmp_path, {srv.host: login("alice", "bearer-pw-1")})
        auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token?x=1"), "http")
        (req,) = srv.requests
    path, _, query = req.path.partition("?")
    assert path == "/token"
    assert urllib.parse.parse_qs(query) == {
        "x": ["1"], "service": ["svc"], "scope": [SCOPE], "account": ["alice"],
    }  # fmt: skip
    assert (
        req.headers["authorization"] == "Basic " + base64.b64encode(b"alice:bearer-pw-1").decode()
    )
    assert auth.header(srv.host, SCOPE) == {"Authorization": "Bearer tok-123456789"}


def test_an_anonymous_token_request_names_the_registry_as_service_by_default(
    tmp_path: Path,
) -> None:
    with token_server(body=b'{"access_token": "acc-tok-12345"}') as srv:
        auth = make_auth(tmp_path)
        auth.authenticate(srv.host, SCOPE, f'Bearer realm="http://{srv.host}/token"', "http")
        (req,) = srv.requests
    assert req.path == "/token?" + urllib.parse.urlencode({"service": srv.host, "scope": SCOPE})
    assert "authorization" not in req.headers
    assert auth.header(srv.host, SCOPE) == {"Authorization": "Bearer acc-tok-12345"}


def test_credentials_are_withheld_from_a_realm_on_another_host(tmp_path: Path) -> None:
    with token_server(status=401) as srv:
        auth = make_auth(tmp_path, {"localhost": login("alice", "withheld-pw")})
        with pytest.raises(RegistryAuthError) as err:
            auth.authenticate("localhost", SCOPE, bearer(f"http://{srv.host}/token"), "http")
        (req,) = srv.requests
    assert "authorization" not in req.headers and "account" not in req.path
    assert err.value.what == (
        f"the token server {srv.host} refused anonymous access for {SCOPE} (HTTP 401)"
    )
    assert err.value.hint == (
        "this repository needs credentials: run `docker login localhost` "
        f"(the token server {srv.host} is not localhost's own host, so credentials were not sent)"
    )


@pytest.mark.parametrize("status", [401, 403, 429])
def test_a_token_refusal_with_credentials_names_the_user_and_is_not_retried(
    tmp_path: Path, status: int
) -> None:
    with token_server(status=status) as srv:
        auth = make_auth(tmp_path, {srv.host: login("alice", "refused-pw")}, retries=3)
        with pytest.raises(RegistryAuthError) as err:
            auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token"), "http")
        asked = len(srv.requests)
    assert asked == 1
    too_many = " — too many attempts" if status == 429 else ""
    assert err.value.what == (
        f"the token server {srv.host} refused user 'alice' for {SCOPE} (HTTP {status}){too_many}"
    )
    assert err.value.hint == (
        f"check the credentials for {srv.host} (`docker login {srv.host}`); they are not retried"
    )


def test_an_anonymous_token_refusal_without_scope_names_the_host(tmp_path: Path) -> None:
    with token_server(status=403) as srv:
        with pytest.raises(RegistryAuthError) as err:
            make_auth(tmp_path).authenticate(
                srv.host, "", f'Bearer realm="http://{srv.host}/token"', "http"
            )
        (req,) = srv.requests
    assert "scope" not in req.path
    assert err.value.what.endswith(f"refused anonymous access for {srv.host} (HTTP 403)")
    assert err.value.hint == f"this repository needs credentials: run `docker login {srv.host}`"


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (404, b"", "answered HTTP 404"),
        (201, b'{"token": "t-1234567"}', "answered HTTP 201"),
        (200, b"not json", "sent no token"),
        (200, b"[1]", "sent no token"),
        (200, b'{"token": ""}', "sent no token"),
        (200, b'{"token": 7}', "sent no token"),
    ],
)
def test_a_token_server_answer_without_a_token_is_a_protocol_error(
    tmp_path: Path, status: int, body: bytes, message: str
) -> None:
    with token_server(status=status, body=body) as srv:
        auth = make_auth(tmp_path, retries=0)
        with pytest.raises(RegistryProtocolError, match=f"the token server {srv.host} {message}"):
            auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token"), "http")
    assert auth.header(srv.host, SCOPE) == {}


def test_an_identity_token_is_exchanged_by_a_refresh_grant(tmp_path: Path) -> None:
    with token_server() as srv:
        auth = make_auth(tmp_path, {srv.host: {"identitytoken": "refresh-tok-1"}})
        auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token"), "http")
        (req,) = srv.requests
    assert (req.method, req.path) == ("POST", "/token")
    assert req.headers["content-type"] == "application/x-www-form-urlencoded"
    assert urllib.parse.parse_qs(req.body.decode()) == {
        "grant_type": ["refresh_token"], "service": ["svc"], "client_id": ["rocmenv"],
        "refresh_token": ["refresh-tok-1"], "scope": [SCOPE],
    }  # fmt: skip
    assert auth.header(srv.host, SCOPE) == {"Authorization": "Bearer tok-123456789"}
    assert dict(auth.transport.stats.by_kind) == {"token": 1}


def test_a_refused_identity_token_is_named_and_not_retried(tmp_path: Path) -> None:
    with token_server(status=429) as srv:
        auth = make_auth(tmp_path, {srv.host: {"identitytoken": "refresh-tok-2"}}, retries=3)
        with pytest.raises(RegistryAuthError, match="refused the identity token for") as err:
            auth.authenticate(srv.host, "", f'Bearer realm="http://{srv.host}/t"', "http")
        (req,) = srv.requests
    assert "scope" not in urllib.parse.parse_qs(req.body.decode())
    assert "too many attempts" in err.value.what and "not retried" in (err.value.hint or "")


# -- tokens kept --------------------------------------------------------------------------------


def test_anonymous_tokens_are_cached_for_their_lifetime_credentialed_ones_never(
    tmp_path: Path,
) -> None:
    clock = [1000.0]
    cache = TokenCache(tmp_path / "tokens.json", clock=lambda: clock[0])
    body = b'{"token": "anon-tok-1234", "expires_in": 300}'
    with token_server(body=body) as srv:
        realm = f"http://{srv.host}/token"
        make_auth(tmp_path, cache=cache).authenticate(srv.host, SCOPE, bearer(realm), "http")
        assert cache.get((realm, "svc", SCOPE)) == "anon-tok-1234"
        clock[0] += 290  # inside the lifetime, less the cache's margin
        assert cache.get((realm, "svc", SCOPE)) is None
        other = make_auth(tmp_path / "o", {srv.host: login("a", "cached-pw")}, cache=cache)
        other.authenticate(srv.host, "other", bearer(realm, "other"), "http")
        assert cache.get((realm, "svc", "other")) is None


@pytest.mark.parametrize("expires_in", [-5, 0])
def test_a_token_without_a_lifetime_is_cached_for_a_minute(tmp_path: Path, expires_in: int) -> None:
    clock = [1000.0]
    cache = TokenCache(tmp_path / "tokens.json", clock=lambda: clock[0])
    body = json.dumps({"token": "anon-tok-5678", "expires_in": expires_in}).encode()
    with token_server(body=body) as srv:
        realm = f"http://{srv.host}/token"
        make_auth(tmp_path, cache=cache).authenticate(srv.host, SCOPE, bearer(realm), "http")
    assert cache.get((realm, "svc", SCOPE)) == "anon-tok-5678"
    clock[0] += 30  # cached for a minute, not for none
    assert cache.get((realm, "svc", SCOPE)) == "anon-tok-5678"
    clock[0] += 31
    assert cache.get((realm, "svc", SCOPE)) is None


def test_a_cached_anonymous_token_spares_the_token_request_until_forgotten(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path / "tokens.json")
    with token_server(body=b'{"token": "fresh-tok-999", "expires_in": 300}') as srv:
        realm = f"http://{srv.host}/token"
        challenges = ChallengeCache(tmp_path / "challenges.json")
        challenges.put(srv.host, realm, "svc")  # the realm this host named last time
        cache.put((realm, "svc", SCOPE), "cached-tok-111", 300)
        auth = make_auth(tmp_path, cache=cache, challenges=challenges)
        assert auth.header(srv.host, SCOPE) == {"Authorization": "Bearer cached-tok-111"}
        auth.forget(srv.host, SCOPE)
        assert auth.header(srv.host, SCOPE) == {}  # not the cache's again
        auth.authenticate(srv.host, SCOPE, bearer(realm), "http")
        asked = len(srv.requests)
        fresh = make_auth(tmp_path, cache=cache, challenges=challenges)
        fresh.authenticate(srv.host, SCOPE, bearer(realm), "http")
        assert len(srv.requests) == asked  # the cache answered
    assert asked == 1
    assert auth.header(srv.host, SCOPE) == {"Authorization": "Bearer fresh-tok-999"}


def test_a_token_is_kept_per_host_and_scope(tmp_path: Path) -> None:
    with token_server() as srv:
        auth = make_auth(tmp_path)
        auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token"), "http")
    assert auth.header(srv.host, SCOPE)
    assert auth.header(srv.host, "repository:other:pull") == {}
    assert auth.header("127.0.0.2:1", SCOPE) == {}


def test_a_namespace_login_in_auth_json_is_not_used_for_the_host_a_docker_one_is(
    tmp_path: Path,
) -> None:
    logins = json.dumps({"auths": {"reg.example/org": login("ns", "namespace-pw-1")}})
    (tmp_path / "auth.json").write_text(logins)
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")}
    podman = RegistryAuth(Context(env=env), Transport(RegistrySettings(), env))
    assert podman._credentials("reg.example") is None
    (tmp_path / ".docker").mkdir()
    (tmp_path / ".docker" / "config.json").write_text(logins)  # Docker reads it per host
    docker = RegistryAuth(Context(env={"HOME": str(tmp_path)}), Transport(RegistrySettings(), {}))
    assert docker._credentials("reg.example") == ("ns", "namespace-pw-1")


def test_a_credential_helper_runs_with_the_command_s_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helper = tmp_path / "bin" / "docker-credential-rtest"
    helper.parent.mkdir()
    helper.write_text(
        '#!/bin/sh\nread -r host\nprintf \'{"ServerURL": "%s", "Username": "helped", '
        '"Secret": "%s"}\' "$host" "$RTEST_SECRET"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("RTEST_SECRET", raising=False)
    (tmp_path / ".docker").mkdir()
    (tmp_path / ".docker" / "config.json").write_text(json.dumps({"credsStore": "rtest"}))
    env = {"HOME": str(tmp_path), "RTEST_SECRET": "from-the-context-env"}
    auth = RegistryAuth(Context(env=env), Transport(RegistrySettings(), env))
    assert auth._credentials("reg.example") == ("helped", "from-the-context-env")


def test_forgetting_a_scope_without_a_token_is_harmless(tmp_path: Path) -> None:
    auth = make_auth(tmp_path, {"reg.example": login("alice", "forget-pw-1")})
    auth.authenticate("reg.example", SCOPE, 'Basic realm="r"', "https")
    auth.forget("reg.example", SCOPE)  # Basic: no token to drop
    assert auth.header("reg.example", SCOPE)["Authorization"].startswith("Basic ")


def test_a_login_in_auth_json_is_used(tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text(
        json.dumps({"auths": {"reg.example": login("p", "podman-pw-1")}})
    )
    env = {"HOME": str(tmp_path), "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")}
    auth = RegistryAuth(Context(env=env), Transport(RegistrySettings(), env))
    assert auth._credentials("reg.example") == ("p", "podman-pw-1")


def test_a_cached_token_once_taken_is_kept_for_the_command(tmp_path: Path) -> None:
    clock = [1000.0]
    cache = TokenCache(tmp_path / "tokens.json", clock=lambda: clock[0])
    challenges = ChallengeCache(tmp_path / "challenges.json")
    challenges.put("reg.example", "http://r/token", "svc")
    cache.put(("http://r/token", "svc", SCOPE), "kept-tok-1234", 300)
    auth = make_auth(tmp_path, cache=cache, challenges=challenges)
    assert auth.header("reg.example", SCOPE) == {"Authorization": "Bearer kept-tok-1234"}
    clock[0] += 3600  # the cache has let it go; this command has not
    assert auth.header("reg.example", SCOPE) == {"Authorization": "Bearer kept-tok-1234"}


def test_the_token_is_asked_for_the_scope_the_challenge_names(tmp_path: Path) -> None:
    wider = "repository:x/y:pull,push"
    with token_server() as srv:
        auth = make_auth(tmp_path)
        auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token", wider), "http")
        (req,) = srv.requests
    assert urllib.parse.parse_qs(req.path.partition("?")[2])["scope"] == [wider]
    assert auth.header(srv.host, SCOPE) == {"Authorization": "Bearer tok-123456789"}


@pytest.mark.parametrize("how", ["anonymous", "identity-token", "asked-ahead"])
def test_a_token_request_is_the_registry_s_request_whose_limits_it_counts(
    tmp_path: Path, how: str
) -> None:
    """The realm is asked on the registry's behalf (its insecure setting and trust apply):
    rate limits the token server sends are the registry's, however the token is asked for."""
    limits = {"Content-Type": "application/json", "RateLimit-Limit": "100;w=21600",
              "RateLimit-Remaining": "7"}  # fmt: skip
    body = b'{"token": "tok-123456789"}'
    with ScriptedServer(lambda req: Answer(200, limits, body)) as srv:
        registry = "127.0.0.1:1"  # the registry itself is never asked here
        realm = f"http://{srv.host}/token"
        logins = {registry: {"identitytoken": "refresh-tok-3"}} if how == "identity-token" else {}
        challenges = ChallengeCache(tmp_path / "c.json")
        auth = make_auth(tmp_path, logins, challenges=challenges)
        if how == "asked-ahead":
            challenges.put(registry, realm, "svc")
            assert auth.fetch_ahead(registry, SCOPE) == realm
            auth._ahead[(realm, "svc", SCOPE)].result(10)
        else:
            auth.authenticate(registry, SCOPE, bearer(realm), "http")
        assert len(srv.requests) == 1
    assert list(auth.transport.ratelimits) == [registry]


def test_a_tokens_lifetime_is_its_expires_in_not_a_minute(tmp_path: Path) -> None:
    clock = [1000.0]
    cache = TokenCache(tmp_path / "tokens.json", clock=lambda: clock[0])
    with token_server(body=b'{"token": "long-tok-4242", "expires_in": 300}') as srv:
        realm = f"http://{srv.host}/token"
        make_auth(tmp_path, cache=cache).authenticate(srv.host, SCOPE, bearer(realm), "http")
    clock[0] += 200  # past a minute, inside its 300 s
    assert cache.get((realm, "svc", SCOPE)) == "long-tok-4242"


def test_a_token_the_server_sends_is_masked_in_every_later_message(tmp_path: Path) -> None:
    token = f"tok-{uuid.uuid4().hex}"  # new to this process
    with token_server(body=json.dumps({"token": token}).encode()) as srv:
        auth = make_auth(tmp_path)
        auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token"), "http")
    assert redact(f"GET failed with {token} in it") == "GET failed with *** in it"


def test_the_login_sent_to_a_token_server_is_masked_in_every_later_message(
    tmp_path: Path,
) -> None:
    secret = f"pw-{uuid.uuid4().hex}"  # new to this process
    with token_server() as srv:
        auth = make_auth(tmp_path, {srv.host: login("alice", secret)})
        auth.authenticate(srv.host, SCOPE, bearer(f"http://{srv.host}/token"), "http")
        (req,) = srv.requests
    encoded = req.headers["authorization"].split(" ", 1)[1]
    assert encoded == base64.b64encode(f"alice:{secret}".encode()).decode()
    assert redact(f"sent {encoded} once") == "sent *** once"
