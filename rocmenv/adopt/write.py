"""The project file ``rocmenv init`` writes, and the workflow steps it prints.

TOML is written here rather than by a TOML writer library: the file is a fixed layout with
comments saying where each value came from, which no writer keeps; every value goes through
:func:`toml_value` (strings as TOML basic strings, control characters escaped) and the whole
file is read back by the same TOML parser and the same loaders ``rocmenv`` uses before it
replaces anything (:func:`rocmenv.adopt.init.init_project`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rocmenv import __version__
from rocmenv.adopt.scan import FoundSuite
from rocmenv.suite.registered import DEFAULT_SUITE_NAME

#: Where the composite action lives (``action.yml`` at the root of rocmenv's repository,
#: pyproject's ``project.urls``), pinned by commit (the release tag of this version in a
#: comment): the example workflows and the printed steps use it; point it at your copy.
ACTION = "rocmenv/rocmenv"
ACTION_TAG = f"v{__version__}"
ACTION_SHA = "b6663cf0ced35994783f47af01088561c74a5e82"
ACTION_REF = f"{ACTION}@{ACTION_SHA}"
#: The other actions the steps use, pinned by the commit of their release tag.
CHECKOUT = ("actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8", "v5.0.0")
RETRY_ON = "AssertionError"
PR_LABELS = "${{ join(github.event.pull_request.labels.*.name, ',') }}"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, Mapping):
        items = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_value(key)


def _line(key: str, value: Any, comment: str = "") -> str:
    text = f"{toml_key(key)} = {toml_value(value)}"
    return f"{text:<39} # {comment}" if comment else text


def project_text(
    *,
    source: str,
    profile: str,
    profile_keys: Mapping[str, Any],
    suites: Sequence[FoundSuite],
    comments: Mapping[str, str] | None = None,
    labels: str | None = None,
) -> str:
    out = [
        f"# rocmenv project file, written by `rocmenv init` {source}.",
        "# Keys: docs/configuration.md and docs/suites.md. Check it: `rocmenv suite list`.",
        "",
        _line("default-profile", profile),
        "",
        f"[profiles.{toml_key(profile)}]",
    ]
    for key, value in profile_keys.items():
        out.append(_line(key, value, (comments or {}).get(key, "")))
    if labels:
        out += ["", labels.rstrip("\n")]
    for suite in suites:
        out += ["", *_suite_lines(suite, profile)]
    return "\n".join(out) + "\n"


def _suite_lines(suite: FoundSuite, profile: str) -> list[str]:
    name = toml_key(suite.name)
    lines = [f"[suites.{name}]"]
    summary = f"# {len(suite.files)} file(s) call {suite.call}(…) for this suite"
    if suite.disabled:
        summary += f"; {suite.disabled} disabled (listed as skipped, never run)"
    lines.append(summary)
    if suite.nightly and suite.nightly >= len(suite.files):
        lines.append("# every test is nightly=True: run it with --cadence nightly (or weekly)")
    lines.append(_line("profile", profile))
    gpus = suite.gpus
    if gpus is None:
        lines.append(_line("gpus", 1, "no -N-gpu- in the name: set the GPU count"))
    else:
        lines.append(_line("gpus", gpus, f"from -{gpus}-gpu- in the name"))
    lines += [
        _line("cmd", "python3 {path}", "each file as the reference runner runs it"),
        _line("timeout-factor", 1.25, "timeout = max(min-timeout, est_time x factor)"),
        _line("min-timeout", 300),
        _line("retries", 1, "one more attempt, as the reference runner gives"),
        _line("retry-wait", 60),
        _line("retry-on", RETRY_ON, "only when the failed attempt's log matches"),
        "",
        f"[suites.{name}.discover]",
        _line("glob", suite.glob, "the test root: a test added anywhere under it is found"),
        _line("call", suite.call),
        _line("signature", suite.signature),
    ]
    if tuple(suite.suite_name) != DEFAULT_SUITE_NAME:
        lines.append(_line("suite-name", list(suite.suite_name), "as its collector names suites"))
    lines.append(_line("suite", suite.name))
    return lines


def _yaml(value: Any) -> str:
    """A YAML flow value (JSON is YAML); a plain string when it needs no quotes."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_./-]+", value):
        return value
    return json.dumps(value, ensure_ascii=False)


def _uses(ref: tuple[str, str]) -> str:
    return f"{ref[0]}  # {ref[1]}"


def steps_text(
    *,
    job: str | None,
    suite: str,
    suites: Sequence[str],
    runs_on: Any,
    step_env: Mapping[str, str],
    notes: Sequence[str] = (),
) -> str:
    """The workflow that replaces the job: a plan job (the matrix, sized from the estimates,
    for the PR's labels) and the job itself, one matrix entry per partition, running the
    suite the job ran. Every action pinned by commit, the tag in a comment; read-only
    ``permissions:``; the expressions of the job's ``env:`` on the step (the profile's
    ``pass-env``/``secret-env`` take them from there)."""
    job_id = job if job and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", job) else "rocm-tests"
    runner = runs_on if runs_on is not None else ["self-hosted", "amd"]
    checkout = [
        f"      - uses: {_uses(CHECKOUT)}",
        "        with:",
        "          persist-credentials: false",
    ]
    action = f"{ACTION_REF}  # {ACTION_TAG}"
    others = [s for s in suites if s != suite]
    shown = f"job {job!r}" if job else "your ROCm job"
    lines = [
        f"# Written by `rocmenv init`: {shown} with rocmenv. No container block: every test",
        "# runs in its own container of the project's profile on its own GPUs (rocmenv.toml);",
        "# the pull request's labels select what runs; nothing to run is green.",
        *(f"# Also registered: suite {name}" for name in others[:10]),
        *(f"# Note: {note}" for note in notes),
        "name: rocm-tests",
        "",
        "on:",
        "  pull_request:",
        "    types: [opened, reopened, synchronize, labeled]",
        "",
        "permissions:",
        "  contents: read",
        "",
        "jobs:",
        "  plan:",
        "    runs-on: ubuntu-latest",
        "    timeout-minutes: 10",
        "    outputs:",
        "      matrix: ${{ steps.plan.outputs.matrix }}",
        "      has-tests: ${{ steps.plan.outputs.has-tests }}",
        "    steps:",
        *checkout,
        "      - id: plan",
        f"        uses: {action}",
        "        with:",
        "          command: suite-plan",
        f"          suite: {_yaml(suite)}",
        '          max-partition-time: "1800"',
        f"          labels: {PR_LABELS}",
        "",
        f"  {job_id}:",
        "    needs: plan",
        "    if: needs.plan.outputs.has-tests == 'true'",
        f"    runs-on: {_yaml(runner)}",
        "    strategy:",
        "      fail-fast: false",
        "      matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}",
        "    steps:",
        *checkout,
        f"      - uses: {action}",
    ]
    if step_env:
        lines.append("        env:")
        lines += [f"          {name}: {_yaml(value)}" for name, value in step_env.items()]
    lines += [
        "        with:",
        "          command: suite-run",
        f"          suite: {_yaml(suite)}",
        "          partition: ${{ matrix.partition }}",
        f"          labels: {PR_LABELS}",
    ]
    return "\n".join(lines) + "\n"
