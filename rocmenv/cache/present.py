"""Making an image present in the engine through the runner image cache.

1. The manifest: from the cache when the reference is a digest it holds (no network at all),
   else from the registry (a tag costs one ``HEAD``; a manifest the cache already holds is
   not fetched again), verified and kept; an index is followed to its ``linux/amd64``
   manifest; the config likewise.
2. Already in the engine (an image whose id is the config's digest): nothing else happens.
3. Room: the layers the cache lacks must fit under its cap and leave ``reserve`` free on its
   file system (least recently used blobs are pruned for it, pinned ones last:
   :mod:`rocmenv.cache.prune`), and about twice their size must be free where the engine
   keeps images (it stores them uncompressed).
4. The missing layers are fetched into the cache, three at a time as the engine does, from
   the sources the registry client names (mirrors, then the registry), a stalled source left
   for the next (:mod:`rocmenv.cache.fetch`).
5. The engine loads the image from the cache (:mod:`rocmenv.cache.archive`), hashing each
   blob again on the way; the engine checks the layers against the config's ``diff_ids``.

**The engine's name for the image.** A load records no ``repo@sha256:…`` in the engine (only
a pull from the image's registry does), so the image is tagged ``repo:TAG`` when the
reference has a tag, ``repo:sha256-<hex>`` (the manifest's digest) otherwise, and
:attr:`Presented.present_as` is its id — the config's digest, which the pinned manifest
names: containers are created from it (:func:`rocmenv.run.execute.ensure_image`).

Library code: it never prints; an observer is told (the pull display's interface:
``begin``/``event``/``note``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rocmenv.cache.fetch import Floor, Sources, fetch_blob
from rocmenv.cache.store import BlobCache, ImageJson
from rocmenv.engine.protocol import Engine, PullEvent
from rocmenv.errors import DiskBudgetExceeded, RegistryProtocolError, RocmenvError
from rocmenv.grammar.reference import Reference, parse
from rocmenv.registry.client import RegistryClient
from rocmenv.registry.manifest import INDEX_TYPES, pick_platform

Source = Literal["engine", "cache", "mirror", "upstream", "mirror+upstream"]
Feed = Literal["registry", "load"]  # how the engine gets the image (see the module doc)
LAYER_JOBS = 3


class CacheUnsupported(RocmenvError):
    """An image the cache cannot hold (a schema 1 manifest, foreign layers): pull it."""


class Observer(Protocol):
    def note(self, text: str) -> None: ...

    def event(self, event: PullEvent) -> None: ...

    def layers(self, needs: tuple[LayerNeed, ...]) -> None:
        """The image's layers, and which the cache holds (before anything is fetched)."""


@dataclass(frozen=True, kw_only=True)
class LayerNeed:
    digest: str
    size: int
    cached: bool


@dataclass(frozen=True, kw_only=True)
class Presented:
    image: str
    present_as: str  # the engine's id of the image (the config's digest)
    manifest: str  # the digest the reference was pinned or resolved to
    source: Source
    network_bytes: int
    by_host: dict[str, int]
    total_bytes: int  # the image's compressed layers
    layers: tuple[LayerNeed, ...]
    seconds: float
    switches: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "present_as": self.present_as,
            "manifest": self.manifest,
            "source": self.source,
            "network_bytes": self.network_bytes,
            "bytes_by_source": dict(sorted(self.by_host.items())),
            "bytes": self.total_bytes,
            "seconds_to_present": round(self.seconds, 3),
            "switches": list(self.switches),
        }


def present(
    engine: Engine,
    client: RegistryClient,
    cache: BlobCache,
    image: str,
    *,
    observer: Observer,
    reserve: int,
    max_size: int | None,
    floor: Floor,
    pins: Iterable[str] = (),
    feed: Feed = "registry",
    mirrors_client: RegistryClient | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Presented:
    """The image present in the engine, through the cache (see the module docstring)."""
    from rocmenv.cache.prune import pinned_blobs, plan_prune, prune

    start = clock()
    ref = parse(image)
    hosts = client.hosts_for(ref)
    sources = Sources(hosts=hosts, log=observer.note, mirrors_client=mirrors_client)
    manifest_digest, manifest, config = _manifests(client, cache, ref)
    layers = _layers(cache, ref, manifest)
    blobs = {manifest_digest, config, *(d for d, _ in layers)}
    if isinstance(manifest.get("_platform"), str):
        blobs.add(manifest["_platform"])
    total = sum(size for _, size in layers)
    needs = tuple(LayerNeed(digest=d, size=s, cached=cache.has(d)) for d, s in layers)

    def done(source: Source) -> Presented:
        cache.record_image(
            ImageJson(image_version=1, reference=image, manifest=manifest_digest,
                      platform_manifest=str(manifest.get("_platform") or manifest_digest),
                      config=config, blobs=sorted(blobs), size=total, used_at=time.time())
        )  # fmt: skip
        for digest in blobs:
            cache.touch(digest)
        return Presented(
            image=image, present_as=config, manifest=manifest_digest, source=source,
            network_bytes=sources.network_bytes, by_host=dict(sources.received),
            total_bytes=total, layers=needs, seconds=clock() - start,
            switches=tuple(sources.switches),
        )  # fmt: skip

    if engine.image_info(config) is not None:
        return done("engine")
    observer.layers(needs)
    missing = sum(n.size for n in needs if not n.cached)
    if missing:
        plan = plan_prune(
            cache.blobs(), pinned=pinned_blobs(cache, pins), keep=blobs, max_size=max_size,
            reserve=reserve, free=cache.free(), incoming=missing,
        )  # fmt: skip
        if not plan.fits:
            raise DiskBudgetExceeded(
                f"the image cache {cache.root} has no room for the {missing} bytes of "
                f"{image} it lacks (cap {max_size or 'none'}, {reserve} bytes must stay free, "
                f"even after removing every other blob)",
                hint="raise [images] max-size / ROCMENV_IMAGE_CACHE_MAX, lower --reserve, or "
                "give the cache a larger volume",
            )
        for gone in prune(cache, plan):
            observer.note(f"image cache: removed {gone.digest[:19]} ({gone.size} bytes, least "
                          "recently used)")  # fmt: skip
        _check_engine_disk(engine, missing, reserve, image)
    fetch = _Fetch(client, cache, ref, needs, sources, floor, observer)
    fed = False
    # measured (benchmarks/bench_image_cache.py): with layers to fetch, a pull from the
    # cache on loopback overlaps the engine's extraction with the fetch; with none, a load
    # is faster (no per-layer round trips, no registry handshake)
    if missing and feed == "registry" and engine.kind in ("docker-api", "docker-cli"):
        fed = _pull_while_fetching(engine, cache, ref, manifest_digest, manifest, config,
                                   layers, fetch, observer)  # fmt: skip
    if not fed:
        fetch.wait()
        engine.load(_archive(cache, config, layers, _tags(ref, manifest_digest)))
    if engine.image_info(config) is None:
        raise RegistryProtocolError(
            f"the engine loaded {image} from the image cache, but has no image {config}",
            hint="the cached config does not describe the layers; remove the cache's blobs "
            "of this image (`rocmenv cache prune --all`) and pull again",
        )
    if sources.network_bytes == 0:
        return done("cache")
    upstream = sum(n for h, n in sources.received.items() if h == sources.upstream)
    mirrors = sources.network_bytes - upstream
    return done("mirror+upstream" if upstream and mirrors else "upstream" if upstream else "mirror")


def _archive(
    cache: BlobCache, config: str, layers: list[tuple[str, int]], tags: list[str]
) -> Iterable[bytes]:
    from rocmenv.cache.archive import archive_chunks

    return archive_chunks(cache, config, [d for d, _ in layers], tags, [s for _, s in layers])


def _tags(ref: Reference, manifest_digest: str) -> list[str]:
    name = ref.familiar_name
    if ref.tag:
        return [f"{name}:{ref.tag}"]
    return [f"{name}:sha256-{manifest_digest.partition(':')[2]}"]


def _small(
    client: RegistryClient,
    cache: BlobCache,
    ref: Reference,
    digest: str,
    kind: Literal["manifest", "config"],
) -> bytes:
    """A manifest or a config by digest: the cache's, else the registry's (verified, kept).
    Each is asked for where the registry keeps it: a config at ``/manifests/`` is no manifest
    (the Distribution registry answers it with a 500, which the client retries for seconds)."""
    data = cache.read_small(digest)
    if data is not None:
        return data
    if kind == "manifest":
        _, manifest = client.get_manifest(
            Reference(domain=ref.domain, path=ref.path, digest=digest)
        )
        data = manifest.raw
    else:
        data = client.on_hosts(ref, lambda host: client.get_blob(ref, host, digest))
    cache.put_small(digest, data)
    return data


def _manifests(
    client: RegistryClient, cache: BlobCache, ref: Reference
) -> tuple[str, dict[str, Any], str]:
    """(the top manifest's digest, the platform manifest, the config's digest)."""
    if ref.digest:
        top_digest = ref.digest
        raw = cache.read_small(top_digest)
        if raw is None:
            _, top = client.get_manifest(ref)
            raw = top.raw
            cache.put_small(top_digest, raw)
    else:
        _, head = client.head_manifest(ref)
        top_digest = head.digest
        raw = cache.read_small(top_digest)
        if raw is None:
            _, top = client.get_manifest(Reference(domain=ref.domain, path=ref.path,
                                                   digest=top_digest))  # fmt: skip
            raw = top.raw
            cache.put_small(top_digest, raw)
    doc = _json(raw, ref)
    if doc.get("mediaType") in INDEX_TYPES or "manifests" in doc:
        entry = pick_platform(doc, "linux", "amd64")
        if entry is None:
            raise CacheUnsupported(f"{ref} has no linux/amd64 image")
        platform = str(entry["digest"])
        doc = _json(_small(client, cache, ref, platform, "manifest"), ref)
        doc["_platform"] = platform
    config = (
        (doc.get("config") or {}).get("digest") if isinstance(doc.get("config"), dict) else None
    )
    if doc.get("schemaVersion") != 2 or not isinstance(config, str):
        raise CacheUnsupported(f"{ref}: a schema 1 or config-less manifest")
    _small(client, cache, ref, config, "config")
    return top_digest, doc, config


def _json(raw: bytes, ref: Reference) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise RegistryProtocolError(f"{ref}: the manifest is not a JSON object")
    return doc


def _layers(cache: BlobCache, ref: Reference, manifest: dict[str, Any]) -> list[tuple[str, int]]:
    from rocmenv.contents.fetch import layer_refs

    out = []
    for layer in layer_refs(manifest, ref):
        if "foreign" in layer.media_type or layer.media_type.endswith("+encrypted"):
            raise CacheUnsupported(f"{ref}: a layer of type {layer.media_type}")
        cache.blob_path(layer.digest)  # sha256 only: the digest must name a cache file
        out.append((layer.digest, layer.size))
    return out


def _check_engine_disk(engine: Engine, missing: int, reserve: int, image: str) -> None:
    import os

    store = engine.store_info()
    if not store.local or not os.path.isdir(store.data_root):
        return
    st = os.statvfs(store.data_root)
    free = st.f_bavail * st.f_frsize
    if free - 2 * missing < reserve:
        raise DiskBudgetExceeded(
            f"not enough disk for the engine to load {image}: about {2 * missing} bytes to "
            f"unpack, {free} free in {store.data_root}, and {reserve} must stay free",
            hint="free space with `rocmenv gc --images`, or lower --reserve",
        )


class _Fetch:
    """The missing layers fetched into the cache in the background, in the image's order,
    three at a time (as the engine pulls), while the engine pulls them from the cache."""

    def __init__(
        self,
        client: RegistryClient,
        cache: BlobCache,
        ref: Reference,
        needs: tuple[LayerNeed, ...],
        sources: Sources,
        floor: Floor,
        observer: Observer,
    ) -> None:
        todo = list({n.digest: n for n in needs if not n.cached}.values())

        def progress(digest: str, done: int, size: int) -> None:
            short = digest.partition(":")[2][:12]
            status = "Download complete" if done >= size else "Downloading"
            observer.event(PullEvent(layer=short, status=status, current=done, total=size))

        def one(need: LayerNeed) -> int:
            return fetch_blob(client, cache, ref, need.digest, need.size, sources, floor,
                              progress=progress)  # fmt: skip

        self._pool = ThreadPoolExecutor(max_workers=max(1, min(LAYER_JOBS, len(todo))))
        self.futures = [self._pool.submit(one, need) for need in todo]

    def failed(self) -> bool:
        return any(f.done() and not f.cancelled() and f.exception() for f in self.futures)

    def wait(self) -> None:
        """Every layer fetched; the first failure raised (the rest cancelled)."""
        try:
            wait(self.futures, return_when=FIRST_EXCEPTION)
            for future in self.futures:
                future.cancel()
        finally:
            self._pool.shutdown(wait=True)
        for future in self.futures:
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]


def _pull_while_fetching(
    engine: Engine,
    cache: BlobCache,
    ref: Reference,
    manifest_digest: str,
    manifest: dict[str, Any],
    config: str,
    layers: list[tuple[str, int]],
    fetch: _Fetch,
    observer: Observer,
) -> bool:
    """The engine pulls from the cache served on loopback while the fetch fills it; False
    when the engine cannot reach it (the caller loads instead)."""
    from rocmenv.cache.serve import CacheRegistry
    from rocmenv.errors import EngineError, EngineUnavailable
    from rocmenv.registry.manifest import OCI_INDEX, OCI_MANIFEST

    manifests: dict[str, str] = {}
    top = _json(cache.read_small(manifest_digest) or b"{}", ref)
    platform = manifest.get("_platform")
    if isinstance(platform, str):
        manifests[manifest_digest] = str(top.get("mediaType") or OCI_INDEX)
        manifests[platform] = str(manifest.get("mediaType") or OCI_MANIFEST)
    else:
        manifests[manifest_digest] = str(top.get("mediaType") or OCI_MANIFEST)
    config_size = (manifest.get("config") or {}).get("size")
    blobs = {d: s for d, s in layers}
    blobs[config] = (
        config_size if isinstance(config_size, int) else len(cache.read_small(config) or b"")
    )
    with CacheRegistry(cache, manifests, blobs, fetch.failed) as port:
        try:
            engine.pull(f"127.0.0.1:{port}/{ref.path}@{manifest_digest}")
        except EngineUnavailable:
            raise
        except EngineError as err:
            if fetch.failed():
                fetch.wait()  # raises the fetch's own error
            observer.note(
                f"the engine could not pull from the image cache on 127.0.0.1:{port} "
                f"({err.what[:300]}); loading the image instead"
            )
            return False
    fetch.wait()
    return True
