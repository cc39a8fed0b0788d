"""Pulling an image through the engine: a plan, a disk budget, progress, and retries.

:func:`plan_pull` reads the image's manifest and config from the registry (nothing is
downloaded but those two documents) and marks which layers the engine already has, by the
config's ``rootfs.diff_ids`` against the layers of the images in the engine's store.
:func:`check_disk` compares the bytes still missing with the free space where the engine
keeps images (only when that directory is on this machine). :func:`pull_image` asks the
engine to pull, feeds its events to a :class:`PullProgress`, and on a failure that a retry
can fix (429, 5xx, connection reset, EOF, timeouts) waits with exponential backoff and pulls
again: the engine keeps the layers it finished, so a retry resumes. Every pull that
succeeds is recorded in the image state file (:mod:`rocmenv.run.images`) for ``gc --images``.

Cost: the plan's manifest ``GET`` is one more request the registry sees; Docker Hub counts
manifest GETs against its pull limit, so a planned pull from Docker Hub counts twice (the
disk check needs the layer sizes, which only the manifest has).

Library code: it never prints; a :class:`PullObserver` is told everything.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from rocmenv.context import Context
from rocmenv.engine.protocol import Engine, PullEvent
from rocmenv.errors import (
    DiskBudgetExceeded,
    EngineError,
    EngineUnavailable,
    PullRateLimited,
    RocmenvError,
)
from rocmenv.lazy import Pattern

if TYPE_CHECKING:
    from rocmenv.registry.client import RegistryClient

FailureKind = Literal["rate-limit", "server", "connection", "fatal"]

_SHORT_ID = Pattern(r"[0-9a-f]{12}")
_DONE = ("download complete", "verifying checksum", "extracting", "pull complete")


@dataclass(frozen=True, kw_only=True)
class LayerPlan:
    digest: str  # compressed (registry) digest
    size: int
    present: bool  # the engine already has this layer

    @property
    def short(self) -> str:
        """The id the engine uses in its progress events."""
        return self.digest.split(":", 1)[-1][:12]


@dataclass(frozen=True, kw_only=True)
class PullPlan:
    image: str
    layers: tuple[LayerPlan, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def missing_bytes(self) -> int:
        return sum(layer.size for layer in self.layers if not layer.present)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 5
    base_delay: float = 2.0  # doubled after every failure
    max_delay: float = 60.0

    def delay(self, failure_number: int) -> float:
        return float(min(self.max_delay, self.base_delay * (2 ** (failure_number - 1))))


@dataclass(frozen=True, kw_only=True)
class Failure:
    kind: FailureKind
    message: str

    @property
    def retryable(self) -> bool:
        return self.kind != "fatal"


@dataclass(frozen=True, kw_only=True)
class PullResult:
    image: str
    total_bytes: int  # compressed size of the image's layers (0: unknown)
    missing_bytes: int  # what had to be downloaded, as planned
    seconds: float
    attempts: int
    # the runner image cache (rocmenv.cache): where the image came from ("registry": the
    # engine pulled it), the bytes that crossed the network (None: as planned), and the
    # engine's name for it when that is not the reference (a load records no repo digest)
    source: str = "registry"
    network_bytes: int | None = None
    present_as: str | None = None


@dataclass(frozen=True, kw_only=True)
class DiskCheck:
    data_root: str
    free: int
    needed: int
    reserve: int

    @property
    def fits(self) -> bool:
        return self.free - self.needed >= self.reserve


class PullObserver(Protocol):
    def note(self, text: str) -> None: ...

    def begin(self, plan: PullPlan) -> None: ...

    def event(self, event: PullEvent) -> None: ...

    def retrying(self, attempt: int, failure: Failure, delay: float) -> None: ...

    def done(self, result: PullResult) -> None: ...


_RATE = Pattern(r"\b429\b|toomanyrequests|too many requests|rate.?limit", re.I)
_SERVER = Pattern(
    r"\b5\d\d\b|service unavailable|bad gateway|gateway time-?out|internal server error", re.I
)
_CONNECTION = Pattern(
    r"connection reset|\bEOF\b|broken pipe|connection refused|i/o timeout|timed? ?out|"
    r"TLS handshake|no route to host|network is unreachable|unexpected end|closed",
    re.I,
)


def classify(message: str) -> Failure:
    """What kind of failure the engine's error text describes (and so whether to retry)."""
    if _RATE.search(message):
        return Failure(kind="rate-limit", message=message)
    if re.search(
        r"not found|manifest unknown|unauthorized|denied|invalid reference", message, re.I
    ):
        return Failure(kind="fatal", message=message)
    if _SERVER.search(message):
        return Failure(kind="server", message=message)
    if _CONNECTION.search(message):
        return Failure(kind="connection", message=message)
    return Failure(kind="fatal", message=message)


def plan_pull(client: RegistryClient, engine: Engine, image: str) -> PullPlan:
    """The image's layers and sizes from the registry, and which the engine already has."""
    from rocmenv.grammar.reference import Reference, parse

    ref = parse(image)
    platform = client.resolve_platform(ref)
    _, manifest = client.get_manifest(
        Reference(domain=ref.domain, path=ref.path, digest=platform.platform_digest),
        platform.registry,
    )
    from rocmenv.contents.image import read_config

    config = read_config(client, ref, platform)
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    present_ids = {layer for img in engine.list_images() for layer in img.layers}
    layers = []
    for index, entry in enumerate(manifest.data.get("layers") or []):
        if not isinstance(entry, dict):
            continue
        diff_id = diff_ids[index] if index < len(diff_ids) else None
        layers.append(
            LayerPlan(
                digest=str(entry.get("digest", "")),
                size=int(entry.get("size") or 0),
                present=diff_id is not None and diff_id in present_ids,
            )
        )
    return PullPlan(image=image, layers=tuple(layers))


def check_disk(engine: Engine, plan: PullPlan, reserve: int) -> DiskCheck | None:
    """Raise :class:`DiskBudgetExceeded` when the missing layers will not fit with ``reserve``
    bytes to spare; None when the engine's store is not on this machine (nothing to check).

    Layers are stored uncompressed: the compressed size times 2 is the estimate (ML images
    compress to about half)."""
    store = engine.store_info()
    if not store.local or not os.path.isdir(store.data_root):
        return None
    stat = os.statvfs(store.data_root)
    check = DiskCheck(
        data_root=store.data_root,
        free=stat.f_bavail * stat.f_frsize,
        needed=2 * plan.missing_bytes,
        reserve=reserve,
    )
    if not check.fits:
        raise DiskBudgetExceeded(
            f"not enough disk to pull {plan.image}: about {human_bytes(check.needed)} still to "
            f"download and unpack, {human_bytes(check.free)} free in {check.data_root}, and "
            f"{human_bytes(reserve)} must stay free",
            hint="free space with `rocmenv gc --images` (add --dry-run to see what goes), or "
            "lower the reserve with --reserve / ROCMENV_DISK_RESERVE",
        )
    return check


def pull_image(
    engine: Engine,
    image: str,
    *,
    observer: PullObserver,
    plan: PullPlan | None = None,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> PullResult:
    """Pull with retries; raise :class:`PullRateLimited` or :class:`EngineError` at the end."""
    retry = retry or RetryPolicy()
    plan = plan or PullPlan(image=image)
    observer.begin(plan)
    start = clock()
    failure: Failure | None = None
    for attempt in range(1, retry.attempts + 1):
        try:
            engine.pull(image, progress=observer.event)
        except RocmenvError as err:
            if not isinstance(err, EngineError) or isinstance(err, EngineUnavailable):
                raise
            failure = classify(err.what)
            if not failure.retryable or attempt == retry.attempts:
                break
            delay = retry.delay(attempt)
            observer.retrying(attempt, failure, delay)
            sleep(delay)
            continue
        result = PullResult(
            image=image,
            total_bytes=plan.total_bytes,
            missing_bytes=plan.missing_bytes,
            seconds=clock() - start,
            attempts=attempt,
        )
        observer.done(result)
        return result
    assert failure is not None
    tries = f"after {attempt} attempt{'s' if attempt > 1 else ''}"
    if failure.kind == "rate-limit":
        raise PullRateLimited(
            f"pulling {image} failed {tries}: the registry is rate limiting pulls "
            f"(HTTP 429 Too Many Requests): {failure.message}",
            hint="wait and try again, log in (`docker login`) for a higher limit, or pull "
            "through a registry mirror",
        )
    raise EngineError(
        f"pulling {image} failed {tries}: {failure.message}",
        hint="check the reference, registry access and credentials (`docker login`)"
        if failure.kind == "fatal"
        else "the registry or the network kept failing; try again later",
    )


def fetch(
    ctx: Context,
    engine: Engine,
    image: str,
    *,
    observer: PullObserver,
    client: RegistryClient | None = None,
    reserve: int,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PullResult:
    """Plan, check the disk, pull with retries, record: what ``pull``, ``run``, ``shell``,
    ``shims check`` and ``suite run`` do to get an image.

    Without a registry client (or when the registry cannot be asked) the pull goes ahead
    unplanned: no sizes, no disk check."""
    from rocmenv.errors import RegistryError
    from rocmenv.run.images import record_pull

    plan = PullPlan(image=image)
    limits: list[str] = []
    if client is not None:
        try:
            plan = plan_pull(client, engine, image)
        except RegistryError as err:
            observer.note(f"could not read the manifest of {image} ({err.what}); no disk check")
        limits = rate_limits(client)
        for line in limits:
            observer.note(line)
    if plan.layers:
        check_disk(engine, plan, reserve)
    try:
        result = pull_image(engine, image, observer=observer, plan=plan, retry=retry, sleep=sleep)
    except PullRateLimited as err:
        if limits:
            err.what += f" (last seen: {'; '.join(limits)})"
        raise
    info = engine.image_info(image)
    if info is not None:
        record_pull(ctx, info.id, image)
    return result


def rate_limits(client: RegistryClient) -> list[str]:
    """The registry's rate-limit state when it sends one (Docker Hub's ``ratelimit-*``
    headers, kept by the registry client: ``RegistryClient.ratelimits()``)."""
    out = []
    for item in client.ratelimits():
        remaining, limit, window = item.get("remaining"), item.get("limit"), item.get("window")
        if remaining is None or limit is None:
            continue
        per = f" per {human_seconds(float(window))}" if window else ""
        out.append(
            f"registry rate limit on {item.get('host')}: {remaining} of {limit} pulls left{per}"
        )
    return out


@dataclass
class PullProgress:
    """Bytes done/total, rate and ETA from the engine's events (and the plan's sizes)."""

    plan: PullPlan
    clock: Callable[[], float] = time.monotonic
    start: float = 0.0
    layers: dict[str, list[int]] = field(default_factory=dict)  # short id -> [done, total]
    skipped: set[str] = field(default_factory=set)
    last_status: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.start = self.clock()
        for layer in self.plan.layers:
            if layer.present:
                self.skipped.add(layer.short)
            else:
                self.layers[layer.short] = [0, layer.size]

    def feed(self, event: PullEvent) -> None:
        # layer events carry the layer's short digest; others (the tag's "Pulling from",
        # "Digest:", "Status:") are not layers
        if event.layer in self.skipped or not _SHORT_ID.fullmatch(event.layer):
            return
        status = event.status.lower()
        self.last_status[event.layer] = event.status
        if status.startswith("already exists"):
            self.skipped.add(event.layer)
            self.layers.pop(event.layer, None)
            return
        entry = self.layers.setdefault(event.layer, [0, 0])
        if status.startswith("downloading") and event.current is not None:
            entry[0] = event.current
            if event.total:
                entry[1] = event.total
        elif status.startswith(_DONE):
            entry[0] = max(entry[0], entry[1])

    @property
    def done(self) -> int:
        return sum(d for d, _ in self.layers.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.layers.values())

    @property
    def elapsed(self) -> float:
        return max(self.clock() - self.start, 1e-6)

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    @property
    def eta(self) -> float | None:
        if not self.total or not self.rate:
            return None
        return max(self.total - self.done, 0) / self.rate

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
