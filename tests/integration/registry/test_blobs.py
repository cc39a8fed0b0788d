"""Layer blobs streamed through the transport (urllib3) from the real registry, with faults
injected by a proxy in front of it: a dropped stream resumes with ``Range`` and the bytes are
verified; a blob longer than its descriptor, or with other bytes, is refused."""

from __future__ import annotations

from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.errors import DigestMismatch, RegistryProtocolError
from rocmenv.grammar.reference import Reference
from rocmenv.registry.blobs import open_blob
from rocmenv.registry.client import RegistryClient
from rocmenv.settings.registry import RegistrySettings
from tests.support import testenv
from tests.support.faultproxy import FaultProxy, Match, corrupt_body, rewrite_headers, truncate

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def layer(family: testenv.Family) -> dict[str, Any]:
    """The demo image's largest layer: repository, digest, size and bytes."""
    demo = family["demo"]
    with testenv.RegistryClient(host="127.0.0.1:5000") as raw:
        manifest = raw.get_manifest(demo.repository, demo.tag).json()
        entry = max(manifest["layers"], key=lambda e: e["size"])
        data = raw.get_blob(demo.repository, entry["digest"])
    return {"repo": demo.repository, "digest": entry["digest"], "size": entry["size"], "data": data}


def stream(proxy: FaultProxy, layer: dict[str, Any], max_bytes: int | None = None) -> bytes:
    ctx = Context(env={"HOME": "/nonexistent", "ROCMENV_REGISTRY_BACKOFF": "0.01"})
    with RegistryClient(ctx, RegistrySettings()) as client:
        ref = Reference(domain=proxy.host, path=layer["repo"])
        size = layer["size"] if max_bytes is None else max_bytes
        return b"".join(open_blob(client, ref, proxy.host, layer["digest"], max_bytes=size))


def blob_gets(proxy: FaultProxy) -> list[Any]:
    return [e for e in proxy.log if e.method == "GET" and "/blobs/" in e.path]


def test_a_dropped_layer_stream_resumes_with_range_and_is_verified(layer: dict[str, Any]) -> None:
    cut = layer["size"] // 3
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        proxy.add_rule(Match(method="GET", path=r"/v2/.*/blobs/.*"), truncate(cut), times=2)
        data = stream(proxy, layer)
        ranges = [e.header("Range") for e in blob_gets(proxy)]
        statuses = [e.status for e in blob_gets(proxy)]
    assert data == layer["data"]
    assert ranges == [None, f"bytes={cut}-", f"bytes={2 * cut}-"]
    assert statuses == [200, 206, 206]


def test_a_blob_longer_than_its_descriptor_is_refused(layer: dict[str, Any]) -> None:
    short = layer["size"] - 1
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        with pytest.raises(RegistryProtocolError, match=f"announces {layer['size']} bytes"):
            stream(proxy, layer, short)
        assert blob_gets(proxy) == []  # refused on the HEAD's length
        proxy.add_rule(
            Match(method="HEAD", path=r"/v2/.*/blobs/.*"),
            rewrite_headers(remove=["Content-Length"]),
        )
        with pytest.raises(RegistryProtocolError, match=f"sent more, more than the {short} bytes"):
            stream(proxy, layer, short)


def test_a_blob_whose_bytes_do_not_match_its_digest_is_refused(layer: dict[str, Any]) -> None:
    with FaultProxy(upstream="127.0.0.1:5000") as proxy:
        proxy.add_rule(Match(method="GET", path=r"/v2/.*/blobs/.*"), corrupt_body(1000))
        with pytest.raises(DigestMismatch, match="the bytes do not match"):
            stream(proxy, layer)
