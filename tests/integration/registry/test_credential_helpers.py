"""Docker credential helpers: a ``docker-credential-<name>`` program on ``PATH``, named by
``credsStore`` or ``credHelpers`` in ``$DOCKER_CONFIG/config.json``, gives rocmenv the
credentials for the token-auth registry (docs/registry.md: credentials come from the
Docker config and its helpers). The helper is a real program speaking the helper protocol
(``get`` with the server URL on stdin, JSON on stdout); it logs every call.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import testenv

HELPER = """#!/bin/sh
# docker-credential-{name}: the credential-helper protocol, for the test registry only
read -r server
echo "$1 $server" >> "{log}"
[ "$1" = get ] || exit 1
if [ "{fail}" = 1 ]; then echo "credentials not found in native keychain"; exit 1; fi
case "$server" in
  *{host}*) printf '{{"ServerURL": "%s", "Username": "{user}", "Secret": "{secret}"}}\\n' "$server" ;;
  *) echo "credentials not found in native keychain"; exit 1 ;;
esac
"""


def setup_helper(
    tmp_path: Path, auth: testenv.AuthRegistry, config: dict[str, object], *, fail: bool = False
) -> tuple[dict[str, str], Path]:
    bin_dir, docker_config, log = tmp_path / "bin", tmp_path / "docker-config", tmp_path / "calls"
    bin_dir.mkdir()
    docker_config.mkdir()
    helper = bin_dir / "docker-credential-rocmenvtest"
    helper.write_text(HELPER.format(name="rocmenvtest", log=log, fail=int(fail), host=auth.host,
                                    user=auth.username, secret=auth.password))  # fmt: skip
    helper.chmod(0o755)
    (docker_config / "config.json").write_text(json.dumps(config))
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "DOCKER_CONFIG": str(docker_config),
        "ROCMENV_REGISTRY_BACKOFF": "0.01",
    }
    return env, log


def tags_list(env: dict[str, str], cwd: Path, ref: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", "tags", "list", ref, "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "config",
    [
        {"credsStore": "rocmenvtest"},
        {"credHelpers": {testenv.AUTH_REGISTRY: "rocmenvtest"}},
    ],
    ids=["credsStore", "credHelpers"],
)
def test_a_credential_helper_on_path_logs_rocmenv_in(
    auth_registry: testenv.AuthRegistry, tmp_path: Path, config: dict[str, object]
) -> None:
    env, log = setup_helper(tmp_path, auth_registry, config)
    done = tags_list(
        env, tmp_path, auth_registry.ref(auth_registry.private_repo, "x").rsplit(":", 1)[0]
    )
    assert done.returncode == 0, done.stderr
    tags = {t["tag"] for t in json.loads(done.stdout)["tags"]}
    assert set(auth_registry.private_tags) <= tags
    calls = log.read_text().splitlines()
    assert calls and all(c.startswith("get ") and auth_registry.host in c for c in calls)
    assert auth_registry.password not in done.stdout + done.stderr


def test_without_the_helper_the_private_repository_is_refused(
    auth_registry: testenv.AuthRegistry, tmp_path: Path
) -> None:
    """The control: the same request with a helper that has no credentials is an auth error."""
    env, log = setup_helper(tmp_path, auth_registry, {"credsStore": "rocmenvtest"}, fail=True)
    done = tags_list(env, tmp_path, f"{auth_registry.host}/{auth_registry.private_repo}")
    assert done.returncode == 3, done.stderr
    assert auth_registry.host in done.stderr
    assert "Traceback" not in done.stderr
    assert log.read_text().startswith("get ")  # the helper was asked


def imported(stderr: str) -> set[str]:
    """The modules ``-X importtime`` reported."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}  # fmt: skip


@pytest.mark.parametrize("names_the_host", [False, True], ids=["other-hosts", "this-host"])
def test_a_docker_config_is_read_without_docker_py(
    auth_registry: testenv.AuthRegistry, tmp_path: Path, names_the_host: bool
) -> None:
    """A registry command beside a Docker config as CI runners have after docker/login-action:
    logins for other hosts and a helper for another host (never run), or a login for this
    host; the command answers with docker-py never imported."""
    config: dict[str, object] = {
        "auths": {"ghcr.io": {"auth": "Z2g6Z2gtcHc="}, "quay.io": {}},
        "credHelpers": {"quay.io": "rocmenvtest"},
    }
    if names_the_host:
        login = f"{auth_registry.username}:{auth_registry.password}".encode()
        config["auths"] = {auth_registry.host: {"auth": base64.b64encode(login).decode()}}
    env, log = setup_helper(tmp_path, auth_registry, config)
    repo = auth_registry.private_repo if names_the_host else auth_registry.public_repo
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rocmenv", "tags", "list",
         f"{auth_registry.host}/{repo}", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["tags"]
    modules = imported(done.stderr)
    assert "rocmenv.registry.credentials" in modules  # the files were read
    assert not {m for m in modules if m == "docker" or m.startswith("docker.")}
    assert not log.exists()  # the helper for another host never ran
