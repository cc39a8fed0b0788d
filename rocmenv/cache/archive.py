"""The image as ``docker load`` / ``podman load`` read it, streamed from the cache.

A ``docker save`` archive (``manifest.json``, the config as ``<hex>.json``, each layer as
``<hex>/layer.tar``), written on the fly into the engine's ``load``: nothing is staged on
disk, and each blob is hashed again as it goes (:meth:`BlobCache.open_verified`), so a blob
changed on disk after its fetch ends the stream with an error and the engine loads nothing.
The layers go in as the registry compressed them: both engines decompress what they load
(Docker's ``DecompressStream``, containers/image's ``AutoDecompress``), so no CPU is spent
here. The engine checks each layer against the config's ``rootfs.diff_ids`` and names the
image by the config's digest: what is loaded is the image the manifest names, or nothing.

When ``load`` and when a pull from the cache on loopback (:mod:`rocmenv.cache.serve`): a
load is what every cached image takes — measured faster than the engine pulling the same
cached layers from loopback (the 108 MB test image on a fresh engine: 4.8 s against 7.8 s;
the pull pays a round trip per layer and the registry handshake). It cannot start extracting
before the last byte has arrived (``docker load`` unpacks the whole archive first), so an
image with layers still to fetch goes to Docker as a pull from loopback instead, which
extracts while the fetch goes on. Neither records the pinned ``repo@sha256:…`` in the engine
(only a pull from the image's own registry does), so the image is named by its id: see
:mod:`rocmenv.cache.present`.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator, Sequence

from rocmenv.cache.store import BlobCache


def archive_chunks(
    cache: BlobCache,
    config: str,
    layers: Sequence[str],
    tags: Sequence[str],
    sizes: Sequence[int],
) -> Iterator[bytes]:
    """The archive's bytes; ``sizes``: each layer's size (from the manifest, verified at
    fetch time)."""
    config_hex = config.partition(":")[2]
    layer_names = [f"{d.partition(':')[2]}/layer.tar" for d in layers]
    manifest = [{"Config": f"{config_hex}.json", "RepoTags": list(tags), "Layers": layer_names}]
    yield _member("manifest.json", json.dumps(manifest).encode())
    config_bytes = b"".join(cache.open_verified(config))
    yield _member(f"{config_hex}.json", config_bytes)
    seen: set[str] = set()
    for digest, name, size in zip(layers, layer_names, sizes, strict=True):
        if digest in seen:  # a layer that appears twice (an empty one) is written once
            continue
        seen.add(digest)
        yield _header(name, size)
        written = 0
        for chunk in cache.open_verified(digest):
            written += len(chunk)
            yield chunk
        if written != size:
            raise ValueError(f"cache blob {digest}: {written} bytes, the manifest says {size}")
        if size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _member(name: str, data: bytes) -> bytes:
    pad = (-len(data)) % tarfile.BLOCKSIZE
    return _header(name, len(data)) + data + b"\0" * pad
