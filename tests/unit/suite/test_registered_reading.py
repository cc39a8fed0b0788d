"""A suite's discover table and the registrations it finds (rocmenv.suite.registered), value by
value at the edges: what is accepted, what is an error, and that every error names where it
is (the table's key path, the file:line and the call) and, where there is one, what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rocmenv.errors import ConfigError
from rocmenv.suite.registered import MAX_GPUS, Found, discovered_tests, parse_discovery

SIG = "est_time=None, suite=None, *, labels=None, nightly=False, disabled=None, num_gpus=None, gpus=None, runner=None"
WHERE = "rocmenv.toml: suites.s.discover"


def table(**extra: Any) -> dict[str, Any]:
    return {"glob": "t/*.py", "call": "register_rocm_ci", "signature": SIG, **extra}


def found(tmp_path: Path, call: str, **extra: Any) -> list[Found]:
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "test_a.py").write_text(call + "\n")
    return list(discovered_tests(tmp_path, parse_discovery(table(**extra), WHERE)))


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ([], WHERE),
        ({"glob": "t/*.py"}, "call"),
        ({"call": "f"}, "glob"),
        ({"glob": "t/*.py", "call": "f", "globb": 1}, "globb"),
        ({"glob": "t/*.py", "call": "not a name"}, ".call"),
        ({"glob": "t/*.py", "call": []}, ".call"),
        ({"glob": "t/*.py", "call": "f", "signature": 5}, ".signature"),
        ({"glob": "t/*.py", "call": "f", "suite": "x", "select": {"suite": "x"}}, "not both"),
        ({"glob": "t/*.py", "call": "f", "select": ["x"]}, ".select"),
        ({"glob": "t/*.py", "call": "f", "signature": "suite", "select": {"suite": {"a": 1}}},
         ".select.suite"),
        ({"glob": "t/*.py", "call": "f", "select": {"stage": "b"}, "signature": "suite"},
         "'stage'"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": "num_gpus"}, ".gpus-from"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": {"pattern": "(x)"}}, ".gpus-from"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": {"key": "g", "x": 1}}, "x"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": {"key": "g", "pattern": 3}}, ".pattern"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": {"key": "g", "pattern": "("}}, ".pattern"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": {"key": "g", "pattern": "x"}}, ".pattern"),
        ({"glob": "t/*.py", "call": "f", "gpus-from": {"key": 3}}, ".key"),
        ({"glob": 3, "call": "f"}, ".glob"),
        ({"glob": "t/*.py", "call": "f", "signature": "suite", "gpus-from": {"key": "gpus"}},
         "'gpus'"),
    ],
)  # fmt: skip
def test_a_bad_discover_table_is_an_error_naming_where(raw: Any, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_discovery(raw, WHERE)
    assert WHERE in caught.value.what and named in caught.value.what


@pytest.mark.parametrize(
    "raw",
    [
        {"glob": "t/*.py", "call": "f", "signature": "suite", "select": {"stage": "b"}},
        {"glob": "t/*.py", "call": "f", "signature": "x", "gpus-from": {"key": "g"}},
        {"glob": "t/*.py", "call": "f", "gpus-from": {"key": "num_gpus", "pattern": "(a)(b)"}},
    ],
)
def test_discover_errors_with_a_remedy_give_it(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_discovery(raw, WHERE)
    assert caught.value.hint


def test_calls_are_names_of_any_case_and_a_list_of_them() -> None:
    d = parse_discovery(table(call=["Register_X", "_r2"]), WHERE)
    assert d.calls == ("Register_X", "_r2")
    assert parse_discovery(table(call="registerAmdCi"), WHERE).calls == ("registerAmdCi",)


def test_suite_is_short_for_select_suite(tmp_path: Path) -> None:
    d = parse_discovery(table(suite="x"), WHERE)
    assert d.suite == ("x",) and d.select == ()  # the suite as the client's collector names it
    assert d.glob == "t/*.py" and d.signature.text == SIG
    two = found(tmp_path, 'register_rocm_ci(1, "x")', suite="x")
    assert len(two) == 1
    assert found(tmp_path, 'register_rocm_ci(1, "y")', suite="x") == []


def test_a_select_value_may_be_a_list(tmp_path: Path) -> None:
    d = parse_discovery(table(select={"suite": ["a", "b"], "runner": 2}), WHERE)
    assert d.select == (("suite", ("a", "b")), ("runner", (2,)))


def test_gpus_from_a_key_alone_reads_the_number(tmp_path: Path) -> None:
    (test,) = found(
        tmp_path, 'register_rocm_ci(1, "s", runner=4)', **{"gpus-from": {"key": "runner"}}
    )
    assert test.gpus == 4


def test_without_gpus_from_num_gpus_then_gpus_give_the_count(tmp_path: Path) -> None:
    assert found(tmp_path, 'register_rocm_ci(1, "s", gpus=3)')[0].gpus == 3
    assert found(tmp_path, 'register_rocm_ci(1, "s", num_gpus=2, gpus=3)')[0].gpus == 2
    assert found(tmp_path, 'register_rocm_ci(1, "s")')[0].gpus is None


def test_a_pattern_group_that_is_not_a_number_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        found(tmp_path, 'register_rocm_ci(1, "s-x-gpu")',
              **{"gpus-from": {"key": "suite", "pattern": r"-(\w)-gpu"}})  # fmt: skip
    assert "t/test_a.py:1" in caught.value.what and "register_rocm_ci" in caught.value.what


def test_a_pattern_that_does_not_match_is_an_error_with_a_remedy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        found(tmp_path, 'register_rocm_ci(1, "cpu")',
              **{"gpus-from": {"key": "suite", "pattern": r"-(\d+)-gpu"}})  # fmt: skip
    assert "t/test_a.py:1" in caught.value.what and caught.value.hint


@pytest.mark.parametrize(("count", "ok"), [(0, True), (MAX_GPUS, True), (MAX_GPUS + 1, False),
                                           (-1, False), ("True", False), ('"2"', False)])  # fmt: skip
def test_gpu_counts_from_0_to_the_maximum(tmp_path: Path, count: object, ok: bool) -> None:
    call = f'register_rocm_ci(1, "s", num_gpus={count})'
    if ok:
        assert found(tmp_path, call)[0].gpus == count
    else:
        with pytest.raises(ConfigError) as caught:
            found(tmp_path, call)
        assert "t/test_a.py:1: register_rocm_ci(num_gpus=" in caught.value.what


@pytest.mark.parametrize(("est", "ok"), [("0.5", True), ("1", True), ("999999999", True),
                                         ("0", False), ("1e9", False), ("True", False),
                                         ('"5"', False)])  # fmt: skip
def test_est_time_must_be_a_positive_number_below_a_billion(
    tmp_path: Path, est: str, ok: bool
) -> None:
    call = f'register_rocm_ci({est}, "s")'
    if ok:
        assert found(tmp_path, call)[0].est_time == float(est)
    else:
        with pytest.raises(ConfigError) as caught:
            found(tmp_path, call)
        assert "t/test_a.py:1: register_rocm_ci(est_time=" in caught.value.what


def test_what_a_registration_leaves_out_takes_its_default(tmp_path: Path) -> None:
    (test,) = found(tmp_path, 'register_rocm_ci(suite="s")')
    assert (test.est_time, test.labels, test.nightly, test.disabled) == (None, (), False, None)
    assert test.where == "t/test_a.py:1" and test.path == "t/test_a.py"


@pytest.mark.parametrize(("keyword", "bad"), [("nightly", '"yes"'), ("labels", '"moe"'),
                                              ("labels", "[1]"), ("disabled", "3")])  # fmt: skip
def test_a_bad_keyword_is_an_error_naming_the_line_and_the_call(
    tmp_path: Path, keyword: str, bad: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        found(tmp_path, f'register_rocm_ci(1, "s", {keyword}={bad})')
    assert caught.value.what.startswith(f"t/test_a.py:1: register_rocm_ci({keyword}=")


def test_nightly_true_or_false_is_read(tmp_path: Path) -> None:
    assert found(tmp_path, 'register_rocm_ci(1, "s", nightly=True)')[0].nightly is True
    assert found(tmp_path, 'register_rocm_ci(1, "s", nightly=False)')[0].nightly is False


def test_a_file_registering_twice_for_the_suite_is_an_error_with_a_remedy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        found(tmp_path, 'register_rocm_ci(1, "s")\nregister_rocm_ci(2, "s")', suite="s")
    assert "t/test_a.py" in caught.value.what and caught.value.hint
