"""Large blobs streamed from a scripted loopback registry: what is refused and how it is said."""

from __future__ import annotations

import hashlib
import json

import pytest

from rocmenv.context import Context
from rocmenv.errors import RegistryNotFound, RegistryProtocolError, RegistryUnavailable
from rocmenv.grammar.reference import parse
from rocmenv.registry.blobs import check_blob_digest, open_blob
from rocmenv.registry.client import RegistryClient
from tests.support.scripted_http import Answer, Request, ScriptedServer

LAYER = b"layer bytes " * 100
DIGEST = "sha256:" + hashlib.sha256(LAYER).hexdigest()


def registry(req: Request) -> Answer:
    if req.path.endswith(DIGEST):
        return Answer(200, {"Content-Type": "application/octet-stream"}, LAYER)
    return Answer(
        404, {"Content-Type": "application/json"}, b'{"errors": [{"code": "BLOB_UNKNOWN"}]}'
    )


def client() -> RegistryClient:
    return RegistryClient(Context(env={"HOME": "/nonexistent", "ROCMENV_REGISTRY_BACKOFF": "0"}))


def test_a_blob_is_read_whole_after_one_head_counted_as_such() -> None:
    with ScriptedServer(registry) as srv:
        c = client()
        data = b"".join(
            open_blob(c, parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER))
        )
    assert data == LAYER
    assert [(r.method, r.path) for r in srv.requests] == [
        ("HEAD", f"/v2/x/y/blobs/{DIGEST}"), ("GET", f"/v2/x/y/blobs/{DIGEST}"),
    ]  # fmt: skip
    assert dict(c.stats.by_kind) == {"blob-head": 1, "blob-stream": 1}


def test_a_missing_blob_is_not_found_by_its_digest() -> None:
    other = "sha256:" + "0" * 64
    with ScriptedServer(registry) as srv, pytest.raises(RegistryNotFound) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, other, max_bytes=10))
    assert err.value.what == f"blob {other} not found in {srv.host}/x/y on {srv.host}"
    assert [r.method for r in srv.requests] == ["HEAD"]


def test_a_blob_announcing_more_than_its_descriptor_is_refused_before_the_get() -> None:
    with ScriptedServer(registry) as srv, pytest.raises(RegistryProtocolError) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=100))
    assert err.value.what == (
        f"{srv.host}: blob {DIGEST} announces {len(LAYER)} bytes, more than the 100 bytes its "
        "manifest gives"
    )
    assert err.value.hint == "a hostile or broken registry, mirror or proxy"
    assert [r.method for r in srv.requests] == ["HEAD"]


def test_a_malformed_blob_digest_is_refused_before_any_request() -> None:
    bad = "md5:" + "a" * 300
    with pytest.raises(RegistryProtocolError) as err:
        check_blob_digest(bad, "layer 2")
    assert err.value.what.startswith(f"layer 2 {bad[:200]!r} is not a valid digest: ")
    assert len(err.value.what) <= len(f"layer 2 {bad[:200]!r} is not a valid digest: ") + 300
    assert err.value.hint == (
        "the registry or a mirror sent a malformed manifest (only sha256, sha384 and sha512 "
        "digests are accepted); nothing was read or written for it"
    )
    assert check_blob_digest(DIGEST, "layer") == DIGEST
    with pytest.raises(RegistryProtocolError) as long_err:
        check_blob_digest("x" * 500, "layer 3")  # its detail quotes it whole: cut at 300
    assert len(long_err.value.what) == len(f"layer 3 {'x' * 200!r} is not a valid digest: ") + 300
    with (
        ScriptedServer(registry) as srv,
        pytest.raises(RegistryProtocolError, match=r"^blob 'md5:"),
    ):
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, "md5:00", max_bytes=10))
    assert srv.requests == []


def cdn(hops: int, *, location: bool = True, resume_status: int = 206) -> ScriptedServer:
    """The registry redirects the blob ``hops`` times; the first full answer drops after
    100 bytes; a ``Range`` request gets the rest with ``resume_status``."""
    served: list[int] = []

    def answer(req: Request) -> Answer:
        if req.method == "HEAD":
            return registry(req)
        step = int(req.path.rsplit("/", 1)[-1]) if req.path.startswith("/hop/") else 0
        if step < hops:
            return Answer(302, {"Location": f"/hop/{step + 1}"} if location else {})
        start = int(req.headers["range"].split("=")[1].rstrip("-")) if "range" in req.headers else 0
        if start:
            return Answer(resume_status, {}, LAYER[start:])
        served.append(1)
        return Answer(200, {"Content-Length": str(len(LAYER))}, LAYER[:100])

    return ScriptedServer(answer)


def test_a_dropped_blob_stream_is_resumed_with_range_through_the_redirects() -> None:
    with cdn(2) as srv:
        data = b"".join(
            open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER))
        )
    assert data == LAYER
    gets = [r for r in srv.requests if r.method == "GET"]
    assert [r.path for r in gets] == [f"/v2/x/y/blobs/{DIGEST}", "/hop/1", "/hop/2"] * 2
    for r in gets:  # one Accept-Encoding (not the transport's gzip beside it)
        assert [v for k, v in r.header_lines if k.lower() == "accept-encoding"] == ["identity"]
    assert [r.headers.get("range") for r in gets] == [None] * 3 + ["bytes=100-"] * 3


def test_a_resumed_blob_answered_whole_is_refused() -> None:
    with cdn(0, resume_status=200) as srv, pytest.raises(RegistryProtocolError) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER)))
    assert err.value.what == (
        f"{srv.host}: GET blob {DIGEST} answered HTTP 200 to a Range request (resuming needs 206)"
    )


def test_a_blob_stream_follows_five_redirects_and_refuses_one_without_location() -> None:
    with cdn(6) as srv, pytest.raises(RegistryProtocolError) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER)))
    assert err.value.what == f"{srv.host}: GET blob {DIGEST} answered HTTP 302"
    assert len([r for r in srv.requests if r.method == "GET"]) == 6
    with cdn(1, location=False) as srv, pytest.raises(RegistryProtocolError) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER)))
    assert err.value.what == f"{srv.host}: blob {DIGEST}: a redirect without a Location"


def test_a_blob_stream_that_keeps_dropping_gives_up_after_three_resumes() -> None:
    def answer(req: Request) -> Answer:
        if req.method == "HEAD":
            return registry(req)
        start = int(req.headers["range"].split("=")[1].rstrip("-")) if "range" in req.headers else 0
        return Answer(
            206 if start else 200,
            {"Content-Length": str(len(LAYER) - start)},
            LAYER[start : start + 10],
        )

    with ScriptedServer(answer) as srv, pytest.raises(RegistryUnavailable) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER)))
    assert err.value.what.startswith(
        f"{srv.host}: reading blob {DIGEST} of {srv.host}/x/y failed after 40 bytes: "
    )
    assert err.value.hint == "check the network; the layers read so far are kept"


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_blob_stream_follows_each_redirect_code_to_another_host_as_the_registry_s(
    code: int,
) -> None:
    limits = {"RateLimit-Limit": "100;w=60", "RateLimit-Remaining": "5"}
    with ScriptedServer(lambda req: Answer(200, limits, LAYER)) as storage:

        def answer(req: Request) -> Answer:
            if req.method == "HEAD":
                return registry(req)
            return Answer(code, {"Location": f"http://{storage.host}/blob"})

        with ScriptedServer(answer) as srv:
            c = client()
            ref = parse(f"{srv.host}/x/y")
            assert b"".join(open_blob(c, ref, srv.host, DIGEST, max_bytes=len(LAYER))) == LAYER
    assert dict(c.stats.by_kind) == {"blob-head": 1, "blob-stream": 2}
    assert list(c.transport.ratelimits) == [srv.host]  # the storage answers for the registry


def test_a_blob_stream_carries_the_registry_s_token() -> None:
    issued = "blob-tok-123456"

    def answer(req: Request) -> Answer:
        if req.path.startswith("/token"):
            return Answer(200, {}, json.dumps({"token": issued}).encode())
        if req.headers.get("authorization") != f"Bearer {issued}":
            host = req.headers["host"]
            return Answer(401, {"WWW-Authenticate": f'Bearer realm="http://{host}/token"'})
        return registry(req)

    with ScriptedServer(answer) as srv:
        data = b"".join(
            open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=len(LAYER))
        )
    assert data == LAYER
    (get,) = [r for r in srv.requests if r.method == "GET" and "/blobs/" in r.path]
    assert get.headers["authorization"] == f"Bearer {issued}"


def test_a_blob_sending_more_than_its_head_announced_is_cut_off_and_named() -> None:
    def answer(req: Request) -> Answer:  # a HEAD that understates, a GET that overflows
        return Answer(200, {}, LAYER[:10] if req.method == "HEAD" else LAYER)

    with ScriptedServer(answer) as srv, pytest.raises(RegistryProtocolError) as err:
        list(open_blob(client(), parse(f"{srv.host}/x/y"), srv.host, DIGEST, max_bytes=100))
    assert err.value.what == (
        f"{srv.host}: blob {DIGEST} sent more, more than the 100 bytes its manifest gives"
    )
