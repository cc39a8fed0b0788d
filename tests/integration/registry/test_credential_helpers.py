"""Docker credential helpers: a ``docker-credential-<name>`` program on ``PATH``, named by
``credsStore`` or ``credHelpers`` in ``$DOCKER_CONFIG/config.json``, gives rocmenv the
credentials for the token-auth registry (docs/registry.md: credentials come from the
Docker config and its helpers). The helper is a real program speaking the helper protocol
(``get`` with the server URL on stdin, JSON on stdout); it logs every call.
"""

from __future__ import annotations

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
