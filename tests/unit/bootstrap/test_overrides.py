"""Overrides: ref validation (property-checked against git itself), PR-body parsing, and the
fetch / checkout / patch / install sequence against real git repositories on this host."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmenv.bootstrap.overrides import apply_patch, run_target
from rocmenv.bootstrap.refs import (
    TargetPlan,
    check_remote,
    make_plan,
    parse_pr_body,
    parse_ref,
    ref_format_problem,
)
from rocmenv.errors import InvalidGitRef, OverrideFailed, PatchConflict, UsageError

GIT = shutil.which("git")
needs_git = pytest.mark.requires("git")


def git_accepts(name: str) -> bool:
    assert GIT is not None
    done = subprocess.run(
        [GIT, "check-ref-format", "--allow-onelevel", name], capture_output=True, check=False
    )
    return done.returncode == 0


# ------------------------------------------------------------------ refs


def test_pr_number_means_the_pull_head_ref() -> None:
    ref = parse_ref("#123")
    assert (ref.kind, ref.fetch) == ("pr", "refs/pull/123/head")


@pytest.mark.parametrize("value", ["abc1234", "ABCDEF0123", "0" * 40])
def test_seven_to_forty_hex_digits_are_a_commit(value: str) -> None:
    ref = parse_ref(value)
    assert (ref.kind, ref.fetch) == ("commit", value.lower())


@pytest.mark.parametrize(
    "value", ["main", "feature/rocm-fix", "v0.5.8", "refs/heads/x", "release/0.5.x", "abc12"]
)
def test_branch_and_tag_names_are_refs(value: str) -> None:
    assert parse_ref(value).kind == "ref"


@pytest.mark.parametrize(
    "value",
    [
        "-main", "--upload-pack=evil", "a b", "a\tb", "a..b", "a@{1}", "@", "a~1", "a^",
        "a:b", "a?", "a*", "a[b", "a\\b", "/a", "a/", "a//b", "a.", ".a", "a/.b",
        "a.lock", "a/b.lock/c", "a\x01b", "a\x7fb", "#0", "#-1", "#12a", "#", "",
        "x" * 256,
    ],
)  # fmt: skip
def test_refs_git_must_not_see_are_refused(value: str) -> None:
    with pytest.raises(InvalidGitRef) as caught:
        parse_ref(value)
    assert caught.value.exit_code == 2


REF_ALPHABET = st.sampled_from(
    [*"abcXYZ019/.-_@{}~^:?*[\\ \t\n\x01\x7f#+=,é", "lock", ".lock", "..", "@{", "//"]
)


@needs_git
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(REF_ALPHABET, min_size=1, max_size=12).map("".join))
def test_ref_validation_agrees_with_git_check_ref_format(name: str) -> None:
    ours = ref_format_problem(name) is None
    if ours:
        assert git_accepts(name), f"accepted {name!r}, git refuses it"
    elif not name.startswith("-") and len(name.encode()) <= 255:
        assert not git_accepts(name), f"refused {name!r} ({ref_format_problem(name)}), git takes it"


@pytest.mark.parametrize("remote", ["origin", "upstream-2", "/srv/git/sglang.git",
                                    "https://github.com/sgl-project/sglang.git",
                                    "git@github.com:sgl-project/sglang.git"])  # fmt: skip
def test_remotes_may_be_names_paths_or_urls(remote: str) -> None:
    assert check_remote(remote) == remote


@pytest.mark.parametrize("remote", ["-origin", "--upload-pack=x", "a b", "", "origin\n"])
def test_remotes_that_look_like_options_are_refused(remote: str) -> None:
    with pytest.raises(InvalidGitRef):
        check_remote(remote)


# ------------------------------------------------------------------ PR bodies


def test_pr_body_keys_in_any_case_with_markdown_and_quotes() -> None:
    body = (
        "## Motivation\r\nFix MoE on ROCm.\r\n\r\n"
        "- CI-SGLang-PR: `#12345`\r\n"
        "* `ci-megatron-pr`: 'rocm/fix-te'\r\n"
    )
    assert parse_pr_body(body) == {"sglang": "#12345", "megatron": "rocm/fix-te"}


def test_pr_body_last_line_wins_and_empty_values_are_ignored() -> None:
    body = "ci-sglang-pr: #1\nci-sglang-pr: abcdef1 (needs the fix)\nci-sglang-pr:\n"
    assert parse_pr_body(body) == {"sglang": "abcdef1"}


def test_pr_body_ignores_template_comments_and_other_keys() -> None:
    body = (
        "<!-- To test with another SGLang, add a line:\nci-sglang-pr: #123\n-->\n"
        "ci-sglang-pr-extra: x\nmy ci-sglang-pr: #9\n> ci-megatron-pr: main\n"
    )
    assert parse_pr_body(body) == {"megatron": "main"}


def test_pr_body_values_are_validated_by_the_plan(tmp_path: Path) -> None:
    refs = {t: (v, "pr-body") for t, v in parse_pr_body("ci-sglang-pr: --upload-pack=x").items()}
    with pytest.raises(InvalidGitRef, match="sglang override"):
        make_plan(refs=refs, patches=[], paths={}, subdirs={}, cwd=tmp_path)


def test_plan_requires_a_target_for_a_patch_when_it_is_ambiguous(tmp_path: Path) -> None:
    patch = tmp_path / "p.patch"
    patch.write_text("")
    refs: dict[Any, tuple[str, str]] = {"sglang": ("#1", "flag"), "megatron": ("main", "flag")}
    with pytest.raises(UsageError, match="say which checkout"):
        make_plan(refs=refs, patches=["p.patch"], paths={}, subdirs={}, cwd=tmp_path)
    plan = make_plan(refs=refs, patches=["megatron=p.patch"], paths={}, subdirs={}, cwd=tmp_path)
    assert [(t.target, t.patches) for t in plan.targets] == [("sglang", ()), ("megatron", (patch,))]


def test_plan_refuses_a_missing_patch_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        make_plan(refs={}, patches=["sglang=nope.patch"], paths={}, subdirs={}, cwd=tmp_path)


def test_plan_without_overrides_or_patches_is_empty(tmp_path: Path) -> None:
    assert make_plan(refs={}, patches=[], paths={}, subdirs={}, cwd=tmp_path).empty


# ------------------------------------------------------------------ real git, host side


def git(cwd: Path, *args: str) -> str:
    assert GIT is not None
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
    done = subprocess.run(
        [GIT, "-C", str(cwd), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> dict[str, str]:
    """A bare 'upstream' with main, a branch, a PR ref and a commit only a PR reaches; a
    checkout cloned from it; a patch; a fake python that records pip calls."""
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "python").mkdir()
    (work / "python" / "pyproject.toml").write_text("[project]\nname='sglang'\nversion='0'\n")
    (work / "python" / "mod.py").write_text("VALUE = 1\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "base")
    base = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-qb", "feature/x")
    (work / "python" / "mod.py").write_text("VALUE = 2\n")
    git(work, "commit", "-qam", "feature")
    feature = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")
    git(work, "checkout", "-q", "--detach")
    (work / "python" / "mod.py").write_text("VALUE = 3\n")
    git(work, "commit", "-qam", "pr 7")
    pr = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")
    git(work, "update-ref", "refs/pull/7/head", pr)
    bare = tmp_path / "upstream.git"
    git(tmp_path, "clone", "-q", "--no-local", "--mirror", str(work), str(bare))
    checkout = tmp_path / "sglang"
    git(tmp_path, "clone", "-q", "--no-local", str(bare), str(checkout))
    patch = tmp_path / "rocm.patch"
    patch.write_text(
        "--- a/python/mod.py\n+++ b/python/mod.py\n@@ -1 +1,2 @@\n VALUE = 3\n+ROCM = True\n"
    )
    log = tmp_path / "pip.log"
    fake = tmp_path / "fakepython"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit 0\n')
    fake.chmod(0o755)
    return {"base": base, "feature": feature, "pr": pr, "checkout": str(checkout),
            "patch": str(patch), "python": str(fake), "pip_log": str(log), "bare": str(bare)}  # fmt: skip


def plan_for(up: dict[str, str], value: str | None, patches: tuple[str, ...] = ()) -> TargetPlan:
    return TargetPlan(
        target="sglang",
        path=up["checkout"],
        subdir="python",
        ref=parse_ref(value) if value else None,
        source="flag",
        patches=tuple(Path(p) for p in patches),
    )


def run(up: dict[str, str], plan: TargetPlan):
    return run_target(plan, remote="origin", python=up["python"], pip_args=(), env=dict(os.environ),
                      git_timeout=60, install_timeout=60)  # fmt: skip


@needs_git
def test_override_by_pr_number_checks_out_the_pull_head_patches_and_installs(
    upstream: dict[str, str],
) -> None:
    result = run(upstream, plan_for(upstream, "#7", (upstream["patch"],)))
    assert result.commit == upstream["pr"]
    assert result.previous_commit == upstream["base"]
    assert git(Path(upstream["checkout"]), "rev-parse", "HEAD") == upstream["pr"]
    assert [p.status for p in result.patches] == ["applied"]
    assert "ROCM = True" in (Path(upstream["checkout"]) / "python" / "mod.py").read_text()
    pip = Path(upstream["pip_log"]).read_text().splitlines()
    assert pip[-1] == f"-m pip install --no-deps -e {upstream['checkout']}/python"
    assert result.installed == f"{upstream['checkout']}/python"
    assert any(c.argv[3:5] == ("fetch", "--no-tags") for c in result.commands)


@needs_git
def test_override_by_branch_and_by_short_and_full_sha(upstream: dict[str, str]) -> None:
    assert run(upstream, plan_for(upstream, "feature/x")).commit == upstream["feature"]
    # short sha of a commit only refs/pull/7/head reaches: not fetched by default refspecs
    with pytest.raises(OverrideFailed, match="was not found"):
        run(upstream, plan_for(upstream, upstream["pr"][:9]))
    assert run(upstream, plan_for(upstream, upstream["pr"])).commit == upstream["pr"]
    assert run(upstream, plan_for(upstream, upstream["base"][:8])).commit == upstream["base"]


@needs_git
def test_patch_already_applied_is_skipped_and_a_conflict_names_the_hunk(
    upstream: dict[str, str],
) -> None:
    run(upstream, plan_for(upstream, "#7", (upstream["patch"],)))
    again = run(upstream, plan_for(upstream, None, (upstream["patch"],)))
    assert [p.status for p in again.patches] == ["already-applied"]
    assert again.installed is None  # patches alone do not reinstall
    with pytest.raises(PatchConflict) as caught:
        run(upstream, plan_for(upstream, "feature/x", (upstream["patch"],)))
    text = str(caught.value)
    assert upstream["patch"] in text and "python/mod.py" in text
    assert caught.value.exit_code == 1


@needs_git
def test_checkout_discards_local_changes_and_counts_them(upstream: dict[str, str]) -> None:
    (Path(upstream["checkout"]) / "python" / "mod.py").write_text("VALUE = 'local'\n")
    result = run(upstream, plan_for(upstream, "#7"))
    assert result.discarded_changes == 1
    assert (Path(upstream["checkout"]) / "python" / "mod.py").read_text() == "VALUE = 3\n"


@needs_git
def test_fetch_of_a_missing_pr_fails_with_the_git_output(upstream: dict[str, str]) -> None:
    with pytest.raises(OverrideFailed, match=r"cannot fetch refs/pull/99/head \(#99\)") as caught:
        run(upstream, plan_for(upstream, "#99"))
    commands = caught.value.details["commands"]
    assert commands[-1]["argv"][3:] == ["fetch", "--no-tags", "--", "origin", "refs/pull/99/head"]
    assert commands[-1]["returncode"] != 0


@needs_git
def test_not_a_checkout_is_a_clear_failure(tmp_path: Path, upstream: dict[str, str]) -> None:
    plan = TargetPlan(target="megatron", path=str(tmp_path / "nothing"), subdir=".",
                      ref=parse_ref("main"), source="flag")  # fmt: skip
    with pytest.raises(OverrideFailed, match="is not a git work tree"):
        run(upstream, plan)


@needs_git
def test_missing_project_file_in_the_subdir_fails_before_pip(upstream: dict[str, str]) -> None:
    plan = TargetPlan(target="sglang", path=upstream["checkout"], subdir="docs",
                      ref=parse_ref("#7"), source="flag")  # fmt: skip
    with pytest.raises(OverrideFailed, match=r"no pyproject\.toml or setup\.py"):
        run(upstream, plan)
    assert not Path(upstream["pip_log"]).exists()


@needs_git
def test_without_pip_the_install_fails_with_a_hint(
    upstream: dict[str, str], tmp_path: Path
) -> None:
    nopip = tmp_path / "nopip"
    nopip.write_text("#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n")
    nopip.chmod(0o755)
    with pytest.raises(OverrideFailed, match="pip is not available") as caught:
        run_target(plan_for(upstream, "#7"), remote="origin", python=str(nopip), pip_args=(),
                   env=dict(os.environ), git_timeout=60, install_timeout=60)  # fmt: skip
    assert "install pip" in (caught.value.hint or "")


@needs_git
def test_apply_patch_outside_a_repo_reports_conflict_not_crash(tmp_path: Path) -> None:
    patch = tmp_path / "x.patch"
    patch.write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchConflict, match=re.escape(str(patch))):
        apply_patch(str(tmp_path), patch, env=dict(os.environ), timeout=30)


def test_python_running_the_tests_is_the_default_installer() -> None:
    from rocmenv.bootstrap.steps import BootstrapOptions

    assert BootstrapOptions().python == sys.executable
