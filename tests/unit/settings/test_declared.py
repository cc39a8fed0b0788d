"""One declaration per setting (issue 33): every key of every schema carries a description and
a default, the readers' defaults and variables are the declared ones, every ``ROCMENV_*``
variable the code reads is declared, and docs/settings.md is what ``rocmenv config docs``
prints."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rocmenv.cli import main
from rocmenv.cli.config import SCHEMA_FILES, schema_for
from rocmenv.context import Context
from rocmenv.settings.declared import INHERITED, SETTINGS, VARIABLES
from rocmenv.suite.schema import (
    CADENCE_SETTINGS,
    DISCOVER_SETTINGS,
    LABELS_SETTINGS,
    SUITE_SETTINGS,
    TEST_SETTINGS,
)

ROOT = Path(__file__).resolve().parents[3]
ALL = (*SETTINGS, *SUITE_SETTINGS, *TEST_SETTINGS, *DISCOVER_SETTINGS, *LABELS_SETTINGS,
       *CADENCE_SETTINGS)  # fmt: skip


def _keys(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of every table in ``schema``, with its path."""
    if isinstance(schema, dict):
        for name, sub in schema.get("properties", {}).items():
            yield f"{path}.{name}".lstrip("."), sub
            yield from _keys(sub, f"{path}.{name}")
        for word in ("additionalProperties", "items"):
            if isinstance(schema.get(word), dict):
                yield from _keys(schema[word], f"{path}.*")
        for sub in schema.get("anyOf", []):
            yield from _keys(sub, path)


@pytest.mark.parametrize("kind", SCHEMA_FILES)
def test_every_key_of_the_schema_has_a_description_and_a_default(kind: str) -> None:
    schema = schema_for(kind)
    jsonschema.validators.validator_for(schema).check_schema(schema)
    keys = list(_keys(schema))
    assert len(keys) > (40 if kind != "policy" else 7)
    missing = [p for p, sub in keys if not sub.get("description") or "default" not in sub]
    assert missing == []


def test_every_default_in_the_schema_is_a_valid_value() -> None:
    """A default an editor offers is one rocmenv accepts (null: not set)."""
    schema = schema_for("project")
    for path, sub in _keys(schema):
        if sub["default"] is None:
            continue
        value_schema = {k: v for k, v in sub.items() if k not in ("description", "default")}
        errors = list(jsonschema.Draft202012Validator(value_schema).iter_errors(sub["default"]))
        assert errors == [], path


def test_every_setting_is_declared_once() -> None:
    names = [(s.table, s.key) for s in ALL]
    assert len(names) == len(set(names))
    assert all(s.help and "``" not in s.help for s in ALL)
    variables = [v.name for v in VARIABLES]
    assert len(variables) == len(set(variables))
    assert not set(variables) & {s.env for s in SETTINGS}  # a key's variable is its Setting's


def _read_variables() -> dict[str, list[str]]:
    """Every ROCMENV_* name in rocmenv's code (the host side and the in-container launcher),
    and where."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "rocmenv").rglob("*.py")):
        for name in re.findall(r"\bROCMENV_[A-Z][A-Z0-9_]*\b", path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_rocmenv_variable_the_code_reads_is_declared() -> None:
    declared = {v.name for v in VARIABLES} | {s.env for s in SETTINGS if s.env}
    read = _read_variables()
    assert {name: where for name, where in read.items() if name not in declared} == {}
    assert declared - set(read) == set()  # and nothing is declared that nothing reads
    assert all(v.internal.strip() for v in VARIABLES if v.internal is not None)


# a valid value for each variable that overrides a key, and the value config show reports
SAMPLES: dict[str, tuple[str, Any]] = {
    "ROCMENV_PROFILE": ("cpu", "cpu"),
    "ROCMENV_ENGINE": ("podman", "podman"),
    "ROCMENV_LOCKFILE": ("other.lock", None),  # a path under the working directory
    "ROCMENV_UNTRUSTED": ("1", True),
    "ROCMENV_MIRRORS": ("docker.io=127.0.0.1:5000", {"docker.io": ["127.0.0.1:5000"]}),
    "ROCMENV_INSECURE_REGISTRIES": ("h.local:5000", ["h.local:5000"]),
    "ROCMENV_REGISTRY_TIMEOUT": ("7", 7.0),
    "ROCMENV_REGISTRY_RETRIES": ("2", 2),
    "ROCMENV_REGISTRY_DEADLINE": ("9", 9.0),
    "ROCMENV_PULL_FROM_MIRROR": ("1", True),
    "ROCMENV_SYSFS_ROOT": ("/x/sys", "/x/sys"),
    "ROCMENV_DEV_ROOT": ("/x/dev", "/x/dev"),
    "ROCMENV_GPUS_FROM": ("/x/gpus.txt", "/x/gpus.txt"),
    "ROCMENV_PODINFO_DEVICES": ("/x/podinfo", "/x/podinfo"),
    "ROCMENV_IMAGE_CACHE": ("/x/cache", "/x/cache"),
    "ROCMENV_IMAGE_CACHE_MAX": ("2g", 2 * 1024**3),
    "ROCMENV_SOURCE_FLOOR": ("2m", 2 * 1024**2),
    "ROCMENV_SOURCE_WINDOW": ("30", 30.0),
}


def _show(tmp_path: Path, **env: str) -> dict[str, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(env={"HOME": str(tmp_path), "ROCMENV_SITE_CONFIG": "", **env}, cwd=tmp_path,
                  stdout=out, stderr=err)  # fmt: skip
    assert main(["config", "show", "--json"], ctx=ctx) == 0, err.getvalue()
    return {row["key"]: row for row in json.loads(out.getvalue())["settings"]}


def _shown_name(setting: Any) -> str:
    return str({"default-profile": "profile"}.get(setting.key, setting.name))


def test_without_files_every_setting_is_its_declared_default(tmp_path: Path) -> None:
    """What the readers fall back on is the declaration (config show reads the very Settings
    a command runs with)."""
    (tmp_path / ".git").mkdir()
    shown = _show(tmp_path)
    checked = 0
    for s in SETTINGS:
        if s.table not in ("top", "registry", "host", "slurm", "policy") or s.key not in (
            k.rpartition(".")[2] for k in shown
        ):
            continue
        row = shown.get(_shown_name(s))
        if row is None:
            continue
        expected = s.default
        if s.key == "lockfile":
            expected = str(tmp_path / s.default)
        assert (row["value"], row["origin"]) == (expected, "default"), s.name
        checked += 1
    assert checked >= 30


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.env and s.table != "site"],
                         ids=lambda s: s.env)  # fmt: skip
def test_each_declared_variable_sets_its_key(setting: Any, tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    assert setting.env in SAMPLES, f"add a sample value for {setting.env}"
    text, value = SAMPLES[setting.env]
    name = _shown_name(setting) if setting.table != "profile" else setting.key
    row = _show(tmp_path, **{setting.env: text})[name]
    assert row["origin"] == "env", row
    assert row["value"] == (value if value is not None else str(tmp_path / text))
    assert setting.default != INHERITED or setting.key == "untrusted"


def test_docs_settings_md_is_what_config_docs_prints(tmp_path: Path) -> None:
    out = io.StringIO()
    ctx = Context(env={"HOME": str(tmp_path)}, cwd=tmp_path, stdout=out, stderr=io.StringIO())
    assert main(["config", "docs"], ctx=ctx) == 0
    committed = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert committed == out.getvalue(), "stale: run `rocmenv config docs > docs/settings.md`"
    for s in ALL:
        assert f"{s.key}`" in committed, s.name
    for v in VARIABLES:
        assert f"`{v.name}`" in committed
