"""Selection like the reference runner's: cadence, labels opt-in, disabled last."""

from __future__ import annotations

import pytest

from rocmenv.errors import UsageError
from rocmenv.suite.model import Suite, SuiteTest
from rocmenv.suite.select import select, selection_of


def _t(
    name: str, *, labels: tuple[str, ...] = (), nightly: bool = False, off: str | None = None
) -> SuiteTest:
    return SuiteTest(name=name, path=name, gpus=1, est_time=1, command=(), labels=labels,
                     nightly=nightly, disabled=off)  # fmt: skip


SUITE = Suite(
    name="s", profile=None,
    tests=(_t("plain"), _t("moe", labels=("moe",)), _t("both", labels=("moe", "lora")),
           _t("night", nightly=True), _t("off", off="FIXME"), _t("off-moe", labels=("moe",), off="x")),
)  # fmt: skip


def _names(cadence: str | None = None, labels: str | None = None, all_labels: bool = False,
           suite: Suite = SUITE) -> tuple[list[str], list[str]]:  # fmt: skip
    chosen = select(suite, selection_of(cadence, labels, all_labels))
    return [t.name for t in chosen.run], [t.name for t in chosen.disabled]


def test_without_flags_every_test_runs_but_nightly_and_disabled() -> None:
    assert _names() == (["plain", "moe", "both"], ["off", "off-moe"])


def test_nightly_tests_run_only_in_the_nightly_and_weekly_cadences() -> None:
    assert "night" in _names("nightly")[0] and "night" in _names("weekly")[0]
    chosen = select(SUITE, selection_of("regular", None))
    assert [(t.name, why) for t, why in chosen.deselected] == [
        ("night", "nightly only (run with --cadence nightly or weekly)")
    ]


def test_labels_keep_unlabelled_tests_and_any_intersection() -> None:
    assert _names(labels="lora") == (["plain", "both"], ["off"])
    assert _names(labels="") == (["plain"], ["off"])
    assert _names(labels=" moe , x,") == (["plain", "moe", "both"], ["off", "off-moe"])


def test_the_suites_include_labels_is_the_default_and_all_labels_overrides_it() -> None:
    from dataclasses import replace

    opt_in = replace(SUITE, include_labels=())
    assert _names(suite=opt_in) == (["plain"], ["off"])
    assert _names(all_labels=True, suite=opt_in) == (["plain", "moe", "both"], ["off", "off-moe"])
    assert _names(labels="moe", suite=opt_in)[0] == ["plain", "moe", "both"]


def test_bad_selection_flags_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="not both"):
        selection_of(None, "a", True)
    with pytest.raises(UsageError, match="--cadence 'hourly'"):
        selection_of("hourly", None)
    with pytest.raises(UsageError, match="is not a label"):
        selection_of(None, "a\x00b")


def test_suite_list_json_shows_disabled_reasons_and_why_tests_were_left_out(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    from pathlib import Path

    from rocmenv.cli import main

    root = Path(str(tmp_path))
    (root / ".git").mkdir()
    (root / "rocmenv.toml").write_text(
        '[suites.s]\nprofile = "cpu"\ngpus = 0\ninclude-labels = []\ntests = [\n'
        '  { path = "a.py" }, { path = "m.py", labels = ["moe"] },\n'
        '  { path = "n.py", nightly = true }, { path = "off.py", disabled = "FIXME: MI350" },\n]\n'
    )
    monkeypatch.chdir(root)
    assert main(["suite", "list", "s", "--json"]) == 0
    (suite,) = json.loads(capsys.readouterr().out)["suites"]
    assert [(t["name"], t["disabled"]) for t in suite["tests"]] == [
        ("a.py", None), ("off.py", "FIXME: MI350"),
    ]  # fmt: skip
    assert {d["name"] for d in suite["deselected"]} == {"m.py", "n.py"}
    assert (
        main(["suite", "list", "s", "--json", "--labels", "run-moe,moe", "--cadence", "weekly"])
        == 0
    )
    (suite,) = json.loads(capsys.readouterr().out)["suites"]
    assert [t["name"] for t in suite["tests"]] == ["a.py", "m.py", "n.py", "off.py"]
