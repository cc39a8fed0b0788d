"""``[registry] max-pages`` against the real registry behind a spec-following paginator
(issue 34): a tag list of exactly that many pages is read whole; one that goes on is an error
after exactly ``max-pages`` requests — never one more, never a silently short list."""

from __future__ import annotations

import math
from typing import Any

import pytest

from rocmenv.context import Context
from rocmenv.errors import RegistryProtocolError
from rocmenv.grammar.reference import parse
from rocmenv.registry.client import RegistryClient
from rocmenv.settings.registry import RegistrySettings
from tests.support.paginator import Paginator


def listing(registry: Any, page: int, max_pages: int) -> tuple[list[str] | None, int]:
    ctx = Context(env={"HOME": "/nonexistent", "ROCMENV_REGISTRY_BACKOFF": "0.01"})
    client = RegistryClient(ctx, RegistrySettings(max_pages=max_pages))
    with Paginator(registry.host, default_page=page, max_page=page) as pager:
        try:
            tags: list[str] | None = client.list_tags(parse(f"{pager.host}/rocm/sgl-dev"))
        except RegistryProtocolError:
            tags = None
        return tags, len(pager.tag_requests())


def test_max_pages_is_the_most_pages_asked_for(registry: Any, tagset: Any) -> None:
    everything, _ = listing(registry, 1000, 1000)
    assert everything is not None and set(tagset.tags) <= set(everything)
    page = math.ceil(len(everything) / 4)  # the list is 4 pages of this size (or 3 and a bit)
    pages = math.ceil(len(everything) / page)
    tags, asked = listing(registry, page, pages)
    assert tags is not None and sorted(tags) == sorted(everything)
    assert asked == pages
    for cap in (pages - 1, 1):
        tags, asked = listing(registry, page, cap)
        assert tags is None, f"max-pages {cap} of {pages}: the list must be refused"
        assert asked == cap, f"max-pages {cap}: {asked} pages asked for"


@pytest.mark.parametrize("cap", [2])
def test_one_page_past_the_cap_is_never_fetched(registry: Any, cap: int) -> None:
    everything, _ = listing(registry, 1000, 1000)
    assert everything is not None
    page = math.ceil(len(everything) / (cap + 1))  # cap + 1 pages
    tags, asked = listing(registry, page, cap)
    assert tags is None and asked == cap
