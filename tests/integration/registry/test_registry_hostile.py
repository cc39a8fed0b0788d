"""Issue 9 item 4 and 3, registry side: a hostile registry cannot take a command down, and
credentials go only to the host they were issued for.

Each hostile case runs the real CLI in a child process (through a wrapper that reports the
child's peak RSS) against :class:`tests.support.hostile_registry.HostileRegistry`; the command
must end with the registry exit code 3, a message naming the limit it hit, and a peak RSS
under :data:`RSS_BOUND_KB`. Liveness is bounded by the subprocess timeout, not asserted.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hostile_registry import HostileRegistry

# alone: the hostile servers' deadlines and drips are timed (a starved test server is not a
# registry that stalls)
pytestmark = [pytest.mark.integration, pytest.mark.serial]

#: Peak RSS of the whole `rocmenv` process; the pre-urllib3 client reached 818 MB on the
#: 400 MB chunked body. The tag-list cap is 16 MiB; Python + rocmenv is ~60 MB.
RSS_BOUND_KB = 200 * 1024

_WRAPPER = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "sys.stdout.write(r.stdout)\n"
    "sys.stderr.write(r.stderr)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode, file=sys.stderr)\n"
)


def run_measured(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str, int]:
    """Exit code, stdout, stderr, peak RSS (KiB) of ``rocmenv ARGS``."""
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "rocmenv", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    *err_lines, last = proc.stderr.rstrip("\n").split("\n")
    rss, code = (int(x) for x in last.split())
    return code, proc.stdout, "\n".join(err_lines), rss


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().endswith("_PROXY")
        and (not k.startswith("ROCMENV_") or k == "ROCMENV_SITE_CONFIG")
    }
    env.update(
        {
            "HOME": str(tmp_path),
            "ROCMENV_REGISTRY_BACKOFF": "0.01",
            "ROCMENV_REGISTRY_RETRIES": "1",
            "ROCMENV_TOKEN_CACHE": "0",
            **extra,
        }
    )
    return env


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("huge-length", "announces 99999999999999 bytes, over its limit"),
        ("chunked-400mb", "sent more than its limit of 16777216 bytes"),
        ("drip", "was still arriving after"),
        ("drip-headers", "was still arriving after"),
        ("endless-links", "goes on past 1000 pages"),
    ],
)
def test_hostile_registry_is_bounded_in_memory_time_and_pages(
    tmp_path: Path, mode: str, message: str
) -> None:
    # the drips are judged by the deadline; the endless links by the page cap alone (a
    # loaded machine can hold one of its thousand answers back for seconds)
    deadline = "60" if mode == "endless-links" else "4"
    with HostileRegistry(mode) as reg:
        code, _, err, rss = run_measured(
            ["tags", "list", f"{reg.host}/x/y"],
            base_env(tmp_path, ROCMENV_REGISTRY_DEADLINE=deadline),
            tmp_path,
        )
        requests = reg.requests
    assert code == 3, err
    assert message in err, err
    assert "Traceback" not in err
    assert rss < RSS_BOUND_KB, f"peak RSS {rss} KiB"
    if mode == "endless-links":
        assert requests <= 1001  # the page cap, not 62,504 requests


def test_index_with_md5_digest_is_refused_and_no_lock_is_written(tmp_path: Path) -> None:
    with HostileRegistry("md5-index") as reg:
        code, _out, err, _ = run_measured(
            ["pin", f"{reg.host}/x/y:v1"], base_env(tmp_path), tmp_path
        )
    assert code == 3, err
    assert "is not a valid digest" in err and "md5" in err
    assert not (tmp_path / "rocmenv.lock").exists()


def _docker_config(directory: Path, auths: dict[str, tuple[str, str]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "auths": {
            host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
            for host, (user, password) in auths.items()
        }
    }
    (directory / "config.json").write_text(json.dumps(data))
    return directory


#: Where a login can be (the Docker config, podman's REGISTRY_AUTH_FILE, podman's default
#: $XDG_RUNTIME_DIR/containers/auth.json) and the key each keeps Docker Hub's under.
LOGIN_FILES = {
    "docker-config": "https://index.docker.io/v1/",
    "registry-auth-file": "docker.io",
    "xdg-runtime-dir": "docker.io",
}


def _logins(kind: str, tmp_path: Path, auths: dict[str, tuple[str, str]]) -> dict[str, str]:
    """The environment that points rocmenv at a file of ``kind`` holding ``auths``."""
    directory = _docker_config(tmp_path / kind, auths)
    if kind == "docker-config":
        return {"DOCKER_CONFIG": str(directory)}
    if kind == "registry-auth-file":
        return {"REGISTRY_AUTH_FILE": str(directory / "config.json")}
    (directory / "containers").mkdir()
    (directory / "config.json").rename(directory / "containers" / "auth.json")
    return {"XDG_RUNTIME_DIR": str(directory)}


@pytest.mark.parametrize("kind", sorted(LOGIN_FILES))
def test_hub_credentials_never_reach_a_mirror(tmp_path: Path, kind: str) -> None:
    hub_secret = "hub-password-must-stay-home"
    logins = _logins(kind, tmp_path, {LOGIN_FILES[kind]: ("hubuser", hub_secret)})
    with HostileRegistry("capture") as mirror:
        env = base_env(
            tmp_path,
            **logins,
            ROCMENV_MIRRORS=f"docker.io={mirror.host}",
            ROCMENV_REGISTRY_RETRIES="0",
            ROCMENV_REGISTRY_TIMEOUT="3",
            # the upstream (registry-1.docker.io) is not reachable from the test machine:
            # a refused proxy makes that fail at once
            HTTPS_PROXY="http://127.0.0.1:9",
        )
        code, _, err, _ = run_measured(["tags", "list", "rocm/sgl-dev"], env, tmp_path)
        captured = list(mirror.authorizations)
        asked = mirror.requests
    assert asked >= 1  # the mirror was tried first
    assert captured == []  # and never saw any credentials
    assert hub_secret not in err
    assert code == 3
    assert f"mirror {mirror.host} failed" in err  # which mirror failed, and why


@pytest.mark.parametrize("kind", sorted(LOGIN_FILES))
def test_a_mirror_with_its_own_entry_gets_its_own_credentials(tmp_path: Path, kind: str) -> None:
    with HostileRegistry("capture") as mirror:
        logins = _logins(kind, tmp_path, {
            LOGIN_FILES[kind]: ("hubuser", "hub-secret"),
            mirror.host: ("mirroruser", "mirror-secret"),
        })  # fmt: skip
        env = base_env(
            tmp_path,
            **logins,
            ROCMENV_MIRRORS=f"docker.io={mirror.host}",
            ROCMENV_REGISTRY_RETRIES="0",
            HTTPS_PROXY="http://127.0.0.1:9",
        )
        run_measured(["tags", "list", "rocm/sgl-dev"], env, tmp_path)
        captured = list(mirror.authorizations)
    expected = "Basic " + base64.b64encode(b"mirroruser:mirror-secret").decode()
    assert captured and set(captured) == {expected}


def test_token_service_429_is_not_retried_with_the_same_credentials(tmp_path: Path) -> None:
    with HostileRegistry("token-429") as reg:
        config = _docker_config(tmp_path / "docker", {reg.host: ("someone", "secret")})
        env = base_env(tmp_path, DOCKER_CONFIG=str(config), ROCMENV_REGISTRY_RETRIES="3")
        code, _, err, _ = run_measured(["tags", "list", f"{reg.host}/x/y"], env, tmp_path)
        with_credentials = reg.token_requests
    assert code == 3
    assert "too many attempts" in err and "not retried" in err
    assert with_credentials == 1
    with HostileRegistry("token-429") as reg:
        env = base_env(tmp_path, ROCMENV_REGISTRY_RETRIES="3")
        code, _, err, _ = run_measured(["tags", "list", f"{reg.host}/x/y"], env, tmp_path)
        anonymous = reg.token_requests
    assert code == 3
    assert anonymous == 4  # anonymous: the ordinary backoff and retries apply


def test_identity_token_is_an_oauth2_refresh_grant_to_the_realm(tmp_path: Path) -> None:
    with HostileRegistry("oauth") as reg:
        directory = tmp_path / "docker"
        directory.mkdir()
        (directory / "config.json").write_text(
            json.dumps({"auths": {reg.host: {"auth": "", "identitytoken": "refresh-me"}}})
        )
        code, out, err, _ = run_measured(
            ["tags", "list", f"{reg.host}/x/y", "--json", "--all"],
            base_env(tmp_path, DOCKER_CONFIG=str(directory)),
            tmp_path,
        )
        forms = list(reg.forms)
    assert code == 0, err
    assert json.loads(out)["total"] == 1
    (form,) = forms
    assert form["grant_type"] == ["refresh_token"] and form["refresh_token"] == ["refresh-me"]
    assert form["service"] == ["hostile"] and form["scope"] == ["repository:x/y:pull"]
    assert "refresh-me" not in out + err
