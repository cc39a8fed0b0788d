"""The JSON Schema of rocmenv's configuration files, generated from the one declaration of
every setting (:mod:`rocmenv.settings.declared`: the readers take their key tables from it
too): each key with its value's schema, a ``description`` and a ``default`` (editors such as
taplo and Even Better TOML show them), and ``additionalProperties: false`` on every table
rocmenv checks, so an unknown key fails the schema exactly where it fails rocmenv.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from rocmenv.settings.declared import (
    INHERITED,
    MOUNT_SETTINGS,
    Schema,
    Setting,
    settings_of,
)
from rocmenv.settings.profile_set import PROFILE_NAME_RE
from rocmenv.settings.profiles import BUILTIN_PROFILES, Profile

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


def described(setting: Setting, schema: Schema | None = None) -> Schema:
    """The value's schema with the setting's help (and its variable and flag) as the
    ``description`` and its default as the ``default``."""
    out = dict(setting.schema if schema is None else schema)
    over = [
        f"variable {setting.env}" if setting.env else "",
        f"flag {setting.flag}" if setting.flag else "",
    ]
    over = [o for o in over if o]
    out["description"] = setting.help + (f" (over the files: {', '.join(over)})" if over else "")
    out["default"] = inherited(setting.key) if setting.default == INHERITED else setting.default
    return out


def table(
    settings: Iterable[Setting], nested: dict[str, Schema] | None = None, **extra: Any
) -> Schema:
    """A table of exactly ``settings`` (every one optional unless ``required`` says);
    ``nested``: the schema of a key whose value is a table declared elsewhere."""
    nested = nested or {}
    return {
        "type": "object",
        "properties": {s.key: described(s, nested.get(s.key)) for s in settings},
        "additionalProperties": False,
        **extra,
    }


def tables_of(item: Schema, names: str | None = None) -> Schema:
    """``[NAME.*]``: a table of tables, names matching ``names`` (a regex)."""
    out: Schema = {"type": "object", "additionalProperties": item}
    if names:
        out["propertyNames"] = {"pattern": f"^{names}$"}
    return out


MOUNT: Final[Schema] = {
    "anyOf": [
        {"type": "string", "pattern": r"^[^:]+:/[^:]*(:(ro|rw))?$"},
        table(MOUNT_SETTINGS, required=["source", "target"]),
    ]
}


def section(name: str) -> Schema:
    """The table ``[name]`` (``registry``, ``host``, ``slurm``, ``policy``, ``images``)."""
    nested = {"limits": table(settings_of("registry.limits"))} if name == "registry" else None
    return table(settings_of(name), nested)


def inherited(key: str) -> Any:
    """A profile key's default: the built-in ``rocm`` profile's value, as TOML writes it."""
    rocm: Profile = BUILTIN_PROFILES["rocm"]
    image_keys = ("image", "tag", "sglang", "rocm", "gpu", "family", "before")
    if key in image_keys or key == "extends":
        return None
    value = getattr(rocm, key.replace("-", "_"))
    if key == "ulimits":
        return {u.name: u.soft if u.soft == u.hard else f"{u.soft}:{u.hard}" for u in value}
    if key == "mounts":
        return [{"source": m.source, "target": m.target, "readonly": m.readonly,
                 "optional": m.optional} for m in value]  # fmt: skip
    if key in ("env", "labels"):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    if value is None:  # unset in the profile: the setting's own default
        return {"shims": True, "pull": "missing", "engine": "auto"}.get(key)
    return value


def profile_tables() -> Schema:
    mounts = {"type": "array", "items": MOUNT}
    return tables_of(table(settings_of("profile"), {"mounts": mounts}), PROFILE_NAME_RE.pattern)


def project_schema(suite: Schema, labels: Schema) -> Schema:
    """``rocmenv.toml`` (and the ``[tool.rocmenv]`` table): ``suite`` is one ``[suites.NAME]``,
    ``labels`` the ``[labels]`` table (both from the suite layer)."""
    tables = {
        "labels": labels,
        "registry": section("registry"),
        "host": section("host"),
        "slurm": section("slurm"),
        "profiles": profile_tables(),
        "suites": tables_of(suite, PROFILE_NAME_RE.pattern),  # the same grammar
    }
    return _document(
        "rocmenv project file (rocmenv.toml, or [tool.rocmenv] in pyproject.toml)",
        table(settings_of("top"), tables),
    )


def site_schema() -> Schema:
    """``/etc/rocmenv/config.toml`` and ``$XDG_CONFIG_HOME/rocmenv/config.toml``."""
    tables = {
        "registry": section("registry"),
        "host": section("host"),
        "slurm": section("slurm"),
        "policy": section("policy"),
        "images": section("images"),
        "profiles": profile_tables(),
    }
    return _document(
        "rocmenv site and user configuration (/etc/rocmenv/config.toml, "
        "$XDG_CONFIG_HOME/rocmenv/config.toml)",
        table(settings_of("site"), tables),
    )


def policy_schema() -> Schema:
    """The policy file ``ROCMENV_POLICY`` names."""
    return _document("rocmenv untrusted policy file (ROCMENV_POLICY)", section("policy"))


def _document(title: str, body: Schema) -> Schema:
    return {"$schema": SCHEMA_DIALECT, "title": title, **body}


def dumps(schema: Schema) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
