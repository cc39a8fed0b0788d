"""Suite configuration and discovery from test files' AST."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.project import Project
from rocmenv.settings.resolve import settings_for
from rocmenv.suite.discovery import registrations
from rocmenv.suite.model import load_suite


def _project(tmp_path: Path, toml: str) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "rocmenv.toml").write_text(textwrap.dedent(toml))
    return tmp_path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _suite(tmp_path: Path, table: dict[str, object], name: str = "s"):
    """The suite as ``suite run`` loads it: its Slurm settings through the settings resolver."""
    suites: dict[str, object] = table.get("suites", {})  # type: ignore[assignment]
    project = Project(path=None, root=tmp_path, suites=suites)
    settings = settings_for(Context(env={}, cwd=tmp_path), project=project)
    slurm = settings.slurm_for(name)
    return load_suite(suites, name, root=tmp_path, where="rocmenv.toml", slurm=slurm)


def test_explicit_tests_take_defaults_and_render_the_command(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path,
        {
            "suites": {
                "s": {
                    "profile": "ci",
                    "gpus": 2,
                    "tests": [
                        {"path": "t/a.py", "est-time": 100},
                        {"path": "t/b.py", "gpus": 8, "cmd": "python -m pytest -x {path}"},
                    ],
                }
            }
        },
    )
    a, b = suite.tests
    assert (a.gpus, a.est_time, a.command) == (2, 100.0, ("python", "t/a.py"))
    assert (b.gpus, b.est_time, b.command) == (8, None, ("python", "-m", "pytest", "-x", "t/b.py"))
    assert suite.declared(b) == suite.est_time
    assert suite.profile == "ci"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"tets": []}, "did you mean 'tests'"),
        ({"tests": [{"path": "a.py", "gpus": -1}]}, "gpus must be an integer"),
        ({"tests": [{"path": "a.py", "est-time": 0}]}, "positive number"),
        ({"tests": [{"gpus": 1}]}, "has no path"),
        ({"tests": [{"path": "a.py"}, {"path": "a.py"}]}, "listed twice"),
        ({"cmd": "python {file}"}, "unknown placeholder"),
        ({"slurm": {"gpu-request": "gress"}}, "did you mean 'gres'"),
    ],
)
def test_bad_suite_tables_are_config_errors(
    tmp_path: Path, table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _suite(tmp_path, {"suites": {"s": table}})


def test_unknown_suite_says_what_exists(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="did you mean 'stage-c'"):
        _suite(tmp_path, {"suites": {"stage-c": {}}}, name="stage_c")


def test_discovery_reads_registration_calls_without_importing(tmp_path: Path) -> None:
    _write(
        tmp_path / "test/srt/test_moe.py",
        """
        import torch  # not installed on the host: the file must not be imported
        from sglang.test.ci.ci_register import register_rocm_ci

        register_rocm_ci(est_time=1600, suite="stage-c-4-gpu", num_gpus=4, labels=["moe"])
        raise SystemExit("importing this file is a bug")
        """,
    )
    _write(
        tmp_path / "test/srt/test_small.py",
        """
        from sglang.test.ci import ci_register as ci
        ci.register_rocm_ci(est_time=90.5, suite="stage-c-4-gpu", gpus=1)
        """,
    )
    _write(
        tmp_path / "test/srt/test_other_suite.py",
        "register_rocm_ci(est_time=5, suite='stage-a')\n",
    )
    _write(tmp_path / "test/srt/helpers.py", "def register_nothing():\n    pass\n")
    suite = _suite(
        tmp_path,
        {
            "suites": {
                "s": {
                    "gpus": 2,
                    "discover": {
                        "glob": "test/srt/**/*.py",
                        "call": "register_rocm_ci",
                        "suite": "stage-c-4-gpu",
                    },
                }
            }
        },
    )
    by_name = {t.name: t for t in suite.tests}
    assert sorted(by_name) == ["test/srt/test_moe.py", "test/srt/test_small.py"]
    moe = by_name["test/srt/test_moe.py"]
    assert (moe.gpus, moe.est_time, moe.labels) == (4, 1600.0, ("moe",))
    assert moe.command == ("python", "test/srt/test_moe.py")
    assert moe.source == "test/srt/test_moe.py:5"
    assert by_name["test/srt/test_small.py"].gpus == 1


def test_label_filters_keep_and_drop(tmp_path: Path) -> None:
    tests = [
        {"path": "a.py", "labels": ["fast"]},
        {"path": "b.py", "labels": ["fast", "flaky"]},
        {"path": "c.py"},
    ]
    suite = _suite(
        tmp_path,
        {"suites": {"s": {"tests": tests, "labels": ["fast"], "exclude-labels": ["flaky"]}}},
    )
    assert [t.name for t in suite.tests] == ["a.py"]


def test_non_literal_keyword_and_syntax_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"t\.py:2: register\(est_time=…\) is not a literal"):
        registrations("X = 3\nregister(est_time=X * 2)\n", "register", filename="t.py")
    with pytest.raises(ConfigError, match=r"t\.py:1: cannot parse"):
        registrations("register(est_time=\n", "register", filename="t.py")


def test_suite_list_json_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _project(
        tmp_path,
        """
        [suites.quick]
        profile = "cpu"
        tests = [{ path = "a.py", est-time = 30, gpus = 0 }]
        """,
    )
    monkeypatch.chdir(tmp_path)
    assert main(["suite", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (suite,) = doc["suites"]
    assert suite["name"] == "quick" and suite["profile"] == "cpu"
    assert suite["tests"][0]["estimate"] == 30
    assert main(["suite", "list", "nope"]) == 2
