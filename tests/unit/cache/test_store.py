"""The cache directory: versioned, sha256 names only, verified blobs, the archive it streams."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from rocmenv.cache.archive import archive_chunks
from rocmenv.cache.store import BlobCache
from rocmenv.errors import ConfigError, DigestMismatch, RegistryProtocolError


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_cache_of_another_version_is_refused_not_overwritten(tmp_path: Path) -> None:
    BlobCache.open(tmp_path)
    (tmp_path / "cache.json").write_text(json.dumps({"cache_version": 99}))
    with pytest.raises(ConfigError):
        BlobCache.open(tmp_path)
    assert json.loads((tmp_path / "cache.json").read_text()) == {"cache_version": 99}


def test_a_relative_cache_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        BlobCache.open(Path("relative/dir"))


@pytest.mark.parametrize("bad", ["sha256:/etc/passwd", "sha256:../../x", "sha512:" + "a" * 128])
def test_a_digest_that_is_not_a_sha256_never_names_a_file(tmp_path: Path, bad: str) -> None:
    cache = BlobCache.open(tmp_path)
    with pytest.raises(RegistryProtocolError):
        cache.blob_path(bad)


def test_put_small_refuses_bytes_that_do_not_match_and_keeps_nothing(tmp_path: Path) -> None:
    cache = BlobCache.open(tmp_path)
    with pytest.raises(RegistryProtocolError):
        cache.put_small(digest(b"a"), b"b")
    assert cache.blobs() == []


def test_a_blob_changed_on_disk_is_dropped_when_read(tmp_path: Path) -> None:
    cache = BlobCache.open(tmp_path)
    data = b"layer bytes" * 1000
    cache.put_small(digest(data), data)
    path = cache.blob_path(digest(data))
    path.chmod(0o644)
    path.write_bytes(b"X" + data[1:])
    with pytest.raises(DigestMismatch):
        b"".join(cache.open_verified(digest(data)))
    assert not cache.has(digest(data))


def test_the_archive_is_a_docker_save_tar_of_the_cached_blobs(tmp_path: Path) -> None:
    cache = BlobCache.open(tmp_path)
    config = b'{"rootfs": {}}'
    layers = [b"one" * 300, b"two" * 7]
    for blob in (config, *layers):
        cache.put_small(digest(blob), blob)
    stream = b"".join(archive_chunks(cache, digest(config), [digest(b) for b in layers],
                                     ["r/x:t"], [len(b) for b in layers]))  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == ["r/x:t"]
        for name, blob in zip(manifest[0]["Layers"], layers, strict=True):
            assert tar.extractfile(name).read() == blob  # type: ignore[union-attr]
        assert tar.extractfile(manifest[0]["Config"]).read() == config  # type: ignore[union-attr]
