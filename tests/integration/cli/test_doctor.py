"""`rocmenv doctor` on this machine: real engine, real registries, a fake 8-GPU host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakegpu import build_fake_host
from tests.support.faultproxy import FaultProxy

pytestmark = pytest.mark.integration


def doctor(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd), "ROCMENV_REGISTRY_RETRIES": "0", **env}
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", "doctor", "--json"],
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
