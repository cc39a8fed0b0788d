"""Empty is green: a selection or partition with nothing to run exits 0 with a notice saying
why (before any engine or GPU is asked), and `suite plan --format gha-matrix` writes
`has-tests` and never a matrix entry the run would refuse."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.context import Context

PROJECT = textwrap.dedent("""\
    [labels]
    prefix = "run-ci-"
    scopes = { all = "all" }

    [suites.s]
    profile = "cpu"
    gpus = 0
    tests = [
      { path = "a.py", est-time = 60, labels = ["amd"] },
      { path = "b.py", est-time = 50, labels = ["amd"] },
      { path = "n.py", est-time = 40, nightly = true },
      { path = "off.py", est-time = 30, disabled = "FIXME: MI350" },
    ]
""")


def _run(root: Path, *argv: str, **env: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    # DOCKER_HOST names nothing: a run that asked the engine would fail with exit 4
    base = {"HOME": str(root), "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    ctx = Context(env=base | env, cwd=root, stdout=out, stderr=err)
    return main(list(argv), ctx=ctx), out.getvalue(), err.getvalue()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(PROJECT)
    return tmp_path


def test_a_plain_pr_run_selects_nothing_and_exits_0_with_the_reason(repo: Path) -> None:
    code, out, err = _run(repo, "suite", "run", "s", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["passed"] and [t["name"] for t in report["tests"]] == ["off.py"]  # disabled
    (why,) = [n for n in report["notices"] if n.startswith("no tests selected")]
    assert "2 test(s)" in why and "amd" in why and "nightly only" in why
    assert "rocmenv: note: no tests selected" in err


def test_an_empty_partition_exits_0(repo: Path) -> None:
    code, _, err = _run(repo, "suite", "run", "s", "--labels", "run-ci-amd", "--partition", "2/3",
                        "--declared")  # fmt: skip
    assert code == 0 and "partition 2/3" in err and "other partitions" in err


def test_an_unknown_label_and_a_foreign_name_are_notices_not_errors(repo: Path) -> None:
    code, _, err = _run(repo, "suite", "list", "s", "--labels", "run-ci-nope,bug")
    assert code == 0
    assert "'nope' matches no test" in err and "'bug' ignored" in err


def test_gha_matrix_of_nothing_is_one_empty_entry_and_has_tests_false(repo: Path) -> None:
    out_file = repo / "out"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out_file)}
    code, out, err = _run(repo, "suite", "plan", "s", "--format", "gha-matrix", "--partitions",
                          "4", **env)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["include"] == [
        {"partition": "0/1", "index": 0, "count": 1, "tests": 0, "estimated_seconds": 0}
    ]
    written = dict(line.split("=", 1) for line in out_file.read_text().splitlines())
    assert written["has-tests"] == "false" and json.loads(written["matrix"]) == json.loads(out)
    assert "::notice title=rocmenv::no tests selected" in err
    # and the run that entry starts is green
    assert _run(repo, "suite", "run", "s", "--partition", "0/1", "--declared")[0] == 0


def test_gha_matrix_has_at_most_one_entry_per_test(repo: Path) -> None:
    out_file = repo / "out"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(out_file)}
    code, out, _ = _run(repo, "suite", "plan", "s", "--format", "gha-matrix", "--partitions", "5",
                        "--labels", "run-ci-all", **env)  # fmt: skip
    assert code == 0
    entries = json.loads(out)["include"]
    assert [e["partition"] for e in entries] == ["0/2", "1/2"]
    assert all(e["tests"] == 1 for e in entries)
    assert "has-tests=true" in out_file.read_text()
