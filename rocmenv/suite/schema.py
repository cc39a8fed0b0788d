"""The JSON Schema of one ``[suites.NAME]`` table and of ``[labels]``, declared here — the
layer that owns suites — the way :mod:`rocmenv.settings.declared` declares the other
settings (each key's value schema, help and default, one :class:`Setting` each), for the
key tables :mod:`rocmenv.suite.model`'s readers check (``SUITE_KEYS``, ``TEST_KEYS``,
``DISCOVER_KEYS``, ``LABELS_KEYS``). The project file's schema
(:func:`rocmenv.settings.schema.project_schema`) takes it from here; ``rocmenv config docs``
lists it.
"""

from __future__ import annotations

from typing import Final

from rocmenv.settings.declared import BOOL, STR, STR_LIST, TABLE, Schema, Setting
from rocmenv.settings.schema import section, table
from rocmenv.suite.discovery import DEFAULT_SIGNATURE
from rocmenv.suite.labels import BUILTIN_PREFIX, CADENCES
from rocmenv.suite.model import DEFAULT_CMD, DEFAULT_EST_TIME, MAX_GPUS
from rocmenv.suite.policy import DEFAULT_MIN_TIMEOUT, DEFAULT_RETRY_WAIT, DEFAULT_TIMEOUT_FACTOR
from rocmenv.suite.registered import DEFAULT_SUITE_NAME

GPUS: Final[Schema] = {"type": "integer", "minimum": 0, "maximum": MAX_GPUS}
SECONDS: Final[Schema] = {"type": "number", "exclusiveMinimum": 0}
COMMAND: Final[Schema] = {"anyOf": [STR, {**STR_LIST, "minItems": 1}]}
COUNT: Final[Schema] = {"type": "integer", "minimum": 0}
INCLUDE_SET: Final[Schema] = {"anyOf": [
    {"const": "all"}, STR_LIST,
    {"type": "object", "properties": {"all-but": {
        **STR_LIST, "description": "every label but these", "default": []}},
     "required": ["all-but"], "additionalProperties": False},
]}  # fmt: skip
STR_OR_LIST: Final[Schema] = {"anyOf": [STR, STR_LIST]}


def _d(table: str, key: str, schema: Schema, help: str, default: object = None) -> Setting:
    return Setting(table=table, key=key, schema=schema, help=help, default=default)


def _run_policy(table: str) -> tuple[Setting, ...]:
    """The run policy of a suite, a test or a ``[suites.NAME.per-test."PATH"]`` table."""
    return (
        _d(table, "timeout", SECONDS, "a fixed timeout in seconds (unset: from the estimate)"),
        _d(table, "timeout-factor", SECONDS, "timeout = max(min-timeout, estimate x this)",
           DEFAULT_TIMEOUT_FACTOR),
        _d(table, "min-timeout", SECONDS, "the least timeout, in seconds", DEFAULT_MIN_TIMEOUT),
        _d(table, "retries", COUNT, "run a failed or timed-out test again, up to N more times",
           0),
        _d(table, "retry-wait", {"type": "number", "minimum": 0},
           "seconds between an attempt's end and the next one's start", DEFAULT_RETRY_WAIT),
        _d(table, "retry-on", STR, "retry only when the attempt's log matches this regular "
           "expression (unset: always)"),
    )  # fmt: skip


SUITE_SETTINGS: Final[tuple[Setting, ...]] = (
    _d("suite", "profile", STR, "the profile every test's container uses (unset: the default "
       "profile)"),
    _d("suite", "gpus", GPUS, "GPUs per test unless the test says (0: none)", 1),
    _d("suite", "est-time", SECONDS, "seconds, for tests that declare none", DEFAULT_EST_TIME),
    _d("suite", "cmd", COMMAND, "the command template ({path}, {name})", list(DEFAULT_CMD)),
    _d("suite", "labels", STR_LIST, "keep only tests with any of these labels", []),
    _d("suite", "exclude-labels", STR_LIST, "drop tests with any of these labels", []),
    _d("suite", "include-labels", STR_LIST, "the labels asked for when --labels is not given "
       "(unset: every test)"),
    _d("suite", "tests", {"type": "array"}, "the tests: {path, …} tables", []),
    _d("suite", "discover", TABLE, "tests read from registration calls, never imported (unset: none)"),
    _d("suite", "per-test", {"type": "object"}, "run policy keys (and disabled) for named "
       "tests: [suites.NAME.per-test.\"PATH\"]", {}),
    _d("suite", "slurm", TABLE, "this suite's Slurm settings, over [slurm]", {}),
    *_run_policy("suite"),
)  # fmt: skip
TEST_SETTINGS: Final[tuple[Setting, ...]] = (
    _d("test", "path", STR, "the test file, relative to the project root"),
    _d("test", "name", STR, "its name in reports (unset: the path)"),
    _d("test", "gpus", GPUS, "GPUs it needs (unset: the suite's)"),
    _d("test", "est-time", SECONDS, "its declared estimate in seconds (unset: the suite's)"),
    _d("test", "cmd", COMMAND, "its command template (unset: the suite's)"),
    _d("test", "labels", STR_LIST, "its labels", []),
    _d("test", "nightly", BOOL, "runs only in the nightly and weekly cadences", False),
    _d("test", "disabled", {"anyOf": [STR, BOOL]}, "listed as skipped, with this reason", False),
    *_run_policy("test"),
)  # fmt: skip
DISCOVER_SETTINGS: Final[tuple[Setting, ...]] = (
    _d("discover", "glob", STR, "the files read, relative to the project root"),
    _d("discover", "call", STR_OR_LIST, "the registration function's name (or names)"),
    _d("discover", "suite", STR_OR_LIST, "keep registrations of this suite (as suite-name "
       "names it)"),
    _d("discover", "suite-name", STR_OR_LIST, "templates naming a registration's suite; the "
       "first complete one wins", list(DEFAULT_SUITE_NAME)),
    _d("discover", "signature", STR, "the registration function's parameters (unset: read "
       "from its def, else the known client's)", DEFAULT_SIGNATURE),
    _d("discover", "select", {"type": "object"}, "keep registrations whose arguments equal "
       "these (a list: any of)", {}),
    _d("discover", "gpus-from", {"anyOf": [
        STR, {"type": "object", "additionalProperties": False, "properties": {
            "key": {**STR, "description": "the registration's argument", "default": None},
            "pattern": {**STR, "description": "a regular expression whose one group is the "
                        "count (unset: the value is the count)", "default": None}}}]},
       "where the GPU count comes from: an argument (and a pattern with one group) (unset: "
       "num_gpus or gpus, else the suite's)"),
)  # fmt: skip
LABELS_SETTINGS: Final[tuple[Setting, ...]] = (
    _d("labels", "prefix", STR, "a PR label PREFIX+X asks for label or scope X",
       BUILTIN_PREFIX),
    _d("labels", "ignore", STR_LIST, "PR labels the workflow reads itself (no notice)", []),
    _d("labels", "scopes", {"type": "object", "additionalProperties": INCLUDE_SET},
       "named include sets: \"all\", a list, or {all-but = [...]}", {}),
    _d("labels", "cadence", TABLE, "the include set each cadence adds", {}),
)  # fmt: skip
CADENCE_SETTINGS: Final[tuple[Setting, ...]] = tuple(
    _d("cadence", c, INCLUDE_SET, f"what the {c} cadence includes (unset: nothing more)")
    for c in CADENCES
)


def suite_schema() -> Schema:
    test = table(TEST_SETTINGS, required=["path"])
    discover = table(DISCOVER_SETTINGS, required=["glob", "call"])
    nested = {
        "tests": {"type": "array", "items": test},
        "discover": discover,
        "slurm": section("slurm"),
    }
    return table(SUITE_SETTINGS, nested)


def labels_schema() -> Schema:
    """The ``[labels]`` table (:mod:`rocmenv.suite.labels`)."""
    return table(LABELS_SETTINGS, {"cadence": table(CADENCE_SETTINGS)})
