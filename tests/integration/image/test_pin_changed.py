"""End to end: a profile edited after it was pinned is refused by every command that picks its
image (docs/pinning.md "The lockfile"), with the fix in the hint — never silently run on the
old digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def rocmenv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "ROCMENV_REGISTRY_BACKOFF": "0.01"}
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


PROFILE = """\
[profiles.ci]
extends = "cpu"
image = "{repo}"
tag = "{tag}"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--profile", "ci", "--", "true"],
        ["options", "--profile", "ci", "--format", "docker"],
        ["shims", "check", "--profile", "ci"],
    ],
)
def test_a_profile_changed_since_it_was_pinned_is_refused(
    family: Any, project: Path, command: list[str]
) -> None:
    demo, other = family["demo"], family["sgl-new"]
    repo = f"{demo.registry}/{demo.repository}"
    config = project / "rocmenv.toml"
    config.write_text(PROFILE.format(repo=repo, tag=demo.tag))
    pinned = rocmenv("pin", "--profile", "ci", cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    locked = json.loads((project / "rocmenv.lock").read_text())["profiles"]["ci"]
    assert locked["tag"] == demo.tag
    # the same profile runs from the lock …
    same = rocmenv("options", "--profile", "ci", "--format", "docker", "--json", cwd=project)
    assert same.returncode == 0, same.stderr
    # … until someone edits its tag without re-pinning
    config.write_text(PROFILE.format(repo=repo, tag=other.tag))
    done = rocmenv(*command, cwd=project)
    assert done.returncode == 2, done.stderr
    assert "profile 'ci' changed since it was pinned in" in done.stderr
    assert f"{demo.tag}@{locked['digest'][:19]}" in done.stderr  # what the lock holds
    assert "rocmenv pin --profile ci --update" in done.stderr  # what to do
    assert "Traceback" not in done.stderr
    # and the advice works
    updated = rocmenv("pin", "--profile", "ci", "--update", cwd=project)
    assert updated.returncode == 0, updated.stderr
    assert json.loads((project / "rocmenv.lock").read_text())["profiles"]["ci"]["tag"] == other.tag
