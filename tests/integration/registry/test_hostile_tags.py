"""Issue 31: a hostile registry's tags are the registry's strings. ``tags list --all`` shows
each on one line of its own, with no terminal escape, and inside GitHub Actions the job log
(read as the runner reads it) holds no workflow command of theirs — in text and in JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.gha_runner import read_job_log
from tests.support.hostile_registry import HOSTILE_TAGS, HostileRegistry


def tags_list(tmp_path: Path, host: str, *flags: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROCMENV_", "GITHUB_")) and not k.upper().endswith("_PROXY")}  # fmt: skip
    env.update({"HOME": str(tmp_path), "GITHUB_ACTIONS": "true", "ROCMENV_TOKEN_CACHE": "0",
                "ROCMENV_REGISTRY_RETRIES": "1"})  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", "tags", "list", f"{host}/x/y", "--all", *flags],
        capture_output=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip


def test_hostile_tags_are_listed_one_per_line_and_issue_no_command(tmp_path: Path) -> None:
    with HostileRegistry("hostile-tags") as reg:
        done = tags_list(tmp_path, reg.host)
    assert done.returncode == 0, done.stderr
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [] and runner.commands == [], (worst, runner.commands)
    lines = done.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(HOSTILE_TAGS)  # no tag made a line of its own
    for byte in (b"\x1b", b"\r", b"\xc2\x9b", "\u202e".encode()):
        assert byte not in done.stdout + done.stderr
    assert lines[0].startswith("v0.5.8-rocm700-mi30x-20260215\t")
    shown = {line.split("\t")[0] for line in lines}
    assert "\\u003a:set-output name=image::PWNED-tag" in shown
    assert "ok\\u000a::add-mask::PWNED-newline" in shown


def test_hostile_tags_in_json_are_the_same_strings_and_issue_no_command(tmp_path: Path) -> None:
    with HostileRegistry("hostile-tags") as reg:
        done = tags_list(tmp_path, reg.host, "--json")
    assert done.returncode == 0, done.stderr
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [] and runner.commands == [], (worst, runner.commands)
    doc = json.loads(done.stdout)
    listed = [t["tag"] for t in doc["tags"]]
    assert sorted(listed) == sorted(HOSTILE_TAGS)  # exact: JSON escapes, never alters
