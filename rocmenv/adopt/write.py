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

from rocmenv.adopt.scan import FoundSuite, common_glob

#: Where the composite action lives (``action.yml`` at the root of rocmenv's repository):
#: the example workflows and the printed steps use this reference; point it at your copy.
ACTION_REF = "rocmenv/rocmenv@v0.1.0"
RETRY_ON = "AssertionError"
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
    return f"{text:<40}# {comment}" if comment else text


def project_text(
    *,
    source: str,
    profile: str,
    profile_keys: Mapping[str, Any],
    suites: Sequence[FoundSuite],
) -> str:
    out = [
        f"# rocmenv project file, written by `rocmenv init` {source}.",
        '# Keys: README "Configuration" and docs/suites.md. Check it: `rocmenv suite list`.',
        "",
        _line("default-profile", profile),
        "",
        f"[profiles.{toml_key(profile)}]",
    ]
    for key, value in profile_keys.items():
        out.append(_line(key, value))
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
    lines.append(_line("cmd", "python3 {path}", "each file as the reference runner runs it"))
    if suite.labelled:
        lines.append(_line("include-labels", [], "unlabelled tests; more with --labels a,b"))
    lines += [
        _line("timeout-factor", 1.25, "timeout = max(min-timeout, est_time x factor)"),
        _line("min-timeout", 300),
        _line("retries", 1, "one more attempt, as the reference runner gives"),
        _line("retry-wait", 60),
        _line("retry-on", RETRY_ON, "only when the failed attempt's log matches"),
        "",
        f"[suites.{name}.discover]",
        _line("glob", common_glob(suite.files)),
        _line("call", suite.call),
        _line("signature", suite.signature()),
        _line("select", suite.select),
    ]
    return lines


def steps_text(*, job: str | None, suites: Sequence[FoundSuite], profile: str) -> str:
    """What replaces the job's ``container:`` block: the composite action per suite."""
    where = f"job {job!r}" if job else "your ROCm job"
    first = suites[0].name if suites else "SUITE"
    lines = [
        f"Next: in {where}, replace the `container:` block (image and options) with these",
        f"steps; rocmenv runs every test in its own container of profile {profile!r} on its",
        "own GPUs (split a suite over a matrix with `suite plan --format gha-matrix`):",
        "",
        "    steps:",
        "      - uses: actions/checkout@v5",
        "        with:",
        "          persist-credentials: false",
        f"      - uses: {ACTION_REF}",
        "        with:",
        "          command: suite-run",
        f"          suite: {first}",
    ]
    for suite in suites[1:]:
        lines.append(f"          # or suite: {suite.name}")
    return "\n".join(lines) + "\n"
