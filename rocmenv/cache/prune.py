"""Bounding the image cache: least recently used first, lockfile pins last.

:func:`plan_prune` orders the blobs that may go: those no pinned image needs by last use,
then the pinned ones by last use (a pinned blob goes only when nothing else is left and the
cache still does not fit), and never a blob of ``keep`` (the image being presented). It
removes until the cache holds at most ``max_size`` bytes *and* ``reserve`` bytes stay free
on its file system after ``incoming`` more arrive. :func:`prune` removes each blob under its
lock taken without waiting (a blob being read or fetched by another job is skipped), and
forgets the images whose blobs are gone.

Pins: the digests of the lockfiles given (``rocmenv.lock``'s pinned and platform manifest
digests) followed through the cached manifests to their configs and layers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from rocmenv.cache.store import BlobCache, BlobInfo


@dataclass(frozen=True, kw_only=True)
class PrunePlan:
    remove: tuple[BlobInfo, ...]
    size_before: int
    size_after: int
    free_after: int  # free bytes on the cache's file system once ``incoming`` arrived
    fits: bool  # within max_size and reserve after the removals
    pinned_removed: int  # how many of the removed blobs a lockfile pins


def image_blobs(cache: BlobCache, manifest_digest: str) -> set[str]:
    """Every blob a cached manifest (an index: each of its manifests) leads to."""
    out: set[str] = set()
    todo = [manifest_digest]  # manifests only: configs and layers are named, never read
    while todo:
        digest = todo.pop()
        if digest in out:
            continue
        out.add(digest)
        data = cache.read_small(digest, max_bytes=4 << 20)
        try:
            doc = json.loads(data) if data is not None else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            continue
        for key, entries in (("manifests", doc.get("manifests")),
                             ("blobs", [doc.get("config"), *(doc.get("layers") or [])])):  # fmt: skip
            for entry in entries if isinstance(entries, list) else ():
                named = entry.get("digest") if isinstance(entry, dict) else None
                if isinstance(named, str) and named.startswith("sha256:"):
                    (todo.append(named) if key == "manifests" else out.add(named))
    return out


def pinned_blobs(cache: BlobCache, digests: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for digest in digests:
        if digest.startswith("sha256:"):
            out |= image_blobs(cache, digest)
    return out


def plan_prune(
    blobs: list[BlobInfo],
    *,
    pinned: set[str],
    keep: set[str],
    max_size: int | None,
    reserve: int,
    free: int,
    incoming: int = 0,
) -> PrunePlan:
    size = sum(b.size for b in blobs)
    free_after = free - incoming
    total = size + incoming

    def fits() -> bool:
        return (max_size is None or total <= max_size) and free_after >= reserve

    order = sorted(
        (b for b in blobs if b.digest not in keep),
        key=lambda b: (b.digest in pinned, b.used_at, b.digest),
    )
    remove: list[BlobInfo] = []
    for blob in order:
        if fits():
            break
        remove.append(blob)
        total -= blob.size
        free_after += blob.size
    return PrunePlan(
        remove=tuple(remove),
        size_before=size,
        size_after=total - incoming,
        free_after=free_after,
        fits=fits(),
        pinned_removed=sum(1 for b in remove if b.digest in pinned),
    )


def prune(cache: BlobCache, plan: PrunePlan) -> list[BlobInfo]:
    """Remove what ``plan`` says (a blob in use by another job stays); → what went."""
    gone = []
    for blob in plan.remove:
        with cache.locked(blob.digest, exclusive=True, wait=False) as held:
            if not held:
                continue
            cache.drop(blob.digest)
            gone.append(blob)
    if gone:
        present = {b.digest for b in cache.blobs()}
        for image in cache.images():
            if not set(image["blobs"]) <= present:
                cache.forget_image(image["manifest"])
    return gone
