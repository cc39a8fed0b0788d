"""Bounding the runner image cache: least recently used first, lockfile pins last."""

from __future__ import annotations

from rocmenv.cache.prune import plan_prune
from rocmenv.cache.store import BlobInfo


def blob(n: int, size: int, used_at: float) -> BlobInfo:
    return BlobInfo(digest=f"sha256:{n:064x}", size=size, used_at=used_at)


BLOBS = [blob(1, 100, 10.0), blob(2, 100, 30.0), blob(3, 100, 20.0), blob(4, 100, 40.0)]


def test_prune_removes_the_least_recently_used_until_the_cap_fits() -> None:
    plan = plan_prune(BLOBS, pinned=set(), keep=set(), max_size=250, reserve=0, free=10**9)
    assert [b.digest for b in plan.remove] == [BLOBS[0].digest, BLOBS[2].digest]
    assert plan.fits and plan.size_after == 200


def test_prune_never_evicts_a_pinned_blob_while_an_unpinned_one_can_go() -> None:
    pinned = {BLOBS[0].digest, BLOBS[2].digest}  # the two oldest
    plan = plan_prune(BLOBS, pinned=pinned, keep=set(), max_size=250, reserve=0, free=10**9)
    assert {b.digest for b in plan.remove} == {BLOBS[1].digest, BLOBS[3].digest}
    assert plan.pinned_removed == 0


def test_prune_takes_pinned_blobs_last_when_nothing_else_is_left() -> None:
    pinned = {b.digest for b in BLOBS[:3]}
    plan = plan_prune(BLOBS, pinned=pinned, keep=set(), max_size=150, reserve=0, free=10**9)
    assert plan.remove[0].digest == BLOBS[3].digest  # the unpinned one first, though newest
    assert plan.pinned_removed == 2 and plan.fits


def test_prune_never_removes_the_blobs_of_the_image_being_presented() -> None:
    keep = {b.digest for b in BLOBS}
    plan = plan_prune(BLOBS, pinned=set(), keep=keep, max_size=0, reserve=0, free=10**9)
    assert plan.remove == () and not plan.fits


def test_prune_keeps_the_reserve_free_after_the_incoming_bytes() -> None:
    # 150 bytes free, 100 incoming, 200 must stay free: 150 bytes must go (two blobs)
    plan = plan_prune(BLOBS, pinned=set(), keep=set(), max_size=None, reserve=200, free=150,
                      incoming=100)  # fmt: skip
    assert len(plan.remove) == 2 and plan.free_after == 250 and plan.fits


def test_a_cache_within_its_bounds_loses_nothing() -> None:
    plan = plan_prune(BLOBS, pinned=set(), keep=set(), max_size=400, reserve=0, free=10**9)
    assert plan.remove == () and plan.fits
