"""The runner image cache on disk: verified blobs by digest, shared by every job of a node.

Layout of the directory ``ROCMENV_IMAGE_CACHE`` / ``[images] cache`` names (a persistent
volume; several engines and jobs use it at once)::

    cache.json                    {"cache_version": 1}: what this directory is
    blobs/sha256/<hex>            a verified blob (layer, config, manifest), read-only
    partial/sha256/<hex>          a blob being fetched (by the holder of its lock)
    locks/sha256/<hex>            the blob's lock file (``flock``)
    images/<hex>.json             an image presented from here: reference, manifest, blobs

**Nothing unverified is ever under ``blobs/``.** A fetch writes ``partial/`` while holding the
blob's lock exclusively, hashes every byte on the way, and renames the file into ``blobs/``
only once its digest matches (after an ``fsync``). A job killed mid-fetch (``kill -9``) loses
its lock with its life; the next job to want the blob finds the partial file, hashes what is
there and asks for the rest (``Range``); a partial that then does not verify is dropped and
the blob fetched whole. A blob is hashed again as it streams into the engine.

**Locks.** Per blob: exclusive to fetch or delete it, shared to read it. So several jobs that
want one blob fetch it once (the others wait on the lock, then find it), and ``prune`` never
removes a blob that a load is reading (it skips blobs whose lock it cannot take at once).

**Use.** A blob's modification time is its last use (set at every fetch and load; ``atime``
is unreliable under ``relatime``): pruning goes least recently used first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from rocmenv.errors import ConfigError, RegistryProtocolError
from rocmenv.hostfs import write_atomic

CACHE_VERSION = 1
CHUNK = 1 << 20


class ImageJson(TypedDict):
    image_version: int
    reference: str
    manifest: str  # the digest the reference was pinned or resolved to
    platform_manifest: str
    config: str
    blobs: list[str]  # every blob of the image: manifests, config, layers
    size: int  # the compressed size of its layers
    used_at: float


@dataclass(frozen=True, kw_only=True)
class BlobInfo:
    digest: str
    size: int
    used_at: float


class BlobCache:
    """One cache directory (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def open(cls, root: Path) -> BlobCache:
        """The cache at ``root``, made when absent; a directory that is some other thing (a
        newer layout, a file) is a clear error, never overwritten."""
        if not root.is_absolute():
            raise ConfigError(
                f"the image cache {root} is not an absolute path",
                hint="set ROCMENV_IMAGE_CACHE (or [images] cache) to an absolute directory",
            )
        try:
            for sub in ("blobs/sha256", "partial/sha256", "locks/sha256", "images"):
                (root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(
                f"the image cache {root} cannot be used: {err.strerror or err}",
                hint="point ROCMENV_IMAGE_CACHE at a writable directory (a persistent volume)",
            ) from None
        marker = root / "cache.json"
        try:
            doc: Any = json.loads(marker.read_text())
        except FileNotFoundError:
            write_atomic(marker, json.dumps({"cache_version": CACHE_VERSION}, sort_keys=True))
            return cls(root)
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"the image cache marker {marker} is unreadable: {err}",
                hint="delete the cache directory (it holds only copies of registry blobs)",
            ) from None
        if not isinstance(doc, dict) or doc.get("cache_version") != CACHE_VERSION:
            found = doc.get("cache_version") if isinstance(doc, dict) else "?"
            raise ConfigError(
                f"the image cache {root} has cache_version {found}, this rocmenv reads "
                f"{CACHE_VERSION}",
                hint="upgrade rocmenv on this runner, or give it another directory",
            )
        return cls(root)

    # -- paths -------------------------------------------------------------------------------

    def _name(self, digest: str) -> tuple[str, str]:
        from rocmenv.grammar.reference import digest_problem

        problem = digest_problem(digest)
        algo, _, hexpart = digest.partition(":")
        if problem is not None or algo != "sha256":
            raise RegistryProtocolError(
                f"blob digest {digest[:200]!r} cannot name a cache file (sha256 only)",
                hint="the registry or a mirror sent a malformed manifest; nothing was written",
            )
        return algo, hexpart

    def blob_path(self, digest: str) -> Path:
        algo, hexpart = self._name(digest)
        return self.root / "blobs" / algo / hexpart

    def partial_path(self, digest: str) -> Path:
        algo, hexpart = self._name(digest)
        return self.root / "partial" / algo / hexpart

    def has(self, digest: str) -> bool:
        try:
            return self.blob_path(digest).is_file()
        except OSError:
            return False

    def touch(self, digest: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.blob_path(digest))

    @contextlib.contextmanager
    def locked(self, digest: str, *, exclusive: bool, wait: bool = True) -> Iterator[bool]:
        """The blob's lock; yields ``False`` (not held) when ``wait`` is off and it is busy."""
        algo, hexpart = self._name(digest)
        fd = os.open(
            self.root / "locks" / algo / hexpart,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
        try:
            flags = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
            try:
                fcntl.flock(fd, flags)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing releases the lock

    # -- small blobs (manifests, configs) ---------------------------------------------------

    def read_small(self, digest: str, max_bytes: int = 8 << 20) -> bytes | None:
        """A small blob's bytes, verified; None when absent (or corrupt: then removed)."""
        path = self.blob_path(digest)
        try:
            with path.open("rb") as handle:
                data = handle.read(max_bytes + 1)
        except OSError:
            return None
        if len(data) > max_bytes:
            return None  # not a small blob (a layer): not what the caller looks for
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            self.drop(digest)  # changed on disk: it goes, and is fetched again
            return None
        self.touch(digest)
        return data

    def put_small(self, digest: str, data: bytes) -> None:
        """A small blob the caller verified (manifest, config)."""
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise RegistryProtocolError(f"blob {digest}: the bytes do not match the digest")
        with self.locked(digest, exclusive=True):
            if self.has(digest):
                self.touch(digest)
                return
            part = self.partial_path(digest)
            part.write_bytes(data)
            self.commit(part, digest)

    def commit(self, part: Path, digest: str) -> None:
        """Move a verified partial file into ``blobs/`` (the caller holds the lock)."""
        fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
            os.fchmod(fd, 0o444)
        finally:
            os.close(fd)
        os.replace(part, self.blob_path(digest))

    def drop(self, digest: str) -> None:
        with contextlib.suppress(OSError):
            self.blob_path(digest).unlink()

    def open_verified(self, digest: str) -> Iterator[bytes]:
        """A blob's bytes as chunks, hashed on the way: a blob that does not match is removed
        and :class:`~rocmenv.errors.DigestMismatch` raised after its last chunk (a stream
        that ends with it never completes an engine's load)."""
        from rocmenv.errors import DigestMismatch

        hasher = hashlib.sha256()
        with self.blob_path(digest).open("rb") as handle:
            while chunk := handle.read(CHUNK):
                hasher.update(chunk)
                yield chunk
        if "sha256:" + hasher.hexdigest() != digest:
            self.drop(digest)
            raise DigestMismatch(
                f"image cache blob {digest} does not match its digest (changed on disk)",
                hint="it was removed; pull again to fetch it anew",
            )
        self.touch(digest)

    # -- images -----------------------------------------------------------------------------

    def record_image(self, image: ImageJson) -> None:
        hexpart = self._name(image["manifest"])[1]
        write_atomic(
            self.root / "images" / f"{hexpart}.json",
            json.dumps(image, sort_keys=True, indent=1),
            durable=False,
        )

    def images(self) -> list[ImageJson]:
        out: list[ImageJson] = []
        for path in sorted((self.root / "images").glob("*.json")):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(doc, dict) and doc.get("image_version") == 1:
                out.append(doc)  # type: ignore[arg-type]
        return out

    def forget_image(self, manifest: str) -> None:
        with contextlib.suppress(OSError):
            (self.root / "images" / f"{self._name(manifest)[1]}.json").unlink()

    def blobs(self) -> list[BlobInfo]:
        out = []
        for entry in os.scandir(self.root / "blobs" / "sha256"):
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                out.append(
                    BlobInfo(digest=f"sha256:{entry.name}", size=st.st_size, used_at=st.st_mtime)
                )
        return out

    def partial_bytes(self) -> int:
        total = 0
        for entry in os.scandir(self.root / "partial" / "sha256"):
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
        return total

    def size(self) -> int:
        return sum(b.size for b in self.blobs()) + self.partial_bytes()

    def free(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize


def now() -> float:
    return time.time()
