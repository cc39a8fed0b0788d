"""Tag listing: ``/v2/<name>/tags/list`` pages, as registries send them.

``n=`` from 1 to :data:`MAX_PAGE_SIZE` (Distribution 3 answers ``400 PAGINATION_NUMBER_INVALID``
above it, ECR errors); ``Link: <…>; rel="next"`` followed whether relative or absolute, on the
same host only, at most ``[registry] max-pages`` times; a full page without ``Link`` ends the
list (Docker Hub has been seen to ignore ``n`` and send everything at once).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from rocmenv.errors import RegistryNotFound, RegistryProtocolError
from rocmenv.grammar.reference import Reference
from rocmenv.registry.response import Response
from rocmenv.settings.registry import RegistrySettings


class PageSource(Protocol):
    """What the pages are read through (:class:`rocmenv.registry.client.RegistryClient`)."""

    settings: RegistrySettings

    def on_hosts(self, ref: Reference, call: Callable[[str], Any]) -> Any: ...

    def request(
        self, ref: Reference, host: str, method: str, path: str, *, kind: str
    ) -> Response: ...

    def not_found(
        self, ref: Reference, host: str, resp: Response, what: str
    ) -> RegistryNotFound: ...


MAX_PAGE_SIZE = 1000


def tag_pages(
    client: PageSource, ref: Reference, page_size: int | None = None
) -> Iterator[list[str]]:
    """Pages of tags as the registry sends them (``n=`` when ``page_size`` is given).

    ``Link: <…>; rel="next"`` is followed whether relative or absolute, on the same host
    only, at most ``[registry] max-pages`` times; a full page without ``Link`` ends the
    list (Docker Hub has been seen to ignore ``n`` and send everything at once).
    """
    if page_size is not None and not 1 <= page_size <= MAX_PAGE_SIZE:
        from rocmenv.errors import UsageError

        raise UsageError(
            f"page size {page_size} is out of range: registries accept 1 to {MAX_PAGE_SIZE} "
            "tags per page (Distribution answers 400 PAGINATION_NUMBER_INVALID above it)",
            hint=f"use --page-size {MAX_PAGE_SIZE} or less",
        )

    def first(host: str) -> tuple[str, Response]:
        path = f"/v2/{ref.path}/tags/list"
        if page_size:
            path += f"?n={page_size}"
        return host, _fetch_page(client, ref, host, path)

    host, resp = client.on_hosts(ref, first)
    seen: set[str] = set()
    pages = 1
    while True:
        tags = _tags_of(ref, host, resp)
        yield tags
        link = resp.header("link")
        next_path = next_link(link, resp.url, host) if link else None
        if not next_path or next_path in seen:
            return
        if pages >= client.settings.max_pages:
            raise RegistryProtocolError(
                f"{host}: the tag list of {ref.name} goes on past {pages} pages; stopped",
                hint="a broken or hostile registry keeps sending rel=next links; raise "
                "[registry] max-pages if the repository really has that many tags",
            )
        seen.add(next_path)
        pages += 1
        resp = _fetch_page(client, ref, host, next_path)


def _fetch_page(client: PageSource, ref: Reference, host: str, path: str) -> Response:
    resp = client.request(ref, host, "GET", path, kind="tags")
    if resp.status == 404:
        raise client.not_found(ref, host, resp, "repository")
    if resp.status != 200:
        raise RegistryProtocolError(
            f"{host}: listing tags of {ref.name} answered HTTP {resp.status}"
        )
    return resp


def _tags_of(ref: Reference, host: str, resp: Response) -> list[str]:
    try:
        data = json.loads(resp.body)
        tags = data.get("tags") or []
    except (ValueError, AttributeError):
        raise RegistryProtocolError(
            f"{host}: the tag list of {ref.name} is not JSON ({_snippet(resp.body)})",
            hint="a proxy or captive portal may be answering instead of the registry",
        ) from None
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise RegistryProtocolError(f"{host}: the tag list of {ref.name} is malformed")
    return tags


def next_link(link: str, base_url: str = "", host: str | None = None) -> str | None:
    """The path and query of ``Link: <…>; rel="next"``, relative or absolute.

    An absolute URL must stay on ``host`` (a registry never sends its pages elsewhere).
    """
    for part in link.split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") or "rel=next" in params.replace(" ", ""):
            url = url.strip().strip("<>")
            absolute = urllib.parse.urljoin(base_url, url) if base_url else url
            split = urllib.parse.urlsplit(absolute)
            if host is not None and split.netloc and split.netloc != host:
                raise RegistryProtocolError(
                    f"{host}: the next page of tags is on another host ({split.netloc})",
                    hint="rocmenv follows tag-list pages on the registry's own host only",
                )
            return split.path + (f"?{split.query}" if split.query else "")
    return None


def _snippet(body: bytes) -> str:
    text = body[:60].decode("utf-8", "replace").replace("\n", " ")
    return repr(text) + ("…" if len(body) > 60 else "")
