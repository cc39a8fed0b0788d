"""The layer index on disk: a digest becomes a cache path only once it is valid, and a cache
file that is not an index rocmenv wrote is made again, never trusted or a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmenv.contents.layer import INDEX_VERSION, LayerIndexJson
from rocmenv.contents.store import LayerStore
from rocmenv.errors import RegistryProtocolError

GOOD = "sha256:" + "3" * 64


def fake_index(digest: str) -> LayerIndexJson:
    return {
        "index_version": INDEX_VERSION,
        "digest": digest,
        "media_type": "application/vnd.oci.image.layer.v1.tar",
        "targets": [],
        "files": {"usr/local/lib/python3.11/dist-packages/evil-6.6.6.dist-info/METADATA": "x"},
        "links": {},
        "whiteouts": [],
        "opaque": [],
        "bytes": 1,
        "size": 1,
    }


@pytest.mark.parametrize(
    "template",
    [
        "sha256:{tmp}/planted",  # an absolute path: pathlib would join it as the whole path
        "sha256:../../../planted",
        "sha256:" + "A" * 64,  # upper-case hex
        "sha256:" + "3" * 63,
        "md5:" + "3" * 32,
        "sha256:" + "3" * 64 + "/../../planted",
    ],
)
def test_a_digest_that_is_a_path_is_refused_before_any_file_is_read(
    tmp_path: Path, template: str
) -> None:
    digest = template.format(tmp=tmp_path)
    (tmp_path / "planted.json").write_text(json.dumps(fake_index(digest)))
    store = LayerStore(tmp_path / "cache" / "layers")
    made: list[str] = []

    def make() -> LayerIndexJson:
        made.append(digest)
        return fake_index(digest)

    with pytest.raises(RegistryProtocolError, match="is not a valid digest"):
        store.get(digest, [])
    with pytest.raises(RegistryProtocolError, match="is not a valid digest"):
        store.index(digest, [], make)
    assert made == [] and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({**fake_index(GOOD), "files": {"a": 1}}),  # not text
        json.dumps({**fake_index(GOOD), "digest": "sha256:" + "4" * 64}),  # another layer's
        json.dumps({**fake_index(GOOD), "index_version": INDEX_VERSION - 1}),
        json.dumps({k: v for k, v in fake_index(GOOD).items() if k != "size"}),
        json.dumps({**fake_index(GOOD), "opaque": "etc"}),
        json.dumps(fake_index(GOOD)) + " " * 2000,  # over the size given to get()
    ],
)
def test_a_cache_file_that_is_not_an_index_is_made_again(tmp_path: Path, content: str) -> None:
    store = LayerStore(tmp_path)
    path = tmp_path / "sha256" / f"{'3' * 64}.json"
    path.parent.mkdir()
    path.write_text(content)
    assert store.get(GOOD, [], max_bytes=1500) is None
    made: LayerIndexJson = {**fake_index(GOOD), "files": {}}
    index, fresh = store.index(GOOD, [], lambda: made, max_bytes=1500)
    assert fresh and index == made
    assert store.get(GOOD, []) == made
