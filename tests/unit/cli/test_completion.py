"""``rocmenv completion bash|zsh|fish``: the script is sourced in a real bash and asked to
complete a subcommand, a flag, a profile name and a suite name of the project at hand; and
ordinary runs do not pay for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

PROJECT = """
[profiles.ci-gpu]
extends = "rocm"
[profiles.nightly-cpu]
extends = "cpu"
[suites.stage-a]
tests = [{ path = "t.py" }]
[suites.stage-b]
tests = [{ path = "t.py" }]
"""

# COMP_* as bash sets them for the line typed so far, then the completion function
COMPLETE = r"""
source "$1"
line="$2"
COMP_LINE="$line"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMPREPLY=()
_python_argcomplete rocmenv "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("completion") / "rocmenv.bash"
    done = subprocess.run([sys.executable, "-m", "rocmenv", "completion", "bash"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    out.write_text(done.stdout)
    return out


def completions(script: Path, cwd: Path, line: str) -> list[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "HOME": str(cwd)}
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", COMPLETE, "bash", str(script), line],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [word.strip() for word in done.stdout.splitlines() if word.strip()]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(PROJECT)
    return tmp_path


def test_bash_completes_a_subcommand(script: Path, project: Path) -> None:
    assert completions(script, project, "rocmenv ru") == ["run"]
    assert set(completions(script, project, "rocmenv s")) == {"shell", "shims", "suite"}


def test_bash_completes_a_flag_of_the_subcommand(script: Path, project: Path) -> None:
    assert completions(script, project, "rocmenv run --untr") == ["--untrusted"]


def test_bash_completes_the_projects_profile_names(script: Path, project: Path) -> None:
    assert completions(script, project, "rocmenv run --profile ") == [
        "rocm",
        "cpu",
        "ci-gpu",
        "nightly-cpu",
    ]
    assert completions(script, project, "rocmenv options --profile ci") == ["ci-gpu"]


def test_bash_completes_the_projects_suite_names(script: Path, project: Path) -> None:
    words = completions(script, project, "rocmenv suite run stage")
    assert words == ["stage-a", "stage-b"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_a_script_for_each_shell(shell: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rocmenv", "completion", shell],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "rocmenv" in done.stdout and "_ARGCOMPLETE" in done.stdout
    if shell == "fish":
        assert "complete --command rocmenv" in done.stdout


def test_an_ordinary_start_does_not_import_the_completion_machinery() -> None:
    code = (
        "import sys\nfrom rocmenv.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(repr([m for m in ('argcomplete', 'rocmenv.cli.completion', 'rocmenv.cli.run') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip() == "[]"


def test_bash_does_not_offer_the_internal_suite_commands(script: Path, project: Path) -> None:
    words = completions(script, project, "rocmenv suite ")
    assert {"list", "plan", "run"} <= set(words) and not any("slurm" in w for w in words)
    assert completions(script, project, "rocmenv suite slurm") == []
    assert completions(script, project, "rocmenv run --pro") == ["--profile"]  # not -p
