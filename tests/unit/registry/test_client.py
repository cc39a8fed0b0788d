"""The registry client's answers that the real Distribution registry never gives: an index
without linux/amd64, an image of another architecture, a manifest without a config, an error
body naming the repository, rate-limit warnings — against a scripted loopback registry."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.errors import (
    CheckFailed,
    DigestMismatch,
    RegistryAuthError,
    RegistryNotFound,
    RegistryProtocolError,
)
from rocmenv.grammar.reference import parse
from rocmenv.registry.client import RegistryClient, _snippet
from rocmenv.registry.manifest import DOCKER_SCHEMA1, OCI_INDEX, OCI_MANIFEST, PlatformImage
from rocmenv.registry.response import RateLimit, Response
from rocmenv.settings.registry import RegistrySettings
from tests.support.scripted_http import Answer, Request, ScriptedServer


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Blobs:
    """Manifests and blobs by digest, tags by name, for one repository ``x/y``."""

    def __init__(self) -> None:
        self.by_digest: dict[str, tuple[str, bytes]] = {}
        self.tags: dict[str, str] = {}

    def add(self, media_type: str, doc: Any, tag: str | None = None) -> str:
        raw = json.dumps(doc).encode()
        digest = digest_of(raw)
        self.by_digest[digest] = (media_type, raw)
        if tag:
            self.tags[tag] = digest
        return digest

    def answer(self, req: Request) -> Answer:
        name = req.path.rsplit("/", 1)[-1]
        found = self.by_digest.get(self.tags.get(name, name))
        if found is None:
            return Answer(404, {}, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}')
        media_type, raw = found
        return Answer(
            200, {"Content-Type": media_type, "Docker-Content-Digest": digest_of(raw)}, raw
        )


@pytest.fixture
def repo() -> Iterator[tuple[Blobs, str]]:
    blobs = Blobs()
    with ScriptedServer(blobs.answer) as srv:
        yield blobs, srv.host


def client() -> RegistryClient:
    return RegistryClient(Context(env={"HOME": "/nonexistent", "ROCMENV_REGISTRY_BACKOFF": "0"}))


def image(blobs: Blobs, os_name: str = "linux", arch: str = "amd64", tag: str | None = None) -> str:
    config = blobs.add(
        "application/vnd.oci.image.config.v1+json", {"os": os_name, "architecture": arch}
    )
    return blobs.add(OCI_MANIFEST, {"mediaType": OCI_MANIFEST, "config": {"digest": config}}, tag)


def entry(digest: str, os_name: str, arch: str) -> dict[str, Any]:
    return {"digest": digest, "platform": {"os": os_name, "architecture": arch}}


# -- following a tag to its linux/amd64 image ---------------------------------------------------


def test_an_index_is_followed_to_its_linux_amd64_image_on_the_same_host(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    amd = image(blobs)
    arm = image(blobs, arch="arm64")
    index = blobs.add(OCI_INDEX, {"mediaType": OCI_INDEX, "manifests": [
        entry(arm, "linux", "arm64"), entry(amd, "linux", "amd64")]}, tag="v1")  # fmt: skip
    config = json.loads(blobs.by_digest[amd][1])["config"]["digest"]
    found = client().resolve_platform(parse(f"{host}/x/y:v1"))
    assert found == PlatformImage(
        registry=host, digest=index, media_type=OCI_INDEX, platform_digest=amd,
        platform_media_type=OCI_MANIFEST, config_digest=config, platform="linux/amd64",
    )  # fmt: skip


def test_an_index_without_the_platform_names_the_ones_it_has(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    arm = image(blobs, arch="arm64")
    blobs.add(OCI_INDEX, {"mediaType": OCI_INDEX, "manifests": [
        entry(arm, "linux", "s390x"), entry(arm, "linux", "arm64"), {"digest": arm}, "junk"]},
        tag="v1")  # fmt: skip
    with pytest.raises(CheckFailed) as err:
        client().resolve_platform(parse(f"{host}/x/y:v1"))
    assert err.value.what == (
        f"{host}/x/y:v1 has no linux/amd64 image (platforms: None/None, linux/arm64, linux/s390x)"
    )
    assert err.value.hint == "pick a tag built for linux/amd64"


def test_an_empty_index_has_no_platforms(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    blobs.add(OCI_INDEX, {"mediaType": OCI_INDEX}, tag="v1")
    with pytest.raises(CheckFailed) as err:
        client().resolve_platform(parse(f"{host}/x/y:v1"), arch="arm64")
    assert err.value.what.endswith("has no linux/arm64 image (platforms: none)")


def test_an_image_of_another_architecture_is_refused_by_its_config(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    image(blobs, arch="arm64", tag="v1")
    with pytest.raises(CheckFailed) as err:
        client().resolve_platform(parse(f"{host}/x/y:v1"))
    assert err.value.what == f"{host}/x/y:v1 is a linux/arm64 image, not linux/amd64"
    assert err.value.hint == "pick a tag built for linux/amd64"
    found = client().resolve_platform(parse(f"{host}/x/y:v1"), arch="arm64")
    assert found.platform == "linux/arm64" and found.digest == found.platform_digest


def test_a_schema1_manifest_is_judged_by_its_own_architecture(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    blobs.add(DOCKER_SCHEMA1, {"mediaType": DOCKER_SCHEMA1, "architecture": "amd64"}, tag="v1")
    blobs.add(DOCKER_SCHEMA1, {"mediaType": DOCKER_SCHEMA1, "architecture": "arm"}, tag="v2")
    found = client().resolve_platform(parse(f"{host}/x/y:v1"))
    assert found.config_digest is None and found.platform_media_type == DOCKER_SCHEMA1
    with pytest.raises(CheckFailed, match="is a linux/arm image, not linux/amd64"):
        client().resolve_platform(parse(f"{host}/x/y:v2"))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "image manifest has no config digest"),
        ("sha256:1234", "the config digest of the image manifest is not a valid digest"),
        ({"digest": 7}, "image manifest has no config digest"),
        (["sha256:" + "a" * 64], "image manifest has no config digest"),
    ],
)
def test_a_manifest_without_a_valid_config_digest_is_a_protocol_error(
    repo: tuple[Blobs, str], config: Any, message: str
) -> None:
    blobs, host = repo
    if isinstance(config, str):
        config = {"digest": config}
    blobs.add(OCI_MANIFEST, {"mediaType": OCI_MANIFEST, "config": config}, tag="v1")
    with pytest.raises(RegistryProtocolError, match=f"^{host}/x/y:v1: {message}"):
        client().resolve_platform(parse(f"{host}/x/y:v1"))


def test_an_index_entry_with_a_bad_digest_is_a_protocol_error(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    blobs.add(OCI_INDEX, {"mediaType": OCI_INDEX, "manifests": [
        entry("md5:abc", "linux", "amd64")]}, tag="v1")  # fmt: skip
    with pytest.raises(RegistryProtocolError, match="the linux/amd64 entry of the index is not"):
        client().resolve_platform(parse(f"{host}/x/y:v1"))


def test_a_config_that_is_not_json_is_a_protocol_error(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    config = digest_of(b"not json")
    blobs.by_digest[config] = ("application/octet-stream", b"not json")
    blobs.add(OCI_MANIFEST, {"mediaType": OCI_MANIFEST, "config": {"digest": config}}, tag="v1")
    with pytest.raises(RegistryProtocolError, match=f"^{host}/x/y:v1: image config is not JSON$"):
        client().resolve_platform(parse(f"{host}/x/y:v1"))


# -- not found ----------------------------------------------------------------------------------


def answer(body: bytes) -> Response:
    return Response(status=404, headers={}, body=body, url="http://r/v2/")


@pytest.mark.parametrize(
    ("body", "what", "repository"),
    [
        (b'{"errors": [{"code": "NAME_UNKNOWN"}]}', "manifest 'v1'", True),
        (b'{"errors": [{"code": "MANIFEST_UNKNOWN"}, {"code": "NAME_UNKNOWN"}]}', "manifest 'v1'", False),
        (b'{"errors": [{"message": "NAME_UNKNOWN"}]}', "manifest 'v1'", False),
        (b'{"errors": []}', "manifest 'v1'", False),
        (b'{"errors": ["NAME_UNKNOWN"]}', "manifest 'v1'", False),
        (b"<html>", "manifest 'v1'", False),
        (b"[]", "repository", True),
    ],
)  # fmt: skip
def test_a_404_names_the_repository_only_when_the_registry_says_it_is_unknown(
    body: bytes, what: str, repository: bool
) -> None:
    ref = parse("reg.example/x/y:v1")
    err = client().not_found(ref, "mirror.example", answer(body), what)
    if repository:
        assert err.what == "repository reg.example/x/y not found on mirror.example"
        assert err.hint == "check the repository name (and the registry/mirror it lives on)"
    else:
        assert err.what == "manifest 'v1' not found in reg.example/x/y on mirror.example"
        assert err.hint == "list the available tags with `rocmenv tags list reg.example/x/y`"


def test_a_body_that_is_not_json_is_quoted_short() -> None:
    assert _snippet(b"<html>\nhello") == "'<html> hello'"
    assert _snippet(b"a" * 60) == repr("a" * 60)
    assert _snippet(b"a" * 61) == repr("a" * 60) + "…"
    assert _snippet(b"a" * 61 + b"\xff") == repr("a" * 60) + "…"
    assert _snippet(b"\xff") == repr("\ufffd")


def test_a_manifest_that_is_not_a_json_object_is_named_with_its_start(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    blobs.add(OCI_MANIFEST, ["a list"], tag="v1")
    with pytest.raises(RegistryProtocolError) as err:
        client().get_manifest(parse(f"{host}/x/y:v1"))
    assert err.value.what.endswith("""is not a JSON object ('["a list"]')""")
    assert err.value.hint == "a proxy or captive portal may be answering instead of the registry"


# -- rate limits --------------------------------------------------------------------------------


def test_a_ratelimit_warning_only_under_the_threshold_with_its_window_in_hours() -> None:
    c = RegistryClient(Context(env={}), RegistrySettings(ratelimit_warning=10))
    c.transport.ratelimits.update({
        "b.example": RateLimit(host="b.example", limit=100, remaining=9, window=21600),
        "a.example": RateLimit(host="a.example", limit=200, remaining=3, window=None),
        "c.example": RateLimit(host="c.example", limit=100, remaining=10, window=3600),
        "d.example": RateLimit(host="d.example", limit=100, remaining=None, window=3600),
        "e.example": RateLimit(host="e.example", limit=100, remaining=0, window=7199),
    })  # fmt: skip
    tail = "(ratelimit-remaining); `docker login` raises the limit, a mirror spares it"
    assert c.ratelimit_warnings() == [
        f"a.example: only 3 pulls left of 200 {tail}",
        f"b.example: only 9 pulls left of 100 per 6 h {tail}",
        f"e.example: only 0 pulls left of 100 per 1 h {tail}",
    ]
    assert [r["host"] for r in c.ratelimits()] == [f"{x}.example" for x in "abcde"]


# -- manifests and small blobs ------------------------------------------------------------------


def test_a_manifest_is_fetched_once_then_known_by_its_tag_and_its_digest(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    digest = image(blobs, tag="v1")
    c = client()
    _, by_tag = c.get_manifest(parse(f"{host}/x/y:v1"))
    _, again = c.get_manifest(parse(f"{host}/x/y:v1"), host)
    _, by_digest = c.get_manifest(parse(f"{host}/x/y@{digest}"), host)
    assert by_tag == again == by_digest and by_tag.digest == digest
    assert dict(c.stats.by_kind) == {"manifest-get": 1}


def test_a_manifest_s_digest_is_the_one_asked_for_else_the_claimed_one_else_its_sha256() -> None:
    raw = json.dumps({"mediaType": OCI_MANIFEST, "config": {}}).encode()
    sha512 = "sha512:" + hashlib.sha512(raw).hexdigest()
    claims: dict[str, str] = {}

    def answer(req: Request) -> Answer:
        return Answer(200, {"Content-Type": OCI_MANIFEST, **claims}, raw)

    with ScriptedServer(answer) as srv:
        _, asked = client().get_manifest(parse(f"{srv.host}/x/y@{sha512}"))
        claims["Docker-Content-Digest"] = sha512
        _, claimed = client().get_manifest(parse(f"{srv.host}/x/y:v1"))
        claims.clear()
        _, hashed = client().get_manifest(parse(f"{srv.host}/x/y:v1"))
        claims["Docker-Content-Digest"] = "sha512:" + "0" * 128
        with pytest.raises(DigestMismatch, match=f"manifest {srv.host}/x/y@v1 from {srv.host}"):
            client().get_manifest(parse(f"{srv.host}/x/y:v1"))
        claims["Docker-Content-Digest"] = "sha1:abc"
        with pytest.raises(RegistryProtocolError, match=": Docker-Content-Digest is not a valid"):
            client().get_manifest(parse(f"{srv.host}/x/y:v1"))
    assert (asked.digest, claimed.digest) == (sha512, sha512)
    assert hashed.digest == digest_of(raw)


def test_a_manifest_without_a_media_type_takes_the_content_type_s() -> None:
    raw = json.dumps({"schemaVersion": 2}).encode()
    headers = {"Content-Type": f"{OCI_MANIFEST} ; charset=utf-8"}
    with ScriptedServer(lambda req: Answer(200, headers, raw)) as srv:
        _, manifest = client().get_manifest(parse(f"{srv.host}/x/y:v1"))
    assert manifest.media_type == OCI_MANIFEST


def test_a_manifest_s_own_media_type_wins_over_the_content_type() -> None:
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}).encode()
    with ScriptedServer(lambda req: Answer(200, {"Content-Type": "application/json"}, raw)) as srv:
        _, manifest = client().get_manifest(parse(f"{srv.host}/x/y:v1"))
    assert manifest.media_type == OCI_INDEX and manifest.is_index


@pytest.mark.parametrize(
    ("headers", "media_type"),
    [({"Content-Type": f"{OCI_MANIFEST};charset=utf-8"}, OCI_MANIFEST), ({}, "")],
)
def test_a_content_type_s_parameters_are_cut_and_no_type_at_all_is_empty(
    headers: dict[str, str], media_type: str
) -> None:
    raw = json.dumps({"schemaVersion": 2}).encode()
    with ScriptedServer(lambda req: Answer(200, headers, raw)) as srv:
        _, manifest = client().get_manifest(parse(f"{srv.host}/x/y:v1"))
    assert manifest.media_type == media_type


def test_each_blob_of_a_repository_is_fetched_and_kept_as_its_own(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    first, second = blobs.add("c", {"os": "linux"}), blobs.add("c", {"os": "windows"})
    c = client()
    ref = parse(f"{host}/x/y")
    assert json.loads(c.get_blob(ref, host, first)) == {"os": "linux"}
    assert json.loads(c.get_blob(ref, host, second)) == {"os": "windows"}
    assert json.loads(c.get_blob(ref, host, first)) == {"os": "linux"}  # kept: not asked again
    assert c.stats.by_kind["blob"] == 2


def test_a_manifest_answer_that_is_neither_200_nor_404_is_named() -> None:
    with (
        ScriptedServer(lambda req: Answer(204)) as srv,
        pytest.raises(RegistryProtocolError) as err,
    ):
        client().get_manifest(parse(f"{srv.host}/x/y:v1"))
    assert err.value.what == f"{srv.host}: GET manifest v1 of {srv.host}/x/y answered HTTP 204"


def test_a_missing_manifest_is_not_found_by_its_tag(repo: tuple[Blobs, str]) -> None:
    _, host = repo
    with pytest.raises(RegistryNotFound) as err:
        client().get_manifest(parse(f"{host}/x/y:v9"))
    assert err.value.what == f"manifest 'v9' not found in {host}/x/y on {host}"


CONFIG = b'{"os": "linux"}'
CONFIG_DIGEST = digest_of(CONFIG)


def redirecting(hops: int, code: int = 307, location: bool = True) -> ScriptedServer:
    """``/v2/x/y/blobs/D`` redirects ``hops`` times (``/hop/N``, relative) before the bytes."""

    def answer(req: Request) -> Answer:
        if req.path.startswith("/v2/") and req.path.endswith("/blobs/" + CONFIG_DIGEST):
            step = 0
        elif req.path.startswith("/hop/"):
            step = int(req.path.rsplit("/", 1)[-1])
        else:
            return Answer(404, {}, b'{"errors": [{"code": "BLOB_UNKNOWN"}]}')
        if step < hops:
            return Answer(code, {"Location": f"/hop/{step + 1}"} if location else {})
        return Answer(200, {"Content-Type": "application/octet-stream"}, CONFIG)

    return ScriptedServer(answer)


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_config_blob_follows_each_redirect_code(code: int) -> None:
    with redirecting(1, code) as srv:
        c = client()
        assert c.get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST) == CONFIG
        assert c.get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST) == CONFIG  # cached
    assert [r.path for r in srv.requests] == [f"/v2/x/y/blobs/{CONFIG_DIGEST}", "/hop/1"]
    assert dict(c.stats.by_kind) == {"blob": 2}


def test_a_config_blob_follows_five_redirects_not_six() -> None:
    with redirecting(5) as srv:
        assert client().get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST) == CONFIG
    with redirecting(6) as srv, pytest.raises(RegistryProtocolError) as err:
        client().get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST)
    assert err.value.what == (
        f"{srv.host}: GET blob {CONFIG_DIGEST} of {srv.host}/x/y answered HTTP 307"
    )
    assert len(srv.requests) == 6


def test_a_redirect_without_a_location_is_the_answer() -> None:
    with redirecting(1, 302, location=False) as srv, pytest.raises(RegistryProtocolError) as err:
        client().get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST)
    assert err.value.what.endswith("answered HTTP 302")
    assert len(srv.requests) == 1


def test_a_config_blob_is_refused_when_missing_or_larger_than_allowed() -> None:
    other = "sha256:" + "1" * 64
    with redirecting(0) as srv:
        with pytest.raises(RegistryNotFound) as missing:
            client().get_blob(parse(f"{srv.host}/x/y"), srv.host, other)
        with pytest.raises(RegistryProtocolError) as large:
            client().get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST, max_bytes=5)
        assert client().get_blob(
            parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST, max_bytes=len(CONFIG)
        )
    assert missing.value.what == f"blob {other} not found in {srv.host}/x/y on {srv.host}"
    assert large.value.what == f"{srv.host}: blob {CONFIG_DIGEST} is larger than 5 bytes"


def test_a_blob_404_naming_an_unknown_repository_says_so_and_bad_bytes_name_the_blob() -> None:
    unknown = b'{"errors": [{"code": "NAME_UNKNOWN"}]}'
    with (
        ScriptedServer(lambda req: Answer(404, {}, unknown)) as srv,
        pytest.raises(RegistryNotFound) as err,
    ):
        client().get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST)
    assert err.value.what == f"repository {srv.host}/x/y not found on {srv.host}"
    with (
        ScriptedServer(lambda req: Answer(200, {}, b"tampered")) as srv,
        pytest.raises(DigestMismatch) as bad,
    ):
        client().get_blob(parse(f"{srv.host}/x/y"), srv.host, CONFIG_DIGEST)
    assert bad.value.what.startswith(f"blob {srv.host}/x/y@{CONFIG_DIGEST} from {srv.host}: ")


def test_a_malformed_digest_from_the_registry_says_nothing_was_written() -> None:
    bad = {"Docker-Content-Digest": "md5:" + "0" * 32}
    with (
        ScriptedServer(lambda req: Answer(200, bad)) as srv,
        pytest.raises(RegistryProtocolError) as err,
    ):
        client().head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert err.value.hint == (
        "the registry or a mirror sent a malformed or unsupported digest (only sha256, sha384 "
        "and sha512 are accepted); nothing was written"
    )


def test_a_head_without_a_content_type_has_an_empty_media_type() -> None:
    digest = "sha256:" + "b" * 64
    with ScriptedServer(lambda req: Answer(200, {"Docker-Content-Digest": digest})) as srv:
        _, head = client().head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert (head.digest, head.media_type, head.size) == (digest, "", 0)


def test_a_head_whose_length_is_not_a_number_has_no_size() -> None:
    headers = {"Docker-Content-Digest": "sha256:" + "b" * 64, "Content-Length": "unknown"}
    with ScriptedServer(lambda req: Answer(200, headers)) as srv:
        _, head = client().head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert head.size is None


def test_each_repository_s_tags_are_listed_and_kept_as_its_own() -> None:
    def tags(req: Request) -> Answer:
        name = req.path.split("/tags/list")[0].removeprefix("/v2/")
        return Answer(200, {"Content-Type": "application/json"},
                      json.dumps({"name": name, "tags": [name.replace("/", "-")]}).encode())  # fmt: skip

    with ScriptedServer(tags) as srv:
        c = client()
        assert c.list_tags(parse(f"{srv.host}/x/y")) == ["x-y"]
        assert c.list_tags(parse(f"{srv.host}/x/z")) == ["x-z"]
        assert c.list_tags(parse(f"{srv.host}/x/y")) == ["x-y"]  # kept: not asked again
    assert len(srv.requests) == 2


# -- challenges, refusals, mirrors --------------------------------------------------------------


class Guarded:
    """A registry that wants a bearer token (from its own ``/token``) and refuses ``refuse``."""

    def __init__(self, refuse: int | None = None, challenge: bool = True) -> None:
        self.refuse, self.challenge, self.issued = refuse, challenge, 0

    def answer(self, req: Request) -> Answer:
        if req.path.startswith("/token"):
            self.issued += 1
            return Answer(200, {}, json.dumps({"token": f"tok-{self.issued:08d}"}).encode())
        host = req.headers["host"]
        if req.headers.get("authorization") != f"Bearer tok-{self.issued:08d}" or not self.issued:
            hdrs = {"WWW-Authenticate": f'Bearer realm="http://{host}/token",service="s"'}
            return Answer(401, hdrs if self.challenge else {})
        if self.refuse:
            return Answer(self.refuse)
        return Answer(200, {"Docker-Content-Digest": "sha256:" + "a" * 64, "Content-Type": f"{OCI_MANIFEST};v=1",
                            "Content-Length": "0"})  # fmt: skip


def logged_in(tmp_path: Any, host: str) -> RegistryClient:
    import base64

    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {
        "auth": base64.b64encode(b"alice:client-pw-1").decode()}}}))  # fmt: skip
    return RegistryClient(Context(env={"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path)}))


def test_a_challenge_is_answered_once_then_the_token_is_sent() -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        c = client()
        _, head = c.head_manifest(parse(f"{srv.host}/x/y:v1"))
        _, again = c.head_manifest(parse(f"{srv.host}/x/y:v2"))
    assert head.digest == again.digest == "sha256:" + "a" * 64
    assert head.media_type == OCI_MANIFEST and head.size == 0
    assert registry.issued == 1
    assert [r.path.split("?")[0] for r in srv.requests] == [
        "/v2/x/y/manifests/v1", "/token", "/v2/x/y/manifests/v1", "/v2/x/y/manifests/v2",
    ]  # fmt: skip
    # the request repeated with the token is counted (and capped) as the kind it is (how many
    # times each: a retried attempt on a connection the server dropped counts too)
    assert set(c.stats.by_kind) == {"manifest-head", "token"}


def test_a_token_refused_later_is_replaced_once() -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        c = client()
        c.head_manifest(parse(f"{srv.host}/x/y:v1"))
        registry.issued += 1  # the registry no longer accepts the token it gave
        c.head_manifest(parse(f"{srv.host}/x/y:v2"))
    assert registry.issued == 3


def test_a_401_without_a_challenge_is_an_auth_error() -> None:
    with (
        ScriptedServer(Guarded(challenge=False).answer) as srv,
        pytest.raises(RegistryAuthError) as err,
    ):
        client().head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert (
        err.value.what
        == f"{srv.host} refused HEAD /v2/x/y/manifests/v1 (HTTP 401) without a challenge"
    )


def test_a_refused_anonymous_token_is_not_found_or_private(tmp_path: Any) -> None:
    with ScriptedServer(Guarded(refuse=401).answer) as srv:
        with pytest.raises(RegistryNotFound) as anonymous:
            client().head_manifest(parse(f"{srv.host}/x/y:v1"))
        with pytest.raises(RegistryAuthError) as named:
            logged_in(tmp_path, srv.host).head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert anonymous.value.what == (
        f"{srv.host}: repository x/y not found, or private: check the name, or log in"
    )
    assert anonymous.value.hint == (
        f"check the spelling of {srv.host}/x/y; if it is private, run `docker login {srv.host}`"
    )
    assert (
        named.value.what
        == f"{srv.host} refused access to {srv.host}/x/y (HTTP 401) for user 'alice'"
    )
    assert named.value.hint == (
        f"check `docker login {srv.host}` and that the account can pull x/y"
    )


def test_a_403_is_denied_access() -> None:
    with ScriptedServer(Guarded(refuse=403).answer) as srv, pytest.raises(RegistryAuthError) as err:
        client().head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert err.value.what == f"{srv.host} denied access to {srv.host}/x/y (HTTP 403)"
    assert err.value.hint == "the account lacks permission for this repository"


def test_a_head_without_a_digest_falls_back_to_fetching_and_hashing(
    repo: tuple[Blobs, str],
) -> None:
    blobs, _ = repo
    digest = image(blobs, tag="v1")
    raw = blobs.by_digest[digest][1]

    def no_digest_on_head(req: Request) -> Answer:
        out = blobs.answer(req)
        if req.method == "HEAD":
            return Answer(out.status, {"Content-Type": "x"}, out.body)
        return out

    with ScriptedServer(no_digest_on_head) as srv:
        c = client()
        where, head = c.head_manifest(parse(f"{srv.host}/x/y:v1"))
        assert c.head_manifest(parse(f"{srv.host}/x/y:v1")) == (where, head)  # kept
    assert where == srv.host
    assert (head.digest, head.media_type, head.size) == (digest, OCI_MANIFEST, len(raw))
    assert [r.method for r in srv.requests] == ["HEAD", "GET"]


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (Answer(204), RegistryProtocolError, "{host}: HEAD manifest v1 answered HTTP 204"),
        (Answer(200, {"Docker-Content-Digest": "md5:1"}), RegistryProtocolError,
         "{host}: the digest of {host}/x/y:v1 is not a valid digest: "),
        (Answer(404), RegistryNotFound, "manifest 'v1' not found in {host}/x/y on {host}"),
    ],
)  # fmt: skip
def test_a_head_that_gives_no_usable_digest_is_refused(
    answer: Answer, error: type[Exception], message: str
) -> None:
    with ScriptedServer(lambda req: answer) as srv, pytest.raises(error) as err:
        client().head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert str(err.value).startswith(message.format(host=srv.host))


def test_mirrors_are_tried_in_order_and_each_failure_is_named(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    image(blobs, tag="v1")
    with (
        ScriptedServer(lambda req: Answer(404)) as m1,
        ScriptedServer(lambda req: Answer(204)) as m2,
    ):
        settings = RegistrySettings(mirrors=((host, (m1.host, m2.host)),), retries=0)
        c = RegistryClient(Context(env={"HOME": "/nonexistent"}), settings)
        assert c.hosts_for(parse(f"{host}/x/y")) == [m1.host, m2.host, host]
        where, _ = c.head_manifest(parse(f"{host}/x/y:v1"))
        assert where == host
        assert c.mirror_failures == [
            f"mirror {m1.host} failed for {host}/x/y: manifest 'v1' not found in {host}/x/y on "
            f"{m1.host} — list the available tags with `rocmenv tags list {host}/x/y`",
            f"mirror {m2.host} failed for {host}/x/y: {m2.host}: HEAD manifest v1 answered HTTP 204",
        ]
        with pytest.raises(RegistryNotFound) as err:
            c.head_manifest(parse(f"{host}/x/y:v9"))
    assert err.value.what == (
        f"manifest 'v9' not found in {host}/x/y on {host} (after the mirrors: "
        f"{c.mirror_failures[-2]}; {c.mirror_failures[-1]})"
    )


def test_a_single_failed_mirror_is_named_when_the_registry_fails_too() -> None:
    with (
        ScriptedServer(lambda req: Answer(204)) as mirror,
        ScriptedServer(lambda req: Answer(404)) as registry,
    ):
        settings = RegistrySettings(mirrors=((registry.host, (mirror.host,)),), retries=0)
        c = RegistryClient(Context(env={"HOME": "/nonexistent"}), settings)
        with pytest.raises(RegistryNotFound) as err:
            c.head_manifest(parse(f"{registry.host}/x/y:v1"))
    assert err.value.what == (
        f"manifest 'v1' not found in {registry.host}/x/y on {registry.host} (after the mirrors: "
        f"mirror {mirror.host} failed for {registry.host}/x/y: {mirror.host}: HEAD manifest v1 "
        "answered HTTP 204)"
    )


def test_docker_hub_is_asked_at_its_registry_host_a_mirror_listed_once() -> None:
    settings = RegistrySettings(mirrors=(("docker.io", ("m.example", "registry-1.docker.io")),))
    c = RegistryClient(Context(env={}), settings)
    assert c.hosts_for(parse("rocm/sgl-dev")) == ["m.example", "registry-1.docker.io"]
    assert RegistryClient(Context(env={})).hosts_for(parse("rocm/sgl-dev")) == [
        "registry-1.docker.io"
    ]


def test_a_reference_without_tag_or_digest_means_latest(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    digest = image(blobs, tag="latest")
    assert client().head_manifest(parse(f"{host}/x/y"))[1].digest == digest
    assert client().get_manifest(parse(f"{host}/x/y"))[1].digest == digest


def test_the_platform_manifest_comes_from_the_host_that_served_the_index(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    amd = image(blobs)
    blobs.add(OCI_INDEX, {"mediaType": OCI_INDEX, "manifests": [entry(amd, "linux", "amd64")]},
              tag="v1")  # fmt: skip
    with ScriptedServer(lambda req: Answer(404)) as mirror:
        settings = RegistrySettings(mirrors=((host, (mirror.host,)),), retries=0)
        c = RegistryClient(Context(env={"HOME": "/nonexistent"}), settings)
        found = c.resolve_platform(parse(f"{host}/x/y:v1"))
    assert found.registry == host and found.platform_digest == amd
    assert len(mirror.requests) == 1  # the index only; not asked again for the image


def test_an_index_entry_whose_bytes_do_not_match_names_the_repository(
    repo: tuple[Blobs, str],
) -> None:
    blobs, host = repo
    amd = image(blobs)
    blobs.by_digest[amd] = (OCI_MANIFEST, b'{"mediaType": "tampered"}')
    blobs.add(OCI_INDEX, {"mediaType": OCI_INDEX, "manifests": [entry(amd, "linux", "amd64")]},
              tag="v1")  # fmt: skip
    with pytest.raises(DigestMismatch) as err:
        client().resolve_platform(parse(f"{host}/x/y:v1"))
    assert f"manifest {host}/x/y@{amd} from {host}" in str(err.value)


def test_a_manifest_404_naming_an_unknown_repository_says_so() -> None:
    body = b'{"errors": [{"code": "NAME_UNKNOWN"}]}'
    with (
        ScriptedServer(lambda req: Answer(404, {}, body)) as srv,
        pytest.raises(RegistryNotFound) as err,
    ):
        client().get_manifest(parse(f"{srv.host}/x/y:v1"))
    assert err.value.what == f"repository {srv.host}/x/y not found on {srv.host}"


# -- the token cache: remembered challenges asked ahead, or nothing read at all ------------------


def cached_client(tmp_path: Any, *, token_cache: bool = True) -> RegistryClient:
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "ROCMENV_REGISTRY_BACKOFF": "0"}  # fmt: skip
    return RegistryClient(Context(env=env), token_cache=token_cache)


def remember(tmp_path: Any, host: str, realm: str, service: str) -> Any:
    from rocmenv.registry.challenge_cache import ChallengeCache

    path = tmp_path / "cache" / "rocmenv" / "registry-challenges.json"
    ChallengeCache(path).put(host, realm, service)
    return path


class Recorded:
    """Every round trip a client makes (thread name, daemon, path, Authorization) and every
    connection it dials ahead (URL, registry host)."""

    def __init__(self, c: RegistryClient, monkeypatch: pytest.MonkeyPatch) -> None:
        import threading
        import urllib.parse

        self.sent: list[tuple[str, bool, str, str | None]] = []
        self.dialled: list[tuple[str, str | None]] = []
        send = c.transport.send

        def recording_send(method: str, url: str, headers: Any, *a: Any, **kw: Any) -> Response:
            me = threading.current_thread()
            path = urllib.parse.urlsplit(url).path
            self.sent.append((me.name, me.daemon, path, headers.get("Authorization")))
            return send(method, url, headers, *a, **kw)

        def dial_ahead(url: str, registry_host: str | None = None) -> None:
            self.dialled.append((url, registry_host))

        monkeypatch.setattr(c.transport, "send", recording_send)
        monkeypatch.setattr(c.transport, "dial_ahead", dial_ahead)
        # the transport's own dial of whichever request goes first (a race with the thread
        # asking ahead) is not the client's: only the client's dials are recorded
        monkeypatch.setattr(c.transport, "_first", False)


def test_a_remembered_challenge_is_asked_ahead_anonymously_and_its_token_is_the_one_sent(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        realm = f"http://{srv.host}/token"
        remember(tmp_path, srv.host, realm, "s")
        c = cached_client(tmp_path)
        seen = Recorded(c, monkeypatch)
        with c:
            _, head = c.head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert head.digest == "sha256:" + "a" * 64
    assert registry.issued == 1  # the token asked ahead answered the 401: not asked twice
    tokens = [r for r in srv.requests if r.path.startswith("/token")]
    assert [r.path for r in tokens] == ["/token?service=s&scope=repository%3Ax%2Fy%3Apull"]
    assert "authorization" not in tokens[0].headers
    # on its own daemon thread (a hung token server never holds the command at exit)
    assert [s for s in seen.sent if s[2] == "/token"] == [
        ("rocmenv-token-ahead", True, "/token", None)
    ]
    assert [(s[2], s[3]) for s in seen.sent if s[2] != "/token"] == [
        ("/v2/x/y/manifests/v1", None), ("/v2/x/y/manifests/v1", "Bearer tok-00000001"),
    ]  # fmt: skip
    # the realm and the registry are both dialled while the first request is prepared
    manifest = f"http://{srv.host}/v2/x/y/manifests/v1"
    assert seen.dialled == [(realm, srv.host), (manifest, srv.host)]


def test_a_token_cached_by_one_command_is_sent_with_the_next_command_s_first_request(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        first = cached_client(tmp_path)
        seen = Recorded(first, monkeypatch)
        with first:
            first.head_manifest(parse(f"{srv.host}/x/y:v1"))
        assert seen.dialled == []  # nothing remembered yet: nothing asked or dialled ahead
        files = sorted(p.name for p in (tmp_path / "cache" / "rocmenv").iterdir())
        assert files == ["registry-challenges.json", "registry-tokens.json"]
        del srv.requests[:]
        with cached_client(tmp_path) as second:
            second.head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert [(r.path, r.headers.get("authorization")) for r in srv.requests] == [
        ("/v2/x/y/manifests/v1", "Bearer tok-00000001")
    ]


def test_a_cached_token_the_registry_refuses_is_replaced_from_the_realm_not_the_cache(
    tmp_path: Any,
) -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        with cached_client(tmp_path) as first:
            first.head_manifest(parse(f"{srv.host}/x/y:v1"))
        registry.issued += 1  # the registry no longer accepts the token the cache holds
        del srv.requests[:]
        with cached_client(tmp_path) as second:
            second.head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert [(r.path.split("?")[0], r.headers.get("authorization")) for r in srv.requests] == [
        ("/v2/x/y/manifests/v1", "Bearer tok-00000001"),
        ("/token", None),
        ("/v2/x/y/manifests/v1", "Bearer tok-00000003"),
    ]


def test_a_client_without_the_token_cache_neither_reads_nor_writes_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        planted = remember(tmp_path, srv.host, f"http://{srv.host}/token", "s")
        before = planted.read_bytes()
        c = cached_client(tmp_path, token_cache=False)
        seen = Recorded(c, monkeypatch)
        with c:
            c.head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert c.auth.cache is None and c.auth.challenges is None
    assert seen.dialled == []
    assert [s[0] for s in seen.sent] == ["MainThread"] * 3  # nothing asked ahead
    assert [r.path.split("?")[0] for r in srv.requests] == [
        "/v2/x/y/manifests/v1", "/token", "/v2/x/y/manifests/v1",
    ]  # fmt: skip
    assert [p.name for p in planted.parent.iterdir()] == [planted.name]
    assert planted.read_bytes() == before


def test_rocmenv_token_cache_0_turns_both_caches_off_for_a_caching_client(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Guarded()
    with ScriptedServer(registry.answer) as srv:
        env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
               "ROCMENV_TOKEN_CACHE": "0"}  # fmt: skip
        with RegistryClient(Context(env=env), token_cache=True) as c:
            seen = Recorded(c, monkeypatch)
            c.head_manifest(parse(f"{srv.host}/x/y:v1"))
    assert c.auth.cache is None and c.auth.challenges is None
    assert seen.dialled == [] and registry.issued == 1
    assert not (tmp_path / "cache").exists()


def test_an_open_registry_never_builds_the_auth(repo: tuple[Blobs, str]) -> None:
    blobs, host = repo
    image(blobs, tag="v1")
    c = client()
    c.head_manifest(parse(f"{host}/x/y:v1"))
    assert c._auth is None
