"""What a bootstrap override fetches: git refs and remotes validated before git sees them,
``ci-sglang-pr:``/``ci-megatron-pr:`` lines read from a PR body, and the resulting plan.
Running the plan is :mod:`rocmenv.bootstrap.overrides`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rocmenv.errors import InvalidGitRef, UsageError

Target = Literal["sglang", "megatron"]
TARGETS: tuple[Target, ...] = ("sglang", "megatron")
DEFAULT_PATHS: dict[Target, str] = {
    "sglang": "/sgl-workspace/sglang",
    "megatron": "/root/Megatron-LM",
}
#: Where the installable project lives inside the checkout (sglang: python/pyproject.toml).
DEFAULT_SUBDIRS: dict[Target, str] = {"sglang": "python", "megatron": "."}
RefKind = Literal["pr", "commit", "ref"]

_HEX = re.compile(r"^[0-9a-fA-F]{7,40}$")
_PR = re.compile(r"^#([1-9][0-9]{0,9})$")
_KEY = re.compile(r"ci-(sglang|megatron)-pr", re.IGNORECASE)
_QUOTES = "`'\""
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REMOTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REMOTE_URL = re.compile(r"^(?:https?|ssh|git|file)://[^\s]+$|^[A-Za-z0-9._-]+@[^\s:]+:[^\s]+$")


# ------------------------------------------------------------------ refs


def ref_format_problem(name: str) -> str | None:
    """Why `name` is not a valid ref (``git check-ref-format --allow-onelevel`` rules, plus:
    no leading ``-``, at most 255 bytes), or ``None``."""
    if not name:
        return "it is empty"
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        return "it is longer than 255 bytes"
    if name.startswith("-"):
        return "it starts with '-' (git would read it as an option)"
    if name == "@":
        return "it is the single character '@'"
    return _character_problem(name) or _shape_problem(name)


def _character_problem(name: str) -> str | None:
    for ch in name:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"it contains the control character {ch!r}"
        if ch.isspace():
            return f"it contains whitespace ({ch!r})"
        if ch in "~^:?*[\\":
            return f"it contains {ch!r}"
    return None


def _shape_problem(name: str) -> str | None:
    if ".." in name:
        return "it contains '..'"
    if "@{" in name:
        return "it contains '@{'"
    if name.startswith("/") or name.endswith("/"):
        return "it starts or ends with '/'"
    if "//" in name:
        return "it contains '//'"
    if name.endswith("."):
        return "it ends with '.'"
    for component in name.split("/"):
        if component.startswith("."):
            return f"the component {component!r} starts with '.'"
        if component.endswith(".lock"):
            return f"the component {component!r} ends with '.lock'"
    return None


@dataclass(frozen=True, kw_only=True)
class OverrideRef:
    """A validated override: what was asked and what git is given."""

    spelled: str
    kind: RefKind
    fetch: str  # what `git fetch <remote>` is given (a commit for kind "commit")

    def to_json(self) -> dict[str, Any]:
        return {"spelled": self.spelled, "kind": self.kind, "fetch": self.fetch}


def parse_ref(text: str, *, what: str = "ref") -> OverrideRef:
    """Validate an override value: ``#N``, a 7–40 hex commit, or a ref name."""
    value = text.strip()
    pr = _PR.fullmatch(value)
    if pr:
        return OverrideRef(spelled=value, kind="pr", fetch=f"refs/pull/{pr.group(1)}/head")
    if _HEX.fullmatch(value):
        return OverrideRef(spelled=value, kind="commit", fetch=value.lower())
    if value.startswith("#"):
        raise InvalidGitRef(
            f"{what} {text!r} is not a pull request number",
            hint="write #N with N a positive number, e.g. ci-sglang-pr: #1234",
        )
    problem = ref_format_problem(value)
    if problem:
        raise InvalidGitRef(
            f"{what} {text!r} is not a valid git ref: {problem}",
            hint="give #N (a pull request), a branch or tag name, or a 7-40 digit commit",
        )
    return OverrideRef(spelled=value, kind="ref", fetch=value)


def check_remote(remote: str) -> str:
    """A remote name (``origin``), an absolute path, or a URL — never an option. Credentials
    in a URL's userinfo are registered as secrets (masked in every message and report)."""
    from rocmenv.redact import redact_url, register_secret

    if _REMOTE_URL.fullmatch(remote):
        userinfo = remote.partition("://")[2].split("/", 1)[0].rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        register_secret(password or user)
        return remote
    if _REMOTE_NAME.fullmatch(remote):
        return remote
    if remote.startswith("/") and not any(c.isspace() or ord(c) < 0x20 for c in remote):
        return remote
    raise InvalidGitRef(
        f"remote {redact_url(remote)!r} is not a remote name, an absolute path or a URL",
        hint="e.g. --remote origin",
    )


# ------------------------------------------------------------------ PR bodies


def parse_pr_body(text: str) -> dict[Target, str]:
    """``{"sglang": "#123", "megatron": "main"}`` from a PR body (values not yet validated;
    see the module docstring for the syntax)."""
    found: dict[Target, str] = {}
    for line in _HTML_COMMENT.sub("", text).splitlines():
        match = _key_line(line)
        if match is None:
            continue
        name, rest = match
        target: Target = "sglang" if name.lower() == "sglang" else "megatron"
        words = rest.strip().strip("`'\"").split()
        if not words:
            continue
        value = words[0].strip("`'\",;")
        if value:
            found[target] = value
    return found


def _skip(line: str, i: int, chars: str | None = None) -> int:
    """The index after the run of whitespace (or of ``chars``) starting at ``i``."""
    n = len(line)
    while i < n and (line[i].isspace() if chars is None else line[i] in chars):
        i += 1
    return i


def _key_line(line: str) -> tuple[str, str] | None:
    """``(target, rest)`` for a ``ci-<target>-pr: rest`` line, after any markdown bullets,
    numbers (``1.``/``1)``), quote marks (``>``) and quotes around the key.

    One left-to-right scan, each character looked at a bounded number of times: a regular
    expression with adjacent ``\\s*`` runs backtracked quadratically (a 50,000-space line
    took 17 s).
    """
    i = _skip(line, 0)
    n = len(line)
    while i < n:  # markdown prefixes, each followed by optional whitespace
        if line[i] in "-*+>":
            i = _skip(line, i + 1)
        elif line[i].isdigit():
            j = i
            while j < n and line[j].isdigit():
                j += 1
            if j < n and line[j] in ".)":
                i = _skip(line, j + 1)
            else:
                break
        else:
            break
    i = _skip(line, _skip(line, i, _QUOTES))
    key = _KEY.match(line, i)
    if key is None:
        return None
    i = _skip(line, _skip(line, _skip(line, key.end()), _QUOTES))
    if i >= n or line[i] != ":":
        return None
    return key.group(1), line[i + 1 :]


# ------------------------------------------------------------------ plan


@dataclass(frozen=True, kw_only=True)
class TargetPlan:
    target: Target
    path: str
    subdir: str
    ref: OverrideRef | None
    source: str | None  # "flag" | "pr-body" | "env" (where the ref came from)
    patches: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OverridePlan:
    targets: tuple[TargetPlan, ...]
    remote: str = "origin"
    python: str = ""
    pip_args: tuple[str, ...] = ()
    git_timeout: float = 600.0
    install_timeout: float = 1800.0

    @property
    def empty(self) -> bool:
        return not self.targets


def split_patch_arg(arg: str, overridden: Sequence[Target]) -> tuple[Target, str]:
    """``sglang=FILE`` / ``megatron=FILE`` / ``FILE`` (only when exactly one target is
    overridden)."""
    for target in TARGETS:
        prefix = f"{target}="
        if arg.startswith(prefix):
            return target, arg[len(prefix) :]
    if len(overridden) == 1:
        return overridden[0], arg
    raise UsageError(
        f"--patch {arg!r}: say which checkout it is for",
        hint="write --patch sglang=FILE or --patch megatron=FILE",
    )


def make_plan(
    *,
    refs: Mapping[Target, tuple[str, str]],
    patches: Sequence[str],
    paths: Mapping[Target, str],
    subdirs: Mapping[Target, str],
    cwd: Path,
    remote: str = "origin",
    python: str = "",
    pip_args: Sequence[str] = (),
    git_timeout: float = 600.0,
    install_timeout: float = 1800.0,
) -> OverridePlan:
    """Validate everything (refs, remote, patch files) before anything runs: UsageError."""
    parsed: dict[Target, tuple[OverrideRef, str]] = {}
    for target, (value, origin) in refs.items():
        parsed[target] = (parse_ref(value, what=f"{target} override ({origin})"), origin)
    by_target: dict[Target, list[Path]] = {}
    for arg in patches:
        target, name = split_patch_arg(arg, [t for t in TARGETS if t in parsed])
        path = Path(name)
        path = path if path.is_absolute() else cwd / path
        if not path.is_file():
            raise UsageError(
                f"patch file {path} does not exist", hint="give the patch's path (--patch)"
            )
        by_target.setdefault(target, []).append(path)
    for target, rel in subdirs.items():
        if os.path.isabs(rel) or ".." in Path(rel).parts:
            raise UsageError(
                f"{target} install subdirectory {rel!r} must be relative to the checkout",
                hint="e.g. --sglang-subdir python",
            )
    plans = []
    for target in TARGETS:
        if target not in parsed and target not in by_target:
            continue
        ref: OverrideRef | None = None
        source: str | None = None
        if target in parsed:
            ref, source = parsed[target]
        plans.append(
            TargetPlan(
                target=target,
                path=paths.get(target, DEFAULT_PATHS[target]),
                subdir=subdirs.get(target, DEFAULT_SUBDIRS[target]),
                ref=ref,
                source=source,
                patches=tuple(by_target.get(target, ())),
            )
        )
    return OverridePlan(
        targets=tuple(plans),
        remote=check_remote(remote),
        python=python,
        pip_args=tuple(pip_args),
        git_timeout=git_timeout,
        install_timeout=install_timeout,
    )
