"""A suite's discover table: calls, signature, selection on any keyword, the GPU count from
a keyword or a pattern over one; and the tests its registrations make."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from rocmenv.errors import ConfigError
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.model import Suite, parse_suite
from rocmenv.suite.select import Selection, select

MILES_SIG = "est_time, suite, *, labels=None, nightly=False, disabled=None"
PATTERN = r"-(\d+)-gpu-"
FIXME = "FIXME: re-enable once this case passes on the MI350 runners."


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _suite(root: Path, table: dict[str, Any]) -> Suite:
    return parse_suite("s", table, root=root, where="rocmenv.toml", slurm=SlurmSettings())


def _miles_tree(root: Path) -> None:
    """Nine registrations in the PR suite, four of them disabled (the issue's numbers)."""
    for i in range(5):
        _write(root, f"tests/e2e/test_ok_{i}.py",
               f'register_rocm_ci({100 * (i + 1)}, "stage-c-4-gpu-mi350", labels=[])\n')  # fmt: skip
    for i in range(4):
        _write(root, f"tests/e2e/test_off_{i}.py",
               f'register_rocm_ci(est_time=50, suite="stage-c-4-gpu-mi350", disabled="{FIXME}")\n')  # fmt: skip
    _write(
        root,
        "tests/e2e/test_positional.py",
        'register_rocm_ci(800, "nightly-stage-c-8-gpu-mi350", nightly=True)\n',
    )
    _write(
        root,
        "tests/helpers.py",
        "def register_rocm_ci(est_time, suite, *, labels, nightly=False, disabled=None): ...\n",
    )


def _miles_discover(suite: str) -> dict[str, Any]:
    return {
        "glob": "tests/**/*.py", "call": "register_rocm_ci", "signature": MILES_SIG,
        "select": {"suite": suite}, "gpus-from": {"key": "suite", "pattern": PATTERN},
    }  # fmt: skip


def test_disabled_registrations_are_listed_but_never_planned(tmp_path: Path) -> None:
    _miles_tree(tmp_path)
    suite = _suite(tmp_path, {"discover": _miles_discover("stage-c-4-gpu-mi350")})
    assert len(suite.tests) == 9
    chosen = select(suite, Selection())
    assert len(chosen.run) == 5 and len(chosen.disabled) == 4
    assert {t.disabled for t in chosen.disabled} == {FIXME}
    assert all(t.gpus == 4 for t in suite.tests)  # from the suite name's -4-gpu-


def test_a_positional_registration_is_found_with_its_gpu_count(tmp_path: Path) -> None:
    _miles_tree(tmp_path)
    suite = _suite(tmp_path, {"discover": _miles_discover("nightly-stage-c-8-gpu-mi350")})
    (test,) = suite.tests
    assert (test.path, test.est_time, test.gpus, test.nightly) == (
        "tests/e2e/test_positional.py", 800.0, 8, True,
    )  # fmt: skip
    assert test.source == "tests/e2e/test_positional.py:1"
    assert test.registration["suite"] == "nightly-stage-c-8-gpu-mi350"


def test_selection_on_stage_and_runner_config_with_cuda_calls_beside(tmp_path: Path) -> None:
    _write(tmp_path, "test/registered/test_a.py", """
        register_cuda_ci(est_time=30, suite="stage-b-test-small-1-gpu")
        register_amd_ci(est_time=40, stage="stage-b", runner_config="2-gpu-small-amd-mi35x")
    """)  # fmt: skip
    _write(tmp_path, "test/registered/test_b.py", """
        register_amd_ci(est_time=50, stage="stage-b", runner_config="8-gpu-large-amd-mi35x")
        register_amd_ci(est_time=60, stage="stage-c", runner_config="2-gpu-small-amd-mi35x")
    """)  # fmt: skip
    discover = {
        "glob": "test/**/*.py", "call": ["register_amd_ci"],
        "signature": "est_time, suite=None, *, stage=None, runner_config=None, nightly=False",
        "select": {"stage": "stage-b", "runner_config": ["2-gpu-small-amd-mi35x"]},
        "gpus-from": {"key": "runner_config", "pattern": r"^(\d+)-gpu-"},
    }  # fmt: skip
    (test,) = _suite(tmp_path, {"discover": discover}).tests
    assert (test.path, test.gpus, test.est_time) == ("test/registered/test_a.py", 2, 40.0)


def test_the_older_num_gpus_keyword_still_counts_without_gpus_from(tmp_path: Path) -> None:
    _write(tmp_path, "t/a.py", 'register_rocm_ci(est_time=5, suite="x", num_gpus=2)\n')
    (test,) = _suite(tmp_path, {"gpus": 1, "discover": {"glob": "t/*.py", "call": "register_rocm_ci", "suite": "x"}}).tests  # fmt: skip
    assert test.gpus == 2


@pytest.mark.parametrize(
    ("source", "discover", "message"),
    [
        ('register_rocm_ci(5, "stage-a-cpu")\n', {"select": {"suite": "stage-a-cpu"}},
         r"t/a\.py:1: .*does not match the GPU-count pattern"),
        ('register_rocm_ci(5, "s-1-gpu-x")\nregister_rocm_ci(6, "s-1-gpu-x")\n',
         {"select": {"suite": "s-1-gpu-x"}}, r"registers itself 2 times .*t/a\.py:1, t/a\.py:2"),
        ('register_rocm_ci(5, "s-1-gpu-x", labels="moe")\n', {"select": {"suite": "s-1-gpu-x"}},
         r"t/a\.py:1: .*labels='moe'\) must be a list"),
        ('register_rocm_ci(-5, "s-1-gpu-x")\n', {"select": {"suite": "s-1-gpu-x"}},
         r"t/a\.py:1: .*est_time=-5\) must be a positive"),
        ('register_rocm_ci(5, "s-1-gpu-x", disabled=3)\n', {"select": {"suite": "s-1-gpu-x"}},
         r"t/a\.py:1: .*disabled=3\) must be a reason"),
    ],
)  # fmt: skip
def test_registrations_rocmenv_cannot_use_are_errors_naming_the_line(
    tmp_path: Path, source: str, discover: dict[str, Any], message: str
) -> None:
    _write(tmp_path, "t/a.py", source)
    table = {"glob": "t/*.py", "call": "register_rocm_ci", "signature": MILES_SIG,
             "gpus-from": {"key": "suite", "pattern": PATTERN}, **discover}  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        _suite(tmp_path, {"discover": table})


@pytest.mark.parametrize(
    ("discover", "message"),
    [
        ({"select": {"stage": "b"}}, "'stage' is not a parameter of the signature"),
        ({"gpus-from": {"key": "suite", "pattern": r"(\d+)-(gpu)"}}, "exactly one group"),
        ({"gpus-from": {"key": "suite", "pattern": "("}}, "not a regular expression"),
        ({"gpus-from": {"key": "suite", "patern": "x"}}, "did you mean 'pattern'"),
        ({"suite": "x", "select": {"suite": "x"}}, "not both"),
        ({"call": "register rocm"}, "must be a function name"),
        ({"signature": "est_time, suite, *, labels=None, x="}, "not a Python parameter list"),
    ],
)
def test_discover_tables_are_checked_before_any_file_is_read(
    tmp_path: Path, discover: dict[str, Any], message: str
) -> None:
    table = {"glob": "t/*.py", "call": "register_rocm_ci", "signature": MILES_SIG, **discover}
    with pytest.raises(ConfigError, match=message):
        _suite(tmp_path, {"discover": table})


def test_per_test_tables_set_timeouts_retries_and_disable(tmp_path: Path) -> None:
    _miles_tree(tmp_path)
    suite = _suite(tmp_path, {
        "retries": 1, "retry-wait": 5, "min-timeout": 30,
        "discover": _miles_discover("stage-c-4-gpu-mi350"),
        "per-test": {
            "tests/e2e/test_ok_0.py": {"timeout": 900, "retries": 0},
            "tests/e2e/test_ok_1.py": {"disabled": "broken"},
            "tests/e2e/test_off_0.py": {"disabled": False},
        },
    })  # fmt: skip
    by = {t.name: t for t in suite.tests}
    assert suite.timeout(by["tests/e2e/test_ok_0.py"]) == 900
    assert by["tests/e2e/test_ok_0.py"].policy.retries == 0
    assert by["tests/e2e/test_ok_2.py"].policy.retries == 1
    assert suite.timeout(by["tests/e2e/test_ok_2.py"]) == 375  # 300 x 1.25
    assert suite.timeout(by["tests/e2e/test_off_1.py"]) == 62.5  # 50 x 1.25 over the floor
    assert by["tests/e2e/test_ok_1.py"].disabled == "broken"
    assert by["tests/e2e/test_off_0.py"].disabled is None
    with pytest.raises(ConfigError, match=r"has no test .*did you mean 'tests/e2e/test_ok_\d\.py'"):
        _suite(tmp_path, {"discover": _miles_discover("stage-c-4-gpu-mi350"),
                          "per-test": {"tests/e2e/test_ok_O.py": {"timeout": 1}}})  # fmt: skip


def test_a_test_file_linking_out_of_the_checkout_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text('register_rocm_ci(5, "s-1-gpu-x")\n')
    root = tmp_path / "repo"
    (root / "t").mkdir(parents=True)
    (root / "t" / "link.py").symlink_to(outside)
    table = {
        "glob": "t/*.py",
        "call": "register_rocm_ci",
        "signature": MILES_SIG,
        "suite": "s-1-gpu-x",
    }
    assert _suite(root, {"discover": table}).tests == ()


SGLANG_SIG = "est_time, suite=None, nightly=False, disabled=None, *, stage=None, runner_config=None"
SGLANG_NAMING = ["{stage}-test-{runner_config}", "{suite}"]


def test_suite_name_groups_registrations_as_sglangs_collector_names_them(tmp_path: Path) -> None:
    _write(tmp_path, "test/registered/a.py",
           'register_amd_ci(est_time=3, stage="stage-b", runner_config="1-gpu-small-amd-mi35x")\n')  # fmt: skip
    _write(
        tmp_path,
        "test/registered/b.py",
        'register_amd_ci(2, "stage-b-test-1-gpu-small-amd-mi35x")\n',
    )
    _write(
        tmp_path, "test/registered/c.py", 'register_amd_ci(5, "nightly-amd-8-gpu-mi35x", True)\n'
    )
    _write(tmp_path, "test/registered/d.py",
           'register_amd_ci(4, stage="stage-b", runner_config="2-gpu-amd-mi35x")\n')  # fmt: skip
    discover = {"glob": "test/registered/**/*.py", "call": "register_amd_ci",
                "signature": SGLANG_SIG, "suite-name": SGLANG_NAMING}  # fmt: skip
    one = _suite(
        tmp_path, {"discover": {**discover, "suite": "stage-b-test-1-gpu-small-amd-mi35x"}}
    )
    assert sorted(t.name for t in one.tests) == ["test/registered/a.py", "test/registered/b.py"]
    night = _suite(tmp_path, {"discover": {**discover, "suite": "nightly-amd-8-gpu-mi35x"}})
    assert [t.nightly for t in night.tests] == [True]  # nightly passed by position
    # the raw select still matches the raw keyword: stage-b without the -test- naming
    raw = _suite(tmp_path, {"discover": {**discover | {"suite-name": "{suite}"},
                                         "select": {"stage": "stage-b"}}})  # fmt: skip
    assert sorted(t.name for t in raw.tests) == ["test/registered/a.py", "test/registered/d.py"]


@pytest.mark.parametrize(
    ("naming", "message"),
    [
        ("{stage!r}-x", "must name a parameter"),
        ("{stage:>3}", "must name a parameter"),
        ("{nope}-test", "'nope' is not a parameter"),
        ("{stage", "suite-name"),
        ([], "is empty"),
    ],
)
def test_a_bad_suite_name_is_a_config_error(tmp_path: Path, naming: Any, message: str) -> None:
    discover = {"glob": "*.py", "call": "register_amd_ci", "signature": SGLANG_SIG,
                "suite-name": naming, "suite": "x"}  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        _suite(tmp_path, {"discover": discover})
