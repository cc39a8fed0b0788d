"""``disabled=`` in a registration (rocmenv.suite.registered.disabled_reason), value by value
(issue 34): only ``None`` and ``False`` enable a test. An empty or blank reason still disables
it; a number is not a reason nor a bool (``disabled=0`` is an error naming the line, never a
silently enabled test) — judged through the whole path: discovery, the suite, the selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmenv.errors import ConfigError
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.model import parse_suite
from rocmenv.suite.registered import disabled_reason
from rocmenv.suite.select import Selection, select

SIG = "est_time, suite, *, labels=None, nightly=False, disabled=None"


def _chosen(tmp_path: Path, disabled: str) -> tuple[int, int, set[str | None]]:
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "test_a.py").write_text(
        f'register_rocm_ci(5, "s-1-gpu-x"{", disabled=" + disabled if disabled else ""})\n'
    )
    table = {"glob": "t/*.py", "call": "register_rocm_ci", "signature": SIG,
             "select": {"suite": "s-1-gpu-x"}}  # fmt: skip
    suite = parse_suite("s", {"discover": table}, root=tmp_path, where="rocmenv.toml",
                        slurm=SlurmSettings())  # fmt: skip
    chosen = select(suite, Selection())
    return len(chosen.run), len(chosen.disabled), {t.disabled for t in chosen.disabled}


@pytest.mark.parametrize(
    ("written", "reason"),
    [('""', "disabled"), ('"   "', "disabled"), ("True", "disabled"),
     ('"flaky on MI355"', "flaky on MI355"), ('"  padded  "', "padded")],
)  # fmt: skip
def test_a_registration_with_any_reason_or_true_is_disabled(
    tmp_path: Path, written: str, reason: str
) -> None:
    assert _chosen(tmp_path, written) == (0, 1, {reason})


@pytest.mark.parametrize("written", ["", "None", "False"])
def test_only_none_or_false_leave_a_registration_enabled(tmp_path: Path, written: str) -> None:
    assert _chosen(tmp_path, written) == (1, 0, set())


@pytest.mark.parametrize("written", ["0", "1", "0.0", "[]", '["x"]'])
def test_a_number_or_list_is_an_error_never_an_enabled_test(tmp_path: Path, written: str) -> None:
    with pytest.raises(ConfigError):
        _chosen(tmp_path, written)


@pytest.mark.parametrize(
    ("value", "reason"),
    [(None, None), (False, None), (True, "disabled"), ("", "disabled"), (" \t", "disabled"),
     ("why", "why"), (" why ", "why")],
)  # fmt: skip
def test_disabled_reason_value_by_value(value: object, reason: str | None) -> None:
    assert disabled_reason(value, "t/a.py:1") == reason


@pytest.mark.parametrize("value", [0, 1, 0.0, [], {}, b""])
def test_disabled_reason_refuses_what_is_neither_a_reason_nor_a_bool(value: object) -> None:
    with pytest.raises(ConfigError):
        disabled_reason(value, "t/a.py:1")
