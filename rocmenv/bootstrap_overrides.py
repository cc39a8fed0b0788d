"""Bootstrap step 4: dependency overrides — a PR, branch or commit of SGLang / Megatron-LM
reinstalled over the image's baked checkout, with ROCm patches applied.

**Where overrides come from** (later wins): ``$ROCMENV_PR_BODY``, then ``--pr-body FILE|-``,
then ``--sglang-pr`` / ``--megatron-pr``. In a PR body, a line ``ci-sglang-pr: <ref>`` or
``ci-megatron-pr: <ref>`` (key in any case, optionally in a markdown bullet/quote, the key
and value optionally in backticks or quotes) sets the ref; the value is the first word after
the colon; an empty value is ignored; the last matching line wins; lines inside HTML
comments (``<!-- … -->``, as in PR templates) are ignored.

**Refs**: ``#N`` → ``refs/pull/N/head``; 7–40 hex digits → a commit; anything else must be a
valid git ref name (the rules of ``git check-ref-format --allow-onelevel``) that does not
start with ``-``. Everything is validated before it reaches git (:func:`parse_ref`).

**Per target** (path, remote and install subdirectory configurable): ``git fetch --no-tags --
<remote> <ref>`` (a commit already present is not fetched; a short one not present makes a
plain ``git fetch <remote>`` first), ``git checkout --force --detach <commit>`` (local
changes to tracked files are discarded and counted in the report), patches with the check /
reverse-check logic (:func:`apply_patch`), then ``<python> -m pip install --no-deps -e
<checkout>/<subdir>``. Patches given for a target without an override are applied to the
checkout as it is (no reinstall: the image's install is editable).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rocmenv.bootstrap_exec import CommandResult, Runner, StepFailed, run_command
from rocmenv.errors import UsageError

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
_KEY_LINE = re.compile(
    r"""^\s*(?:(?:[-*+]|\d+[.)]|>)\s*)*   # markdown bullets, numbers, quotes
        [`'"]*\s*ci-(sglang|megatron)-pr\s*[`'"]*\s*:\s*(.*)$""",
    re.IGNORECASE | re.VERBOSE,
)
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REMOTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REMOTE_URL = re.compile(r"^(?:https?|ssh|git|file)://[^\s]+$|^[A-Za-z0-9._-]+@[^\s:]+:[^\s]+$")


class InvalidGitRef(UsageError):
    """A ref, remote or option value that must not reach git."""


class OverrideFailed(StepFailed):
    """Fetching, checking out, patching or installing an override failed."""


class PatchConflict(OverrideFailed):
    """A patch neither applies nor is already applied."""


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
    for ch in name:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"it contains the control character {ch!r}"
        if ch.isspace():
            return f"it contains whitespace ({ch!r})"
        if ch in "~^:?*[\\":
            return f"it contains {ch!r}"
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
    """A remote name (``origin``), an absolute path, or a URL — never an option."""
    if _REMOTE_NAME.fullmatch(remote) or _REMOTE_URL.fullmatch(remote):
        return remote
    if remote.startswith("/") and not any(c.isspace() or ord(c) < 0x20 for c in remote):
        return remote
    raise InvalidGitRef(
        f"remote {remote!r} is not a remote name, an absolute path or a URL",
        hint="e.g. --remote origin",
    )


# ------------------------------------------------------------------ PR bodies


def parse_pr_body(text: str) -> dict[Target, str]:
    """``{"sglang": "#123", "megatron": "main"}`` from a PR body (values not yet validated;
    see the module docstring for the syntax)."""
    found: dict[Target, str] = {}
    for line in _HTML_COMMENT.sub("", text).splitlines():
        match = _KEY_LINE.match(line)
        if not match:
            continue
        target: Target = "sglang" if match.group(1).lower() == "sglang" else "megatron"
        words = match.group(2).strip().strip("`'\"").split()
        if not words:
            continue
        value = words[0].strip("`'\",;")
        if value:
            found[target] = value
    return found


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


# ------------------------------------------------------------------ running


@dataclass
class _Log:
    commands: list[CommandResult] = field(default_factory=list)


def _git_env(env: Mapping[str, str]) -> dict[str, str]:
    out = dict(env)
    out.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", LC_ALL="C")
    return out


@dataclass(frozen=True, kw_only=True)
class PatchResult:
    path: str
    status: Literal["applied", "already-applied"]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status}


@dataclass(frozen=True, kw_only=True)
class TargetResult:
    target: Target
    path: str
    ref: OverrideRef | None
    source: str | None
    previous_commit: str | None
    commit: str | None
    discarded_changes: int
    patches: tuple[PatchResult, ...]
    installed: str | None  # the directory pip installed, None when not reinstalled
    commands: tuple[CommandResult, ...]

    def summary(self) -> str:
        bits = []
        if self.ref is not None and self.commit:
            bits.append(f"{self.ref.spelled} -> {self.commit[:12]}")
        for patch in self.patches:
            bits.append(f"{os.path.basename(patch.path)} {patch.status}")
        if self.installed:
            bits.append(f"pip install -e {self.installed}")
        return f"{self.target}: " + ", ".join(bits) if bits else f"{self.target}: nothing to do"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "path": self.path,
            "ref": self.ref.to_json() if self.ref else None,
            "source": self.source,
            "previous_commit": self.previous_commit,
            "commit": self.commit,
            "discarded_changes": self.discarded_changes,
            "patches": [p.to_json() for p in self.patches],
            "installed": self.installed,
            "commands": [c.to_json() for c in self.commands],
        }


def _fail(
    what: str, hint: str, log: _Log, plan: TargetPlan, cls: type[OverrideFailed] = OverrideFailed
) -> OverrideFailed:
    return cls(
        what,
        hint=hint,
        details={
            "target": plan.target,
            "path": plan.path,
            "commands": [c.to_json() for c in log.commands],
        },
    )


def apply_patch(
    repo: str,
    patch: Path,
    *,
    env: Mapping[str, str],
    timeout: float,
    run: Runner = run_command,
    log: _Log | None = None,
    plan: TargetPlan | None = None,
) -> PatchResult:
    """``git apply --check`` → apply; else ``--reverse --check`` → already applied; else
    :class:`PatchConflict` naming the patch and git's complaint about the failing hunk."""
    log = log if log is not None else _Log()
    genv = _git_env(env)

    def git(*args: str) -> CommandResult:
        result = run(["git", "-C", repo, *args], timeout=timeout, env=genv)
        log.commands.append(result)
        return result

    check = git("apply", "--check", "--", str(patch))
    if check.ok:
        applied = git("apply", "--", str(patch))
        if not applied.ok:
            raise OverrideFailed(
                f"patch {patch} passed `git apply --check` in {repo} but applying it failed: "
                f"{applied.describe()}\n{applied.output_tail()}",
                hint="check the file system is writable",
                details={"commands": [c.to_json() for c in log.commands]},
            )
        return PatchResult(path=str(patch), status="applied")
    reverse = git("apply", "--reverse", "--check", "--", str(patch))
    if reverse.ok:
        return PatchResult(path=str(patch), status="already-applied")
    if check.returncode is None:
        raise OverrideFailed(
            f"cannot check patch {patch} in {repo}: {check.describe()}",
            hint="is git installed in the container?",
            details={"commands": [c.to_json() for c in log.commands]},
        )
    where = f" ({plan.target} checkout)" if plan is not None else ""
    raise PatchConflict(
        f"patch {patch} does not apply to {repo}{where} and is not already applied:\n"
        f"{check.output_tail(30)}",
        hint="rebase the patch on the override's commit, or drop it with the override",
        details={"patch": str(patch), "commands": [c.to_json() for c in log.commands]},
    )


def run_target(
    plan: TargetPlan,
    *,
    remote: str,
    python: str,
    pip_args: Sequence[str],
    env: Mapping[str, str],
    git_timeout: float,
    install_timeout: float,
    run: Runner = run_command,
) -> TargetResult:
    log = _Log()
    genv = _git_env(env)

    def git(*args: str, timeout: float = git_timeout) -> CommandResult:
        result = run(["git", "-C", plan.path, *args], timeout=timeout, env=genv)
        log.commands.append(result)
        return result

    top = git("rev-parse", "--show-toplevel")
    if not top.ok:
        missing = top.start_error is not None
        raise _fail(
            f"the {plan.target} checkout {plan.path} is not a git work tree: "
            f"{top.describe()}\n{top.output_tail(5)}",
            "install git in the image" if missing else f"point --{plan.target}-path at it",
            log,
            plan,
        )
    repo = top.stdout.strip() or plan.path
    head = git("rev-parse", "--verify", "-q", "HEAD")
    previous = head.stdout.strip() if head.ok else None
    commit = None
    discarded = 0
    if plan.ref is not None:
        commit = _fetch(plan, remote, git, log)
        status = git("status", "--porcelain", "--untracked-files=no")
        discarded = len([ln for ln in status.stdout.splitlines() if ln.strip()])
        checkout = git("-c", "advice.detachedHead=false", "checkout", "--force", "--detach", commit)
        if not checkout.ok:
            raise _fail(
                f"cannot check out {commit} in {plan.path}: {checkout.describe()}\n"
                f"{checkout.output_tail()}",
                "check the work tree is writable",
                log,
                plan,
            )
    patches = tuple(
        apply_patch(repo, p, env=env, timeout=git_timeout, run=run, log=log, plan=plan)
        for p in plan.patches
    )
    installed = None
    if plan.ref is not None:
        install_dir = os.path.normpath(os.path.join(repo, plan.subdir))
        if not any(
            os.path.isfile(os.path.join(install_dir, n)) for n in ("pyproject.toml", "setup.py")
        ):
            raise _fail(
                f"{install_dir} has no pyproject.toml or setup.py: nothing to pip install",
                f"set --{plan.target}-subdir to the directory of the Python project",
                log,
                plan,
            )
        pip_env = dict(env)
        pip_env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
        probe = run([python, "-m", "pip", "--version"], timeout=120, env=pip_env)
        log.commands.append(probe)
        if not probe.ok:
            raise _fail(
                f"pip is not available to {python}: {probe.describe()}\n{probe.output_tail(5)}",
                "install pip in the image (overrides reinstall with pip install -e), or pass "
                "--python",
                log,
                plan,
            )
        argv = [python, "-m", "pip", "install", "--no-deps", *pip_args, "-e", install_dir]
        result = run(argv, timeout=install_timeout, env=pip_env)
        log.commands.append(result)
        if not result.ok:
            raise _fail(
                f"pip install -e {install_dir} failed: {result.describe()}\n"
                f"{result.output_tail(30)}",
                "read pip's output above; on a Python marked externally managed pass "
                "--pip-arg=--break-system-packages",
                log,
                plan,
            )
        installed = install_dir
    return TargetResult(
        target=plan.target,
        path=plan.path,
        ref=plan.ref,
        source=plan.source,
        previous_commit=previous,
        commit=commit,
        discarded_changes=discarded,
        patches=patches,
        installed=installed,
        commands=tuple(log.commands),
    )


def _fetch(plan: TargetPlan, remote: str, git: Any, log: _Log) -> str:
    ref = plan.ref
    assert ref is not None
    if ref.kind == "commit":
        have = git("rev-parse", "--verify", "-q", f"{ref.fetch}^{{commit}}")
        if have.ok:
            return str(have.stdout.strip())
        fetched = (
            git("fetch", "--no-tags", "--", remote, ref.fetch) if len(ref.fetch) == 40 else None
        )
        if fetched is None or not fetched.ok:
            fetched = git("fetch", "--no-tags", "--", remote)
        have = git("rev-parse", "--verify", "-q", f"{ref.fetch}^{{commit}}")
        if not have.ok:
            raise _fail(
                f"commit {ref.spelled} of the {plan.target} override was not found in {remote} "
                f"(or is ambiguous): {fetched.describe()}\n{fetched.output_tail(10)}",
                "give the full 40-digit commit, or the branch/PR that contains it",
                log,
                plan,
            )
        return str(have.stdout.strip())
    fetched = git("fetch", "--no-tags", "--", remote, ref.fetch)
    if not fetched.ok:
        raise _fail(
            f"cannot fetch {ref.fetch} ({ref.spelled}) for the {plan.target} override from "
            f"{remote}: {fetched.describe()}\n{fetched.output_tail(10)}",
            "check the PR number / branch exists and the remote is reachable",
            log,
            plan,
        )
    have = git("rev-parse", "--verify", "-q", "FETCH_HEAD^{commit}")
    if not have.ok:
        raise _fail(
            f"{ref.fetch} fetched from {remote} is not a commit", "give a branch or PR", log, plan
        )
    return str(have.stdout.strip())


@dataclass(frozen=True, kw_only=True)
class OverrideResult:
    targets: tuple[TargetResult, ...]

    def summary(self) -> str:
        if not self.targets:
            return "no overrides"
        return "; ".join(t.summary() for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        return {"targets": [t.to_json() for t in self.targets]}


def run_overrides(
    plan: OverridePlan, env: Mapping[str, str], *, run: Runner = run_command
) -> OverrideResult:
    results = []
    for target in plan.targets:
        try:
            results.append(
                run_target(
                    target,
                    remote=plan.remote,
                    python=plan.python,
                    pip_args=plan.pip_args,
                    env=env,
                    git_timeout=plan.git_timeout,
                    install_timeout=plan.install_timeout,
                    run=run,
                )
            )
        except OverrideFailed as err:
            err.details["done"] = [r.to_json() for r in results]
            raise
    return OverrideResult(targets=tuple(results))
