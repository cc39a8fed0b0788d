"""Label scopes as a project states them ([labels]), checked against miles' own selection:
the policy `rocmenv init` writes for a miles tree selects, for every PR label set and cadence,
exactly the tests miles' runner selects (conventions rule 17)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmenv.adopt.clients import MILES_LABELS
from rocmenv.errors import ConfigError
from rocmenv.suite.labels import EVERY, LabelSet, asked, parse_label_policy
from rocmenv.suite.model import Suite, SuiteTest
from rocmenv.suite.select import Selection, empty_reason, nothing_selected, select

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MILES = parse_label_policy(tomllib.loads(MILES_LABELS)["labels"], "rocmenv.toml")

# miles' label registry (tests/ci/labels.py): a test may carry only these
KNOWN = ("megatron", "sglang", "fsdp", "short", "long", "ckpt", "lora", "ft-short", "ft-long",
         "amd", "precision")  # fmt: skip


def miles_selects(labels: set[str], cadence: str, tests: list[SuiteTest]) -> list[str]:
    """miles' selection, modelled from its public ci_policy.py / run_suite.py: run iff
    cadence-eligible and unlabelled or sharing a label with the include set."""
    requested = {n[len("run-ci-") :] for n in labels if n.startswith("run-ci-")} & set(KNOWN)
    if "run-ci-all" in labels or cadence == "weekly":
        scope = set(KNOWN)
    elif cadence == "nightly":
        scope = set(KNOWN) - {"long", "ft-long"}
    elif "run-ci-image" in labels:
        scope = set(KNOWN) - {"long", "ft-short", "ft-long"}
    else:
        scope = set()
    include = scope | requested
    admit_nightly = cadence in ("nightly", "weekly")
    return [
        t.name for t in tests
        if (not t.nightly or admit_nightly) and (not t.labels or set(t.labels) & include)
    ]  # fmt: skip


def _t(name: str, labels: tuple[str, ...] = (), nightly: bool = False) -> SuiteTest:
    return SuiteTest(name=name, path=name, gpus=1, est_time=1, command=(), labels=labels,
                     nightly=nightly)  # fmt: skip


RAW = st.sampled_from(
    [f"run-ci-{k}" for k in KNOWN]
    + ["run-ci-all", "run-ci-image", "bypass-fastfail", "documentation", "run-ci-nope", "amd"]
)
TESTS = st.lists(
    st.tuples(st.lists(st.sampled_from(KNOWN), max_size=3, unique=True), st.booleans()),
    min_size=1, max_size=8,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(raw=st.lists(RAW, max_size=5), cadence=st.sampled_from(["regular", "nightly", "weekly"]),
       specs=TESTS)  # fmt: skip
def test_the_miles_policy_selects_what_miles_selects(
    raw: list[str], cadence: str, specs: list[tuple[list[str], bool]]
) -> None:
    tests = [_t(f"t{i}.py", tuple(labels), nightly) for i, (labels, nightly) in enumerate(specs)]
    suite = Suite(name="stage-c-4-gpu-mi350", profile=None, tests=tuple(tests), label_policy=MILES)
    chosen = select(suite, Selection(cadence=cadence, labels=tuple(raw)))  # type: ignore[arg-type]
    assert [t.name for t in chosen.run] == miles_selects(set(raw), cadence, tests)


def test_a_plain_pr_runs_only_unlabelled_tests_and_run_ci_amd_runs_the_amd_ones() -> None:
    tests = (_t("amd.py", ("amd",)), _t("plain.py"), _t("long.py", ("long",)),
             _t("night.py", ("amd",), nightly=True))  # fmt: skip
    suite = Suite(name="s", profile=None, tests=tests, label_policy=MILES)

    def run(**kw: object) -> list[str]:
        return [t.name for t in select(suite, Selection(**kw)).run]  # type: ignore[arg-type]

    assert run() == ["plain.py"]  # no --labels at all: a PR without labels
    assert run(labels=()) == ["plain.py"]
    assert run(labels=("run-ci-amd",)) == ["amd.py", "plain.py"]
    assert run(cadence="nightly") == ["amd.py", "plain.py", "night.py"]  # long stays out
    assert run(cadence="weekly") == ["amd.py", "plain.py", "long.py", "night.py"]
    assert run(labels=("run-ci-long",), cadence="nightly") == [t.name for t in tests]
    assert run(all_labels=True) == ["amd.py", "plain.py", "long.py"]


def test_what_a_selection_cannot_use_is_named() -> None:
    suite = Suite(name="s", profile=None, tests=(_t("amd.py", ("amd",)),), label_policy=MILES)
    chosen = select(suite, Selection(labels=("documentation", "nightly", "run-ci-megatron")))
    assert len(chosen.notices) == 2  # "nightly" is the workflow's own: no notice
    assert "'documentation'" in chosen.notices[0] and "'megatron'" in chosen.notices[1]
    assert chosen.run == ()
    why = nothing_selected(suite, chosen)
    assert why.startswith("no tests selected: suite 's'") and "amd" in why
    # without a [labels] table, labels are plain names and nothing is reported
    plain = replace(suite, label_policy=parse_label_policy(None, "x"))
    assert select(plain, Selection(labels=("run-ci-megatron",))).notices == ()


def test_empty_reasons_name_labels_cadence_and_disabled() -> None:
    tests = (_t("amd.py", ("amd",)), _t("night.py", nightly=True),
             replace(_t("off.py"), disabled="FIXME"))  # fmt: skip
    suite = Suite(name="s", profile=None, tests=tests, label_policy=MILES)
    reason = empty_reason(suite, select(suite, Selection()))
    assert "1 test(s)" in reason and "nightly only" in reason and "disabled" in reason
    assert "no tests" in empty_reason(replace(suite, tests=()), select(suite, Selection()))
    partitioned = nothing_selected(suite, select(suite, Selection(cadence="weekly")), (1, 2))
    assert "partition 1/2" in partitioned and "other partitions" in partitioned


def test_include_sets_combine_as_unions() -> None:
    a = LabelSet(every=True, names=frozenset({"long", "ft-long"}))
    b = LabelSet(every=True, names=frozenset({"long", "ft-short", "ft-long"}))
    assert a.union(b) == a and a.union(LabelSet(names=frozenset({"long"}))) == LabelSet(
        every=True, names=frozenset({"ft-long"})
    )
    assert LabelSet(names=frozenset({"x"})).union(EVERY) == EVERY
    got = asked(MILES, "regular", ("run-ci-image", "run-ci-long"))
    assert got.include is not None and got.include.admits("long")
    assert not got.include.admits("ft-long") and got.scopes == ("image",)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"prefx": "run-ci-"}, "unknown key 'prefx'"),
        ({"cadence": {"hourly": "all"}}, "unknown key 'hourly'"),
        ({"cadence": {"nightly": "most"}}, "must be an include set"),
        ({"scopes": {"image": {"all_but": ["long"]}}}, "must be an include set"),
        ({"ignore": "nightly"}, "must be a list of strings"),
        ({"scopes": {"all": ["a\nb"]}}, "is not a label"),
    ],
)
def test_a_bad_labels_table_is_a_config_error(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_label_policy(table, "rocmenv.toml")
