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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rocmenv.bootstrap.commands import CommandResult, Runner, run_command
from rocmenv.bootstrap.refs import OverridePlan, OverrideRef, Target, TargetPlan
from rocmenv.errors import OverrideFailed, PatchConflict

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
