"""podman's and skopeo's logins: ``podman login`` (the real one) writes
``$XDG_RUNTIME_DIR/containers/auth.json`` or ``REGISTRY_AUTH_FILE``, and rocmenv's
``tags list``/``resolve`` of the token-auth registry's private repository use them — with no
Docker config at all. Without a login the repository stays refused; a login for one
namespace is not widened to the whole host."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import testenv

pytestmark = pytest.mark.requires("podman")


def podman_login(auth: testenv.AuthRegistry, env: dict[str, str]) -> None:
    done = subprocess.run(
        ["podman", "login", "--tls-verify=false", "--username", auth.username,
         "--password-stdin", auth.host],
        input=auth.password, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def rocmenv(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocmenv", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No Docker config and no login anywhere but where the test puts one."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DOCKER_CONFIG", "REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME")}  # fmt: skip
    env.update(HOME=str(tmp_path / "home"), ROCMENV_REGISTRY_BACKOFF="0.01", **extra)
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


@pytest.mark.parametrize("where", ["XDG_RUNTIME_DIR", "REGISTRY_AUTH_FILE"])
def test_a_podman_login_is_used_by_tags_list_and_resolve(
    auth_registry: testenv.AuthRegistry, tmp_path: Path, where: str
) -> None:
    repo = f"{auth_registry.host}/{auth_registry.private_repo}"
    runtime = tmp_path / "run"
    runtime.mkdir()
    extra = ({"XDG_RUNTIME_DIR": str(runtime)} if where == "XDG_RUNTIME_DIR"
             else {"REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")})  # fmt: skip
    env = clean_env(tmp_path, **extra)
    refused = rocmenv(env, tmp_path, "tags", "list", repo, "--json")
    assert refused.returncode == 3, refused.stderr
    podman_login(auth_registry, env)
    written = (
        runtime / "containers" / "auth.json"
        if where == "XDG_RUNTIME_DIR"
        else tmp_path / "auth.json"
    )
    assert auth_registry.host in json.loads(written.read_text())["auths"]
    listed = rocmenv(env, tmp_path, "tags", "list", repo, "--json")
    assert listed.returncode == 0, listed.stderr
    assert {t["tag"] for t in json.loads(listed.stdout)["tags"]} >= set(
        auth_registry.private_tags[:1]
    )
    resolved = rocmenv(
        env, tmp_path, "resolve", f"{repo}:{auth_registry.private_tags[0]}", "--digest"
    )
    assert resolved.returncode == 0, resolved.stderr
    assert auth_registry.password not in listed.stderr + resolved.stderr


def test_the_user_config_auth_json_is_read(
    auth_registry: testenv.AuthRegistry, tmp_path: Path
) -> None:
    """``$XDG_CONFIG_HOME/containers/auth.json``: where podman keeps logins made with
    ``--authfile`` there, and the file older setups have."""
    secret = base64.b64encode(
        f"{auth_registry.username}:{auth_registry.password}".encode()
    ).decode()
    auth = tmp_path / "config" / "containers" / "auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_text(json.dumps({"auths": {auth_registry.host: {"auth": secret}}}))
    env = clean_env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = rocmenv(
        env, tmp_path, "tags", "list", f"{auth_registry.host}/{auth_registry.private_repo}"
    )
    assert done.returncode == 0, done.stderr


def test_a_namespace_login_is_not_widened_to_the_host(
    auth_registry: testenv.AuthRegistry, tmp_path: Path
) -> None:
    secret = base64.b64encode(
        f"{auth_registry.username}:{auth_registry.password}".encode()
    ).decode()
    (tmp_path / "auth.json").write_text(
        json.dumps({"auths": {f"{auth_registry.host}/some-other-org": {"auth": secret}}})
    )
    env = clean_env(tmp_path, REGISTRY_AUTH_FILE=str(tmp_path / "auth.json"))
    done = rocmenv(
        env, tmp_path, "tags", "list", f"{auth_registry.host}/{auth_registry.private_repo}"
    )
    assert done.returncode == 3, done.stderr


def test_a_broken_auth_json_is_an_error_naming_it(
    auth_registry: testenv.AuthRegistry, tmp_path: Path
) -> None:
    (tmp_path / "auth.json").write_text("{not json")
    env = clean_env(tmp_path, REGISTRY_AUTH_FILE=str(tmp_path / "auth.json"))
    done = rocmenv(
        env, tmp_path, "tags", "list", f"{auth_registry.host}/{auth_registry.private_repo}"
    )
    assert done.returncode == 3
    assert (
        f"cannot read credentials for {auth_registry.host} from {tmp_path / 'auth.json'}"
        in done.stderr
    )
    assert "podman login" in done.stderr
