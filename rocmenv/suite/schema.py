"""The JSON Schema of one ``[suites.NAME]`` table and of ``[labels]``, generated from :mod:`rocmenv.suite.model`'s
key tables (``SUITE_KEYS``, ``TEST_KEYS``, ``DISCOVER_KEYS``) — the project file's schema
(:func:`rocmenv.settings.schema.project_schema`) takes it from here, the layer that owns
suites. A key the tables gain before :data:`SUITE_VALUES` describes it is still in the
schema, with any value accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from rocmenv.settings.schema import STR, STR_LIST, Schema, section, table
from rocmenv.settings.slurm import SLURM_KEYS
from rocmenv.suite.labels import CADENCES, LABELS_KEYS
from rocmenv.suite.model import MAX_GPUS, SUITE_KEYS, TEST_KEYS
from rocmenv.suite.registered import DISCOVER_KEYS

GPUS: Final[Schema] = {"type": "integer", "minimum": 0, "maximum": MAX_GPUS}
SECONDS: Final[Schema] = {"type": "number", "exclusiveMinimum": 0}
COMMAND: Final[Schema] = {"anyOf": [STR, {**STR_LIST, "minItems": 1}]}

COUNT: Final[Schema] = {"type": "integer", "minimum": 0}
# the run policy of a suite, a test or a [suites.NAME.per-test."PATH"] table (suite/policy.py)
POLICY_VALUES: Final[Mapping[str, Schema]] = {
    "timeout": SECONDS, "timeout-factor": SECONDS, "min-timeout": SECONDS, "retries": COUNT,
    "retry-wait": {"type": "number", "minimum": 0}, "retry-on": STR,
}  # fmt: skip
SUITE_VALUES: Final[Mapping[str, Mapping[str, Schema]]] = {
    "test": {"path": STR, "name": STR, "gpus": GPUS, "est-time": SECONDS, "cmd": COMMAND,
             "labels": STR_LIST, "nightly": {"type": "boolean"},
             "disabled": {"anyOf": [STR, {"type": "boolean"}]}, **POLICY_VALUES},
    "discover": {"glob": STR, "call": {"anyOf": [STR, STR_LIST]},
                 "suite": {"anyOf": [STR, STR_LIST]}, "suite-name": {"anyOf": [STR, STR_LIST]},
                 "signature": STR, "select": {"type": "object"}, "gpus-from": {"anyOf": [
                     STR, {"type": "object", "properties": {"key": STR, "pattern": STR},
                           "additionalProperties": False}]}},
    "suite": {"profile": STR, "gpus": GPUS, "est-time": SECONDS, "cmd": COMMAND,
              "labels": STR_LIST, "exclude-labels": STR_LIST, "include-labels": STR_LIST,
              "per-test": {"type": "object"}, **POLICY_VALUES},
}  # fmt: skip


def suite_schema() -> Schema:
    test = table(TEST_KEYS, SUITE_VALUES["test"], required=["path"])
    discover = table(DISCOVER_KEYS, SUITE_VALUES["discover"], required=["glob", "call"])
    values = {
        **SUITE_VALUES["suite"],
        "tests": {"type": "array", "items": test},
        "discover": discover,
        "slurm": section("slurm", SLURM_KEYS),
    }
    return table(SUITE_KEYS, values)


INCLUDE_SET: Final[Schema] = {"anyOf": [
    {"const": "all"}, STR_LIST,
    {"type": "object", "properties": {"all-but": STR_LIST}, "required": ["all-but"],
     "additionalProperties": False},
]}  # fmt: skip


def labels_schema() -> Schema:
    """The ``[labels]`` table (:mod:`rocmenv.suite.labels`)."""
    cadence = {c: INCLUDE_SET for c in CADENCES}
    values = {
        "prefix": STR, "ignore": STR_LIST,
        "scopes": {"type": "object", "additionalProperties": INCLUDE_SET},
        "cadence": table(CADENCES, cadence),
    }  # fmt: skip
    return table(LABELS_KEYS, values)
