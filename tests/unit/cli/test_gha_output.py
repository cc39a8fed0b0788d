"""$GITHUB_OUTPUT: name=value lines, the delimiter form for multi-line values, appended in
one write, never through a symbolic link; and `suite plan --format gha-matrix` writes the
matrix there."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.cli._common import gha_output
from rocmenv.context import Context
from rocmenv.errors import UsageError


def _ctx(tmp_path: Path, **env: str) -> Context:
    return Context(env={"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path / "out"), **env},
                   cwd=tmp_path, stdout=io.StringIO(), stderr=io.StringIO())  # fmt: skip


def test_values_are_appended_and_multi_line_ones_use_a_delimiter(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("earlier=1\n")
    gha_output(_ctx(tmp_path), {"a": "x=y", "b": "line 1\nline 2"})
    lines = (tmp_path / "out").read_text().splitlines()
    assert lines[:2] == ["earlier=1", "a=x=y"]
    assert lines[2].startswith("b<<ghadelimiter_") and lines[3:5] == ["line 1", "line 2"]
    assert lines[5] == lines[2].split("<<", 1)[1]


def test_nothing_is_written_outside_actions(tmp_path: Path) -> None:
    ctx = Context(env={"GITHUB_OUTPUT": str(tmp_path / "out")}, cwd=tmp_path)
    gha_output(ctx, {"a": "1"})
    assert not (tmp_path / "out").exists()


def test_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep\n")
    (tmp_path / "out").symlink_to(target)
    with pytest.raises(UsageError, match=r"cannot write the step outputs to \$GITHUB_OUTPUT"):
        gha_output(_ctx(tmp_path), {"a": "1"})
    assert target.read_text() == "keep\n"


def test_suite_plan_gha_matrix_sizes_the_matrix_from_the_estimates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(textwrap.dedent("""
        [suites.s]
        profile = "cpu"
        gpus = 0
        tests = [
          { path = "a.py", est-time = 600 }, { path = "b.py", est-time = 500 },
          { path = "c.py", est-time = 400 }, { path = "d.py", est-time = 100 },
          { path = "off.py", est-time = 900, disabled = "FIXME" },
        ]
    """))  # fmt: skip
    monkeypatch.chdir(tmp_path)
    for key, value in {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(tmp_path / "out")}.items():
        monkeypatch.setenv(key, value)
    assert (
        main(["suite", "plan", "s", "--max-partition-time", "900", "--format", "gha-matrix"]) == 0
    )
    printed = json.loads(capsys.readouterr().out)
    written = dict(line.split("=", 1) for line in (tmp_path / "out").read_text().splitlines())
    assert json.loads(written["matrix"]) == printed and written["has-tests"] == "true"
    assert [e["partition"] for e in printed["include"]] == ["0/2", "1/2"]
    assert sorted(e["estimated_seconds"] for e in printed["include"]) == [700, 900]
    assert sum(e["tests"] for e in printed["include"]) == 4  # the disabled one is not planned
