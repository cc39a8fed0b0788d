"""`rocmenv tags/resolve/pin/validate` end to end, as a user runs them, against the real
registry: exit codes, messages, lockfile contents, a tag moved between pin and validate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from rocmenv.launcher._vendor.packaging.version import Version

pytestmark = pytest.mark.integration


def rocmenv(
    *args: str, cwd: Path, env: dict[str, str] | None = None
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
        timeout=120,
    )


def skopeo_copy(src: str, dst: str) -> None:
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            f"docker://{src}",
            f"docker://{dst}",
        ],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()  # a checkout root: config search stops here
    return tmp_path


@pytest.fixture
def moving_repo(registry: Any, family: Any) -> tuple[str, str, str]:
    """A private repository whose tag `miles-rocm720-mi35x` we can re-point."""
    repo = f"{registry.host}/rocmenv-test/moving-{uuid.uuid4().hex[:8]}"
    first, second = family["demo"].ref, family["sgl-new"].ref
    skopeo_copy(first, f"{repo}:miles-rocm720-mi35x")
    return repo, first, second


def test_tags_list_json_reports_every_tag_and_unparsed(
    registry: Any, tagset: Any, project: Path
) -> None:
    result = rocmenv(
        "tags", "list", f"{registry.host}/rocm/sgl-dev", "--all", "--json", cwd=project
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["total"] >= len(tagset)
    listed = {t["tag"] for t in data["tags"]}
    assert set(tagset.tags) <= listed
    unparsed = {u["tag"] for u in data["unparsed"]}
    assert unparsed == {e.tag for e in tagset if e.family == "unknown"} | (
        unparsed - set(tagset.tags)
    )
    assert data["stats"]["round_trips"] == 1


def test_resolve_newest_matching_and_digest(registry: Any, tagset: Any, project: Path) -> None:
    result = rocmenv(
        "resolve",
        f"{registry.host}/rocm/sgl-dev",
        "--rocm",
        "7.2",
        "--gpu",
        "mi35x",
        "--family",
        "nightly",
        "--digest",
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    tag = line.split(":", 2)[-1].split("@")[0]
    candidates = [
        e for e in tagset if e.family == "nightly" and e.gpu == "mi35x" and e.rocm.startswith("7.2")
    ]
    newest = max(candidates, key=lambda e: (e.date, e.suffix is None, Version(e.rocm)))
    assert tag == newest.tag
    assert "@sha256:" in line


def test_resolve_no_match_exits_1_naming_nearest(registry: Any, project: Path) -> None:
    result = rocmenv(
        "resolve", f"{registry.host}/rocm/sgl-dev", "--rocm", "7.2", "--gpu", "mi99x", cwd=project
    )
    assert result.returncode == 1
    assert "nearest candidates" in result.stderr and "differs in: gpu" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["ref", "parse", "rocm/SGL-dev"], 2, "rule: uppercase"),
        (["tags", "parse", "rocm/sgl-dev:x"], 2, "not a full image reference"),
        (["tags", "parse", "$(reboot)"], 2, "invalid tag"),
        (["resolve", "rocm/sgl-dev", "--before", "yesterday"], 2, "YYYYMMDD"),
        (["resolve", "rocm/sgl-dev", "--sglang", ">>0.5"], 2, "PEP 440"),
        (["validate", "rocm/sgl-dev:a b"], 2, "invalid image reference"),
        (["pin", "rocm/sgl-dev:$(id)"], 2, "invalid image reference"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    project: Path, args: list[str], code: int, text: str
) -> None:
    result = rocmenv(*args, cwd=project)
    assert result.returncode == code, result.stderr
    assert text in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_repository_exits_3(registry: Any, project: Path) -> None:
    result = rocmenv("tags", "list", f"{registry.host}/rocm/nope", cwd=project)
    assert result.returncode == 3
    assert "not found" in result.stderr


def test_pin_then_validate_then_moved_tag_then_update(
    moving_repo: tuple[str, str, str], project: Path
) -> None:
    repo, _first, second = moving_repo
    ref = f"{repo}:miles-rocm720-mi35x"
    pinned = rocmenv("pin", ref, cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    lock = json.loads((project / "rocmenv.lock").read_text())
    entry = lock["references"][ref]
    assert entry["tag"] == "miles-rocm720-mi35x" and entry["digest"].startswith("sha256:")
    old_digest = entry["digest"]

    ok = rocmenv("validate", "--json", cwd=project)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["ok"] is True

    skopeo_copy(second, ref)  # the nightly build overwrites the floating tag
    moved = rocmenv("validate", cwd=project)
    assert moved.returncode == 1
    assert old_digest in moved.stdout + moved.stderr
    data = json.loads(rocmenv("validate", "--json", cwd=project).stdout)
    result = data["results"][0]
    assert result["moved"] is True and result["locked_digest"] == old_digest
    assert result["current_digest"] != old_digest

    kept = rocmenv("pin", ref, cwd=project)  # without --update: the pin stays
    assert (
        kept.returncode == 0
        and json.loads((project / "rocmenv.lock").read_text())["references"][ref]["digest"]
        == old_digest
    )
    updated = rocmenv("pin", ref, "--update", cwd=project)
    assert updated.returncode == 0 and "updated" in updated.stdout
    assert rocmenv("validate", cwd=project).returncode == 0


def test_profile_pin_with_constraints_and_mirror(registry: Any, tagset: Any, project: Path) -> None:
    (project / "rocmenv.toml").write_text(
        f"""
default-profile = "ci"
[registry]
mirrors = {{ "docker.io" = ["{registry.host}"] }}
[profiles.ci]
extends = "rocm"
image = "rocm/sgl-dev"
rocm = "7.0"
gpu = "mi30x"
family = "nightly"
"""
    )
    result = rocmenv("pin", cwd=project)
    assert result.returncode == 0, result.stderr
    entry = json.loads((project / "rocmenv.lock").read_text())["profiles"]["ci"]
    assert entry["repository"] == "docker.io/rocm/sgl-dev"
    assert entry["registry"] == registry.host
    assert entry["constraints"] == {"family": "nightly", "gpu": "mi30x", "rocm": "7.0"}
    newest = max(
        (e for e in tagset if e.family == "nightly" and e.gpu == "mi30x" and e.rocm == "7.0"),
        key=lambda e: (e.date, e.suffix is None, Version(e.rocm)),
    )
    assert entry["tag"] == newest.tag
    assert rocmenv("validate", "--profile", "ci", cwd=project).returncode == 0


def test_corrupt_lockfile_is_reported_and_left_alone(project: Path) -> None:
    (project / "rocmenv.lock").write_text("{broken")
    result = rocmenv("validate", cwd=project)
    assert result.returncode == 2
    assert "not valid JSON" in result.stderr and "restore it" in result.stderr
    assert (project / "rocmenv.lock").read_text() == "{broken"


def test_registry_outage_is_exit_3_not_a_failed_check(project: Path) -> None:
    from tests.support.faultproxy import FaultProxy

    with FaultProxy.unreachable() as dead:
        result = rocmenv(
            "validate",
            f"{dead.host}/rocm/sgl-dev:x",
            cwd=project,
            env={"ROCMENV_REGISTRY_RETRIES": "0"},
        )
    assert result.returncode == 3
    assert "refused" in result.stderr.lower()


def test_wrong_password_never_appears_in_output(
    auth_registry: Any, tmp_path: Path, project: Path
) -> None:
    import base64

    secret = "wrong-but-secret-pw-77"
    (tmp_path / "dc").mkdir()
    auth = base64.b64encode(f"{auth_registry.username}:{secret}".encode()).decode()
    (tmp_path / "dc" / "config.json").write_text(
        json.dumps({"auths": {auth_registry.host: {"auth": auth}}})
    )
    result = rocmenv(
        "--debug",
        "tags",
        "list",
        f"{auth_registry.host}/rocm/sgl-dev",
        cwd=project,
        env={"DOCKER_CONFIG": str(tmp_path / "dc")},
    )
    assert result.returncode == 3
    assert auth_registry.username in result.stderr
    assert secret not in result.stderr + result.stdout and auth not in result.stderr + result.stdout


def test_two_pins_at_once_both_land(registry: Any, family: Any, project: Path) -> None:
    """Two `rocmenv pin` processes; a barrier inside the lockfile writer
    (tests/support/lock_race.py) holds each one at its write until the other is blocked on
    the lock or writing too, so the overlap happens every run (without the lock, one pin's
    entry is lost every run)."""
    root = Path(__file__).resolve().parents[3]
    env = {"PATH": os.environ["PATH"], "HOME": str(project), "PYTHONPATH": str(root)}
    rendezvous = project / ".rendezvous"
    rendezvous.mkdir()
    refs = [family["demo"].ref, family["sgl-new"].ref]
    code = (
        "import sys; from pathlib import Path; from tests.support import lock_race; "
        "lock_race.install(Path(sys.argv[1]), sys.argv[2], sys.argv[3]); "
        "from rocmenv.cli import main; raise SystemExit(main(['pin', sys.argv[4]]))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(rendezvous), me, other, ref],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, other, ref in (("a", "b", refs[0]), ("b", "a", refs[1]))
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert any((rendezvous / f"{n}.blocked").exists() for n in "ab")
    lock = json.loads((project / "rocmenv.lock").read_text())
    assert set(lock["references"]) == set(refs)
