"""Inside GitHub Actions (``GITHUB_ACTIONS=true``) every error also becomes an ``::error::``
workflow command, escaped as GitHub requires; outside, none is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def rocmenv(tmp_path: Path, *args: str, gha: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMENV_", "GITHUB_"))}
    env["HOME"] = str(tmp_path)
    if gha:
        env["GITHUB_ACTIONS"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "title", "text"),
    [
        # the generic path: any RocmenvError through cli.main's report_error
        (["options", "--profile", "no%such"], "rocmenv options", "unknown profile 'no%25such'"),
        # a command that reports its own errors
        (["ref", "parse", "Bad/Ref"], "rocmenv ref parse", "invalid reference 'Bad/Ref'"),
    ],
)
def test_errors_become_error_annotations_in_github_actions(
    tmp_path: Path, args: list[str], title: str, text: str
) -> None:
    plain = rocmenv(tmp_path, *args, gha=False)
    assert plain.returncode == 2
    assert "::error" not in plain.stderr
    done = rocmenv(tmp_path, *args, gha=True)
    assert done.returncode == 2
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("::error")]
    assert line.startswith(f"::error title={title}::")
    assert text in line
    assert "\n" not in line and ("%0A" in line or "hint" not in done.stderr)  # one line


def test_multi_line_messages_are_escaped_into_one_annotation(tmp_path: Path) -> None:
    (tmp_path / "rocmenv.toml").write_text("[profiles.x]\nimage = 'a'\nbogus-key = 1\n")
    done = rocmenv(tmp_path, "options", "--profile", "x", gha=True)
    assert done.returncode == 2
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("::error")]
    assert "%0Ahint: " in line  # the hint is part of the same annotation
