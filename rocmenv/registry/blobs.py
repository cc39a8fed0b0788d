"""Large blobs (image layers) streamed from a registry through the client's transport
(urllib3: its connection pools, proxies, TLS trust, retries and the command's deadline):
chunks hashed on the way, never more than the manifest says, resumed with ``Range`` after a
dropped connection. Small blobs (configs) are
:meth:`rocmenv.registry.client.RegistryClient.get_blob`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.grammar.reference import Reference
from rocmenv.registry.response import BodyStream, StreamBroken

if TYPE_CHECKING:
    from rocmenv.registry.client import RegistryClient

RESUMES = 3  # a dropped connection is resumed this many times
REDIRECTS = 5


def check_blob_digest(digest: str, what: str) -> str:
    """A digest a manifest names: sha256/sha384/sha512 with its full lower-case hex, or a
    protocol error (before it names a URL, a file or anything else)."""
    from rocmenv.grammar.reference import digest_problem

    problem = digest_problem(digest)
    if problem is not None:
        raise RegistryProtocolError(
            f"{what} {digest[:200]!r} is not a valid digest: {problem.detail[:300]}",
            hint="the registry or a mirror sent a malformed manifest (only sha256, sha384 "
            "and sha512 digests are accepted); nothing was read or written for it",
        )
    return digest


def open_blob(
    client: RegistryClient, ref: Reference, host: str, digest: str, *, max_bytes: int
) -> Iterator[bytes]:
    """A (large) blob as chunks of up to 1 MiB, hashed on the way (:class:`DigestMismatch`
    after the last), refused past ``max_bytes`` (the size its descriptor gives), resumed with
    ``Range`` after a dropped connection (3 times). Auth by a ``HEAD`` through
    :meth:`RegistryClient.request`; a redirect (Docker Hub's CDN) gets no registry
    credentials."""
    import hashlib

    from rocmenv.errors import DigestMismatch

    check_blob_digest(digest, "blob")
    path = f"/v2/{ref.path}/blobs/{digest}"
    head = client.request(ref, host, "HEAD", path, kind="blob-head")
    if head.status == 404:
        raise client.not_found(ref, host, head, f"blob {digest}")
    announced = head.header("content-length") or ""
    if head.status == 200 and announced.isdigit() and int(announced) > max_bytes:
        raise _larger(host, digest, max_bytes, f"announces {int(announced)} bytes")
    hasher = hashlib.new(digest.partition(":")[0])
    done, failures = 0, 0
    while True:
        try:
            for chunk in _get(client, ref, host, path, digest, done):
                done += len(chunk)
                if done > max_bytes:
                    raise _larger(host, digest, max_bytes, "sent more")
                hasher.update(chunk)
                yield chunk
        except StreamBroken as err:
            failures += 1
            if failures > RESUMES:
                raise RegistryUnavailable(
                    f"{host}: reading blob {digest} of {ref.name} failed after {done} bytes: {err}",
                    hint="check the network; the layers read so far are kept",
                ) from None
            continue
        break
    if f"{digest.partition(':')[0]}:{hasher.hexdigest()}" != digest:
        raise DigestMismatch(f"blob {ref.name}@{digest} from {host}: the bytes do not match")


def read_from(
    client: RegistryClient, ref: Reference, host: str, digest: str, start: int
) -> Iterator[bytes]:
    """One ``GET`` of a blob from byte ``start`` on (``Range``), redirects followed: no
    hashing, no resuming, no cap — the caller (:mod:`rocmenv.cache.fetch`, which switches
    sources and hashes across them) does those. A broken or stalled stream is
    :class:`StreamBroken`."""
    check_blob_digest(digest, "blob")
    return _get(client, ref, host, f"/v2/{ref.path}/blobs/{digest}", digest, start)


def _get(
    client: RegistryClient, ref: Reference, host: str, path: str, digest: str, done: int
) -> Iterator[bytes]:
    """One ``GET`` of the blob from byte ``done`` on, redirects followed."""
    plain = {"Accept-Encoding": "identity", **({"Range": f"bytes={done}-"} if done else {})}
    auth = client.auth_header(host, f"repository:{ref.path}:pull")
    url = f"{client.scheme_for(host)}://{host}{path}"
    stream = client.transport.stream_with_retries(
        url, {**plain, **auth}, "blob-stream", registry_host=host
    )
    for _ in range(REDIRECTS):
        if stream.status not in (301, 302, 303, 307, 308):
            break
        location = stream.header("location")
        stream.close()
        if not location:
            raise RegistryProtocolError(f"{host}: blob {digest}: a redirect without a Location")
        url = urllib.parse.urljoin(stream.url, location)
        # Storage back-ends (a CDN) get no registry credentials.
        stream = client.transport.stream_with_retries(url, plain, "blob-stream", registry_host=host)
    yield from _body(stream, host, digest, 206 if done else 200)


def _body(stream: BodyStream, host: str, digest: str, expected: int) -> Iterator[bytes]:
    if stream.status != expected:
        stream.close()
        raise RegistryProtocolError(
            f"{host}: GET blob {digest} answered HTTP {stream.status}"
            + (" to a Range request (resuming needs 206)" if expected == 206 else ""),
        )
    yield from stream.chunks()


def _larger(host: str, digest: str, cap: int, how: str) -> RegistryProtocolError:
    return RegistryProtocolError(
        f"{host}: blob {digest} {how}, more than the {cap} bytes its manifest gives",
        hint="a hostile or broken registry, mirror or proxy",
    )
