"""Stored logins read with the standard library (rocmenv.registry.credentials): the same
answers as docker-py's ``docker.auth`` gave for the same files (docker-py is installed for
the docker-api engine, so the conformance check runs against the real thing), credential
helpers as real programs — the well-behaved, the hanging, the flooding, the lying — and no
helper run for a host the file does not name."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmenv.errors import RegistryAuthError
from rocmenv.redact import redact
from rocmenv.registry import credentials
from rocmenv.registry.credentials import find_login, secret_pair
from rocmenv.registry.manifest import DOCKER_HUB


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def helper(bin_dir: Path, name: str, body: str) -> Path:
    """``docker-credential-NAME``: a shell script; every call is logged beside it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / f"docker-credential-{name}"
    log = bin_dir / f"{name}.calls"
    path.write_text(f'#!/bin/sh\nread -r server\necho "$1 $server" >> "{log}"\n{body}\n')
    path.chmod(0o755)
    return path


def calls(bin_dir: Path, name: str) -> list[str]:
    log = bin_dir / f"{name}.calls"
    return log.read_text().splitlines() if log.exists() else []


def docker_env(tmp_path: Path, config: Any, bin_dir: Path | None = None) -> dict[str, str]:
    (tmp_path / "docker").mkdir(exist_ok=True)
    (tmp_path / "docker" / "config.json").write_text(json.dumps(config))
    env = {"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker")}
    env["PATH"] = f"{bin_dir}:{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
    return env


# -- what docker-py answered --------------------------------------------------------------------

HOSTS = ["reg.example", "reg.example:5000", "other.example", "registry-1.docker.io", "docker.io"]
KEYS = ["reg.example", "https://reg.example", "https://reg.example/v2/", "reg.example:5000",
        "http://reg.example:5000", "https://index.docker.io/v1/", "index.docker.io",
        "docker.io", "other.example/ns"]  # fmt: skip


@st.composite
def auths(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=4, unique=True)):
        kind = draw(st.sampled_from(["auth", "auth", "token", "empty"]))
        user = draw(st.sampled_from(["u", "ci-bot", "x@y"]))
        if kind == "auth":
            out[key] = {"auth": b64(f"{user}:pw-{len(out)}:{key}"), "email": "e@x"}
        elif kind == "token":
            out[key] = {"identitytoken": f"idtok-{len(out)}"}
        else:
            out[key] = {}
    return out


def docker_py_answer(config: dict[str, Any], host: str) -> tuple[str, str] | None:
    from docker import auth as docker_auth

    lookup = DOCKER_HUB if host in credentials.HUB_HOSTS else host
    entry = docker_auth.resolve_authconfig(
        docker_auth.load_config(config_dict=json.loads(json.dumps(config))), registry=lookup
    )
    return secret_pair(entry) if entry else None


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(logins=auths(), host=st.sampled_from(HOSTS))
def test_a_docker_config_answers_as_docker_py_answered(
    tmp_path: Path, logins: dict[str, Any], host: str
) -> None:
    env = docker_env(tmp_path, {"auths": logins})
    assert find_login(host, env) == docker_py_answer({"auths": logins}, host)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize(
    "config",
    [
        {"credsStore": "rt"},
        {"credHelpers": {"reg.example": "rt"}},
        {"credHelpers": {"https://index.docker.io/v1/": "rt"}},
        {"credsStore": "rt", "auths": {"other.example": {"auth": b64("o:other-pw")}}},
        {"credHelpers": {"reg.example:5000": "rt"}, "auths": {"reg.example": {}}},
    ],
    ids=["store", "helper", "hub-helper", "store-and-auths", "helper-and-empty"],
)
def test_a_helper_is_asked_as_docker_py_asked_it(
    tmp_path: Path, config: dict[str, Any], host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper knows reg.example and Docker Hub (by docker-py's name for it) only."""
    bin_dir = tmp_path / "bin"
    helper(bin_dir, "rt", """case "$server" in
  reg.example|https://index.docker.io/v1/) printf '{"ServerURL": "%s", "Username": "h", "Secret": "helper-pw"}' "$server" ;;
  *) echo "credentials not found in native keychain"; exit 1 ;;
esac""")  # fmt: skip
    env = docker_env(tmp_path, config, bin_dir)
    monkeypatch.setenv("PATH", env["PATH"])  # docker-py finds helpers on the process's PATH
    ours = find_login(host, env)
    asked = calls(bin_dir, "rt")
    (bin_dir / "rt.calls").unlink(missing_ok=True)
    assert ours == docker_py_answer(config, host)
    assert asked == calls(bin_dir, "rt")  # the same helper calls, with the same server


# -- helpers that misbehave ---------------------------------------------------------------------


def store_env(tmp_path: Path, body: str) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    helper(bin_dir, "rt", body)
    return docker_env(tmp_path, {"credsStore": "rt"}, bin_dir), bin_dir


def test_a_helper_that_hangs_is_killed_at_the_deadline(tmp_path: Path) -> None:
    env, _ = store_env(tmp_path, "exec sleep 60")
    start = time.monotonic()
    with pytest.raises(RegistryAuthError) as err:
        find_login("reg.example", env, timeout=1.0)
    assert time.monotonic() - start < 10
    assert "docker-credential-rt" in err.value.what and "config.json" in err.value.what


def test_a_helper_that_keeps_talking_is_stopped_at_the_size_cap(tmp_path: Path) -> None:
    env, _ = store_env(tmp_path, "exec cat /dev/zero")
    with pytest.raises(RegistryAuthError) as err:
        find_login("reg.example", env, timeout=30.0)
    assert str(credentials.MAX_HELPER_OUTPUT) in err.value.what


def test_a_helper_that_fails_is_named_and_what_it_said_is_redacted(tmp_path: Path) -> None:
    secret = f"leaked-{uuid.uuid4().hex}"
    from rocmenv.redact import register_secret

    register_secret(secret)
    env, _ = store_env(tmp_path, f'echo "keychain locked; last secret {secret}"; exit 3')
    with pytest.raises(RegistryAuthError) as err:
        find_login("reg.example", env)
    assert "docker-credential-rt get failed (3)" in err.value.what
    assert secret not in err.value.what and redact(secret) == "***"


@pytest.mark.parametrize(
    "answer",
    ["not json", '["a"]', '{"Username": "u"}', '{"Username": 1, "Secret": "s"}'],
)
def test_a_helper_answering_something_else_than_a_login_is_an_error(
    tmp_path: Path, answer: str
) -> None:
    env, _ = store_env(tmp_path, f"printf '%s' '{answer}'")
    with pytest.raises(RegistryAuthError, match="other than a login"):
        find_login("reg.example", env)


def test_an_empty_answer_is_no_login_and_a_token_username_an_identity_token(
    tmp_path: Path,
) -> None:
    env, _ = store_env(tmp_path, """printf '{"ServerURL": "x", "Username": "", "Secret": ""}'""")
    assert find_login("reg.example", env) is None  # docker-credential-pass's "not found"
    env, _ = store_env(
        tmp_path, """printf '{"ServerURL": "x", "Username": "<token>", "Secret": "idtok-1"}'"""
    )
    assert find_login("reg.example", env) == (credentials.IDENTITY_TOKEN, "idtok-1")


def test_a_helper_not_installed_is_named(tmp_path: Path) -> None:
    env = docker_env(tmp_path, {"credsStore": "nowhere-to-be-found"}, tmp_path / "empty-bin")
    with pytest.raises(RegistryAuthError, match="docker-credential-nowhere-to-be-found"):
        find_login("reg.example", env)


def test_no_helper_runs_for_a_host_the_file_does_not_name(tmp_path: Path) -> None:
    """A credHelpers entry for another host, and auths for others: this host's lookup runs
    nothing and finds nothing."""
    bin_dir = tmp_path / "bin"
    helper(bin_dir, "rt", "exit 1")
    config = {"credHelpers": {"ghcr.io": "rt"}, "auths": {"quay.io": {"auth": b64("q:q-pw")}}}
    env = docker_env(tmp_path, config, bin_dir)
    assert find_login("reg.example", env) is None
    assert calls(bin_dir, "rt") == []


@pytest.mark.parametrize(
    "config",
    [
        {"auths": {"reg.example": "not an object"}},
        {"auths": {"reg.example": {"auth": "%%%"}}},
        {"auths": {"reg.example": {"auth": b64("no-colon")}}},
        {"auths": ["reg.example"]},
        {"credsStore": 7},
    ],
)
def test_a_malformed_entry_for_the_host_is_an_error_naming_the_file(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    env = docker_env(tmp_path, config)
    with pytest.raises(RegistryAuthError) as err:
        find_login("reg.example", env)
    assert str(tmp_path / "docker" / "config.json") in err.value.what
    assert err.value.hint


def test_a_file_over_the_size_cap_is_not_read_whole(tmp_path: Path) -> None:
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "config.json").write_text(
        '{"auths": {}, "pad": "' + "x" * credentials.MAX_AUTH_FILE + '"}'
    )
    with pytest.raises(RegistryAuthError):
        find_login(
            "reg.example", {"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker")}
        )


LOOKUP = """
import json, sys
from rocmenv.context import Context
from rocmenv.registry.auth import RegistryAuth
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings

env = json.loads(sys.argv[1])
auth = RegistryAuth(Context(env=env), transport=Transport(RegistrySettings(), env))
print(json.dumps({"creds": auth._credentials(sys.argv[2]), "docker": "docker" in sys.modules}))
"""


@pytest.mark.parametrize(
    ("host", "creds"),
    [("reg.example:5000", None), ("ghcr.io", ["g", "g-pw"]), ("registry-1.docker.io", None)],
    ids=["not-named", "named", "hub-not-named"],
)
def test_a_lookup_imports_no_docker_py_unless_a_helper_answers(
    tmp_path: Path, host: str, creds: list[str] | None
) -> None:
    """A Docker config naming other hosts (an entry, a helper for another host), read by a
    fresh interpreter as a registry command does: docker-py stays unimported (it cost
    161-186 ms per command while it read these files)."""
    bin_dir = tmp_path / "bin"
    helper(bin_dir, "rt", "exit 1")
    config = {
        "auths": {"ghcr.io": {"auth": b64("g:g-pw")}, "quay.io": {}},
        "credHelpers": {"quay.io": "rt"},
    }
    env = docker_env(tmp_path, config, bin_dir)
    done = subprocess.run(
        [sys.executable, "-c", LOOKUP, json.dumps(env), host],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"creds": creds, "docker": False}
    assert calls(bin_dir, "rt") == []


def test_a_broken_entry_for_another_host_does_not_stop_this_hosts_login(tmp_path: Path) -> None:
    """docker-py refused the whole file for one broken entry; a login for the host contacted
    is still found (the broken one is named when its own host is asked for)."""
    config = {"auths": {"other.example": "not an object", "reg.example": {"auth": b64("u:pw")}}}
    env = docker_env(tmp_path, config)
    assert find_login("reg.example", env) == ("u", "pw")
    with pytest.raises(RegistryAuthError):
        find_login("other.example", env)
