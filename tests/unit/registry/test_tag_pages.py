"""Tag-list pages (rocmenv.registry.tag_list, issue 34): at most ``[registry] max-pages`` pages
are asked for — the page that would be one past the cap is never fetched, and the listing is
an error rather than a silently short list — ``Link`` is followed relative or absolute on the
registry's own host only, a link back to a page already read ends the list. Counted by
requests, not read from a message. The same in front of the real registry:
tests/integration/registry/test_tag_page_cap.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from rocmenv.errors import RegistryNotFound, RegistryProtocolError, UsageError
from rocmenv.grammar.reference import Reference, parse
from rocmenv.registry.response import Response
from rocmenv.registry.tag_list import MAX_PAGE_SIZE, next_link, tag_pages
from rocmenv.settings.registry import RegistrySettings

HOST = "registry.example:5000"
REF = parse(f"{HOST}/rocm/sgl-dev")


class Pages:
    """A registry whose tag list is ``count`` pages of one tag each, page i linking to i+1
    (``link``: how the next page is written)."""

    def __init__(self, count: int, max_pages: int = 1000,
                 link: Callable[[int], str] = lambda i: f"</v2/rocm/sgl-dev/tags/list?p={i}>; rel=\"next\"") -> None:  # fmt: skip
        self.count, self.link = count, link
        self.settings = RegistrySettings(max_pages=max_pages)
        self.paths: list[str] = []
        self.kinds: list[str] = []
        self.status: dict[int, int] = {}  # page -> HTTP status
        self.bodies: dict[int, bytes] = {}  # page -> body
        self.missing: list[tuple[Reference, str, int, str]] = []

    def on_hosts(self, ref: Reference, call: Callable[[str], Any]) -> Any:
        return call(HOST)

    def request(self, ref: Reference, host: str, method: str, path: str, *, kind: str) -> Response:
        self.paths.append(path)
        self.kinds.append(kind)
        page = int(path.split("p=")[1]) if "p=" in path else 0
        headers = {"link": self.link(page + 1)} if page + 1 < self.count else {}
        body = self.bodies.get(page, json.dumps({"tags": [f"t{page}"]}).encode())
        return Response(status=self.status.get(page, 200), headers=headers, body=body,
                        url=f"https://{host}{path}")  # fmt: skip

    def not_found(self, ref: Reference, host: str, resp: Response, what: str) -> RegistryNotFound:
        self.missing.append((ref, host, resp.status, what))
        return RegistryNotFound(f"{what} not found")


@pytest.mark.parametrize("cap", [1, 2, 3, 10])
def test_a_list_of_exactly_max_pages_is_read_whole(cap: int) -> None:
    source = Pages(cap, max_pages=cap)
    assert [t for page in tag_pages(source, REF) for t in page] == [f"t{i}" for i in range(cap)]
    assert len(source.paths) == cap


@pytest.mark.parametrize("cap", [1, 2, 3, 10])
def test_the_page_past_max_pages_is_never_asked_for_and_the_list_is_an_error(cap: int) -> None:
    source = Pages(cap + 5, max_pages=cap)
    seen: list[str] = []
    with pytest.raises(RegistryProtocolError) as caught:
        for page in tag_pages(source, REF):
            seen.extend(page)
    assert caught.value.exit_code == 3
    assert len(source.paths) == cap  # not one more
    assert seen == [f"t{i}" for i in range(cap)]


def test_one_page_more_than_max_pages_is_an_error_too() -> None:
    source = Pages(4, max_pages=3)
    with pytest.raises(RegistryProtocolError):
        list(tag_pages(source, REF))
    assert len(source.paths) == 3


def test_a_link_back_to_a_page_already_read_ends_the_list() -> None:
    source = Pages(100, link=lambda i: f'</v2/rocm/sgl-dev/tags/list?p={min(i, 2)}>; rel="next"')
    tags = [t for page in tag_pages(source, REF) for t in page]
    assert tags == ["t0", "t1", "t2"]
    assert len(source.paths) == 3  # p=2 asked once


@pytest.mark.parametrize(
    "link",
    [
        lambda i: f'<https://{HOST}/v2/rocm/sgl-dev/tags/list?p={i}>; rel="next"',
        lambda i: f"<?p={i}>; rel=next",
        lambda i: (
            f'</v2/rocm/sgl-dev/tags/list?p={i}>; rel="prev", </v2/rocm/sgl-dev/tags/list?p={i}>; rel="next"'
        ),
    ],
    ids=["absolute", "relative-query", "among-others"],
)
def test_links_are_followed_relative_or_absolute(link: Callable[[int], str]) -> None:
    source = Pages(3, link=link)
    assert [t for page in tag_pages(source, REF) for t in page] == ["t0", "t1", "t2"]


def test_a_next_page_on_another_host_is_refused() -> None:
    source = Pages(
        3, link=lambda i: f'<https://elsewhere.example/v2/x/tags/list?p={i}>; rel="next"'
    )
    with pytest.raises(RegistryProtocolError):
        list(tag_pages(source, REF))
    assert len(source.paths) == 1


def test_next_link_reads_only_rel_next() -> None:
    assert next_link('</a?p=1>; rel="prev"') is None
    assert next_link('</a?p=1>; rel="next"') == "/a?p=1"
    assert next_link("</a>;rel=next") == "/a"
    assert next_link(f'<https://{HOST}/b?n=2&last=x>; rel="next"', "", HOST) == "/b?n=2&last=x"


@pytest.mark.parametrize("size", [0, -1, MAX_PAGE_SIZE + 1])
def test_a_page_size_out_of_range_is_a_usage_error_before_any_request(size: int) -> None:
    source = Pages(1)
    with pytest.raises(UsageError):
        list(tag_pages(source, REF, page_size=size))
    assert source.paths == []


@pytest.mark.parametrize("size", [1, MAX_PAGE_SIZE])
def test_the_page_size_is_asked_for(size: int) -> None:
    source = Pages(1)
    list(tag_pages(source, REF, page_size=size))
    assert source.paths == [f"/v2/rocm/sgl-dev/tags/list?n={size}"]


def test_every_page_is_asked_for_as_a_tags_request_at_its_full_path() -> None:
    source = Pages(3, link=lambda i: f"<?p={i}>; rel=next")  # relative to the page's URL
    list(tag_pages(source, REF))
    assert source.kinds == ["tags"] * 3  # what the request statistics count
    assert source.paths[1:] == ["/v2/rocm/sgl-dev/tags/list?p=1", "/v2/rocm/sgl-dev/tags/list?p=2"]


@pytest.mark.parametrize("page", [0, 2])
def test_a_missing_repository_is_not_found_naming_it(page: int) -> None:
    source = Pages(3)
    source.status[page] = 404
    with pytest.raises(RegistryNotFound):
        list(tag_pages(source, REF))
    ((ref, host, status, what),) = source.missing
    assert (ref, host, status, what) == (REF, HOST, 404, "repository")


@pytest.mark.parametrize("status", [401, 405, 500, 503])
def test_any_other_status_is_a_protocol_error_naming_it(status: int) -> None:
    source = Pages(2)
    source.status[1] = status
    with pytest.raises(RegistryProtocolError) as caught:
        list(tag_pages(source, REF))
    assert str(status) in caught.value.what and HOST in caught.value.what
    assert source.missing == []


@pytest.mark.parametrize(
    ("body", "shown"),
    [(b"<html>captive portal</html>", "'<html>captive portal</html>'"),
     (b"x" * 60, "'" + "x" * 60 + "'"), (b"x" * 61, "'" + "x" * 60 + "'…"),
     (b"a\nb", "'a b'"), (b"\xff\xfe<html>", "'\ufffd\ufffd<html>'")],
)  # fmt: skip
def test_a_page_that_is_not_json_is_an_error_showing_its_start(body: bytes, shown: str) -> None:
    source = Pages(1)
    source.bodies[0] = body
    with pytest.raises(RegistryProtocolError) as caught:
        list(tag_pages(source, REF))
    what = caught.value.what
    assert f"({shown})" in what and what.startswith(f"{HOST}: ") and REF.name in what
    assert caught.value.hint


@pytest.mark.parametrize("tags", ['"abc"', "[1]", '["a", null]', '{"a": 1}'])
def test_tags_that_are_not_a_list_of_strings_are_malformed(tags: str) -> None:
    source = Pages(1)
    source.bodies[0] = f'{{"tags": {tags}}}'.encode()
    with pytest.raises(RegistryProtocolError) as caught:
        list(tag_pages(source, REF))
    assert caught.value.what.startswith(f"{HOST}: ") and REF.name in caught.value.what


@pytest.mark.parametrize("body", [b"{}", b'{"tags": null}', b'{"tags": []}'])
def test_a_page_without_tags_is_an_empty_page(body: bytes) -> None:
    source = Pages(1)
    source.bodies[0] = body
    assert list(tag_pages(source, REF)) == [[]]


def test_errors_that_have_a_remedy_give_it() -> None:
    with pytest.raises(RegistryProtocolError) as caught:
        list(tag_pages(Pages(5, max_pages=2), REF))
    assert caught.value.hint and HOST in caught.value.what and REF.name in caught.value.what
    other = Pages(3, link=lambda i: '<https://elsewhere.example/x>; rel="next"')
    with pytest.raises(RegistryProtocolError) as caught:
        list(tag_pages(other, REF))
    assert caught.value.hint and "elsewhere.example" in caught.value.what
    with pytest.raises(UsageError) as usage:
        list(tag_pages(Pages(1), REF, page_size=0))
    assert usage.value.hint and str(MAX_PAGE_SIZE) in usage.value.what


@pytest.mark.parametrize(
    ("link", "path"),
    [
        ('</a?p=1>; rel = "next"', "/a?p=1"),
        ("</a?p=1>; rel = next", "/a?p=1"),
        ('</a?p=1>; rel="next"; title="more"', "/a?p=1"),
        ('</prev>; rel="prev", </next>; rel="next"', "/next"),
        ('</next>; rel="next", </prev>; rel="prev"', "/next"),
        ("<?p=2>; rel=next", "?p=2"),  # no base: as written
        ('</a>; rel="nextpage"', None),
        ('</tags/X>; rel="next"', "/tags/X"),
    ],
)
def test_next_link_finds_rel_next_however_it_is_written(link: str, path: str | None) -> None:
    assert next_link(link) == path


def test_a_relative_next_link_is_resolved_against_the_pages_url() -> None:
    base = f"https://{HOST}/v2/rocm/sgl-dev/tags/list?n=2"
    assert (
        next_link("<?n=2&last=b>; rel=next", base, HOST) == "/v2/rocm/sgl-dev/tags/list?n=2&last=b"
    )
    assert next_link("<list?x=1>; rel=next", base, HOST) == "/v2/rocm/sgl-dev/tags/list?x=1"
