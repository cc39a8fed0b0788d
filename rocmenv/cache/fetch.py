"""Fetching a blob into the cache: once per node, verified as it streams, from sources that
do not stall.

**Sources.** The registry client's hosts for the reference, in its order (the configured
mirrors, then the registry itself: :meth:`RegistryClient.hosts_for`). One :class:`Sources`
per job says which is current; a source whose throughput falls below the floor
(:class:`Floor`: fewer than ``bytes_per_second * window`` bytes in the last ``window``
seconds of a blob's stream, or no byte at all for ``window`` seconds — the client's read
timeout is set to the window) is left for the next one, for the rest of the job, with one
log line saying why. What was fetched from it is kept: the stream continues from the next
source at the byte it had reached (``Range``), under the same hash.

**Defaults: 1 MB/s for 20 s.** A healthy LAN mirror sends 10-100 MB/s and an upstream
registry over the internet 5-50 MB/s; below 1 MB/s a 23 GB image takes over six hours,
which nobody waits for (the public case this exists for took 4 h 16 min through a mirror
that stalled under load). 20 s is long enough to ride out a registry's garbage-collection
pause or a TCP retransmit back-off (up to ~15 s), short enough that a stalled mirror costs
less than a tenth of a typical pull.

**Once per node.** The blob's lock is held exclusively for the whole fetch
(:class:`~rocmenv.cache.store.BlobCache`); another job that wants the blob waits for it and
then finds it in ``blobs/``, fetching nothing. A partial file left by a killed job is hashed
and continued, and dropped when it does not verify.

Reuses the registry client for everything on the wire (auth, TLS, proxies, redaction,
redirects): :func:`rocmenv.registry.blobs.read_from`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rocmenv.cache.store import CHUNK, BlobCache
from rocmenv.errors import DigestMismatch, RegistryError, RegistryProtocolError
from rocmenv.grammar.reference import Reference
from rocmenv.registry.client import RegistryClient

RESUMES = 3  # a broken stream from the last source is continued this many times
PROGRESS_STEP = 1 << 20  # bytes between two progress reports of a blob


@dataclass(frozen=True, kw_only=True)
class Floor:
    bytes_per_second: float = 1_000_000.0
    window: float = 20.0


@dataclass
class Sources:
    """The job's sources, the current one shared by its threads (see the module doc)."""

    hosts: list[str]
    log: Callable[[str], None]
    # the client for the sources before the last: no retries of its own, so that a stalled
    # mirror costs one read timeout (the window), not one per retry (see present_with_settings)
    mirrors_client: RegistryClient | None = None
    upstream: str = ""
    index: int = 0
    received: dict[str, int] = field(default_factory=dict)
    switches: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.upstream = self.upstream or self.hosts[-1]

    def current(self) -> tuple[int, str]:
        with self._lock:
            return self.index, self.hosts[self.index]

    def is_last(self, index: int) -> bool:
        return index >= len(self.hosts) - 1

    def abandon(self, index: int, why: str) -> None:
        """Leave source ``index`` for the next (once: other threads may have moved on)."""
        with self._lock:
            if index != self.index or self.is_last(index):
                return
            self.index += 1
            line = f"image cache: leaving {self.hosts[index]} for {self.hosts[self.index]}: {why}"
            self.switches.append(line)
        self.log(line)

    def count(self, host: str, n: int) -> None:
        with self._lock:
            self.received[host] = self.received.get(host, 0) + n

    @property
    def network_bytes(self) -> int:
        return sum(self.received.values())


class _Slow(Exception):
    pass


class _Moved(Exception):
    pass


def fetch_blob(
    client: RegistryClient,
    cache: BlobCache,
    ref: Reference,
    digest: str,
    size: int,
    sources: Sources,
    floor: Floor,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Make ``digest`` (``size`` bytes, as the manifest gives it) present and verified in the
    cache; returns the bytes this call took from the network (0: it was there)."""
    with cache.locked(digest, exclusive=True):
        if cache.has(digest):
            cache.touch(digest)
            return 0
        part = cache.partial_path(digest)
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            return _fill(client, cache, ref, digest, size, sources, floor, fd, progress, clock)
        finally:
            os.close(fd)


def _fill(
    client: RegistryClient,
    cache: BlobCache,
    ref: Reference,
    digest: str,
    size: int,
    sources: Sources,
    floor: Floor,
    fd: int,
    progress: Callable[[str, int, int], None] | None,
    clock: Callable[[], float],
) -> int:
    hasher, done = _continue_partial(fd, size)
    taken = told = 0
    restarted = done == 0
    failures = 0
    while True:
        index, host = sources.current()
        via = client if sources.is_last(index) else (sources.mirrors_client or client)
        try:
            for chunk in _stream(via, ref, host, digest, done, size, sources, index, floor, clock):
                os.write(fd, chunk)
                hasher.update(chunk)
                done += len(chunk)
                taken += len(chunk)
                sources.count(host, len(chunk))
                if progress is not None and (done - told >= PROGRESS_STEP or done >= size):
                    told = done  # the display needs no more (a chunk can be 16 kB)
                    progress(digest, done, size)
        except _Slow as slow:
            sources.abandon(index, f"{slow} (keeping the {done} bytes of {digest[:19]} fetched)")
            continue
        except _Moved:
            continue
        except RegistryError as err:
            if not sources.is_last(index):
                sources.abandon(index, f"{err.what} (keeping the {done} bytes fetched)")
                continue
            failures += 1
            if failures > RESUMES:
                raise
            continue
        if done < size:  # the answer ended early: continue it
            failures += 1
            if failures > RESUMES:
                raise RegistryProtocolError(
                    f"{host}: blob {digest} ended after {done} of {size} bytes"
                )
            continue
        if "sha256:" + hasher.hexdigest() == digest:
            break
        if restarted:
            raise DigestMismatch(
                f"blob {ref.name}@{digest} from {host}: the bytes do not match",
                hint="the registry, a mirror or a proxy on the way served corrupt data; "
                "nothing was added to the image cache",
            )
        # a partial file a killed job left did not verify: start the blob over, once
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        hasher, done, restarted = hashlib.sha256(), 0, True
    cache.commit(cache.partial_path(digest), digest)
    return taken


def _continue_partial(fd: int, size: int) -> tuple[hashlib._Hash, int]:
    """The hash of what a killed job left (and its length); too long: start over."""
    hasher = hashlib.sha256()
    done = 0
    while chunk := os.read(fd, CHUNK):
        hasher.update(chunk)
        done += len(chunk)
    if done > size:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return hashlib.sha256(), 0
    return hasher, done


def _stream(
    client: RegistryClient,
    ref: Reference,
    host: str,
    digest: str,
    start: int,
    size: int,
    sources: Sources,
    index: int,
    floor: Floor,
    clock: Callable[[], float],
) -> Iterator[bytes]:
    """Chunks of the blob from ``host`` from byte ``start``, watched against the floor (only
    while there is another source to go to)."""
    from rocmenv.registry.blobs import read_from
    from rocmenv.registry.response import StreamBroken

    if start >= size:
        return
    head = client.request(ref, host, "HEAD", f"/v2/{ref.path}/blobs/{digest}", kind="blob-head")
    if head.status == 404:
        raise client.not_found(ref, host, head, f"blob {digest}")
    watch = not sources.is_last(index)
    began = clock()
    window: deque[tuple[float, int]] = deque([(began, 0)])
    got = 0
    stream = read_from(client, ref, host, digest, start)
    try:
        for chunk in stream:
            got += len(chunk)
            if start + got > size:
                raise RegistryProtocolError(
                    f"{host}: blob {digest} sent more than the {size} bytes its manifest gives",
                    hint="a hostile or broken registry, mirror or proxy",
                )
            yield chunk
            if not watch:
                continue
            now = clock()
            window.append((now, got))
            while len(window) > 1 and window[1][0] <= now - floor.window:
                window.popleft()
            if sources.current()[0] != index:
                raise _Moved
            if now - began >= floor.window:
                t0, b0 = window[0]
                rate = (got - b0) / max(now - t0, 1e-6)
                if rate < floor.bytes_per_second:
                    raise _Slow(
                        f"{rate / 1e6:.2f} MB/s over the last {floor.window:g} s, below the "
                        f"floor of {floor.bytes_per_second / 1e6:g} MB/s"
                    )
    except StreamBroken as err:
        if watch:
            raise _Slow(f"{err.what} (no progress for {floor.window:g} s)") from None
        raise
    finally:
        close = getattr(stream, "close", None)  # a generator: closing it closes the answer
        if close is not None:
            close()
