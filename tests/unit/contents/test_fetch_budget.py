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
from rocmenv.errors import RegistryProtocolError
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


def test_a_cached_layer_counts_against_the_layer_limit(cached: Any) -> None:
    store, refs, indexes = cached
    largest = max(i["size"] for i in indexes)
    with pytest.raises(RegistryProtocolError):
        run(store, refs, layer=largest - 1)


def test_cached_layers_count_against_the_layer_index_limit(cached: Any) -> None:
    store, refs, indexes = cached
    kept = sum(index_size(i) for i in indexes)
    assert kept > 0
    with pytest.raises(RegistryProtocolError):
        run(store, refs, **{"layer-index": kept - 1})


def test_a_cached_layer_alone_over_a_limit_is_refused_too(cached: Any) -> None:
    """One cached layer (the largest) on its own: the verdict is the layer's, not the sum's."""
    store, refs, indexes = cached
    (big,) = [r for r, i in zip(refs, indexes, strict=True) if i["size"] > 70_000]
    size = max(i["size"] for i in indexes)
    with pytest.raises(RegistryProtocolError):
        run(store, [big], image=size - 1)
    assert run(store, [big], image=size)[0][1] is False
