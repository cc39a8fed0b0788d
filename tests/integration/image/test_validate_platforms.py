"""``rocmenv validate`` of an image that has no ``linux/amd64`` variant: a check failure (exit
1) that names the platforms the image does have — for a multi-platform index and for a
single-platform image whose config says another architecture.

The images are pushed to the open registry by the test-support client (a config blob, one
gzip layer, a manifest and an index per case), in a repository nobody else uses.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import testenv


def _push_image(client: testenv.RegistryClient, repo: str, arch: str) -> tuple[str, int]:
    config = json.dumps(
        {"architecture": arch, "os": "linux", "config": {},
         "rootfs": {"type": "layers", "diff_ids": []}}, sort_keys=True,
    ).encode()  # fmt: skip
    layer = gzip.compress(b"")
    client.upload_blob(repo, config)
    client.upload_blob(repo, layer)
    manifest = json.dumps(
        {"schemaVersion": 2, "mediaType": testenv.MT_OCI_MANIFEST,
         "config": {"mediaType": testenv.MT_OCI_CONFIG, "digest": testenv.sha256_digest(config),
                    "size": len(config)},
         "layers": [{"mediaType": testenv.MT_OCI_LAYER, "digest": testenv.sha256_digest(layer),
                     "size": len(layer)}]}, sort_keys=True,
    ).encode()  # fmt: skip
    digest = client.put_manifest(repo, f"{arch}-only", manifest, testenv.MT_OCI_MANIFEST)
    return digest, len(manifest)


@pytest.fixture(scope="module")
def arm_repo(registry: testenv.OpenRegistry) -> str:
    repo = registry.unique_repo("no-amd64")
    with registry.client() as client:
        arm, arm_size = _push_image(client, repo, "arm64")
        s390x, s390x_size = _push_image(client, repo, "s390x")
        index = json.dumps(
            {"schemaVersion": 2, "mediaType": testenv.MT_OCI_INDEX, "manifests": [
                {"mediaType": testenv.MT_OCI_MANIFEST, "digest": arm, "size": arm_size,
                 "platform": {"architecture": "arm64", "os": "linux"}},
                {"mediaType": testenv.MT_OCI_MANIFEST, "digest": s390x, "size": s390x_size,
                 "platform": {"architecture": "s390x", "os": "linux"}}]}, sort_keys=True,
        ).encode()  # fmt: skip
        client.put_manifest(repo, "multi", index, testenv.MT_OCI_INDEX)
    return f"{registry.host}/{repo}"


def validate(ref: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / ".git").mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ROCMENV_REGISTRY_BACKOFF": "0.01"}
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", "validate", ref, "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_an_index_without_linux_amd64_fails_validation_naming_its_platforms(
    arm_repo: str, tmp_path: Path
) -> None:
    done = validate(f"{arm_repo}:multi", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    text = done.stdout + done.stderr
    assert "has no linux/amd64 image" in text
    assert "linux/arm64" in text and "linux/s390x" in text
    assert "Traceback" not in text


def test_a_single_arm64_image_fails_validation_naming_its_architecture(
    arm_repo: str, tmp_path: Path
) -> None:
    done = validate(f"{arm_repo}:arm64-only", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "is a linux/arm64 image, not linux/amd64" in done.stdout + done.stderr


def test_the_amd64_family_image_validates(family: testenv.Family, tmp_path: Path) -> None:
    done = validate(family["demo"].ref, tmp_path)  # the control: same command, exit 0
    assert done.returncode == 0, done.stdout + done.stderr
