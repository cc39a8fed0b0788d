"""The contributor's first command (README "Contributing", CONTRIBUTING.md) works:
scripts/demo.sh (setup already done by the session)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_demo_shows_the_shim_in_main_and_worker_process() -> None:
    env = {**os.environ, "ROCMENV_SKIP_SETUP": "1"}
    result = subprocess.run(
        [str(REPO / "scripts" / "demo.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "main process (pid" in out and "spawn worker (pid" in out
    assert out.count("shuffle_scale from rocmenv shim 'aiter-shuffle-scale'") == 2
    assert result.stderr.count("rocmenv: shim aiter-shuffle-scale applied") == 2
    assert "ImportError: cannot import name 'shuffle_scale'" in out  # the --no-shims contrast
