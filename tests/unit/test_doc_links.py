"""Every relative link of README.md, CONTRIBUTING.md and docs/**/*.md resolves: the file or
directory exists in the repository, and an anchor (``#heading``) names a heading of the page
it points into, as GitHub spells heading anchors (issue 33: the README's sections moved to
docs/, and a moved section must not leave a dead link behind)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^ *(```|~~~).*?^ *\1", re.S | re.M)
_CODE = re.compile(r"(`+).*?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without fenced blocks and code spans (a link-like string in code is code)."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but ``-`` and
    ``_`` removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    return _LINK.findall(prose(page.read_text(encoding="utf-8")))


def relative_links() -> list[tuple[str, Path, str]]:
    out = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
                continue
            out.append((f"{page.relative_to(ROOT)} -> {target}", page, target))
    return out


LINKS = relative_links()


def test_the_pages_have_relative_links_to_check() -> None:
    assert len(LINKS) > 50
    assert any("#" in target for _, _, target in LINKS)


@pytest.mark.parametrize(("where", "page", "target"), LINKS, ids=[link[0] for link in LINKS])
def test_every_relative_link_resolves(where: str, page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{where}: no such file"
    assert dest == ROOT or ROOT in dest.parents, f"{where}: outside the repository"
    if anchor:
        assert dest.suffix == ".md", f"{where}: an anchor into a file that is not markdown"
        assert anchor in anchors(dest), f"{where}: no heading with that anchor"


def test_slugs_follow_githubs_rules() -> None:
    assert slug("The job log and every string from outside (issue 31)") == (
        "the-job-log-and-every-string-from-outside-issue-31"
    )
    assert slug("Security model of `pr-rocm.yml`") == "security-model-of-pr-rocmyml"
    assert slug("One escaping function: `rocmenv.escape.shown`") == (
        "one-escaping-function-rocmenvescapeshown"
    )
    assert slug("`rocmenv inspect`, `rocmenv diff`, `drift --inspect`") == (
        "rocmenv-inspect-rocmenv-diff-drift---inspect"
    )


def test_a_dead_link_and_a_dead_anchor_are_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](missing.md) [b](#title) [c](#nope) `[d](code.md)`\n")
    assert links(page) == ["missing.md", "#title", "#nope"]
    assert "title" in anchors(page) and "nope" not in anchors(page)
