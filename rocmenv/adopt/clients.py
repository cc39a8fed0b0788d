"""The clients ``rocmenv init`` knows, as their own CI tooling works (facts from their public
repositories; conventions rule 17: real clients are the spec).

* **miles** (radixark/miles): test files call ``register_rocm_ci(est_time, suite, *,
  labels=None, nightly=False, disabled=None)``, defined in ``tests/ci/ci_register.py``; its
  collector reads ``test_*.py`` under ``tests/``; a registration's suite is its ``suite``.
  Its policy (``tests/ci/ci_policy.py``): a PR asks for tests labelled X with the label
  ``run-ci-X`` (other names are ignored with a warning, the workflow-only ``nightly`` and
  ``bypass-fastfail`` silently); ``run-ci-all`` and the weekly cadence include every label,
  the nightly cadence all but ``long``/``ft-long``, ``run-ci-image`` all but
  ``long``/``ft-short``/``ft-long``; the labels asked for by name are added last.
* **sglang** (sgl-project/sglang): ``register_amd_ci(est_time, suite=None, nightly=False,
  disabled=None, *, stage=None, runner_config=None)`` in
  ``python/sglang/test/ci/ci_register.py``; its collector reads ``test/registered/**/*.py``;
  a registration's suite is ``f"{stage}-test-{runner_config}"`` when both are given, else
  ``suite``. No label policy.

A client is recognised by its layout: the registration function defined in the client's own
file (:func:`layout_of`). Without that, a call's signature is still the known client's for
that name (when the tree has no ``def`` of it) and the suite is named as that client names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, kw_only=True)
class Client:
    name: str
    call: str  # the registration function
    signature: str  # its parameter list, as the client defines it
    register_file: str  # where the client defines it
    glob: str  # the files the client's collector reads
    suite_name: tuple[str, ...]  # how a registration's suite is named (discover.suite-name)
    labels: str | None = None  # the [labels] table of its policy (TOML), if it has one
    labels_summary: str = ""


MILES_LABELS: Final = """\
[labels]
# miles' policy (tests/ci/ci_policy.py): a PR asks for tests labelled X with its label run-ci-X
prefix = "run-ci-"
ignore = ["nightly", "bypass-fastfail"]   # PR labels its workflow reads itself
scopes = { all = "all", image = { all-but = ["long", "ft-short", "ft-long"] } }
cadence = { nightly = { all-but = ["long", "ft-long"] }, weekly = "all" }
"""

MILES: Final = Client(
    name="miles",
    call="register_rocm_ci",
    signature="est_time, suite, *, labels=None, nightly=False, disabled=None",
    register_file="tests/ci/ci_register.py",
    glob="tests/**/test_*.py",
    suite_name=("{suite}",),
    labels=MILES_LABELS,
    labels_summary=(
        "miles' policy: run-ci-<label>; run-ci-all and weekly every label, nightly all but "
        "long/ft-long, run-ci-image all but long/ft-short/ft-long"
    ),
)
SGLANG: Final = Client(
    name="sglang",
    call="register_amd_ci",
    signature=(
        "est_time, suite=None, nightly=False, disabled=None, *, stage=None, runner_config=None"
    ),
    register_file="python/sglang/test/ci/ci_register.py",
    glob="test/registered/**/*.py",
    suite_name=("{stage}-test-{runner_config}", "{suite}"),
)
CLIENTS: Final = (MILES, SGLANG)

#: A project's own label policy when its registrations carry labels and it is not miles:
#: a PR asks for tests labelled X with run-ci-X.
DEFAULT_LABELS: Final = """\
[labels]
# a PR asks for tests labelled X with its label run-ci-X (docs/suites.md "Labels")
prefix = "run-ci-"
"""


def client_for_call(call: str) -> Client | None:
    return next((c for c in CLIENTS if c.call == call), None)


def layout_of(defined: dict[str, list[str]]) -> Client | None:
    """The client whose registration function is defined in its own file (``defined``: call
    name -> the files defining it, relative to the root)."""
    for client in CLIENTS:
        if client.register_file in defined.get(client.call, []):
            return client
    return None
