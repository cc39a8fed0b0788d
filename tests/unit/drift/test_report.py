"""`rocmenv drift` output: text, Markdown for $GITHUB_STEP_SUMMARY, stable JSON keys,
GitHub annotations and the help epilog's exit codes."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

from rocmenv.cli.drift import EPILOG, _annotate
from rocmenv.context import Context
from rocmenv.drift.check import ImageDrift, Inspection, Problem, Target, exit_code
from rocmenv.drift.inspect import compare, facts_from_probe
from rocmenv.drift.report import render_markdown, render_text, report_json
from rocmenv.image.lock import LockEntry
from tests.unit.drift.test_check import PROBE_NEW, PROBE_OLD

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64
REPO = "127.0.0.1:5000/rocmenv-test/x"


def entry(tag: str | None, constraints: dict[str, str] | None = None) -> LockEntry:
    return LockEntry(
        repository=REPO,
        tag=tag,
        digest=D1,
        media_type="application/vnd.docker.distribution.manifest.v2+json",
        platform="linux/amd64",
        platform_digest=D1,
        resolved_at="2026-06-01T10:00:00Z",
        registry="127.0.0.1:5000",
        constraints=tuple(sorted((constraints or {}).items())),
    )


def moved_with_inspection() -> ImageDrift:
    return ImageDrift(
        target=Target(kind="profile", key="ci", entry=entry("miles-rocm720-mi35x")),
        tag_state="moved",
        current_digest=D3,
        basis="moving",
        inspection=compare(
            "moved",
            facts_from_probe(f"{REPO}@{D1}", PROBE_OLD),
            facts_from_probe(f"{REPO}@{D3}", PROBE_NEW),
        ),
    )


def unchanged() -> ImageDrift:
    key = f"{REPO}:v0.5.8-rocm700-mi30x-20260215"
    return ImageDrift(
        target=Target(kind="reference", key=key, entry=entry("v0.5.8-rocm700-mi30x-20260215")),
        tag_state="same",
        current_digest=D1,
        basis="nightly",
    )


def newer_tag() -> ImageDrift:
    return ImageDrift(
        target=Target(kind="profile", key="nightly", entry=entry("v0.5.8-rocm700-mi30x-20260215")),
        tag_state="same",
        current_digest=D1,
        basis="nightly",
        newer_tags=("v0.5.8-rocm700-mi30x-20260301", "v0.5.8-rocm700-mi30x-20260220"),
        newest_digest=D2,
    )


def unreachable() -> ImageDrift:
    return ImageDrift(
        target=Target(kind="profile", key="far", entry=entry("v0.5.8-rocm700-mi30x-20260215")),
        problem=Problem(
            type="RegistryUnavailable",
            message="GET http://127.0.0.1:9/v2/ failed after 2 attempts: connection refused",
            hint="check that the registry is up",
        ),
    )


def test_text_names_old_and_new_digest_the_diff_the_shim_verdict_and_how_to_accept() -> None:
    text = render_text(
        [moved_with_inspection(), unchanged()], lockfile="rocmenv.lock", fail_on="any"
    )
    assert text.splitlines()[0].startswith("rocmenv drift: 2 pinned image(s): 1 moved")
    assert f"pinned {D1}" in text and f"now    {D3}" in text
    assert "~ amd-aiter 0.1.9.post1 → 0.1.14" in text
    assert "+ megatron-core 0.15.0" in text
    assert "ROCm 7.0.0-38 → 7.2.0-43" in text and "Python 3.11.2 (unchanged)" in text
    assert (
        "aiter-shuffle-scale: needed in pinned image, not needed in new one: can be retired" in text
    )
    assert "accept: rocmenv pin --update --profile ci" in text
    assert re.search(
        r"^ok +127\.0\.0\.1:5000/rocmenv-test/x:v0\.5\.8-rocm700-mi30x-20260215 \[ok\]$", text, re.M
    )


def test_text_never_says_no_drift_when_an_image_could_not_be_checked() -> None:
    text = render_text([unchanged(), unreachable()], lockfile="rocmenv.lock", fail_on="any")
    assert "no drift" not in text
    assert "1 could NOT be checked" in text
    assert "could not check: GET http://127.0.0.1:9/v2/" in text
    assert "no drift" in render_text([unchanged()], lockfile="l", fail_on="any")


def test_text_for_a_newer_fixed_tag_says_how_to_move_to_it() -> None:
    text = render_text([newer_tag()], lockfile="l", fail_on="newer", lock_arg="ci.lock")
    assert f"newer (nightly): v0.5.8-rocm700-mi30x-20260301 (+1 more) → {D2}" in text
    assert "set tag = 'v0.5.8-rocm700-mi30x-20260301' in profile 'nightly'" in text


def test_markdown_has_an_overview_table_a_table_per_drifted_image_and_collapsed_packages() -> None:
    md = render_markdown(
        [moved_with_inspection(), unchanged(), newer_tag(), unreachable()],
        lockfile="rocmenv.lock",
        fail_on="any",
    )
    lines = md.splitlines()
    assert lines[0] == "## rocmenv drift"
    header = lines.index("| image | pinned | status | newer |")
    assert lines[header + 1] == "|---|---|---|---|"
    rows = lines[header + 2 : header + 6]
    assert [r.split(" | ")[2] for r in rows] == ["moved", "ok", "newer", "could not check"]
    assert all(r.count("|") == 5 for r in rows)
    assert "### profile ci: moved" in md
    assert md.count("| | pinned | now |") == 3  # one per image that is not ok
    assert f"| digest | `{D1}` | `{D3}` |" in md
    assert "| ROCm | 7.0.0-38 | 7.2.0-43 |" in md
    assert "<details><summary>Package changes (3)</summary>" in md and "</details>" in md
    details = md[md.index("<details>") : md.index("</details>")]
    assert "| amd-aiter | 0.1.9.post1 | 0.1.14 | upgraded |" in details
    assert (
        "- `aiter-shuffle-scale`: needed in pinned image, not needed in new one\\: can be retired"
        in md  # (the image's text, escaped: rendered as it reads)
    )
    assert "Accept: `rocmenv pin --update --profile ci`" in md
    assert "**Could not check:**" in md
    # a blank line before every table, or GitHub renders it as text
    for i, line in enumerate(lines):
        if line.startswith("|") and not lines[i - 1].startswith("|"):
            assert lines[i - 1] == "", f"no blank line before table at line {i}: {line}"


def test_markdown_cells_escape_pipes() -> None:
    bad = replace(unreachable(), problem=Problem(type="X", message="a | b"))
    assert "a \\| b" in render_markdown([bad], lockfile="l", fail_on="any")


JSON_TOP = {
    "report_version", "lockfile", "fail_on", "exit_code", "status", "summary", "ratelimit", "stats",
    "probes", "inspect_bytes", "notes", "images",
}  # fmt: skip
JSON_IMAGE = {
    "kind", "key", "repository", "tag", "pinned_digest", "pinned_platform_digest", "status",
    "fails", "tag_state", "moved", "current_digest", "newer", "newer_basis", "newer_tags",
    "newest", "notes", "error", "accept", "inspect",
}  # fmt: skip
JSON_INSPECT = {"against", "new_reference", "pinned", "new", "packages", "shims", "error"}


def test_json_keys_are_stable_and_round_trip() -> None:
    results = [moved_with_inspection(), unchanged(), newer_tag(), unreachable()]
    data = report_json(
        results, lockfile="rocmenv.lock", fail_on="moved", code=exit_code(results, "moved")
    )
    data = json.loads(json.dumps(data))
    assert set(data) == JSON_TOP
    assert data["report_version"] == 1 and data["exit_code"] == 3 and data["status"] == "incomplete"
    assert data["summary"] == {
        "images": 4,
        "moved": 1,
        "newer": 1,
        "errors": 1,
        "inspect_errors": 0,
    }
    for image in data["images"]:
        assert set(image) == JSON_IMAGE
    moved, same, newer, down = data["images"]
    assert set(moved["inspect"]) == JSON_INSPECT
    assert moved["fails"] is True and newer["fails"] is False  # --fail-on moved
    assert moved["inspect"]["shims"][0]["verdict"] == "retire"
    assert moved["inspect"]["pinned"] == {
        "reference": f"{REPO}@{D1}",
        "python": "3.11.2",
        "rocm": "7.0.0-38",
        "packages": 2,
    }
    assert same["status"] == "ok" and same["accept"] is None and same["inspect"] is None
    assert newer["newest"] == {"tag": "v0.5.8-rocm700-mi30x-20260301", "digest": D2}
    assert down["status"] == "error" and down["error"]["type"] == "RegistryUnavailable"
    assert down["tag_state"] == "unchecked"


def test_github_annotations_error_when_counted_warning_when_not() -> None:
    def annotations(fail_on: str, *results: ImageDrift) -> list[str]:
        err = io.StringIO()
        ctx = Context(env={"GITHUB_ACTIONS": "true"}, stdout=io.StringIO(), stderr=err)
        _annotate(ctx, list(results), fail_on)
        return err.getvalue().splitlines()

    lines = annotations("any", moved_with_inspection(), unchanged())
    assert len(lines) == 1 and lines[0].startswith("::error title=rocmenv drift::profile ci: ")
    assert f"moved from {D1} to {D3}" in lines[0]
    assert annotations("newer", moved_with_inspection())[0].startswith("::warning ")
    assert annotations("never", unreachable())[0].startswith("::error ")
    failed = replace(
        moved_with_inspection(),
        inspection=Inspection(
            against="moved", new_reference="x", problem=Problem(type="E", message="m\nn")
        ),
    )
    assert (
        annotations("any", failed)[1]
        == "::error title=rocmenv drift::profile ci: inspection failed: m%0An"
    )
    plain = io.StringIO()
    _annotate(Context(env={}, stderr=plain), [moved_with_inspection()], "any")
    assert plain.getvalue() == ""


def test_help_epilog_documents_every_exit_code() -> None:
    for code in ("0", "1", "2", "3", "4"):
        assert re.search(rf"^  {code}  ", EPILOG, re.M), code
    assert 'never reported as "no drift"' in EPILOG
    assert "rocmenv pin --update" in EPILOG
