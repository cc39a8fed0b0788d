"""``rocmenv pull`` and ``gc --images`` against the real engine and the registry on :5000.

Each test pushes its own image of random (incompressible) layers, so the engine never has
them already and every byte crosses the wire; images pulled through the fault proxy are
named ``127.0.0.1:<proxy port>/…`` (loopback registries are insecure to dockerd by default).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rocmenv.registry.manifest import sha256_digest
from tests.support import testenv
from tests.support.faultproxy import FaultProxy, Match, status, too_many_requests, truncate

ENGINES = ("docker-api", "docker-cli")
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def push_random_image(repo: str, tag: str, sizes: tuple[int, ...]) -> tuple[str, list[str]]:
    """Push an image of random layers; returns (manifest digest, layer digests)."""
    layers, diff_ids = [], []
    for index, size in enumerate(sizes):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            info = tarfile.TarInfo(f"data/blob-{index}")
            info.size = size
            tar.addfile(info, io.BytesIO(os.urandom(size)))
        diff_ids.append(sha256_digest(raw.getvalue()))
        layers.append(gzip.compress(raw.getvalue(), compresslevel=1, mtime=0))
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/true"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    ).encode()
    with testenv.RegistryClient(host="127.0.0.1:5000") as client:
        client.upload_blob(repo, config)
        for blob in layers:
            client.upload_blob(repo, blob)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST,
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": len(config),
                    "digest": sha256_digest(config),
                },
                "layers": [
                    {"mediaType": LAYER, "size": len(blob), "digest": sha256_digest(blob)}
                    for blob in layers
                ],
            }
        ).encode()
        digest = client.put_manifest(repo, tag, manifest, MANIFEST)
    return digest, [sha256_digest(blob) for blob in layers]


def rocmenv(
    home: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        **(env or {}),
    }
    full.pop("GITHUB_ACTIONS", None) if "GITHUB_ACTIONS" not in (env or {}) else None
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        cwd=home,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def image_id(ref: str, cli: str = "docker") -> str | None:
    done = subprocess.run(
        [cli, "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    found = done.stdout.strip()
    if done.returncode != 0:
        return None
    return found if ":" in found else f"sha256:{found}"  # podman: the bare hex


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    refs: list[str] = []
    yield refs
    for ref in refs:
        if ref.startswith("podman:"):
            subprocess.run(["podman", "rmi", "--force", ref[7:]], capture_output=True, check=False)
        else:
            docker("image", "rm", "--force", ref)


PROGRESS = re.compile(
    r"rocmenv: pulling (?P<ref>\S+): (?P<done>[\d.]+ [kMG]?B)/(?P<total>[\d.]+ [kMG]?B) "
    r"\((?P<pct>\d+)%\), [\d.]+ [kMG]?B/s, ETA \S+"
)


@pytest.mark.parametrize("engine", [*ENGINES, "podman"])
def test_pull_off_a_terminal_prints_a_few_progress_lines_and_a_final_line(
    tmp_path: Path, scratch_repo: str, engine: str, cleanup: list[str]
) -> None:
    cli = "docker"
    if engine == "podman":
        testenv.need("podman")
        cli = "podman"
    push_random_image(scratch_repo, "t1", (2_000_000, 2_000_000, 2_000_000))
    ref = f"127.0.0.1:5000/{scratch_repo}:t1"
    cleanup.append(ref)
    done = rocmenv(tmp_path, "pull", "--engine", engine, ref)
    if cli == "podman":
        cleanup.pop()
        cleanup.append(f"podman:{ref}")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"rocmenv: pulling {ref} (6.0 MB to download in 3 of 3 layers)"
    progress = [m for m in map(PROGRESS.fullmatch, lines[1:-1]) if m]
    assert progress, done.stderr
    assert len(progress) == len(lines) - 2  # nothing else in between
    assert all(m["total"] == "6.0 MB" for m in progress)
    pcts = [int(m["pct"]) for m in progress]
    # the rate: a line at each new 10 % (the pull takes far less than 15 s), never more
    assert pcts == sorted(pcts) and len({p // 10 for p in pcts}) == len(pcts)
    assert pcts[-1] == 100
    assert re.fullmatch(
        rf"rocmenv: pulled {re.escape(ref)}: 6\.0 MB in \d+s \([\d.]+ [kMG]?B/s\)", lines[-1]
    )
    assert done.stdout.strip() == ref
    pulled = image_id(ref, cli)
    assert pulled is not None
    record = json.loads((tmp_path / "data" / "rocmenv" / "images.json").read_text())
    assert record["images"][pulled]["refs"] == [ref]


def test_pull_in_github_actions_is_one_collapsed_group(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    push_random_image(scratch_repo, "t1", (1_000_000,))
    ref = f"127.0.0.1:5000/{scratch_repo}:t1"
    cleanup.append(ref)
    done = rocmenv(tmp_path, "pull", ref, env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"::group::rocmenv: pulling {ref} (")
    assert lines[-1] == "::endgroup::"
    assert lines[-2].startswith(f"rocmenv: pulled {ref}: 1.0 MB in ")
    assert sum(line.startswith("::") for line in lines) == 2


def test_a_connection_dropped_mid_blob_is_retried_and_the_pull_succeeds(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    _, layers = push_random_image(scratch_repo, "t1", (3_000_000,))
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        blob = Match(method="GET", path=rf"/v2/{scratch_repo}/blobs/{layers[0]}")
        proxy.add_rule(blob, truncate(1_000_000), times=1)
        ref = f"{proxy.host}/{scratch_repo}:t1"
        cleanup.append(ref)
        done = rocmenv(tmp_path, "pull", "--retry-delay", "0.2", ref)
        assert done.returncode == 0, done.stderr
        assert proxy.count(method="GET", path=blob.path) >= 2  # dropped once, fetched again
    assert image_id(ref) is not None
    assert f"rocmenv: pulled {ref}: 3.0 MB" in done.stderr


def test_a_server_error_is_retried_by_rocmenv_saying_what_failed(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    push_random_image(scratch_repo, "t1", (500_000,))
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        # the engine GETs the manifest by digest (rocmenv's plan reads it by tag): only the
        # engine's pull sees the 503s, and the engine does not retry a manifest itself
        manifest = Match(method="GET", path=rf"/v2/{scratch_repo}/manifests/sha256:[0-9a-f]+")
        body = b'{"errors":[{"code":"UNAVAILABLE","message":"service unavailable"}]}'
        proxy.add_rule(manifest, status(503, {"Content-Type": "application/json"}, body), times=2)
        ref = f"{proxy.host}/{scratch_repo}:t1"
        cleanup.append(ref)
        done = rocmenv(tmp_path, "pull", "--retries", "4", "--retry-delay", "0.2", ref)
        assert proxy.count(method="GET", path=manifest.path) == 3
    assert done.returncode == 0, done.stderr
    assert re.search(rf"pull attempt 1 of {re.escape(ref)} failed \(.+\): .*503", done.stderr)
    assert "retrying in" in done.stderr


def test_a_429_storm_fails_clearly_naming_the_rate_limit(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    _, layers = push_random_image(scratch_repo, "t1", (500_000,))
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        blob = Match(method="GET", path=rf"/v2/{scratch_repo}/blobs/{layers[0]}")
        proxy.add_rule(blob, too_many_requests(None))
        ref = f"{proxy.host}/{scratch_repo}:t1"
        cleanup.append(ref)
        done = rocmenv(tmp_path, "pull", "--retries", "2", "--retry-delay", "0.2", ref)
        assert proxy.count(method="GET", path=blob.path) >= 2
    assert done.returncode == 3, done.stderr
    assert "rate limited by the registry (429)" in done.stderr  # the retry line
    assert "the registry is rate limiting pulls (HTTP 429 Too Many Requests)" in done.stderr
    assert "Traceback" not in done.stderr
    assert image_id(ref) is None


def test_the_disk_budget_refuses_a_pull_that_would_not_leave_the_reserve(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    push_random_image(scratch_repo, "t1", (500_000,))
    ref = f"127.0.0.1:5000/{scratch_repo}:t1"
    cleanup.append(ref)
    done = rocmenv(tmp_path, "pull", "--reserve", "1000t", ref)
    assert done.returncode == 4, done.stderr
    assert f"not enough disk to pull {ref}" in done.stderr
    assert "1.1 PB" in done.stderr or "TB must stay free" in done.stderr
    assert "rocmenv gc --images" in done.stderr
    assert image_id(ref) is None  # refused before the engine was asked
    again = rocmenv(tmp_path, "pull", ref, env={"ROCMENV_DISK_RESERVE": "1g"})
    assert again.returncode == 0, again.stderr


@pytest.mark.serial  # gc --images removes engine-wide images: alone
def test_gc_images_removes_exactly_the_unreferenced_images_rocmenv_pulled_oldest_first(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    refs = {}
    digests = {}
    for name in ("old", "locked", "used", "new", "foreign", "gone"):
        digests[name], _ = push_random_image(scratch_repo, name, (200_000,))
        refs[name] = f"127.0.0.1:5000/{scratch_repo}:{name}"
        cleanup.append(refs[name])
    for name in ("old", "locked", "used", "new", "gone"):
        done = rocmenv(tmp_path, "pull", refs[name])
        assert done.returncode == 0, done.stderr
    gone_id = image_id(refs["gone"])
    assert docker("image", "rm", refs["gone"]).returncode == 0  # removed by other means
    del refs["gone"]
    assert docker("pull", "-q", refs["foreign"]).returncode == 0  # plain docker pull
    ids = {name: image_id(ref) for name, ref in refs.items()}
    sizes = {
        name: int(docker("image", "inspect", "--format", "{{.Size}}", ref).stdout)
        for name, ref in refs.items()
    }
    lock = tmp_path / "rocmenv.lock"
    entry = {
        "repository": f"127.0.0.1:5000/{scratch_repo}",
        "tag": "locked",
        "digest": digests["locked"],
        "media_type": MANIFEST,
        "platform": "linux/amd64",
        "platform_digest": digests["locked"],
        "resolved_at": "2026-01-01T00:00:00Z",
    }
    lock.write_text(json.dumps({"lock_version": 1, "profiles": {}, "references": {"x": entry}}))
    container = docker("create", refs["used"], "/bin/true").stdout.strip()
    try:
        dry = rocmenv(tmp_path, "gc", "--images", "--lock", str(lock), "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert [i["id"] for i in report["would_remove"]] == [ids["old"], ids["new"]]
        assert all(image_id(ref) for ref in refs.values())  # a dry run removes nothing
        kept = {i["id"]: i["reason"] for i in report["kept"]}
        assert kept[ids["locked"]] == "referenced by a lockfile"
        assert kept[ids["used"]] == "used by a container"
        assert kept[ids["foreign"]] == "not pulled by rocmenv"

        done = rocmenv(tmp_path, "gc", "--images", "--lock", str(lock), "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert [i["id"] for i in report["removed"]] == [ids["old"], ids["new"]]
        assert report["removed_bytes"] == sizes["old"] + sizes["new"]
        assert report["reclaimed_bytes"] is not None  # the engine's disk is this machine's
        assert image_id(refs["old"]) is None and image_id(refs["new"]) is None
        for name in ("locked", "used", "foreign"):
            assert image_id(refs[name]) == ids[name], name
        record = json.loads((tmp_path / "data" / "rocmenv" / "images.json").read_text())
        assert set(record["images"]) == {ids["locked"], ids["used"]}  # and `gone` forgotten
        assert gone_id not in record["images"]
    finally:
        docker("rm", "-f", container)


def test_pull_of_a_profile_pulls_its_image_and_reports_json(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    push_random_image(scratch_repo, "t1", (100_000,))
    ref = f"127.0.0.1:5000/{scratch_repo}:t1"
    cleanup.append(ref)
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        f'[profiles.x]\nextends = "cpu"\nimage = "127.0.0.1:5000/{scratch_repo}"\ntag = "t1"\n'
    )
    done = rocmenv(tmp_path, "pull", "-p", "x", "--json")
    assert done.returncode == 0, done.stderr
    (pulled,) = json.loads(done.stdout)["pulled"]
    assert pulled["image"] == ref and pulled["attempts"] == 1
    assert pulled["downloaded"] == pulled["bytes"] > 100_000
    assert done.stderr == ""  # --json: no progress on stderr
    assert image_id(ref) is not None


def test_pull_says_the_rate_limit_state_the_registry_sends(tmp_path: Path) -> None:
    """The TLS test bed sends Docker Hub's ``ratelimit-*`` headers."""
    hub = testenv.HubTLS()
    problem = hub.problem()
    if problem:
        testenv.missing_environment(problem)
    ref = f"{hub.registry}/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
    try:
        done = rocmenv(tmp_path, "pull", ref, env={"ROCMENV_TOKEN_CACHE": "0"})
        assert done.returncode == 0, done.stderr
        assert re.search(
            rf"rocmenv: registry rate limit on {re.escape(hub.registry)}: \d+ of 100 pulls left "
            r"per 6h00m\n",
            done.stderr,
        ), done.stderr
    finally:
        docker("image", "rm", ref)  # the tag only: the image is the demo's


def test_pull_from_mirror_pulls_an_unpinned_image_through_the_mirror_too(
    tmp_path: Path, scratch_repo: str, cleanup: list[str]
) -> None:
    """Issue 30, item 6: a runner behind a mirror (``ROCMENV_PULL_FROM_MIRROR=1``) pulled a
    profile nobody pinned from Docker Hub itself — while ``doctor`` said pulls use the
    mirror. The image exists only in the local registry (the mirror), so a pull that went
    to Docker Hub could not succeed."""
    push_random_image(scratch_repo, "t1", (50_000,))
    mirror_ref = f"127.0.0.1:5000/{scratch_repo}:t1"
    cleanup.append(mirror_ref)
    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        f'[profiles.x]\nextends = "cpu"\nimage = "docker.io/{scratch_repo}"\ntag = "t1"\n'
    )
    env = {"ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000", "ROCMENV_PULL_FROM_MIRROR": "1"}
    done = rocmenv(tmp_path, "pull", "-p", "x", "--json", env=env)
    assert done.returncode == 0, done.stderr
    (pulled,) = json.loads(done.stdout)["pulled"]
    assert pulled["image"] == mirror_ref and image_id(mirror_ref) is not None
    # the same for --image and for what `options` renders as the job's image
    shown = rocmenv(tmp_path, "options", "-p", "x", "--format", "gha", "--json", env=env)
    assert json.loads(shown.stdout)["image"] == mirror_ref, shown.stderr
    done = rocmenv(tmp_path, "pull", f"docker.io/{scratch_repo}:t1", "--json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["pulled"][0]["image"] == mirror_ref
    # without pull-from-mirror the canonical reference is what the engine is asked for
    plain = rocmenv(tmp_path, "options", "-p", "x", "--format", "gha", "--json",
                    env={"ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000"})  # fmt: skip
    assert json.loads(plain.stdout)["image"] == f"{scratch_repo}:t1"
