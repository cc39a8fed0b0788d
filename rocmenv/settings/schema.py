"""The JSON Schema of rocmenv's configuration files, generated from the key tables the
readers check (``TOP_KEYS``, ``PROFILE_KEYS``, ``REGISTRY_KEYS``, ``SLURM_KEYS``,
``HOST_KEYS``, ``POLICY_KEYS``, ``SITE_KEYS``, and the suite tables passed in by the layer
that owns them): one source of truth, so a key added to a table is in the schema at once,
and an unknown key fails the schema exactly where it fails rocmenv
(``additionalProperties: false`` on every table rocmenv checks).

:data:`VALUE_SCHEMAS` describes the values; a key a table gains before it is described
there is still in the schema, with any value accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from rocmenv.settings.choices import ENGINE_NAMES, GPU_DEVICE_NAMINGS, PULL_POLICIES
from rocmenv.settings.host import HOST_KEYS
from rocmenv.settings.policy import POLICY_KEYS
from rocmenv.settings.profile_set import PROFILE_NAME_RE
from rocmenv.settings.profiles import FAMILIES, MOUNT_KEYS, PROFILE_KEYS
from rocmenv.settings.project import TOP_KEYS
from rocmenv.settings.registry import REGISTRY_KEYS, RESPONSE_LIMITS
from rocmenv.settings.site import SITE_KEYS
from rocmenv.settings.slurm import GPU_REQUEST_STYLES, PACKINGS, SLURM_KEYS

Schema = dict[str, Any]
SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

STR: Final[Schema] = {"type": "string"}
BOOL: Final[Schema] = {"type": "boolean"}
STR_LIST: Final[Schema] = {"type": "array", "items": STR}
STR_TABLE: Final[Schema] = {"type": "object", "additionalProperties": STR}
SIZE: Final[Schema] = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?[bkmgBKMG]?$"},
    ]
}
SECONDS_DAY: Final[Schema] = {"type": "number", "exclusiveMinimum": 0, "maximum": 86400}


def enum(values: tuple[str, ...]) -> Schema:
    return {"type": "string", "enum": list(values)}


def table(keys: tuple[str, ...], values: Mapping[str, Schema], **extra: Any) -> Schema:
    """A table of exactly ``keys`` (every one optional unless ``required`` says)."""
    return {
        "type": "object",
        "properties": {key: values.get(key, {}) for key in keys},
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
        table(MOUNT_KEYS, {"source": STR, "target": {"type": "string", "pattern": "^/"},
                           "readonly": BOOL, "optional": BOOL}, required=["source", "target"]),
    ]
}  # fmt: skip

VALUE_SCHEMAS: Final[Mapping[str, Mapping[str, Schema]]] = {
    "top": {"default-profile": STR, "lockfile": STR, "engine": enum(ENGINE_NAMES)},
    "profile": {
        **{k: STR for k in ("extends", "description", "image", "tag", "sglang", "rocm", "gpu",
                            "gpus", "ipc", "network", "workdir")},
        **{k: STR_LIST for k in ("gpu-env", "devices", "group-add", "cap-add", "cap-drop",
                                 "security-opt", "pass-env", "secret-env")},
        **{k: BOOL for k in ("privileged", "keep-proxy-env", "mount-checkout", "shims",
                             "untrusted")},
        **{k: SIZE for k in ("shm-size", "memory", "memory-swap")},
        "family": enum(FAMILIES),
        "before": {"type": "string", "pattern": "^20[0-9]{6}$"},
        "gpu-isolation": enum(("devices", "env")),
        "gpu-devices": enum(GPU_DEVICE_NAMINGS),
        "ulimits": {"type": "object", "additionalProperties": {"type": ["integer", "string"]}},
        "mounts": {"type": "array", "items": MOUNT},
        "env": STR_TABLE,
        "labels": STR_TABLE,
        "pull": enum(PULL_POLICIES),
        "engine": enum(ENGINE_NAMES),
    },
    "registry": {
        "mirrors": {"type": "object", "additionalProperties": STR_LIST},
        "insecure": STR_LIST,
        "timeout": SECONDS_DAY,
        "retries": {"type": "integer", "minimum": 0, "maximum": 20},
        "request-deadline": SECONDS_DAY,
        "command-deadline": SECONDS_DAY,
        "max-pages": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
        "ratelimit-warning": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
        "limits": table(tuple(RESPONSE_LIMITS), {
            k: {"type": "integer", "exclusiveMinimum": 0, "maximum": 1 << 32} for k in RESPONSE_LIMITS
        }),
        "proxy": STR,
        "no-proxy": STR_LIST,
        "pull-from-mirror": BOOL,
    },
    "slurm": {
        "partition": STR, "account": STR, "gres-type": STR, "gres-conf": STR,
        "gpu-request": enum(GPU_REQUEST_STYLES), "packing": enum(PACKINGS),
        "time-factor": {"type": "number", "exclusiveMinimum": 0},
        "min-time": {"type": "number", "exclusiveMinimum": 0},
        "extra-args": STR_LIST,
    },
    "host": {"sysfs-root": STR, "dev-root": STR, "gpus-from": STR, "podinfo-devices": STR},
    "policy": {key: STR_LIST for key in POLICY_KEYS},
    "site": {"engine": enum(ENGINE_NAMES)},
}  # fmt: skip


def section(name: str, keys: tuple[str, ...]) -> Schema:
    return table(keys, VALUE_SCHEMAS.get(name, {}))


def profile_tables() -> Schema:
    return tables_of(section("profile", PROFILE_KEYS), PROFILE_NAME_RE.pattern)


def project_schema(suite: Schema, labels: Schema) -> Schema:
    """``rocmenv.toml`` (and the ``[tool.rocmenv]`` table): ``suite`` is one ``[suites.NAME]``,
    ``labels`` the ``[labels]`` table (both from the suite layer)."""
    tables = {
        "labels": labels,
        "registry": section("registry", REGISTRY_KEYS),
        "host": section("host", HOST_KEYS),
        "slurm": section("slurm", SLURM_KEYS),
        "profiles": profile_tables(),
        "suites": tables_of(suite, PROFILE_NAME_RE.pattern),  # the same grammar
    }
    return _document(
        "rocmenv project file (rocmenv.toml, or [tool.rocmenv] in pyproject.toml)",
        table(TOP_KEYS, {**VALUE_SCHEMAS["top"], **tables}),
    )


def site_schema() -> Schema:
    """``/etc/rocmenv/config.toml`` and ``$XDG_CONFIG_HOME/rocmenv/config.toml``."""
    tables = {
        "registry": section("registry", REGISTRY_KEYS),
        "host": section("host", HOST_KEYS),
        "slurm": section("slurm", SLURM_KEYS),
        "policy": section("policy", POLICY_KEYS),
        "profiles": profile_tables(),
    }
    return _document(
        "rocmenv site and user configuration (/etc/rocmenv/config.toml, "
        "$XDG_CONFIG_HOME/rocmenv/config.toml)",
        table(SITE_KEYS, {**VALUE_SCHEMAS["site"], **tables}),
    )


def policy_schema() -> Schema:
    """The policy file ``ROCMENV_POLICY`` names."""
    return _document(
        "rocmenv untrusted policy file (ROCMENV_POLICY)", section("policy", POLICY_KEYS)
    )


def _document(title: str, body: Schema) -> Schema:
    return {"$schema": SCHEMA_DIALECT, "title": title, **body}


def dumps(schema: Schema) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
