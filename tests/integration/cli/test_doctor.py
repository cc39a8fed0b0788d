"""`rocmenv doctor` on this machine: real engine, real registries, a fake 8-GPU host."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import testenv
from tests.support.fakegpu import build_fake_host
from tests.support.faultproxy import FaultProxy

pytestmark = pytest.mark.integration


def doctor(
    cwd: Path, env: dict[str, str], *args: str, python: Sequence[str] = (sys.executable,)
) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd), "ROCMENV_REGISTRY_RETRIES": "0", **env}
    return subprocess.run(
        [*python, "-m", "rocmenv", "doctor", "--json", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_doctor_reports_engine_registry_gpus_and_shims(
    tmp_path: Path, registry: Any, auth_registry: Any
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        f'[profiles.ci]\nimage = "{registry.host}/rocm/sgl-dev"\ntag = "x"\n'
        f'[profiles.private]\nimage = "{auth_registry.host}/rocm/sgl-dev"\ntag = "x"\n'
    )
    host = build_fake_host(tmp_path / "host")
    result = doctor(tmp_path, host.env())
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["engine"]["status"] == "ok" and checks["engine"]["detail"].startswith("docker-")
    assert checks[f"registry {registry.host}"]["status"] == "ok"
    assert "asks for authentication" in checks[f"registry {auth_registry.host}"]["detail"]
    assert checks["gpus"]["detail"].startswith("8 GPU(s): gfx942")
    assert "aiter-shuffle-scale" in checks["shims"]["detail"]
    assert checks["lockfile"]["status"] == "warn"


def test_doctor_fails_on_an_unreachable_registry_and_a_bad_lock(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    with FaultProxy.unreachable() as dead:
        (tmp_path / "rocmenv.toml").write_text(
            f'[profiles.ci]\nimage = "{dead.host}/rocm/sgl-dev"\ntag = "x"\n'
        )
        (tmp_path / "rocmenv.lock").write_text("{")
        result = doctor(tmp_path, {})
    assert result.returncode == 1
    checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks[f"registry {dead.host}"]["status"] == "fail"
    assert (
        checks["lockfile"]["status"] == "fail" and "not valid JSON" in checks["lockfile"]["detail"]
    )
    assert checks["engine"]["status"] == "ok"


# -- registries judged the way pulls go ----------------------------------------------------
TAG = "v0.5.8-rocm700-mi30x-20260215"  # in the open registry (images/family.toml)


def _mirrored_project(root: Path, canonical: str, *, pull_from_mirror: bool) -> None:
    """A project whose registry ``canonical`` is mirrored by the open registry."""
    (root / ".git").mkdir(exist_ok=True)
    (root / "rocmenv.toml").write_text(
        f'[registry]\nmirrors = {{ "{canonical}" = ["127.0.0.1:5000"] }}\n'
        f"pull-from-mirror = {str(pull_from_mirror).lower()}\n"
        f'[profiles.ci]\nextends = "cpu"\nimage = "{canonical}/rocm/sgl-dev"\ntag = "{TAG}"\n'
    )


def _pin(root: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "rocmenv", "pin"], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HOME": str(root)})  # fmt: skip
    assert done.returncode == 0, done.stderr


def _checks(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in json.loads(result.stdout)["checks"]}


def test_doctor_passes_when_the_registry_is_down_but_pulls_go_through_a_mirror_that_answers(
    tmp_path: Path,
) -> None:
    with FaultProxy.unreachable() as down:
        _mirrored_project(tmp_path, down.host, pull_from_mirror=True)
        _pin(tmp_path)  # served by the mirror: the lock says so, and pulls go there
        result = doctor(tmp_path, {})
    checks = _checks(result)
    assert result.returncode == 0, result.stdout
    assert checks["registry 127.0.0.1:5000"]["status"] == "ok"
    assert checks[f"registry {down.host}"]["status"] == "warn"
    assert "127.0.0.1:5000" in checks[f"registry {down.host}"]["hint"]


def test_doctor_fails_when_pulls_go_to_the_registry_that_is_down(tmp_path: Path) -> None:
    with FaultProxy.unreachable() as down:
        _mirrored_project(tmp_path, down.host, pull_from_mirror=False)
        _pin(tmp_path)  # through the mirror, but the engine pulls the canonical reference
        result = doctor(tmp_path, {})
    checks = _checks(result)
    assert result.returncode == 1, result.stdout
    assert checks[f"registry {down.host}"]["status"] == "fail"
    assert "pull-from-mirror = true" in checks[f"registry {down.host}"]["hint"]
    assert checks["registry 127.0.0.1:5000"]["status"] == "ok"


def test_doctor_judges_an_unpinned_profile_by_the_host_its_pull_goes_to(tmp_path: Path) -> None:
    """With pull-from-mirror an unpinned image is pulled through the mirror too (issue 30,
    item 6: doctor and the pull agree); without it, from the registry that is down."""
    with FaultProxy.unreachable() as down:
        _mirrored_project(tmp_path, down.host, pull_from_mirror=True)  # no lock
        through_mirror = _checks(result := doctor(tmp_path, {}))
        assert result.returncode == 0, result.stdout
        _mirrored_project(tmp_path, down.host, pull_from_mirror=False)
        direct = _checks(result := doctor(tmp_path, {}))
        assert result.returncode == 1, result.stdout
    assert through_mirror[f"registry {down.host}"]["status"] == "warn"
    assert through_mirror["registry 127.0.0.1:5000"]["status"] == "ok"
    assert direct[f"registry {down.host}"]["status"] == "fail"
    assert "pull-from-mirror = true" in direct[f"registry {down.host}"]["hint"]


def test_doctor_says_at_once_that_a_name_does_not_resolve(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        f'[profiles.ci]\nimage = "nosuch.invalid/rocm/sgl-dev"\ntag = "{TAG}"\n'
    )
    result = doctor(tmp_path, {"ROCMENV_REGISTRY_RETRIES": "4"})
    finding = _checks(result)["registry nosuch.invalid"]
    assert finding["status"] == "fail"
    assert "does not resolve" in finding["detail"] and "attempts" not in finding["detail"]


# -- each engine failure its own hint ---------------------------------------------------------


def test_a_missing_docker_context_gets_the_context_hint(tmp_path: Path) -> None:
    result = doctor(tmp_path, {"DOCKER_CONTEXT": "nosuch"})
    engine = _checks(result)["engine"]
    assert result.returncode == 1
    assert engine["status"] == "fail" and "docker context ls" in engine["hint"]
    assert "systemctl start docker" not in engine["hint"]


@pytest.mark.parametrize("engine", ["docker-api", "docker-api+docker-py", "docker-cli"])
def test_a_socket_nobody_listens_on_gets_the_stopped_daemon_hint(
    tmp_path: Path, engine: str
) -> None:
    dead = tmp_path / "dead.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(dead))  # a socket file, nobody listening: connection refused
    sock.close()
    kind, _, transport = engine.partition("+")
    env = {"DOCKER_HOST": f"unix://{dead}", "ROCMENV_DOCKER_API_TRANSPORT": transport}
    result = doctor(tmp_path, env, "--engine", kind)
    found = _checks(result)["engine"]
    assert found["status"] == "fail" and "nothing listens" in found["hint"], found
    assert str(dead) in found["hint"]


@pytest.mark.root_only  # drops to a user outside the docker group (setpriv): only root can
@pytest.mark.parametrize("engine", ["docker-api", "docker-api+docker-py", "docker-cli"])
def test_permission_denied_on_the_socket_gets_the_docker_group_hint(
    tmp_path: Path, engine: str
) -> None:
    """As a user outside the docker group (nobody), with the system Python reading rocmenv
    and its dependencies from here (the venv's interpreter may sit under /root)."""
    testenv.need("system-python")
    setpriv = testenv.need_tool("setpriv", hint="util-linux")
    sock = Path("/var/run/docker.sock")
    if not sock.exists() or sock.stat().st_mode & 0o007:
        pytest.fail(f"{sock} is missing or open to everyone: this test needs a protected socket")
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    repo = Path(__file__).resolve().parents[3]
    kind, _, transport = engine.partition("+")
    env = {"PYTHONPATH": f"{repo}:{site}", "ROCMENV_DOCKER_API_TRANSPORT": transport,
           "DOCKER_HOST": f"unix://{sock}", "PATH": "/usr/bin:/bin"}  # fmt: skip
    nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", testenv.SYSTEM_PYTHON)
    home = Path(tempfile.mkdtemp(prefix="rocmenv-nobody-"))  # pytest's tmp_path is root's only
    try:
        home.chmod(0o777)
        result = doctor(home, env, "--engine", kind, python=nobody)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert result.stdout, result.stderr
    found = _checks(result)["engine"]
    assert found["status"] == "fail" and "docker` group" in found["hint"], found
