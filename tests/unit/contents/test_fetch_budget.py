"""Layers indexed before still count against ``inspect``'s limits (rocmenv.contents.fetch,
issue 34): a cached index spends what its layer spent when it was read — decompressed bytes
against ``limits.layer`` and ``limits.image``, kept bytes against ``limits.layer-index`` — so
an image is refused or not whatever the cache holds. Real layer tarballs, indexed by
``index_layer`` into a real :class:`LayerStore`; no registry is asked (the cache answers), so
any read would fail the test."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocmenv.contents.fetch import LayerRef, index_layers
from rocmenv.contents.layer import LayerIndexJson, index_layer, index_size
from rocmenv.contents.store import LayerStore
from rocmenv.errors import RegistryProtocolError, RocmenvError
from rocmenv.grammar.reference import parse
from rocmenv.settings.registry import RegistrySettings

TAR = "application/vnd.oci.image.layer.v1.tar"
REF = parse("127.0.0.1:5000/x/y:latest")
SITE = "usr/local/lib/python3.12/dist-packages"
TARGETS: tuple[str, ...] = ()


def layer(i: int, payload: int) -> tuple[bytes, str]:
    """A layer with one distribution's metadata (kept by the index) and ``payload`` bytes of
    a file the index does not keep (counted as decompressed size only)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (
            (f"{SITE}/pkg{i}-1.0.dist-info/METADATA", f"Name: pkg{i}\nVersion: 1.0\n".encode()),
            (f"opt/blob{i}.bin", b"\0" * payload),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    return data, "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def cached(tmp_path: Path) -> tuple[LayerStore, list[LayerRef], list[LayerIndexJson]]:
    """Three layers indexed earlier (a previous ``inspect``), in the store."""
    store = LayerStore(tmp_path / "layers")
    refs, indexes = [], []
    for i, payload in enumerate((40_000, 70_000, 10_000)):
        data, digest = layer(i, payload)
        index = index_layer(digest, TAR, iter([data]), TARGETS)
        store.put(index)
        refs.append(LayerRef(digest=digest, media_type=TAR, size=len(data)))
        indexes.append(index)
    return store, refs, indexes


def client(**limits: int) -> Any:
    """Only what :func:`index_layers` reads before a layer is fetched: a fetch would fail."""
    settings = RegistrySettings(limits=tuple(limits.items()))
    return SimpleNamespace(settings=settings,
                           transport=SimpleNamespace(deadline_left=lambda: 600.0))  # fmt: skip


def run(store: LayerStore, refs: list[LayerRef], **limits: int) -> list[tuple[Any, bool]]:
    return index_layers(client(**limits), store, REF, "127.0.0.1:5000", refs, TARGETS)


def test_cached_layers_are_read_from_the_cache_within_limits_that_fit(cached: Any) -> None:
    store, refs, indexes = cached
    sizes = [i["size"] for i in indexes]
    kept = sum(index_size(i) for i in indexes)
    done = run(store, refs, layer=max(sizes), image=sum(sizes), **{"layer-index": kept})
    assert [made for _, made in done] == [False, False, False]  # all from the cache
    assert [i["digest"] for i, _ in done] == [r.digest for r in refs]


def test_cached_layers_count_against_the_image_limit(cached: Any) -> None:
    store, refs, indexes = cached
    total = sum(i["size"] for i in indexes)
    with pytest.raises(RegistryProtocolError) as caught:
        run(store, refs, image=total - 1)
    assert caught.value.exit_code == 3
    assert any(r.digest in caught.value.what for r in refs)  # names the layer it stopped at


def test_a_cached_layer_counts_against_the_layer_limit(cached: Any) -> None:
    store, refs, indexes = cached
    largest = max(i["size"] for i in indexes)
    with pytest.raises(RegistryProtocolError) as caught:
        run(store, refs, layer=largest - 1)
    (big,) = [r for r, i in zip(refs, indexes, strict=True) if i["size"] == largest]
    assert big.digest in caught.value.what


def test_cached_layers_count_against_the_layer_index_limit(cached: Any) -> None:
    store, refs, indexes = cached
    kept = sum(index_size(i) for i in indexes)
    assert kept > 0
    with pytest.raises(RegistryProtocolError) as caught:
        run(store, refs, **{"layer-index": kept - 1})
    assert any(r.digest in caught.value.what for r in refs)


def test_a_cached_layer_alone_over_a_limit_is_refused_too(cached: Any) -> None:
    """One cached layer (the largest) on its own: the verdict is the layer's, not the sum's."""
    store, refs, indexes = cached
    (big,) = [r for r, i in zip(refs, indexes, strict=True) if i["size"] > 70_000]
    size = max(i["size"] for i in indexes)
    with pytest.raises(RegistryProtocolError):
        run(store, [big], image=size - 1)
    assert run(store, [big], image=size)[0][1] is False


# -- layers read now, from a scripted registry --------------------------------------------------


class BlobServer:
    """Serves the layers' blobs by digest (a scripted loopback registry); ``fail``: a digest
    answered 500 (or ``bomb``: its layer is larger than its descriptor says)."""

    def __init__(self, blobs: dict[str, bytes], fail: str | None = None) -> None:
        from tests.support.scripted_http import Answer, ScriptedServer

        def answer(req: Any) -> Answer:
            digest = req.path.rsplit("/", 1)[-1]
            if digest == fail:
                return Answer(500, {}, b"")
            data = blobs.get(digest)
            return Answer(200, {}, data) if data is not None else Answer(404, {}, b"{}")

        self.server = ScriptedServer(answer)

    def __enter__(self) -> BlobServer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(None, None, None)

    def blob_gets(self) -> list[str]:
        return [r.path.rsplit("/", 1)[-1] for r in self.server.requests if r.method == "GET"]


def real_client(tmp_path: Path, **limits: int) -> Any:
    from rocmenv.context import Context
    from rocmenv.registry.client import RegistryClient

    ctx = Context(env={"HOME": str(tmp_path), "ROCMENV_REGISTRY_BACKOFF": "0",
                       "ROCMENV_REGISTRY_RETRIES": "0"})  # fmt: skip
    return RegistryClient(ctx, RegistrySettings(limits=tuple(limits.items())))


def fresh_layers(n: int) -> tuple[dict[str, bytes], list[LayerRef]]:
    blobs, refs = {}, []
    for i in range(n):
        data, digest = layer(10 + i, 20_000 * (i + 1))
        blobs[digest] = data
        refs.append(LayerRef(digest=digest, media_type=TAR, size=len(data)))
    return blobs, refs


def test_layers_read_now_are_indexed_stored_and_then_read_from_the_cache(tmp_path: Path) -> None:
    blobs, refs = fresh_layers(4)
    store = LayerStore(tmp_path / "layers")
    with BlobServer(blobs) as srv:
        ref = parse(f"{srv.server.host}/x/y:latest")
        done = index_layers(real_client(tmp_path), store, ref, srv.server.host, refs, TARGETS)
        assert [made for _, made in done] == [True] * 4
        assert [i["digest"] for i, _ in done] == [r.digest for r in refs]  # in order
        assert [i["size"] for i, _ in done] == [
            index_layer(r.digest, TAR, iter([blobs[r.digest]]), TARGETS)["size"] for r in refs
        ]
        assert sorted(srv.blob_gets()) == sorted(blobs)
        again = index_layers(real_client(tmp_path), store, ref, srv.server.host, refs, TARGETS)
        assert [made for _, made in again] == [False] * 4
        assert sorted(srv.blob_gets()) == sorted(blobs)  # nothing fetched the second time


def test_one_failing_layer_is_the_error_raised_and_nothing_of_it_is_kept(tmp_path: Path) -> None:
    blobs, refs = fresh_layers(3)
    store = LayerStore(tmp_path / "layers")
    with BlobServer(blobs, fail=refs[1].digest) as srv:
        ref = parse(f"{srv.server.host}/x/y:latest")
        with pytest.raises(RocmenvError) as caught:  # the layer's own error, never Stopped
            index_layers(real_client(tmp_path), store, ref, srv.server.host, refs, TARGETS)
    assert caught.value.exit_code == 3
    assert store.get(refs[1].digest, TARGETS) is None


def test_a_layer_over_the_image_limit_when_read_is_refused_like_a_cached_one(
    tmp_path: Path,
) -> None:
    blobs, refs = fresh_layers(2)
    sizes = [index_layer(r.digest, TAR, iter([blobs[r.digest]]), TARGETS)["size"] for r in refs]
    store = LayerStore(tmp_path / "layers")
    with BlobServer(blobs) as srv:
        ref = parse(f"{srv.server.host}/x/y:latest")
        with pytest.raises(RegistryProtocolError):
            index_layers(real_client(tmp_path, image=sum(sizes) - 1), store, ref,
                         srv.server.host, refs, TARGETS)  # fmt: skip
        done = index_layers(real_client(tmp_path, image=sum(sizes)), LayerStore(tmp_path / "l2"),
                            ref, srv.server.host, refs, TARGETS)  # fmt: skip
    assert len(done) == 2


def test_a_stored_index_larger_than_the_default_file_cap_is_read_when_the_index_limit_allows(
    tmp_path: Path, cached: Any
) -> None:
    """The cache's file cap follows ``limits.layer-index`` (twice it): a large index made
    under a raised limit is not read again from the registry."""
    from rocmenv.contents import fetch as fetch_module

    store, refs, indexes = cached
    kept = sum(index_size(i) for i in indexes)
    original = fetch_module.MAX_INDEX_FILE
    try:
        fetch_module.MAX_INDEX_FILE = 10  # every stored file is "too large" by the default cap
        done = run(store, refs, **{"layer-index": 1 << 20})  # 2 MiB cap: they fit
        assert [made for _, made in done] == [False, False, False]
        assert kept <= 1 << 20
    finally:
        fetch_module.MAX_INDEX_FILE = original


def test_the_empty_image_has_no_layers_to_read(tmp_path: Path) -> None:
    assert index_layers(client(), LayerStore(tmp_path), REF, "h", [], TARGETS) == []


def test_a_descriptor_without_a_media_type_is_read_as_an_empty_one() -> None:
    from rocmenv.contents.fetch import layer_refs

    digest = "sha256:" + "c" * 64
    assert layer_refs({"layers": [{"digest": digest, "size": 3}]}, REF) == [
        LayerRef(digest=digest, media_type="", size=3)
    ]


def test_a_bad_digest_error_names_the_layer() -> None:
    from rocmenv.contents.fetch import layer_refs

    good = {"digest": "sha256:" + "c" * 64, "size": 3, "mediaType": TAR}
    with pytest.raises(RegistryProtocolError) as caught:
        layer_refs({"layers": [good, {**good, "digest": "sha256:/etc/passwd"}]}, REF)
    assert "layer 1" in caught.value.what
