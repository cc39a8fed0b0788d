"""`rocmenv drift` end to end against the real registry and engine: a tag re-pointed between
`pin` and `drift`, newer dated tags, `--inspect` pulling and probing both images, and
registry outages that must read as "could not check" (exit 3), never as "no drift"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocmenv.image.lock import read_lock, update_lock
from tests.support import testenv
from tests.support.faultproxy import FaultProxy, Match, status

pytestmark = pytest.mark.integration

FLOATING = "miles-rocm720-mi35x"
ENGINES = ("docker-api", "docker-cli")


def rocmenv(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    full_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "ROCMENV_REGISTRY_BACKOFF": "0.01",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def drift_json(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, Any]:
    result = rocmenv("drift", "--format", "json", *args, cwd=cwd, env=env)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()  # a checkout root: the config search stops here
    return tmp_path


@pytest.fixture
def moved(registry: Any, family: Any, scratch_repo: str, project: Path) -> dict[str, str]:
    """Image A (old aiter) pinned under a floating tag, then image B pushed under it."""
    ref = f"{registry.host}/{scratch_repo}:{FLOATING}"
    old = registry.push_manifest_copy(family["demo"].ref, scratch_repo, FLOATING)
    pinned = rocmenv("pin", ref, cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    new = registry.push_manifest_copy(family["sgl-new"].ref, scratch_repo, FLOATING)
    assert old != new
    return {"ref": ref, "old": old, "new": new}


def test_pinned_tag_that_did_not_move_is_no_drift(
    registry: Any, family: Any, scratch_repo: str, project: Path
) -> None:
    ref = f"{registry.host}/{scratch_repo}:v0.5.8-rocm700-mi30x-20260215"
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, "v0.5.8-rocm700-mi30x-20260215")
    assert rocmenv("pin", ref, cwd=project).returncode == 0
    code, data = drift_json(cwd=project)
    assert code == 0, data
    assert data["status"] == "ok" and data["exit_code"] == 0
    (image,) = data["images"]
    assert (image["tag_state"], image["moved"], image["newer"]) == ("same", False, False)
    assert image["newer_basis"] == "nightly" and image["accept"] is None
    text = rocmenv("drift", cwd=project)
    assert text.returncode == 0 and "no drift" in text.stdout


def test_moved_floating_tag_is_drift_and_fail_on_decides_the_exit_code(
    moved: dict[str, str], project: Path
) -> None:
    code, data = drift_json(cwd=project)
    assert code == 1
    (image,) = data["images"]
    assert image["tag_state"] == "moved" and image["moved"] is True
    assert image["pinned_digest"] == moved["old"] and image["current_digest"] == moved["new"]
    assert image["accept"] == f"rocmenv pin --update {moved['ref']}"
    assert image["inspect"] is None  # no pulls without --inspect
    assert data["stats"]["round_trips"] == 1  # one HEAD: a moving tag has no "newer"

    text = rocmenv("drift", cwd=project)
    assert text.returncode == 1
    assert f"pinned {moved['old']}" in text.stdout and f"now    {moved['new']}" in text.stdout
    assert f"accept: rocmenv pin --update {moved['ref']}" in text.stdout

    for fail_on, expected in (("never", 0), ("newer", 0), ("moved", 1), ("any", 1)):
        result = rocmenv("drift", "--fail-on", fail_on, cwd=project)
        assert result.returncode == expected, (fail_on, result.stdout, result.stderr)
        assert "1 moved" in result.stdout

    gha = rocmenv("drift", "--fail-on", "newer", cwd=project, env={"GITHUB_ACTIONS": "true"})
    assert f"::warning title=rocmenv drift::{moved['ref']} moved from {moved['old']}" in gha.stderr
    gha = rocmenv("drift", cwd=project, env={"GITHUB_ACTIONS": "true"})
    assert "::error title=rocmenv drift::" in gha.stderr

    accepted = rocmenv("pin", "--update", moved["ref"], cwd=project)
    assert accepted.returncode == 0, accepted.stderr
    assert rocmenv("drift", cwd=project).returncode == 0


def _images() -> list[str]:
    done = subprocess.run(
        ["docker", "images", "--all", "--no-trunc", "--format", "{{.ID}} {{.Repository}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(done.stdout.splitlines())


# "registry": streamed from the registry (the default); the engines: pulled and probed
@pytest.mark.parametrize("engine", ["registry", *ENGINES, "podman"])
def test_inspect_shows_the_package_diff_and_that_the_shim_can_be_retired(
    engine: str, moved: dict[str, str], scratch_repo: str, project: Path
) -> None:
    if engine == "podman":
        testenv.need("podman")
    how = (
        ("--inspect-from", "registry")
        if engine == "registry"
        else ("--inspect-from", "engine", "--engine", engine)
    )
    before = [line for line in _images() if scratch_repo in line]
    code, data = drift_json("--inspect", *how, cwd=project)
    assert code == 1, data
    inspect = data["images"][0]["inspect"]
    assert inspect["error"] is None, inspect
    assert inspect["against"] == "moved"
    assert inspect["new_reference"].endswith(f"{scratch_repo}@{moved['new']}")
    changes = {c["name"]: (c["pinned"], c["new"], c["change"]) for c in inspect["packages"]}
    assert changes["amd-aiter"] == ("0.1.9.post1", "0.1.14", "upgraded")
    assert changes["sglang"] == ("0.5.8", "0.5.13", "upgraded")
    assert changes["megatron-core"] == (None, "0.15.0", "added")
    assert (inspect["pinned"]["rocm"], inspect["new"]["rocm"]) == ("7.0.0-38", "7.2.0-43")
    (shim,) = [s for s in inspect["shims"] if s["name"] == "aiter-shuffle-scale"]
    assert (shim["pinned"], shim["new"], shim["verdict"]) == (True, False, "retire")
    assert data["probes"] == 2

    if engine == "registry":  # nothing entered the engine's image store
        assert [line for line in _images() if scratch_repo in line] == before == []
        assert data["inspect_bytes"] > 0  # the layers were read from the registry instead
    else:
        assert data["inspect_bytes"] is None
    md = rocmenv("drift", "--inspect", *how, "--format", "markdown", cwd=project)
    assert md.returncode == 1, md.stderr
    assert (
        "`aiter-shuffle-scale`: needed in pinned image, not needed in new one\\: can be retired"
        in md.stdout  # (escaped markdown text: rendered as it reads)
    )
    assert "| amd-aiter | 0.1.9.post1 | 0.1.14 | upgraded |" in md.stdout
    assert "<details><summary>Package changes" in md.stdout

    leftovers = subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Image}}"], capture_output=True, text=True, check=True
    )
    assert scratch_repo not in leftovers.stdout  # the probe containers were removed


def test_newer_dated_tag_for_a_constraint_resolved_profile(
    registry: Any, family: Any, scratch_repo: str, project: Path
) -> None:
    (project / "rocmenv.toml").write_text(
        f"""
[profiles.nightly]
extends = "cpu"
image = "{registry.host}/{scratch_repo}"
gpu = "mi35x"
rocm = "7.2"
family = "nightly"
"""
    )
    registry.push_manifest_copy(
        family["sgl-new"].ref, scratch_repo, "v0.5.13-rocm720-mi35x-20260601"
    )
    assert rocmenv("pin", "--profile", "nightly", cwd=project).returncode == 0
    assert rocmenv("drift", "--fail-on", "newer", cwd=project).returncode == 0

    newest = registry.push_manifest_copy(
        family["demo"].ref, scratch_repo, "v0.5.13-rocm720-mi35x-20260602"
    )
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, "v0.5.13-rocm720-mi30x-20260603")
    code, data = drift_json("--fail-on", "newer", "--profile", "nightly", cwd=project)
    assert code == 1, data
    (image,) = data["images"]
    assert image["kind"] == "profile" and image["key"] == "nightly"
    assert image["newer_basis"] == "constraints" and image["tag_state"] == "same"
    assert image["newer_tags"] == ["v0.5.13-rocm720-mi35x-20260602"]
    assert image["newest"] == {"tag": "v0.5.13-rocm720-mi35x-20260602", "digest": newest}
    assert image["accept"] == "rocmenv pin --update --profile nightly"
    assert rocmenv("drift", "--fail-on", "moved", cwd=project).returncode == 0
    gha = rocmenv("drift", cwd=project, env={"GITHUB_ACTIONS": "true"})
    assert "::error title=rocmenv drift::profile nightly: " in gha.stderr
    assert "newer tag v0.5.13-rocm720-mi35x-20260602" in gha.stderr

    # `--inspect` compares with what `pin --update` would pick: the newest matching tag
    code, data = drift_json("--inspect", cwd=project)
    inspect = data["images"][0]["inspect"]
    assert code == 1 and inspect["against"] == "newer" and inspect["error"] is None
    shim = {s["name"]: s["verdict"] for s in inspect["shims"]}
    assert shim["aiter-shuffle-scale"] == "newly-needed"

    assert rocmenv("pin", "--update", "--profile", "nightly", cwd=project).returncode == 0
    assert rocmenv("drift", cwd=project).returncode == 0


def test_newer_nightly_sibling_of_a_fixed_tag_and_unpinned_profile_is_usage_error(
    registry: Any, family: Any, scratch_repo: str, project: Path
) -> None:
    ref = f"{registry.host}/{scratch_repo}:v0.5.8-rocm700-mi30x-20260215"
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, "v0.5.8-rocm700-mi30x-20260215")
    assert rocmenv("pin", ref, cwd=project).returncode == 0
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, "v0.5.9-rocm700-mi30x-20260301")
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, "v0.5.9-rocm720-mi30x-20260302")
    code, data = drift_json("--fail-on", "newer", cwd=project)
    assert code == 1
    assert data["images"][0]["newer_tags"] == ["v0.5.9-rocm700-mi30x-20260301"]
    assert data["images"][0]["accept"].endswith(f"{scratch_repo}:v0.5.9-rocm700-mi30x-20260301")
    unpinned = rocmenv("drift", "--profile", "ci", cwd=project)
    assert unpinned.returncode == 2 and "not pinned" in unpinned.stderr


def test_tag_gone_from_the_registry_is_drift(
    registry: Any, family: Any, scratch_repo: str, project: Path
) -> None:
    ref = f"{registry.host}/{scratch_repo}:{FLOATING}"
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, FLOATING)
    assert rocmenv("pin", ref, cwd=project).returncode == 0
    lock_path = project / "rocmenv.lock"
    ((_key, entry),) = read_lock(lock_path).references.items()
    update_lock(
        lock_path,
        lambda lock: lock.with_reference("gone", replace(entry, tag="no-such-tag")),
        within=project,
    )
    code, data = drift_json("--fail-on", "moved", cwd=project)
    assert code == 1
    gone = next(i for i in data["images"] if i["key"] == "gone")
    assert gone["tag_state"] == "gone" and gone["moved"] is True
    assert "no longer exists" in gone["notes"][0]


def test_registry_answering_503_forever_is_could_not_check_with_partial_results(
    registry: Any, family: Any, scratch_repo: str, project: Path
) -> None:
    env = {"ROCMENV_REGISTRY_RETRIES": "2"}
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, FLOATING)
    direct = f"{registry.host}/{scratch_repo}:{FLOATING}"
    with FaultProxy(upstream=registry.host) as proxy:
        behind = f"{proxy.host}/{scratch_repo}:{FLOATING}"
        assert rocmenv("pin", direct, behind, cwd=project).returncode == 0
        proxy.add_rule(Match(), status(503), times=None)

        code, data = drift_json(cwd=project, env=env)
        assert code == 3, data
        assert data["status"] == "incomplete"
        assert data["summary"]["errors"] == 1
        by_key = {i["key"]: i for i in data["images"]}
        assert by_key[direct]["status"] == "ok"  # the partial result is there
        down = by_key[behind]
        assert down["status"] == "error" and down["tag_state"] == "unchecked"
        # the client gives up with the last answer (RegistryProtocolError "HTTP 503") or as
        # RegistryUnavailable, depending on its retry path: both are registry errors (exit 3)
        assert down["error"]["type"] in ("RegistryUnavailable", "RegistryProtocolError")
        assert "503" in down["error"]["message"]
        assert proxy.count(method="HEAD") == 3  # one try and two retries, then given up

        text = rocmenv("drift", "--fail-on", "never", cwd=project, env=env)
        assert text.returncode == 3
        assert "could NOT be checked" in text.stdout and "no drift" not in text.stdout
        assert "ERROR" in text.stdout and "ok " in text.stdout

        md = rocmenv("drift", "--format", "markdown", cwd=project, env=env)
        assert md.returncode == 3 and "**Could not check:**" in md.stdout

        only_up = rocmenv("drift", "--profile", "x", cwd=project, env=env)
        assert only_up.returncode == 2


def test_unreachable_registry_is_could_not_check_exit_3(
    registry: Any, family: Any, scratch_repo: str, project: Path
) -> None:
    registry.push_manifest_copy(family["demo"].ref, scratch_repo, FLOATING)
    ref = f"{registry.host}/{scratch_repo}:{FLOATING}"
    assert rocmenv("pin", ref, cwd=project).returncode == 0
    lock_path = project / "rocmenv.lock"
    (entry,) = read_lock(lock_path).references.values()
    with FaultProxy.unreachable() as nowhere:
        for n in range(3):
            moved_entry = replace(entry, repository=f"{nowhere.host}/{scratch_repo}-{n}")
            update_lock(
                lock_path,
                lambda lock, e=moved_entry, n=n: lock.with_reference(f"far{n}", e),
                within=project,
            )
        code, data = drift_json(cwd=project, env={"ROCMENV_REGISTRY_RETRIES": "1"})
    assert code == 3
    errors = [i for i in data["images"] if i["status"] == "error"]
    assert len(errors) == 3 and data["summary"]["errors"] == 3
    assert all(e["tag_state"] == "unchecked" for e in errors)
    assert next(i for i in data["images"] if i["key"] == ref)["status"] == "ok"


@pytest.mark.parametrize("engine", ENGINES)
def test_inspect_without_an_engine_is_exit_4_and_still_reports_the_drift(
    engine: str, moved: dict[str, str], project: Path
) -> None:
    env = {"DOCKER_HOST": f"unix://{project}/no-engine.sock"}
    code, data = drift_json(
        "--inspect", "--inspect-from", "engine", "--engine", engine, cwd=project, env=env
    )
    assert code == 4, data
    (image,) = data["images"]
    assert image["moved"] is True and image["current_digest"] == moved["new"]
    assert image["inspect"]["error"]["type"] in ("EngineUnavailable", "EngineError")
    assert data["summary"]["inspect_errors"] == 1


def test_inspect_from_the_registry_needs_no_engine(moved: dict[str, str], project: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{project}/no-engine.sock"}
    code, data = drift_json("--inspect", cwd=project, env=env)
    assert code == 1, data
    (image,) = data["images"]
    assert image["inspect"]["error"] is None
    assert image["inspect"]["new"]["rocm"] == "7.2.0-43"
