"""Issue 31: names, file names and reasons a fork commits reach no terminal, log line or
workflow command raw. A name with a control character is refused where it is read (naming
the file and line, the name shown escaped); a name that looks like a workflow command, and a
reason full of markdown and newlines, are listed and planned as data. The job log — the CLI's
stdout and stderr read as GitHub's runner reads them — holds rocmenv's own commands only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gha_runner import Runner, read_job_log

REASON = (
    "![beacon](http://127.0.0.1:9/beacon.png) <img src=http://127.0.0.1:9/b.png> | fake |\n"
    "### ✅ all 42 tests passed\n::error::PWNED-reason"
)
NAMES = (
    "::set-output name=image::PWNED-name",
    "x ##[add-mask]PWNED-mid",
    "  ::stop-commands::pwned",
)


def rocmenv(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMENV_", "GITHUB_"))}
    base.update({"HOME": str(root), "GITHUB_ACTIONS": "true", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        capture_output=True, cwd=root, env=base, timeout=60, check=False,
    )  # fmt: skip


def checkout(root: Path, suites: str, files: dict[str, str] | None = None) -> Path:
    (root / ".git").mkdir(parents=True)
    (root / "rocmenv.toml").write_text(suites)
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def only_rocmenvs_commands(done: subprocess.CompletedProcess[bytes]) -> Runner:
    """Every command read is rocmenv's: an annotation titled ``rocmenv …`` (its message may
    quote a hostile name), or a fence of its own; nothing stopped at the end."""
    runner, worst = read_job_log(done.stdout, done.stderr)
    assert worst == [], worst
    for c in runner.commands:
        if c.name == "stop-commands":
            assert len(c.data) == 32 and c.data in runner.resumed
        else:
            assert c.name in ("error", "warning"), c
            assert c.properties.get("title", "").startswith("rocmenv"), c
    assert runner.stop_token is None and not runner.failed
    return runner


DISCOVER = """
[suites.disc]
cmd = ["true"]
[suites.disc.discover]
glob = "t/*.py"
call = "register_rocm_ci"
"""


@pytest.mark.parametrize("command", [["list", "disc"], ["plan", "disc"], ["run", "disc"]])
def test_a_test_file_whose_name_holds_a_newline_is_refused_naming_it(
    tmp_path: Path, command: list[str]
) -> None:
    """git commits such a name; discovery must not turn it into a test name."""
    name = "t/a\n::set-output name=image::PWNED-file.py"
    root = checkout(tmp_path, DISCOVER, {name: "register_rocm_ci(est_time=5, suite='s')\n"})
    done = rocmenv(root, "suite", *command)
    assert done.returncode == 2, done.stderr
    runner = only_rocmenvs_commands(done)
    (error,) = runner.annotations()
    assert error.properties == {"title": "rocmenv suite"}
    assert "t/a\\u000a::set-output" in error.data and ":1:" in error.data  # file:line
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"path": "t/a.py", "name": "a\x1b[2Jb"}, ".tests[0].name"),
        ({"path": "t/b\u2028.py"}, ".tests[0].path"),
        ({"path": "t/c.py", "labels": ["fast", "\u202eevil"]}, ".tests[0].labels"),
    ],
)
def test_listed_names_paths_and_labels_with_control_characters_are_refused(
    tmp_path: Path, entry: dict[str, object], where: str
) -> None:
    table = "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in entry.items()) + " }"
    root = checkout(tmp_path, f"[suites.s]\ntests = [{table}]\n")
    done = rocmenv(root, "suite", "list", "s")
    assert done.returncode == 2, done.stderr
    text = done.stderr.decode()
    assert where in text and "control character" in text
    for raw in ("\x1b", "\u2028", "\u202e"):
        assert raw not in text
    only_rocmenvs_commands(done)


def test_a_suite_name_outside_the_profile_name_grammar_is_refused(tmp_path: Path) -> None:
    """``../../x`` would put the untrusted run's logs outside ``$RUNNER_TEMP``."""
    runner_temp = tmp_path / "runner" / "temp"
    runner_temp.mkdir(parents=True)
    root = checkout(tmp_path / "fork", '[suites."../../x"]\ntests = [{ path = "t.py" }]\n')
    for args in (["run", "../../x", "--untrusted"], ["list"]):
        done = rocmenv(root, "suite", *args, env={"RUNNER_TEMP": str(runner_temp)})
        assert done.returncode == 2, done.stderr
        assert b"is not a name" in done.stderr and b"Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork", "runner"]
    assert list(runner_temp.iterdir()) == []


HOSTILE_SUITE = (
    '[suites.h]\ncmd = ["true"]\ntests = [\n'
    + ",\n".join(
        f'  {{ path = "t/{i}.py", name = {json.dumps(name)} }}' for i, name in enumerate(NAMES)
    )
    + f',\n  {{ path = "t/off.py", disabled = {json.dumps(REASON)} }}\n]\n'
)


@pytest.mark.parametrize(
    "args",
    [
        ["list", "h"], ["list", "h", "--json"], ["plan", "h"], ["plan", "h", "--json"],
        ["plan", "h", "--format", "gha-matrix"],
    ],
)  # fmt: skip
def test_names_and_reasons_that_look_like_commands_are_listed_as_data(
    tmp_path: Path, args: list[str]
) -> None:
    root = checkout(tmp_path, HOSTILE_SUITE)
    output = tmp_path / "github-output"
    done = rocmenv(root, "suite", *args, env={"GITHUB_OUTPUT": str(output)})
    assert done.returncode == 0, done.stderr
    only_rocmenvs_commands(done)
    out = done.stdout.decode()
    if "--json" in args or "gha-matrix" in args:
        doc = json.loads(out)  # one document, one line, the names exact
        assert out.count("\n") == 1 and doc
        return
    lines = out.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("::") or "##[" in line]
    assert "\x1b" not in out and not [line for line in lines if line.startswith("###")]
    if args[0] == "list":
        assert len(lines) == 1 + len(NAMES) + 1  # the suite, its tests, the disabled one
        assert "DISABLED: ![beacon]" in out and "\\u000a### ✅ all 42" in out
