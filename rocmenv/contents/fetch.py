"""Every layer of an image indexed: its descriptors checked, read from the registry (several
at once) within one :class:`~rocmenv.contents.budget.Budget`, the
:class:`~rocmenv.contents.store.LayerStore` first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from rocmenv.contents.budget import Budget, Stopped
from rocmenv.contents.layer import LayerIndexJson, index_layer, index_size
from rocmenv.contents.store import MAX_INDEX_FILE, LayerStore
from rocmenv.errors import RegistryProtocolError
from rocmenv.grammar.reference import Reference
from rocmenv.registry.blobs import check_blob_digest, open_blob
from rocmenv.registry.client import RegistryClient

LAYER_JOBS = 3


@dataclass(frozen=True, kw_only=True)
class LayerRef:
    digest: str
    media_type: str
    size: int  # compressed, as the manifest gives it


def layer_refs(manifest: Mapping[str, Any], ref: Reference) -> list[LayerRef]:
    """The manifest's layer descriptors, each checked before its digest names anything (a
    URL, a cache file)."""
    entries = manifest.get("layers") or []
    if not isinstance(entries, list):
        raise RegistryProtocolError(f"{ref}: the manifest's layers are not a list")
    out = []
    for i, entry in enumerate(entries):
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if not isinstance(digest, str):
            raise RegistryProtocolError(f"{ref}: layer {i} of the manifest has no digest")
        check_blob_digest(digest, f"{ref}: the digest of layer {i}")
        media_type, size = entry.get("mediaType", ""), entry.get("size")
        if not (isinstance(media_type, str) and type(size) is int and size >= 0):
            raise RegistryProtocolError(
                f"{ref}: layer {i} ({digest}) of the manifest has no valid mediaType and size"
            )
        out.append(LayerRef(digest=digest, media_type=media_type, size=size))
    return out


def index_layers(
    client: RegistryClient,
    store: LayerStore,
    ref: Reference,
    host: str,
    layers: Sequence[LayerRef],
    targets: Sequence[str],
) -> list[tuple[LayerIndexJson, bool]]:
    """Each layer's index (``True``: made now), within one budget for the image. Several
    layers at once, as the engine pulls (its default is 3 concurrent downloads): decompression
    and hashing release the GIL, and a remote registry's latency overlaps. The first failure
    stops the others at their next read and is the one raised."""
    budget = Budget.of(client.settings, client.transport.deadline_left)
    max_file = max(MAX_INDEX_FILE, 2 * budget.index)

    def one(layer: LayerRef) -> tuple[LayerIndexJson, bool]:
        budget.check(layer.digest)
        index, made = store.index(
            layer.digest,
            targets,
            lambda: index_layer(
                layer.digest,
                layer.media_type,
                open_blob(client, ref, host, layer.digest, max_bytes=layer.size),
                targets,
                budget,
            ),
            max_bytes=max_file,
        )
        if not made:  # indexed before: it counts as it did then
            budget.spend_layer(layer.digest, index["size"])
            budget.spend_image(layer.digest, index["size"])
            budget.spend_index(layer.digest, index_size(index))
        return index, made

    with ThreadPoolExecutor(max_workers=max(1, min(LAYER_JOBS, len(layers)))) as pool:
        futures = [pool.submit(one, layer) for layer in layers]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            budget.stop()  # a no-op when all are done; else the others end at their next read
            for future in futures:
                future.cancel()
    failed = [f.exception() for f in futures if not f.cancelled() and f.exception()]
    first = next((e for e in failed if not isinstance(e, Stopped)), None)
    if first is not None:
        raise first
    return [f.result() for f in futures]
