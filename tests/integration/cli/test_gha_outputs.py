"""Inside GitHub Actions, `resolve` and `pin` write their step outputs to $GITHUB_OUTPUT
(against the real registry); outside, they write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def _rocmenv(cwd: Path, *args: str, actions: bool) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    if actions:
        env |= {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(cwd / "out.txt")}
    return subprocess.run([sys.executable, "-m", "rocmenv", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_resolve_and_pin_write_image_and_digest_outputs(family: Any, tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    ref = family["demo"].ref  # 127.0.0.1:5000/rocm/sgl-dev:v0.5.8-…
    done = _rocmenv(tmp_path, "resolve", ref, actions=True)
    assert done.returncode == 0, done.stderr
    out = _outputs(tmp_path / "out.txt")
    assert out["image"] == ref and out["digest"].startswith("sha256:")
    assert out["pinned"] == f"{ref}@{out['digest']}"
    (tmp_path / "out.txt").unlink()

    done = _rocmenv(tmp_path, "pin", ref, "--json", actions=True)
    assert done.returncode == 0, done.stderr
    out = _outputs(tmp_path / "out.txt")
    entry = json.loads(done.stdout)["entries"][0]
    assert out["digest"] == entry["entry"]["digest"] and out["image"].endswith(
        "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
    )
    assert json.loads(out["pins"]) == {ref: entry["pinned"]}
    assert out["lockfile"] == str(tmp_path / "rocmenv.lock")

    (tmp_path / "out.txt").unlink()
    assert _rocmenv(tmp_path, "resolve", ref, actions=False).returncode == 0
    assert not (tmp_path / "out.txt").exists()


def test_the_actions_resolve_command_resolves_the_default_profile(
    family: Any, tmp_path: Path
) -> None:
    """Issue 30, item 6: ``command: resolve`` without a ``profile`` input ran ``rocmenv
    resolve --digest``, which asked for a repository; it resolves the default profile now
    (what ``rocmenv init`` writes as ``default-profile``), through the action's script."""
    (tmp_path / ".git").mkdir()
    repo, _, tag = family["demo"].ref.rpartition(":")
    (tmp_path / "rocmenv.toml").write_text(
        f'default-profile = "ci"\n[profiles.ci]\nextends = "rocm"\nimage = "{repo}"\n'
        f'tag = "{tag}"\n'
    )
    root = Path(__file__).resolve().parents[3]
    inputs = {"COMMAND": "resolve", "SUITE": "", "PARTITION": "", "PARTITIONS": "",
              "MAX_PARTITION_TIME": "", "PROFILE": "", "UNTRUSTED": "false", "LABELS": "",
              "CADENCE": "regular", "JUNIT": "", "ARGS": ""}  # fmt: skip
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path / "out.txt"),
           **{f"INPUT_{k}": v for k, v in inputs.items()}}  # fmt: skip
    done = subprocess.run(["bash", str(root / "scripts" / "action.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    out = _outputs(tmp_path / "out.txt")
    assert out["image"] == family["demo"].ref and out["digest"].startswith("sha256:")
    # the built-in default profile names no image: a usage error saying so, not a traceback
    (tmp_path / "rocmenv.toml").unlink()
    done = subprocess.run(["bash", str(root / "scripts" / "action.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "names no image" in done.stderr
