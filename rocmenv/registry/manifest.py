"""Manifests and digests: the media types rocmenv accepts, the values a registry answer
becomes, digest verification, and picking a platform out of an image index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocmenv.errors import DigestMismatch, RegistryProtocolError
from rocmenv.record import record

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_SCHEMA1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"
DOCKER_SCHEMA1 = "application/vnd.docker.distribution.manifest.v1+json"
MANIFEST_TYPES: tuple[str, ...] = (
    OCI_INDEX,
    DOCKER_LIST,
    OCI_MANIFEST,
    DOCKER_MANIFEST,
    DOCKER_SCHEMA1_SIGNED,
    DOCKER_SCHEMA1,
)
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
ACCEPT_MANIFESTS = ", ".join(MANIFEST_TYPES)
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"


@record
class ManifestHead:
    digest: str
    media_type: str
    size: int | None


@record
class Manifest:
    digest: str
    media_type: str
    raw: bytes
    data: dict[str, Any]

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


@record
class PlatformImage:
    """A tag or digest followed down to its ``linux/amd64`` image."""

    registry: str  # the host that answered (a mirror or the registry itself)
    digest: str  # what the tag points at (an index digest for multi-platform images)
    media_type: str
    platform_digest: str  # the linux/amd64 image manifest
    platform_media_type: str
    config_digest: str | None
    platform: str = "linux/amd64"


def sha256_digest(data: bytes) -> str:

    import hashlib  # after the first request is on its way: OpenSSL loads under the network

    return "sha256:" + hashlib.sha256(data).hexdigest()


def verify_digest(data: bytes, digest: str, what: str) -> None:

    algorithm, _, expected = digest.partition(":")
    try:
        import hashlib

        actual = hashlib.new(algorithm, data).hexdigest()
    except ValueError:
        raise RegistryProtocolError(f"{what}: unsupported digest algorithm {algorithm!r}") from None
    if actual != expected:
        raise DigestMismatch(
            f"{what}: the bytes received hash to {algorithm}:{actual}, not the {digest} claimed",
            hint="the registry, a mirror or a proxy on the way served corrupt or tampered data; "
            "retry, or check the mirror configuration",
        )


def pick_platform(index: Mapping[str, Any], os_name: str, arch: str) -> dict[str, Any] | None:
    """The index entry for ``os_name/arch``; a plain entry is preferred over a variant one."""
    matches = [
        entry
        for entry in index.get("manifests") or []
        if isinstance(entry, dict)
        and isinstance(entry.get("digest"), str)
        and (entry.get("platform") or {}).get("os") == os_name
        and (entry.get("platform") or {}).get("architecture") == arch
    ]
    matches.sort(key=lambda entry: bool((entry.get("platform") or {}).get("variant")))
    return matches[0] if matches else None
