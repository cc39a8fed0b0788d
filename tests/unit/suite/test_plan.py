"""Static partitions, learned estimates and the history file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocmenv.cli import main
from rocmenv.errors import ConfigError, UsageError
from rocmenv.suite.history import History, history_path, read_history, record
from rocmenv.suite.model import Suite, SuiteTest
from rocmenv.suite.plan import (
    MAX_PARTITIONS,
    estimates,
    gha_matrix,
    parse_partition,
    partitions,
    partitions_for_time,
    plan_json,
    reference_partitions,
)


def _suite(times: dict[str, float], gpus: int = 4) -> Suite:
    tests = tuple(
        SuiteTest(name=n, path=n, gpus=gpus, est_time=t, command=("python", n))
        for n, t in times.items()
    )
    return Suite(name="s", profile=None, tests=tests)


REFERENCE: dict[str, float] = {  # the shape of the reference CI's 4-GPU stage: ~9,300 s in 8 tests
    "a.py": 1600, "b.py": 1500, "c.py": 1400, "d.py": 1300,
    "e.py": 1100, "f.py": 1000, "g.py": 800, "h.py": 600,
}  # fmt: skip


def test_partitions_are_balanced_longest_first_onto_the_lightest() -> None:
    tests = estimates(_suite(REFERENCE), History(path=Path("h")), "rocm")
    parts = partitions(tests, 2)
    assert [[t.name for t in p.tests] for p in parts] == [
        ["a.py", "d.py", "e.py", "h.py"],
        ["b.py", "c.py", "f.py", "g.py"],
    ]
    assert [p.seconds for p in parts] == [4600, 4700]


def test_partitions_do_not_depend_on_declaration_order() -> None:
    forward = partitions(estimates(_suite(REFERENCE), History(path=Path("h")), "p"), 3)
    backward = dict(reversed(list(REFERENCE.items())))
    again = partitions(estimates(_suite(backward), History(path=Path("h")), "p"), 3)
    assert [[t.name for t in p.tests] for p in forward] == [
        [t.name for t in p.tests] for p in again
    ]


def test_equal_estimates_split_by_name_deterministically() -> None:
    same = {f"t{i}.py": 100.0 for i in range(5)}
    parts = partitions(estimates(_suite(same), History(path=Path("h")), "p"), 2)
    assert [[t.name for t in p.tests] for p in parts] == [
        ["t0.py", "t2.py", "t4.py"],
        ["t1.py", "t3.py"],
    ]


def test_partition_argument_is_zero_based() -> None:
    assert parse_partition("1/2") == (1, 2)
    for bad in ("2/2", "0/0", "a/2", "1"):
        with pytest.raises(UsageError):
            parse_partition(bad)


def test_learned_estimates_change_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.suite-history.json"
    before = partitions(estimates(_suite(REFERENCE), read_history(path), "rocm"), 2)
    # h.py, declared 600 s, really takes ~3000 s
    record(path, "rocm", [("h.py", 3000.0), ("h.py", 3100.0)], within=path.parent)
    learned = estimates(_suite(REFERENCE), read_history(path), "rocm")
    h = next(t for t in learned if t.name == "h.py")
    assert h.estimate.source == "learned" and h.estimate.runs == 2
    assert h.seconds == pytest.approx((600 + 3000 + 3100) / 3)
    assert learned[0].name == "h.py"  # now the longest: scheduled first
    after = partitions(learned, 2)
    assert [[t.name for t in p.tests] for p in after] != [[t.name for t in p.tests] for p in before]
    # another profile has not learned anything
    other = estimates(_suite(REFERENCE), read_history(path), "cpu")
    assert next(t for t in other if t.name == "h.py").estimate.source == "declared"


def test_history_is_versioned_sorted_and_keeps_the_last_ten(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.suite-history.json"
    for i in range(12):
        record(path, "rocm", [("b.py", float(i)), ("a.py", 1.0)], within=tmp_path)
    doc = json.loads(path.read_text())
    assert doc["history_version"] == 1
    assert list(doc["tests"]) == ["rocm::a.py", "rocm::b.py"]
    assert doc["tests"]["rocm::b.py"]["times"] == [float(i) for i in range(2, 12)]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_history_from_the_future_or_corrupt_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text('{"history_version": 9, "tests": {}}')
    with pytest.raises(ConfigError, match="newer than this rocmenv"):
        read_history(path)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="delete the file"):
        read_history(path)


def test_concurrent_recorders_both_land(tmp_path: Path) -> None:
    path = tmp_path / "rocmenv.suite-history.json"
    code = (
        "import sys; from pathlib import Path; from rocmenv.suite.history import record\n"
        "for i in range(20): record(Path(sys.argv[1]), 'p', [(sys.argv[2], float(i))], within=None)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), name]) for name in ("x", "y")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert set(json.loads(path.read_text())["tests"]) == {"p::x", "p::y"}


def test_history_lives_next_to_the_lock(tmp_path: Path) -> None:
    assert history_path(tmp_path / "rocmenv.lock") == tmp_path / "rocmenv.suite-history.json"


def test_suite_plan_cli_shows_declared_and_learned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        textwrap.dedent(
            """
            [suites.s]
            tests = [{ path = "a.py", est-time = 100 }, { path = "b.py", est-time = 50 },
                     { path = "c.py", est-time = 40 }]
            """
        )
    )
    record(tmp_path / "rocmenv.suite-history.json", "rocm", [("c.py", 400.0)], within=tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["suite", "plan", "s", "--partitions", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["partitions"][0]["tests"][0]
    assert first == {
        "name": "c.py", "gpus": 1, "estimate": 220.0, "declared": 40.0, "source": "learned",
        "runs": 1,
    }  # fmt: skip
    assert [t["name"] for t in doc["partitions"][1]["tests"]] == ["a.py", "b.py"]
    assert main(["suite", "plan", "s", "--partitions", "2"]) == 0
    assert "declared 40s, 1 runs" in capsys.readouterr().out
    assert main(["suite", "plan", "s", "--partitions", "2", "--declared", "--json"]) == 0
    declared = json.loads(capsys.readouterr().out)["partitions"]
    assert [t["name"] for t in declared[0]["tests"]] == ["a.py"]
    assert {t["source"] for p in declared for t in p["tests"]} == {"declared"}
    assert os.path.exists(tmp_path / "rocmenv.suite-history.json")


# -- sizing and rendering a plan (issue 21) ---------------------------------------------------


def _planned(times: dict[str, float]) -> list:  # type: ignore[type-arg]
    return estimates(_suite(times), History(path=Path("h")), "rocm")


def test_the_reference_split_is_what_the_balanced_one_is_measured_against() -> None:
    ref = reference_partitions(_planned(REFERENCE), 3)
    assert [[t.name for t in p.tests] for p in ref] == [
        ["a.py", "f.py", "g.py"], ["b.py", "e.py", "h.py"], ["c.py", "d.py"]
    ]  # fmt: skip
    assert [p.seconds for p in ref] == [3400, 3200, 2700]
    assert [p.seconds for p in partitions(_planned(REFERENCE), 3)] == [3100, 3100, 3100]
    assert [p.gpu_seconds for p in ref] == [13600, 12800, 10800]


@pytest.mark.parametrize(
    ("seconds", "count"),
    [(10_000, 1), (9300, 1), (9299.99, 2), (4700, 2), (4699, 3), (3100, 3), (100, 7)],
)
def test_max_partition_time_gives_the_fewest_partitions_that_fit(
    seconds: float, count: int
) -> None:
    """7, not 8, for 100 s: the longest test (1600 s) sets the bar when it is above it."""
    assert partitions_for_time(_planned(REFERENCE), seconds) == count


def test_max_partition_time_of_no_tests_is_one_partition() -> None:
    assert partitions_for_time([], 60) == 1


@pytest.mark.parametrize("seconds", [0, -5, float("nan")])
def test_max_partition_time_must_be_positive(seconds: float) -> None:
    with pytest.raises(UsageError) as info:
        partitions_for_time(_planned(REFERENCE), seconds)
    assert info.value.what == (
        f"--max-partition-time {seconds}: must be a positive number of seconds"
    )


@pytest.mark.parametrize("count", [0, MAX_PARTITIONS + 1])
def test_a_partition_count_outside_1_to_1000_is_refused(count: int) -> None:
    for split in (partitions, reference_partitions):
        with pytest.raises(UsageError) as info:
            split(_planned(REFERENCE), count)
        assert info.value.what == f"--partitions {count}: must be from 1 to 1000"


def test_a_thousand_partitions_are_allowed() -> None:
    parts = partitions(_planned(REFERENCE), MAX_PARTITIONS)
    assert len(parts) == 1000 and sum(len(p.tests) for p in parts) == 8
    assert [p.index for p in parts[:3]] == [0, 1, 2]


def test_the_matrix_has_one_job_per_partition() -> None:
    parts = partitions(_planned({"a.py": 100.6, "b.py": 50.2, "c.py": 50.1}), 2)
    assert gha_matrix(parts) == {
        "include": [
            {"partition": "0/2", "index": 0, "count": 2, "tests": 1, "estimated_seconds": 101},
            {"partition": "1/2", "index": 1, "count": 2, "tests": 2, "estimated_seconds": 100},
        ]
    }


def test_the_plan_as_json_rounds_to_milliseconds() -> None:
    (part,) = plan_json(partitions(_planned({"a.py": 100.12345, "b.py": 0.0004}), 1))
    assert part == {
        "index": 0,
        "estimated_seconds": 100.124,
        "tests": [
            {"name": "a.py", "gpus": 4, "estimate": 100.123, "declared": 100.123,
             "source": "declared", "runs": 0},
            {"name": "b.py", "gpus": 4, "estimate": 0.0, "declared": 0.0, "source": "declared",
             "runs": 0},
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("0/1", (0, 1)), (" 1/2 ", (1, 2)), ("999/1000", (999, 1000)),
     ("0/" + "0" * 36 + "2", (0, 2))],
)  # fmt: skip
def test_a_partition_argument_is_i_of_n(text: str, parsed: tuple[int, int]) -> None:
    assert parse_partition(text) == parsed


@pytest.mark.parametrize("text", ["0/1001", "1/1", "0/" + "0" * 37 + "2", "-1/2", "1/2/3", ""])
def test_a_bad_partition_argument_says_what_it_must_be(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_partition(text)
    assert info.value.what == f"--partition {text!r} is not I/N with 0 <= I < N"
    assert info.value.hint == "e.g. --partition 0/2 and --partition 1/2 for a two-job matrix"


def test_equal_estimates_put_the_test_with_more_gpus_first() -> None:
    from rocmenv.suite.balance import longest_first

    suite = Suite(name="s", profile=None, tests=(
        SuiteTest(name="a.py", path="a.py", gpus=1, est_time=60, command=("a",)),
        SuiteTest(name="b.py", path="b.py", gpus=8, est_time=60, command=("b",)),
        SuiteTest(name="c.py", path="c.py", gpus=2, est_time=90, command=("c",)),
    ))  # fmt: skip
    planned = estimates(suite, History(path=Path("h")), "rocm")
    assert [t.name for t in planned] == ["c.py", "b.py", "a.py"]
    assert [t.name for t in longest_first(planned[::-1], lambda t: t.seconds)] == [
        "c.py", "b.py", "a.py"
    ]  # fmt: skip
    only = estimates(suite, History(path=Path("h")), "rocm", tests=suite.tests[:1])
    assert [t.name for t in only] == ["a.py"]


def test_partitions_are_numbered_from_zero() -> None:
    for split in (partitions, reference_partitions):
        assert [p.index for p in split(_planned(REFERENCE), 3)] == [0, 1, 2]


def test_a_partition_time_under_a_second_is_allowed() -> None:
    assert partitions_for_time(_planned({"a.py": 0.5, "b.py": 0.5}), 0.5) == 2
